"""`vcebench report <subverb>`: task tables and figures, the paper's tables, and the CI metric regression.

Examples::

    vcebench report task --task synthfaces_smile --methods fire dime maskdime --data resources/data/synthfaces
    vcebench report gallery --task synthfaces_smile --methods fire dime --data resources/data/synthfaces
    vcebench report paper --out-dir results/paper
    vcebench report regression --reference results/reference/regression --tasks synthfaces_smile --out r.md
    vcebench report accept --reference results/reference/regression --tasks synthfaces_smile
    vcebench report seeds --task synthfaces_smile          # results/synthfaces_smile_seeds.{csv,md}
    vcebench report pareto --task synthfaces_smile         # results/synthfaces_smile_pareto.{csv,png}
    vcebench report pairs --task synthfaces_smile          # results/synthfaces_smile_pairs.{csv,md}
    vcebench report pairs --summary synthfaces_smile synthxray_pacemaker   # results/summary_pairs.md, summary_cd.png
    vcebench report tolerances --reference results/reference/regression   # tolerances.yaml from the seed spread
    vcebench report excerpt --check README.md        # the docs' table excerpts equal results/reference/default
    vcebench report provenance results               # each row's commit, versions, machine, settings hash
    vcebench report bundle --results results --task synthfaces_smile --out smile.tar   # a lab's results, one file
    vcebench report verify smile.tar                 # every hash, the judges, every cell recomputed here
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..steps.report import galleries, task_report
from . import add_config_arg, add_subverb, add_subverbs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="tables, figures, paper tables, metric regression (task, gallery, paper, "
                       "regression, accept, seeds, pareto, pairs, tolerances, excerpt, provenance, bundle, verify)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = add_subverbs(p)
    t = add_subverb(subs, "task", run_task, "a task's table (csv, md, tex), efficiency and qualitative figures")
    _task_arg(t)
    _methods_arg(t)
    _data_arg(t)
    _results_args(t)
    t.add_argument("--n-qualitative", type=int, default=6, help="samples in the qualitative figure (default 6)")

    g = add_subverb(subs, "gallery", run_gallery, "<out-dir>/<task>/<method>/gallery.png per method")
    _task_arg(g)
    _methods_arg(g)
    _data_arg(g)
    _results_args(g)
    g.add_argument("--n-gallery", type=int, default=8, help="samples per gallery (default 8)")
    g.add_argument("--models", default="resources/models", help="model folder (default resources/models)")

    pp = add_subverb(subs, "paper", run_paper, "the FiRe paper's Tables 1-6 and Figure 2")
    _results_args(pp)

    r = add_subverb(subs, "regression", run_regression, "compare <out-dir>/<task>.csv with the reference tables")
    _reference_args(r)
    _results_args(r)
    r.add_argument("--out", help="the regression report (markdown)")
    r.add_argument("--strict", action="store_true", help="fail on any change past the measured CPU-kind drift, "
                   "in either direction (what a behaviour-preserving change must pass)")
    r.add_argument("--mode", choices=["paired", "seeds"], default="paired",
                   help="paired (default): every per-input quantity against the reference's, input by input (the "
                   "reference's per-row records); seeds: each cell within its band over the generation seeds, "
                   "for a change that moves the random draws (docs/ci.md)")

    a = add_subverb(subs, "accept", run_accept, "copy the current task tables into the reference folder")
    _reference_args(a)
    _out_dir_arg(a, "folder holding the current <task>.{csv,md}")
    add_config_arg(a, resolved=True)

    sd = add_subverb(subs, "seeds", run_seeds, "the spread over config `seeds.seeds` of a task's table")
    _task_arg(sd)
    _methods_arg(sd)
    _results_args(sd)

    pa = add_subverb(subs, "pareto", run_pareto, "the Pareto table and figures of the variants of config `pareto`")
    _task_arg(pa)
    _results_args(pa)

    pr = add_subverb(subs, "pairs", run_pairs, "paired tests between a task's ranked rows (<out-dir>/<task>_pairs."
                     "{csv,md}), or with --summary their verdict over tasks (summary_pairs.md, summary_cd.png)")
    pr.add_argument("--task", help="task name (config key `tasks`)")
    _methods_arg(pr)
    pr.add_argument("--summary", nargs="+", metavar="TASK", help="summarize these tasks' <out-dir>/<task>_pairs.csv")
    _results_args(pr)

    ns = add_subverb(subs, "sets", run_sets, "the same task table from two network sets: each cell inside the "
                     "first set's interval or not, each metric's method order (how much the verdict is the networks')")
    ns.add_argument("--task", required=True)
    ns.add_argument("--a", required=True, metavar="DIR", help="results folder of the first set (<a>/<task>.csv)")
    ns.add_argument("--b", required=True, metavar="DIR", help="results folder of the second set")
    ns.add_argument("--names", nargs=2, default=["ref1", "ref2"], help="the two sets' names")
    ns.add_argument("--rank-exclude", nargs="*", default=["input", "truth"],
                    help="rows left out of the method order (reference rows; default: input truth)")
    ns.add_argument("--out", required=True, help="markdown file (a .json beside it holds every cell)")
    to = add_subverb(subs, "tolerances", run_tolerances, "derive <reference>/tolerances.yaml from the seed spread")
    _reference_args(to)
    _out_dir_arg(to, "folder holding <task>_seeds.{csv,md}")
    to.add_argument("--allow-missing-seeds", action="store_true",
                    help="derive with the tasks that have a seed spread; the others are held to the CPU-kind drift")
    add_config_arg(to, resolved=True)
    ex = add_subverb(subs, "excerpt", run_excerpt, "rewrite the marked table excerpts of documents from a "
                     "snapshot's task tables (--check: fail when one differs)")
    ex.add_argument("files", nargs="+", help="documents holding `<!-- begin:excerpt ... -->` markers")
    ex.add_argument("--snapshot", default="results/reference/default",
                    help="folder of the task tables <task>.md (default results/reference/default)")
    ex.add_argument("--check", action="store_true", help="write nothing; exit status 1 when a file differs")
    pv = add_subverb(subs, "provenance", run_provenance, "each row's provenance record (commit, dirty, versions, "
                     "machine, config and settings hashes, data files), one line per row")
    pv.add_argument("results", help="a results folder (its <task>/<method>/metrics.json) or one metrics.json")
    pv.add_argument("--json", action="store_true", help="print the records as JSON ({row: record})")
    bu = add_subverb(subs, "bundle", run_bundle, "one archive of a task's tables, rows, per-input records, "
                     "provenance, settings and counterfactuals, with a manifest of hashes and judges (docs/bundles.md)")
    bu.add_argument("--results", default="results", help="results folder holding <task>.csv and <task>/<method>/ "
                    "(default results)")
    bu.add_argument("--task", nargs="+", required=True, metavar="TASK", help="the task(s) whose table to bundle")
    bu.add_argument("--images", action="store_true", help="also every counterfactual as a PNG (images/, for people)")
    bu.add_argument("--models", default="resources/models",
                    help="the model folder the rows were scored with (default resources/models): its judges' hashes")
    bu.add_argument("--out", required=True, help="the bundle (an uncompressed tar)")
    add_config_arg(bu, resolved=True)
    ve = add_subverb(subs, "verify", run_verify, "check a bundle's hashes and judges, recompute every metric from "
                     "its counterfactuals with this harness's networks, compare cell by cell")
    ve.add_argument("bundle", help="a bundle written by `vcebench report bundle`")
    ve.add_argument("--models", default="resources/models", help="this harness's model folder (default "
                    "resources/models)")
    ve.add_argument("--data", help="rendered dataset folder (synthetic; default: render in memory) or real data")
    ve.add_argument("--out", help="also write the cell-by-cell table here (markdown)")
    add_config_arg(ve)


def _task_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task name (config key `tasks`)")


def _methods_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", nargs="*", help="rows (default: config `methods`)")


def _data_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="rendered synthetic data folder (the inputs the figures show)")


def _out_dir_arg(p: argparse.ArgumentParser, what: str = "output folder") -> None:
    p.add_argument("--out-dir", default="results", help=f"{what} (default results)")


def _results_args(p: argparse.ArgumentParser) -> None:
    """``--results`` (what the runs wrote), ``--out-dir`` (where the report goes), ``--config`` and
    ``--resolved-config``."""
    p.add_argument("--results", default="results", help="results folder holding <task>/<method>/ (default results)")
    _out_dir_arg(p)
    add_config_arg(p, resolved=True)


def _reference_args(p: argparse.ArgumentParser) -> None:
    """``--reference`` and ``--tasks`` of the subverbs that compare with or write a reference."""
    p.add_argument("--reference", default="results/reference/regression",
                   help="reference folder (default results/reference/regression)")
    p.add_argument("--tasks", nargs="*", help="tasks (default: config `run_tasks`)")


def _config(args: argparse.Namespace) -> dict:
    """The run's merged config (``--resolved-config``, the workflow's), else the ``--config`` files."""
    from ..steps.settings import job_config

    return job_config(args.config, args.resolved_config, check=False)


def run_task(args: argparse.Namespace) -> int:
    """Writes <out-dir>/<task>.{csv,md,tex} from each method's metrics.json and profile.json, with each metric
    column checked against the truth row (``<task>_validity.json``, ``vcebench.report.validity``), the efficiency
    figure and the qualitative figure (inputs, ground truth on synthetic tasks, every method's CFs)."""
    from ..config.tasks import task_methods

    cfg = _config(args)
    task_report(cfg, args.task, args.methods or task_methods(cfg, args.task, cfg["methods"]), Path(args.results),
                 Path(args.out_dir), args.data, args.n_qualitative)
    return 0


def run_gallery(args: argparse.Namespace) -> int:
    """Writes one gallery per method: inputs, CFs and |difference| on one scale for all methods, with the
    task classifier's p(target) before and after (needs the classifier)."""
    from ..config.tasks import get_task, task_methods

    cfg = _config(args)
    galleries(cfg, get_task(cfg, args.task), args.methods or task_methods(cfg, args.task, cfg["methods"]),
               Path(args.results), Path(args.out_dir), args.data, args.n_gallery, args.models)
    return 0


def run_paper(args: argparse.Namespace) -> int:
    """Writes <out-dir>/tables.{md,tex} and figure2.png for the configured tasks (synthetic analogues by
    default), with the paper's reported numbers beside the measured rows; the rows of each table come from
    config `methods`, `paper_methods` and `variants` (vcebench.steps.paper)."""
    from ..steps.paper import paper_tables

    print(paper_tables(_config(args), Path(args.results), Path(args.out_dir)))
    return 0


def run_regression(args: argparse.Namespace) -> int:
    """Compares each task's <out-dir>/<task>.csv and its rows' per-input records with the reference: input by
    input (``--mode paired``, the default) or within <reference>/tolerances.yaml's seed bands (``--mode seeds``);
    ``--strict``: within the measured CPU-kind drift. Exit status 1 when a cell regressed (changed)."""
    from ..config.kernels import cpu_kind
    from ..steps.regression import failures_markdown, regression

    cfg = _config(args)
    text, failed, note = regression(cfg, Path(args.reference), args.tasks or cfg["run_tasks"], Path(args.results),
                                    Path(args.out_dir), cpu_kind(), strict=args.strict,
                                    out=Path(args.out) if args.out else None, mode=args.mode)
    if note:
        print(f"vcebench report regression: {note}", file=sys.stderr)
    print(text)
    if failed:
        print(failures_markdown(failed), file=sys.stderr)
        return 1
    return 0


def run_seeds(args: argparse.Namespace) -> int:
    """Writes <out-dir>/<task>_seeds.{csv,md}: each method's metrics over the generation seeds."""
    from ..config.tasks import task_methods
    from ..steps.report import seed_report

    cfg = _config(args)
    methods = args.methods or task_methods(cfg, args.task, cfg["methods"])
    print(seed_report(cfg, args.task, methods, Path(args.results), Path(args.out_dir)).read_text())
    return 0

def run_pairs(args: argparse.Namespace) -> int:
    """Writes <out-dir>/<task>_pairs.{csv,md} from the rows' samples.npz (vcebench.report.pairs), or with --summary
    <out-dir>/summary_pairs.md and summary_cd.png from the tasks' pairs (vcebench.report.pair_summary)."""
    from ..config.load import ConfigError
    from ..config.tasks import task_methods
    from ..steps.pairs import pairs_report, pairs_summary

    if bool(args.task) == bool(args.summary):
        raise ConfigError("vcebench report pairs needs --task TASK or --summary TASK [TASK ...] (one of them)")
    if args.summary:
        print(pairs_summary(args.summary, Path(args.out_dir)))
        return 0
    cfg = _config(args)
    methods = args.methods or task_methods(cfg, args.task, cfg["methods"])
    print(pairs_report(cfg, args.task, methods, Path(args.results), Path(args.out_dir)).read_text())
    return 0


def run_sets(args: argparse.Namespace) -> int:
    """Writes --out (markdown) and its .json: the task's table of set --b against set --a."""
    from ..steps.report import compare_sets

    out = Path(args.out)
    compare_sets(args.task, Path(args.a), Path(args.b), args.rank_exclude, args.names, out)
    print(out.read_text())
    return 0

def run_pareto(args: argparse.Namespace) -> int:
    """Writes <out-dir>/<task>_pareto.{csv,png} and _pareto_snr.png from the variants of config `pareto`."""
    from ..steps.report import pareto_report

    print(pareto_report(_config(args), args.task, Path(args.results), Path(args.out_dir)).to_string())
    return 0

def run_tolerances(args: argparse.Namespace) -> int:
    """Derives <reference>/tolerances.yaml, one tolerance per cell, from <out-dir>/<task>_seeds.csv of --tasks
    (vcebench/report/seeds.py) for the reference tables accepted from <out-dir>; writes the detection power
    (<reference>/detection.md) and copies the seed tables beside them."""
    from ..steps.regression import write_tolerances

    cfg = _config(args)
    head, power = write_tolerances(cfg, Path(args.reference), args.tasks or cfg["run_tasks"], Path(args.out_dir),
                                   Path(__file__).resolve().parents[2], args.allow_missing_seeds)
    print(head)
    print(power)
    return 0


def run_excerpt(args: argparse.Namespace) -> int:
    """Rewrites (or with --check compares) every marked excerpt of the files from --snapshot."""
    from ..steps.report import sync_excerpts

    stale = sync_excerpts([Path(f) for f in args.files], Path(args.snapshot), write=not args.check)
    for f in stale:
        print(f"{f}: {'differs from' if args.check else 'rewritten from'} {args.snapshot}"
              + (f" (`vcebench report excerpt {f}` rewrites it)" if args.check else ""))
    return 1 if (stale and args.check) else 0


def run_provenance(args: argparse.Namespace) -> int:
    """Prints each row's provenance record (``vcebench.core.provenance``): a line per row, or --json; exit
    status 1 when RESULTS holds no metrics.json."""
    import json

    from ..core.provenance import describe_row, rows

    found = rows(args.results)
    if not found:
        print(f"vcebench report provenance: no metrics.json of a task row under {args.results}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for row, rec in found.items():
        print(f"{row}: {describe_row(rec)}")
    return 0


def run_bundle(args: argparse.Namespace) -> int:
    """Writes --out: the tables of --task in --results, each row's metrics.json (with provenance), samples.npz,
    settings.json, profile.json and counterfactuals.npz (--images: PNGs too), and manifest.json (every member's
    sha256, the judges' file hashes from --models, the harness commit). Deterministic: the same results, the
    same bytes."""
    from ..steps.bundle import make_bundle

    manifest = make_bundle(_config(args), Path(args.results), args.task, Path(args.out), images=args.images,
                           model_dir=args.models)
    judges = "; ".join(f"{t}: " + ", ".join(f"{r} " + " ".join(f"{f} {h[:8]}" for f, h in j["files"].items())
                                            for r, j in js.items()) for t, js in manifest["judges"].items())
    print(f"{args.out}: {len(manifest['members'])} members, {len(manifest['rows'])} rows; judges {judges}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Refuses (exit status 2, one line) a bundle with a member that does not match the manifest's sha256 or
    scored by other judges than this harness's (--models, --config); else recomputes every row's metrics from its
    counterfactuals with `vcebench evaluate`'s code and prints each cell: bundled, recomputed, status (exact on
    the CPU kind the rows were made on, else within the CPU-kind drift). Exit status 1 when a cell differs."""
    from ..core.io import write_text
    from ..steps.bundle import verify_bundle

    text, failed, note = verify_bundle(Path(args.bundle), args.config, model_dir=args.models, data_dir=args.data)
    print(f"vcebench report verify: {note}", file=sys.stderr)
    print(text)
    if args.out:
        write_text(args.out, f"{note}\n\n{text}")
    if failed:
        print(f"vcebench report verify: {len(failed)} cell(s) differ: " + ", ".join(
            f"{c['task']}/{c['method']} {c['column']}" for c in failed[:10]) + (" ..." if len(failed) > 10 else ""),
            file=sys.stderr)
        return 1
    print(f"vcebench report verify: {args.bundle}: every recomputed cell matches", file=sys.stderr)
    return 0


def run_accept(args: argparse.Namespace) -> int:
    """Accepts the current results as the reference of this kind of CPU: copies <out-dir>/<task>.{csv,md}, each
    row's per-input flips and records (samples/<task>/<method>.npz) into --reference (or its cpu/<kind>/ when
    --reference was made on another kind) with a machine.json."""
    from ..steps.regression import accept

    cfg = _config(args)
    kind, ref_dir, others = accept(args.tasks or cfg["run_tasks"], Path(args.reference), Path(args.out_dir),
                                   copied=lambda path: print(f"reference updated: {path}"))
    if ref_dir.resolve() == Path(args.reference).resolve():  # its records: the paired part of detection.md
        from ..steps.regression import refresh_paired_detection

        print(f"reference updated: {refresh_paired_detection(cfg, ref_dir, args.tasks or cfg['run_tasks'])}")
    print(f"reference of this CPU kind ({kind}): {ref_dir}")
    for d, other in others:
        print(f"also kept: {d} ({other}); if this change moved the numbers, delete its tables "
              "(stale) and accept again on that kind of CPU (docs/ci.md)")
    return 0
