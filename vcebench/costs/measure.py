"""Compute, time and memory of counterfactual generation.

- FLOPs of a whole callable (forward and backward, guidance, masks, SmoothGrad) with
  :class:`torch.utils.flop_counter.FlopCounterMode`, with the math SDPA backend forced so that
  attention is counted as its matmuls (fused kernels are opaque to the counter).
- fvcore's per-network forward count as a cross-check (fvcore counts multiply-adds).
- Wall time after a warm-up, excluding data loading and disk I/O, with CUDA synchronisation.
- Peak memory: CUDA max allocated on a GPU, peak RSS increase (sampled) on the CPU.
- NFE per counterfactual by network, read from ``Counterfactuals.info["nfe_<net>_<fwd|bwd>"]``
  (docs/internals.md: a batched call of B rows adds 1 to each of its B samples).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ..config.kernels import cpu_identity

FLOP_CONVENTION = (
    "FLOPs = 2 x multiply-accumulates of matmul / convolution / attention ops (forward and backward "
    "as executed), counted by torch.utils.flop_counter.FlopCounterMode with the math SDPA backend; "
    "elementwise ops, normalisation, pooling and sorting are not counted"
)
FVCORE_CONVENTION = "fvcore: multiply-adds (1 fvcore 'flop' = 1 MAC = 2 FLOPs), forward only"
NFE_CONVENTION = (
    "nfe_per_cf = forward calls of all networks per counterfactual (SmoothGrad copies count one each); "
    "nfe_by_network[net] = {fwd, bwd} calls per counterfactual; a backward is a gradient to the input"
)


# --------------------------------------------------------------------------- FLOPs


@dataclass
class FlopCount:
    """Total FLOPs (FLOP_CONVENTION) and the same split by aten op."""

    total: int
    by_op: dict[str, int] = field(default_factory=dict)


class _GlobalOnly:
    """Stand-in for FlopCounterMode's ModuleTracker: totals only, no module hooks.

    The tracker's backward hooks raise inside ``torch.autograd.grad`` ("A leaf node was passed to
    _will_engine_execute_node ..."), which every guidance step uses; per-module splits are not needed.
    """

    parents = frozenset({"Global"})

    def __enter__(self) -> _GlobalOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, FlopCount]:
    """Run ``fn(*args, **kwargs)`` under FlopCounterMode (math SDPA backend); return (result, count).

    Works on ``meta`` tensors too (shapes only, nothing computed), which is how the paper-size
    networks are counted without running them, and with ``torch.autograd.grad`` inside ``fn``.
    """
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _GlobalOnly()  # see _GlobalOnly
    with sdpa_kernel(SDPBackend.MATH), counter:
        out = fn(*args, **kwargs)
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return out, FlopCount(total=int(counter.get_total_flops()), by_op=by_op)


def conv2d_flops(c_in: int, c_out: int, k: int, h_out: int, w_out: int, groups: int = 1,
                 batch: int = 1) -> int:
    """Analytic forward FLOPs of a Conv2d (2 x MACs, bias not counted: FlopCounterMode's convention)."""
    return 2 * batch * c_out * h_out * w_out * (c_in // groups) * k * k


def linear_flops(d_in: int, d_out: int, batch: int = 1) -> int:
    """Analytic forward FLOPs of a Linear layer (2 x MACs, bias not counted)."""
    return 2 * batch * d_in * d_out


def fvcore_forward_macs(module: nn.Module, inputs: tuple[Tensor, ...]) -> int | None:
    """fvcore's forward count (multiply-adds) of ``module(*inputs)``; None when fvcore is missing.

    fvcore traces with ``torch.jit``; unsupported-op warnings are silenced (they are ops such as
    elementwise adds that neither counter includes).
    """
    try:
        from fvcore.nn import FlopCountAnalysis
    except ImportError:
        return None
    analysis = FlopCountAnalysis(module, inputs)
    analysis.unsupported_ops_warnings(False)
    analysis.uncalled_modules_warnings(False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        return int(analysis.total())


# --------------------------------------------------------------------------- time and memory


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _status_bytes(field: str) -> int:
    """A ``Vm*`` field of /proc/self/status in bytes (Linux; 0 where unavailable)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss_bytes() -> int:
    """Current resident set size of this process (Linux /proc; 0 where unavailable)."""
    return _status_bytes("VmRSS")


def _reset_rss_peak() -> bool:
    """Reset the kernel's resident high-water mark (VmHWM) to the current RSS; False if unsupported.

    Writing "5" to /proc/self/clear_refs (Linux >= 4.0) does this; the kernel then tracks the exact
    peak, which a sampling thread can miss when the enclosed code allocates and frees between samples.
    """
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return _status_bytes("VmHWM") > 0


class PeakMemory:
    """Context manager: peak memory of the enclosed code, in MiB.

    CUDA: ``torch.cuda.max_memory_allocated`` after a reset (absolute, so it includes the weights,
    as the paper's "peak GPU memory"). CPU: the peak RSS *increase* over the value on entry, read
    from the kernel's high-water mark after resetting it (Linux); where that reset is unavailable,
    sampled every ``interval`` seconds by a background thread (which can miss short peaks).
    """

    def __init__(self, device: torch.device | str = "cpu", interval: float = 0.002, enabled: bool = True):
        self.device = torch.device(device)
        self.enabled = enabled
        self.interval = interval
        self.peak_mb = 0.0
        self.kind = ("cuda_max_allocated" if self.device.type == "cuda" else "cpu_peak_rss_increase")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._base = 0
        self._peak = 0
        self._hwm = False

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, _rss_bytes())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        if not self.enabled:
            return self
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._hwm = _reset_rss_peak()
            self._base = self._peak = _rss_bytes()
            if not self._hwm:
                self._thread = threading.Thread(target=self._sample, daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        if self.device.type == "cuda":
            synchronize(self.device)
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._peak = max(self._peak, _rss_bytes())
        if self._hwm:
            self._peak = max(self._peak, _status_bytes("VmHWM"))
        self.peak_mb = max(0, self._peak - self._base) / 2**20


@contextlib.contextmanager
def timed(device: torch.device | str = "cpu") -> Iterator[dict[str, float]]:
    """``with timed(dev) as t: ...`` -> ``t["seconds"]``, synchronising CUDA before and after."""
    out: dict[str, float] = {}
    synchronize(device)
    start = time.perf_counter()
    try:
        yield out
    finally:
        synchronize(device)
        out["seconds"] = time.perf_counter() - start


# --------------------------------------------------------------------------- NFE


def nfe_by_network(info: dict[str, Tensor]) -> dict[str, dict[str, float]]:
    """Mean calls per counterfactual, ``{net: {"fwd": .., "bwd": ..}}``, from ``info["nfe_<net>_<dir>"]``."""
    out: dict[str, dict[str, float]] = {}
    for key, value in info.items():
        if not key.startswith("nfe_"):
            continue
        net, _, direction = key[len("nfe_"):].rpartition("_")
        if direction not in ("fwd", "bwd") or not net:
            raise ValueError(f"info key {key!r} does not follow nfe_<network>_<fwd|bwd> (docs/internals.md)")
        out.setdefault(net, {"fwd": 0.0, "bwd": 0.0})[direction] = float(torch.as_tensor(value).float().mean())
    return dict(sorted(out.items()))


def nfe_total(by_net: dict[str, dict[str, float]]) -> float:
    """Forward calls of all networks per counterfactual (NFE_CONVENTION)."""
    return float(sum(d["fwd"] for d in by_net.values()))


# --------------------------------------------------------------------------- a method run


MethodCall = Callable[[Tensor, Tensor, Sequence[int]], Any]  # (x, target, sample_ids) -> Counterfactuals


def run_batches(call: MethodCall, x: Tensor, target: Tensor, ids: Sequence[int], batch_size: int) -> list[Any]:
    """``call`` on consecutive batches of ``batch_size`` inputs; the list of their Counterfactuals."""
    outs = []
    for start in range(0, len(x), batch_size):
        sl = slice(start, start + batch_size)
        outs.append(call(x[sl], target[sl], list(ids[sl])))
    return outs


def cat_info(outs: list[Any]) -> tuple[dict[str, Tensor], Tensor]:
    """The ``nfe_*`` info tensors and the steps of several Counterfactuals, concatenated (CPU)."""
    keys = set.intersection(*(set(o.info) for o in outs))
    info = {k: torch.cat([torch.as_tensor(o.info[k]).float().cpu() for o in outs])
            for k in keys if k.startswith("nfe_")}
    steps = torch.cat([o.steps.cpu() for o in outs])
    return info, steps


def profile_run(call: MethodCall, x: Tensor, target: Tensor, sample_ids: Sequence[int], *,
                batch_size: int, device: torch.device | str = "cpu", flop_n: int | None = None,
                warmup: bool = True, memory: bool = True) -> dict[str, Any]:
    """Time, memory, FLOPs and NFE of ``call`` over ``x`` (already on ``device``) in batches.

    The timed pass runs every input once, after one warm-up batch (``warmup=False``: one warm-up
    input), under :class:`PeakMemory`;
    FLOPs are counted in a second pass over the first ``flop_n`` inputs (default: all) at the
    same batch size, so early stopping and batch compaction are reflected exactly.
    """
    n = len(x)
    if n == 0:
        raise ValueError("profile_run needs at least one input")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = torch.device(device)
    ids = list(sample_ids)
    w = min(batch_size, n) if warmup else 1  # a 1-input warm-up at least: one-time runtime allocations
    call(x[:w], target[:w], ids[:w])          # (thread pools, kernel caches) stay out of the peak memory
    with PeakMemory(device, enabled=memory) as mem, timed(device) as clock:
        outs = run_batches(call, x, target, ids, batch_size)
    info, steps = cat_info(outs)
    flipped = torch.cat([o.flipped.cpu() for o in outs])
    nets = nfe_by_network(info)

    flop_n = n if flop_n is None else max(1, min(int(flop_n), n))
    _, flops = count_flops(run_batches, call, x[:flop_n], target[:flop_n], ids[:flop_n], batch_size)
    return {
        "n": n,
        "batch_size": int(batch_size),
        "sec_per_cf": clock["seconds"] / n,
        "seconds_total": clock["seconds"],
        "tflops_per_cf": flops.total / flop_n / 1e12,
        "flops_per_cf": flops.total / flop_n,
        "flops_by_op_per_cf": {k: v / flop_n for k, v in sorted(flops.by_op.items())},
        "flop_n": flop_n,
        "nfe_per_cf": nfe_total(nets),
        "nfe_by_network": nets,
        "peak_mem_mb": mem.peak_mb if memory else None,
        "peak_mem_kind": mem.kind,
        "mean_steps": float(steps.float().mean()),
        "steps_histogram": {int(k): int(v) for k, v in zip(*torch.unique(steps, return_counts=True))},
        "flip_rate": float(flipped.float().mean()),
        "device": device_name(device),
        "flop_convention": FLOP_CONVENTION,
        "nfe_convention": NFE_CONVENTION,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def device_name(device: torch.device | str) -> str:
    """``cpu (<model name>)`` or the CUDA device name, written next to every timing."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    model = cpu_identity()["model"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"cpu ({model or 'unknown'}, {cores} cores visible)"


def peak_memory_run(call: MethodCall, x: Tensor, target: Tensor, sample_ids: Sequence[int], *,
                    batch_size: int, device: torch.device | str = "cpu") -> tuple[float, str]:
    """(peak MiB, kind) of ``call`` over ``x`` in batches, after a 1-input warm-up (memory only)."""
    ids = list(sample_ids)
    call(x[:1], target[:1], ids[:1])
    with PeakMemory(device) as mem:
        run_batches(call, x, target, ids, batch_size)
    return mem.peak_mb, mem.kind
