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


def test_the_paired_verdicts_of_two_sets_compared_pair_by_pair():
    """A pair separated on both sets the same way survives, the other way is reversed, not separated on the
    second is lost (named winner>loser); separated on the second only is new."""
    from vcebench.report.network_sets import surviving_markdown, surviving_pairs

    def frame(rows):
        return pd.DataFrame([{"column": c, "a": a, "b": b, "separated": s, "better": w} for c, a, b, s, w in rows])

    a = frame([("FID", "fire", "dime", True, "fire"), ("FID", "fire", "ace", True, "ace"),
               ("FID", "dime", "ace", True, "dime"), ("FID", "x", "y", False, None),
               ("FR", "fire", "dime", False, None)])
    b = frame([("FID", "fire", "dime", True, "fire"), ("FID", "fire", "ace", True, "fire"),
               ("FID", "dime", "ace", False, None), ("FID", "x", "y", True, "y"),
               ("FR", "fire", "dime", True, "dime")])
    got = {r["column"]: r for r in surviving_pairs(a, b)}
    assert got["FID"] == {"column": "FID", "pairs": 4, "separated_a": 3, "survived": 1, "reversed": 1,
                          "lost": ["dime>ace"], "new": 1}
    assert got["FR"]["separated_a"] == 0 and got["FR"]["new"] == 1 and got["FR"]["lost"] == []
    md = "\n".join(surviving_markdown(list(got.values()), "ref1", "ref2"))
    assert "| FID | 4 | 3 | 1 | 1 | dime>ace | 1 |" in md
    assert surviving_markdown([], "ref1", "ref2") == []
