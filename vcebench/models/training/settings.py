"""The checks of a role's settings block (``models.<dataset>.<role>``), shared by every trainer, and the settings of
the generative roles' training loop (``generative.train_generative``).

Torch-free on purpose: the config check that runs when the workflow builds its DAG reads these tables
(``vcebench.protocol.settings``).
"""

from __future__ import annotations

from typing import Any, Literal

from ...core.errors import UserError


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


TRAIN_SETTINGS: dict[str, Any] = {"steps": int, "batch_size": int, "lr": float, "warmup_steps": int,
                                  "ema_decay": float, "grad_clip": float, "weight_decay": float,
                                  "checkpoint_every": int, "hflip": bool, "channels_last": bool,
                                  "seed": int, "weights": str | None, "format": str | None,
                                  "amp": Literal["bf16", "none"], "lr_schedule": Literal["cosine", "wsd"],
                                  "decay_fraction": float, "init_from": str | None, "init_sha256": str | None}
# The generative roles' training defaults, read by ``generative.train_generative`` (the ddpm / pmf defaults of
# ``vcebench.models.generative.settings`` start from them). None: ``warmup_steps`` min(100, steps // 10),
# ``grad_clip`` no clipping, ``channels_last`` on a GPU only, ``amp`` the device's default
# (``distributed.training_amp``). ``lr_schedule`` (``generative.lr_at``): ``cosine`` over the whole run, or ``wsd``
# (warm-up, stable, decay over the last ``decay_fraction`` of the steps), whose stable trunk does not depend on the
# budget (``train_generative``'s ``trunk_dir``: a longer budget continues a shorter one's trunk). ``init_from``
# (with its ``init_sha256``): a safetensors file of the same network (e.g. a shipped ``model.safetensors``) the run
# starts from instead of the seed's initialisation, its EMA too (``generative.initial_weights``; continued
# training, e.g. with another loss).
TRAIN_DEFAULTS: dict[str, Any] = {"warmup_steps": None, "ema_decay": 0.999, "grad_clip": None, "weight_decay": 0.0,
                                  "checkpoint_every": 200, "hflip": False, "channels_last": None, "amp": None,
                                  "lr_schedule": "cosine", "decay_fraction": 0.2, "init_from": None,
                                  "init_sha256": None}
