"""The checks of a role's settings block (``models.<dataset>.<role>``), shared by every trainer."""

from __future__ import annotations

from typing import Any

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
