"""Report tables: ranking marks follow each metric's direction; regression fails only in the bad direction (over
400 lines: every table format and its footers checked on the same fake results)."""

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from vcebench import report
from vcebench.report import pairs


def _write_results(root, task, rows):
    for m, (metrics, higher, prof) in rows.items():
        d = root / task / m
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps({"metrics": metrics, "higher_is_better": higher}))
        (d / "profile.json").write_text(json.dumps(prof))


@pytest.fixture
def table(tmp_path):
    higher = {"FID": False, "FR": True}
    rows = {
        "fire": ({"FID": 1.0, "FR": 99.0}, higher, {"sec_per_cf": 0.1, "tflops_per_cf": 1.0}),
        "dime": ({"FID": 3.0, "FR": 100.0}, higher, {"sec_per_cf": 1.0, "tflops_per_cf": 9.0}),
        "maskdime": ({"FID": 2.0, "FR": 90.0}, higher, {"sec_per_cf": 0.5, "tflops_per_cf": 5.0}),
    }
    _write_results(tmp_path, "synthxray_pacemaker", rows)
    return report.load_task_table(tmp_path, "synthxray_pacemaker", list(rows), "xray", synthetic=True)


def test_markdown_and_latex_marks(table):
    """The cells show the marks they are given (the paired tests', vcebench.report.pairs): 'best' bold, 'tied'
    underlined; without marks none, never marks of the point values."""
    df, higher = table
    plain = report.to_markdown(df, higher)
    assert "**" not in plain and "<u>" not in plain  # FiRe's lowest FID is not bold on its point value alone
    assert r"\textbf" not in report.to_latex(df, higher)
    marks = {"FID": {0: "best"}, "FR": {0: "tied", 1: "tied"}}
    md = report.to_markdown(df, higher, marks=marks)
    assert "| FiRe | **1.00** |" in md and "| MaskDiME | 2.00 |" in md
    assert "<u>100.0</u>" in md and "<u>99.00</u>" in md and "90.00" in md and "<u>90.00</u>" not in md
    assert "FID↓" in md and "FR(%)↑" in md and "s/CF↓" in md
    tex = report.to_latex(df, higher, marks=marks)
    assert r"\toprule" in tex and r"\bottomrule" in tex
    assert r"\textbf{1.00}" in tex and r"\underline{99.00}" in tex and r"FID$\downarrow$" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (apt: texlive-latex-recommended)")
def test_latex_compiles(table, tmp_path):
    df, higher = table
    body = report.to_latex(df, higher, caption="t")
    doc = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n" + body + "\\end{document}\n"
    (tmp_path / "t.tex").write_text(doc)
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "t.tex"], cwd=tmp_path, capture_output=True)
    assert r.returncode == 0, r.stdout.decode()[-2000:]


def test_regression_detects_bad_direction_only(table):
    df, higher = table
    cur = df.copy()
    cur.loc[cur.method == "fire", "FID"] = 1.5  # worse by 0.5
    cur.loc[cur.method == "dime", "FID"] = 1.0  # better by 2
    rows, fails = report.regression_check(cur, df, {"FID": 0.2, "FR": 1.0}, higher, "t")
    status = {(r["method"], r["metric"]): r["status"] for r in rows}
    assert status[("fire", "FID")] == "REGRESSED"
    assert status[("dime", "FID")] == "improved"
    assert status[("maskdime", "FID")] == "ok"
    assert [(f["method"], f["metric"]) for f in fails] == [("fire", "FID")]
    # within tolerance: passes
    _, fails = report.regression_check(cur, df, {"FID": 0.6}, higher, "t")
    assert not fails
    # relative tolerance
    _, fails = report.regression_check(cur, df, {"FID": {"rel": 0.6}}, higher, "t")
    assert not fails


def test_regression_missing_method_fails(table):
    df, higher = table
    cur = df[df.method != "dime"]
    _, fails = report.regression_check(cur, df, {"FID": 0.5}, higher, "t")
    assert any(f["status"] == "MISSING" and f["method"] == "dime" for f in fails)


def test_efficiency_figure_writes_png(table, tmp_path):
    df, _ = table
    df = df.copy()
    df["peak_mem_mb"] = [10.0, 20.0, 30.0]
    from vcebench.report import figures

    figures.efficiency_figure(tmp_path / "eff.png", df)
    assert (tmp_path / "eff.png").read_bytes()[:4] == b"\x89PNG"


def test_qualitative_ids_are_spread_over_the_evaluation_set():
    from vcebench.steps.report import spread

    ids = list(range(100, 200))
    assert spread(ids, 6) == [100, 120, 140, 159, 179, 199]
    assert spread(ids, 1) == [100] and spread(ids[:3], 6) == ids[:3]
    assert len(set(spread(ids, 50))) == 50


# --- intervals, cost columns of all n, the do-nothing row, the footer (issue 12) ---------------------

def _npz(path, n, steps, unet_fwd, cls_fwd, cls_bwd, scale=None, attempts=None, flipped=None):
    from vcebench.core.io import save_npz

    arrays = {"sample_id": np.arange(n), "cf": np.zeros((n, 1, 2, 2), np.uint8), "target": np.ones(n, np.int64),
              "steps": np.asarray(steps, np.int64), "info_nfe_unet_fwd": np.asarray(unet_fwd, float),
              "info_nfe_unet_bwd": np.zeros(n), "info_nfe_classifier_fwd": np.asarray(cls_fwd, float),
              "info_nfe_classifier_bwd": np.asarray(cls_bwd, float),
              "flipped": np.ones(n, bool) if flipped is None else np.asarray(flipped)}
    if scale is not None:
        arrays.update(info_scale=np.asarray(scale, float), info_attempts=np.asarray(attempts, np.int64))
    save_npz(path, **arrays)


def _full_results(root):
    task = "synthxray_pacemaker"
    higher = {"FID": False, "KID": False, "FR": True, "L1": False, "FR_oracle": True}
    proto = {"noise_rule": "snr_matched", "log_snr_shift": 2.77, "reference_resolution": 128, "resolution": 32,
             "tuned": False, "tuned_file": None, "log_snr": 3.4, "params": {"scales": [8.0, 10.0, 15.0]}}
    rows = {
        "dime": {"metrics": {"FID": 3.0, "KID": 0.5, "FR": 100.0, "L1": 0.2, "FR_oracle": 80.0},
                 "intervals": {"FID": [2.0, 6.0], "KID": [0.3, 0.7], "FR": [100.0, 100.0], "L1": [0.1, 0.3],
                               "FR_oracle": [60.0, 95.0]},
                 "n": {"FID": 4, "KID": 4, "FR": 4, "L1": 4, "FR_oracle": 4},
                 "subsets": {"FID": "successful", "KID": "successful", "FR": "all", "L1": "all", "FR_oracle": "all"},
                 "guidance": {"first_scale": 8.0, "all_flipped_at_first_scale": True}, "protocol": proto},
        "input": {"metrics": {"FID": None, "KID": None, "FR": 0.0, "L1": 0.0, "FR_oracle": 25.0},
                  "intervals": {"FR": [0.0, 0.0], "L1": [0.0, 0.0], "FR_oracle": [0.0, 75.0]},
                  "n": {"FID": 0, "KID": 0, "FR": 4, "L1": 4, "FR_oracle": 4},
                  "subsets": {"FID": "successful", "KID": "successful", "FR": "all", "L1": "all",
                              "FR_oracle": "all"},
                  "guidance": None, "protocol": {**proto, "log_snr": None, "params": {}}},
    }
    for m, mj in rows.items():
        d = root / task / m
        d.mkdir(parents=True)
        common = {"higher_is_better": higher, "n_inputs": 4, "seed": 0, "seeds": [0, 1],
                  "models": {"fid_features": "synthetic-fid-net"}, "inputs": {"eval_split": "test"},
                  "bootstrap": {"resamples": 1000, "feature_resamples": 200, "seed": 0, "level": 0.95}}
        (d / "metrics.json").write_text(json.dumps({**common, **mj}))
    # profile: per-call FLOPs (the profile ran 2 of the 4 inputs: its own NFE differs from the npz's)
    (root / task / "dime" / "profile.json").write_text(json.dumps({
        "sec_per_cf": 0.5, "peak_mem_mb": 7.0, "tflops_per_cf": 123.0, "nfe_per_cf": 99.0, "mean_steps": 99.0,
        "flops_per_call": {"unet": {"fwd_flops": 1e12, "bwd_flops": 0.0},
                           "classifier": {"fwd_flops": 1e11, "bwd_flops": 1e11}}}))
    _npz(root / task / "dime" / "counterfactuals.npz", 4, [3, 3, 3, 6], [3, 3, 3, 6], [4, 4, 4, 7], [3, 3, 3, 6],
         scale=[8, 8, 8, 8], attempts=[1, 1, 1, 1])
    _npz(root / task / "input" / "counterfactuals.npz", 4, [0] * 4, [0] * 4, [1] * 4, [0] * 4)
    return task, list(rows)


def test_cost_columns_come_from_all_n_counterfactuals(tmp_path):
    task, methods = _full_results(tmp_path)
    df, _ = report.load_task_table(tmp_path, task, methods, "xray", synthetic=True)
    d = df.set_index("method").loc["dime"]
    assert d["nfe_per_cf"] == pytest.approx((3 + 3 + 3 + 6 + 4 + 4 + 4 + 7) / 4)  # unet + classifier fwd, all n
    assert d["mean_steps"] == pytest.approx(15 / 4)
    # per-call FLOPs x calls: unet 1 TFLOP fwd, classifier 0.1 fwd + 0.1 bwd
    assert d["tflops_per_cf"] == pytest.approx((15 * 1.0 + 19 * 0.1 + 15 * 0.1) / 4)
    assert d["sec_per_cf"] == 0.5 and d["peak_mem_mb"] == 7.0
    assert d["mean_steps_lo"] <= d["mean_steps"] <= d["mean_steps_hi"] and d["mean_steps_lo"] < d["mean_steps_hi"]


def test_intervals_in_csv_and_plus_minus_in_md_and_tex(tmp_path):
    task, methods = _full_results(tmp_path)
    df, higher = report.load_task_table(tmp_path, task, methods, "xray", synthetic=True)
    report.write_task_tables(df, higher, tmp_path, task, footer=["a note ± 1"])
    csv = pd.read_csv(tmp_path / f"{task}.csv").set_index("method")
    assert csv.loc["dime", "FID_lo"] == 2.0 and csv.loc["dime", "FID_hi"] == 6.0 and "KID_hi" in csv
    md = (tmp_path / f"{task}.md").read_text()
    assert "| 3.00 ± 2 |" in md and "FID_lo" not in md  # half-width (6 - 2) / 2; no records: no marks
    tex = (tmp_path / f"{task}.tex").read_text()
    assert r"\pm{}$2" in tex and r"a note $\pm$ 1" in tex


def test_do_nothing_row_is_shown_but_never_ranked(tmp_path):
    task, methods = _full_results(tmp_path)
    df, higher = report.load_task_table(tmp_path, task, methods, "xray", synthetic=True)
    md = report.to_markdown(df, higher)
    row = next(line for line in md.splitlines() if "Input (no edit)" in line)
    assert row.startswith("| *Input (no edit)* |") and "**" not in row and "<u>" not in row  # L1 = 0 not bold
    assert pairs.ranked_rows(df) == ["dime"]  # the marks' tests leave it out (tests/test_pairs.py)


def test_footer_states_intervals_n_protocol_costs_and_warnings(tmp_path):
    task, methods = _full_results(tmp_path)
    df, _ = report.load_task_table(tmp_path, task, methods, "xray", synthetic=True)
    foot = "\n".join(report.task_footer(df, report.load_metrics_json(tmp_path, task, methods), None, 128))
    assert "95 % percentile bootstrap" in foot and "1000 resamples" in foot and "FID/sFID/KID 200" in foot
    assert "FID, KID (successful CFs vs all n originals): DiME 4, Input (no edit) 0" in foot
    assert "L1, FR, FR_oracle (all inputs): 4 for every row" in foot
    assert "noise rule snr_matched (log-SNR +2.77: 128 px → 32 px): DiME" in foot
    assert "selection: paper defaults + config" in foot and "no tuned settings" in foot
    assert "n inputs: 4 for every row (the first n of the `test` split)" in foot
    assert "generation seed 0" in foot and "sFID split seeds [0, 1]" in foot and "bootstrap seed 0" in foot
    assert "synthetic-fid-net, 128-d" in foot
    assert "Warning** DiME: every sample flipped at its first guidance scale (8.00)" in foot
    assert "[8.0, 10.0, 15.0] was never exercised" in foot
    assert "Input (no edit): the input as its own CF, not ranked: FR = 0" in foot
    tuned = {"rule": {"minimize": "FID", "require": {"FR": 95}}, "validation": {"n": 48, "split": "val"}}
    mj = report.load_metrics_json(tmp_path, task, methods)
    mj["dime"]["protocol"].update(tuned=True, tuned_file="config/tuned/x.yaml")
    foot = "\n".join(report.task_footer(df, mj, tuned))
    assert "selection: tuned settings (config/tuned/x.yaml; lowest FID subject to FR ≥ 95, on 48 `val` inputs" in foot


def test_footer_warns_when_a_row_ran_a_generator_that_fails_its_gate(tmp_path):
    """#48: the faces FiRe rows run on a pmf worse than Tweedie; the tables say so (from each row's profile.json,
    where the explain run records the gates of the networks it loaded), and only for rows that called it."""
    from vcebench.report.footer import gate_lines

    failing = {"pmf": {"passed": False, "failed": ["fid_lower"]}}
    profiles = {"fire": {"gates": failing, "flops_per_call": {"pmf": {}, "classifier": {}}},
                "fire_paper": {"gates": failing, "flops_per_call": {"pmf": {}}},
                "dime": {"gates": failing, "flops_per_call": {"unet": {}}}}  # loaded it, never called it
    (line,) = gate_lines(profiles)
    assert line.startswith("**Warning** FiRe, FiRe (paper): the pmf fails its quality gate (failed: fid_lower")
    assert gate_lines({"fire": {"gates": {"pmf": {"passed": True, "failed": []}}, "flops_per_call": {"pmf": {}}}}) == []
    # by how much, and on what budgets (#61's done-means: "PMF and DDPM at equal training steps; the PMF fails its
    # gate by X")
    numbers = {"pmf": {**failing["pmf"], "fid_pmf": 4.76, "fid_tweedie": 4.07, "steps": 25600, "ddpm_steps": 25600}}
    (line,) = gate_lines({"fire": {"gates": numbers, "flops_per_call": {"pmf": {}}}})
    assert "one-step FID 4.76 against the DDPM's Tweedie FID 4.07 at t 0.4: it fails its gate by 0.690, 17 %" in line
    assert "PMF and DDPM at equal training steps (25,600)" in line
    uneven = {"pmf": {**numbers["pmf"], "steps": 12800}}
    assert "the PMF trained 12,800 steps, the DDPM 25,600" in gate_lines({"f": {"gates": uneven,
                                                                            "flops_per_call": {"pmf": {}}}})[0]
    task, methods = _full_results(tmp_path)  # rows without gates in their profile: no warning
    df, _ = report.load_task_table(tmp_path, task, methods, "xray", synthetic=True)
    foot = report.task_footer(df, report.load_metrics_json(tmp_path, task, methods), None, 128,
                              profiles=report.load_profiles(tmp_path, task, methods))
    assert not [f for f in foot if "quality gate" in f]


def test_footer_names_what_the_resolution_rule_scaled_in_the_untuned_rows():
    """#47 item 5: a paper row on a synthetic task runs the papers' pixel values carried by the resolution rule;
    its footer says which (paper value -> the value the row ran, from its protocol record), flags a config value
    other than the rule's, and says nothing for tuned rows or a dataset the papers ran on."""
    def meta(base, params, tuned=False):
        return {"protocol": {"base_method": base, "tuned": tuned, "resolution": 32, "params": params}}

    metas = {"fire_paper": meta("fire", {"rho": 0.05, "dilation": 1, "feather": 1}),
             "ace_paper": meta("ace", {"dilation": 5}),
             "maskdime_paper": meta("maskdime", {"dilation": 5}),  # the rule gives 3 at 32 px
             "fire": meta("fire", {"dilation": 0, "feather": 2}, tuned=True)}
    (line,) = report.resolution_lines(metas, "synthfaces", "Smiling")
    assert "FiRe (paper) dilation 2 → 1, feather 3 → 1" in line and "ACE (paper) dilation 15 → 5" in line
    assert "dilation 5 → 5 (config; the rule: 3)" in line and "32 / 128" in line
    assert "FiRe dilation" not in line.replace("FiRe (paper) dilation", "")
    assert report.resolution_lines(metas, "celeba", "Smiling") == []  # the papers' own resolution
    assert report.resolution_lines({"fire": metas["fire"]}, "synthfaces", "Smiling") == []


def test_loaded_models_record_the_trained_generators_gate(tmp_path):
    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.models.task_models import quality_gate_of

    cfg = load_config()
    task = get_task(cfg, "synthfaces_smile")
    d = tmp_path / "synthfaces" / "pmf"
    d.mkdir(parents=True)
    assert quality_gate_of(cfg, task, "pmf", tmp_path) is None  # no metrics.json
    (d / "metrics.json").write_text(json.dumps({"quality_gate": {"passed": False, "failed": ["fid_lower"], "x": 1,
                                                                 "fid_pmf": 4.7, "fid_tweedie": 4.0},
                                                "training": {"steps": 12800}}))
    assert quality_gate_of(cfg, task, "pmf", tmp_path) == {"passed": False, "failed": ["fid_lower"], "fid_pmf": 4.7,
                                                           "fid_tweedie": 4.0, "steps": 12800}
    # installed from a shipped card with a budget in all (a continued network): the card's steps; the DDPM's beside
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"budget": {"steps": 12800, "total": {"steps": 25600}}}))
    meta = json.loads((d / "metrics.json").read_text())
    (d / "metrics.json").write_text(json.dumps({**meta, "shipped": {"card": str(card)}}))
    (tmp_path / "synthfaces" / "ddpm").mkdir()
    (tmp_path / "synthfaces" / "ddpm" / "metrics.json").write_text(json.dumps({"training": {"steps": 25600}}))
    got = quality_gate_of(cfg, task, "pmf", tmp_path)
    assert (got["steps"], got["ddpm_steps"]) == (25600, 25600)
    (d / "metrics.json").write_text("{not json")
    assert quality_gate_of(cfg, task, "pmf", tmp_path) is None


def _truth_table(root, s3, s3_intervals=None):
    """A synthetic x-ray table with the do-nothing row, the truth row and two explainers; ``s3``: {method: S3}."""
    task, higher = "synthxray_pacemaker", {"S3": True, "FR": True, "FR_oracle": True}
    for m, v in s3.items():
        d = root / task / m
        d.mkdir(parents=True)
        fr = {"input": 0.0, "truth": 100.0}.get(m, 90.0)
        iv = {"S3": (s3_intervals or {}).get(m, [v, v])}
        (d / "metrics.json").write_text(json.dumps({"metrics": {"S3": v, "FR": fr, "FR_oracle": fr - 5},
                                                    "intervals": iv, "higher_is_better": higher}))
        _npz(d / "counterfactuals.npz", 4, [1] * 4, [1] * 4, [1] * 4, [0] * 4)
        (d / "profile.json").write_text(json.dumps({"sec_per_cf": 0.5, "tflops_per_cf": 1.0}))
    df, higher = report.load_task_table(root, task, list(s3), "xray", synthetic=True)
    checks = report.check_columns(df, higher)
    lines = report.validity_lines(checks, task, "Pacemaker")
    md = report.to_markdown(df, higher, footer=lines, marked=report.marked_columns(checks))
    tex = report.to_latex(df, higher, footer=lines, marked=report.marked_columns(checks))
    return df, checks, md, tex


def test_a_column_that_ranks_the_truth_below_the_input_is_marked(tmp_path):
    df, checks, md, tex = _truth_table(tmp_path, {"fire": 0.6, "dime": 0.4, "input": 1.0, "truth": 0.3})
    assert checks["S3"].truth_beats_input is False and checks["S3"].marked
    assert "S³↑†" in md and r"S$^3$$\uparrow$$^\dagger$" in tex
    assert ("† S3 on synthxray_pacemaker: the true counterfactual scores 0.300, the unedited input 1.00: the column "
            "does not tell the true change of Pacemaker from no edit") in md
    # FiRe and DiME score above the truth beyond their (zero-width) intervals
    assert "FiRe, DiME score above it beyond the intervals" in md
    assert not checks["FR"].marked and "FR(%)↑ |" in md  # the truth flips every input, the input none


def test_a_column_that_ranks_the_truth_above_the_input_and_every_method_is_not_marked(tmp_path):
    df, checks, md, tex = _truth_table(tmp_path, {"fire": 0.7, "dime": 0.9, "input": 0.5, "truth": 0.8},
                                       {"dime": [0.75, 0.95], "truth": [0.7, 0.85]})  # DiME's overlaps the truth's
    assert checks["S3"].truth_beats_input and checks["S3"].beaten_by == () and not checks["S3"].marked
    assert "†" not in md and "dagger" not in tex and "S3 on synthxray_pacemaker" not in md
    # FR_oracle is read as the distance to the truth's value: stated, signed distances in the record
    assert "FR_oracle: read as the distance to the true counterfactual's value (FR_oracle 95.00)" in md
    assert checks["FR_oracle"].distance_to_truth == {"fire": -10.0, "dime": -10.0}
    assert report.validity.validity_record(checks, "synthxray_pacemaker", "truth")["columns"]["S3"]["marked"] is False


def test_truth_row_is_never_ranked_and_costs_nothing(tmp_path):
    df, _, md, tex = _truth_table(tmp_path, {"fire": 0.6, "dime": 0.4, "input": 1.0, "truth": 0.3})
    row = next(line for line in md.splitlines() if "Ground truth" in line)
    assert row.startswith("| *Ground truth* |") and "**" not in row and "<u>" not in row  # FR 100 not bold
    assert pairs.ranked_rows(df) == ["fire", "dime"]
    truth = df.set_index("method").loc["truth"]
    assert all(pd.isna(truth[c]) for c in report.tables.COST_COLUMNS)
    assert df.set_index("method").loc["fire", "sec_per_cf"] == 0.5
    tex_row = next(line for line in tex.splitlines() if line.startswith("Ground truth"))
    assert r"\textbf" not in tex_row and r"\underline" not in tex_row


def test_footer_says_what_the_truth_row_does():
    df = pd.DataFrame({"method": ["fire", "input", "truth"]})
    foot = "\n".join(report.footer._baseline_lines(df))
    assert "Input (no edit): the input as its own CF" in foot
    assert "Ground truth: the renderer's true counterfactual, not ranked" in foot
    assert "the input unedited where f(x) is wrong" in foot and "cost columns empty" in foot


def test_regression_accepts_a_row_the_reference_does_not_have(table):
    df, higher = table
    ref = df[df["method"] != "maskdime"]
    rows, failures = report.regression_check(df, ref, {"FID": 0.1, "FR": 1.0}, higher, "synthxray_pacemaker")
    assert not failures and {r["method"] for r in rows} == {"fire", "dime"}  # the new row is not compared


def test_footer_says_which_columns_catch_the_pixel_attack_and_which_rank_it_first(tmp_path):
    """The pixel attack flips the classifier with an invisible edit: FR and the do-little S3 rank it first,
    FR_oracle (the oracle keeps the query attribute) tells it from the truth."""
    task, higher = "synthxray_pacemaker", {"S3": True, "FR": True, "FR_oracle": True}
    rows = {"fire": (0.7, 95.0, 90.0), "pixel_attack": (0.99, 100.0, 4.0), "input": (1.0, 0.0, 0.0),
            "truth": (0.8, 100.0, 99.0)}
    for m, (s3, fr, oracle) in rows.items():
        d = tmp_path / task / m
        d.mkdir(parents=True)
        iv = {"S3": [s3 - 0.02, s3 + 0.01], "FR_oracle": [oracle - 3, oracle + 3]}
        (d / "metrics.json").write_text(json.dumps({"metrics": {"S3": s3, "FR": fr, "FR_oracle": oracle},
                                                    "intervals": iv, "higher_is_better": higher}))
        _npz(d / "counterfactuals.npz", 4, [1] * 4, [1] * 4, [1] * 4, [0] * 4)
        (d / "profile.json").write_text(json.dumps({"sec_per_cf": 0.5, "tflops_per_cf": 1.0}))
    df, higher = report.load_task_table(tmp_path, task, list(rows), "xray", synthetic=True)
    checks = report.check_columns(df, higher)
    attacks = report.check_attacks(df, checks)
    found = {a.column: a for a in attacks["pixel_attack"]}
    assert list(attacks) == ["pixel_attack"]  # FiRe is no attack; the reference rows are not ranked
    assert found["FR_oracle"].caught and not found["FR_oracle"].first  # 4 vs the truth's 99, intervals apart
    assert found["FR"].first and not found["FR"].caught  # 100 = the truth's: ranked first (tie with nobody)
    assert found["S3"].first and not found["S3"].caught  # above the truth: S3 rewards doing little
    line = report.attack_lines(attacks, checks)[0]
    assert line.startswith("Pixel PGD (attack) is no counterfactual: told from the true counterfactual by FR_oracle "
                           "(4.00 vs 99.00)")
    assert "ranked first by S3, FR: these columns cannot tell an attack from a counterfactual" in line
    record = report.validity.validity_record(checks, task, "truth", attacks)
    assert record["attacks"]["pixel_attack"]["FR_oracle"] == {"value": 4.0, "caught": True, "ranked_first": False}
    assert report.check_attacks(df[df["method"] != "pixel_attack"], checks) == {}  # no attack row, no sentence


def test_the_paper_tables_put_ace_l1_and_l2_beside_their_reported_rows():
    from vcebench.config.load import load_config
    from vcebench.paper import numbers
    from vcebench.steps.paper import comparison_rows

    for task in ("celeba_smile", "celeba_age", "celebahq_smile", "celebahq_age"):
        rep = numbers.reported(task)
        assert {"ace", "ace_l2"} <= set(rep) and set(rep["ace_l2"]) == set(numbers.FACE_COLS)
    assert numbers.reported("celeba_smile")["ace"]["FR"] == 97.6
    assert numbers.reported("celeba_age")["ace_l2"]["FR"] == 77.5
    cfg = load_config()
    rows = comparison_rows(cfg)  # `snakemake paper` runs what the tables show: `methods` and `paper_methods`
    paper_rows = ["fire_paper", "dime_paper", "fastdime_paper", "fastdime2_paper", "fastdime2plus_paper",
                  "maskdime_paper", "ace_paper"]
    assert rows == cfg["methods"] + paper_rows + ["ace_l2"]  # every paper row (FiRe's too), not its ablations
    assert "ace" in cfg["methods"] and "pixel_attack" in cfg["methods"] and "ace_paper" in cfg["paper_methods"]


def test_the_ablation_tables_take_their_rows_from_paper_methods_and_variants():
    """Tables 4-6 hold the FiRe variants of config `paper_methods`, each in the table of what it changes:
    the paper's layout on the default config; a variant added there (or a FiRe row changed) moves the table."""
    import copy

    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.steps.paper import ablation_rows

    cfg = load_config()
    task = get_task(cfg, "synthfaces_smile")
    assert ablation_rows(cfg, task) == {
        "Table 4 (ablation)": ["fire_one_step", "fire_reverse", "fire_fixed", "fire_fixed_maskdime_mask",
                               "fire_fixed_fire_mask", "fire_no_early_stop", "fire"],
        "Table 5 (refinement budget K)": ["fire_K5", "fire_K10", "fire", "fire_K20"],  # FiRe's own K is 15
        "Table 6 (noise level t)": ["fire_t02", "fire_t04", "fire_t06", "fire_t08", "fire"],  # t04 is FiRe's t
    }
    planted = copy.deepcopy(cfg)
    planted["variants"]["fire"].update(K7={"K": 7}, t03={"t": 0.3})
    planted["paper_methods"] = ["fire_K20", "fire_K7", "fire_t03", "fire_paper", "fire_no_compaction",
                                "fire_reverse", "ace_l2"]
    planted["tasks"]["synthfaces_smile"]["params"]["fire"]["K"] = 30  # FiRe's own K (the task sets it)
    assert ablation_rows(planted, get_task(planted, "synthfaces_smile")) == {
        "Table 4 (ablation)": ["fire_reverse", "fire"],
        "Table 5 (refinement budget K)": ["fire_K7", "fire_K20", "fire"],  # by K; FiRe's own 30 last
        "Table 6 (noise level t)": ["fire_t03", "fire"],  # 0.3 < FiRe's 0.4
    }


def test_each_cpu_kind_keeps_its_own_regression_reference(table, tmp_path, monkeypatch, capsys):
    """Networks trained on another kind of CPU round differently even under the kernel pin: `report accept`
    writes the tables of a second kind beside the first (cpu/<kind>/), and `report regression` compares with
    the tables of the kind it runs on, naming the fallback when there are none."""
    from vcebench.cli import main
    from vcebench.config import kernels
    from vcebench.report.regression import kind_slug, reference_kind, reference_tables

    df, _ = table
    task = "synthxray_pacemaker"
    ref, out = tmp_path / "ref", tmp_path / "out"
    out.mkdir()
    (ref / "cpu").mkdir(parents=True)
    (ref / "tolerances.yaml").write_text("FID: 0.1\nFR: 1.0\n")

    def write_current(fid_of_fire: float) -> None:
        cur = df.copy()
        cur.loc[cur.method == "fire", "FID"] = fid_of_fire
        cur.to_csv(out / f"{task}.csv", index=False)
        (out / f"{task}.md").write_text("table\n")

    def run(verb: str, kind: str, *extra: str) -> int:
        monkeypatch.setattr(kernels, "cpu_kind", lambda: kind)
        # per-metric tolerances (the seeds' mode): the records' paired mode has its own tests
        results = ["--results", str(tmp_path), "--mode", "seeds"] if verb == "regression" else []
        return main(["report", verb, "--reference", str(ref), "--out-dir", str(out), *results, "--tasks", task,
                     *extra])

    write_current(1.0)
    assert run("accept", "GenuineIntel Xeon") == 0  # an empty reference: its own tables
    assert reference_kind(ref) == "GenuineIntel Xeon" and (ref / f"{task}.csv").exists()
    write_current(2.0)  # another CPU kind trains other networks: fire's FID moves by 1.0
    assert run("regression", "AuthenticAMD EPYC") == 1  # no reference of its own: compared with the Intel one
    assert "no reference made on this CPU (AuthenticAMD EPYC)" in capsys.readouterr().err
    capsys.readouterr()
    assert run("accept", "AuthenticAMD EPYC") == 0
    assert f"also kept: {ref} (GenuineIntel Xeon)" in capsys.readouterr().out  # the other kind may be stale now
    amd = ref / "cpu" / kind_slug("AuthenticAMD EPYC")
    assert amd.name == "authenticamd-epyc" and reference_kind(amd) == "AuthenticAMD EPYC"
    assert pd.read_csv(ref / f"{task}.csv").set_index("method").loc["fire", "FID"] == 1.0  # Intel's kept
    assert reference_tables(ref, "AuthenticAMD EPYC") == (amd, None)
    assert run("regression", "AuthenticAMD EPYC", "--out", str(tmp_path / "r.md")) == 0
    assert f"against {amd}" in (tmp_path / "r.md").read_text()
    assert run("regression", "GenuineIntel Xeon") == 1  # the Intel kind still holds Intel's numbers
    write_current(2.5)  # a real regression on the AMD kind is still caught
    assert run("regression", "AuthenticAMD EPYC") == 1


def test_directions_come_from_the_registry_not_from_metrics_json(tmp_path):
    """A metric's direction is declared once (its registration): a metrics.json that claims FID is better
    higher (a stale or foreign file) does not flip the table's arrow or its marks."""
    wrong = {"FID": True, "FR": False}
    rows = {"fire": ({"FID": 1.0, "FR": 99.0}, wrong, {}), "dime": ({"FID": 3.0, "FR": 100.0}, wrong, {})}
    _write_results(tmp_path, "synthxray_pacemaker", rows)
    df, higher = report.load_task_table(tmp_path, "synthxray_pacemaker", list(rows), "xray", synthetic=True)
    assert higher["FID"] is False and higher["FR"] is True
    assert "FID↓" in report.to_markdown(df, higher)  # the marks' direction: tests/test_pairs.py


def test_builtin_metric_classes_leave_directions_to_their_registration():
    """One home per direction: no registered built-in class states ``higher_is_better``; a metric built by
    hand reports its registration's directions."""
    import metrics
    from metrics.evaluation import directions

    assert directions(metrics.FID.__new__(metrics.FID)) == {"FID": False}
    assert directions(metrics.GroundTruth())["GT_L1_input"] is None  # shown, not ranked

    stating = [c for c in vars(metrics).values() if isinstance(c, type) and "higher_is_better" in vars(c)]
    assert [c.__name__ for c in stating] == ["SigmaL"]  # the one unregistered (optional) metric
