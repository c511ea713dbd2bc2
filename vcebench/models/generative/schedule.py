"""The noise schedule of the ``ddpm`` role: the diffusers scheduler of a ``models.<dataset>.ddpm`` block and the
float64 ``alphas_cumprod`` of a block, of a diffusers ``scheduler/`` folder or of a scheduler (one computation,
read by the network, ``ddpm.DiffusersDDPM``, and by the noise protocol, ``vcebench.protocol.noise``), and the
respacing of a schedule (:func:`space_timesteps`, ``methods/ddpm.py``'s samplers and the noise protocol).

Torch-free for a linear schedule (the recipes' and DiME's): the config check that runs when the workflow builds
its DAG resolves every DDPM method's start step on it and would otherwise start torch (seconds) in every
``snakemake`` call; another schedule, or a ``scheduler/`` folder, is diffusers' (which imports torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..training.settings import require
from .settings import DDPM_DEFAULTS


def linear_alphas_cumprod(beta_start: float, beta_end: float, steps: int) -> np.ndarray:
    """float64 ``alphas_cumprod`` of ``steps`` linear betas from ``beta_start`` to ``beta_end``."""
    return np.cumprod(1.0 - np.linspace(float(beta_start), float(beta_end), int(steps), dtype=np.float64))


def space_timesteps(num_train_timesteps: int, respacing: int) -> list[int]:
    """guided-diffusion ``space_timesteps(T, [respacing])``: evenly strided train timesteps."""
    if not 1 <= respacing <= num_train_timesteps:
        raise ValueError(f"respacing must be in [1, {num_train_timesteps}], got {respacing}")
    if respacing == 1:
        return [0]
    stride = (num_train_timesteps - 1) / (respacing - 1)
    return sorted({round(i * stride) for i in range(respacing)})


def ddpm_scheduler(cfg: dict) -> Any:
    """The diffusers ``DDPMScheduler`` of a ``ddpm`` block (keys it leaves out: ``settings.DDPM_DEFAULTS``)."""
    from diffusers import DDPMScheduler

    cfg = {**DDPM_DEFAULTS, **cfg}
    return DDPMScheduler(num_train_timesteps=int(require(cfg, "num_train_timesteps", "ddpm")),
                         beta_start=float(cfg["beta_start"]), beta_end=float(cfg["beta_end"]),
                         beta_schedule=str(cfg["beta_schedule"]), prediction_type="epsilon",
                         clip_sample=True, variance_type="fixed_small")


def scheduler_alphas_cumprod(scheduler: Any) -> np.ndarray:
    """float64 ``alphas_cumprod`` of a diffusers scheduler: a linear one recomputed in float64 (diffusers keeps
    float32 betas), any other from its betas."""
    c = scheduler.config
    if c.get("trained_betas") is None and c.beta_schedule == "linear":
        return linear_alphas_cumprod(c.beta_start, c.beta_end, c.num_train_timesteps)
    return np.cumprod(1.0 - scheduler.betas.double().numpy())


def schedule_alphas_cumprod(cfg: dict | None = None, scheduler_dir: str | Path | None = None) -> np.ndarray:
    """float64 ``alphas_cumprod`` of a ``models.<dataset>.ddpm`` config block, or of a diffusers
    ``scheduler/`` folder, without building the network (the same numbers as ``DiffusersDDPM.alphas_cumprod``)."""
    if scheduler_dir is not None:
        from diffusers import DDPMScheduler

        return scheduler_alphas_cumprod(DDPMScheduler.from_pretrained(Path(scheduler_dir), local_files_only=True))
    cfg = {**DDPM_DEFAULTS, **(cfg or {})}
    if str(cfg["beta_schedule"]) == "linear":  # scheduler_alphas_cumprod's numbers, without diffusers
        return linear_alphas_cumprod(cfg["beta_start"], cfg["beta_end"], require(cfg, "num_train_timesteps", "ddpm"))
    return scheduler_alphas_cumprod(ddpm_scheduler(cfg))
