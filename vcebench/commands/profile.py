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
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcebench.cli import add_config_arg, add_subverb, add_subverbs
from vcebench.config import ConfigError
from vcebench.errors import UserError

if TYPE_CHECKING:
    import torch

MOVED = {"--compare-compaction": "compaction", "--paper-scale": "paper-scale", "": "task"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="FLOPs, NFE, time and memory per counterfactual (task, compaction, "
                       "paper-scale, gpu)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = add_subverbs(p, MOVED)
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
    s.add_argument("setting", nargs="?", choices=["celeba"], default="celeba",
                   help="the paper's protocol whose network sizes are built (default celeba)")
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
    add_config_arg(s)

    g = add_subverb(subs, "gpu", run_gpu, "wall time of FiRe and MaskDiME at paper scale (random weights, no "
                    "data), in precision and runtime variants; for a GPU")
    g.add_argument("--out", default="results/reference", help="folder for <name>.{json,md} (default "
                   "results/reference)")
    g.add_argument("--device", default=None, help="default cuda when available, else cpu")
    g.add_argument("--tiny", action="store_true", help="small networks (a CPU smoke run of the code path)")
    g.add_argument("--plan", default=None, help="JSON list of {method, variant, batch, n, early_stop, params} "
                   "(default: vcebench.paper_timing.default_plan())")
    g.add_argument("--name", default="gpu_profile", help="output file stem (default gpu_profile)")
    g.add_argument("--time-limit", type=float, default=float("inf"),
                   help="skip the remaining plan entries after this many seconds")
    g.add_argument("--repeats", type=int, default=3, help="timed passes per row (median and spread reported)")
    g.add_argument("--compile-mode", default="reduce-overhead", help="torch.compile mode of the +compile variants")
    g.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager: a CPU check)")


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


def _setup(args: argparse.Namespace) -> tuple[dict, torch.device]:
    """Settings and the torch device of `profile task|compaction|paper-scale`."""
    from vcebench.runtime import setup_torch
    from vcebench.settings import load_settings

    cfg = load_settings(args.config)
    return cfg, setup_torch(cfg["threads"], cfg["device"], cfg.get("cuda"))


def _batch_size(args: argparse.Namespace, cfg: dict) -> int:
    """``--batch-size`` (default config key ``batch_size``), after checking ``--n`` and it are positive."""
    if args.n < 1:
        raise ConfigError(f"--n must be >= 1, got {args.n}")
    batch_size = int(args.batch_size or cfg["batch_size"])
    if batch_size < 1:
        raise ConfigError(f"--batch-size (config key `batch_size`) must be >= 1, got {batch_size}")
    return batch_size


def run_task(args: argparse.Namespace) -> int:
    """Runs each --method on the first --n evaluation inputs of --task and writes its profile.json:
    seconds, FLOPs and network calls (NFE) per counterfactual, peak memory, mean steps. With --timings,
    sec_per_cf comes from the explain run's timing files instead (the workflow's profile rule)."""
    cfg, device = _setup(args)
    batch_size = _batch_size(args, cfg)
    methods = list(dict.fromkeys(args.method))
    if len(methods) > 1 and args.out and "{method}" not in args.out:
        raise ConfigError(f"--out {args.out!r} must contain {{method}} when several methods are profiled")
    overrides = {"compaction": False} if args.no_compaction else {}
    timings = timing_files_by_method(args.timings, methods) if args.timings else {}
    reports = {}
    several = len(methods) > 1 and device.type == "cpu"
    for method in methods:  # time, FLOPs and NFE first, with the allocator as it is
        reports[method] = profile_task(cfg, args.task, method, n=args.n, batch_size=batch_size, device=device,
                                       data_dir=args.data, model_dir=args.models, flop_n=args.flop_n,
                                       warmup=not args.no_warmup, overrides=overrides, memory=not several)
    if several:  # then each method's peak RSS increase, from a trimmed heap that unmaps what it frees
        for method in methods:
            release_memory()
            reports[method]["peak_mem_mb"] = peak_memory_of(cfg, args.task, method, n=args.n, batch_size=batch_size,
                                                            device=device, data_dir=args.data, model_dir=args.models,
                                                            overrides=overrides)
            reports[method]["peak_mem_note"] = ("measured in a separate pass after the other methods' time and "
                                                "FLOP passes, heap trimmed, 128 KiB mmap threshold")
    for method, report in reports.items():
        if args.timings:
            apply_timings(report, timings[method])
        out = Path((args.out or "results/{task}/{method}/profile.json").format(task=args.task, method=method))
        _write(out, report)
        print(f"{args.task}/{method}: {report['sec_per_cf']:.4f} s/CF, {report['tflops_per_cf']:.3g} TFLOPs/CF, "
              f"NFE/CF {report['nfe_per_cf']:.1f}, peak {report['peak_mem_mb']:.0f} MiB, "
              f"mean steps {report['mean_steps']:.2f}, batch {report['batch_size']} -> {out}", flush=True)
    if len(reports) > 1:
        print(ratio_table(reports, methods[0]))
    return 0


def run_compaction(args: argparse.Namespace) -> int:
    """Profiles FiRe on the same inputs twice in one process, with and without batch compaction (finished
    samples leave the batch), and writes both profiles with the speed-up in time and FLOPs."""
    cfg, device = _setup(args)
    batch_size = _batch_size(args, cfg)
    out = Path(args.out or f"results/{args.task}/{args.method}/compaction.json")
    report = compare_compaction(cfg, args.task, args.method, n=args.n, batch_size=batch_size, device=device,
                                data_dir=args.data, model_dir=args.models, flop_n=args.flop_n,
                                warmup=not args.no_warmup)
    _write(out, report)
    _print_compaction(report)
    return 0


def ratio_table(reports: dict[str, dict[str, Any]], ref: str) -> str:
    """Markdown table of every profiled method against ``ref`` (the first --method): how many times
    more seconds and FLOPs per CF it needs, with each flip rate (the speed claim holds at equal FR)."""
    r = reports[ref]
    lines = [f"| method | s/CF | TFLOPs/CF | FR (%) | s/CF vs {ref} | FLOPs vs {ref} |",
             "|---|---:|---:|---:|---:|---:|"]
    for m, d in reports.items():
        lines.append(f"| {m} | {d['sec_per_cf']:.4f} | {d['tflops_per_cf']:.3g} | {100 * d['flip_rate']:.1f} | "
                     f"{d['sec_per_cf'] / r['sec_per_cf']:.2f}x | {d['flops_per_cf'] / r['flops_per_cf']:.2f}x |")
    return "\n".join(lines)


def release_memory() -> None:
    """Collect garbage and return freed heap pages to the OS, so that a peak-RSS increase measured next
    is not hidden by memory an earlier method freed but the allocator kept (glibc: a fixed 128 KiB mmap
    threshold, so tensors are unmapped when freed instead of staying in the heap, then ``malloc_trim``)."""
    import ctypes
    import gc

    gc.collect()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD (also turns off glibc's dynamic threshold)
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the RSS numbers may be low for later methods
        pass


def timing_files_by_method(paths: list[str], methods: list[str]) -> dict[str, list[str]]:
    """Group explain timing files by the ``method`` they record; with one method, every file is its."""
    if len(methods) == 1:
        return {methods[0]: list(paths)}
    out: dict[str, list[str]] = {m: [] for m in methods}
    for p in paths:
        try:
            m = json.loads(Path(p).read_text()).get("method")
        except (OSError, ValueError) as e:
            raise ConfigError(f"--timings file {p}: not readable JSON ({e})") from e
        if m in out:
            out[m].append(p)
    missing = [m for m, v in out.items() if not v]
    if missing:
        raise ConfigError(f"--timings: no timing file records method(s) {', '.join(missing)}")
    return out


def _write(path: Path, obj: dict[str, Any]) -> None:
    from vcebench.io import write_json

    write_json(path, obj)


# --------------------------------------------------------------------------- task profiles


def _load(cfg: dict, task_name: str, method_name: str, *, n: int, device: torch.device, data_dir: str | None,
          model_dir: str, overrides: dict[str, Any]):
    """Method, models and the first ``n`` evaluation inputs with their targets (not timed)."""
    import torch

    from methods import get_method
    from vcebench.data import eval_split_name, load_split
    from vcebench.models import load_task_models
    from vcebench.protocol import resolve_method
    from vcebench.runtime import accelerate_from_config
    from vcebench.tasks import get_task

    task = get_task(cfg, task_name)
    params = resolve_method(cfg, task, method_name)[0]
    for key, value in overrides.items():
        if key not in params:
            raise ConfigError(f"--no-compaction / `profile compaction` need a method with a `{key}` "
                              f"hyperparameter (FiRe); {method_name!r} has none")
        params[key] = value
    method = get_method(method_name, params)
    roles = tuple(getattr(method, "roles", ()) or _roles(method_name))
    models = accelerate_from_config(load_task_models(cfg, task, roles=roles, device=device, model_dir=model_dir),
                                    cfg, device)
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), data_dir=data_dir)
    k = min(n, len(split))
    idx = torch.arange(k)
    x = split.float_images(idx).to(device)
    ids = [int(i) for i in split.sample_ids[idx]]
    with torch.no_grad():
        target = 1 - models.classifier(x).argmax(1)
    return task, params, method, models, x, target, ids


def _roles(method_name: str) -> tuple[str, ...]:
    from vcebench.workflow import method_roles

    return method_roles(method_name)


def _method_call(cfg: dict, task_name: str, method_name: str, **load_kw):
    """:func:`_load`, with the method bound to its networks and per-sample noise streams as explain runs it:
    ``(task, params, models, call(x, target, sample_ids), x, target, ids)``."""
    from vcebench.rng import SampleGenerators
    from vcebench.runtime import noise_device

    task, params, method, models, x, target, ids = _load(cfg, task_name, method_name, **load_kw)
    seed = int(cfg["seed"])
    gen_device = noise_device(cfg, x.device)

    def call(xb, tb, idb):
        return method(xb, tb, models, SampleGenerators(seed, idb, stream=method_name, device=gen_device))

    return task, params, models, call, x, target, ids


def profile_task(cfg: dict, task_name: str, method_name: str, *, n: int, batch_size: int, device: torch.device,
                 data_dir: str | None = None, model_dir: str = "resources/models", flop_n: int | None = None,
                 warmup: bool = True, overrides: dict[str, Any] | None = None, memory: bool = True) -> dict[str, Any]:
    """profile.json of ``method_name`` on the first ``n`` evaluation inputs of ``task_name``."""
    from vcebench.profiling import profile_run

    task, params, models, call, x, target, ids = _method_call(cfg, task_name, method_name, n=n, device=device,
                                                              data_dir=data_dir, model_dir=model_dir,
                                                              overrides=overrides or {})
    report = profile_run(call, x, target, ids, batch_size=batch_size, device=device, flop_n=flop_n, warmup=warmup,
                         memory=memory)
    report.update(network_call_flops(models, x, report["nfe_by_network"]))
    return {"task": task.name, "method": method_name, **report, "sec_per_cf_source": "profile run",
            "compaction": params.get("compaction"), "seed": int(cfg["seed"]), "models": dict(models.names),
            "params": params}


# NFE counter name (methods/base.py NFE) -> model role
NFE_ROLES = {"classifier": "classifier", "unet": "ddpm", "pmf": "pmf", "perceptual": "perceptual"}


def network_call_flops(models, x: torch.Tensor, nfe_by_network: dict[str, dict[str, float]]) -> dict[str, Any]:
    """``flops_per_call``: FLOPs of one call (batch 1) of every network the method called, forward and input
    backward (``paper_scale.per_call_flops``), from which the report derives FLOPs per CF for all n CFs of
    counterfactuals.npz (``vcebench.costs``); ``tflops_per_cf_from_calls``: the same product on this run's
    inputs, to compare with the counted ``tflops_per_cf``."""
    from vcebench.paper_scale import flops_from_nfe, per_call_flops

    nets = {net: getattr(models, NFE_ROLES[net]) for net, d in nfe_by_network.items()
            if (d["fwd"] or d["bwd"]) and net in NFE_ROLES and getattr(models, NFE_ROLES[net], None) is not None}
    calls = per_call_flops(nets, int(x.shape[-1]), channels=int(x.shape[1]))
    used = {k: v for k, v in nfe_by_network.items() if k in calls}
    return {"flops_per_call": calls, "tflops_per_cf_from_calls": flops_from_nfe(used, calls) / 1e12}


def peak_memory_of(cfg: dict, task_name: str, method_name: str, *, n: int, batch_size: int, device: torch.device,
                   data_dir: str | None, model_dir: str, overrides: dict[str, Any]) -> float:
    """Peak memory (MiB) of ``method_name`` on the same inputs as :func:`profile_task` (memory pass only;
    the networks are loaded again, so that nothing of the first pass stays allocated in between)."""
    from vcebench.profiling import peak_memory_run

    _, _, _, call, x, target, ids = _method_call(cfg, task_name, method_name, n=n, device=device, data_dir=data_dir,
                                                 model_dir=model_dir, overrides=overrides)
    return peak_memory_run(call, x, target, ids, batch_size=batch_size, device=device)[0]


def apply_timings(report: dict[str, Any], paths: list[str]) -> None:
    """Replace ``sec_per_cf`` by the explain run's generation time (summed over shards / n)."""
    seconds, n, batch = 0.0, 0, set()
    for p in paths:
        try:
            t = json.loads(Path(p).read_text())
            seconds += float(t["seconds"])
            n += int(t["n"])
            if "batch_size" in t:
                batch.add(int(t["batch_size"]))
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise ConfigError(f"--timings file {p}: expected JSON with `seconds` and `n` ({e})") from e
    if n == 0:
        raise ConfigError(f"--timings files {', '.join(paths)} hold no counterfactuals (n = 0)")
    report["sec_per_cf_profile_run"] = report["sec_per_cf"]
    report["sec_per_cf"] = seconds / n
    report["sec_per_cf_source"] = f"explain timings ({len(paths)} shard files, n = {n})"
    if batch:
        report["explain_batch_size"] = sorted(batch)


def compare_compaction(cfg: dict, task_name: str, method_name: str, *, n: int, batch_size: int,
                       device: torch.device, data_dir: str | None = None, model_dir: str = "resources/models",
                       flop_n: int | None = None, warmup: bool = True) -> dict[str, Any]:
    """FiRe s/CF with and without batch compaction, on the same inputs in the same process."""
    runs = {}
    for label, on in (("with_compaction", True), ("without_compaction", False)):
        runs[label] = profile_task(cfg, task_name, method_name, n=n, batch_size=batch_size, device=device,
                                   data_dir=data_dir, model_dir=model_dir, flop_n=flop_n, warmup=warmup,
                                   overrides={"compaction": on})
    w, wo = runs["with_compaction"], runs["without_compaction"]
    return {"task": task_name, "method": method_name, "n": w["n"], "batch_size": batch_size,
            "device": w["device"], "threads": w["threads"], "torch": w["torch"],
            "speedup_time": wo["sec_per_cf"] / w["sec_per_cf"],
            "flop_ratio": wo["flops_per_cf"] / w["flops_per_cf"] if w["flops_per_cf"] else None,
            "same_outputs_expected": "yes: per-sample RNG streams make a CF independent of its batch", **runs}


def _print_compaction(r: dict[str, Any]) -> None:
    print(f"{r['task']}/{r['method']}: n = {r['n']}, batch {r['batch_size']}, {r['device']}, {r['threads']} threads")
    for label in ("with_compaction", "without_compaction"):
        d = r[label]
        print(f"  {label:20s} {d['sec_per_cf']:.4f} s/CF  {d['tflops_per_cf'] * 1e3:.4f} GFLOPs/CF  "
              f"mean steps {d['mean_steps']:.2f}  FR {100 * d['flip_rate']:.1f}%")
    fr = r["flop_ratio"]
    print(f"  compaction speed-up: {r['speedup_time']:.2f}x time, " + (f"{fr:.2f}x FLOPs" if fr else "n/a"))


# --------------------------------------------------------------------------- paper scale


def _mean_steps_from(path: str) -> tuple[str, float]:
    try:
        d = json.loads(Path(path).read_text())
        return f"measured: {d.get('task', '?')}/{d.get('method', '?')} (n = {d.get('n', '?')})", float(d["mean_steps"])
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"--fire-steps-from {path}: expected a vcebench profile.json with `mean_steps` ({e})") from e


def run_paper_scale(args: argparse.Namespace) -> int:
    """Builds the paper protocol's networks with random weights (no data, no training) and counts the FLOPs
    per counterfactual of every method from their calls per CF; writes <out-dir>/paper_scale_flops.{md,json}."""
    import torch

    from vcebench import paper_scale as ps
    from vcebench.io import atomic_path, write_json
    from vcebench.paper_nfe import measured_paper_nfe

    cfg, _ = _setup(args)
    if not 1.0 <= args.attempts <= 3.0:
        raise ConfigError(f"--attempts is the mean number of classifier scales tried (1 to 3), got {args.attempts}")
    steps = dict(_mean_steps_from(p) for p in (args.fire_steps_from or []))
    measured = None
    if args.measure_nfe:
        measured = measured_paper_nfe(cfg)
    report = ps.paper_scale_report(args.setting, attempts=args.attempts, measured_fire_steps=steps,
                                   measured_nfe=measured, fvcore=not args.no_fvcore)
    report.update({"torch": torch.__version__, "threads": torch.get_num_threads()})
    out = Path(args.out_dir)
    write_json(out / "paper_scale_flops.json", report)
    md = ps.format_markdown(report)
    with atomic_path(out / "paper_scale_flops.md") as tmp:
        tmp.write_text(md)
    sys.stdout.write(md)
    print(f"\nwrote {out / 'paper_scale_flops.md'} and {out / 'paper_scale_flops.json'}")
    return 0


# --------------------------------------------------------------------------- GPU wall time


def run_gpu(args: argparse.Namespace) -> int:
    """Runs the real FiRe and MaskDiME code on the paper-size networks (random weights) and times each row of
    a plan (method, precision / runtime variant, batch, n): median and spread of --repeats timed passes, mean
    updates, FLOPs and TFLOP/s, peak memory, each variant's error against fp32. Writes <out>/<name>.{json,md}
    after every row (vcebench.paper_timing says what each variant changes)."""
    import torch

    from vcebench import paper_timing as pt

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("no CUDA device: run with --device cpu --tiny for a smoke run")
    plan = pt.load_plan(args.plan, tiny=args.tiny)
    pt.run(Path(args.out), pt.TINY if args.tiny else pt.CELEBA, device, plan, time_limit=args.time_limit,
           name=args.name, log=lambda m: print(m, flush=True), repeats=args.repeats,
           compile_mode=args.compile_mode, compile_backend=args.compile_backend)
    return 0
