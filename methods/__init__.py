"""VCE methods behind one interface (docs/architecture.md): ``get_method(name, params) -> Method``.

``params`` are the merged hyperparameters of ``vcebench.tasks.method_params(cfg, task, name)``;
each method parses them into its typed dataclass (paper defaults) and rejects unknown keys.
A variant ``<method>_<variant>`` (config ``variants.<method>``, e.g. the FiRe ablations ``fire_K5``) is
built by its base method; ``vcebench.tasks.split_method`` parses the name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vcebench.config import ConfigError, settings_errors
from vcebench.tasks import split_method

from .base import Counterfactuals, Method, parse_params
from .dime import DiME, DimeParams
from .fastdime import FastDiME, FastDimeParams
from .fire import FiRe, FireParams
from .identity import Identity, IdentityParams
from .maskdime import MaskDiME, MaskDimeParams

_REGISTRY: dict[str, tuple[type, Callable[[str, Any], Method]]] = {
    "fire": (FireParams, FiRe),
    "dime": (DimeParams, DiME),
    "fastdime": (FastDimeParams, lambda n, p: FastDiME(n, p, passes=1, first_pass_mask=True)),
    "fastdime2": (FastDimeParams, lambda n, p: FastDiME(n, p, passes=2, first_pass_mask=False)),
    "fastdime2plus": (FastDimeParams, lambda n, p: FastDiME(n, p, passes=2, first_pass_mask=True)),
    "maskdime": (MaskDimeParams, MaskDiME),
    "input": (IdentityParams, Identity),  # the do-nothing baseline: the input as its own "counterfactual"
}

METHODS = tuple(_REGISTRY)


def base_method(name: str) -> str:
    """``<method>_<variant>`` -> ``<method>`` (``vcebench.tasks.split_method``); base names unchanged."""
    return split_method(name)[0]


def params_class(name: str) -> type:
    """The hyperparameter dataclass of method ``name`` (``fire_<variant>``: FiRe's)."""
    base = base_method(name)
    if base not in _REGISTRY:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(METHODS)} and fire_<variant>")
    return _REGISTRY[base][0]


def get_method(name: str, params: dict[str, Any] | None = None) -> Method:
    """The method ``name`` with hyperparameters ``params`` (missing keys take the paper defaults)."""
    base = base_method(name)
    if base not in _REGISTRY:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(METHODS)} and <method>_<variant>")
    params_cls, factory = _REGISTRY[base]
    parsed = parse_params(params_cls, dict(params or {}), section=name)
    with settings_errors(f"settings of method {name!r} (config keys `method_defaults.{base}`, "
                         f"`tasks.<task>.params.{name}`)"):
        return factory(name, parsed)


__all__ = ["METHODS", "Counterfactuals", "Method", "base_method", "get_method", "params_class"]
