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

Both serialise to one canonical JSON record (:meth:`JobSettings.to_json`: sorted keys, the config pruned to what a
job reads, :func:`job_config`) with its :attr:`JobSettings.settings_sha256`; the workflow
writes it per job (``results/<task>/<method>/settings.json``) and the job reads it back (``from_json``) instead of
the config files.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from ..config.tasks import Task, check_runs_on, get_task

DEFAULT_MODEL_DIR = "resources/models"

# config keys that are fields of the record itself (JobSettings: seed, n_eval, batch_size, runtime), not
# repeated in its ``config``; :func:`config_with_fields` puts them back for the loaders
RECORD_FIELDS = ("seed", "n_eval", "batch_size", "threads", "device", "cuda")
# the top-level config sections a job's loaders and metrics read (besides RECORD_FIELDS)
JOB_SECTIONS = ("cpu_isa", "metrics")


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of ``text`` as UTF-8: the fingerprint of a canonical settings record."""
    return hashlib.sha256(text.encode()).hexdigest()


def job_config(cfg: Mapping[str, Any], task: str) -> dict[str, Any]:
    """The part of ``cfg`` a job on ``task`` reads beyond its resolved fields: ``datasets`` and ``models`` of the
    task's dataset, the tasks on that dataset (their ``dataset`` / ``attribute``: a classifier's attributes;
    their method ``params`` are resolved into the record, not repeated) and :data:`JOB_SECTIONS`."""
    dataset = cfg["tasks"][task]["dataset"]
    tasks = {name: {k: v for k, v in t.items() if k != "params"}
             for name, t in (cfg.get("tasks") or {}).items() if t.get("dataset") == dataset}
    out: dict[str, Any] = {k: cfg[k] for k in JOB_SECTIONS if k in cfg}
    out["tasks"] = tasks
    for section in ("datasets", "models"):
        block = (cfg.get(section) or {}).get(dataset)
        out[section] = {} if block is None else {dataset: block}
    return out


def config_with_fields(config: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """A record's ``config`` with the :data:`RECORD_FIELDS` of the record put back (the loaders read
    ``cfg["seed"]``)."""
    return {**config, **{k: fields[k] for k in RECORD_FIELDS if k in fields}}


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

    KIND: ClassVar[str] = "job"  # the record's ``kind``: which class reads it back

    def record(self) -> dict[str, Any]:
        """The settings as plain JSON values (no paths of this machine: ``data_dir`` and ``model_dir`` are the
        job's arguments): what :meth:`to_json` writes and ``from_json`` reads."""
        return {"kind": self.KIND, "task": self.task.name, "seed": self.seed, "n_eval": self.n_eval,
                "batch_size": self.batch_size, "split": self.split,
                "runtime": {"threads": self.runtime.threads, "device": self.runtime.device,
                            "cuda": plain(self.runtime.cuda)},
                "config": job_config(plain(self.config), self.task.name)}

    def overridden(self, *, seed: int | None = None, n_eval: int | None = None):
        """A copy with the generation ``seed`` and / or ``n_eval`` replaced (a job's explicit command-line
        override: the `seeds` target's other seeds), in the read-only config too (the loaders read it)."""
        changes = {k: int(v) for k, v in (("seed", seed), ("n_eval", n_eval)) if v is not None}
        if not changes:
            return self
        return dataclasses.replace(self, config=read_only({**self.config, **changes}), **changes)

    def to_json(self) -> str:
        """The canonical serialisation: :meth:`record` with sorted keys, one JSON text per settings."""
        return json.dumps(self.record(), sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n"

    @property
    def settings_sha256(self) -> str:
        """SHA-256 (hex) of :meth:`to_json`: the one fingerprint of what the job ran with (provenance)."""
        return text_sha256(self.to_json())

    @staticmethod
    def fields_from_record(rec: Mapping[str, Any], kind: str | tuple[str, ...], data_dir: str | None,
                           model_dir: str) -> dict[str, Any]:
        """The shared fields of a :meth:`record` (keyword arguments of a subclass); ``kind``: the record kinds
        the caller reads. A record of another kind, or missing a field, is a one-line ConfigError."""
        from ..config.load import ConfigError

        kinds = (kind,) if isinstance(kind, str) else kind
        if rec.get("kind") not in kinds:
            raise ConfigError(f"settings record of kind {rec.get('kind')!r}, expected {' or '.join(kinds)}")
        try:
            rt = rec["runtime"]
            cfg = config_with_fields(rec["config"], {**rec, **rt})
            return {"config": read_only(cfg), "task": get_task(cfg, rec["task"]), "seed": int(rec["seed"]),
                    "n_eval": int(rec["n_eval"]), "batch_size": int(rec["batch_size"]),
                    "runtime": RuntimeOptions(threads=None if rt["threads"] is None else int(rt["threads"]),
                                              device=str(rt["device"]), cuda=MappingProxyType(dict(rt["cuda"]))),
                    "split": str(rec["split"]), "data_dir": data_dir, "model_dir": model_dir}
        except (KeyError, TypeError) as e:
            raise ConfigError(f"settings record without a valid field {e}") from None

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
        from methods.params import parse_params

        from .noise import resolve_method

        task = get_task(cfg, task) if isinstance(task, str) else task  # type: ignore[arg-type]
        check_runs_on(task, method)  # type: ignore[arg-type]
        params, record = resolve_method(cfg, task, method, candidate=candidate)  # type: ignore[arg-type]
        # a bad setting fails here, a length in pixels beyond the task's images too (vcebench.config.bounds)
        parsed = parse_params(params_class(method), dict(params), section=method, image_size=record["resolution"])
        return cls(method=method, params=MappingProxyType(params), protocol=MappingProxyType(record), parsed=parsed,
                   **cls.from_config(cfg, task, split, data_dir, model_dir))

    KIND: ClassVar[str] = "run"

    def record(self) -> dict[str, Any]:
        """:meth:`JobSettings.record` with the method, its hyperparameters and the protocol record (whose
        ``params`` copy of them is not written twice)."""
        protocol = {k: v for k, v in plain(self.protocol).items() if k != "params"}
        return {**super().record(), "method": self.method, "params": plain(self.params), "protocol": protocol}

    @classmethod
    def from_json(cls, text: str, *, data_dir: str | None = None, model_dir: str = DEFAULT_MODEL_DIR) -> RunSettings:
        """The settings :meth:`to_json` wrote (a ``run`` record), the hyperparameters parsed and range-checked
        again by the method's dataclass: a job runs the record's values, never the config files'."""
        from methods import params_class
        from methods.params import parse_params

        from ..config.load import ConfigError

        rec = json.loads(text)
        shared = cls.fields_from_record(rec, cls.KIND, data_dir, model_dir)
        if not isinstance(rec.get("params"), dict) or not isinstance(rec.get("protocol"), dict):
            raise ConfigError("settings record of kind 'run' without `params` and `protocol` mappings")
        method, params = str(rec["method"]), dict(rec["params"])
        check_runs_on(shared["task"], method)
        parsed = parse_params(params_class(method), dict(params), section=method,
                              image_size=rec["protocol"].get("resolution"))
        return cls(method=method, params=MappingProxyType(params), parsed=parsed,
                   protocol=MappingProxyType({**rec["protocol"], "params": params}), **shared)

    def with_params(self, **changes: Any) -> RunSettings:
        """A copy with these hyperparameters changed (e.g. `vcebench profile compaction`'s ``compaction``);
        :attr:`protocol` stays the record of the resolved settings."""
        from methods import params_class
        from methods.params import parse_params

        params = {**self.params, **changes}
        parsed = parse_params(params_class(self.method), dict(params), section=self.method,
                              image_size=self.protocol.get("resolution"))
        return dataclasses.replace(self, params=MappingProxyType(params), parsed=parsed)

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

    KIND: ClassVar[str] = "eval"

    def record(self) -> dict[str, Any]:
        """:meth:`JobSettings.record` with the method's name and its protocol record (None: none)."""
        return {**super().record(), "method": self.method, "protocol": plain(self.protocol)}

    @classmethod
    def from_json(cls, text: str, *, data_dir: str | None = None, model_dir: str = DEFAULT_MODEL_DIR) -> EvalSettings:
        """The settings of evaluating a method from its settings record: an ``eval`` record, or the ``run`` record
        of the method that made the counterfactuals (its hyperparameters are not needed to score them)."""
        rec = json.loads(text)
        shared = cls.fields_from_record(rec, (cls.KIND, RunSettings.KIND), data_dir, model_dir)
        protocol = rec.get("protocol")
        if protocol is not None and rec.get("kind") == RunSettings.KIND:
            protocol = {**protocol, "params": rec["params"]}
        return cls(method=rec.get("method"), protocol=None if protocol is None else MappingProxyType(protocol),
                   **shared)

    @property
    def metrics(self) -> Mapping[str, Any]:
        """The config's ``metrics`` section (batch size, bootstrap, sFID seeds, KID, ...)."""
        return self.config["metrics"]


def plain(value: Any) -> Any:
    """``value`` with its read-only views and tuples as plain dicts and lists (JSON values)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
