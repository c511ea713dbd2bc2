"""`vcebench report` as a library (its arguments and printing: :mod:`vcebench.cli.report`): task tables and
figures, galleries, the seeds' spread, Pareto fronts, network sets compared, the documents' excerpts. The CI
regression, its reference and tolerances: :mod:`vcebench.steps.regression`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config.load import read_yaml
from ..core.io import atomic_path, write_text


def task_report(cfg, task_name, methods, results: Path, out_dir: Path, data_dir, n_qual: int) -> None:
    from .. import report
    from ..config.tasks import get_task, is_truth
    from ..report import figures, pairs

    task = get_task(cfg, task_name)
    df, higher = report.load_task_table(results, task_name, methods, task.kind, task.synthetic)
    metas = report.load_metrics_json(results, task_name, methods)
    regen = report.regenerating_rows(metas)  # rows that regenerate rather than edit: marked, never ranked
    _, marks, note = pairs.task_pairs(results, task_name, df, higher, regen)  # the marks of the paired tests
    footer = report.task_footer(df, metas, _tuned_file(cfg, task_name),
                                _feature_dim(results / task_name / "fid_ref.npz"),
                                profiles=report.load_profiles(results, task_name, methods), marks=note, task=task_name)
    footer += report.resolution_lines(metas, task.dataset, task.attribute)
    checks = report.check_columns(df, higher)  # each metric column against the truth row (none without one)
    footer += report.validity_lines(checks, task_name, task.attribute)
    attacks = report.check_attacks(df, checks)  # how each column treats a row that is no counterfactual
    footer += report.attack_lines(attacks, checks)
    footer += report.regeneration_lines(regen, task.attribute)
    report.write_task_tables(df, higher, out_dir, task_name, footer=footer, marked=report.marked_columns(checks),
                             marks=marks, flagged=regen)
    report.write_validity(out_dir / f"{task_name}_validity.json", df, checks, task_name, attacks)
    costs = df[~df["method"].map(is_truth).astype(bool)]  # the truth row has no cost
    figures.efficiency_figure(out_dir / f"{task_name}_efficiency.png", costs, title=task_name)
    _qualitative(cfg, task, methods, results, out_dir / f"{task_name}_qualitative.png", data_dir, n_qual)
    print((out_dir / f"{task_name}.md").read_text())


def seed_report(cfg, task_name: str, methods: list[str], results: Path, out_dir: Path) -> Path:
    """`report seeds`: writes ``<out_dir>/<task>_seeds.{csv,md}``, each method's metrics over the generation
    seeds of config ``seeds.seeds`` (the runs of the other seeds under ``<results>/seeds/``, their costs from
    the main run's profiles); returns the markdown file."""
    from .. import report
    from ..config.tasks import get_task
    from ..report import seeds

    sc = cfg["seeds"]
    task = get_task(cfg, task_name)
    tables = {}
    main = results / task_name
    for s, d in seeds.seed_dirs(results, task_name, list(sc["seeds"]), int(cfg["seed"])).items():
        tables[s], _ = report.load_task_table(d.parent, d.name, methods, task.kind, task.synthetic, profiles=main)
    spread = seeds.seed_table(tables)
    with atomic_path(out_dir / f"{task_name}_seeds.csv") as tmp:
        spread.to_csv(tmp, index=False, float_format="%.6g")
    write_text(out_dir / f"{task_name}_seeds.md", seeds.seed_markdown(task_name, spread, list(sc["seeds"])))
    return out_dir / f"{task_name}_seeds.md"


def compare_sets(task_name: str, a: Path, b: Path, rank_exclude: list[str], names: list[str], out: Path) -> None:
    """`report sets`: the task table ``<b>/<task>.csv`` of one network set against ``<a>/<task>.csv`` of
    another (each cell inside the first set's interval or not, each metric's method order without the rows
    ``rank_exclude``), and where both sets have their paired tests the pairs each separates
    (:func:`network_sets.surviving_pairs`), as markdown at ``out`` and every cell in the .json beside it."""
    import pandas as pd

    from ..core.io import write_json
    from ..registry import column_directions
    from ..report import network_sets

    ta = pd.read_csv(a / f"{task_name}.csv")
    tb = pd.read_csv(b / f"{task_name}.csv")
    ranked = [m for m in ta["method"] if m not in rank_exclude]
    res = network_sets.compare(ta, tb, column_directions(), ranked)
    pa, pb = a / f"{task_name}_pairs.csv", b / f"{task_name}_pairs.csv"
    if pa.is_file() and pb.is_file():  # the paired verdicts of both sets (pairs.py), compared pair by pair
        res["pairs"] = network_sets.surviving_pairs(pd.read_csv(pa), pd.read_csv(pb))
    write_text(out, network_sets.to_markdown(task_name, res, *names))
    write_json(out.with_suffix(".json"), res)


def pareto_report(cfg, task_name: str, results: Path, out_dir: Path):
    """`report pareto`: writes ``<out_dir>/<task>_pareto.{csv,png}`` and ``_pareto_snr.png`` from the variants
    of config ``pareto`` (``config.tasks.pareto_methods``); returns the table."""
    from .. import report
    from ..config.tasks import get_task, pareto_methods

    task = get_task(cfg, task_name)
    rows = pareto_methods(cfg)
    df, higher = report.load_task_table(results, task_name, [m for m, _, _ in rows], task.kind, task.synthetic)
    df = df.assign(base=[b for _, b, _ in rows], sweep=[s for _, _, s in rows])
    with atomic_path(out_dir / f"{task_name}_pareto.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")
    report.pareto_figures(out_dir / f"{task_name}_pareto.png", out_dir / f"{task_name}_pareto_snr.png", df, higher,
                          title=task_name)
    return df


def _tuned_file(cfg, task_name: str) -> dict | None:
    """The tuned file of ``task_name`` (rule, validation split) when the run read one."""
    info = (cfg.get("tuned") or {}).get(task_name)
    if not info:
        return None
    path = Path(__file__).resolve().parents[2] / info["file"]  # tuned_dir is relative to the repository
    return read_yaml(path) if path.exists() else None


def _feature_dim(path: Path) -> int | None:
    """The FID features' dimension from ``fid_ref.npz`` (None without one)."""
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        return int(z["features"].shape[1]) if "features" in z.files else None


def spread(ids: list[int], n: int) -> list[int]:
    """``n`` ids evenly spaced over the sorted ``ids`` (first and last included): consecutive ids of the
    synthetic faces share an identity, so the first ``n`` would often show one face ``n`` times."""
    if n >= len(ids):
        return list(ids)
    if n <= 1:
        return list(ids[:n])
    return [ids[round(i * (len(ids) - 1) / (n - 1))] for i in range(n)]


def _samples(cfg, task, methods, results: Path, data_dir, n: int) -> dict:
    """``n`` evaluation samples explained by every method (spread over the ids): uint8 inputs, ground
    truth (synthetic tasks), and per method the CFs, targets and `flipped` flags of those samples."""
    from ..core.io import load_npz, to_uint8
    from ..data import eval_split_name, get_synthetic, load_split

    cfs = {m: load_npz(results / task.name / m / "counterfactuals.npz") for m in methods}
    common = set.intersection(*(set(c["sample_id"].tolist()) for c in cfs.values()))
    ids = spread(sorted(common), n)
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), data_dir=data_dir)
    import torch

    idx = split.index_of(torch.tensor(ids))
    out = {"ids": ids, "inputs": to_uint8(split.float_images(idx)), "gt": None, "cf": {}, "target": {},
           "flipped": {}}
    if task.synthetic:
        out["gt"] = to_uint8(get_synthetic(cfg, task.dataset).gt_counterfactuals(ids, task.attribute))
    for m, c in cfs.items():
        pos = {int(s): i for i, s in enumerate(c["sample_id"])}
        rows = [pos[s] for s in ids]
        out["cf"][m], out["target"][m] = c["cf"][rows], c["target"][rows]
        out["flipped"][m] = c["flipped"][rows] if "flipped" in c else None
    return out


def _qualitative(cfg, task, methods, results: Path, path: Path, data_dir, n: int) -> None:
    from ..config.tasks import is_truth
    from ..report import figures

    s = _samples(cfg, task, methods, results, data_dir, n)
    flipped = {m: f for m, f in s["flipped"].items() if f is not None}
    # a truth row takes the ground-truth column's place (first after the input), so the truth is drawn once
    truth = [m for m in s["cf"] if is_truth(m)]
    cfs = {m: s["cf"][m] for m in truth + [m for m in s["cf"] if m not in truth]}
    figures.qualitative_figure(path, s["inputs"], cfs, gt=None if truth else s["gt"], ids=s["ids"], flipped=flipped)


def galleries(cfg, task, methods, results: Path, out_dir: Path, data_dir, n: int, model_dir: str) -> None:
    """``<out_dir>/<task>/<method>/gallery.png`` for every method, one |diff| scale for all of them; the
    task's classifier gives p(target) before / after and the flipped marks."""
    import torch

    from ..core.io import from_uint8
    from ..core.runtime import setup_torch
    from ..data import attribute_names
    from ..models import load_task_models
    from ..report import figures

    device = setup_torch(cfg["threads"], cfg["device"], cfg["cuda"])
    s = _samples(cfg, task, methods, results, data_dir, n)
    clf = load_task_models(cfg, task, roles=("classifier",), device=str(device), model_dir=model_dir).classifier

    def p_of(u8: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return torch.softmax(clf(from_uint8(u8).to(device)).float(), 1).cpu().numpy()

    p_x = p_of(s["inputs"])
    gt_diff = figures.abs_diff(s["gt"], s["inputs"]) if s["gt"] is not None else None
    vmax = figures.diff_scale(gt_diff, *(figures.abs_diff(c, s["inputs"]) for c in s["cf"].values()))
    names = ("not " + task.attribute, task.attribute) if task.attribute in attribute_names(task.dataset) else \
        ("0", "1")
    for m in methods:
        tgt = s["target"][m].astype(np.int64)
        rows = np.arange(len(tgt))
        p_cf = p_of(s["cf"][m])
        flipped = p_cf.argmax(1) == tgt
        figures.gallery_figure(out_dir / task.name / m / "gallery.png", m, s["inputs"], s["cf"][m],
                               p_x[rows, tgt], p_cf[rows, tgt], tgt, flipped, vmax, gt=s["gt"], ids=s["ids"],
                               class_names=names)


def sync_excerpts(files: list[Path], snapshot: Path, write: bool) -> list[Path]:
    """The files whose marked excerpts differ from ``snapshot``'s tables (:mod:`vcebench.report.excerpt`),
    rewritten when ``write``; ``UserError`` (one line) on a marker, row or column the snapshot lacks, and on a
    table that quotes results outside an excerpt or an archive block (``excerpt.unmarked_quotes``)."""
    from ..core.errors import UserError
    from ..report.excerpt import ExcerptError, sync, unmarked_quotes

    stale = []
    for f in files:
        text = f.read_text()
        try:
            new = sync(text, snapshot)
            unmarked = unmarked_quotes(text, snapshot)
        except ExcerptError as e:
            raise UserError(f"{f}: {e}") from None
        if unmarked:
            raise UserError(f"{f}: {len(unmarked)} table(s) quote results outside an excerpt or an archive block, "
                            f"first at {unmarked[0]} (mark it `<!-- begin:excerpt ... -->`, or "
                            "`<!-- begin:archive COMMIT why -->` when it quotes an earlier commit's results)")
        if new != text:
            stale.append(f)
            if write:
                write_text(f, new)
    return stale
