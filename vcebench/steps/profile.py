"""`vcebench profile` as a library (its arguments and printing: :mod:`vcebench.cli.profile`): FLOPs, network
calls (NFE), time and memory per counterfactual of a method on a task (``profile task``), FiRe's batch
compaction measured both ways (``compaction``), the FLOPs of every method at the paper's network sizes
(``paper-scale``) and the wall time there on a GPU (``gpu``).

FLOPs are counted per network call with torch's FlopCounterMode on the first inputs and multiplied by each
network's calls per CF (the methods' own NFE counters); memory is a separate pass (``vcebench.costs.measure``).
A ``profile.json`` holds what :func:`profile_task` returns; with explain's timing files (``--timings``) its
``sec_per_cf`` is the full explain run's generation time (:func:`apply_timings`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.load import ConfigError
from ..core.errors import UserError
from ..core.io import write_json
from ..costs.columns import network_call_flops

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import RunSettings


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


def mean_steps_from(path: str) -> tuple[str, float]:
    try:
        d = json.loads(Path(path).read_text())
        return f"measured: {d.get('task', '?')}/{d.get('method', '?')} (n = {d.get('n', '?')})", float(d["mean_steps"])
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"--fire-steps-from {path}: expected a vcebench profile.json with `mean_steps` ({e})") from e


def job_settings(config: list[str] | None, task: str, methods: list[str], *, n: int, batch_size: int | None,
                 data_dir: str | None, model_dir: str) -> tuple[dict[str, RunSettings], torch.device]:
    """Each method's :class:`~vcebench.protocol.run_settings.RunSettings` on ``task`` with ``data_dir`` and
    ``model_dir``, in batches of ``batch_size`` (default config key ``batch_size``; it and ``n`` checked
    positive), and the torch device of their runtime options (the same for all)."""
    from ..core.runtime import setup_torch
    from ..protocol.run_settings import RunSettings
    from ..protocol.settings import load_settings

    cfg = load_settings(config)
    if n < 1:
        raise ConfigError(f"--n must be >= 1, got {n}")
    batch_size = int(batch_size or cfg["batch_size"])
    if batch_size < 1:
        raise ConfigError(f"--batch-size (config key `batch_size`) must be >= 1, got {batch_size}")
    settings = {m: dataclasses.replace(RunSettings.resolve(cfg, task, m, data_dir=data_dir, model_dir=model_dir),
                                       batch_size=batch_size)
                for m in methods}
    rt = settings[methods[0]].runtime
    return settings, setup_torch(rt.threads, rt.device, rt.cuda)


def profile_methods(settings: dict[str, RunSettings], *, n: int, device: torch.device, flop_n: int | None,
                    warmup: bool, no_compaction: bool, timings: list[str] | None) -> dict[str, dict[str, Any]]:
    """`profile task`: the profile.json of each method of ``settings`` (in its order) on the first ``n``
    evaluation inputs. Time, FLOPs and NFE of all methods first; with several methods on a CPU, each one's peak
    memory then in a pass of its own. ``timings``: explain's timing files, grouped by the method they record
    (:func:`apply_timings`)."""
    methods = list(settings)
    overrides = {"compaction": False} if no_compaction else {}
    settings = {m: with_overrides(s, overrides) for m, s in settings.items()}
    by_method = timing_files_by_method(timings, methods) if timings else {}
    reports = {}
    several = len(methods) > 1 and device.type == "cpu"
    for method in methods:  # time, FLOPs and NFE first, with the allocator as it is
        reports[method] = profile_task(settings[method], n=n, device=device, flop_n=flop_n, warmup=warmup,
                                       memory=not several)
    if several:  # then each method's peak RSS increase, from a trimmed heap that unmaps what it frees
        for method in methods:
            release_memory()
            reports[method]["peak_mem_mb"] = peak_memory_of(settings[method], n=n, device=device)
            reports[method]["peak_mem_note"] = ("measured in a separate pass after the other methods' time and "
                                                "FLOP passes, heap trimmed, 128 KiB mmap threshold")
    for method, report in reports.items():
        if timings:
            apply_timings(report, by_method[method])
    return reports


def output_paths(task: str, methods: list[str], out: str | None) -> dict[str, Path]:
    """Where `profile task` writes each method's profile.json: ``out`` (default
    ``results/<task>/<method>/profile.json``), in which ``{method}`` stands for the method (required with
    several methods, checked before anything runs)."""
    if len(methods) > 1 and out and "{method}" not in out:
        raise ConfigError(f"--out {out!r} must contain {{method}} when several methods are profiled")
    return {m: Path((out or "results/{task}/{method}/profile.json").format(task=task, method=m)) for m in methods}


def paper_scale(config: list[str] | None, settings: tuple[str, ...], *, attempts: float, fire_steps_from: list[str],
                measure_nfe: bool, fvcore: bool, out_dir: Path, docs: Path | None = None) -> tuple[str, str]:
    """`profile paper-scale`: the paper protocol's networks of each dataset of ``settings`` with random weights
    (no data, no training), the FLOPs per counterfactual of every method from their calls per CF; writes
    ``<out_dir>/paper_scale_flops.{md,json}``. ``docs``: a page whose summary block is to be rewritten, checked
    before the counting (:func:`write_docs_summary` writes it). Returns the markdown and the summary."""
    import torch

    from ..core.io import atomic_path
    from ..core.runtime import setup_torch
    from ..paper import scale as ps
    from ..paper.nfe import measured_paper_nfe
    from ..protocol.settings import load_settings

    cfg = load_settings(config)
    setup_torch(cfg["threads"], cfg["device"], cfg["cuda"])
    if not 1.0 <= attempts <= 3.0:
        raise ConfigError(f"--attempts is the mean number of classifier scales tried (1 to 3), got {attempts}")
    if docs is not None:  # checked before the counting
        if not docs.is_file():
            raise UserError(f"--docs {docs}: no such page")
        try:
            ps.replace_docs_block(docs.read_text(), "")
        except ValueError as e:
            raise UserError(f"--docs {docs}: {e}") from None
    steps = dict(mean_steps_from(p) for p in fire_steps_from)
    measured = None
    if measure_nfe:
        measured = measured_paper_nfe(cfg)
    report = ps.paper_scale_reports(settings, attempts=attempts, measured_fire_steps=steps,
                                    measured_nfe=measured, fvcore=fvcore)
    report.update({"torch": torch.__version__, "threads": torch.get_num_threads()})
    write_json(out_dir / "paper_scale_flops.json", report)
    md = ps.format_markdown(report)
    with atomic_path(out_dir / "paper_scale_flops.md") as tmp:
        tmp.write_text(md)
    return md, ps.summary_markdown(report)


def write_docs_summary(docs: Path, summary: str) -> None:
    """Rewrites the paper-scale summary block of page ``docs`` with ``summary``."""
    from ..core.io import atomic_path
    from ..paper import scale as ps

    text = ps.replace_docs_block(docs.read_text(), summary)
    with atomic_path(docs) as tmp:
        tmp.write_text(text)


def gpu_profile(out: Path, device: str | None, tiny: bool, plan: str | None, log: Callable[[str], None],
                **options: Any) -> None:
    """`profile gpu`: the real FiRe and MaskDiME code on the paper-size networks (random weights), each row of
    ``plan`` (default ``vcebench.paper.timing.default_plan()``) timed on ``device`` (default cuda when there
    is one, else cpu), ``<out>/<name>.{json,md}`` written after every row; ``options``: the keywords of
    ``vcebench.paper.timing.run`` (time_limit, name, repeats, compile_mode, compile_backend, pmf)."""
    import torch

    from ..paper import timing as pt

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("no CUDA device: run with --device cpu --tiny for a smoke run")
    pt.run(out, pt.TINY if tiny else pt.CELEBA, device, pt.load_plan(plan, tiny=tiny), log=log, **options)


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


def with_overrides(settings: RunSettings, overrides: dict[str, Any]) -> RunSettings:
    """``settings`` with the hyperparameters ``overrides`` (``--no-compaction``, `profile compaction`), each of
    which the method must have."""
    for key in overrides:
        if key not in settings.params:
            raise ConfigError(f"--no-compaction / `profile compaction` need a method with a `{key}` "
                              f"hyperparameter (FiRe); {settings.method!r} has none")
    return settings.with_params(**overrides) if overrides else settings


def _load(settings: RunSettings, *, n: int, device: torch.device):
    """Method, models and the first ``n`` evaluation inputs with their targets (not timed):
    ``(params, method, models, x, target, ids)``. The loaders read whole sections of the configuration
    (datasets, the model zoo): they get ``settings.config``."""
    import torch

    from ..data import load_split
    from ..models import load_task_models
    from ..models.accelerate import accelerate_from_config

    task, cfg = settings.task, settings.config
    params = dict(settings.params)
    method = settings.build_method()
    roles = tuple(getattr(method, "roles", ()) or _roles(settings.method))
    models = accelerate_from_config(load_task_models(cfg, task, roles=roles, device=device,
                                                     model_dir=settings.model_dir), settings.runtime.cuda, device)
    split = load_split(cfg, task.dataset, settings.split, data_dir=settings.data_dir)
    k = min(n, len(split))
    idx = torch.arange(k)
    x = split.float_images(idx).to(device)
    ids = [int(i) for i in split.sample_ids[idx]]
    with torch.no_grad():
        target = 1 - models.classifier(x).argmax(1)
    return params, method, models, x, target, ids


def _roles(method_name: str) -> tuple[str, ...]:
    from ..config.tasks import method_roles

    return method_roles(method_name)


def _method_call(settings: RunSettings, *, n: int, device: torch.device):
    """:func:`_load`, with the method bound to its networks and per-sample noise streams as explain runs it:
    ``(params, models, call(x, target, sample_ids), x, target, ids)``."""
    from ..core.rng import SampleGenerators
    from ..core.runtime import noise_device

    params, method, models, x, target, ids = _load(settings, n=n, device=device)
    seed, stream = settings.seed, settings.method
    gen_device = noise_device(settings.runtime.cuda, x.device)

    def call(xb, tb, idb):
        return method(xb, tb, models, SampleGenerators(seed, idb, stream=stream, device=gen_device))

    return params, models, call, x, target, ids


def profile_task(settings: RunSettings, *, n: int, device: torch.device, flop_n: int | None = None,
                 warmup: bool = True, memory: bool = True) -> dict[str, Any]:
    """profile.json of ``settings.method`` on the first ``n`` evaluation inputs of ``settings.task``, in batches
    of ``settings.batch_size``."""
    from ..costs.measure import profile_run

    params, models, call, x, target, ids = _method_call(settings, n=n, device=device)
    report = profile_run(call, x, target, ids, batch_size=settings.batch_size, device=device, flop_n=flop_n,
                         warmup=warmup, memory=memory)
    report.update(network_call_flops(models, x, report["nfe_by_network"]))
    return {"task": settings.task.name, "method": settings.method, **report, "sec_per_cf_source": "profile run",
            "compaction": params.get("compaction"), "seed": settings.seed, "models": dict(models.names),
            "params": params}


def peak_memory_of(settings: RunSettings, *, n: int, device: torch.device) -> float:
    """Peak memory (MiB) of ``settings.method`` on the same inputs as :func:`profile_task` (memory pass only;
    the networks are loaded again, so that nothing of the first pass stays allocated in between)."""
    from ..costs.measure import peak_memory_run

    _, _, call, x, target, ids = _method_call(settings, n=n, device=device)
    return peak_memory_run(call, x, target, ids, batch_size=settings.batch_size, device=device)[0]


def apply_timings(report: dict[str, Any], paths: list[str]) -> None:
    """Replace ``sec_per_cf`` by the explain run's generation time (summed over shards / n,
    ``vcebench.costs.columns.explain_profile``)."""
    from ..costs.columns import CostRecordError, read_explain_profile

    try:
        explain = read_explain_profile(paths)
    except CostRecordError as e:
        raise ConfigError(f"--timings: {e}") from e
    if not explain["n"]:
        raise ConfigError(f"--timings files {', '.join(paths)} hold no counterfactuals (n = 0)")
    report["sec_per_cf_profile_run"] = report["sec_per_cf"]
    for key in ("sec_per_cf", "sec_per_cf_source", "explain_batch_size"):
        report[key] = explain[key]


def compare_compaction(settings: RunSettings, *, n: int, device: torch.device, flop_n: int | None = None,
                       warmup: bool = True) -> dict[str, Any]:
    """FiRe s/CF with and without batch compaction, on the same inputs in the same process."""
    runs = {}
    for label, on in (("with_compaction", True), ("without_compaction", False)):
        runs[label] = profile_task(with_overrides(settings, {"compaction": on}), n=n, device=device, flop_n=flop_n,
                                   warmup=warmup)
    w, wo = runs["with_compaction"], runs["without_compaction"]
    return {"task": settings.task.name, "method": settings.method, "n": w["n"], "batch_size": settings.batch_size,
            "device": w["device"], "threads": w["threads"], "torch": w["torch"],
            "speedup_time": wo["sec_per_cf"] / w["sec_per_cf"],
            "flop_ratio": wo["flops_per_cf"] / w["flops_per_cf"] if w["flops_per_cf"] else None,
            "same_outputs_expected": "yes: per-sample RNG streams make a CF independent of its batch", **runs}
