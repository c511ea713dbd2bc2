"""Report tables: ranking marks follow each metric's direction; regression fails only in the bad direction."""

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from vcebench import report


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


def test_rank_marks_follow_direction():
    s = pd.Series([3.0, 1.0, 2.0, np.nan])
    assert report.rank_marks(s, higher=False) == {1: "best", 2: "second"}
    assert report.rank_marks(s, higher=True) == {0: "best", 2: "second"}
    # ties share the rank
    assert report.rank_marks(pd.Series([1.0, 1.0, 2.0]), higher=False) == {0: "best", 1: "best", 2: "second"}


def test_markdown_and_latex_marks(table):
    df, higher = table
    md = report.to_markdown(df, higher)
    assert "| FiRe | **1.00** |" in md  # lowest FID is best
    assert "<u>2.00</u>" in md  # MaskDiME's FID second
    assert "**100.0**" in md and "<u>99.00</u>" in md  # FR: higher is better
    assert "FID↓" in md and "FR(%)↑" in md and "s/CF↓" in md
    tex = report.to_latex(df, higher)
    assert r"\toprule" in tex and r"\bottomrule" in tex
    assert r"\textbf{1.00}" in tex and r"\underline{2.00}" in tex and r"FID$\downarrow$" in tex


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
    from vcebench import figures

    figures.efficiency_figure(tmp_path / "eff.png", df)
    assert (tmp_path / "eff.png").read_bytes()[:4] == b"\x89PNG"


def test_qualitative_ids_are_spread_over_the_evaluation_set():
    from vcebench.commands.report import spread

    ids = list(range(100, 200))
    assert spread(ids, 6) == [100, 120, 140, 159, 179, 199]
    assert spread(ids, 1) == [100] and spread(ids[:3], 6) == ids[:3]
    assert len(set(spread(ids, 50))) == 50
