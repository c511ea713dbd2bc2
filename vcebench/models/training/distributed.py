"""Where a training run computes: its device, its autocast, and its rank's share of every batch.

A plain ``vcebench train`` is one process (rank 0 of 1). Under ``torchrun --nproc_per_node N``
(environment ``WORLD_SIZE`` = N > 1), :func:`start_processes` joins the process group (NCCL on
CUDA, gloo on the CPU) and each process is one rank with GPU ``LOCAL_RANK``.

How a batch is split: every rank draws the *whole* global batch of a step from the step's
generator (the batch rows, flips and all per-sample noise: ``config batch_size`` rows, as one
process would), then keeps rows ``[rank * B / N, (rank + 1) * B / N)`` (:meth:`Shard.take`). So the
union of the ranks' rows is exactly the single-process batch, for any N dividing the batch size;
DistributedDataParallel averages the gradients of the ranks' mean losses, which is the gradient of
the single-process mean loss (up to floating-point summation order). Only rank 0 writes
checkpoints, weights, metrics and the progress bar.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from ...core.errors import ConfigError

T = TypeVar("T")
AMP_MODES = ("bf16", "none")


def training_amp(requested: str | None, device: torch.device) -> str:
    """The autocast of a training run: ``"none"`` on the CPU whatever is requested (CPU numerics stay
    fp32, bit for bit); on CUDA the recipe's ``amp`` (default ``"bf16"``)."""
    if requested is not None and requested not in AMP_MODES:
        raise ConfigError(f"config key `amp` must be one of {', '.join(AMP_MODES)}, got {requested!r}")
    if device.type != "cuda":
        return "none"
    return requested or "bf16"


def full_precision(device_type: str) -> contextlib.AbstractContextManager:
    """A block that runs in fp32 inside an autocast region (nothing changes outside one)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


@dataclasses.dataclass(frozen=True)
class Shard:
    """One training process: ``rank`` of ``world`` on ``device`` with autocast ``amp``; ``cuda_graphs``: its
    generative training steps are replayed as CUDA graphs (config key ``cuda.train_graphs``)."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    amp: str = "none"
    cuda_graphs: bool = False

    @property
    def writer(self) -> bool:
        """Whether this process writes checkpoints, outputs and logs (rank 0)."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        """Whether batches must be split or moved (several ranks or a non-CPU device); a plain CPU run
        is not, and then the training loops run exactly as a single CPU process always did."""
        return self.world > 1 or self.device.type != "cpu"

    def with_amp(self, requested: str | None) -> Shard:
        """This shard with the recipe's ``amp`` key resolved for its device (:func:`training_amp`)."""
        return dataclasses.replace(self, amp=training_amp(requested, self.device))

    def rows(self, n: int) -> slice:
        """This rank's rows of a global batch of ``n``."""
        if n % self.world:
            raise ConfigError(f"the batch size ({n}) must be a multiple of the number of training processes "
                              f"({self.world}, config key `gpus_per_train`)")
        k = n // self.world
        return slice(self.rank * k, (self.rank + 1) * k)

    def take(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """This rank's rows of each full-batch tensor, on this shard's device."""
        out = []
        for t in tensors:
            if self.world > 1:
                t = t[self.rows(t.shape[0])]
            out.append(t.to(self.device, non_blocking=True))
        return tuple(out)

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """The forward / loss region: bf16 autocast when ``amp == "bf16"``, else nothing (``cache=False``
        inside a captured CUDA graph, which must not keep casts cached between replays)."""
        if self.amp == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=cache)
        return contextlib.nullcontext()

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` in DistributedDataParallel when there are several ranks, else ``model`` itself."""
        if self.world == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def mean(self, value: Tensor) -> Tensor:
        """The mean of a scalar over the ranks (the logged loss of the global batch)."""
        if self.world == 1:
            return value
        value = value.detach().float().clone()
        torch.distributed.all_reduce(value)
        return value / self.world

    def rank0_first(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0, then on the other ranks (e.g. reading a checkpoint that rank 0 may set aside)."""
        if self.world == 1:
            return fn()
        out = fn() if self.writer else None
        torch.distributed.barrier()
        return out if self.writer else fn()

    def peak_memory_mib(self) -> float | None:
        """Peak GPU memory allocated by this process (MiB), or None off CUDA."""
        if self.device.type != "cuda":
            return None
        return round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)

    def synchronize(self) -> None:
        """Wait for this device's queued work (so that timings cover it)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def unwrap(model: nn.Module) -> nn.Module:
    """The network inside a DistributedDataParallel wrapper (or ``model`` itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def world_size() -> int:
    """The number of training processes torchrun started (``WORLD_SIZE``; 1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def start_processes(device: torch.device | str, cuda_graphs: bool = False) -> Shard:
    """This process's :class:`Shard`: joins the process group when torchrun started several processes
    (NCCL on CUDA, gloo on the CPU) and picks GPU ``LOCAL_RANK``. Amp is resolved per recipe later.
    ``cuda_graphs`` (config key ``cuda.train_graphs``) applies to one process on a GPU; a CPU run ignores it."""
    device = torch.device(device)
    world = world_size()
    if world == 1:
        return Shard(device=device, cuda_graphs=bool(cuda_graphs) and device.type == "cuda")
    if cuda_graphs and device.type == "cuda":
        raise ConfigError("config key `cuda.train_graphs` replays one process's training steps; it needs "
                          f"`gpus_per_train: 1` (torchrun started {world} processes)")
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    if device.type == "cuda":
        if local >= torch.cuda.device_count():
            raise ConfigError(f"torchrun started {world} processes per node but only {torch.cuda.device_count()} "
                              f"GPU(s) are visible (config key `gpus_per_train`)")
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Shard(rank=rank, world=world, device=device)


def stop_processes() -> None:
    """Leave the process group (if one was joined)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@contextlib.contextmanager
def training_processes(device: torch.device | str, cuda_graphs: bool = False) -> Iterator[Shard]:
    """:func:`start_processes` ... :func:`stop_processes` around a block."""
    shard = start_processes(device, cuda_graphs)
    try:
        yield shard
    finally:
        stop_processes()


def args_of(shard: Shard | None) -> dict[str, Any]:
    """``{"shard": shard}`` for a loss function when the run is :attr:`Shard.active`, else ``{}`` (a plain
    CPU run calls ``loss_fn(model, x, g, step)`` as it always did)."""
    return {"shard": shard} if shard is not None and shard.active else {}
