"""The paired check of the flip rate: input by input against the reference's outcomes, it sees a 10-point FR
drop on any row, where a seed band of the FR cell (up to 13.8 points at n = 64) would not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vcebench.report.regression import PAIRED_MAX_LOST, paired_flip_check, read_flips

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference" / "regression"


def _write(results: Path, task: str, method: str, flipped: list[int]) -> None:
    d = results / task / method
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "counterfactuals.npz", sample_id=np.arange(len(flipped)) + 100, flipped=np.array(flipped, bool))


def test_read_flips_pairs_by_sample_id(tmp_path):
    _write(tmp_path, "t", "fire", [1, 0, 1])
    assert read_flips(tmp_path, "t", ["fire", "absent"]) == {"fire": {"100": 1, "101": 0, "102": 1}}


def test_a_ten_point_drop_fails_and_an_untouched_run_passes():
    ref = {"fire": {str(i): 1 for i in range(64)}, "dime": {str(i): int(i % 2 == 0) for i in range(64)}}
    rows, fails = paired_flip_check(ref, json.loads(json.dumps(ref)), "synthfaces_age")
    assert not fails and {r["status"] for r in rows} == {"ok"}
    drop = json.loads(json.dumps(ref))
    for i in range(7):  # 7 of 64 inputs: FR -10.9 points on DiME's row only
        drop["dime"][str(2 * i)] = 0
    rows, fails = paired_flip_check(ref, drop, "synthfaces_age")
    assert [(f["method"], f["metric"], f["status"], f["delta"]) for f in fails] == [
        ("dime", "FR_paired", "REGRESSED", -7.0)]


def test_one_input_is_the_floor_and_a_shuffle_is_no_loss():
    ref = {"fire": {str(i): int(i < 32) for i in range(64)}}
    one = json.loads(json.dumps(ref))
    one["fire"]["0"] = 0
    assert not paired_flip_check(ref, one, "t")[1] and PAIRED_MAX_LOST == 1
    shuffle = json.loads(json.dumps(ref))
    for i in range(5):
        shuffle["fire"][str(i)], shuffle["fire"][str(40 + i)] = 0, 1
    assert not paired_flip_check(ref, shuffle, "t")[1]
    assert [f["status"] for f in paired_flip_check(ref, one, "t", strict=True)[1]] == ["CHANGED"]
    assert [f["status"] for f in paired_flip_check(ref, {}, "t")[1]] == ["MISSING"]


def test_the_committed_reference_has_each_rows_per_input_flips():
    """The regression reference holds the per-input outcomes of every row of its tables, and a planted
    10-point drop on FiRe's smile row is caught by the check, naming FiRe."""
    import pandas as pd

    for task in ("synthfaces_smile", "synthfaces_age", "synthxray_pacemaker"):
        flips = json.loads((REF / f"{task}_flips.json").read_text())
        table = pd.read_csv(REF / f"{task}.csv").set_index("method")
        for m in table.index:
            if m == "truth" or m not in flips:
                continue
            assert len(flips[m]) == table.at[m, "n"] == 64
            # the method's own record of each flip; the table's FR re-classifies the stored uint8 CF, which
            # changes the decision of at most an input here (ACE on pacemaker)
            assert abs(100 * np.mean(list(flips[m].values())) - table.at[m, "FR"]) <= 100 / 64 + 1e-9, (task, m)
    ref = json.loads((REF / "synthfaces_smile_flips.json").read_text())
    planted = json.loads(json.dumps(ref))
    lost = [i for i, f in planted["fire"].items() if f][:7]
    for i in lost:
        planted["fire"][i] = 0
    fails = paired_flip_check(ref, planted, "synthfaces_smile")[1]
    assert [f["method"] for f in fails] == ["fire"]
