"""CI's metric regression catches a real regression (issue 49): the committed reference of the regression
preset (shipped networks, 64 inputs per task) with its per-cell tolerances, a planted regression on one
calibrated row fails naming the cell, an untouched run passes, and tolerances older than their reference fail."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from vcebench.cli import main
from vcebench.config.load import load_config
from vcebench.core.errors import UserError
from vcebench.report.regression import CPU_DRIFT, check_current, reference_sha256
from vcebench.steps.regression import regression

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "results/reference/regression"
PRESET = ROOT / "config/presets/regression.yaml"
TASKS = ["synthfaces_smile", "synthfaces_age", "synthxray_pacemaker"]


@pytest.fixture(scope="module")
def cfg():
    return load_config([str(ROOT / "config/config.yaml"), str(PRESET)])


@pytest.fixture
def run(tmp_path):
    """An untouched copy of the reference tables and of each row's per-input flips, as the regression run
    would write them (the flips in its counterfactuals.npz)."""
    out = tmp_path / "results"
    out.mkdir()
    for t in TASKS:
        shutil.copyfile(REF / f"{t}.csv", out / f"{t}.csv")
        for m, flips in json.loads((REF / f"{t}_flips.json").read_text()).items():
            (out / t / m).mkdir(parents=True)
            np.savez(out / t / m / "counterfactuals.npz", sample_id=np.array([int(i) for i in flips]),
                     flipped=np.array(list(flips.values()), bool))
    return out


def _plant(out: Path, task: str, method: str, metric: str, change) -> tuple[float, float]:
    df = pd.read_csv(out / f"{task}.csv")
    row = df["method"] == method
    before = float(df.loc[row, metric].iloc[0])
    df.loc[row, metric] = change(before)
    df.to_csv(out / f"{task}.csv", index=False)
    return before, float(df.loc[row, metric].iloc[0])


def _check(cfg, out: Path, strict: bool = False):
    """The seeds' band (`--mode seeds`): these tests plant on the tables (the paired mode's are
    tests/test_regression_paired.py's and tests/test_regression_records.py's)."""
    return regression(cfg, REF, TASKS, out, out, "test CPU", strict=strict, mode="seeds")


def test_the_tolerances_are_current_and_name_their_commit_and_networks(cfg):
    tol = yaml.safe_load((REF / "tolerances.yaml").read_text())
    derived = tol["derived"]
    assert check_current(tol, REF) is None, "tolerances older than the reference: `make reference` (docs/ci.md)"
    assert derived["reference_sha256"] == reference_sha256(REF, TASKS)
    assert derived["networks"] == cfg["networks"] == "networks/ref1" and len(derived["networks_sha256"]) == 64
    assert derived["commit"] and derived["n"] == cfg["n_eval"] and len(derived["seeds"]) >= 3
    assert tol["cpu_drift"] == CPU_DRIFT
    assert set(derived["tasks"]) == set(TASKS) and "synthfaces_smile" in tol["cells"]
    # a task without its seed spread yet is named, and held to the CPU-kind drift (docs/ci.md)
    assert sorted(set(TASKS) - set(tol["cells"])) == sorted(derived.get("unseeded_tasks", []))
    for t in tol["cells"]:
        assert set(cfg["methods"]) <= set(tol["cells"][t])  # every row guarded, each cell its own number


def test_the_truth_row_flips_nearly_every_input_on_the_shipped_networks():
    for t in TASKS:
        truth = pd.read_csv(REF / f"{t}.csv").set_index("method").loc["truth"]
        assert truth["FR"] >= 95.0, (t, truth["FR"])  # a comparison on networks that work


def test_an_untouched_run_passes_also_strictly(cfg, run):
    text, failures, _ = _check(cfg, run)
    assert not failures and "no regression" in text
    _, failures, _ = _check(cfg, run, strict=True)
    assert not failures


WORSE = {"FR": -1, "FR_oracle": -1, "FID": 1, "nfe_per_cf": 1}  # the direction a regression moves each cell


@pytest.mark.parametrize("method,metric", [(m, c) for m in ("dime", "fire") for c in WORSE])
def test_a_planted_regression_past_its_cells_band_fails_naming_the_cell(cfg, run, method, metric):
    """A cell moved the bad way by 1.2 x its own band fails, alone and named; by 0.8 x it passes. The band is the
    cell's spread over the seeds, so how large a change this mode catches is the reference's (docs/ci.md's detection
    table, e.g. DiME's smile FR_oracle band 20 points): the mode for changes that move the random draws. CI's
    paired mode catches far smaller ones (tests/test_regression_paired.py, tests/test_regression_records.py)."""
    tol = yaml.safe_load((REF / "tolerances.yaml").read_text())["cells"]["synthfaces_smile"][method][metric]
    before, _ = _plant(run, "synthfaces_smile", method, metric, lambda v: v + WORSE[metric] * 0.8 * tol)
    assert not _check(cfg, run)[1]
    _plant(run, "synthfaces_smile", method, metric, lambda v: before + WORSE[metric] * 1.2 * tol)
    text, failures, _ = _check(cfg, run)
    assert [(f["task"], f["method"], f["metric"], f["status"]) for f in failures] == [
        ("synthfaces_smile", method, metric, "REGRESSED")]
    assert f"| synthfaces_smile | {method} | {metric} |" in text


def test_the_cli_exits_1_and_prints_the_failing_cell(run, capsys):
    _plant(run, "synthfaces_smile", "fire", "FR", lambda v: v - 10.0)
    args = ["report", "regression", "--reference", str(REF), "--results", str(run), "--out-dir", str(run),
            "--out", str(run / "regression.md"), "--config", str(ROOT / "config/config.yaml"), "--config",
            str(PRESET), "--mode", "seeds"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "| synthfaces_smile | fire | FR |" in err and "REGRESSED" in err
    assert "1 cell(s) regressed past tolerance" in (run / "regression.md").read_text()


def test_strict_fails_on_a_change_the_tolerances_let_pass(cfg, run):
    """A move past the CPU-kind drift but inside the seed band: the normal check passes, --strict fails, and
    strict catches an improvement too (a behaviour-preserving change moves nothing)."""
    tol = yaml.safe_load((REF / "tolerances.yaml").read_text())["cells"]["synthfaces_smile"]["fire"]
    before, _ = _plant(run, "synthfaces_smile", "fire", "FID", lambda v: v * (1 + 2 * CPU_DRIFT["rel"]))
    assert tol["FID"] > 2 * CPU_DRIFT["rel"] * before
    assert not _check(cfg, run)[1]
    assert [(f["metric"], f["status"]) for f in _check(cfg, run, strict=True)[1]] == [("FID", "CHANGED")]
    _plant(run, "synthfaces_smile", "fire", "FID", lambda v: before)
    _plant(run, "synthfaces_smile", "dime", "FR_oracle", lambda v: v + 1.5625)  # one input better
    assert not _check(cfg, run)[1]
    assert [(f["method"], f["metric"]) for f in _check(cfg, run, strict=True)[1]] == [("dime", "FR_oracle")]


def test_tolerances_older_than_the_reference_are_refused(cfg, tmp_path, run):
    """Editing the reference (a planted FR -10 on FiRe's smile row, or a re-accept) without deriving its
    tolerances again: the regression refuses with one line instead of comparing."""
    ref = tmp_path / "ref"
    shutil.copytree(REF, ref)
    _plant(ref, "synthfaces_smile", "fire", "FR", lambda v: v - 10.0)
    why = check_current(yaml.safe_load((ref / "tolerances.yaml").read_text()), ref)
    assert "older than the reference: synthfaces_smile.csv changed" in why
    with pytest.raises(UserError, match="older than the reference"):
        regression(cfg, ref, TASKS, run, run, "test CPU", mode="seeds")


def test_the_paired_mode_refuses_a_reference_without_records_in_one_line(cfg, tmp_path, run, capsys):
    """The default (paired) mode on a reference with no per-input records (accepted before they existed): one
    line telling the user to re-accept, exit status 2, instead of a comparison."""
    ref = tmp_path / "ref"
    shutil.copytree(REF, ref, ignore=shutil.ignore_patterns("samples"))
    with pytest.raises(UserError, match=r"no per-input records .* re-accept it \(`make reference`"):
        regression(cfg, ref, TASKS, run, run, "test CPU")
    args = ["report", "regression", "--reference", str(ref), "--results", str(run), "--out-dir", str(run),
            "--config", str(ROOT / "config/config.yaml"), "--config", str(PRESET)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "vcebench report accept" in err
