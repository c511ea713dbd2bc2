"""The training schedule a released DDPM format states (what the noise rule matches FiRe's t to)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def released_schedule(spec: dict, dataset: str) -> tuple[np.ndarray, str] | None:
    """The training schedule a released DDPM format states: guided-diffusion's ``diffusion_steps`` /
    ``noise_schedule`` flags (keys or ``model_flags``), torch_module's keys of the same names, FastDiME_Med's
    ``TrainingConfig.TIMESTEPS`` (linear) in config.pickle; None when the format states none or its config
    cannot be read (loading the weights then says why)."""
    from .guided_flags import CONFIG_FLAG_KEYS, guided_flags
    from .guided_unet import betas_for

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
        betas = betas_for(schedule, steps)
    except ValueError:
        return None
    return np.cumprod(1.0 - betas.numpy()), f"{where}: {schedule} betas, T = {steps}"
