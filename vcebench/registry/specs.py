"""What a method, a metric or a dataset is (:class:`MethodSpec`, :class:`MetricSpec`, :class:`DatasetSpec`), the
checks every one passes, and the names they may use (network roles, noise kinds, task kinds, reserved table
columns).

Torch-free, like :mod:`vcebench.registry`, which holds the registered specs.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ConfigError
from .roles import ROLES as MODEL_ROLES  # the network roles a method or metric may ask for

# how vcebench.protocol.noise sets a method's starting noise: FiRe's flow time t, a DDPM's start step, or none
NOISE_KINDS = ("flow", "ddpm", None)
TASK_KINDS = ("faces", "xray")
# table columns that are no metric's (vcebench.report, vcebench.costs.columns): costs of all n CFs, and how each
# row's settings were made (metrics.json `protocol`: starting log-SNR, tuned file used or not)
# what a metric may need beside the networks and the batches (vcebench.steps.evaluate provides each): the FID
# reference features of the originals, the training split's labels (CD), the renderer's true counterfactuals (GT)
METRIC_INPUTS = ("fid_reference", "train_labels", "ground_truth")
COST_COLUMNS = ("sec_per_cf", "tflops_per_cf", "nfe_per_cf", "peak_mem_mb", "mean_steps")
PROTOCOL_COLUMNS = ("log_snr", "tuned")
RESERVED_COLUMNS = ("method", "n", *COST_COLUMNS, *PROTOCOL_COLUMNS)
EXTERNAL_PREFIX = "external_"  # `external_<name>`: results imported from another code base (vcebench.workflow)

METHOD_NAME = re.compile(r"^[a-z][a-z0-9]*$")
METRIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class RegistryError(ConfigError):
    """A method or metric that cannot be registered or found (bad name, clash, broken plug-in)."""


def _resolve(obj: Any, what: str) -> Any:
    """``"module:attribute"`` -> the attribute (imported now); anything else unchanged."""
    if not isinstance(obj, str):
        return obj
    module, _, attr = obj.partition(":")
    try:
        out = importlib.import_module(module)
        for part in attr.split(".") if attr else []:
            out = getattr(out, part)
    except (ImportError, AttributeError) as e:
        raise RegistryError(f"{what}: cannot import {obj!r}: {type(e).__name__}: {e}") from e
    return out


@dataclass(frozen=True)
class MethodSpec:
    """A method: ``factory(name, params, **factory_kwargs)`` builds it from its parsed dataclass ``params``.

    ``roles``: every network it may use (the workflow provides these; an instance may use fewer);
    ``label``: its name in tables and figures; ``baseline``: a reference row (like ``input``) that is
    evaluated like every method but never tuned, ranked or put on a Pareto front; ``truth``: a baseline that
    returns the synthetic renderer's true counterfactual (built with it, :func:`methods.get_method`): it exists
    on synthetic tasks only, and the tables check each metric column against it
    (:mod:`vcebench.report.validity`); ``attack``: a ranked method that is known to be no counterfactual (the
    pixel-space attack): the table's footer says which metric columns tell it from the truth and which rank it
    first; ``noise``: how the protocol sets its starting noise (:data:`NOISE_KINDS`); ``source``: who
    registered it.
    """

    name: str
    label: str
    roles: tuple[str, ...]
    params: Any
    factory: Any
    factory_kwargs: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False
    noise: str | None = None
    source: str = "vcebench"
    truth: bool = False
    attack: bool = False

    def params_class(self) -> type:
        cls = _resolve(self.params, f"method {self.name!r} ({self.source}): hyperparameter dataclass")
        if not dataclasses.is_dataclass(cls):
            raise RegistryError(f"method {self.name!r} ({self.source}): its hyperparameters {cls!r} are not a "
                                f"dataclass")
        return cls

    def build(self, name: str, params: Any, **context: Any) -> Any:
        """The method; ``context``: what the harness gives a method beside its settings (a ``truth`` method:
        ``renderer``, the task's true counterfactuals)."""
        return _resolve(self.factory, f"method {self.name!r} ({self.source}): factory")(
            name, params, **self.factory_kwargs, **context)


@dataclass(frozen=True)
class MetricSpec:
    """A metric family: ``factory(ctx)`` (``ctx``: a ``metrics.builders.MetricContext``) builds it.

    ``columns``: its table columns in order, each with its direction (True: higher is better, False:
    lower, None: shown but never ranked, e.g. the unedited input's floor); ``roles``: the networks it
    needs; ``inputs``: what else it needs (:data:`METRIC_INPUTS`); ``kinds``: the task kinds it is evaluated
    on (``synthetic_only``: only on synthetic tasks); ``table_kinds``: where its columns are shown (default
    ``kinds``); ``labels``: column -> header. A metric object may carry ``record`` (a dict), its settings
    written into metrics.json as they are (e.g. KID's kernel).
    """

    name: str
    columns: tuple[tuple[str, bool | None], ...]
    factory: Any
    roles: tuple[str, ...] = ()
    kinds: tuple[str, ...] = TASK_KINDS
    synthetic_only: bool = False
    table_kinds: tuple[str, ...] | None = None
    labels: tuple[tuple[str, str], ...] = ()
    source: str = "vcebench"
    inputs: tuple[str, ...] = ()

    def build(self, ctx: Any) -> Any:
        return _resolve(self.factory, f"metric {self.name!r} ({self.source}): factory")(ctx)

    def evaluated_on(self, kind: str, synthetic: bool) -> bool:
        return kind in self.kinds and (synthetic or not self.synthetic_only)

    def shown_on(self, kind: str, synthetic: bool) -> bool:
        return self.evaluated_on(kind, synthetic) and kind in (self.table_kinds or self.kinds)


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset, declared once: everything else (the data registry, the config schema's ``datasets.<name>``
    section and task ``dataset`` names, the workflow's data inputs, the error messages) reads it.

    ``kind``: the metric protocol of its tasks (:data:`TASK_KINDS`); ``synthetic``: rendered with ground truth
    (``loader`` then builds the renderer from the config section, else it reads split ``split`` of the
    user's folders: ``loader(section, split, seed) -> Split``, a ``"module:function"``); ``attributes``: its
    label columns (a task's ``attribute`` is one of them); ``eval_split`` / ``tune_split``: where
    counterfactuals are evaluated and settings tuned (never the same); ``config``: the JSON schema of its
    config section's keys; ``source`` / ``layout``: where to get a real dataset and what its folder holds
    (named in every error about it); ``root_key``: the config key of that folder; ``split_files``: the split and
    label files a real dataset is read from, each ``(config key of its folder or file, file name or "" for the
    file the key names, expected sha256 or None)``: None where no hash is published (the first seen is recorded,
    :mod:`vcebench.data.fingerprints`).
    """

    name: str
    kind: str
    synthetic: bool
    attributes: tuple[str, ...]
    loader: str
    config: dict[str, Any]
    eval_split: str = "test"
    tune_split: str = "val"
    source: str | None = None
    layout: str | None = None
    root_key: str = "root"
    split_files: tuple[tuple[str, str, str | None], ...] = ()

    def load(self) -> Any:
        return _resolve(self.loader, f"dataset {self.name!r}: loader")


def check_dataset(s: DatasetSpec) -> None:
    where = f"dataset {s.name!r}"
    if not isinstance(s.name, str) or not re.match(r"^[a-z][a-z0-9]*$", s.name):
        raise RegistryError(f"{where}: a dataset name is lowercase letters and digits, starting with a letter")
    if s.kind not in TASK_KINDS:
        raise RegistryError(f"{where}: kind must be one of {list(TASK_KINDS)}, got {s.kind!r}")
    if not s.attributes or len(set(s.attributes)) != len(s.attributes):
        raise RegistryError(f"{where}: attributes must be distinct label names, got {list(s.attributes)}")
    if s.eval_split == s.tune_split:
        raise RegistryError(f"{where}: settings are tuned on another split than the evaluated one "
                            f"({s.eval_split!r} twice)")
    if not s.synthetic and not s.source:
        raise RegistryError(f"{where}: a real dataset names where to get it (source)")


def method_spec(name: str, label: str | None = None, *, roles: Iterable[str], params: Any, factory: Any,
                baseline: bool = False, noise: str | None = None, source: str | None = None, truth: bool = False,
                attack: bool = False, **factory_kwargs: Any) -> MethodSpec:
    """A checked :class:`MethodSpec` (the form a plug-in's entry point can point at)."""
    spec = MethodSpec(name=name, label=label or name, roles=tuple(roles), params=params, factory=factory,
                      factory_kwargs=dict(factory_kwargs), baseline=bool(baseline), noise=noise,
                      source=source or _module_of(factory), truth=bool(truth), attack=bool(attack))
    check_method(spec)
    return spec


def metric_spec(name: str, *, columns: dict[str, bool | None] | Iterable[tuple[str, bool | None]], factory: Any,
                roles: Iterable[str] = (), kinds: Iterable[str] = TASK_KINDS, synthetic_only: bool = False,
                table_kinds: Iterable[str] | None = None, labels: dict[str, str] | None = None,
                source: str | None = None, inputs: Iterable[str] = ()) -> MetricSpec:
    """A checked :class:`MetricSpec` (``columns``: ``{column: higher_is_better}``, in table order)."""
    cols = tuple(columns.items()) if isinstance(columns, dict) else tuple(tuple(c) for c in columns)
    spec = MetricSpec(name=name, columns=cols, factory=factory, roles=tuple(roles), kinds=tuple(kinds),
                      synthetic_only=bool(synthetic_only),
                      table_kinds=None if table_kinds is None else tuple(table_kinds),
                      labels=tuple((labels or {}).items()), source=source or _module_of(factory),
                      inputs=tuple(inputs))
    check_metric(spec)
    return spec


def _module_of(obj: Any) -> str:
    return obj.partition(":")[0] if isinstance(obj, str) else getattr(obj, "__module__", "?")


def check_method(s: MethodSpec) -> None:
    where = f"method {s.name!r} ({s.source})"
    if not isinstance(s.name, str) or not METHOD_NAME.match(s.name) or s.name + "_" == EXTERNAL_PREFIX:
        raise RegistryError(f"{where}: a method name is lowercase letters and digits, starting with a letter "
                            f"(`_` separates a variant: <method>_<variant>), and not 'external'")
    bad = [r for r in s.roles if r not in MODEL_ROLES]
    if bad or "classifier" not in s.roles:
        raise RegistryError(f"{where}: roles must include 'classifier' and be among {', '.join(MODEL_ROLES)}; "
                            f"got {list(s.roles)}")
    if s.noise not in NOISE_KINDS:
        raise RegistryError(f"{where}: noise must be one of {list(NOISE_KINDS)}, got {s.noise!r}")
    if s.truth and not s.baseline:
        raise RegistryError(f"{where}: a truth row is a reference row: register it with baseline=True")
    if s.attack and s.baseline:
        raise RegistryError(f"{where}: an attack is a ranked method, not a reference row: register it without "
                            f"baseline=True")


def check_metric(s: MetricSpec) -> None:
    where = f"metric {s.name!r} ({s.source})"
    if not isinstance(s.name, str) or not METRIC_NAME.match(s.name):
        raise RegistryError(f"{where}: a metric name is letters, digits and `_`, starting with a letter")
    if not s.columns:
        raise RegistryError(f"{where}: declares no table column")
    bad = [i for i in s.inputs if i not in METRIC_INPUTS]
    if bad:
        raise RegistryError(f"{where}: inputs must be among {', '.join(METRIC_INPUTS)}; got {bad}")
    for col, higher in s.columns:
        if not isinstance(col, str) or not METRIC_NAME.match(col) or col in RESERVED_COLUMNS \
                or col.endswith(("_lo", "_hi")):
            raise RegistryError(f"{where}: bad column name {col!r} (letters, digits and `_`; not one of "
                                f"{', '.join(RESERVED_COLUMNS)}; no `_lo` / `_hi` ending)")
        if higher not in (True, False, None):
            raise RegistryError(f"{where}: column {col!r}: higher_is_better must be true, false or null, "
                                f"got {higher!r}")
    bad = [r for r in s.roles if r not in MODEL_ROLES]
    if bad:
        raise RegistryError(f"{where}: unknown role(s) {bad}; known: {', '.join(MODEL_ROLES)}")
    kinds = [k for k in (*s.kinds, *(s.table_kinds or ())) if k not in TASK_KINDS]
    if kinds or not s.kinds:
        raise RegistryError(f"{where}: kinds must be among {', '.join(TASK_KINDS)}, got {list(s.kinds)}")
