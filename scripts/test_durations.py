"""The seconds each test file takes, from a pytest JUnit report: `tests/durations.json`, which tests/conftest.py
reads to hand the longest files to `make test`'s workers first (longest processing time first: the workers
finish together instead of one waiting on a long file it was handed last).

    .venv/bin/python -m pytest -q -m "not slow" -n 3 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/junit.xml
    .venv/bin/python scripts/test_durations.py /tmp/junit.xml --out tests/durations.json

Only the order of the files changes; a file missing from the list runs after the listed ones, in its usual place.
"""

from __future__ import annotations

import argparse
import collections
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def file_seconds(junit: Path) -> dict[str, float]:
    """Test file (``tests/<name>.py``) -> the seconds of its tests (setup, call and teardown, as JUnit sums them)."""
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        if len(module) >= 2 and module[0] == "tests":
            seconds[f"tests/{module[1]}.py"] += float(case.get("time") or 0)
    return {f: round(s, 1) for f, s in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", type=Path, help="a pytest --junitxml report of the suite")
    ap.add_argument("--out", type=Path, default=Path("tests/durations.json"))
    args = ap.parse_args()
    args.out.write_text(json.dumps(file_seconds(args.junit), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
