"""Per-input records (samples.npz), paired comparisons and the marks they decide (issue #60 items 1-3).

Fake results trees with known per-input values: replicates are drawn with the one shared count matrix, as
`vcebench evaluate` draws them (metrics.evaluation), so the rows are paired exactly as in a real run.
"""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
import torch

from metrics import FlipRate
from metrics.bootstrap import Resamples, Samples, resample_counts, weighted_means
from metrics.evaluation import run_metrics
from metrics.fid import FID
from metrics.records import RecordError, SampleRecord, counts_sha256, read_samples, write_samples
from metrics.similarity import L1Distance
from tests.fakes import eval_batches
from vcebench import report
from vcebench.report import pair_summary, pairs

TASK = "synthxray_pacemaker"
N, B = 120, 400


# --- records ------------------------------------------------------------------------------------------------

class Project(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :5] * 3


def _batches(n=30, bs=8):
    return eval_batches(n, bs, seed=0, p_flip=0.6, id_scale=2, id_offset=7)


def test_run_metrics_records_what_each_input_contributed(tmp_path):
    """q/ means are the columns (FR: 100 x the mean of 0 / 1), subsets and features follow FID's successful CFs,
    boot/ are the interval's replicates and the digest is the count matrix's."""
    cfg = {"resamples": 50, "feature_resamples": 20, "seed": 3}
    l1 = L1Distance()
    l1.subset = "successful"
    out = run_metrics([FlipRate(), l1, FID(Project())], _batches(), bootstrap=cfg, keep_resamples=True, records=True)
    rec = out["records"]
    write_samples(tmp_path / "samples.npz", rec)
    got = read_samples(tmp_path / "samples.npz")
    ids = np.arange(30) * 2 + 7
    assert got.schema == "vcebench-samples/1" and got.ids.dtype == np.int64 and (got.ids == ids).all()
    flips = np.concatenate([b.flipped.numpy() for b in _batches()])
    assert (got.q["FR"] == flips).all() and "FR" not in got.subset
    assert 100 * got.q["FR"].mean() == pytest.approx(out["metrics"]["FR"])
    assert (got.subset["L1"] == flips).all() and np.isnan(got.q["L1"][~flips]).all()
    assert np.nanmean(got.q["L1"]) == pytest.approx(out["metrics"]["L1"])
    feats = got.features["fid_features"]
    assert feats.dtype == np.float32 and feats.shape == (30, 5) and np.isnan(feats[~flips]).all()
    assert np.isfinite(feats[flips]).all()
    for k in ("FR", "L1", "FID"):
        assert got.boot[k] == pytest.approx(out["resampled"][k], nan_ok=True), k
    assert len(got.boot["FR"]) == 50 and len(got.boot["FID"]) == 20
    w = resample_counts(30, 50, 3)  # replicate b is row b of the count matrix: the same draw in every row
    assert got.boot["FR"] == pytest.approx(100 * (w @ got.q["FR"]) / w.sum(1))
    # the digest of the schema: the count matrix (little-endian int64, C order) then the ids (int64)
    assert got.boot_counts_sha256 == hashlib.sha256(w.astype("<i8").tobytes() + ids.astype("<i8").tobytes()).hexdigest()
    assert got.boot_counts_sha256 != counts_sha256(Resamples(ids, resample_counts(30, 50, 4)))
    assert got.boot_counts_sha256 != counts_sha256(Resamples(ids + 1, w))


def test_read_samples_refuses_what_the_schema_does_not_allow(tmp_path):
    ok = SampleRecord(ids=np.arange(4), q={"FR": np.ones(4)}, boot={"FR": np.ones(3)}, boot_counts_sha256="ab")
    write_samples(tmp_path / "ok.npz", ok)
    assert read_samples(tmp_path / "ok.npz").q["FR"].tolist() == [1, 1, 1, 1]
    for bad, msg in ((SampleRecord(ids=np.array([3, 1])), "sorted"),
                     (SampleRecord(ids=np.arange(4), q={"FR": np.ones(3)}), "q/FR"),
                     (SampleRecord(ids=np.arange(4), features={"net": np.ones((3, 2))}), "features/net")):
        with pytest.raises(RecordError, match=msg):
            write_samples(tmp_path / "bad.npz", bad)
    np.savez(tmp_path / "old.npz", ids=np.arange(2), schema=np.asarray("vcebench-samples/0"),
             boot_counts_sha256=np.asarray(""))
    with pytest.raises(RecordError, match="vcebench-samples/0"):
        read_samples(tmp_path / "old.npz")


# --- the statistics -----------------------------------------------------------------------------------------

def test_holm_bootstrap_p_and_mcnemar_on_known_values():
    assert pairs.holm(np.array([0.01, 0.04, 0.03, np.nan])).tolist()[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert np.isnan(pairs.holm(np.array([0.01, np.nan]))[1])
    d = np.random.default_rng(0).standard_normal(1000)
    d = (d - d.mean()) / d.std(ddof=1)  # replicate differences with sd exactly 1
    assert pairs.bootstrap_p(3.0, d + 3.0) == pytest.approx(0.0026998, rel=1e-4)  # 2 (1 - Phi(3))
    assert pairs.bootstrap_p(1.96, d) == pytest.approx(0.05, rel=1e-3)  # the spread, not the replicates' mean
    # no floor at 1 / (B + 1): a clear difference passes Holm over 28 pairs with B = 200 replicates
    assert pairs.bootstrap_p(5.0, d[:200] + 5.0) * 28 < 0.05
    assert pairs.bootstrap_p(0.0, np.zeros(99)) == 1.0 and pairs.bootstrap_p(1.0, np.ones(99)) == 0.0
    assert np.isnan(pairs.bootstrap_p(1.0, np.array([np.nan, 1.0])))
    p, k = pairs.mcnemar(np.r_[np.ones(8), np.zeros(4)], np.zeros(12))
    assert k == 8 and p == pytest.approx(2 * 0.5 ** 8)  # 8 discordant, all one way
    assert pairs.mcnemar(np.ones(5), np.ones(5)) == (1.0, 0)


# --- fake results trees -------------------------------------------------------------------------------------

def _values(seed: int):
    """Per-input L1 (lower is better) and flips (FR) of four ranked rows and the input row: FiRe's L1 clearly the
    lowest, DiME's and MaskDiME's equal up to noise; FR: FiRe and DiME equal but for 2 inputs, ACE far lower."""
    g = np.random.default_rng(seed)
    base = g.uniform(0.3, 0.7, N)
    fr = (g.uniform(size=N) < 0.9).astype(float)
    dime_fr = fr.copy()
    dime_fr[np.nonzero(fr)[0][:2]] = 0
    return {"fire": (base - 0.2, fr), "dime": (base + g.normal(0, 0.01, N), dime_fr),
            "maskdime": (base + g.normal(0, 0.01, N), fr), "ace": (base + 0.3, (g.uniform(size=N) < 0.5) * 1.0),
            "input": (np.zeros(N), np.zeros(N))}


def _write_tree(root, rows, counts_seed=0, skip_records=(), task=TASK):
    ids = np.arange(N, dtype=np.int64) + 1000
    draws = Resamples.draw(ids, B, counts_seed)
    for m, (l1, fr) in rows.items():
        d = root / task / m
        d.mkdir(parents=True)
        boot = {}
        for col, v, scale in (("L1", l1, 1.0), ("FR", fr, 100.0)):
            s = Samples()
            s.add(torch.from_numpy(ids), torch.from_numpy(v))
            boot[col] = weighted_means(s, draws, scale)
        metrics = {"L1": float(l1.mean()), "FR": 100 * float(fr.mean())}
        intervals = {k: list(np.quantile(v, [0.025, 0.975])) for k, v in boot.items()}
        (d / "metrics.json").write_text(json.dumps({"metrics": metrics, "intervals": intervals, "n_inputs": N,
                                                    "subsets": {"L1": "all", "FR": "all"}}))
        if m not in skip_records:
            write_samples(d / "samples.npz", SampleRecord(ids=ids, q={"L1": l1, "FR": fr}, boot=boot,
                                                          boot_counts_sha256=counts_sha256(draws)))
    return list(rows)


def _table(root, methods, task=TASK):
    df, higher = report.load_task_table(root, task, methods, "xray", synthetic=True)
    return df, higher


def _cell(md: str, method: str, col_index: int) -> str:
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {method} |") or ln.startswith(f"| *{method}* |"))
    return [c.strip() for c in line.strip("|").split("|")][col_index]


def test_marks_come_from_the_tests_not_the_point_values(tmp_path):
    methods = _write_tree(tmp_path, _values(0))
    df, higher = _table(tmp_path, methods)
    table, marks, note = pairs.task_pairs(tmp_path, TASK, df, higher)
    by = {(r.column, r.a, r.b): r for r in table.itertuples()}
    assert set(table["a"]) | set(table["b"]) == {"fire", "dime", "maskdime", "ace"}  # the input row is not ranked
    assert by[("L1", "fire", "dime")].separated and by[("L1", "fire", "dime")].better == "fire"
    assert not by[("L1", "dime", "maskdime")].separated and by[("L1", "dime", "maskdime")].test == "bootstrap"
    fr = by[("FR", "fire", "dime")]
    assert fr.test == "mcnemar" and fr.discordant == 2 and not fr.separated and fr.p == pytest.approx(0.5)
    assert by[("FR", "fire", "ace")].separated and by[("FR", "fire", "ace")].better == "fire"
    assert (table.groupby("column")["p_holm"].count() == 6).all()  # Holm over the 4 * 3 / 2 pairs of a column
    lo, hi = by[("L1", "fire", "ace")].diff_lo, by[("L1", "fire", "ace")].diff_hi
    assert lo < -0.5 < hi < 0 and by[("L1", "fire", "ace")].diff == pytest.approx(-0.5)

    md = report.to_markdown(df, higher, marks=marks)
    cols = ["Method"] + report.tables.display_columns(df)[1:]
    li, fi = cols.index("L1"), cols.index("FR")
    assert _cell(md, "FiRe", li).startswith("**") and "<u>" not in md.split("\n")[0]
    for m in ("DiME", "MaskDiME", "ACE"):
        assert "**" not in _cell(md, m, li) and "<u>" not in _cell(md, m, li), m
    # FR: FiRe has the best point value but DiME is not separable from it; MaskDiME equals FiRe; ACE is separated
    for m in ("FiRe", "DiME", "MaskDiME"):
        assert _cell(md, m, fi).startswith("<u>"), m
    assert "<u>" not in _cell(md, "ACE", fi) and "**" not in _cell(md, "ACE", fi)
    assert "**" not in _cell(md, "Input (no edit)", li)  # L1 = 0 is the reference row's, never marked
    tex = report.to_latex(df, higher, marks=marks)
    fire = df.set_index("method").loc["fire"]
    assert r"\textbf{" + report.tables.format_value(fire["L1"]) + "}" in tex
    assert r"\underline{" + report.tables.format_value(fire["FR"]) + "}" in tex and tex.count(r"\textbf{") == 1
    line = report.footer.marks_line(note, TASK)
    assert "**Bold**" in line and "Holm" in line and f"{TASK}_pairs.md" in line and "No marks in" not in line

    pairs.write_pairs(tmp_path, TASK, table)
    back = pd.read_csv(tmp_path / f"{TASK}_pairs.csv")
    assert list(back.columns) == pairs.PAIR_COLUMNS and len(back) == 12
    assert "## L1" in (tmp_path / f"{TASK}_pairs.md").read_text()


def test_the_pairs_md_says_in_one_line_why_the_pixel_attack_is_ranked(tmp_path):
    """The attack row stays ranked (it shows which columns cannot tell an attack from a counterfactual) and the
    pairs file's footer says so in one line; a tree without it has no such line."""
    rows = _values(4)
    rows["pixel_attack"] = rows.pop("ace")
    methods = _write_tree(tmp_path / "a", rows)
    df, higher = _table(tmp_path / "a", methods)
    table = pairs.task_pairs(tmp_path / "a", TASK, df, higher)[0]
    assert "pixel_attack" in set(table["a"]) | set(table["b"])
    md = pairs.pairs_markdown(TASK, table)
    said = [ln for ln in md.splitlines() if "cannot tell an attack from a counterfactual" in ln]
    assert len(said) == 1 and said[0].startswith("Pixel PGD (attack): no counterfactual, ranked on purpose")
    methods = _write_tree(tmp_path / "b", _values(4))
    df, higher = _table(tmp_path / "b", methods)
    assert "attack" not in pairs.pairs_markdown(TASK, pairs.task_pairs(tmp_path / "b", TASK, df, higher)[0])


def test_marks_follow_each_columns_direction(tmp_path):
    """Turning L1's direction round makes ACE (highest L1) the bold one: the marks read the registry's
    direction, never a fixed sense."""
    methods = _write_tree(tmp_path, _values(1))
    df, higher = _table(tmp_path, methods)
    _, marks, _ = pairs.task_pairs(tmp_path, TASK, df, {**higher, "L1": True})
    ace = df.index[df["method"] == "ace"][0]
    assert marks["L1"] == {ace: "best"}


def test_rows_without_records_get_no_marks_never_point_value_marks(tmp_path):
    methods = _write_tree(tmp_path, _values(2), skip_records=("ace",))
    df, higher = _table(tmp_path, methods)
    _, marks, note = pairs.task_pairs(tmp_path, TASK, df, higher)
    md = report.to_markdown(df, higher, marks=marks)
    assert "**" not in md and "<u>" not in md
    assert note.no_record == ["ace"] and set(note.unmarked) == {"L1", "FR"}
    assert "No marks" in report.footer.marks_line(note, TASK) and "ACE" in report.footer.marks_line(note, TASK)
    old = tmp_path / "old"
    methods = _write_tree(old, _values(2), skip_records=tuple(_values(2)))
    df, higher = _table(old, methods)
    _, marks, note = pairs.task_pairs(old, TASK, df, higher)
    assert marks == {} and "**" not in report.to_markdown(df, higher, marks=marks)
    assert report.footer.marks_line(note, TASK).startswith("No marks (bold / underline): no per-input record")
    assert report.footer.marks_line(None).startswith("No marks")


def test_rows_not_drawn_with_the_same_count_matrix_are_refused(tmp_path):
    methods = _write_tree(tmp_path, _values(3))
    other = tmp_path / "other"
    _write_tree(other, {"dime": _values(3)["dime"]}, counts_seed=1)
    (tmp_path / TASK / "dime" / "samples.npz").write_bytes((other / TASK / "dime" / "samples.npz").read_bytes())
    df, higher = _table(tmp_path, methods)
    with pytest.raises(pairs.PairingError, match="different count matrices"):
        pairs.task_pairs(tmp_path, TASK, df, higher)
    rec = read_samples(tmp_path / TASK / "fire" / "samples.npz")
    rec.ids = rec.ids + 1
    write_samples(tmp_path / TASK / "dime" / "samples.npz", rec)
    with pytest.raises(pairs.PairingError, match="different inputs"):
        pairs.task_pairs(tmp_path, TASK, df, higher)


def test_summary_counts_wins_ties_losses_and_draws_the_cd_diagram(tmp_path):
    tasks = [TASK, "synthfaces_smile"]
    for i, t in enumerate(tasks):
        methods = _write_tree(tmp_path, _values(10 + i), task=t)
        df, higher = _table(tmp_path, methods, task=t)
        pairs.write_pairs(tmp_path, t, pairs.task_pairs(tmp_path, t, df, higher)[0])
    md = pair_summary.summarize(tmp_path, tasks, report.tables.registry.column_directions())
    row = next(ln for ln in md.splitlines() if ln.startswith("| FiRe |"))
    l1, fr, total = [c.strip() for c in row.strip("|").split("|")][1:4]
    assert l1 == "6/0/0"  # FiRe beats the three others on L1 in both tasks
    ace = next(ln for ln in md.splitlines() if ln.startswith("| ACE |"))
    assert [c.strip() for c in ace.strip("|").split("|")][2] == "0/0/6"  # ACE loses every FR pair
    assert (tmp_path / "summary_cd.png").stat().st_size > 1000
    wtl = pair_summary.wins_ties_losses(pair_summary.read_pairs(tmp_path, tasks))
    assert (wtl[["wins", "ties", "losses"]].sum(1) == 6).all()  # 3 opponents x 2 tasks per method and column
    ranks = pair_summary.block_ranks(pair_summary.read_pairs(tmp_path, tasks), {"L1": False, "FR": True})
    assert ranks.shape == (4, 4)  # 2 tasks x 2 columns, the 4 ranked rows
    assert ranks.loc[(TASK, "L1"), "fire"] == 1.0 and ranks.loc[(TASK, "L1"), "ace"] == 4.0
    assert ranks.loc[(TASK, "FR"), "ace"] == 4.0  # lowest FR, higher is better


def test_rows_not_separated_from_any_row_sharing_the_best_value_are_underlined():
    """FiRe and DiME share the best point value; MaskDiME is separated from DiME but not from FiRe: it is not
    separable from the best (a best value), so it is underlined too; ACE is separated from both."""
    df = pd.DataFrame({"method": ["fire", "dime", "maskdime", "ace"], "L1": [0.1, 0.1, 0.2, 0.5]})
    sep = {("fire", "maskdime"): False, ("dime", "maskdime"): True, ("fire", "ace"): True, ("dime", "ace"): True,
           ("fire", "dime"): False, ("maskdime", "ace"): True}
    fam = pd.DataFrame([{"column": "L1", "a": a, "b": b, "separated": s} for (a, b), s in sep.items()])
    rec = SampleRecord(ids=np.arange(3), boot={"L1": np.zeros(3)}, boot_counts_sha256="x")
    marks, note = pairs.marks(df, {"L1": False}, fam, dict.fromkeys(df["method"], rec))
    assert marks == {"L1": {0: "tied", 1: "tied", 2: "tied"}} and note.marked == ["L1"]
    sep[("fire", "maskdime")] = True
    fam = pd.DataFrame([{"column": "L1", "a": a, "b": b, "separated": s} for (a, b), s in sep.items()])
    assert pairs.marks(df, {"L1": False}, fam, dict.fromkeys(df["method"], rec))[0] == {"L1": {0: "tied", 1: "tied"}}


def test_groups_are_the_maximal_runs_within_the_critical_difference():
    r = pd.Series({"a": 1.0, "b": 1.5, "c": 2.2, "d": 4.0})
    assert pair_summary.groups(r, 1.3) == [["a", "b", "c"]]
    assert pair_summary.groups(r, 0.6) == [["a", "b"]]
    assert pair_summary.groups(r, 0.1) == []
    assert pair_summary.critical_difference(4, 10) == pytest.approx(2.569 * np.sqrt(4 * 5 / 60), rel=1e-3)


def test_report_pairs_cli_writes_each_tasks_pairs_then_their_summary(tmp_path, capsys):
    from vcebench.cli import main

    tasks = [TASK, "synthfaces_smile"]
    for i, t in enumerate(tasks):
        methods = _write_tree(tmp_path, _values(20 + i), task=t)
        assert main(["report", "pairs", "--task", t, "--methods", *methods, "--results", str(tmp_path),
                     "--out-dir", str(tmp_path)]) == 0
        # the task's own table columns: x-ray tables show L1 and FR (12 pairs), faces tables FR only (6)
        assert len(pd.read_csv(tmp_path / f"{t}_pairs.csv")) == (12 if t == TASK else 6)
    assert main(["report", "pairs", "--summary", *tasks, "--out-dir", str(tmp_path)]) == 0
    assert "| FiRe | 3/0/0 |" in (tmp_path / "summary_pairs.md").read_text()  # L1: one task
    assert (tmp_path / "summary_cd.png").exists()
    capsys.readouterr()
    assert main(["report", "pairs", "--out-dir", str(tmp_path)]) == 2  # neither --task nor --summary
    assert "--task TASK or --summary" in capsys.readouterr().err


def test_a_row_that_regenerates_is_marked_and_never_ranked(tmp_path):
    """A row whose counterfactuals the classifier reads all as one class whatever their input (metrics.json's
    ``classifier_reads``) regenerates rather than edits: left out of the pairs and the marks, its label marked ‡
    with the reason in the footer. Planted: the same tree without the counts ranks it (FiRe, L1's best)."""
    from vcebench.report import validity

    methods = _write_tree(tmp_path, _values(0))
    p = tmp_path / TASK / "fire" / "metrics.json"
    meta = json.loads(p.read_text())
    p.write_text(json.dumps({**meta, "classifier_reads": {"inputs": [N // 2, N - N // 2],
                                                          "counterfactuals": [0, N]}}))
    metas = report.load_metrics_json(tmp_path, TASK, methods)
    regen = validity.regenerating_rows(metas)
    assert list(regen) == ["fire"]
    df, higher = _table(tmp_path, methods)
    table, marks, _ = pairs.task_pairs(tmp_path, TASK, df, higher, regen)
    assert "fire" not in set(table["a"]) | set(table["b"])
    fire_row = df.index[df["method"] == "fire"][0]
    assert all(fire_row not in col for col in marks.values())
    md = report.to_markdown(df, higher, marks=marks, flagged=regen,
                            footer=validity.regeneration_lines(regen, "Pacemaker"))
    assert f"| FiRe {report.tables.ROW_MARK} |" in md
    assert f"{report.tables.ROW_MARK} FiRe regenerates rather than edits" in md and f"all {N} of" in md
    assert r"FiRe$^\ddagger$" in report.to_latex(df, higher, flagged=regen)
    # a row whose counterfactuals read as both classes, or whose inputs are all one class, is no regeneration
    assert validity.regenerating_rows({"a": {"classifier_reads": {"inputs": [5, 5], "counterfactuals": [1, 9]}},
                                       "b": {"classifier_reads": {"inputs": [0, 10], "counterfactuals": [10, 0]}},
                                       "c": {}}) == {}
    # planted: without the counts FiRe is ranked and marked best on L1
    _, marks0, _ = pairs.task_pairs(tmp_path, TASK, df, higher)
    assert marks0["L1"].get(fire_row) == "best"


def test_the_pairs_verdict_is_the_marks_and_a_docs_excerpt_can_cut_it(tmp_path):
    """The verdict table at the top of <task>_pairs.md says, per row and column, what the table marks say (bold:
    **best**, underlined: tied), from the pairs file alone; the docs cut it like a task table (table=1)."""
    from vcebench.report.excerpt import table_excerpt
    from vcebench.report.tables import method_label

    methods = _write_tree(tmp_path, _values(0))
    df, higher = _table(tmp_path, methods)
    table, marks, _ = pairs.task_pairs(tmp_path, TASK, df, higher)
    pairs.write_pairs(tmp_path, TASK, table)
    md = (tmp_path / f"{TASK}_pairs.md").read_text()
    assert md.index("## Verdict") < md.index("## L1")
    cut = table_excerpt(md, ["fire", "dime", "maskdime", "ace"], ["L1", "FR"], table=1)
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:4]] for ln in cut.splitlines()[2:]}
    for i, m in df["method"].items():
        if m == "input":
            continue
        want = [{"best": "**best**", "tied": "tied"}.get(marks[c].get(i), "") for c in ("L1", "FR")]
        assert cells[method_label(m)] == want, m
    assert cells["FiRe"] == ["**best**", "tied"] and cells["ACE"] == ["", ""]


def test_a_paper_tables_marks_come_from_the_tests_between_its_own_rows(tmp_path):
    """`vcebench report paper`'s tables are marked as the task tables are: by the paired tests between the rows
    of that table (Holm over its own pairs), written beside it; rows that regenerate are left out of both."""
    from vcebench.steps.paper import tested_marks

    methods = _write_tree(tmp_path, _values(0))
    df, higher = _table(tmp_path, methods)
    out = tmp_path / "paper"
    marks, note = tested_marks(tmp_path, TASK, df, higher, out, "table4")
    task_table, task_marks, _ = pairs.task_pairs(tmp_path, TASK, df, higher)
    assert marks == task_marks and note.marked  # the same rows: the same marks as the task table
    back = pd.read_csv(out / "table4_pairs.csv")
    assert len(back) == len(task_table) == 12 and "## Verdict" in (out / "table4_pairs.md").read_text()
    line = report.footer.marks_line(note, "paper/table4")
    assert "`paper/table4_pairs.md`" in line and "**Bold**" in line
    fire_row = int(df.index[df["method"] == "fire"][0])
    assert marks["L1"][fire_row] == "best"
    # a regenerating row is not ranked: FiRe's lead on L1 is then tested against the other two only
    marks2, _ = tested_marks(tmp_path, TASK, df, higher, out, "table5", unranked=["ace"])
    ace_row = int(df.index[df["method"] == "ace"][0])
    assert ace_row not in marks2["FR"] and len(pd.read_csv(out / "table5_pairs.csv")) == 6


def test_the_verdict_labels_columns_as_the_task_tables_print_them(tmp_path):
    """S3 is `S³` in a task table's markdown; the verdict must use the same label or a docs excerpt of it cannot
    name the column (`cols=S3`)."""
    from vcebench.report.excerpt import table_excerpt

    methods = _write_tree(tmp_path, _values(0))
    df, higher = _table(tmp_path, methods)
    table, _, _ = pairs.task_pairs(tmp_path, TASK, df, higher)
    table = table.replace({"column": {"L1": "S3"}})
    head = pairs.verdict_markdown(table).splitlines()[0]
    assert "S³↑" in head and "$" not in head
    assert "S³" in table_excerpt(pairs.pairs_markdown(TASK, table), ["fire", "dime"], ["S3"], table=1)
