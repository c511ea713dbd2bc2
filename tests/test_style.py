"""The code passes the project's ruff rules (pyproject.toml), including E303: no run of 3+ blank lines."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
pytestmark = pytest.mark.skipif(not Path(RUFF).exists(), reason="ruff is not installed (pip install -e '.[dev]')")


def ruff(*paths: str | Path) -> subprocess.CompletedProcess:
    cmd = [RUFF, "check", "--no-cache", "--output-format", "concise", "--config", str(ROOT / "pyproject.toml")]
    return subprocess.run([*cmd, *map(str, paths)], cwd=ROOT, capture_output=True, text=True)


def test_the_code_passes_ruff():
    r = ruff("vcebench", "methods", "metrics", "tests", "scripts")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_sees_a_blank_line_scar(tmp_path):
    bad = tmp_path / "scar.py"
    bad.write_text("def f():\n    x = 1\n\n\n\n    return x\n")
    r = ruff(bad)
    assert r.returncode == 1 and ("E303" in r.stdout or "too-many-blank-lines" in r.stdout), r.stdout
