"""`vcebench report`: task tables and figures, the paper's tables, and the CI metric regression.

Examples::

    vcebench report --task synthfaces_smile --methods fire dime maskdime --data resources/data/synthfaces
    vcebench report --task synthfaces_smile --gallery --methods fire dime --data resources/data/synthfaces
    vcebench report --paper --out-dir results/paper
    vcebench report --regression --reference results/reference/quick --tasks synthfaces_smile --out r.md
    vcebench report --update-reference --reference results/reference/quick --tasks synthfaces_smile
    vcebench report --seeds --task synthfaces_smile          # results/synthfaces_smile_seeds.{csv,md}
    vcebench report --tolerances --reference results/reference/quick   # tolerances.yaml from the seed spread
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import yaml

from .. import workflow as wf
from ..cli import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="tables, figures, paper tables, metric regression",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(p)
    p.add_argument("--task")
    p.add_argument("--methods", nargs="*", help="rows (default: config `methods`)")
    p.add_argument("--data", help="rendered synthetic data folder (for the qualitative figure)")
    p.add_argument("--results", default="results", help="results folder holding <task>/<method>/")
    p.add_argument("--out-dir", default="results")
    p.add_argument("--n-qualitative", type=int, default=6)
    p.add_argument("--gallery", action="store_true",
                   help="with --task: <out-dir>/<task>/<method>/gallery.png per method (needs the classifier)")
    p.add_argument("--n-gallery", type=int, default=8, help="samples per gallery (default 8)")
    p.add_argument("--models", default="resources/models", help="model folder (for --gallery)")
    p.add_argument("--paper", action="store_true", help="the FiRe paper's Tables 1-6 and Figure 2")
    p.add_argument("--regression", action="store_true", help="compare results/<task>.csv with --reference")
    p.add_argument("--update-reference", action="store_true", help="copy current tables into --reference")
    p.add_argument("--seeds", action="store_true",
                   help="the spread over config `seeds.seeds` of --task's table (results/<task>_seeds.{csv,md})")
    p.add_argument("--pareto", action="store_true",
                   help="results/<task>_pareto.png and _pareto_snr.png from the variants of config `pareto`")
    p.add_argument("--tolerances", action="store_true",
                   help="derive <reference>/tolerances.yaml from results/<task>_seeds.csv of --tasks")
    p.add_argument("--reference", default="results/reference/quick")
    p.add_argument("--tasks", nargs="*")
    p.add_argument("--out", help="regression report (markdown)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import load_config

    cfg = load_config(args.config)
    if args.regression:
        return _regression(cfg, args)
    if args.update_reference:
        return _update_reference(cfg, args)
    if args.seeds:
        return _seeds(cfg, args)
    if args.pareto:
        return _pareto(cfg, args)
    if args.tolerances:
        return _tolerances(cfg, args)
    if args.paper:
        return _paper(cfg, args)
    if not args.task:
        raise SystemExit("vcebench report: give --task, --paper, --regression or --update-reference")
    if args.gallery:
        from ..tasks import get_task

        task = get_task(cfg, args.task)
        _galleries(cfg, task, args.methods or cfg["methods"], Path(args.results), Path(args.out_dir), args.data,
                   args.n_gallery, args.models)
        return 0
    _task_report(cfg, args.task, args.methods or cfg["methods"], Path(args.results), Path(args.out_dir),
                 args.data, args.n_qualitative)
    return 0


def _task_report(cfg, task_name, methods, results: Path, out_dir: Path, data_dir, n_qual: int) -> None:
    from .. import figures, report
    from ..tasks import get_task

    task = get_task(cfg, task_name)
    df, higher = report.load_task_table(results, task_name, methods, task.kind, task.synthetic)
    footer = report.task_footer(df, report.load_metrics_json(results, task_name, methods), _tuned_file(cfg, task_name),
                                _feature_dim(results / task_name / "fid_ref.npz"))
    report.write_task_tables(df, higher, out_dir, task_name, footer=footer)
    figures.efficiency_figure(out_dir / f"{task_name}_efficiency.png", df, title=task_name)
    _qualitative(cfg, task, methods, results, out_dir / f"{task_name}_qualitative.png", data_dir, n_qual)
    print((out_dir / f"{task_name}.md").read_text())


def _tuned_file(cfg, task_name: str) -> dict | None:
    """The tuned file of ``task_name`` (rule, validation split) when the run read one."""
    info = (cfg.get("tuned") or {}).get(task_name)
    if not info:
        return None
    path = Path(__file__).resolve().parents[2] / info["file"]  # tuned_dir is relative to the repository
    return yaml.safe_load(path.read_text()) if path.exists() else None


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
    from ..data import eval_split_name, get_synthetic, load_split
    from ..io import load_npz, to_uint8

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
    from .. import figures

    s = _samples(cfg, task, methods, results, data_dir, n)
    flipped = {m: f for m, f in s["flipped"].items() if f is not None}
    figures.qualitative_figure(path, s["inputs"], s["cf"], gt=s["gt"], ids=s["ids"], flipped=flipped)


def _galleries(cfg, task, methods, results: Path, out_dir: Path, data_dir, n: int, model_dir: str) -> None:
    """``<out_dir>/<task>/<method>/gallery.png`` for every method, one |diff| scale for all of them; the
    task's classifier gives p(target) before / after and the flipped marks."""
    import torch

    from .. import figures
    from ..data import attribute_names
    from ..io import from_uint8
    from ..models import load_task_models
    from ..runtime import setup_torch

    device = setup_torch(cfg.get("threads"), cfg.get("device", "cpu"), cfg.get("cuda"))
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


def _paper(cfg, args) -> int:
    """Tables 1-6 and Figure 2 for the configured tasks (synthetic analogues by default)."""
    import pandas as pd

    from .. import paper_numbers, report
    from ..tasks import get_task

    results, out = Path(args.results), Path(args.out_dir)
    methods = cfg["methods"]
    md, tex = ["# The FiRe paper's tables, regenerated by vcebench", ""], []
    faces = [t for t in cfg["run_tasks"] if get_task(cfg, t).kind == "faces"]
    xray = [t for t in cfg["run_tasks"] if get_task(cfg, t).kind == "xray"]
    for title, tasks in (("Tables 1/2 (faces)", faces), ("Table 3 (x-ray)", xray)):
        for t in tasks:
            task = get_task(cfg, t)
            df, higher = report.load_task_table(results, t, methods, task.kind, task.synthetic)
            rep = paper_numbers.reported(t)
            if rep:
                extra = pd.DataFrame([{"method": f"{m} (reported)", **v} for m, v in rep.items()])
                df = pd.concat([df, extra], ignore_index=True)
            md.append(report.to_markdown(df, higher, title=f"{title}: {t}"))
            tex.append(report.to_latex(df, higher, caption=f"{title}: {t}", label=f"tab:{t}"))
    ablation_task = faces[0] if faces else (cfg["run_tasks"] or [None])[0]
    if ablation_task:
        task = get_task(cfg, ablation_task)
        groups = {
            "Table 4 (ablation)": ["fire_one_step", "fire_reverse", "fire_fixed", "fire_fixed_maskdime_mask",
                                   "fire_fixed_fire_mask", "fire_no_early_stop", "fire"],
            "Table 5 (refinement budget K)": ["fire_K5", "fire_K10", "fire", "fire_K20"],
            "Table 6 (noise level t)": ["fire_t02", "fire_t04", "fire_t06", "fire_t08", "fire"],
        }
        available = set(cfg.get("paper_methods", [])) | {"fire"}
        for title, rows in groups.items():
            rows = [r for r in rows if r in available]
            df, higher = report.load_task_table(results, ablation_task, rows, task.kind, task.synthetic)
            md.append(report.to_markdown(df, higher, title=f"{title}: {ablation_task}"))
            tex.append(report.to_latex(df, higher, caption=f"{title}: {ablation_task}"))
        df, _ = report.load_task_table(results, ablation_task, methods, task.kind, task.synthetic)
        from .. import figures

        figures.efficiency_figure(out / "figure2.png", df, title=f"Figure 2 analogue: {ablation_task}")
    report.write_text(out / "tables.md", "\n".join(md))
    report.write_text(out / "tables.tex", "\n".join(tex))
    print("\n".join(md))
    return 0


def _regression(cfg, args) -> int:
    import pandas as pd

    from .. import report
    from ..tasks import get_task

    ref_dir = Path(args.reference)
    tol_file = ref_dir / "tolerances.yaml"
    if not tol_file.exists():
        raise SystemExit(f"vcebench report: no tolerances at {tol_file}; create the reference with "
                         f"`vcebench report --update-reference --reference {ref_dir}`")
    tolerances = yaml.safe_load(tol_file.read_text()) or {}
    all_rows, failures = [], []
    for t in args.tasks or cfg["run_tasks"]:
        task = get_task(cfg, t)
        ref = pd.read_csv(ref_dir / f"{t}.csv")
        cur = pd.read_csv(Path(args.out_dir) / f"{t}.csv")
        _, higher = report.load_task_table(Path(args.results), t, list(cur["method"]), task.kind, task.synthetic)
        rows, fails = report.regression_check(cur, ref, tolerances, higher, t)
        all_rows += rows
        failures += fails
    text = report.regression_markdown(all_rows)
    status = (f"{len(failures)} metric(s) regressed past tolerance" if failures
              else f"no regression ({len(all_rows)} metrics within tolerance)")
    text = f"# Metric regression against {ref_dir}\n\n{status}\n\n" + text
    if args.out:
        report.write_text(Path(args.out), text)
    print(text)
    if failures:
        print(report.regression_markdown(failures), file=sys.stderr)
        return 1
    return 0


SEEDS_DEFAULTS = {"seeds": [0, 1, 2], "z": 3.0, "floors": {}}


def _seeds(cfg, args) -> int:
    """``results/<task>_seeds.{csv,md}``: each method's metrics over the generation seeds."""
    from .. import report, seeds
    from ..tasks import get_task

    if not args.task:
        raise SystemExit("vcebench report --seeds needs --task")
    sc = {**SEEDS_DEFAULTS, **(cfg.get("seeds") or {})}
    task = get_task(cfg, args.task)
    methods = args.methods or cfg["methods"]
    tables = {}
    main = Path(args.results) / args.task
    for s, d in seeds.seed_dirs(Path(args.results), args.task, list(sc["seeds"]), int(cfg["seed"])).items():
        tables[s], _ = report.load_task_table(d.parent, d.name, methods, task.kind, task.synthetic, profiles=main)
    spread = seeds.seed_table(tables)
    out = Path(args.out_dir)
    with report.atomic_path(out / f"{args.task}_seeds.csv") as tmp:
        spread.to_csv(tmp, index=False, float_format="%.6g")
    report.write_text(out / f"{args.task}_seeds.md", seeds.seed_markdown(args.task, spread, list(sc["seeds"])))
    print((out / f"{args.task}_seeds.md").read_text())
    return 0


def _pareto(cfg, args) -> int:
    import pandas as pd

    from .. import report
    from ..tasks import get_task

    if not args.task:
        raise SystemExit("vcebench report --pareto needs --task")
    task = get_task(cfg, args.task)
    rows = wf.pareto_methods(cfg)
    df, higher = report.load_task_table(Path(args.results), args.task, [m for m, _, _ in rows], task.kind,
                                        task.synthetic)
    df = df.assign(base=[b for _, b, _ in rows], sweep=[s for _, _, s in rows])
    out = Path(args.out_dir)
    with report.atomic_path(out / f"{args.task}_pareto.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")
    report.pareto_figures(out / f"{args.task}_pareto.png", out / f"{args.task}_pareto_snr.png", df, higher,
                          title=args.task)
    print(pd.DataFrame(df).to_string())
    return 0


def _tolerances(cfg, args) -> int:
    """``<reference>/tolerances.yaml`` derived from the seed spreads of ``--tasks`` (vcebench/seeds.py)."""
    import pandas as pd

    from .. import report, seeds

    sc = {**SEEDS_DEFAULTS, **(cfg.get("seeds") or {})}
    tasks = args.tasks or cfg["run_tasks"]
    spreads = {t: pd.read_csv(Path(args.out_dir) / f"{t}_seeds.csv") for t in tasks}
    tol = seeds.derive_tolerances(list(spreads.values()), dict(sc["floors"]), float(sc["z"]))
    ref = Path(args.reference)
    ref.mkdir(parents=True, exist_ok=True)
    report.write_text(ref / "tolerances.yaml", seeds.tolerance_yaml(tol, list(sc["seeds"]), tasks, float(sc["z"]),
                                                                   dict(sc["floors"]), spreads))
    for t in tasks:
        shutil.copyfile(Path(args.out_dir) / f"{t}_seeds.md", ref / f"{t}_seeds.md")
    print((ref / "tolerances.yaml").read_text())
    return 0


def _update_reference(cfg, args) -> int:
    ref_dir = Path(args.reference)
    ref_dir.mkdir(parents=True, exist_ok=True)
    for t in args.tasks or cfg["run_tasks"]:
        for ext in ("csv", "md"):
            src = Path(args.out_dir) / f"{t}.{ext}"
            shutil.copyfile(src, ref_dir / src.name)
            print(f"reference updated: {ref_dir / src.name}")
    return 0
