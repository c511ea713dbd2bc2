"""The paired regression on per-input records (vcebench/report/paired.py): changes of fake records are caught
naming their row and metric, an unchanged rerun and one within the CPU-kind drift pass, and the rates' rule is
"more than one input net" (one input lost passes, two fail). The planted faults end to end (a run's
counterfactuals degraded and evaluated again): tests/test_regression_plants.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vcebench import registry
from vcebench.report import paired
from vcebench.report.regression import CPU_DRIFT, PAIRED_MAX_LOST

N, D = 64, 16
HIGHER = registry.column_directions()
REL = CPU_DRIFT["rel"]


def fake_row(seed: int, n: int = N, d: int = D, fr: np.ndarray | None = None,
             ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A row's record in the evaluate job's schema (vcebench-samples/1): rates, means (MNAC over the flipped
    inputs only, NaN elsewhere), CF feature rows near the originals of :func:`fake_originals`, replicates."""
    rng = np.random.default_rng(seed)
    ids = np.arange(100, 100 + n, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
    n = len(ids)
    fr = (rng.random(n) < 0.9).astype(float) if fr is None else np.asarray(fr, float)
    oracle = fr * (rng.random(n) < 0.85)
    o = fake_originals(n, d, ids)["features"]
    return {"ids": ids, "schema": np.array(paired.SCHEMA),
            "q/FR": fr, "q/FR_oracle": oracle, "q/FVA": fr * (rng.random(n) < 0.95),
            "q/L1": rng.lognormal(-3, 0.5, n), "q/GT_L1": rng.lognormal(-2, 0.3, n),
            "q/MNAC": np.where(fr == 1, rng.poisson(2, n) + 1.0, np.nan), "subset/MNAC": fr == 1,
            "features/fid": (o + 0.4 + 0.6 * rng.standard_normal((n, d))).astype(np.float32),
            "boot/FR": rng.random(20), "boot_counts_sha256": np.array("0" * 64)}


def fake_originals(n: int = N, d: int = D, ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The originals' feature rows of the inputs (what the task's fid_ref.npz holds)."""
    f = np.random.default_rng(1234).standard_normal((n, d)).astype(np.float32)
    ids = np.arange(100, 100 + n, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
    return {"sample_id": ids, "features": f}


def check(ref: dict, cur: dict, strict: bool = False, features=("FID", "KID", "sFID")):
    orig = fake_originals(len(next(iter(ref.values()))["ids"]))
    return paired.paired_check("t", ref, cur, (orig, orig), HIGHER, {m: list(features) for m in ref}, REL,
                               PAIRED_MAX_LOST, [0, 1], strict=strict)


def failing(fails: list[dict]) -> list[tuple[str, str, str]]:
    return sorted((f["method"], f["metric"], f["status"]) for f in fails)


@pytest.fixture(scope="module")
def ref():
    return {"fire": fake_row(0), "dime": fake_row(1)}


def test_an_unchanged_rerun_and_one_within_the_cpu_drift_pass(ref):
    rows, fails = check(ref, {m: dict(r) for m, r in ref.items()})
    assert not fails and {r["status"] for r in rows} == {"ok"}
    got = {(r["method"], r["metric"]) for r in rows}
    assert {("fire", c) for c in ("FR", "FR_oracle", "FVA", "L1", "GT_L1", "MNAC", "FID", "KID", "sFID")} <= got
    assert not check(ref, {m: dict(r) for m, r in ref.items()}, strict=True, features=("FID",))[1]
    drift = {}
    for m, r in ref.items():  # every per-input mean x 1.01, the feature rows within a 0.1 % jitter
        jitter = 1 + 1e-3 * np.random.default_rng(5).standard_normal(r["features/fid"].shape)
        drift[m] = {k: (v * 1.01 if k in ("q/L1", "q/GT_L1", "q/MNAC") else v) for k, v in r.items()}
        drift[m]["features/fid"] = (r["features/fid"] * jitter).astype(np.float32)
    rows, fails = check(ref, drift)
    assert not fails, failing(fails)
    assert any(r["metric"] == "L1" and r["delta"] > 0 for r in rows)  # it moved, within the band


def test_a_mean_past_the_drift_fails_naming_the_row(ref):
    """L1 x 1.03 on every input (past the 1.8 % band) fails; MNAC lower (better) is an improvement."""
    cur = {m: dict(r) for m, r in ref.items()}
    cur["dime"]["q/L1"] = ref["dime"]["q/L1"] * 1.03
    cur["dime"]["q/MNAC"] = ref["dime"]["q/MNAC"] * 0.9
    rows, fails = check(ref, cur)
    assert failing(fails) == [("dime", "L1", "REGRESSED")]
    assert [r["status"] for r in rows if (r["method"], r["metric"]) == ("dime", "MNAC")] == ["improved"]
    assert failing(check(ref, cur, strict=True)[1]) == [("dime", "L1", "CHANGED"), ("dime", "MNAC", "CHANGED")]


def test_one_input_lost_passes_and_two_fail(ref):
    """The rates' rule, not vacuous on small changes: one oracle success lost passes, two fail; one lost and
    one gained elsewhere is no loss; --strict fails on the one."""
    q = ref["dime"]["q/FR_oracle"]
    wins, losses = np.flatnonzero(q == 1), np.flatnonzero(q == 0)

    def lose(k: int, gain: int = 0) -> dict:
        row = dict(ref["dime"], **{"q/FR_oracle": q.copy()})
        row["q/FR_oracle"][wins[:k]] = 0.0
        row["q/FR_oracle"][losses[:gain]] = 1.0
        return {"fire": ref["fire"], "dime": row}

    assert not check(ref, lose(1), features=())[1]
    assert failing(check(ref, lose(2), features=())[1]) == [("dime", "FR_oracle", "REGRESSED")]
    assert not check(ref, lose(2, gain=1), features=())[1]
    assert failing(check(ref, lose(1), strict=True, features=())[1]) == [("dime", "FR_oracle", "CHANGED")]


def test_a_row_or_an_input_missing_now_fails(ref):
    assert {f["status"] for f in check(ref, {"fire": ref["fire"]})[1]} == {"MISSING"}
    short = {k: (v[:-1] if k != "schema" and np.ndim(v) and len(v) == N else v) for k, v in ref["dime"].items()}
    fails = check(ref, {"fire": ref["fire"], "dime": short})[1]
    assert {f["method"] for f in fails} == {"dime"} and {f["status"] for f in fails} == {"MISSING"}


def test_the_reference_keeps_64_inputs_and_wide_features_as_float16(tmp_path):
    """trim_records: no replicates, the first 64 inputs; D = 600 (> FLOAT16_ABOVE) rows stored as float16, and
    the unchanged float32 rerun still passes (rounded to the reference's dtype before the comparison)."""
    wide = fake_row(3, n=80, d=600)
    kept = paired.trim_records(wide)
    assert len(kept["ids"]) == paired.MAX_INPUTS and kept["features/fid"].dtype == np.float16
    assert not any(k.startswith("boot/") for k in kept) and str(kept["boot_counts_sha256"]) == ""
    np.savez(tmp_path / "r.npz", **kept)
    assert paired.read_records(tmp_path / "r.npz")["q/FR"].shape == (64,)
    orig = fake_originals(80, 600)
    rows, fails = paired.paired_check("t", {"x": kept}, {"x": wide}, (orig, orig), HIGHER, {"x": ["FID"]}, REL,
                                      PAIRED_MAX_LOST, [0])
    assert not fails and any(r["metric"] == "FID" for r in rows)
    np.savez(tmp_path / "bad.npz", **dict(kept, schema=np.array("other/2")))
    with pytest.raises(ValueError, match="reads 'vcebench-samples/1'"):
        paired.read_records(tmp_path / "bad.npz")


# End to end on the committed reference's tables: fake records accepted into a copy of the reference, the
# regression in its default (paired) mode (the plants end to end: tests/test_regression_plants.py).
ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results/reference/regression"
CONFIGS = [str(ROOT / "config/config.yaml"), str(ROOT / "config/presets/regression.yaml")]
TASK = "synthfaces_smile"
RECORDED = ["fire", "dime"]


@pytest.fixture(scope="module")
def accepted(tmp_path_factory):
    """(a regression run of fake records on the reference's smile table, a reference copy that accepted them)."""
    from vcebench.core.io import save_npz
    from vcebench.steps.regression import accept_records

    tmp = tmp_path_factory.mktemp("e2e")
    run, ref = tmp / "results", tmp / "reference"
    # the reference of one CPU kind: without its other kinds' folders (cpu/<kind>/, their own tables and records)
    shutil.copytree(REF, ref, ignore=shutil.ignore_patterns(paired.RECORDS_DIR, "cpu"))
    (run / TASK).mkdir(parents=True)
    shutil.copyfile(REF / f"{TASK}.csv", run / f"{TASK}.csv")
    flips = json.loads((REF / f"{TASK}_flips.json").read_text())
    ids = np.array(sorted(int(i) for i in next(iter(flips.values()))), np.int64)
    save_npz(run / TASK / "fid_ref.npz", **fake_originals(len(ids), D, ids), extractor=np.array("fake"))
    for m, f in flips.items():  # every row's own flips (FR_paired)
        (run / TASK / m).mkdir()
        save_npz(run / TASK / m / "counterfactuals.npz", sample_id=ids, flipped=np.array([f[str(i)] for i in ids]) == 1)
    for k, m in enumerate(RECORDED):  # the other rows have no record: their cells are held to the drift
        fr = np.array([flips[m][str(i)] for i in ids], float)
        save_npz(run / TASK / m / paired.SAMPLES_FILE, **fake_row(10 + k, fr=fr, ids=ids))
    written = accept_records(run, TASK, sorted(p.name for p in (run / TASK).iterdir() if p.is_dir()), ref)
    assert paired.has_records(ref, TASK) and (ref / paired.RECORDS_DIR / TASK / paired.ORIGINALS_FILE) in written
    return run, ref


def test_the_paired_mode_end_to_end_passes_an_unchanged_run(accepted):
    from vcebench.config.load import load_config
    from vcebench.steps.regression import regression

    run, ref = accepted
    text, fails, _ = regression(load_config(CONFIGS), ref, [TASK], run, run, "test CPU")
    assert not fails and "Mode: paired" in text
    assert pd.read_csv(REF / f"{TASK}.csv")["method"].isin(RECORDED).sum() == len(RECORDED)
    assert f"| {TASK} | dime | FR_oracle |" in text and f"| {TASK} | dime | FID |" in text
    assert f"| {TASK} | dime | nfe_per_cf |" in text  # a cell without per-input records: within the drift


def test_detection_md_derives_the_smallest_failing_change_from_the_rule(ref):
    """The paired part of detection.md: a rate's smallest failing change is two inputs of its subset (FR: of
    all 64; FVA: of the flipped ones), a mean's the drift band, a feature metric's the band as a lower bound."""
    md = paired.detection_markdown({"t": ref}, {"t": {"fire": {"FID": 10.0}, "dime": {"FID": 20.0}}},
                                   ["FID"], HIGHER, REL, PAIRED_MAX_LOST)
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")] for ln in md.splitlines()
            if ln.startswith("| ") and not ln.startswith("| metric")}
    assert rows["FR"][1:5] == ["2", "3.12", "3.12", "3.12"] and rows["FR"][8] == "rule"
    n_fva = sorted(int(np.isfinite(r["q/FVA"]).sum()) for r in ref.values())  # fake FVA: 0 / 1 on every input
    assert rows["FVA"][2] == f"{100 * 2 / max(n_fva):.3g}"
    assert rows["MNAC"][5:8] == [f"{100 * REL:.3g}"] * 3
    assert rows["FID"][1:5] == ["2", f"{REL * 10:.3g}", f"{REL * 15:.3g}", f"{REL * 20:.3g}"]
    assert rows["FID"][8] == "lower bound"
    assert "| FR | 2 | 4.69 |" in paired.detection_markdown({"t": ref}, {}, [], HIGHER, REL, 2)  # 3 inputs lost


def test_cells_without_records_are_held_to_the_drift_in_the_paired_mode(accepted, tmp_path):
    """NFE x 2 on DiME (a cost: no per-input record) and FID + 30 % on ACE (a row without a record) fail as cells
    within the CPU-kind drift; DiME's FID cell is the records' to judge (its features are unchanged)."""
    from vcebench.config.load import load_config
    from vcebench.steps.regression import regression

    run, ref = accepted
    shutil.copytree(run, tmp_path / "run")
    table = pd.read_csv(run / f"{TASK}.csv")
    for m, col, factor in (("dime", "nfe_per_cf", 2.0), ("ace", "FID", 1.3), ("dime", "FID", 1.3)):
        table.loc[table["method"] == m, col] *= factor
    table.to_csv(tmp_path / "run" / f"{TASK}.csv", index=False)
    _, fails, _ = regression(load_config(CONFIGS), ref, [TASK], tmp_path / "run", tmp_path / "run", "test CPU")
    assert failing(fails) == [("ace", "FID", "REGRESSED"), ("dime", "nfe_per_cf", "REGRESSED")]


def test_report_accept_copies_each_rows_record_and_drops_stale_ones(accepted, tmp_path, monkeypatch, capsys):
    """`vcebench report accept` writes samples/<task>/<method>.npz per recorded row and originals.npz; a row
    recorded in an earlier accept and gone now is removed."""
    from vcebench.cli import main
    from vcebench.config import kernels

    run, _ = accepted
    shutil.copyfile(REF / f"{TASK}.md", run / f"{TASK}.md")
    ref = tmp_path / "ref"
    stale = ref / paired.RECORDS_DIR / TASK / "gone.npz"
    stale.parent.mkdir(parents=True)
    np.savez(stale, ids=np.arange(3))
    monkeypatch.setattr(kernels, "cpu_kind", lambda: "test CPU")
    assert main(["report", "accept", "--reference", str(ref), "--out-dir", str(run), "--tasks", TASK]) == 0
    folder = ref / paired.RECORDS_DIR / TASK
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{m}.npz" for m in RECORDED] + ["originals.npz"])
    assert f"reference updated: {folder / 'dime.npz'}" in capsys.readouterr().out
    kept = paired.read_records(folder / "dime.npz")
    assert len(kept["ids"]) == 64 and not any(k.startswith("boot/") for k in kept)
    detection = (ref / "detection.md").read_text()  # its paired part, from the records just accepted
    assert "## The paired check" in detection and "| FR | 2 | 3.12 |" in detection


def test_a_rate_in_percent_and_one_outside_its_subset_count_alike():
    """A 0 / 100 rate counts its inputs as a 0 / 1 one; an input leaving the subset (NaN) is a success lost."""
    ref = np.array([100.0] * 10 + [0.0] * 5 + [np.nan])
    now = ref.copy()
    now[:2] = 0.0
    assert paired.is_rate("custom", ref) and not paired.is_rate("L1", np.array([0.5, 1.0]))
    row = paired.rate_check("t", "m", "custom", ref, now, True, PAIRED_MAX_LOST)
    assert (row["lost"], row["status"]) == (2, "REGRESSED")
    now = ref.copy()
    now[0] = np.nan
    assert paired.rate_check("t", "m", "custom", ref, now, True, PAIRED_MAX_LOST)["status"] == "ok"  # one lost
