"""`vcebench evaluate`: the task's metrics for one method, or the FID reference statistics.

Examples::

    vcebench evaluate --task synthfaces_smile --reference --out results/synthfaces_smile/fid_ref.npz
    vcebench evaluate --settings results/synthfaces_smile/fid_ref.settings.json --reference \\
        --out results/synthfaces_smile/fid_ref.npz
    vcebench evaluate --task synthfaces_smile --method fire \\
        --cfs results/synthfaces_smile/fire/counterfactuals.npz \\
        --fid-ref results/synthfaces_smile/fid_ref.npz --out results/synthfaces_smile/fire/metrics.json

Which metrics, on which subsets, with which networks: ``metrics/__init__.py``. Without
``--fid-ref`` the originals' features are computed on the fly (same numbers, slower).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..steps.evaluate import eval_config, eval_settings, evaluate_task, metric_families, samples_path, write_reference
from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="compute a method's metrics (or the FID reference statistics)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="the method's resolved settings file (the workflow's results/<task>/<method>/settings.json; "
                        "with --reference results/<task>/fid_ref.settings.json) in place of --task, --method and "
                        "--config")
    p.add_argument("--task", help="task name (config key `tasks`)")
    p.add_argument("--method", help="method name (recorded in metrics.json)")
    p.add_argument("--reference", action="store_true",
                   help="write the FID reference statistics of all evaluation-split originals to --out")
    p.add_argument("--cfs", help="counterfactuals.npz (default results/<task>/<method>/counterfactuals.npz)")
    p.add_argument("--fid-ref", help="fid_ref.npz written by --reference (default: compute on the fly)")
    p.add_argument("--out", help="output path (default results/<task>/<method>/metrics.json, "
                                 "or results/<task>/fid_ref.npz with --reference); the per-input record "
                                 "samples.npz is written beside metrics.json")
    p.add_argument("--data", help="rendered dataset cache folder (synthetic datasets; default: render in memory)")
    p.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    p.add_argument("--only", action="append", metavar="METRIC",
                   help="evaluate only these metric families (repeatable), e.g. --only FID --only FR; known: "
                        f"{', '.join(metric_families())} and the plug-ins' (vcebench.registry)")
    p.add_argument("--strict", action="store_true",
                   help="fail when a metric has too few samples (default: write null and the reason under "
                        "`skipped`, e.g. FID of a method with < 2 successful counterfactuals)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--n-eval", type=int, default=None, metavar="N",
                   help="the counterfactuals cover the first N evaluation inputs, not config `n_eval` "
                        "(`pareto.n_eval`)")
    add_config_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Resolves the task (and the method's name, given or the --cfs folder's) once into an
    :class:`~vcebench.protocol.run_settings.EvalSettings`, then writes the FID reference or metrics.json."""

    from ..config.load import ConfigError
    from ..core.io import check_writable

    if args.settings:
        settings, device = _from_settings_file(args)
        method = settings.method
    else:
        if not args.task:
            raise ConfigError("vcebench evaluate needs --task (or --settings)")
        cfg = eval_config(args.config, args.task, None if args.reference else args.method, args.n_eval)
        if not args.reference and not args.method and not args.cfs:
            raise ConfigError("vcebench evaluate needs --method (and/or --cfs), or --reference")
        method = None if args.reference else args.method or Path(args.cfs).parent.name
        settings, device = eval_settings(cfg, args.task, method, data_dir=args.data, model_dir=args.models)
    task = settings.task
    if args.reference:
        out = args.out or f"results/{task.name}/fid_ref.npz"
        check_writable(Path(out).parent, "the FID reference")
        write_reference(settings, out, device, not args.no_progress)
        return 0
    cfs = args.cfs or f"results/{task.name}/{method}/counterfactuals.npz"
    out = args.out or f"results/{task.name}/{method}/metrics.json"
    check_writable(Path(out).parent, "metrics.json")  # before the evaluation, not after it
    result = evaluate_task(settings, cfs, fid_ref=args.fid_ref, device=device, only=args.only,
                           progress=not args.no_progress, strict=args.strict,
                           samples_out=samples_path(out),
                           config_paths=[args.settings] if args.settings else args.config)
    from ..core.io import write_json

    write_json(out, result)
    for name, reason in result["skipped"].items():
        print(f"vcebench evaluate: warning: {name} skipped: {reason}", file=sys.stderr)
    shown = ", ".join(f"{k}={v:.4g}" if v is not None else f"{k}=skipped" for k, v in result["metrics"].items())
    print(f"{task.name}/{method}: {shown} ({result['seconds_total']:.1f} s) -> {out}")
    return 0


def _from_settings_file(args: argparse.Namespace):
    """(EvalSettings, torch device) of ``--settings`` (:func:`vcebench.steps.settings.evaluate_settings`): the
    file alone says the task, the method and the settings (with ``--reference``: the FID reference's record, the
    workflow's results/<task>/fid_ref.settings.json); ``--n-eval`` still overrides."""
    from ..config.load import ConfigError
    from ..steps.settings import evaluate_settings

    if args.task or args.method or args.config:
        raise ConfigError("--settings holds the task, the method and their settings: give no --task, --method or "
                          "--config with it")
    return evaluate_settings(args.settings, n_eval=args.n_eval, data_dir=args.data, model_dir=args.models)
