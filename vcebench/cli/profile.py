"""`vcebench profile <subverb>`: FLOPs, NFE, time and memory per counterfactual.

Examples::

    vcebench profile task --task synthfaces_smile --method fire --n 32
    vcebench profile task --task synthfaces_smile --method fire --timings timing-0-of-2.json timing-1-of-2.json
    vcebench profile compaction --task synthfaces_smile --method fire
    vcebench profile paper-scale celeba                  # random-weight paper-size networks, no data
    vcebench profile paper-scale celeba --fire-steps-from results/synthfaces_smile/fire/profile.json
    vcebench profile gpu --out results/reference         # wall time at paper scale, on a GPU
    vcebench profile gpu --tiny --device cpu --out /tmp/t  # the same code path on a CPU in seconds
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.io import write_json
from . import add_config_arg, add_subverb, add_subverbs

PAPER_DATASETS = ("celeba", "celebahq", "chexpert")  # vcebench.costs.paper_nets.SETTINGS (a test checks)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="FLOPs, NFE, time and memory per counterfactual (task, compaction, "
                       "paper-scale, gpu)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = add_subverbs(p)
    t = add_subverb(subs, "task", run_task, "profile.json of one or more methods on a task's evaluation inputs")
    _task_args(t)
    t.add_argument("--method", action="append", required=True,
                   help="method name (config key `methods`, or <method>_<variant>); repeat it to profile several "
                        "methods in one process (the workflow does one job per task)")
    t.add_argument("--out", default=None, help="default results/<task>/<method>/profile.json; with several "
                   "--method, a path containing {method}")
    t.add_argument("--no-compaction", action="store_true", help="FiRe: finished samples stay in the batch")
    t.add_argument("--timings", nargs="+", default=None, metavar="JSON",
                   help="explain's timing-*.json files: sec_per_cf then comes from the full explain run")

    c = add_subverb(subs, "compaction", run_compaction,
                    "FiRe: time the same inputs with and without batch compaction (compaction.json)")
    _task_args(c)
    c.add_argument("--method", required=True, help="a method with a `compaction` hyperparameter (FiRe)")
    c.add_argument("--out", default=None, help="default results/<task>/<method>/compaction.json")

    s = add_subverb(subs, "paper-scale", run_paper_scale,
                    "FLOPs per CF of every method with paper-size random-weight networks (no data)")
    s.add_argument("setting", nargs="*", type=_paper_dataset, default=list(PAPER_DATASETS),
                   help="the paper's datasets whose network sizes are built (default all: "
                        f"{', '.join(PAPER_DATASETS)})")
    s.add_argument("--attempts", type=float, default=1.0,
                   help="mean classifier scales tried per CF by the DDPM family (1 to 3; default 1)")
    s.add_argument("--fire-steps-from", action="append", default=None, metavar="PROFILE_JSON",
                   help="add a FiRe steps profile (mean_steps) read from a vcebench profile.json")
    s.add_argument("--measure-nfe", action="store_true",
                   help="also run the real methods on tiny stand-in networks at paper settings "
                        "and report their NFE counters")
    s.add_argument("--no-fvcore", action="store_true", help="skip the fvcore cross-check (~20 s)")
    s.add_argument("--out-dir", default="results/reference",
                   help="folder for paper_scale_flops.{md,json} (default results/reference)")
    s.add_argument("--docs", default=None, metavar="PAGE",
                   help="also rewrite the summary block of this page (docs/profiling.md)")
    add_config_arg(s)

    g = add_subverb(subs, "gpu", run_gpu, "wall time of FiRe and MaskDiME at paper scale (random weights, no "
                    "data), in precision and runtime variants; for a GPU")
    g.add_argument("--out", default="results/reference", help="folder for <name>.{json,md} (default "
                   "results/reference)")
    g.add_argument("--device", default=None, help="default cuda when available, else cpu")
    g.add_argument("--tiny", action="store_true", help="small networks (a CPU smoke run of the code path)")
    g.add_argument("--plan", default=None, help="JSON list of {method, variant, batch, n, early_stop, params} "
                   "(default: vcebench.paper.timing.default_plan())")
    g.add_argument("--name", default="gpu_profile", help="output file stem (default gpu_profile)")
    g.add_argument("--time-limit", type=float, default=float("inf"),
                   help="skip the remaining plan entries after this many seconds")
    g.add_argument("--repeats", type=int, default=3, help="timed passes per row (median and spread reported)")
    g.add_argument("--compile-mode", default="reduce-overhead", help="torch.compile mode of the +compile variants")
    g.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager: a CPU check)")
    g.add_argument("--pmf", choices=["released", "unet"], default="released",
                   help="FiRe's PMF: its released DiT backbone at the resolution (default) or the UNet")


def _paper_dataset(name: str) -> str:
    """A dataset argument of `profile paper-scale` (argparse's ``choices`` would also check the list default)."""
    if name not in PAPER_DATASETS:
        raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join(PAPER_DATASETS)})")
    return name


def _task_args(p: argparse.ArgumentParser) -> None:
    """The arguments `profile task` and `profile compaction` share (which inputs, how they are run)."""
    add_config_arg(p)
    p.add_argument("--task", required=True, help="task name (config key `tasks`)")
    p.add_argument("--n", type=int, default=32, help="evaluation inputs to run (first n by sample id; default 32)")
    p.add_argument("--batch-size", type=int, default=None, help="default: config key `batch_size`")
    p.add_argument("--flop-n", type=int, default=None,
                   help="count FLOPs on the first FLOP_N inputs only (default: all n; stated in the output)")
    p.add_argument("--data", default=None, help="rendered data folder (synthetic cache) or None")
    p.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    p.add_argument("--no-warmup", action="store_true", help="warm up on one input instead of a full batch")


def _job_settings(args: argparse.Namespace, methods: list[str]):
    """Each method's run settings on --task with --data and --models, in batches of ``--batch-size``, and the
    torch device (:func:`vcebench.steps.profile.job_settings`)."""
    from ..steps.profile import job_settings

    return job_settings(args.config, args.task, methods, n=args.n, batch_size=args.batch_size, data_dir=args.data,
                        model_dir=args.models)


def run_task(args: argparse.Namespace) -> int:
    """Runs each --method on the first --n evaluation inputs of --task and writes its profile.json:
    seconds, FLOPs and network calls (NFE) per counterfactual, peak memory, mean steps. With --timings,
    sec_per_cf comes from the explain run's timing files instead (the workflow's profile rule)."""
    from ..steps.profile import output_paths, profile_methods, ratio_table

    methods = list(dict.fromkeys(args.method))
    paths = output_paths(args.task, methods, args.out)
    settings, device = _job_settings(args, methods)
    reports = profile_methods(settings, n=args.n, device=device, flop_n=args.flop_n, warmup=not args.no_warmup,
                              no_compaction=args.no_compaction, timings=args.timings)
    for method, report in reports.items():
        out = paths[method]
        write_json(out, report)
        print(f"{args.task}/{method}: {report['sec_per_cf']:.4f} s/CF, {report['tflops_per_cf']:.3g} TFLOPs/CF, "
              f"NFE/CF {report['nfe_per_cf']:.1f}, peak {report['peak_mem_mb']:.0f} MiB, "
              f"mean steps {report['mean_steps']:.2f}, batch {report['batch_size']} -> {out}", flush=True)
    if len(reports) > 1:
        print(ratio_table(reports, methods[0]))
    return 0


def run_compaction(args: argparse.Namespace) -> int:
    """Profiles FiRe on the same inputs twice in one process, with and without batch compaction (finished
    samples leave the batch), and writes both profiles with the speed-up in time and FLOPs."""
    from ..steps.profile import compare_compaction

    settings, device = _job_settings(args, [args.method])
    out = Path(args.out or f"results/{args.task}/{args.method}/compaction.json")
    report = compare_compaction(settings[args.method], n=args.n, device=device, flop_n=args.flop_n,
                                warmup=not args.no_warmup)
    write_json(out, report)
    _print_compaction(report)
    return 0


def _print_compaction(r: dict) -> None:
    print(f"{r['task']}/{r['method']}: n = {r['n']}, batch {r['batch_size']}, {r['device']}, {r['threads']} threads")
    for label in ("with_compaction", "without_compaction"):
        d = r[label]
        print(f"  {label:20s} {d['sec_per_cf']:.4f} s/CF  {d['tflops_per_cf'] * 1e3:.4f} GFLOPs/CF  "
              f"mean steps {d['mean_steps']:.2f}  FR {100 * d['flip_rate']:.1f}%")
    fr = r["flop_ratio"]
    print(f"  compaction speed-up: {r['speedup_time']:.2f}x time, " + (f"{fr:.2f}x FLOPs" if fr else "n/a"))


def run_paper_scale(args: argparse.Namespace) -> int:
    """Builds the paper protocol's networks with random weights (no data, no training) and counts the FLOPs
    per counterfactual of every method from their calls per CF; writes <out-dir>/paper_scale_flops.{md,json}."""
    from ..steps.profile import paper_scale, write_docs_summary

    out = Path(args.out_dir)
    docs = Path(args.docs) if args.docs else None
    md, summary = paper_scale(args.config, tuple(args.setting), attempts=args.attempts,
                              fire_steps_from=args.fire_steps_from or [], measure_nfe=args.measure_nfe,
                              fvcore=not args.no_fvcore, out_dir=out, docs=docs)
    sys.stdout.write(md)
    print(f"\nwrote {out / 'paper_scale_flops.md'} and {out / 'paper_scale_flops.json'}")
    if docs is not None:
        write_docs_summary(docs, summary)
        print(f"rewrote the paper-scale summary of {docs}")
    return 0


def run_gpu(args: argparse.Namespace) -> int:
    """Runs the real FiRe and MaskDiME code on the paper-size networks (random weights) and times each row of
    a plan (method, precision / runtime variant, batch, n): median and spread of --repeats timed passes, mean
    updates, FLOPs and TFLOP/s, peak memory, each variant's error against fp32. Writes <out>/<name>.{json,md}
    after every row (vcebench.paper.timing says what each variant changes)."""
    from ..steps.profile import gpu_profile

    gpu_profile(Path(args.out), args.device, args.tiny, args.plan, log=lambda m: print(m, flush=True),
                time_limit=args.time_limit, name=args.name, repeats=args.repeats, compile_mode=args.compile_mode,
                compile_backend=args.compile_backend, pmf=args.pmf)
    return 0
