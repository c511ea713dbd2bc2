"""What one job runs with: the task, the method and its resolved hyperparameters, the sampling and runtime
options, resolved once from the loaded configuration into a frozen :class:`RunSettings`.

The configuration (:func:`vcebench.protocol.settings.load_settings`) is a deep-merged dict read by many functions; a job
(`vcebench explain`, a `vcebench tune` setting, each method of `vcebench profile task|compaction`) resolves it
here once, and the functions below the command take this object or its typed fields. Frozen, so every part of
a job sees the values the job was started with: no function down the call path can change the seed or the batch
size of the ones after it.

`vcebench evaluate` gets an :class:`EvalSettings` instead: it scores counterfactuals it did not make, and their
method name may be none that :func:`~vcebench.protocol.noise.resolve_method` knows (counterfactuals brought in by
`vcebench import` are named after their folder). A separate class, not a :class:`RunSettings` whose resolution
may be missing, so that a :class:`RunSettings` always holds hyperparameters a method can be built from, and an
evaluation never pretends to have them: it keeps the method's name and, when the name resolves, the protocol
record that metrics.json reports.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..config.tasks import Task, check_runs_on, get_task

DEFAULT_MODEL_DIR = "resources/models"


def read_only(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a private deep copy of ``cfg``: its top-level keys cannot be set, and changes to the
    caller's dict after this call do not reach it."""
    return MappingProxyType(copy.deepcopy(dict(cfg)))


@dataclass(frozen=True)
class RuntimeOptions:
    """Where and how torch runs: config keys ``threads`` (None: ``$VCEBENCH_THREADS`` or the usable cores),
    ``device`` and the ``cuda`` section (TF32, cuDNN, ``noise_on_device``, ``compile``, ``bf16_generative``)."""

    threads: int | None = None
    device: str = "cpu"
    cuda: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> RuntimeOptions:
        threads = cfg.get("threads")
        return cls(threads=None if threads is None else int(threads), device=str(cfg["device"]),
                   cuda=MappingProxyType(copy.deepcopy(dict(cfg["cuda"]))))


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """What every job shares, read from the config by :meth:`from_config`: the task, the sampling seed, the
    first ``n_eval`` evaluation inputs, the batch size, the runtime, the inputs' split, the data and model
    folders, and the read-only ``config``."""

    config: Mapping[str, Any]
    task: Task
    seed: int
    n_eval: int
    batch_size: int
    runtime: RuntimeOptions
    split: str
    data_dir: str | None = None
    model_dir: str = DEFAULT_MODEL_DIR

    @staticmethod
    def from_config(cfg: Mapping[str, Any], task: Task, split: str | None, data_dir: str | None,
                    model_dir: str) -> dict[str, Any]:
        """The shared fields of a job on ``task``, read from ``cfg`` (keyword arguments of a subclass)."""
        from ..data import eval_split_name

        return {"config": read_only(cfg), "task": task, "seed": int(cfg["seed"]), "n_eval": int(cfg["n_eval"]),
                "batch_size": int(cfg["batch_size"]), "runtime": RuntimeOptions.from_config(cfg),
                "split": split or eval_split_name(task.dataset), "data_dir": data_dir, "model_dir": model_dir}


@dataclass(frozen=True, kw_only=True)
class RunSettings(JobSettings):
    """One job's settings: ``task`` (:func:`vcebench.config.tasks.get_task`), ``method`` (the name as given, variant
    included), ``params`` (its hyperparameters after the noise protocol, :func:`vcebench.protocol.noise.resolve_method`)
    and ``protocol`` (that function's record), ``seed`` (the generation seed of :mod:`vcebench.core.rng`), ``n_eval``
    (the first evaluation inputs), ``batch_size``, ``runtime`` (:class:`RuntimeOptions`), ``split`` (the
    evaluation split's name), ``data_dir`` (None: rendered / loaded as the config says), ``model_dir``, and
    ``config``: a read-only view of the whole configuration (:func:`read_only`), for the loaders that read
    whole sections (datasets, the model zoo, the DDPM schedule)."""

    method: str
    params: Mapping[str, Any]
    protocol: Mapping[str, Any]
    parsed: Any = field(default=None, compare=False, repr=False)  # params as the method's dataclass, parsed once

    @classmethod
    def resolve(cls, cfg: Mapping[str, Any], task: Task | str, method: str, *, data_dir: str | None = None,
                model_dir: str = DEFAULT_MODEL_DIR, candidate: dict[str, Any] | None = None,
                split: str | None = None) -> RunSettings:
        """The settings of ``method`` on ``task`` under ``cfg`` (``candidate``: a `vcebench tune` setting in
        place of the tuned one; ``split``: the inputs' split, default the evaluation split). An unknown task
        or method, or a bad hyperparameter, is a one-line :class:`~vcebench.config.load.ConfigError`."""
        from methods import params_class
        from methods.base import parse_params

        from .noise import resolve_method

        task = get_task(cfg, task) if isinstance(task, str) else task  # type: ignore[arg-type]
        check_runs_on(task, method)  # type: ignore[arg-type]
        params, record = resolve_method(cfg, task, method, candidate=candidate)  # type: ignore[arg-type]
        parsed = parse_params(params_class(method), dict(params), section=method)  # a bad setting fails here
        return cls(method=method, params=MappingProxyType(params), protocol=MappingProxyType(record), parsed=parsed,
                   **cls.from_config(cfg, task, split, data_dir, model_dir))

    def with_params(self, **changes: Any) -> RunSettings:
        """A copy with these hyperparameters changed (e.g. `vcebench profile compaction`'s ``compaction``);
        :attr:`protocol` stays the record of the resolved settings."""
        from methods import params_class
        from methods.base import parse_params

        params = {**self.params, **changes}
        return dataclasses.replace(self, params=MappingProxyType(params),
                                   parsed=parse_params(params_class(self.method), dict(params), section=self.method))

    def build_method(self):
        """The method (``methods.get_method``) with :attr:`params`, as parsed by :meth:`resolve`."""
        import methods

        params = self.parsed if self.parsed is not None else dict(self.params)
        return methods.get_method(self.method, params, task=self.task, config=self.config)


@dataclass(frozen=True, kw_only=True)
class EvalSettings(JobSettings):
    """One evaluation's settings (`vcebench evaluate`, and the scoring of a `vcebench tune` setting): the fields
    of :class:`RunSettings` without ``params``; ``method`` is the name the counterfactuals are recorded under
    (None: the FID reference, which scores no method) and ``protocol`` the record of
    :func:`~vcebench.protocol.noise.resolve_method` for it, None when the name is no configured method (imported
    counterfactuals). ``n_eval``: the first evaluation inputs the counterfactuals should cover."""

    method: str | None
    protocol: Mapping[str, Any] | None

    @classmethod
    def resolve(cls, cfg: Mapping[str, Any], task: Task | str, method: str | None, *, data_dir: str | None = None,
                model_dir: str = DEFAULT_MODEL_DIR, split: str | None = None) -> EvalSettings:
        """The settings of evaluating ``method``'s counterfactuals on ``task`` (``split``: where their inputs
        come from, default the evaluation split). An unknown task is a :class:`~vcebench.config.load.ConfigError`;
        an unknown method is not (its ``protocol`` is None)."""
        from ..config.load import ConfigError
        from .noise import resolve_method

        task = get_task(cfg, task) if isinstance(task, str) else task  # type: ignore[arg-type]
        record = None
        if method is not None:
            try:
                record = MappingProxyType(resolve_method(cfg, task, method)[1])  # type: ignore[arg-type]
            except ConfigError:
                pass
        return cls(method=method, protocol=record, **cls.from_config(cfg, task, split, data_dir, model_dir))

    @property
    def metrics(self) -> Mapping[str, Any]:
        """The config's ``metrics`` section (batch size, bootstrap, sFID seeds, KID, ...)."""
        return self.config["metrics"]

