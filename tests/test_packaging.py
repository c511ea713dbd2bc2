"""The wheel: built from the project's files (`pip wheel`, the venv's setuptools, no network), it holds every module
of the three packages, the default configuration and the console script; unpacked outside the repository it runs
`vcebench --help` and the Python API (torch from this environment: a fresh venv would download it again)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vcebench", "methods", "metrics")
SOURCES = ("pyproject.toml", "README.md", "config", *PACKAGES)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir()
                                        else {}))
    out = tmp_path_factory.mktemp("whl")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("vcebench-*.whl")
    return whl


def test_the_wheel_holds_the_packages_the_config_and_the_script(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert modules <= names, sorted(modules - names)[:5]
    data = f"{wheel.name.split('-py3')[0]}.data/data/share/vcebench/config/"
    config = {"config.yaml", "schema.yaml", "hub.yaml",
              *(f"presets/{p.name}" for p in (ROOT / "config" / "presets").glob("*.yaml")),
              *(f"tuned/{p.name}" for p in (ROOT / "config" / "tuned").glob("*.yaml"))}
    assert {data + c for c in config} <= names
    assert not {n for n in names if n.startswith(("tests/", "networks/", "training-states/", "results/"))}
    z = zipfile.ZipFile(wheel)
    info = wheel.name.split("-py3")[0] + ".dist-info/"
    assert "vcebench = vcebench.cli:main" in z.read(info + "entry_points.txt").decode()
    meta = z.read(info + "METADATA").decode()
    assert "Requires-Dist: huggingface_hub" in meta and "Provides-Extra: slurm" in meta


def test_the_unpacked_wheel_runs_outside_the_repository(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    config = next(site.glob("*.data/data/share/vcebench/config")) / "config.yaml"
    code = f"""
import sys, torch, vcebench
assert vcebench.__file__.startswith({str(site)!r}), vcebench.__file__
from vcebench.cli import main
try:
    main(["--help"])
except SystemExit as e:
    assert e.code == 0
clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
x = torch.rand(5, 3, 8, 8) * 2 - 1
cfs = vcebench.explain(x, clf, "pixel")
s = vcebench.evaluate(x, cfs, "synthxray_pacemaker", classifier=clf, metrics=["FR", "L1"], config={str(config)!r})
print("FR", s["metrics"]["FR"], s["intervals"]["FR"])
"""
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "explain" in r.stdout and "FR " in r.stdout
