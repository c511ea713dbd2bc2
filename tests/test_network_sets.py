"""Two network sets' tables compared (vcebench/report/network_sets.py)."""

from __future__ import annotations

import pandas as pd

from vcebench.report.network_sets import compare, kendall_tau, to_markdown


def _table(fid, fr):
    rows = []
    for m, f, r in zip(["fire", "dime", "maskdime"], fid, fr):
        rows.append({"method": m, "n": 100, "FID": f, "FID_lo": f * 0.8, "FID_hi": f * 1.2,
                     "FR": r, "FR_lo": r - 5, "FR_hi": r + 5, "sec_per_cf": 1.0})
    return pd.DataFrame(rows)


def test_kendall_tau():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert kendall_tau([1], [1]) is None


def test_cells_inside_the_first_sets_interval_and_the_order_of_methods():
    a = _table([1.0, 10.0, 2.0], [100, 90, 80])
    b = _table([1.1, 30.0, 0.5], [98, 91, 80])  # dime FID outside; maskdime becomes the best FID
    r = compare(a, b, {"FID": False, "FR": True})
    inside = {(c["method"], c["metric"]): c["inside"] for c in r["cells"]}
    assert inside[("fire", "FID")] and not inside[("dime", "FID")] and not inside[("maskdime", "FID")]
    assert all(inside[(m, "FR")] for m in ("fire", "dime", "maskdime"))
    assert "sec_per_cf" not in {c["metric"] for c in r["cells"]}
    assert r["n_cells"] == 6 and r["n_inside"] == 4
    assert r["ranks"]["FID"]["best_a"] == "fire" and r["ranks"]["FID"]["best_b"] == "maskdime"
    assert not r["ranks"]["FID"]["same_best"] and r["ranks"]["FR"]["same_best"]
    md = to_markdown("t", r, "ref1", "ref2")
    assert "4 of 6 cells" in md and "| dime | FID |" in md and "**no**" in md
