"""`vcebench settings` and the ``--settings`` / ``--resolved-config`` options of the verbs the workflow runs, as a
library: a job's settings resolved once (:mod:`vcebench.protocol.resolve`), or read back from the file the workflow
wrote."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol.run_settings import DEFAULT_MODEL_DIR

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import EvalSettings, RunSettings
    from ..protocol.step_settings import TrainSettings, TuneSettings


def resolved_settings(config: list[str] | None, task: str, method: str,
                      sets: list[str] | None = None) -> RunSettings | EvalSettings:
    """The settings the workflow would write for ``method`` on ``task``: the config files ``config`` (default
    config/config.yaml) with the ``KEY=VALUE`` items of ``sets`` merged over them (:func:`parse_sets`), checked
    for the pair, resolved once (:func:`vcebench.protocol.resolve.resolve_job`)."""
    from ..protocol.resolve import resolve_job
    from ..protocol.settings import load_settings

    cfg = load_settings(config, overrides=parse_sets(sets or []), only=(task, method))
    return resolve_job(cfg, task, method)


def write_record(path: str, text: str, log: str | None = None) -> bool:
    """Write a record the workflow resolved (``vcebench settings write``): atomically, unchanged when ``path``
    already holds it, its SHA-256 in ``log``. False (nothing written) when ``text`` is no JSON mapping."""
    import json

    from ..protocol.resolve import write_settings

    try:
        if not isinstance(json.loads(text), dict):
            return False
    except json.JSONDecodeError:
        return False
    write_settings(path, text, log=log)
    return True


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


def job_config(config: list[str] | None, resolved: str | None, *, check: bool = True) -> dict[str, Any]:
    """The config of a job that reads the whole task view: the run's merged config ``resolved`` (the workflow's
    ``--resolved-config`` file, checked when the workflow built the DAG; no ``config`` beside it), else the
    config files ``config`` (``check``: every setting checked, :func:`vcebench.protocol.settings.load_settings`)."""
    from ..config.load import ConfigError, load_config
    from ..protocol.resolve import read_config_snapshot
    from ..protocol.settings import load_settings

    if resolved is not None:
        if config:
            raise ConfigError("--resolved-config is the run's whole config: give no --config with it")
        return read_config_snapshot(resolved)
    return load_settings(config) if check else load_config(config)


def train_settings(path: str | Path) -> TrainSettings:
    """A training job's settings from its file (:class:`~vcebench.protocol.step_settings.TrainSettings`)."""
    from ..protocol.resolve import read_train_settings

    return read_train_settings(path)


def tune_settings(path: str | Path) -> TuneSettings:
    """A tuning job's settings from its file (:class:`~vcebench.protocol.step_settings.TuneSettings`)."""
    from ..protocol.resolve import read_tune_settings

    return read_tune_settings(path)


def train_inputs(role: str, settings: str | None, config: list[str] | None, task: str | None,
                 networks: str | None) -> tuple[dict[str, Any], str, str | None, dict[str, float] | None]:
    """(config, task, shipped-networks folder, the pmf's FiRe noise levels) of `vcebench train ROLE`: from the
    job's settings file ``settings`` (the workflow's; nothing else of the config is read), else from the config
    files ``config`` and ``task`` / ``networks`` as given. The config is not checked yet (the shipped network is
    installed without starting torch; :func:`vcebench.steps.train.train_job` checks it)."""
    from ..config.load import ConfigError, load_config

    if settings is None:
        if not task:
            raise ConfigError("vcebench train needs --task (or --settings)")
        return load_config(config), task, networks, None
    if task or config or networks:
        raise ConfigError("--settings holds the task, the config and the shipped networks: give no --task, "
                          "--config or --networks with it")
    s = train_settings(settings)
    if s.role != role:
        raise ConfigError(f"{settings} holds the settings of training {s.role!r}, not {role!r}")
    return s.job_config(), s.task, s.networks, s.fire_t


def tune_inputs(settings: str | None, config: list[str] | None, task: str | None, methods: list[str] | None,
                out: str | None) -> tuple[dict[str, Any], str, list[str] | None, Path]:
    """(config, task, methods to tune, tuned file) of `vcebench tune`: from the job's settings file ``settings``
    (the workflow's; nothing else of the config is read; ``out`` needed), else from the config files ``config``
    with ``task``, ``methods`` (None: the config's) and ``out`` (default ``<protocol.tuned_dir>/<task>.yaml`` of
    the config's repository)."""
    from ..config.load import DEFAULT_CONFIG, ConfigError, load_config, repo_root

    if settings is None:
        if not task:
            raise ConfigError("vcebench tune needs --task (or --settings)")
        cfg = load_config(config)
        default = repo_root((config or [DEFAULT_CONFIG])[0]) / cfg["protocol"]["tuned_dir"] / f"{task}.yaml"
        return cfg, task, methods, Path(out) if out else default
    if task or config or methods:
        raise ConfigError("--settings holds the task, the methods and their settings: give no --task, --method or "
                          "--config with it")
    if not out:
        raise ConfigError("vcebench tune --settings needs --out (the tuned file)")
    s = tune_settings(settings)
    return s.job_config(), s.task, list(s.methods), Path(out)
