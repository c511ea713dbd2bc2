"""Shared backbone and training loop of the two generative roles (``ddpm``, ``pmf``).

Both roles use the same diffusers ``UNet2DModel`` (built by :func:`build_unet` from the
``unet:`` block of a role's config), so that a dataset's DDPM and PMF get the same backbone
size; the PMF adds a second timestep embedding for ``h = t - r`` (``class_embed_type="timestep"``).
:func:`train_loop` is the one training loop both roles run: AdamW with linear warm-up,
EMA weights, gradient clipping, per-step seeded randomness (deterministic for a fixed seed on
the CPU, also across an interruption), tqdm progress and atomic resumable checkpoints.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vcebench.errors import UserError
from vcebench.io import atomic_path

# Settings of the generative roles, key -> type: what `vcebench.settings` checks (and coerces) when the
# config is loaded, and the allowed keys of each block.
UNET_SETTINGS: dict[str, Any] = {"block_out_channels": tuple[int, ...], "layers_per_block": int,
                                 "norm_num_groups": int, "attention": bool, "dropout": float}
TRAIN_SETTINGS: dict[str, Any] = {"steps": int, "batch_size": int, "lr": float, "warmup_steps": int,
                                  "ema_decay": float, "grad_clip": float, "weight_decay": float,
                                  "checkpoint_every": int, "hflip": bool, "channels_last": bool,
                                  "seed": int, "weights": str | None, "format": str | None}
UNET_KEYS = set(UNET_SETTINGS)
TRAIN_KEYS = set(TRAIN_SETTINGS)


class RoleConfigError(UserError, ValueError):
    """A bad ``models.<dataset>.<role>`` config block; the message names the key."""


def require(cfg: dict, key: str, role: str) -> Any:
    if key not in cfg:
        raise RoleConfigError(f"config key `models.<dataset>.{role}.{key}` is missing (see config/config.yaml)")
    return cfg[key]


def check_role_keys(cfg: dict, role: str, allowed: set[str]) -> None:
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise RoleConfigError(f"unknown key(s) {unknown} in config section `models.<dataset>.{role}`; "
                              f"allowed: {sorted(allowed)}")


def unet_kwargs(unet_cfg: dict, channels: int, resolution: int, h_conditioned: bool, role: str) -> dict:
    """``UNet2DModel`` constructor arguments from a role's ``unet:`` block.

    Attention-free down/up blocks; ``attention: true`` adds self-attention only in the mid block
    (lowest resolution). The PMF (``h_conditioned``) gets ``class_embed_type="timestep"``, i.e. a
    second sinusoidal + MLP embedding, fed ``h = t - r`` (docs/protocol.md, Pixel MeanFlow).
    """
    unknown = sorted(set(unet_cfg) - UNET_KEYS)
    if unknown:
        raise RoleConfigError(f"unknown key(s) {unknown} in `models.<dataset>.{role}.unet`; allowed: "
                              f"{sorted(UNET_KEYS)}")
    boc = tuple(int(c) for c in require(unet_cfg, "block_out_channels", f"{role}.unet"))
    groups = int(unet_cfg.get("norm_num_groups", 8))
    if any(c % groups for c in boc):
        raise RoleConfigError(f"`models.<dataset>.{role}.unet.block_out_channels` {list(boc)} must be "
                              f"divisible by norm_num_groups={groups}")
    if resolution % (2 ** (len(boc) - 1)):
        raise RoleConfigError(f"resolution {resolution} is not divisible by 2**{len(boc) - 1} "
                              f"(`models.<dataset>.{role}.unet.block_out_channels` has {len(boc)} levels)")
    return dict(
        sample_size=resolution, in_channels=channels, out_channels=channels, block_out_channels=boc,
        layers_per_block=int(unet_cfg.get("layers_per_block", 1)),
        down_block_types=("DownBlock2D",) * len(boc), up_block_types=("UpBlock2D",) * len(boc),
        add_attention=bool(unet_cfg.get("attention", False)), attention_head_dim=8,
        norm_num_groups=groups, dropout=float(unet_cfg.get("dropout", 0.0)),
        class_embed_type="timestep" if h_conditioned else None,
    )


def build_unet(kwargs: dict) -> nn.Module:
    from diffusers import UNet2DModel

    return UNet2DModel(**kwargs)


class ExplicitGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` written as mean/var arithmetic so forward-mode AD (``torch.func.jvp``) is fast.

    Same parameters and output as ``nn.GroupNorm`` (up to float rounding); the fused CPU kernel has
    no efficient forward-mode derivative (~200x slower than its forward in a probe, issue 3).
    """

    def forward(self, x: Tensor) -> Tensor:
        n, c = x.shape[:2]
        g = x.reshape(n, self.num_groups, -1)
        mean = g.mean(-1, keepdim=True)
        var = (g - mean).pow(2).mean(-1, keepdim=True)
        y = ((g - mean) * torch.rsqrt(var + self.eps)).reshape(x.shape)
        if self.affine:
            shape = (1, c) + (1,) * (x.ndim - 2)
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y


def use_explicit_groupnorm(module: nn.Module) -> nn.Module:
    """Swap every ``nn.GroupNorm`` in ``module`` for :class:`ExplicitGroupNorm` (weights kept)."""
    for name, child in list(module.named_children()):
        if type(child) is nn.GroupNorm:
            new = ExplicitGroupNorm(child.num_groups, child.num_channels, child.eps, child.affine)
            if child.affine:
                new.weight, new.bias = child.weight, child.bias
            setattr(module, name, new)
        else:
            use_explicit_groupnorm(child)
    return module


# ----------------------------------------------------------------------------- data helpers

def to_float_images(images_uint8: Tensor, what: str = "images") -> Tensor:
    """uint8 N x C x H x W -> float32 in [-1, 1] (``x / 127.5 - 1``, the harness convention)."""
    if not torch.is_tensor(images_uint8) or images_uint8.dtype != torch.uint8 or images_uint8.ndim != 4:
        got = (f"{images_uint8.dtype} {tuple(images_uint8.shape)}" if torch.is_tensor(images_uint8)
               else type(images_uint8).__name__)
        raise ValueError(f"{what}: expected a uint8 tensor N x C x H x W (the data loader's split.images), "
                         f"got {got}")
    return images_uint8.float() / 127.5 - 1.0


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """The RNG of one training step: a function of (seed, step) only, so a resumed run is identical."""
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + int(step) * 7919 + stream * 104_729) % (2**63 - 1))
    return g


def batch_at(images: Tensor, batch_size: int, g: torch.Generator, hflip: bool) -> Tensor:
    idx = torch.randint(0, images.shape[0], (batch_size,), generator=g)
    x = images[idx].float() / 127.5 - 1.0
    if hflip:
        flip = torch.rand(batch_size, generator=g) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return x


# ----------------------------------------------------------------------------- training loop

class EMA:
    """Exponential moving average of parameters with the usual ``(1 + n) / (10 + n)`` warm-up."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = float(decay)
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        d = min(self.decay, (1 + step) / (10 + step))
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].mul_(d).add_(v.detach(), alpha=1 - d)
            else:
                self.shadow[k].copy_(v)


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the base rate."""
    if step < warmup:
        return base * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def _save_checkpoint(path: Path, model: nn.Module, ema: EMA, opt: torch.optim.Optimizer, step: int,
                     losses: list[float], fp: str) -> None:
    with atomic_path(path) as tmp:
        torch.save({"model": model.state_dict(), "ema": ema.shadow, "opt": opt.state_dict(),
                    "step": torch.tensor(step), "losses": torch.tensor(losses, dtype=torch.float64),
                    "fingerprint": fp}, tmp)


def train_loop(model: nn.Module,
               loss_fn: Callable[[nn.Module, Tensor, torch.Generator, int], Tensor | tuple[Tensor, Tensor]],
               cfg: dict, images: Tensor, out_dir: Path, seed: int, role: str, progress: bool = True
               ) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Run ``cfg['steps']`` optimiser steps of ``loss_fn(model, x, generator, step)`` on uint8 ``images``.

    ``loss_fn`` returns the loss to minimise, or (that loss, the number to log), e.g. when an adaptive
    weight makes the minimised loss uninformative.

    Resumes from ``out_dir/checkpoint/state.pt`` (written atomically every ``checkpoint_every``
    steps) only if it was written with the same settings, seed, role and training images (a settings
    fingerprint, ``vcebench.models.training.load_resume_state``: a stale or corrupt state is set aside
    and reported). Returns the EMA state dict and training statistics (budget, wall time, loss curve).
    """
    from tqdm.auto import tqdm

    from vcebench.models.training import data_fingerprint, fingerprint, load_resume_state

    steps, bs = int(require(cfg, "steps", role)), int(require(cfg, "batch_size", role))
    base_lr = float(require(cfg, "lr", role))
    warmup = int(cfg.get("warmup_steps", min(100, steps // 10)))
    every = int(cfg.get("checkpoint_every", 200))
    hflip = bool(cfg.get("hflip", False))
    channels_last = bool(cfg.get("channels_last", True))
    ckpt = Path(out_dir) / "checkpoint" / "state.pt"

    torch.manual_seed(seed)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=base_lr, betas=(0.9, 0.99),
                            weight_decay=float(cfg.get("weight_decay", 0.0)))
    ema = EMA(model, float(cfg.get("ema_decay", 0.999)))
    start, losses = 0, []
    fp = fingerprint({"role": role, "seed": int(seed), "settings": cfg, "images": data_fingerprint(images)})
    state = load_resume_state(ckpt, fp, f"train {role}")
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        ema.shadow = state["ema"]
        start, losses = int(state["step"]), state["losses"].tolist()
    model.train()
    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), initial=start, total=steps, desc=f"train {role}", disable=not progress,
               mininterval=2.0)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, base_lr, warmup, steps)
        g = step_generator(seed, step)
        x = batch_at(images, bs, g, hflip)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        loss = loss_fn(model, x, g, step)
        loss, logged = loss if isinstance(loss, tuple) else (loss, loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.get("grad_clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), float(cfg["grad_clip"]))
        opt.step()
        ema.update(model, step)
        losses.append(float(logged.detach()))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
        if (step + 1) % every == 0 and step + 1 < steps:
            _save_checkpoint(ckpt, model, ema, opt, step + 1, losses, fp)
    seconds = time.perf_counter() - t0
    win = max(1, min(50, steps // 4))
    stats = {"steps": steps, "batch_size": bs, "images_seen": steps * bs, "train_seconds": seconds,
             "resumed_from_step": start, "threads": torch.get_num_threads(),
             "loss_first": _mean(losses[:win]), "loss_last": _mean(losses[-win:]), "loss_window": win,
             "loss_curve": [_mean(losses[i:i + max(1, steps // 20)]) for i in range(0, steps, max(1, steps // 20))]}
    shadow = {k: v.contiguous() for k, v in ema.shadow.items()}
    return shadow, stats


def remove_checkpoint(out_dir: Path) -> None:
    """Remove the resumable state after a finished training (keeps set-aside ``*.stale`` / ``*.corrupt``
    files, which were reported, and then the folder only if it is empty)."""
    d = Path(out_dir) / "checkpoint"
    if not d.is_dir():
        return
    for f in d.iterdir():
        if not f.name.endswith((".stale", ".corrupt")):
            shutil.rmtree(f) if f.is_dir() else f.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        d.rmdir()


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else float("nan")


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a fully written folder into place (removing an old one first)."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


# ----------------------------------------------------------------------------- evaluation helpers

def save_grid(images: Tensor, path: Path, nrow: int = 8) -> None:
    """Write [-1, 1] images as one PNG grid, atomically."""
    from torchvision.utils import save_image

    with atomic_path(path) as tmp:
        save_image((images.clamp(-1, 1) + 1) / 2, tmp, nrow=nrow, padding=1, format="png")


def high_frequency_energy(x: Tensor) -> Tensor:
    """Mean squared response to a 3x3 Laplacian, per image (a sharpness measure)."""
    k = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], dtype=x.dtype)
    k = k.reshape(1, 1, 3, 3).repeat(x.shape[1], 1, 1, 1)
    return F.conv2d(x, k, groups=x.shape[1]).pow(2).mean(dim=(1, 2, 3))


def sharpness_ratio(pred: Tensor, real: Tensor) -> float:
    """High-frequency energy of ``pred`` relative to real images: 1 = as sharp as the data,
    < 1 blurrier (Tweedie / MMSE estimates), > 1 noisier. A realism proxy until a FID is available."""
    return float(high_frequency_energy(pred).mean() / high_frequency_energy(real).mean().clamp_min(1e-12))


def batched(fn: Callable[[Tensor], Tensor], x: Tensor, batch_size: int = 128) -> Tensor:
    return torch.cat([fn(x[i:i + batch_size]) for i in range(0, x.shape[0], batch_size)])


def evaluate_generative(role: str, model_dir: str | Path, val_images_uint8: Tensor,
                        feature_fn: Callable[[Tensor], Tensor] | None = None, feature_name: str | None = None,
                        reference_ddpm_dir: str | Path | None = None, seed: int = 0, n_images: int = 256,
                        n_samples: int = 64, write: bool = True) -> dict[str, Any]:
    """Re-evaluate a trained ``ddpm`` / ``pmf`` folder with a feature network (FID) and, for the pmf,
    against the dataset's DDPM (issue 3's quality gate); merged into ``model_dir/metrics.json``
    under ``"eval_fid"`` (and ``"quality_gate"``) when ``write``. Returns the new entries.

    For the zoo: call it once ``fid_features`` (and the ``ddpm``) of the dataset exist, e.g.
    ``evaluate_generative("pmf", dir, val.images, fidnet, name, reference_ddpm_dir=ddpm_dir)``.
    """
    import json

    from vcebench.io import write_json

    model_dir = Path(model_dir)
    val = to_float_images(val_images_uint8[:n_images], f"evaluate_generative({role}): val_images_uint8")
    if role == "ddpm":
        from vcebench.models.ddpm import DiffusersDDPM, evaluate_ddpm

        model = DiffusersDDPM.from_pretrained_dir(model_dir)
        ev, _ = evaluate_ddpm(model, val, seed + 1, n_samples, feature_fn=feature_fn, feature_name=feature_name)
        new: dict[str, Any] = {"eval_fid": ev}
    elif role == "pmf":
        from vcebench.models.ddpm import DiffusersDDPM
        from vcebench.models.pmf import PixelMeanFlow, evaluate_pmf, gate

        model = PixelMeanFlow.load(model_dir)
        ref = DiffusersDDPM.from_pretrained_dir(reference_ddpm_dir) if reference_ddpm_dir else None
        ev, _ = evaluate_pmf(model, val, seed + 1, n_samples, feature_fn=feature_fn, feature_name=feature_name,
                             ddpm=ref)
        new = {"eval_fid": ev, "quality_gate": gate(ev)}
    else:
        raise ValueError(f"evaluate_generative: role must be 'ddpm' or 'pmf', got {role!r}")
    if write:
        path = model_dir / "metrics.json"
        old = json.loads(path.read_text()) if path.is_file() else {}
        write_json(path, {**old, **new})
    return new
