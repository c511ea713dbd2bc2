"""A task = dataset + query attribute + the networks and hyperparameters it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import ConfigError, deep_merge

SYNTHETIC_DATASETS = ("synthfaces", "synthxray")
REAL_DATASETS = ("celeba", "celebahq", "chexpert")
FACE_DATASETS = ("synthfaces", "celeba", "celebahq")


@dataclass
class Task:
    name: str
    dataset: str
    attribute: str
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> overrides

    @property
    def synthetic(self) -> bool:
        return self.dataset in SYNTHETIC_DATASETS

    @property
    def kind(self) -> str:
        """``faces`` (ACE protocol metrics) or ``xray`` (FastDiME medical protocol)."""
        return "faces" if self.dataset in FACE_DATASETS else "xray"


def get_task(cfg: dict, name: str) -> Task:
    tasks = cfg.get("tasks", {})
    if name not in tasks:
        raise ConfigError(f"unknown task {name!r} (config key `tasks`); known: {', '.join(sorted(tasks))}")
    t = tasks[name]
    return Task(name=name, dataset=t["dataset"], attribute=t["attribute"], params=t.get("params", {}) or {})


def method_params(cfg: dict, task: Task, method: str) -> dict[str, Any]:
    """Defaults of ``method_defaults.<base method>``, then the task's overrides, then the variant, then
    the task's overrides of that variant.

    ``fire_<variant>`` methods are the task's FiRe with ``fire_variants.<variant>`` applied on top (an
    ablation changes one thing of the configured method: ``fire_t06`` on a task whose FiRe uses t = 0.2
    runs t = 0.6 with the task's masks).
    """
    defaults = cfg.get("method_defaults", {})
    base = method.split("_", 1)[0] if method.startswith("fire_") else method
    if base not in defaults:
        raise ConfigError(f"unknown method {method!r}; known: {', '.join(sorted(all_methods(cfg)))}")
    params = deep_merge(dict(defaults[base]), task.params.get(base, {}))
    if method.startswith("fire_"):
        variants = cfg.get("fire_variants", {})
        variant = method[len("fire_"):]
        if variant not in variants:
            raise ConfigError(f"unknown FiRe variant {method!r} (config key `fire_variants`); "
                              f"known: {', '.join('fire_' + v for v in sorted(variants))}")
        params = deep_merge(params, variants[variant])
    if method != base:
        params = deep_merge(params, task.params.get(method, {}))
    return params


def all_methods(cfg: dict) -> list[str]:
    return list(cfg.get("method_defaults", {})) + ["fire_" + v for v in cfg.get("fire_variants", {})]
