"""One resolution per job: the config (files, ``--config`` overrides, the tuned file, the noise and resolution
rules, variants, defaults) turned once into the frozen settings a job runs, written as one canonical JSON file.

The workflow resolves every (task, method) when it builds the DAG, from Snakemake's ``config`` (so ``snakemake
--config key=value`` reaches the jobs), and rule ``resolve_settings`` writes the record to
``results/<task>/<method>/settings.json`` (:func:`settings_path`; its ``params`` hold the record, so a change of
settings reruns it and, through the file, the jobs that read it). ``vcebench explain --settings FILE`` and
``vcebench evaluate --settings FILE`` read that file only (:func:`read_run_settings`, :func:`read_eval_settings`):
no job derives a hyperparameter from the config files again. `vcebench settings show` prints the same record.

The record (:meth:`~vcebench.protocol.run_settings.JobSettings.to_json`) holds the task, the method, every
resolved hyperparameter and the protocol record (noise rule, shift, offset, tuned file), the seed, ``n_eval``, the
batch size, the runtime options and :func:`~vcebench.protocol.run_settings.job_config`: the config sections the
loaders read for the task (its dataset's ``datasets`` and ``models`` blocks, the tasks on that dataset without
their method settings, ``metrics``, ``cpu_isa``). Its SHA-256 (:func:`settings_sha256`) is the provenance
fingerprint of a run.

The jobs that run no method get a record of their own kind, written by a resolution rule per job kind in the same
way: the FID reference an ``eval`` record without a method (:func:`reference_json`, the feature network and the
inputs), a training job a :class:`~vcebench.protocol.step_settings.TrainSettings` (:func:`train_json`), a tuning
job a :class:`~vcebench.protocol.step_settings.TuneSettings` (:func:`tune_json`). The jobs that need the whole
task view (the tables, figures, paired tests, seeds, Pareto fronts, the regression; rendering and importing) read
the run's merged config, written once by rule ``resolved_config`` (:func:`config_snapshot`,
:data:`CONFIG_SNAPSHOT`; `vcebench <verb> --resolved-config FILE`, :func:`read_config_snapshot`). Each file is
written from Snakemake's ``config``, so ``snakemake --config key=value`` reaches every job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.tasks import external_name, pareto_methods, pareto_n_eval
from .run_settings import DEFAULT_MODEL_DIR, EvalSettings, JobSettings, RunSettings, text_sha256
from .step_settings import StepSettings, TrainSettings, TuneSettings

# the run's merged config (files and `--config` overrides), relative to the workflow's workdir
CONFIG_SNAPSHOT = "results/config.resolved.json"


def job_n_eval(cfg: Mapping[str, Any], method: str) -> int:
    """The evaluation inputs of ``method``'s job: ``pareto.n_eval`` for a method only the `pareto` target runs
    (when set), else config ``n_eval`` (every table row, of the default tables or the paper's)."""
    n = pareto_n_eval(cfg)
    rows = [*(cfg.get("methods") or []), *(cfg.get("paper_methods") or [])]
    if n is not None and method not in rows and method in {m for m, _, _ in pareto_methods(cfg)}:
        return int(n)
    return int(cfg["n_eval"])


def resolve_job(cfg: Mapping[str, Any], task: str, method: str, *, data_dir: str | None = None,
                model_dir: str = DEFAULT_MODEL_DIR) -> RunSettings | EvalSettings:
    """The settings of ``method``'s job on ``task`` under the checked config ``cfg``: a :class:`RunSettings` for
    a method vcebench runs, an :class:`EvalSettings` for imported counterfactuals (``external_<name>``: nothing
    to run, only to score). ``n_eval``: :func:`job_n_eval`. A bad setting is a one-line ConfigError."""
    cfg = {**cfg, "n_eval": job_n_eval(cfg, method)}
    if external_name(method):
        return EvalSettings.resolve(cfg, task, method, data_dir=data_dir, model_dir=model_dir)
    return RunSettings.resolve(cfg, task, method, data_dir=data_dir, model_dir=model_dir)


def settings_json(cfg: Mapping[str, Any], task: str, method: str) -> str:
    """The canonical JSON record of :func:`resolve_job` (the ``params`` of rule ``resolve_settings``)."""
    return resolve_job(cfg, task, method).to_json()


def settings_sha256(settings: JobSettings) -> str:
    """The provenance fingerprint of a job's settings: SHA-256 of their canonical JSON."""
    return settings.settings_sha256


def settings_path(task: str, method: str) -> str:
    """Where the workflow writes the settings of ``method`` on ``task``."""
    return f"results/{task}/{method}/settings.json"


def reference_json(cfg: Mapping[str, Any], task: str) -> str:
    """The record of the FID reference of ``task`` (an ``eval`` record without a method: the evaluation split's
    inputs and the dataset's networks, ``fid_features`` among them)."""
    return EvalSettings.resolve(cfg, task, None).to_json()


def train_json(cfg: Mapping[str, Any], dataset: str, role: str, networks: str) -> str:
    """The record of training ``role`` on ``dataset`` (``networks``: the shipped folder, or ``none``)."""
    return TrainSettings.resolve(cfg, dataset, role, networks).to_json()


def tune_json(cfg: Mapping[str, Any], task: str) -> str:
    """The record of tuning the config's methods on ``task``."""
    return TuneSettings.resolve(cfg, task).to_json()


def config_snapshot(cfg: Mapping[str, Any]) -> str:
    """The run's merged config as one JSON text (the config's order kept): what the report jobs read."""
    return json.dumps(cfg, indent=1, ensure_ascii=True, allow_nan=False, default=_not_json) + "\n"


def _not_json(value: Any) -> Any:
    from ..config.load import ConfigError

    raise ConfigError(f"config value {value!r} ({type(value).__name__}) is no YAML / JSON value")


def read_config_snapshot(path: str | Path) -> dict[str, Any]:
    """The config :func:`config_snapshot` wrote (``--resolved-config``): merged, checked and with the tuned files
    attached when it was written, so it is read as it is."""
    from ..config.load import ConfigError

    try:
        cfg = json.loads(_read(path))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is no resolved config ({e}); the workflow's rule resolved_config writes one") \
            from None
    if not isinstance(cfg, dict) or "tasks" not in cfg:
        raise ConfigError(f"{path} is no resolved config (a mapping with `tasks`)")
    return cfg


def write_settings(path: str | Path, text: str, log: str | Path | None = None) -> None:
    """Write a settings record atomically (:func:`vcebench.core.io.write_text`), unchanged when it already holds
    ``text``; ``log``: a file that gets the record's SHA-256 (the workflow rule's log)."""
    from ..core.io import write_text

    path = Path(path)
    if log is not None:
        write_text(log, f"{path}: settings_sha256 {text_sha256(text)}\n")
    if path.is_file() and path.read_text() == text:
        return
    write_text(path, text)


def read_run_settings(path: str | Path, *, data_dir: str | None = None,
                      model_dir: str = DEFAULT_MODEL_DIR) -> RunSettings:
    """The :class:`RunSettings` of a settings file (``vcebench explain --settings``)."""
    return RunSettings.from_json(_read(path), data_dir=data_dir, model_dir=model_dir)


def read_eval_settings(path: str | Path, *, data_dir: str | None = None,
                       model_dir: str = DEFAULT_MODEL_DIR) -> EvalSettings:
    """The :class:`EvalSettings` of a settings file (``vcebench evaluate --settings``)."""
    return EvalSettings.from_json(_read(path), data_dir=data_dir, model_dir=model_dir)


def read_train_settings(path: str | Path) -> TrainSettings:
    """The :class:`TrainSettings` of a settings file (``vcebench train --settings``)."""
    return _read_step(TrainSettings, path)


def read_tune_settings(path: str | Path) -> TuneSettings:
    """The :class:`TuneSettings` of a settings file (``vcebench tune --settings``)."""
    return _read_step(TuneSettings, path)


def _read_step(cls: type[StepSettings], path: str | Path):
    from ..config.load import ConfigError

    text = _read(path)
    try:
        return cls.from_json(text)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def _read(path: str | Path) -> str:
    from ..config.load import ConfigError

    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(f"settings file {path} does not exist (a resolution rule of the workflow writes it; "
                          f"`vcebench settings show` prints a method's)") from None
