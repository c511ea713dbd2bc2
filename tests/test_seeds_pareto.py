"""The seed spread, the tolerances derived from it, and the Pareto front (issue 12)."""

import math

import numpy as np
import pandas as pd
import pytest

from vcebench.report import seeds


def _tables():
    # three seeds, two methods; FR moves by one input, FID by ~10 %
    return {s: pd.DataFrame({"method": ["fire", "dime", "input"], "n": [16, 16, 16],
                             "FR": [80.0 + 6.25 * (s == 1), 100.0, 0.0], "FID": [1.0 + 0.1 * s, 10.0 - s, np.nan],
                             "FR_lo": [70.0, 90.0, 0.0], "sec_per_cf": [0.1 * (s + 1), 1.0, 0.0]})
            for s in (0, 1, 2)}


def test_seed_table_mean_sd_min_max():
    t = seeds.seed_table(_tables()).set_index(["method", "metric"])
    fr = t.loc[("fire", "FR")]
    assert fr["n_seeds"] == 3 and fr["mean"] == pytest.approx(80 + 6.25 / 3)
    assert fr["sd"] == pytest.approx(np.std([80, 86.25, 80], ddof=1)) and fr["max"] == 86.25
    assert ("input", "FID") not in t.index and ("fire", "FR_lo") not in t.index  # no values; intervals skipped


def test_each_cell_gets_its_own_tolerance_from_its_spread_with_floor_and_cpu_drift():
    spread = seeds.seed_table(_tables())
    drift = {"exact": ["FR"], "rel": 0.018}
    cells = seeds.derive_cell_tolerances({"t": spread}, floors={"FR": 6.25, "FID": 0.0}, z=3.0, drift=drift)["t"]
    sd_fr = np.std([80, 86.25, 80], ddof=1)
    assert cells["fire"]["FR"] == pytest.approx(3 * math.sqrt(2) * sd_fr, rel=1e-3)  # its own spread, not pooled
    assert cells["dime"]["FR"] == 6.25  # never moved: the floor (one input), not fire's spread
    sd_fid = np.std([10.0, 9.0, 8.0], ddof=1)
    assert cells["dime"]["FID"] == pytest.approx(3 * math.sqrt(2) * sd_fid, rel=1e-3)
    assert cells["fire"]["FID"] == pytest.approx(3 * math.sqrt(2) * 0.1, rel=1e-3)
    assert "sec_per_cf" not in cells["fire"]  # machine-dependent
    # a metric that never moves keeps the CPU-kind drift: 0 for an exact one, a share of the value otherwise
    flat = spread.assign(sd=0.0)
    still = seeds.derive_cell_tolerances({"t": flat}, floors={}, z=3.0, drift=drift)["t"]
    assert still["dime"]["FR"] == 0.0 and still["dime"]["FID"] == pytest.approx(0.018 * 9.0, rel=1e-3)


def test_cell_tolerances_feed_the_regression_check():
    from vcebench import report

    cells = seeds.derive_cell_tolerances({"t": seeds.seed_table(_tables())}, floors={"FR": 6.25}, z=3.0,
                                         drift={"exact": ["FR"], "rel": 0.018})
    tol = {"cells": cells}
    ref = _tables()[0]
    cur = ref.copy()
    cur.loc[cur.method == "fire", "FR"] -= cells["t"]["fire"]["FR"] * 1.01
    rows, fails = report.regression_check(cur, ref, tol, {"FR": True, "FID": False}, "t")
    assert [(f["method"], f["metric"]) for f in fails] == [("fire", "FR")]
    cur.loc[cur.method == "fire", "FR"] = ref.loc[ref.method == "fire", "FR"] - cells["t"]["fire"]["FR"] * 0.99
    assert not report.regression_check(cur, ref, tol, {"FR": True, "FID": False}, "t")[1]


def test_pareto_front_keeps_only_non_dominated_points():
    from vcebench.report import pareto_front

    cost = np.array([1.0, 2.0, 3.0, 2.5, np.nan, 0.5])
    fid = np.array([5.0, 3.0, 1.0, 4.0, 0.1, 9.0])  # lower is better
    assert pareto_front(cost, fid, higher=False).tolist() == [True, True, True, False, False, True]
    fr = np.array([50.0, 80.0, 90.0, 85.0, 99.0, 10.0])  # higher is better
    assert pareto_front(cost, fr, higher=True).tolist() == [True, True, True, True, False, True]
    # a tie in both costs nothing: neither dominates the other
    assert pareto_front(np.array([1.0, 1.0]), np.array([2.0, 2.0]), False).tolist() == [True, True]


def test_pareto_methods_and_figures(tmp_path):
    from vcebench.config.load import load_config
    from vcebench.protocol.resolve import job_n_eval
    from vcebench.report import pareto_figures
    from vcebench.workflow import pareto_methods

    cfg = load_config()
    cfg["pareto"]["n_eval"] = 20
    # a smaller n for the Pareto points: the default point is `<method>_base` on those inputs, passed as
    # the n_eval of the resolved settings of explain / evaluate; the table rows keep n_eval
    assert ("fire_base", "fire", "default") in pareto_methods(cfg)
    assert job_n_eval(cfg, "fire_K3") == 20 and job_n_eval(cfg, "fire_base") == 20
    assert job_n_eval(cfg, "fire") == cfg["n_eval"] and job_n_eval(cfg, "fire_paper") == cfg["n_eval"]
    # a Pareto point that is also a paper-table row (Table 5's K5) is that row: the table's n
    assert "fire_K5" in cfg["paper_methods"] and "fire_K5" in {m for m, _, _ in pareto_methods(cfg)}
    assert job_n_eval(cfg, "fire_K5") == cfg["n_eval"]
    cfg["pareto"]["n_eval"] = cfg["n_eval"]  # not below n_eval: the table rows are the default points
    rows = pareto_methods(cfg)
    assert job_n_eval(cfg, "fire_K3") == cfg["n_eval"]
    names = [m for m, _, _ in rows]
    assert ("fire", "fire", "default") in rows and ("fire_K3", "fire", "budget") in rows
    assert ("dime_g30", "dime", "budget") in rows and ("maskdime_snr_p2", "maskdime", "snr") in rows
    assert len(names) == len(set(names))
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"method": names, "base": [b for _, b, _ in rows], "sweep": [s for _, _, s in rows],
                       "tflops_per_cf": rng.uniform(1e-4, 1e-2, len(rows)),
                       "sec_per_cf": rng.uniform(0.01, 1, len(rows)),
                       "KID": rng.uniform(0, 1, len(rows)), "FVA": rng.uniform(50, 100, len(rows)),
                       "FR_oracle": rng.uniform(50, 100, len(rows)), "GT_L1_region": rng.uniform(0, 0.3, len(rows)),
                       "log_snr": rng.uniform(0, 5, len(rows))})
    pareto_figures(tmp_path / "p.png", tmp_path / "s.png", df, {"KID": False, "FVA": True, "FR_oracle": True,
                                                                "GT_L1_region": False}, title="t")
    assert (tmp_path / "p.png").stat().st_size > 10_000 and (tmp_path / "s.png").stat().st_size > 5_000


def test_a_task_without_a_seed_spread_is_held_to_the_cpu_kind_drift():
    """Fail closed: a task the per-cell file has no tolerances for is compared within the drift only (never
    left unchecked); machine-dependent columns stay unchecked."""
    from vcebench import report
    from vcebench.report.regression import unseeded_tasks

    drift = {"exact": ["FR"], "rel": 0.018}
    tol = {"cells": seeds.derive_cell_tolerances({"t": seeds.seed_table(_tables())}, {"FR": 6.25}, 3.0, drift),
           "cpu_drift": drift}
    assert unseeded_tasks(tol, ["t", "u"]) == ["u"]
    ref = _tables()[0]
    higher = {"FR": True, "FID": False, "sec_per_cf": False}
    cur = ref.copy()
    cur.loc[cur.method == "fire", "FID"] *= 1.05  # inside fire's seed band on t, past the drift
    cur.loc[cur.method == "dime", "sec_per_cf"] *= 3  # the machine's: never checked
    assert not report.regression_check(cur, ref, tol, higher, "t")[1]
    fails = report.regression_check(cur, ref, tol, higher, "u")[1]
    assert [(f["method"], f["metric"]) for f in fails] == [("fire", "FID")]
