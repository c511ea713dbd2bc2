"""Shared training machinery for the synthetic roles: augmentation, PGD, a resumable loop, storage.

Determinism: the global torch RNG is reseeded from ``(seed, step)`` at every step, so a run
interrupted at step k and resumed from its checkpoint takes exactly the same batches,
augmentations and updates as an uninterrupted one (on the CPU, at a fixed thread count).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..errors import UserError
from ..io import atomic_path, write_json

CHECKPOINT = "checkpoint.pt"
FORMAT = "vcebench-synthetic-v1"


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be loaded for a role; the message names role, path and mismatch."""


# ----------------------------------------------------------------------------- data helpers

def to_float(images_uint8: Tensor) -> Tensor:
    """uint8 (N, C, H, W) -> float32 in [-1, 1] (the harness convention, docs/architecture.md)."""
    return images_uint8.float() / 127.5 - 1.0


def identity_halves(identity: Tensor, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Split rows into two halves by identity (seeded permutation of the sorted unique ids).

    Half A trains the explained classifier, half B the oracle (different data, issue 3).
    """
    ids = torch.unique(identity)
    g = torch.Generator().manual_seed(seed)
    perm = ids[torch.randperm(len(ids), generator=g)]
    in_a = torch.isin(identity, perm[: len(perm) // 2])
    return torch.nonzero(in_a).flatten(), torch.nonzero(~in_a).flatten()


# ----------------------------------------------------------------------------- augmentation

def gaussian_blur(x: Tensor, sigma: Tensor) -> Tensor:
    """Per-sample isotropic Gaussian blur (``sigma``: (N,), 0 = unchanged), separable, reflect padding."""
    n, c, h, w = x.shape
    radius = max(1, int(math.ceil(3 * float(sigma.max()))))
    r = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    s = sigma.to(x.dtype).clamp_min(1e-3)[:, None]
    k = torch.exp(-0.5 * (r[None] / s) ** 2)
    k = k / k.sum(dim=1, keepdim=True)
    k = k.repeat_interleave(c, dim=0)  # (N*C, K)
    y = F.pad(x.reshape(1, n * c, h, w), (radius, radius, radius, radius), mode="reflect")
    y = F.conv2d(y, k[:, None, None, :], groups=n * c)
    y = F.conv2d(y, k[:, None, :, None], groups=n * c)
    y = y.reshape(n, c, h, w)
    return torch.where((sigma > 0).view(n, 1, 1, 1), y, x)


def random_shift(x: Tensor, max_shift: int) -> Tensor:
    """Translate each sample by up to ``max_shift`` pixels (reflect padding)."""
    if max_shift <= 0:
        return x
    n, _, h, w = x.shape
    p = F.pad(x, (max_shift,) * 4, mode="reflect")
    dx = torch.randint(0, 2 * max_shift + 1, (n,))
    dy = torch.randint(0, 2 * max_shift + 1, (n,))
    return torch.stack([p[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])


def augment(x: Tensor, noise: float = 0.0, blur: float = 0.0, shift: int = 0, flip: bool = False,
            p: float = 0.5) -> Tensor:
    """Flip / shift / blur (sigma ~ U(0, blur) px) / Gaussian noise (std ~ U(0, noise)), each with prob. ``p``.

    Noise and blur augmentation keep the classifier's input gradients from being pure
    high-frequency adversarial directions (issue 3: a clean-trained CNN is flipped by colour blobs).
    """
    n = x.shape[0]
    if flip:
        x = torch.where((torch.rand(n) < 0.5).view(n, 1, 1, 1), x.flip(3), x)
    x = random_shift(x, shift)
    if blur > 0:
        x = gaussian_blur(x, torch.rand(n) * blur * (torch.rand(n) < p))
    if noise > 0:
        std = torch.rand(n) * noise * (torch.rand(n) < p)
        x = x + std.view(n, 1, 1, 1) * torch.randn_like(x)
    return x.clamp(-1, 1)


def pgd(loss_fn: Callable[[Tensor], Tensor], x: Tensor, eps: float, steps: int,
        step_size: float | None = None, random_start: bool = True) -> Tensor:
    """L-inf PGD (Madry et al. 2018) that *maximises* ``loss_fn(x_adv).sum()``; stays in [-1, 1]."""
    step_size = step_size if step_size is not None else 2.5 * eps / max(steps, 1)
    x = x.detach()
    delta = (torch.rand_like(x) * 2 - 1) * eps if random_start else torch.zeros_like(x)
    for _ in range(steps):
        delta.requires_grad_(True)
        with torch.enable_grad():
            loss = loss_fn((x + delta).clamp(-1, 1)).sum()
            (g,) = torch.autograd.grad(loss, delta)
        delta = (delta.detach() + step_size * g.sign()).clamp(-eps, eps)
    return (x + delta).clamp(-1, 1).detach()


# ----------------------------------------------------------------------------- loop

def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7919) % (2**63 - 1)


def cosine_lr(step: int, steps: int, lr: float, warmup: int = 50) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    return 0.5 * lr * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def fingerprint(settings: dict) -> str:
    """A short hash of the settings a resumable training state depends on (JSON, sorted keys)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_fingerprint(images: Tensor, n: int = 256) -> dict[str, Any]:
    """Shape and a hash of ``n`` evenly spaced rows of a training tensor (part of a resume fingerprint:
    a re-rendered or different dataset must not resume an old state)."""
    step = max(1, images.shape[0] // n)
    raw = images[::step].contiguous().cpu().numpy().tobytes()
    return {"shape": list(images.shape), "dtype": str(images.dtype), "sha256": hashlib.sha256(raw).hexdigest()[:16]}


def set_aside(path: Path, why: str) -> Path:
    """Rename ``path`` to ``<path>.<why>`` (replacing an older one) so that it is never resumed."""
    dest = path.with_name(f"{path.name}.{why}")
    os.replace(path, dest)
    return dest


def load_resume_state(path: str | Path, fp: str, desc: str) -> dict | None:
    """The resumable training state at ``path`` if it was written with settings fingerprint ``fp``.

    A state written with other settings (or without a fingerprint) is renamed ``<path>.stale`` and an
    unreadable one ``<path>.corrupt``; both are reported on stderr and training starts from step 0.
    Both training loops (this module's and ``vcebench.models.unet``'s) resume through this function.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"holds a {type(state).__name__}, not a training state")
    except Exception as e:  # a truncated / corrupt / foreign file: never a traceback, never resumed
        dest = set_aside(path, "corrupt")
        tqdm.write(f"[{desc}] unreadable checkpoint {path} ({type(e).__name__}: {str(e)[:200]}); "
                   f"set aside as {dest.name}; training starts from step 0", file=sys.stderr)
        return None
    if state.get("fingerprint") != fp:
        dest = set_aside(path, "stale")
        tqdm.write(f"[{desc}] checkpoint {path} was written with other settings (fingerprint "
                   f"{state.get('fingerprint')!r}, now {fp!r}); set aside as {dest.name}; training starts "
                   f"from step 0", file=sys.stderr)
        return None
    return state


def train_loop(model: nn.Module, optimizer: torch.optim.Optimizer, step_fn: Callable[[int], Tensor],
               steps: int, out_dir: str | Path, seed: int, settings: dict, desc: str,
               lr: float, warmup: int = 50, ckpt_every: int = 200, progress: bool = True) -> dict[str, Any]:
    """Run ``steps`` optimisation steps of ``step_fn(step) -> loss``, resuming from ``out_dir/checkpoint.pt``.

    The checkpoint is reused only if it was written with the same settings (fingerprint).
    Returns ``{"losses": [...], "train_seconds": float, "resumed_from": int}``; losses cover all steps.
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
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
        if (step + 1) % ckpt_every == 0 and step + 1 < steps:
            _save_checkpoint(ckpt_path, model, optimizer, step + 1, losses,
                             seconds + time.perf_counter() - t0, fp)
    model.eval()
    return {"losses": losses, "train_seconds": seconds + time.perf_counter() - t0, "resumed_from": start}


def _save_checkpoint(path: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int,
                     losses: list[float], seconds: float, fp: str) -> None:
    with atomic_path(path) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                    "losses": losses, "seconds": seconds, "fingerprint": fp}, tmp)


def loss_summary(losses: list[float], k: int = 50) -> dict[str, float]:
    """First / last windowed mean of the training loss (the 'loss falls' evidence in metrics.json)."""
    k = max(1, min(k, len(losses) // 2 or 1))
    return {"loss_first": sum(losses[:k]) / k, "loss_last": sum(losses[-k:]) / k}


# ----------------------------------------------------------------------------- storage

def save_trained(out_dir: str | Path, model: nn.Module, config: dict, metrics: dict) -> None:
    """Write ``model.safetensors`` + ``config.json``, then ``metrics.json`` (the workflow's sentinel).

    Removes the resume checkpoint afterwards.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_file(state, str(tmp), metadata={"format": FORMAT, "role": config.get("role", "")})
    write_json(out_dir / "config.json", {"format": FORMAT, **config})
    write_json(out_dir / "metrics.json", metrics)
    (out_dir / CHECKPOINT).unlink(missing_ok=True)


def read_trained(role: str, path: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """Read ``config.json`` + ``model.safetensors`` of a trained role; CheckpointError on any problem."""
    path = Path(path)
    cfg_path, w_path = path / "config.json", path / "model.safetensors"
    for p in (cfg_path, w_path):
        if not p.exists():
            raise CheckpointError(f"role {role!r}: {p} is missing (an incomplete training run?)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"role {role!r}: {cfg_path} is not valid JSON ({e})") from e
    if cfg.get("format") != FORMAT:
        raise CheckpointError(f"role {role!r}: {cfg_path} has format {cfg.get('format')!r}, expected {FORMAT!r}")
    if cfg.get("role") != role:
        raise CheckpointError(f"role {role!r}: {path} holds a {cfg.get('role')!r} network, not a {role!r} one")
    try:
        state = load_file(str(w_path))
    except Exception as e:
        raise CheckpointError(f"role {role!r}: cannot read {w_path} (corrupt or not safetensors): {e}") from e
    return cfg, state


def load_state_strict(role: str, path: str | Path, model: nn.Module, state: dict[str, Tensor]) -> None:
    """``load_state_dict(strict=True)`` with a message naming the role, the path and the mismatch."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key(s), e.g. {missing[:3]}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s), e.g. {unexpected[:3]}")
        if shapes:
            parts.append(f"shape mismatch: {'; '.join(shapes[:3])}")
        raise CheckpointError(f"role {role!r}: weights in {path} do not fit the expected architecture "
                              f"({type(model).__name__}): " + "; ".join(parts))
    model.load_state_dict(state, strict=True)


def count_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())
