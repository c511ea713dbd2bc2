"""Compare two result folders' <task>.csv cell by cell, timings (sec_per_cf, peak_mem_mb) aside.

    python scripts/compare_tables.py results/reference/default <clone>/results [task ...]

Prints the first differing cells and "<d> of <n> non-timing cells differ" (exit 1 when d > 0): the check that a
fresh clone reproduces a committed snapshot (docs/results.md, "Identical tables on every machine").
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

TIMING = ("sec_per_cf", "peak_mem_mb")
TASKS = ("synthfaces_smile", "synthfaces_age", "synthxray_pacemaker")


def same(u, v) -> bool:
    if isinstance(u, float) and isinstance(v, float):
        return (math.isnan(u) and math.isnan(v)) or math.isclose(u, v, rel_tol=1e-5, abs_tol=0.0)
    return u == v or (pd.isna(u) and pd.isna(v))


def main(a: Path, b: Path, tasks: list[str]) -> int:
    total = differ = 0
    for task in tasks:
        x, y = pd.read_csv(a / f"{task}.csv"), pd.read_csv(b / f"{task}.csv")
        if list(x["method"]) != list(y["method"]):
            print(f"{task}: other rows: {list(x['method'])} vs {list(y['method'])}")
            return 1
        for extra in sorted(set(x.columns) ^ set(y.columns)):
            print(f"{task}: column {extra} only in one folder")
        for c in [c for c in x.columns if c in y.columns and not c.startswith(TIMING)]:
            for method, u, v in zip(x["method"], x[c], y[c]):
                total += 1
                if not same(u, v):
                    differ += 1
                    if differ <= 20:
                        print(f"{task} {method} {c}: {u} vs {v}")
    print(f"{differ} of {total} non-timing cells differ")
    return int(differ > 0)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:] or list(TASKS)))
