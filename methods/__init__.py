"""VCE methods behind one interface (docs/architecture.md): ``get_method(name, params) -> Method``.

``params`` are the merged hyperparameters of ``vcebench.config.tasks.method_params(cfg, task, name)``;
each method parses them into its typed dataclass (paper defaults) and rejects unknown keys.
Which methods exist, their dataclasses, factories and roles: ``vcebench.registry`` (built-ins and
plug-ins). A variant ``<method>_<variant>`` (config ``variants.<method>``, e.g. the FiRe ablations
``fire_K5``) is built by its base method; ``vcebench.config.tasks.split_method`` parses the name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vcebench import registry
from vcebench.config.load import settings_errors
from vcebench.config.tasks import Task, check_runs_on, split_method

from .params import parse_params

if TYPE_CHECKING:
    from .base import Counterfactuals, Method

# torch-bound names, imported on first use (PEP 562): the config check reads ``params_class`` without torch
_LAZY = {"Counterfactuals": "base", "Method": "base"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)


def base_method(name: str) -> str:
    """``<method>_<variant>`` -> ``<method>`` (``vcebench.config.tasks.split_method``); base names unchanged."""
    return split_method(name)[0]


def params_class(name: str) -> type:
    """The hyperparameter dataclass of method ``name`` (a variant: its base method's)."""
    return registry.get_method_spec(base_method(name)).params_class()


def get_method(name: str, params: dict[str, Any] | Any | None = None, *, task: Task | None = None,
               config: Mapping[str, Any] | None = None) -> Method:
    """The method ``name`` with hyperparameters ``params`` (a mapping: parsed here, missing keys take the paper
    defaults; or an instance of its params dataclass, already parsed, as ``RunSettings`` holds it). ``task`` and
    ``config`` (the whole configuration): the task it explains, for a truth row (``registry.MethodSpec.truth``),
    which is built with the task's renderer and exists on synthetic tasks only."""
    base = base_method(name)
    spec = registry.get_method_spec(base)
    cls = spec.params_class()
    parsed = params if isinstance(params, cls) else parse_params(cls, dict(params or {}), section=name)
    context: dict[str, Any] = {}
    if spec.truth:
        if task is None or config is None:
            raise registry.RegistryError(f"method {name!r} renders a synthetic task's true counterfactuals: "
                                         f"build it with its task and config (RunSettings.build_method)")
        check_runs_on(task, name)
        from vcebench.data import get_synthetic

        context = {"renderer": get_synthetic(dict(config), task.dataset), "attribute": task.attribute}
    with settings_errors(f"settings of method {name!r} (config keys `method_defaults.{base}`, "
                         f"`tasks.<task>.params.{name}`)"):
        method = spec.build(name, parsed, **context)
    roles = getattr(method, "roles", None)
    if roles is None:
        method.roles = spec.roles
    elif not set(roles) <= set(spec.roles):
        raise registry.RegistryError(f"method {name!r} ({spec.source}) uses roles {sorted(roles)} but is registered "
                                     f"with {list(spec.roles)}; register every network it may use")
    return method


__all__ = ["Counterfactuals", "Method", "base_method", "get_method", "params_class"]
