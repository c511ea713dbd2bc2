"""Every method, metric, dataset and task kind vcebench knows, in one place; the rest of the code reads it from here.
What a spec is and the checks it passes: :mod:`vcebench.registry.specs`; the built-ins:
:mod:`vcebench.registry.builtin_specs`.

Torch-free: a method's hyperparameter dataclass and factory, and a metric's factory, are given as lazy
``"module:attribute"`` strings (or the objects themselves, for plug-ins that register with a decorator)
and imported only when a method or metric is built. What reads the registry:

- ``vcebench.config.tasks.split_method`` (method names and variants), ``methods.get_method`` / ``params_class``;
- ``vcebench.workflow`` (the networks each rule needs), ``vcebench.protocol.noise`` (the noise rule of a method);
- ``metrics.build_metrics`` / ``metric_names`` / ``required_roles`` (which metrics a task evaluates);
- ``vcebench.report`` (table columns, their directions and labels, method labels, the reference rows);
- ``vcebench.config.load.validate`` (``config/schema.yaml``'s method names, dataset names and dataset sections are
  filled in by :func:`fill_schema`);
- ``vcebench.data`` (a dataset's loader, label names and splits: :func:`get_dataset_spec`).

Plug-ins: another installed package adds a method or a metric through the entry point groups
``vcebench.methods`` / ``vcebench.metrics`` (the entry point's name is the method's or metric's name; its
object a :class:`MethodSpec` / :class:`MetricSpec`, or a module that registers one with the :func:`method` /
:func:`metric` decorator when imported). Plug-ins are loaded on the first question about the registry
(:func:`load_plugins`); a plug-in whose name clashes with a built-in or another plug-in is a
:class:`RegistryError` naming both.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable, Iterable
from typing import Any

from .builtin_specs import BUILTIN_DATASETS, BUILTIN_METHODS, BUILTIN_METRICS
from .specs import (
    COST_COLUMNS,
    EXTERNAL_PREFIX,
    METRIC_INPUTS,
    MODEL_ROLES,
    NOISE_KINDS,
    PROTOCOL_COLUMNS,
    TASK_KINDS,
    DatasetSpec,
    MethodSpec,
    MetricSpec,
    RegistryError,
    check_dataset,
    check_method,
    check_metric,
    method_spec,
    metric_spec,
)

# What the rest of the code and the plug-ins read from here (the specs and the built-ins are declared in
# vcebench.registry.specs and vcebench.registry.builtin_specs).
__all__ = ["BUILTIN_DATASETS", "BUILTIN_METHODS", "BUILTIN_METRICS", "COST_COLUMNS", "DATASETS", "DATASET_SPECS",
           "EXTERNAL_PREFIX", "METRIC_INPUTS", "MODEL_ROLES", "NOISE_KINDS", "PROTOCOL_COLUMNS", "TASK_KINDS",
           "DatasetSpec", "MethodSpec", "MetricSpec", "RegistryError", "attack_methods", "baseline_methods",
           "builtin_method_names", "column_directions", "column_labels", "eval_roles", "fill_schema",
           "get_dataset_spec", "get_method_spec", "get_metric_spec", "load_plugins", "method", "method_names",
           "method_noise", "method_spec", "methods", "metric", "metric_names", "metric_roles", "metric_spec",
           "metrics", "register_method", "register_metric", "table_columns", "truth_methods", "unranked_columns"]

METHOD_GROUP = "vcebench.methods"
METRIC_GROUP = "vcebench.metrics"

_METHODS: dict[str, MethodSpec] = {s.name: s for s in BUILTIN_METHODS}
for _d in BUILTIN_DATASETS:
    check_dataset(_d)
DATASET_SPECS: dict[str, DatasetSpec] = {s.name: s for s in BUILTIN_DATASETS}
# name -> (task kind, synthetic)
DATASETS: dict[str, tuple[str, bool]] = {n: (s.kind, s.synthetic) for n, s in DATASET_SPECS.items()}
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
    check_method(spec)
    _check_new_name("method", _METHODS, spec)
    _METHODS[spec.name] = spec
    return spec


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Add a metric (a plug-in's); its name and its columns must be new."""
    check_metric(spec)
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
           noise: str | None = None, truth: bool = False, attack: bool = False,
           **factory_kwargs: Any) -> Callable[[Any], Any]:
    """Decorator registering a method factory (a class or function ``(name, params) -> Method``)::

        @registry.method("mine", "Mine", roles=("classifier",), params=MineParams)
        class Mine: ...
    """
    def deco(factory: Any) -> Any:
        spec = register_method(method_spec(name, label, roles=roles, params=params, factory=factory,
                                           baseline=baseline, noise=noise, truth=truth, attack=attack,
                                           **factory_kwargs))
        _DECORATED.setdefault(spec.source, []).append(spec)
        return factory
    return deco


def metric(name: str, *, columns: dict[str, bool | None], roles: Iterable[str] = (),
           kinds: Iterable[str] = TASK_KINDS, synthetic_only: bool = False, labels: dict[str, str] | None = None,
           inputs: Iterable[str] = ()) -> Callable[[Any], Any]:
    """Decorator registering a metric factory ``(ctx: metrics.builders.MetricContext) -> Metric``; ``inputs``:
    what else it needs (``METRIC_INPUTS``: the FID reference, the training labels, the true counterfactuals)."""
    def deco(factory: Any) -> Any:
        spec = register_metric(metric_spec(name, columns=columns, factory=factory, roles=roles, kinds=kinds,
                                           synthetic_only=synthetic_only, labels=labels, inputs=inputs))
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
    """The registered method ``base`` (a base name; ``vcebench.config.tasks.split_method`` parses variants)."""
    table = methods()
    if base not in table:
        raise RegistryError(f"unknown method {base!r}; known: {', '.join(table)}")
    return table[base]


def baseline_methods() -> tuple[str, ...]:
    """The reference rows (never tuned, ranked or put on a Pareto front), e.g. ``input``."""
    return tuple(n for n, s in methods().items() if s.baseline)


def truth_methods() -> tuple[str, ...]:
    """The reference rows that return the synthetic renderer's true counterfactual (``MethodSpec.truth``)."""
    return tuple(n for n, s in methods().items() if s.truth)


def get_dataset_spec(name: str) -> DatasetSpec:
    """The declared dataset ``name`` (:data:`DATASET_SPECS`)."""
    if name not in DATASET_SPECS:
        raise RegistryError(f"unknown dataset {name!r}; known: {', '.join(DATASET_SPECS)}")
    return DATASET_SPECS[name]


def attack_methods() -> tuple[str, ...]:
    """The ranked methods that are no counterfactual (``MethodSpec.attack``), e.g. ``pixel``."""
    return tuple(n for n, s in methods().items() if s.attack)


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
    ``external_<name>``. The file itself names no method (a test checks), so a plug-in's name validates. The
    declared datasets likewise: ``definitions.dataset_name`` (a task's ``dataset``) and the sections of
    ``datasets`` (each :class:`DatasetSpec`'s ``config``)."""
    defs = schema.get("definitions") or {}
    missing = [k for k in ("base_method", "method_name") if k not in defs]
    if missing:
        raise RegistryError(f"the config schema has no definitions {missing} to fill with the registry's methods")
    names = method_names()
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    out = dict(schema)
    out["definitions"] = {**defs, "base_method": {**defs["base_method"], "enum": list(names)},
                          "method_name": {**defs["method_name"],
                                          "pattern": f"^({alt})(_[A-Za-z0-9_]+)?$|^{EXTERNAL_PREFIX}[A-Za-z0-9_]+$"},
                          "dataset_name": {**(defs.get("dataset_name") or {}), "enum": list(DATASET_SPECS)}}
    props = dict(out.get("properties") or {})
    if "datasets" in props:  # each dataset's section: its declared keys, nothing else
        props["datasets"] = {**props["datasets"], "properties": {
            n: {"type": "object", "additionalProperties": False, "properties": d.config, "required": list(d.config)}
            for n, d in DATASET_SPECS.items()}}
        out["properties"] = props
    return out
