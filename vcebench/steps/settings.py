"""`vcebench settings` and the ``--settings`` option of `vcebench explain` / `vcebench evaluate` as a library: a
job's settings resolved once (:mod:`vcebench.protocol.resolve`), or read back from the file the workflow wrote."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol.run_settings import DEFAULT_MODEL_DIR

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import EvalSettings, RunSettings


def resolved_settings(config: list[str] | None, task: str, method: str,
                      sets: list[str] | None = None) -> RunSettings | EvalSettings:
    """The settings the workflow would write for ``method`` on ``task``: the config files ``config`` (default
    config/config.yaml) with the ``KEY=VALUE`` items of ``sets`` merged over them (:func:`parse_sets`), checked
    for the pair, resolved once (:func:`vcebench.protocol.resolve.resolve_job`)."""
    from ..protocol.resolve import resolve_job
    from ..protocol.settings import load_settings

    cfg = load_settings(config, overrides=parse_sets(sets or []), only=(task, method))
    return resolve_job(cfg, task, method)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=[2, 3]"]`` -> ``{"a": {"b": 1}, "c": [2, 3]}`` (values read as YAML); a malformed item is a
    one-line ConfigError."""
    import yaml

    from ..config.load import ConfigError
    from ..core.merge import deep_merge

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or any(not k for k in key.split(".")):
            raise ConfigError(f"--set {item!r}: write KEY=VALUE (a dotted config key, e.g. method_defaults.fire.K=5)")
        node: Any = yaml.safe_load(value)
        for k in reversed(key.split(".")):
            node = {k: node}
        out = deep_merge(out, node)
    return out


def explain_settings(path: str | Path, *, seed: int | None = None, n_eval: int | None = None,
                     data_dir: str | None = None, model_dir: str = DEFAULT_MODEL_DIR) -> RunSettings:
    """The settings of an explain job from its settings file (``seed`` / ``n_eval``: an explicit override, the
    `seeds` target's other seeds)."""
    from ..protocol.resolve import read_run_settings

    return read_run_settings(path, data_dir=data_dir, model_dir=model_dir).overridden(seed=seed, n_eval=n_eval)


def evaluate_settings(path: str | Path, *, n_eval: int | None = None, data_dir: str | None = None,
                      model_dir: str = DEFAULT_MODEL_DIR) -> tuple[EvalSettings, torch.device]:
    """(the settings of an evaluate job from its settings file, the torch device of their runtime options)."""
    from ..core.runtime import setup_torch
    from ..protocol.resolve import read_eval_settings

    settings = read_eval_settings(path, data_dir=data_dir, model_dir=model_dir).overridden(n_eval=n_eval)
    rt = settings.runtime
    return settings, setup_torch(rt.threads, rt.device, rt.cuda)
