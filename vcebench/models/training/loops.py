"""The training loop of the small networks (classifier family, oracle, identity, perceptual, simsiam) and what every
trained role's statistics share.

- :func:`train_loop`: ``step_fn(step) -> loss``, cosine learning rate; the global torch RNG is reseeded from
  ``rng.step_seed(seed, step)`` at every step; resumes from an atomic checkpoint
  (``vcebench.models.checkpoints``) only when it was written with the same settings.
- :func:`throughput`: training images per second and where the run computed (both loops);
  :func:`to_float_images`: the harness's uint8 images as floats in [-1, 1].

The two generative roles' loop (``ddpm``, ``pmf``): ``vcebench.models.training.generative``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ...core.io import from_uint8
from ...core.rng import step_seed
from ..checkpoints import (
    CHECKPOINT,
    fingerprint,
    load_resume_state,
    save_resume_state,
)
from .distributed import Shard

# ----------------------------------------------------------------------------- data helpers

def identity_halves(identity: Tensor, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Split rows into two halves by identity (seeded permutation of the sorted unique ids).

    Half A trains the explained classifier, half B the oracle (different data).
    """
    ids = torch.unique(identity)
    g = torch.Generator().manual_seed(seed)
    perm = ids[torch.randperm(len(ids), generator=g)]
    in_a = torch.isin(identity, perm[: len(perm) // 2])
    return torch.nonzero(in_a).flatten(), torch.nonzero(~in_a).flatten()


def to_float_images(images_uint8: Tensor, what: str = "images") -> Tensor:
    """uint8 N x C x H x W -> float32 in [-1, 1] (``x / 127.5 - 1``, the harness convention)."""
    if not torch.is_tensor(images_uint8) or images_uint8.dtype != torch.uint8 or images_uint8.ndim != 4:
        got = (f"{images_uint8.dtype} {tuple(images_uint8.shape)}" if torch.is_tensor(images_uint8)
               else type(images_uint8).__name__)
        raise ValueError(f"{what}: expected a uint8 tensor N x C x H x W (the data loader's split.images), "
                         f"got {got}")
    return from_uint8(images_uint8)


# ----------------------------------------------------------------------------- loop

def cosine_lr(step: int, steps: int, lr: float, warmup: int = 50) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    return 0.5 * lr * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_loop(model: nn.Module, optimizer: torch.optim.Optimizer, step_fn: Callable[[int], Tensor],
               steps: int, out_dir: str | Path, seed: int, settings: dict, desc: str,
               lr: float, warmup: int = 50, ckpt_every: int = 200, progress: bool = True) -> dict[str, Any]:
    """Run ``steps`` optimisation steps of ``step_fn(step) -> loss``, resuming from ``out_dir/checkpoint.pt``.

    The checkpoint is reused only if it was written with the same settings (fingerprint).
    Returns ``{"losses": [...], "train_seconds": float, "resumed_from": int, "images_per_second": float}``;
    losses cover all steps; images per second (``settings["batch"]`` per step) cover this run's steps.
    """
    out_dir = Path(out_dir)
    ckpt_path = out_dir / CHECKPOINT
    fp = fingerprint(settings)
    start, losses, seconds = 0, [], 0.0
    ck = load_resume_state(ckpt_path, fp, desc)
    if ck is not None:
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        start, losses, seconds = int(ck["step"]), list(ck["losses"]), float(ck["seconds"])
        tqdm.write(f"[{desc}] resuming from {ckpt_path} at step {start}/{steps}")
    warmup = min(warmup, max(1, steps // 5))
    model.train()
    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), desc=desc, initial=start, total=steps, disable=not progress,
               mininterval=2.0)
    # images per step, for the throughput only; every role's recipe has one (0: a caller's own settings without)
    batch = int(settings.get("batch", 0))
    for step in bar:
        torch.manual_seed(step_seed(seed, step))
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, warmup)
        loss = step_fn(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}",
                            img_s=f"{(step + 1 - start) * batch / max(time.perf_counter() - t0, 1e-9):.0f}")
        if (step + 1) % ckpt_every == 0 and step + 1 < steps:
            save_resume_state(ckpt_path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                          "step": step + 1, "losses": losses,
                                          "seconds": seconds + time.perf_counter() - t0, "fingerprint": fp})
    model.eval()
    run_seconds = time.perf_counter() - t0
    return {"losses": losses, "train_seconds": seconds + run_seconds, "resumed_from": start,
            "images_per_second": throughput(steps - start, batch, run_seconds)["images_per_second"]}


def loss_summary(losses: list[float], k: int = 50) -> dict[str, float]:
    """First / last windowed mean of the training loss (the 'loss falls' evidence in metrics.json)."""
    k = max(1, min(k, len(losses) // 2 or 1))
    return {"loss_first": sum(losses[:k]) / k, "loss_last": sum(losses[-k:]) / k}


def count_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def throughput(steps: int, batch_size: int, seconds: float, shard: Shard | None = None) -> dict[str, Any]:
    """Training images per second over ``steps`` steps of this run (resumed steps excluded), and where
    the run computed: device, processes, autocast and (on CUDA) this process's peak GPU memory."""
    shard = shard or Shard()
    out: dict[str, Any] = {"images_per_second": round(steps * batch_size / max(seconds, 1e-9), 2),
                           "device": str(shard.device), "processes": shard.world, "amp": shard.amp}
    peak = shard.peak_memory_mib()
    if peak is not None:
        out["peak_gpu_memory_mib"] = peak
    return out
