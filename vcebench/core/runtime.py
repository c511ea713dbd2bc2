"""Process-wide torch settings: threads on small CPUs, TF32 / cuDNN on a GPU, where the noise generators live.
The optional speed-ups applied to a task's networks are :mod:`vcebench.models.accelerate`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from threadpoolctl import threadpool_limits


def setup_torch(threads: int | None = None, device: str = "cpu", cuda: Mapping[str, Any] | None = None) -> torch.device:
    """Set torch threads to exactly ``threads`` (never oversubscribe), flush denormals.

    ``threads`` defaults to ``$VCEBENCH_THREADS`` or the number of usable cores. On ``cuda``, the
    config's ``cuda`` section (``cuda``, needed there) sets TF32 and cuDNN autotuning; ``cuda`` without a
    visible GPU raises ``ConfigError``.
    """
    if threads is None:
        threads = int(os.environ.get("VCEBENCH_THREADS", 0)) or len(os.sched_getaffinity(0))
    threads = max(1, int(threads))
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass
    torch.set_flush_denormal(True)
    # numpy / scipy BLAS pools too (a 128-d sqrtm took 3 s instead of 0.05 s when oversubscribed).

    threadpool_limits(threads)
    if device == "cuda" and not torch.cuda.is_available():
        from .errors import ConfigError  # one line from the CLI, never a silent CPU run

        raise ConfigError("device 'cuda' requested (config key `device`) but no CUDA device is available")
    if device == "cuda":
        if cuda is None:
            raise ValueError("setup_torch(device='cuda') needs the config's `cuda` section")
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(cuda["tf32"])
        torch.backends.cudnn.benchmark = bool(cuda["cudnn_benchmark"])
    return torch.device(device)


def noise_device(cuda: Mapping[str, Any] | None, device: torch.device | str) -> torch.device:
    """Where the per-sample noise generators live: the GPU when ``device`` is CUDA and ``noise_on_device``
    of the config's ``cuda`` section (``cuda``, needed on a GPU), else the CPU (``vcebench.core.rng``)."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.device("cpu")
    if not cuda:
        raise ValueError("noise_device on a GPU needs the config's `cuda` section")
    return device if bool(cuda["noise_on_device"]) else torch.device("cpu")
