"""The settings of the jobs that train a network or tune the methods, resolved once from the config into a frozen
record that the job reads instead of the config files (:mod:`vcebench.protocol.resolve` writes and reads them).

A method's jobs get a :class:`~vcebench.protocol.run_settings.RunSettings` (every hyperparameter resolved). A
training job and a tuning job run library code that reads whole config sections (the recipe, the dataset, the
search space, the noise rule the candidates are resolved under), so their record holds those sections, pruned
to what the job reads, with the fields resolved for them:

- :class:`TrainSettings`: the dataset, the role, the task the CLI names, the shipped-networks folder, the FiRe
  noise level of each task (the pmf's label check, resolved under the tuned file) and the config of
  :func:`train_config` (the dataset's tasks, its ``datasets`` and ``models`` blocks, the seed, the runtime);
- :class:`TuneSettings`: the task, the methods tuned and the config of :func:`tune_config` (the ``tune`` search
  space / budget / rule, the noise ``protocol``, the tuned methods' defaults and the task's params, the
  dataset's networks, the metrics, the seed, the batch size, the runtime).

The config part keeps the order of the config (the classifier's attributes follow its tasks' order), so these
records are not key-sorted like a run record; the same config gives the same text, and its SHA-256
(:attr:`StepSettings.settings_sha256`) is the job's settings identity.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..config.load import ConfigError
from ..config.tasks import get_task, task_for_dataset
from .run_settings import plain, read_only, text_sha256

# top-level config keys every training / tuning job reads (the runtime and the seed)
RUNTIME_KEYS = ("seed", "threads", "device", "cuda", "cpu_isa")


def _dataset_config(cfg: Mapping[str, Any], dataset: str, *, params_of: str | None = None) -> dict[str, Any]:
    """The tasks on ``dataset`` (in the config's order; their method ``params`` only for task ``params_of``) and
    the dataset's ``datasets`` and ``models`` blocks."""
    tasks = {name: {k: v for k, v in t.items() if k != "params" or name == params_of}
             for name, t in (cfg.get("tasks") or {}).items() if t.get("dataset") == dataset}
    out: dict[str, Any] = {"tasks": tasks}
    for section in ("datasets", "models"):
        block = (cfg.get(section) or {}).get(dataset)
        out[section] = {} if block is None else {dataset: block}
    return out


def _pick(cfg: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: cfg[k] for k in keys if k in cfg}


def train_config(cfg: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """What a training job on ``dataset`` reads of the config: the dataset's tasks (the classifier's attributes),
    its ``datasets`` block (rendering) and ``models`` block (the role's recipe, the gates' and losses' networks),
    the seed, ``threads`` / ``train_threads`` and the runtime."""
    return copy.deepcopy({**_pick(cfg, (*RUNTIME_KEYS, "train_threads")), **_dataset_config(cfg, dataset)})


def tune_config(cfg: Mapping[str, Any], task_name: str, methods: list[str]) -> dict[str, Any]:
    """What a tuning job of ``methods`` on ``task_name`` reads of the config: ``tune`` (space, budget, sampler,
    rule, metrics), the noise ``protocol``, ``method_defaults`` of ``methods``, the task's params, the dataset's
    tasks and networks, ``metrics``, the seed, ``n_eval``, the batch size and the runtime."""
    dataset = get_task(dict(cfg), task_name).dataset
    defaults = cfg.get("method_defaults") or {}
    out = {**_pick(cfg, (*RUNTIME_KEYS, "n_eval", "batch_size", "metrics", "tune", "protocol")),
           "method_defaults": {m: defaults[m] for m in methods if m in defaults},
           **_dataset_config(cfg, dataset, params_of=task_name)}
    return copy.deepcopy(out)


@dataclass(frozen=True, kw_only=True)
class StepSettings:
    """A job's resolved fields and ``config``, the config sections it reads (read-only)."""

    config: Mapping[str, Any]

    KIND: ClassVar[str] = "step"

    def fields_record(self) -> dict[str, Any]:
        """The record's fields besides ``kind`` and ``config``, as plain JSON values."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "config"}

    def to_json(self) -> str:
        """``{"kind", the fields, "config"}`` as one JSON text (config order kept: see the module docstring)."""
        rec = {"kind": self.KIND, **self.fields_record(), "config": plain(self.config)}
        return json.dumps(rec, indent=1, ensure_ascii=True, allow_nan=False) + "\n"

    @property
    def settings_sha256(self) -> str:
        """SHA-256 (hex) of :meth:`to_json`: the job's settings identity (provenance)."""
        return text_sha256(self.to_json())

    def job_config(self) -> dict[str, Any]:
        """A private, mutable copy of :attr:`config` for the library functions the job calls."""
        return plain(self.config)

    @classmethod
    def from_json(cls, text: str):
        """The record :meth:`to_json` wrote; another kind, or a missing field, is a one-line ConfigError."""
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"settings record is not JSON: {e}") from None
        if not isinstance(rec, dict) or rec.get("kind") != cls.KIND:
            kind = rec.get("kind") if isinstance(rec, dict) else None
            raise ConfigError(f"settings record of kind {kind!r}, expected {cls.KIND!r}")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in rec]
        if missing or not isinstance(rec["config"], dict):
            raise ConfigError(f"settings record of kind {cls.KIND!r} without a valid field "
                              f"{(missing or ['config'])[0]!r}")
        return cls(**{n: read_only(rec[n]) if n == "config" else rec[n] for n in names})


@dataclass(frozen=True, kw_only=True)
class TrainSettings(StepSettings):
    """A training job: network ``role`` of ``dataset`` (``task``: the dataset's first task, which `vcebench
    train` names), ``networks`` (the shipped-networks folder, absolute, or ``none``: train), ``fire_t`` (the pmf:
    each task attribute's FiRe noise level, else None) and :func:`train_config`."""

    dataset: str
    role: str
    task: str
    networks: str
    fire_t: dict[str, float] | None = None

    KIND: ClassVar[str] = "train"

    @classmethod
    def resolve(cls, cfg: Mapping[str, Any], dataset: str, role: str, networks: str) -> TrainSettings:
        """The settings of training ``role`` on ``dataset`` under the checked config ``cfg``."""
        from .noise import resolve_method

        cfg = dict(cfg)
        fire_t = None
        if role == "pmf" and "fire" in (cfg.get("method_defaults") or {}):
            tasks = [get_task(cfg, n) for n, t in cfg["tasks"].items() if t["dataset"] == dataset]
            fire_t = {t.attribute: float(resolve_method(cfg, t, "fire")[0]["t"]) for t in tasks}
        return cls(config=read_only(train_config(cfg, dataset)), dataset=dataset, role=role,
                   task=task_for_dataset(cfg, dataset), networks=str(networks), fire_t=fire_t)


@dataclass(frozen=True, kw_only=True)
class TuneSettings(StepSettings):
    """A tuning job: the ``methods`` (base methods) tuned on ``task`` and :func:`tune_config`."""

    task: str
    methods: list[str]

    KIND: ClassVar[str] = "tune"

    @classmethod
    def resolve(cls, cfg: Mapping[str, Any], task: str, methods: list[str] | None = None) -> TuneSettings:
        """The settings of tuning ``methods`` (default: :func:`vcebench.protocol.tune.tune_methods`) on ``task``."""
        from .tune import tune_methods

        cfg = dict(cfg)
        names = list(methods or tune_methods(cfg))
        return cls(config=read_only(tune_config(cfg, task, names)), task=task, methods=names)

