"""Every method, metric and task kind vcebench knows, in one place; the rest of the code reads it from here.

Torch-free: a method's hyperparameter dataclass and factory, and a metric's factory, are given as lazy
``"module:attribute"`` strings (or the objects themselves, for plug-ins that register with a decorator)
and imported only when a method or metric is built. What reads the registry:

- ``vcebench.tasks.split_method`` (method names and variants), ``methods.get_method`` / ``params_class``;
- ``vcebench.workflow`` (the networks each rule needs), ``vcebench.protocol`` (the noise rule of a method);
- ``metrics.build_metrics`` / ``metric_names`` / ``required_roles`` (which metrics a task evaluates);
- ``vcebench.report`` (table columns, their directions and labels, method labels, the reference rows);
- ``vcebench.config.validate`` (``config/schema.yaml``'s method names are filled in by :func:`fill_schema`).

Plug-ins: another installed package adds a method or a metric through the entry point groups
``vcebench.methods`` / ``vcebench.metrics`` (the entry point's name is the method's or metric's name; its
object a :class:`MethodSpec` / :class:`MetricSpec`, or a module that registers one with the :func:`method` /
:func:`metric` decorator when imported). Plug-ins are loaded on the first question about the registry
(:func:`load_plugins`); a plug-in whose name clashes with a built-in or another plug-in is a
:class:`RegistryError` naming both.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

METHOD_GROUP = "vcebench.methods"
METRIC_GROUP = "vcebench.metrics"

# network roles a method or metric may ask for (the same as vcebench.models.base.ROLES; a test checks)
MODEL_ROLES = ("classifier", "ddpm", "pmf", "perceptual", "oracle", "identity", "simsiam", "fid_features")
# how vcebench.protocol sets a method's starting noise: FiRe's flow time t, a DDPM's start step, or none
NOISE_KINDS = ("flow", "ddpm", None)
# datasets: name -> (task kind, synthetic). The task kind picks the metric protocol: `faces` (ACE) or
# `xray` (FastDiME's medical protocol); synthetic datasets add the ground-truth metrics.
DATASETS = {"synthfaces": ("faces", True), "synthxray": ("xray", True), "celeba": ("faces", False),
            "celebahq": ("faces", False), "chexpert": ("xray", False)}
TASK_KINDS = ("faces", "xray")
# table columns that are no metric's (vcebench.report, vcebench.costs): costs of all n CFs, and how each
# row's settings were made (metrics.json `protocol`: starting log-SNR, tuned file used or not)
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
    evaluated like every method but never tuned, ranked or put on a Pareto front; ``noise``: how the
    protocol sets its starting noise (:data:`NOISE_KINDS`); ``source``: who registered it.
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

    def params_class(self) -> type:
        cls = _resolve(self.params, f"method {self.name!r} ({self.source}): hyperparameter dataclass")
        if not dataclasses.is_dataclass(cls):
            raise RegistryError(f"method {self.name!r} ({self.source}): its hyperparameters {cls!r} are not a "
                                f"dataclass")
        return cls

    def build(self, name: str, params: Any) -> Any:
        return _resolve(self.factory, f"method {self.name!r} ({self.source}): factory")(name, params,
                                                                                        **self.factory_kwargs)


@dataclass(frozen=True)
class MetricSpec:
    """A metric family: ``factory(ctx)`` (``ctx``: a ``metrics.builders.MetricContext``) builds it.

    ``columns``: its table columns in order, each with its direction (True: higher is better, False:
    lower, None: shown but never ranked, e.g. the unedited input's floor); ``roles``: the networks it
    needs; ``kinds``: the task kinds it is evaluated on (``synthetic_only``: only on synthetic tasks);
    ``table_kinds``: where its columns are shown (default ``kinds``); ``labels``: column -> header.
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

    def build(self, ctx: Any) -> Any:
        return _resolve(self.factory, f"metric {self.name!r} ({self.source}): factory")(ctx)

    def evaluated_on(self, kind: str, synthetic: bool) -> bool:
        return kind in self.kinds and (synthetic or not self.synthetic_only)

    def shown_on(self, kind: str, synthetic: bool) -> bool:
        return self.evaluated_on(kind, synthetic) and kind in (self.table_kinds or self.kinds)


def method_spec(name: str, label: str | None = None, *, roles: Iterable[str], params: Any, factory: Any,
                baseline: bool = False, noise: str | None = None, source: str | None = None,
                **factory_kwargs: Any) -> MethodSpec:
    """A checked :class:`MethodSpec` (the form a plug-in's entry point can point at)."""
    spec = MethodSpec(name=name, label=label or name, roles=tuple(roles), params=params, factory=factory,
                      factory_kwargs=dict(factory_kwargs), baseline=bool(baseline), noise=noise,
                      source=source or _module_of(factory))
    _check_method(spec)
    return spec


def metric_spec(name: str, *, columns: dict[str, bool | None] | Iterable[tuple[str, bool | None]], factory: Any,
                roles: Iterable[str] = (), kinds: Iterable[str] = TASK_KINDS, synthetic_only: bool = False,
                table_kinds: Iterable[str] | None = None, labels: dict[str, str] | None = None,
                source: str | None = None) -> MetricSpec:
    """A checked :class:`MetricSpec` (``columns``: ``{column: higher_is_better}``, in table order)."""
    cols = tuple(columns.items()) if isinstance(columns, dict) else tuple(tuple(c) for c in columns)
    spec = MetricSpec(name=name, columns=cols, factory=factory, roles=tuple(roles), kinds=tuple(kinds),
                      synthetic_only=bool(synthetic_only),
                      table_kinds=None if table_kinds is None else tuple(table_kinds),
                      labels=tuple((labels or {}).items()), source=source or _module_of(factory))
    _check_metric(spec)
    return spec


def _module_of(obj: Any) -> str:
    return obj.partition(":")[0] if isinstance(obj, str) else getattr(obj, "__module__", "?")


def _check_method(s: MethodSpec) -> None:
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


def _check_metric(s: MetricSpec) -> None:
    where = f"metric {s.name!r} ({s.source})"
    if not isinstance(s.name, str) or not METRIC_NAME.match(s.name):
        raise RegistryError(f"{where}: a metric name is letters, digits and `_`, starting with a letter")
    if not s.columns:
        raise RegistryError(f"{where}: declares no table column")
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


# ----------------------------------------------------------------------------- the built-ins

_DDPM_ROLES = ("classifier", "ddpm", "perceptual")
BUILTIN_METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("fire", "FiRe", ("classifier", "pmf", "perceptual"), "methods.fire:FireParams", "methods.fire:FiRe",
               noise="flow"),
    MethodSpec("dime", "DiME", _DDPM_ROLES, "methods.dime:DimeParams", "methods.dime:DiME", noise="ddpm"),
    MethodSpec("fastdime", "FastDiME", _DDPM_ROLES, "methods.fastdime:FastDimeParams", "methods.fastdime:FastDiME",
               {"passes": 1, "first_pass_mask": True}, noise="ddpm"),
    MethodSpec("fastdime2", "FastDiME-2", _DDPM_ROLES, "methods.fastdime:FastDimeParams",
               "methods.fastdime:FastDiME", {"passes": 2, "first_pass_mask": False}, noise="ddpm"),
    MethodSpec("fastdime2plus", "FastDiME-2+", _DDPM_ROLES, "methods.fastdime:FastDimeParams",
               "methods.fastdime:FastDiME", {"passes": 2, "first_pass_mask": True}, noise="ddpm"),
    MethodSpec("maskdime", "MaskDiME", _DDPM_ROLES, "methods.maskdime:MaskDimeParams", "methods.maskdime:MaskDiME",
               noise="ddpm"),
    # the do-nothing row: the input as its own "counterfactual" (methods/identity.py)
    MethodSpec("input", "Input (no edit)", ("classifier",), "methods.identity:IdentityParams",
               "methods.identity:Identity", baseline=True),
)

# In evaluation order; the tables show each kind's metrics in this order, ranked columns first, then the
# unranked ones (the ground-truth floors). Protocol and subsets: metrics/__init__.py, docs/protocol.md.
_B = "metrics.builders:"
BUILTIN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("FID", (("FID", False),), _B + "fid", ("fid_features",)),
    MetricSpec("sFID", (("sFID", False),), _B + "sfid", ("fid_features",), kinds=("faces",)),
    MetricSpec("KID", (("KID", False),), _B + "kid", ("fid_features",)),
    MetricSpec("FVA", (("FVA", True), ("FS", True)), _B + "fva", ("identity",), kinds=("faces",)),
    MetricSpec("MNAC", (("MNAC", False),), _B + "mnac", ("oracle",), kinds=("faces",)),
    MetricSpec("CD", (("CD", False),), _B + "cd", ("oracle",), kinds=("faces",)),
    MetricSpec("COUT", (("COUT", True),), _B + "cout", ("classifier",), kinds=("faces",)),
    MetricSpec("L1", (("L1", False),), _B + "l1", (), table_kinds=("xray",)),
    MetricSpec("MAD", (("MAD", True),), _B + "mad", ("classifier",), kinds=("xray",)),
    MetricSpec("S3", (("S3", True),), _B + "s3", ("simsiam",), kinds=("xray",), labels=(("S3", "S$^3$"),)),
    MetricSpec("FR", (("FR", True),), _B + "fr", ("classifier",), labels=(("FR", "FR(%)"),)),
    MetricSpec("GT", (("GT_L1", False), ("GT_L1_region", False), ("GT_precision", True), ("GT_recall", True),
                      ("GT_L1_input", None), ("GT_L1_region_input", None)), _B + "ground_truth", (),
               synthetic_only=True, labels=(("GT_L1_input", "GT_L1 (input)"),
                                            ("GT_L1_region_input", "GT_L1_region (input)"))),
    MetricSpec("FR_oracle", (("FR_oracle", True),), _B + "fr_oracle", ("oracle",), synthetic_only=True),
)

_METHODS: dict[str, MethodSpec] = {s.name: s for s in BUILTIN_METHODS}
_METRICS: dict[str, MetricSpec] = {s.name: s for s in BUILTIN_METRICS}
_DECORATED: dict[str, list[MethodSpec | MetricSpec]] = {}  # module -> what its decorators registered
_plugins_loaded = False


# ----------------------------------------------------------------------------- registration

def _check_new_name(what: str, table: dict, spec) -> None:
    """A RegistryError when ``table`` already holds another ``what`` (method / metric) of ``spec``'s name."""
    old = table.get(spec.name)
    if old is not None and old != spec:
        kind = f"the built-in {what}" if old.source == "vcebench" else f"the {what} of {old.source}"
        raise RegistryError(f"{what} {spec.name!r} of {spec.source} clashes with {kind} {spec.name!r}; "
                            f"rename the plug-in's {what}")


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method (a plug-in's); its name must be new. Registering the same spec twice is a no-op."""
    _check_method(spec)
    _check_new_name("method", _METHODS, spec)
    _METHODS[spec.name] = spec
    return spec


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Add a metric (a plug-in's); its name and its columns must be new."""
    _check_metric(spec)
    _check_new_name("metric", _METRICS, spec)
    for other in _METRICS.values():
        if other.name == spec.name:
            continue
        shared = sorted({c for c, _ in spec.columns} & {c for c, _ in other.columns})
        if shared:
            raise RegistryError(f"metric {spec.name!r} of {spec.source}: column(s) {shared} are already "
                                f"metric {other.name!r}'s ({other.source})")
    _METRICS[spec.name] = spec
    return spec


def method(name: str, label: str | None = None, *, roles: Iterable[str], params: Any, baseline: bool = False,
           noise: str | None = None, **factory_kwargs: Any) -> Callable[[Any], Any]:
    """Decorator registering a method factory (a class or function ``(name, params) -> Method``)::

        @registry.method("mine", "Mine", roles=("classifier",), params=MineParams)
        class Mine: ...
    """
    def deco(factory: Any) -> Any:
        spec = register_method(method_spec(name, label, roles=roles, params=params, factory=factory,
                                           baseline=baseline, noise=noise, **factory_kwargs))
        _DECORATED.setdefault(spec.source, []).append(spec)
        return factory
    return deco


def metric(name: str, *, columns: dict[str, bool | None], roles: Iterable[str] = (),
           kinds: Iterable[str] = TASK_KINDS, synthetic_only: bool = False, labels: dict[str, str] | None = None,
           ) -> Callable[[Any], Any]:
    """Decorator registering a metric factory ``(ctx: metrics.builders.MetricContext) -> Metric``."""
    def deco(factory: Any) -> Any:
        spec = register_metric(metric_spec(name, columns=columns, factory=factory, roles=roles, kinds=kinds,
                                           synthetic_only=synthetic_only, labels=labels))
        _DECORATED.setdefault(spec.source, []).append(spec)
        return factory
    return deco


def load_plugins(force: bool = False) -> None:
    """Register the methods and metrics of the installed packages' entry points (once per process;
    ``force``: drop the plug-ins registered so far and look again, e.g. after changing ``sys.path``)."""
    global _plugins_loaded
    if _plugins_loaded and not force:
        return
    from importlib.metadata import entry_points

    if force:
        for table, builtins in ((_METHODS, BUILTIN_METHODS), (_METRICS, BUILTIN_METRICS)):
            table.clear()
            table.update({s.name: s for s in builtins})
    _plugins_loaded = True  # set first: a plug-in module may ask the registry while it is imported
    try:
        for group, table, kind, cls, register in ((METHOD_GROUP, _METHODS, "method", MethodSpec, register_method),
                                                  (METRIC_GROUP, _METRICS, "metric", MetricSpec, register_metric)):
            for ep in entry_points(group=group):
                dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
                where = f"plug-in {kind} {ep.name!r} (entry point `{ep.value}` of package {dist}, group {group})"
                try:
                    obj = ep.load()
                except Exception as e:  # noqa: BLE001 (any error of the plug-in's import is reported as its own)
                    raise RegistryError(f"{where} cannot be loaded: {type(e).__name__}: {e}") from e
                if isinstance(obj, types.ModuleType):  # its decorators registered (maybe on an earlier import)
                    obj = _DECORATED.get(obj.__name__, [])
                specs = obj if isinstance(obj, (list, tuple)) else [obj]
                for spec in specs:
                    if isinstance(spec, cls):  # named by its package (a decorated module's keep their module)
                        register(spec if spec in _DECORATED.get(spec.source, []) else
                                 dataclasses.replace(spec, source=dist))
                if ep.name not in table:
                    raise RegistryError(f"{where}: registers no {kind} named {ep.name!r} (point it at a "
                                        f"{cls.__name__} or at a module using the @vcebench.registry.{kind} "
                                        f"decorator)")
    except Exception:
        _plugins_loaded = False
        raise


# ----------------------------------------------------------------------------- methods

def methods() -> dict[str, MethodSpec]:
    """Every registered method (built-ins first, then plug-ins), by name."""
    load_plugins()
    return dict(_METHODS)


def method_names() -> tuple[str, ...]:
    return tuple(methods())


def builtin_method_names() -> tuple[str, ...]:
    return tuple(s.name for s in BUILTIN_METHODS)


def get_method_spec(base: str) -> MethodSpec:
    """The registered method ``base`` (a base name; ``vcebench.tasks.split_method`` parses variants)."""
    table = methods()
    if base not in table:
        raise RegistryError(f"unknown method {base!r}; known: {', '.join(table)}")
    return table[base]


def baseline_methods() -> tuple[str, ...]:
    """The reference rows (never tuned, ranked or put on a Pareto front), e.g. ``input``."""
    return tuple(n for n, s in methods().items() if s.baseline)


def method_noise(base: str) -> str | None:
    return get_method_spec(base).noise


# ----------------------------------------------------------------------------- metrics

def metrics() -> dict[str, MetricSpec]:
    """Every registered metric family (built-ins first, in evaluation order, then plug-ins), by name."""
    load_plugins()
    return dict(_METRICS)


def get_metric_spec(name: str) -> MetricSpec:
    table = metrics()
    if name not in table:
        raise RegistryError(f"unknown metric {name!r}; known: {', '.join(table)}")
    return table[name]


def metric_names(kind: str, synthetic: bool) -> list[str]:
    """The metric families a task of ``kind`` evaluates, in order."""
    return [n for n, s in metrics().items() if s.evaluated_on(kind, synthetic)]


def metric_roles(name: str) -> tuple[str, ...]:
    return get_metric_spec(name).roles


def eval_roles(kind: str, synthetic: bool) -> tuple[str, ...]:
    """Networks the evaluation of a task of ``kind`` loads: the classifier, then its metrics' roles."""
    roles = ["classifier"]
    for n in metric_names(kind, synthetic):
        roles += [r for r in metrics()[n].roles if r not in roles]
    return tuple(roles)


def table_columns(kind: str, synthetic: bool) -> list[str]:
    """A task table's metric columns: the ranked columns of its shown metrics, then the unranked ones."""
    shown = [s for s in metrics().values() if s.shown_on(kind, synthetic)]
    ranked = [c for s in shown for c, h in s.columns if h is not None]
    return ranked + [c for s in shown for c, h in s.columns if h is None]


def column_directions() -> dict[str, bool]:
    """Column -> higher is better, for every ranked metric column (and ``mean_steps``, a cost)."""
    out = {c: h for s in metrics().values() for c, h in s.columns if h is not None}
    return {**out, **dict.fromkeys(COST_COLUMNS, False)}


def unranked_columns() -> list[str]:
    return [c for s in metrics().values() for c, h in s.columns if h is None]


def column_labels() -> dict[str, str]:
    """Column -> table header, where it differs from the column's name."""
    return {c: label for s in metrics().values() for c, label in s.labels}


# ----------------------------------------------------------------------------- config schema

def fill_schema(schema: dict) -> dict:
    """``config/schema.yaml`` with the registered method names filled in: ``definitions.base_method`` becomes
    their enum, ``definitions.method_name`` the pattern of a method, ``<method>_<variant>`` or
    ``external_<name>``. The file itself names no method (a test checks), so a plug-in's name validates."""
    defs = schema.get("definitions") or {}
    missing = [k for k in ("base_method", "method_name") if k not in defs]
    if missing:
        raise RegistryError(f"the config schema has no definitions {missing} to fill with the registry's methods")
    names = method_names()
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    out = dict(schema)
    out["definitions"] = {**defs, "base_method": {**defs["base_method"], "enum": list(names)},
                          "method_name": {**defs["method_name"],
                                          "pattern": f"^({alt})(_[A-Za-z0-9_]+)?$|^{EXTERNAL_PREFIX}[A-Za-z0-9_]+$"}}
    return out
