"""Process-wide torch settings that matter on small CPUs (see the developers' brief)."""

from __future__ import annotations

import os

import torch


def setup_torch(threads: int | None = None, device: str = "cpu") -> torch.device:
    """Set torch threads to exactly ``threads`` (never oversubscribe), flush denormals.

    ``threads`` defaults to ``$VCEBENCH_THREADS`` or the number of usable cores.
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
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested (config key `device`) but no CUDA device is available")
    return torch.device(device)
