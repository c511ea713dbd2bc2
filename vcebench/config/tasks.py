"""A task = dataset + query attribute + the networks and hyperparameters it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import registry
from ..core.errors import ConfigError
from ..core.merge import merge_into

# the datasets of vcebench.registry.DATASETS, by what they are
SYNTHETIC_DATASETS = tuple(d for d, (_, synthetic) in registry.DATASETS.items() if synthetic)
REAL_DATASETS = tuple(d for d, (_, synthetic) in registry.DATASETS.items() if not synthetic)


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
        """``faces`` (ACE protocol metrics) or ``xray`` (FastDiME medical protocol): ``registry.DATASETS``."""
        if self.dataset not in registry.DATASETS:
            raise ConfigError(f"task {self.name!r}: unknown dataset {self.dataset!r}; known: "
                              f"{', '.join(registry.DATASETS)}")
        return registry.DATASETS[self.dataset][0]


def get_task(cfg: dict, name: str) -> Task:
    tasks = cfg.get("tasks", {})
    if name not in tasks:
        raise ConfigError(f"unknown task {name!r} (config key `tasks`); known: {', '.join(sorted(tasks))}")
    t = tasks[name]
    return Task(name=name, dataset=t["dataset"], attribute=t["attribute"], params=t.get("params", {}) or {})


def task_for_dataset(cfg: dict, dataset: str) -> str:
    """The first task of config ``tasks`` on ``dataset`` (models are per dataset; `vcebench train` takes a task)."""
    for name, t in cfg["tasks"].items():
        if t["dataset"] == dataset:
            return name
    raise ConfigError(f"no task in config key `tasks` uses dataset {dataset!r}")


def split_method(name: str) -> tuple[str, str | None]:
    """``<method>`` -> (method, None); ``<method>_<variant>`` -> (method, variant).

    The base method is the LONGEST registered method name (``vcebench.registry``, plug-ins included) that
    ``name`` equals or starts with followed by ``_`` (``fastdime2plus_paper`` -> ``fastdime2plus``,
    ``fastdime2_paper`` -> ``fastdime2``). Any other name is ``<method>_<variant>``: a variant of one of
    them (config key `variants.<method>.<variant>`). The one place method names are parsed; whether the
    variant exists in the config is checked by :func:`method_params`.
    """
    names = registry.method_names()
    for base in sorted(names, key=len, reverse=True):
        if name == base:
            return base, None
        if name.startswith(base + "_") and len(name) > len(base) + 1:
            return base, name[len(base) + 1:]
    raise ConfigError(f"unknown method {name!r}; known: {', '.join(names)}, or <method>_<variant> "
                      f"with a variant of config key `variants.<method>`")


def external_name(method: str) -> str | None:
    """``external_<name>`` -> ``<name>`` (counterfactuals imported by `vcebench import`, config key
    ``external.<name>`` in the workflow), else None. vcebench runs no method for such a name: it has no
    settings, only counterfactuals to score."""
    prefix = registry.EXTERNAL_PREFIX
    return method[len(prefix):] if method.startswith(prefix) and len(method) > len(prefix) else None


def _base_in(name: str, bases: tuple[str, ...]) -> bool:
    """Whether the base method of ``name`` is one of ``bases`` (a name that is no method's: False)."""
    try:
        return split_method(name)[0] in bases
    except ConfigError:
        return False


def is_baseline(name: str) -> bool:
    """A reference row (``registry.MethodSpec.baseline``, e.g. ``input`` and its variants): evaluated like
    every method, never tuned, ranked or put on a Pareto front. Imported results are no baseline."""
    return _base_in(name, registry.baseline_methods())


def is_attack(name: str) -> bool:
    """A ranked method that is known to be no counterfactual (``registry.MethodSpec.attack``, e.g.
    ``pixel_attack``): the table's footer says how each metric column treats it."""
    return _base_in(name, registry.attack_methods())


def is_truth(name: str) -> bool:
    """A row that returns the synthetic renderer's true counterfactual (``registry.MethodSpec.truth``, e.g.
    ``truth``): a reference row that exists on synthetic tasks only."""
    return _base_in(name, registry.truth_methods())


def runs_on(task: Task, method: str) -> bool:
    """Whether ``method`` exists on ``task``: a truth row needs a synthetic dataset's renderer."""
    return task.synthetic or not is_truth(method)


def check_runs_on(task: Task, method: str, where: str = "") -> None:
    """A one-line ConfigError where ``method`` does not exist on ``task`` (:func:`runs_on`); ``where``: the
    config key that asked for it."""
    if not runs_on(task, method):
        raise ConfigError(f"{where + ': ' if where else ''}method {method!r} returns the renderer's true "
                          f"counterfactual, which only a synthetic dataset has ({', '.join(SYNTHETIC_DATASETS)}); "
                          f"task {task.name!r} is on {task.dataset!r}: drop {method!r} there")


def task_methods(cfg: dict, task_name: str, methods: list[str]) -> list[str]:
    """The rows of ``task_name`` among ``methods`` (config `methods`): those that exist on it (:func:`runs_on`;
    a real task has no truth row)."""
    task = get_task(cfg, task_name)
    return [m for m in methods if str(m).startswith(registry.EXTERNAL_PREFIX) or runs_on(task, m)]


def method_variants(cfg: dict) -> dict[str, dict[str, dict[str, Any]]]:
    """``{method: {variant: overrides}}`` of config key ``variants``."""
    return {base: dict(vs or {}) for base, vs in (cfg.get("variants") or {}).items()}


def method_layers(cfg: dict, task: Task, method: str,
                  candidate: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The hyperparameter layers of ``method`` on ``task``, in merge order, each named by its config key:
    ``method_defaults.<m>``, ``tasks.<task>.params.<m>``, the tuned settings (``config/tuned/<task>.yaml``,
    when ``protocol.use_tuned`` is on and the variant does not turn it off), ``variants.<m>.<v>``,
    ``tasks.<task>.params.<m>_<v>``. ``candidate`` (a `vcebench tune` setting) takes the tuned layer's place."""
    defaults = cfg.get("method_defaults", {})
    base, variant = split_method(method)
    if base not in defaults:
        raise ConfigError(f"method {method!r}: no defaults for {base!r} (config key `method_defaults.{base}`)")
    layers = [(f"method_defaults.{base}", dict(defaults[base])),
              (f"tasks.{task.name}.params.{base}", task.params.get(base) or {})]
    on_top: list[tuple[str, dict[str, Any]]] = []
    if variant is not None:
        variants = method_variants(cfg).get(base, {})
        if variant not in variants:
            raise ConfigError(f"unknown variant {method!r} (config key `variants.{base}.{variant}`); "
                              f"known: {', '.join(base + '_' + v for v in sorted(variants)) or 'none'}")
        on_top = [(f"variants.{base}.{variant}", variants[variant] or {}),
                  (f"tasks.{task.name}.params.{method}", task.params.get(method) or {})]
    use_tuned = bool(cfg["protocol"]["use_tuned"])
    for _, over in layers + on_top:
        use_tuned = bool((over.get("protocol") or {}).get("use_tuned", use_tuned))
    tuned = ((cfg.get("tuned") or {}).get(task.name) or {})
    if candidate is not None:
        layers.append(("tune:candidate", dict(candidate)))
    elif use_tuned and base in (tuned.get("settings") or {}):
        layers.append((f"tuned:{tuned['file']}", tuned["settings"][base]))
    # the tuned layer stays when it is empty: the tuning picked the untuned setting, and the row is still tuned
    return [(name, over) for name, over in layers + on_top if over or name.startswith("tuned:")]


def method_params(cfg: dict, task: Task, method: str, candidate: dict[str, Any] | None = None) -> dict[str, Any]:
    """The merged hyperparameters of ``method`` on ``task`` (:func:`method_layers`, later wins).

    ``<method>_<variant>`` is the task's ``<method>`` with ``variants.<method>.<variant>`` applied on top (an
    ablation changes one thing of the configured method: ``fire_K5`` keeps the task's t and masks). The
    result still holds the protocol keys (noise rule, log-SNR offset, ...) that
    ``vcebench.protocol.noise.resolve_method`` turns into the method's own parameters.
    """
    params: dict[str, Any] = {}
    for _, over in method_layers(cfg, task, method, candidate):
        merge_into(params, over)
    return params


def all_methods(cfg: dict) -> list[str]:
    """Every method name the config defines: the base methods, then each variant ``<method>_<variant>``."""
    names = list(cfg.get("method_defaults", {}))
    for base, vs in method_variants(cfg).items():
        names += [f"{base}_{v}" for v in vs]
    return names


def check_method_names(cfg: dict) -> None:
    """Every name in config keys ``methods`` and ``paper_methods`` is a base method with defaults or a defined
    variant, and exists on every task of ``run_tasks`` (:func:`runs_on`: no truth row with a real task)."""
    known = set(all_methods(cfg))
    registered = registry.method_names()
    for key in ("methods", "paper_methods"):
        # external_<name>: imported results, checked against config `external` by vcebench.workflow
        bad = [m for m in cfg.get(key) or [] if m not in known and not external_name(str(m))]
        no_defaults = [m for m in bad if m in registered]
        if no_defaults:
            raise ConfigError(f"config key `{key}`: method(s) {no_defaults} have no defaults; add "
                              f"`method_defaults.{no_defaults[0]}` (`{{}}`: the dataclass defaults)")
        if bad:
            raise ConfigError(f"config key `{key}`: unknown method(s) {bad}; known: {', '.join(registered)}; "
                              f"a variant <method>_<variant> needs `variants.<method>.<variant>`")
        for m in cfg.get(key) or []:
            for t in cfg.get("run_tasks") or []:
                check_runs_on(get_task(cfg, t), m, f"config keys `{key}` and `run_tasks`")


def method_roles(method: str) -> tuple[str, ...]:
    """Networks the explain step of ``method`` needs (``registry.MethodSpec.roles`` of its base method)."""
    if external_name(method):
        return ("classifier",)  # `vcebench import` classifies the inputs and the imported CFs
    return registry.get_method_spec(split_method(method)[0]).roles


def pareto_n_eval(cfg) -> int | None:
    """Inputs per Pareto point (config `pareto.n_eval`); None when that is unset or not below the table's
    `n_eval` (the Pareto points then run on the table's inputs and the default points are the table rows)."""
    n = (cfg.get("pareto") or {}).get("n_eval")
    return None if n is None or int(n) >= int(cfg["n_eval"]) else int(n)


def pareto_methods(cfg) -> list[tuple[str, str, str]]:
    """(method name, base method, sweep) of the `pareto` target: each swept method's default row, then its
    budget variants and its starting-SNR variants (config `pareto`)."""
    pc = cfg.get("pareto") or {}
    out: list[tuple[str, str, str]] = []
    for sweep in ("budgets", "snr"):
        for base, variants in (pc.get(sweep) or {}).items():
            # with its own n (`pareto.n_eval`), the default point is the variant `<base>_base` (no overrides),
            # run on the same inputs as the other points rather than the table row's n_eval
            default = base if pareto_n_eval(cfg) is None else f"{base}_base"
            if (default, base, "default") not in out:
                out.append((default, base, "default"))
            out += [(f"{base}_{v}", base, "budget" if sweep == "budgets" else "snr") for v in variants]
    return out
