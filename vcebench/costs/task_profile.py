"""Profile one method on one task: FLOPs and network calls per counterfactual, peak memory, time, and FiRe's
batch compaction measured both ways (the work behind `vcebench profile task|compaction`).

FLOPs are counted per network call with torch's FlopCounterMode on the first inputs and multiplied by each
network's calls per CF (the methods' own NFE counters); memory is a separate pass (``vcebench.costs.measure``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.load import ConfigError
from .columns import network_call_flops

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import RunSettings


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
    from .measure import profile_run

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
    from .measure import peak_memory_run

    _, _, call, x, target, ids = _method_call(settings, n=n, device=device)
    return peak_memory_run(call, x, target, ids, batch_size=settings.batch_size, device=device)[0]


def apply_timings(report: dict[str, Any], paths: list[str]) -> None:
    """Replace ``sec_per_cf`` by the explain run's generation time (summed over shards / n,
    ``vcebench.costs.columns.explain_profile``)."""
    from .columns import CostRecordError, read_explain_profile

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


def print_compaction(r: dict[str, Any]) -> None:
    print(f"{r['task']}/{r['method']}: n = {r['n']}, batch {r['batch_size']}, {r['device']}, {r['threads']} threads")
    for label in ("with_compaction", "without_compaction"):
        d = r[label]
        print(f"  {label:20s} {d['sec_per_cf']:.4f} s/CF  {d['tflops_per_cf'] * 1e3:.4f} GFLOPs/CF  "
              f"mean steps {d['mean_steps']:.2f}  FR {100 * d['flip_rate']:.1f}%")
    fr = r["flop_ratio"]
    print(f"  compaction speed-up: {r['speedup_time']:.2f}x time, " + (f"{fr:.2f}x FLOPs" if fr else "n/a"))
