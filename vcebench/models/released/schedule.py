"""The training schedule a released DDPM format states (what the noise rule matches FiRe's t to), and
guided-diffusion's named beta schedules the released networks are built with (``unet_ddpm.UNetDDPM``,
``torch_module.ModuleDDPM``).

Torch-free (numpy): the config check that runs when the workflow builds its DAG resolves the noise rule on a
released DDPM's schedule.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def betas_for(schedule: str, steps: int) -> np.ndarray:
    """guided-diffusion's named beta schedules, float64: ``linear`` scaled by 1000 / T (Ho et al.'s
    1e-4..0.02 at T = 1000) or ``cosine`` (Nichol & Dhariwal 2021, betas capped at 0.999)."""
    if schedule == "linear":
        scale = 1000 / steps
        return np.linspace(scale * 1e-4, scale * 0.02, steps, dtype=np.float64)
    if schedule == "cosine":
        def abar(t: float) -> float:
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        return np.array([min(1 - abar((i + 1) / steps) / abar(i / steps), 0.999) for i in range(steps)],
                        dtype=np.float64)
    raise ValueError(f"unknown noise schedule {schedule!r}")


def alphas_cumprod_for(schedule: str, steps: int) -> np.ndarray:
    """float64 ``alphas_cumprod`` of :func:`betas_for`."""
    return np.cumprod(1.0 - betas_for(schedule, steps))


def released_schedule(spec: dict, dataset: str) -> tuple[np.ndarray, str] | None:
    """The training schedule a released DDPM format states: guided-diffusion's ``diffusion_steps`` /
    ``noise_schedule`` flags (keys or ``model_flags``), torch_module's keys of the same names, FastDiME_Med's
    ``TrainingConfig.TIMESTEPS`` (linear) in config.pickle; None when the format states none or its config
    cannot be read (loading the weights then says why)."""
    from .guided_flags import CONFIG_FLAG_KEYS, guided_flags

    fmt, where = spec.get("format"), f"models.{dataset}.ddpm ({spec.get('format')} {spec.get('weights')})"
    if fmt == "guided_diffusion":  # the flag keys, or the pasted `model_flags` over guided-diffusion's defaults
        try:
            flags = guided_flags({k: v for k, v in spec.items() if k in CONFIG_FLAG_KEYS}, spec.get("model_flags"))
        except (ValueError, TypeError):
            return None
        steps, schedule = int(flags["diffusion_steps"]), str(flags["noise_schedule"])
    elif fmt == "torch_module":
        if not isinstance(spec.get("diffusion_steps"), int):
            return None
        from .formats import TORCH_MODULE_DEFAULTS

        steps, schedule = spec["diffusion_steps"], str({**TORCH_MODULE_DEFAULTS, **spec}["noise_schedule"])
    elif fmt == "fastdime_chexpert":
        from .fastdime_unet import TIMESTEPS, UnsafePickleError, read_plain_pickle

        try:  # the TIMESTEPS its config.pickle states (FastDiME_Med's default when it states none)
            steps = int(read_plain_pickle(Path(spec["weights"]) / "config.pickle")["TrainingConfig"]
                        .get("TIMESTEPS", TIMESTEPS))
        except (OSError, UnsafePickleError, KeyError, TypeError, ValueError, AttributeError):
            return None
        schedule = "linear"
    else:
        return None
    try:
        abar = alphas_cumprod_for(schedule, steps)
    except ValueError:
        return None
    return abar, f"{where}: {schedule} betas, T = {steps}"
