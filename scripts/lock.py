"""Write requirements.lock: every package `pip install -e '.[dev]'` needs, at the tested versions, with hashes.

    .venv/bin/pip freeze --exclude-editable > /tmp/pins.txt
    python scripts/lock.py --pins /tmp/pins.txt [--out requirements.lock]

pyproject.toml's ``dependencies`` and its ``[dev]`` extra are resolved by pip (``pip install --dry-run
--ignore-installed --report``, in whatever environment runs this script) with ``--pins`` (a ``pip freeze`` of the
tested environment) as constraints, so the lock holds the tested versions and every transitive dependency, each
with the sha256 of the file pip chose for this platform (Python 3.11, x86_64 Linux: torch's CUDA build pulls
the nvidia-* wheels). ``make install`` installs it with ``pip install --require-hashes --no-deps``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
HEADER = """\
# requirements.lock: the tested versions of vcebench's dependencies and their [dev] extra, with hashes.
# Made by `python scripts/lock.py --pins <pip freeze of the tested environment>` ({python}, {platform});
# install: pip install --require-hashes --no-deps -r requirements.lock && pip install --no-deps -e '.[dev]'
# (`make install`). Valid for CPython 3.11 on x86_64 Linux only: torch {torch} is its CUDA build, whose
# nvidia-* wheels are listed. pyproject.toml keeps the ranges a wheel of vcebench accepts.
"""


def project_requirements(pyproject: Path = ROOT / "pyproject.toml", extras: tuple[str, ...] = ("dev",)) -> list[str]:
    """The ``dependencies`` of ``pyproject`` and those of its optional ``extras``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project.get("optional-dependencies", {}).get(extra, [])
    return reqs


def resolve(requirements: list[str], pins: Path) -> list[dict]:
    """pip's installation report (its ``install`` list) of ``requirements`` under the constraints ``pins``."""
    with tempfile.TemporaryDirectory() as tmp:
        req, report = Path(tmp) / "requirements.in", Path(tmp) / "report.json"
        req.write_text("\n".join(requirements) + "\n")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
                        "--report", str(report), "-r", str(req), "-c", str(pins)], check=True)
        return json.loads(report.read_text())["install"]


def lock_lines(installs: list[dict]) -> list[str]:
    """``name==version --hash=sha256:...`` per resolved package, sorted by name; a package without a hash
    (a local folder, a VCS checkout) is an error."""
    lines = []
    for item in sorted(installs, key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        sha = ((item.get("download_info") or {}).get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not sha:
            raise SystemExit(f"{name} {version}: pip reports no sha256 (not an archive): cannot hash-pin it")
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{sha}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pins", required=True, type=Path, help="pip freeze of the tested environment (constraints)")
    p.add_argument("--out", default=ROOT / "requirements.lock", type=Path)
    args = p.parse_args(argv)
    installs = resolve(project_requirements(), args.pins)
    torch = next((i["metadata"]["version"] for i in installs if i["metadata"]["name"] == "torch"), "?")
    import platform

    head = HEADER.format(python=f"Python {platform.python_version()}", platform=f"{sys.platform} "
                         f"{platform.machine()}", torch=torch)
    args.out.write_text(head + "\n".join(lock_lines(installs)) + "\n")
    print(f"{args.out}: {len(installs)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
