"""The settings of the two generative roles: the keys and types of a ``models.<dataset>.ddpm`` / ``pmf`` block and
of its ``unet:`` block, the recipes' defaults, and the checks that need no network (the UNet's downsampling, the
pmf's flow-matching warm start).

Torch-free on purpose: the config check that runs when the workflow builds its DAG reads these tables
(``vcebench.protocol.settings``) and would otherwise start torch (seconds) in every ``snakemake`` call. The
networks that use them: ``unet.py``, ``ddpm.py``, ``pmf.py``, ``meanflow.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from ..training.settings import TRAIN_DEFAULTS, TRAIN_SETTINGS, RoleConfigError

# Settings of the generative roles, key -> type: what `vcebench.protocol.settings` checks (and coerces) when the
# config is loaded, and the allowed keys of each block.
UNET_SETTINGS: dict[str, Any] = {"block_out_channels": tuple[int, ...], "layers_per_block": int,
                                 "norm_num_groups": int, "attention": bool, "dropout": float}
UNET_KEYS = set(UNET_SETTINGS)
# The defaults of a role's ``unet:`` block (``block_out_channels`` is required).
UNET_DEFAULTS: dict[str, Any] = {"layers_per_block": 1, "norm_num_groups": 8, "attention": False, "dropout": 0.0}


def unet_downsampling(block_out_channels) -> int:
    """How much the UNet of ``block_out_channels`` downsamples (2 per level below the first): the image
    resolution must be a multiple of it."""
    return 2 ** (len(block_out_channels) - 1)


DDPM_SETTINGS: dict[str, Any] = {**TRAIN_SETTINGS, "unet": dict, "num_train_timesteps": int, "beta_start": float,
                                 "beta_end": float, "beta_schedule": str, "eval_images": int, "sample_steps": int,
                                 "n_samples": int}
DDPM_KEYS = set(DDPM_SETTINGS)
# The format of the folders train_ddpm writes (``config.json``), and of a ddpm block's ``weights`` without ``format``
DIFFUSERS_FORMAT = "diffusers"
# The ``ddpm`` recipe's defaults, for the keys a ``models.<dataset>.ddpm`` block may leave out (the training loop's
# from ``training.TRAIN_DEFAULTS``); ``unet``, ``num_train_timesteps``, ``steps``, ``batch_size`` and ``lr`` are
# required. Linear betas 2e-4..0.04: DiME's CelebA schedule for T = 500 (``ddpm.py``'s docstring).
DDPM_DEFAULTS: dict[str, Any] = {**TRAIN_DEFAULTS, "beta_start": 2e-4, "beta_end": 0.04, "beta_schedule": "linear",
                                 "eval_images": 256, "n_samples": 64, "sample_steps": 50}

PMF_SETTINGS: dict[str, Any] = {**TRAIN_SETTINGS, "unet": dict, "jvp": Literal["fd", "exact"], "fd_eps": float,
                                "fm_warmup": float, "fm_warmup_steps": int | None,
                                "p_fm": float, "p_r0": float, "t_mean": float, "t_std": float,
                                "p_t_uniform": float, "p_t1": float, "adaptive_p": float, "adaptive_eps": float,
                                "t_clip": float, "time_scale": float, "precond": Literal["edm", "none"],
                                "sigma_data": float, "eval_images": int, "n_samples": int,
                                "perceptual_weight": float, "features_weight": float, "perceptual_max_t": float}
PMF_KEYS = set(PMF_SETTINGS)
# The defaults of the ``pmf`` recipe's keys that shape the MeanFlow objective (``meanflow.py``; part of
# :data:`PMF_DEFAULTS`, for the keys a ``models.<dataset>.pmf`` block may leave out).
MEANFLOW_DEFAULTS: dict[str, Any] = {
    "jvp": "fd", "fd_eps": 1e-3, "p_fm": 0.5, "p_r0": 0.4, "t_mean": 0.0, "t_std": 1.0, "p_t_uniform": 0.1,
    "p_t1": 0.05, "adaptive_p": 1.0, "adaptive_eps": 0.01,
    # pMF's losses on the one-step prediction (``meanflow.ImageLoss``): 0 = off (the shipped recipes); pMF: 0.4, 0.1
    "perceptual_weight": 0.0, "features_weight": 0.0, "perceptual_max_t": 0.8,
}
# The ``pmf`` recipe's defaults, for the keys a ``models.<dataset>.pmf`` block may leave out (the training loop's
# from ``training.TRAIN_DEFAULTS``); ``unet``, ``steps``, ``batch_size`` and ``lr`` are required.
PMF_DEFAULTS: dict[str, Any] = {
    **TRAIN_DEFAULTS, **MEANFLOW_DEFAULTS, "fm_warmup": 0.2, "fm_warmup_steps": None, "t_clip": 0.05,
    "time_scale": 50.0, "precond": "edm", "sigma_data": 0.5, "eval_images": 256, "n_samples": 64,
}


def flow_matching_steps(settings: dict, steps: int) -> int:
    """The flow-matching-only steps (r = t) that start a ``steps``-step run: ``fm_warmup_steps`` when set, else
    the ``fm_warmup`` share of ``steps``. A warm start as long as the run would leave it no MeanFlow step (a
    preset that lowers ``steps`` below an inherited ``fm_warmup_steps``): a :class:`RoleConfigError`."""
    explicit = settings.get("fm_warmup_steps")
    warm = int(float(settings["fm_warmup"]) * steps) if explicit is None else int(explicit)
    if warm >= steps:
        key = "fm_warmup" if explicit is None else "fm_warmup_steps"
        raise RoleConfigError(f"`models.<dataset>.pmf.{key}` leaves no MeanFlow step: {warm} flow-matching steps "
                              f"of {steps} (set `fm_warmup_steps` below `steps`)")
    return warm
