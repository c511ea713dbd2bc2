"""Method and model settings checked when the config is loaded, against the types the code runs with.

The JSON schema (``config/schema.yaml``) leaves ``method_defaults``, ``variants``, the tasks'
``params`` and the ``models`` blocks free-form; their keys and types are defined by the code:

- methods: the hyperparameter dataclass of each method (``methods.params_class``, parsed by
  ``methods.params.parse_params``), including its ``validate`` ranges;
- trained synthetic roles: the code defaults (``vcebench.models.synthetic.settings.RECIPE_DEFAULTS``; a setting's
  type is its default's type);
- ``ddpm`` / ``pmf``: ``DDPM_SETTINGS`` / ``PMF_SETTINGS`` / ``UNET_SETTINGS`` (key -> type,
  ``vcebench.models.generative.settings``);
- canonical weights (``weights:``): ``vcebench.models.released.formats.check_spec`` (the format's keys and checks).

Every table read here is torch-free (as are the methods' dataclasses, ``methods.params``): the check runs in every
``snakemake`` call and starts no torch.

:func:`check_settings` runs in the Snakefile (``snakemake -n`` fails before any job runs) and in
every CLI verb that runs a method or a network (:func:`load_settings`). A bad key, type or range is a
:class:`~vcebench.config.load.ConfigError` naming the config key. Numbers written as strings (``lr: 6e-3``
is a string to YAML 1.1, ``steps: "150"``) are converted in the config dict, so every consumer sees
the number.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from ..config.load import ConfigError, check_keys, coerce_value, field_types, load_config
from ..config.tasks import all_methods, check_runs_on, external_name, get_task, runs_on
from .noise import NOISE_RULES, PROTOCOL_BOUNDS, PROTOCOL_SETTINGS, RESPACING_RULES, RETRY_RULES

# Ranges of model settings (keys and types come from the code, see the module docstring).
POSITIVE = {"steps", "batch", "batch_size", "lr", "num_train_timesteps", "sample_steps", "n_samples",
            "eval_images", "checkpoint_every", "width", "blocks", "embed_dim", "dim", "pred_dim",
            "layers_per_block", "norm_num_groups", "fool_n", "time_scale", "sigma_data", "fd_eps"}
NON_NEGATIVE = {"warmup_steps", "weight_decay", "grad_clip", "noise", "blur", "shift", "dropout", "adv_eps",
                "adv_steps", "fool_steps", "t_std", "t_clip", "adaptive_eps", "seed", "max_blur", "max_noise",
                "fm_warmup_steps"}
UNIT_INTERVAL = {"ema_decay", "fm_warmup", "decay_fraction", "p_fm", "p_r0", "p_t1", "p_t_uniform", "adv_frac",
                 "adv_start", "min_scale", "jitter", "beta_start", "beta_end"}


def load_settings(paths: list[str | Path] | None = None, overrides: dict | None = None,
                  only: tuple[str, str | None] | None = None) -> dict:
    """:func:`vcebench.config.load.load_config` followed by :func:`check_settings` (what the CLI verbs use)."""
    return check_settings(load_config(paths, overrides), only)


def check_settings(cfg: dict, only: tuple[str, str | None] | None = None) -> dict:
    """Check (and coerce, in place) every method and model setting of ``cfg``; returns ``cfg``.

    ``only=(task, method)``: the method settings checked are those ``method`` merges on ``task`` (the config
    keys of :func:`vcebench.config.tasks.method_layers`; none with method ``None`` or an imported ``external_<name>``,
    which vcebench does not run), which is what one job runs; a workflow job gets it, since the Snakefile has
    checked the whole config when it built the DAG. Resolving every task x method takes about a second and
    imports every method's module, once per job.
    """
    # the keys and types of every section first, the resolution of every task x method (the slow part) last
    if only is None:
        check_method_layers(cfg)
    elif only[1] is not None and not external_name(only[1]):
        check_one_method(cfg, *only)
    check_task_attributes(cfg, None if only is None else [only[0]])
    check_model_settings(cfg)
    if only is None:
        check_resolved_methods(cfg)
    return cfg


def check_task_attributes(cfg: dict, names: list[str] | None = None) -> None:
    """The ``attribute`` of each task (``names``, default all) is a label of its dataset
    (its declaration's ``attributes``): a wrong one fails when the config is loaded, not when explain starts."""
    from .. import registry

    for name in names if names is not None else cfg.get("tasks") or {}:
        task = get_task(cfg, name)
        task.kind  # noqa: B018 (checks the dataset's name)
        known = list(registry.get_dataset_spec(task.dataset).attributes)
        if task.attribute not in known:
            import difflib

            close = difflib.get_close_matches(task.attribute, known, n=1)
            raise ConfigError(f"config key `tasks.{name}.attribute`: dataset {task.dataset!r} has no attribute "
                              f"{task.attribute!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; known: {', '.join(known)}")


# ----------------------------------------------------------------------------- methods

# The keys of a method's own ``protocol`` mapping (over config ``protocol`` for that method, e.g. a ``paper``
# variant's ``{noise: paper, use_tuned: false}``), with their types: the noise rule, the resolution its paper
# noise level is given at, whether the tuned settings are read.
METHOD_PROTOCOL_SETTINGS = {"noise": Literal[NOISE_RULES], "reference_resolution": int, "use_tuned": bool,
                            "retries": Literal[RETRY_RULES], "respacing": Literal[RESPACING_RULES]}


def _typed_layer(section: str, layer: Any, cls: type) -> None:
    """Keys and types of one config mapping of hyperparameters of dataclass ``cls`` (coerced in place); the
    protocol keys (:data:`PROTOCOL_SETTINGS`, and a per-method ``protocol`` mapping) are admitted too."""
    if not isinstance(layer, dict):
        raise ConfigError(f"config key `{section}` must be a mapping of hyperparameters, got {layer!r}")
    hints = {**field_types(cls), **PROTOCOL_SETTINGS}
    bounds = {**getattr(cls, "BOUNDS", {}), **PROTOCOL_BOUNDS}
    check_keys(section, layer, {f.name for f in dataclasses.fields(cls)} | set(PROTOCOL_SETTINGS) | {"protocol"})
    for k, v in layer.items():
        if k == "protocol":
            _typed_protocol(f"{section}.protocol", v)
            continue
        value = coerce_value(v, hints[k], f"{section}.{k}")
        if k in bounds:  # each layer: a layer merged over it (a tuned file) must not hide an insane value
            bounds[k].check(f"{section}.{k}", value)
        layer[k] = _write_back(v, value)


def _typed_protocol(section: str, layer: Any) -> None:
    """A method's ``protocol`` mapping: its keys and types (:data:`METHOD_PROTOCOL_SETTINGS`), coerced in place."""
    if not isinstance(layer, dict):
        raise ConfigError(f"config key `{section}` must be a mapping, got {layer!r}")
    check_keys(section, layer, METHOD_PROTOCOL_SETTINGS)
    for k, v in layer.items():
        value = coerce_value(v, METHOD_PROTOCOL_SETTINGS[k], f"{section}.{k}")
        if k == "reference_resolution" and value < 1:
            raise ConfigError(f"config key `{section}.{k}` must be >= 1, got {v!r}")
        layer[k] = _write_back(v, value)


def _write_back(old: Any, new: Any) -> Any:
    """The value kept in the config: the coerced one only where a number was written as a string, so
    the settings of a valid config (and the workflow's rerun triggers) stay byte-identical."""
    if isinstance(old, str) and not isinstance(new, str):
        return new
    if isinstance(old, list) and isinstance(new, tuple):
        return [_write_back(o, n) for o, n in zip(old, new)]
    return old


def check_method_layers(cfg: dict) -> None:
    """``method_defaults``, ``variants`` and every task's ``params``: keys and
    types checked in the section where they are written (coerced in place); their merge on each task is
    :func:`check_resolved_methods`."""
    from methods import params_class

    known = all_methods(cfg)
    for base, layer in (cfg.get("method_defaults") or {}).items():
        _typed_layer(f"method_defaults.{base}", layer, params_class(base))
    for base, variants in (cfg.get("variants") or {}).items():
        for variant, layer in (variants or {}).items():
            _typed_layer(f"variants.{base}.{variant}", layer or {}, params_class(base))
    for tname, t in (cfg.get("tasks") or {}).items():
        for m, layer in ((t or {}).get("params") or {}).items():
            if m not in known:
                raise ConfigError(f"config key `tasks.{tname}.params.{m}`: no method {m!r} (config keys "
                                  f"`method_defaults` and `variants`); known: {', '.join(known)}")
            check_runs_on(get_task(cfg, tname), m, f"config key `tasks.{tname}.params.{m}`")
            _typed_layer(f"tasks.{tname}.params.{m}", layer, params_class(m))


def check_resolved_methods(cfg: dict) -> None:
    """Each task's settings of every method it runs, resolved by the noise protocol, parsed by the method's
    dataclass (its ``validate`` ranges); a range error names the config key that set the value."""
    known = all_methods(cfg)
    for tname in cfg.get("tasks") or {}:
        task = get_task(cfg, tname)
        for m in known:
            if runs_on(task, m):
                _parse_resolved(cfg, task, m)


def _parse_resolved(cfg: dict, task, method: str) -> None:
    """``method``'s protocol-resolved settings on ``task`` parsed by its dataclass (its ranges); a range error
    names the config key that set the value."""
    from methods import params_class
    from methods.params import parse_params

    from .noise import resolve_method

    try:
        params, record = resolve_method(cfg, task, method)
        parse_params(params_class(method), params, section=f"{method} of task {task.name}",
                     image_size=record["resolution"])
    except ConfigError as e:
        raise ConfigError(_name_source(cfg, task, method, str(e))) from None


def check_one_method(cfg: dict, task_name: str, method: str) -> None:
    """:func:`check_method_layers` and :func:`check_resolved_methods` for ``method`` on ``task_name`` alone: the
    config layers it merges (keys and types, coerced in place), then its protocol-resolved settings parsed by its
    dataclass."""
    from methods import params_class

    from ..config.tasks import split_method

    task = get_task(cfg, task_name)
    check_runs_on(task, method)
    base, variant = split_method(method)
    params = (cfg["tasks"][task_name] or {}).get("params") or {}
    layers = [(f"method_defaults.{base}", (cfg.get("method_defaults") or {}).get(base))]
    if variant is not None:
        layers.append((f"variants.{base}.{variant}", ((cfg.get("variants") or {}).get(base) or {}).get(variant)))
    layers += [(f"tasks.{task_name}.params.{m}", params.get(m)) for m in dict.fromkeys((base, method))]
    for section, layer in layers:
        if layer is not None:
            _typed_layer(section, layer, params_class(base))
    _parse_resolved(cfg, task, method)


def _name_source(cfg: dict, task, method: str, msg: str) -> str:
    """A range error of the merged settings of ``method`` on ``task``, with the config key that set the
    offending value (the last layer of :func:`vcebench.config.tasks.method_layers` that holds it)."""
    import re

    from ..config.tasks import method_layers

    source = {k: f"{where}.{k}" for where, layer in method_layers(cfg, task, method) for k in (layer or {})}
    detail = msg.split("`: ", 1)[-1]
    named = [k for k in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", detail) if k in source]
    where = f"config key `{source[named[0]]}`" if named else f"method {method!r} of task {task.name!r}"
    return f"{where} (method {method}, task {task.name}): {detail}"


# ----------------------------------------------------------------------------- models

def _type_of_default(v: Any) -> Any:
    if isinstance(v, bool):
        return bool
    if isinstance(v, int):
        return int
    if isinstance(v, float):
        return float
    if isinstance(v, (list, tuple)) and v and all(isinstance(i, (int, float)) and not isinstance(i, bool)
                                                  for i in v):
        return tuple[float, ...]
    return Any  # strings with several meanings (`attributes`: null | all | list), None


def _check_range(key: str, value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if key in POSITIVE and not value > 0:
        raise ConfigError(f"config key `{where}` must be > 0, got {value!r}")
    if key in NON_NEGATIVE and not value >= 0:
        raise ConfigError(f"config key `{where}` must be >= 0, got {value!r}")
    if key in UNIT_INTERVAL and not 0 <= value <= 1:
        raise ConfigError(f"config key `{where}` must be in [0, 1], got {value!r}")


def _typed_settings(section: str, spec: dict, types: dict[str, Any], strict_keys: bool = True) -> None:
    if strict_keys:
        check_keys(section, spec, types)
    for k, v in spec.items():
        if k not in types:
            continue
        value = coerce_value(v, types[k], f"{section}.{k}")
        _check_range(k, value, f"{section}.{k}")
        spec[k] = _write_back(v, value)


def role_setting_types(role: str) -> dict[str, Any] | None:
    """Key -> type of the training settings of a trained role (None: not a trainable role): its default's type,
    or the choices of a setting that names one (``synthetic.settings.SETTING_CHOICES``)."""
    from ..models.generative.settings import DDPM_SETTINGS, PMF_SETTINGS
    from ..models.synthetic.settings import RECIPE_DEFAULTS, SETTING_CHOICES

    if role == "ddpm":
        return DDPM_SETTINGS
    if role == "pmf":
        return PMF_SETTINGS
    if role in RECIPE_DEFAULTS:
        return {k: Literal[SETTING_CHOICES[k]] if k in SETTING_CHOICES else _type_of_default(v)
                for k, v in RECIPE_DEFAULTS[role].items()}
    return None


def check_model_settings(cfg: dict) -> None:
    """Every ``models.<dataset>.<role>`` block: training settings (keys, types, ranges) or canonical
    weights (``formats.check_spec``)."""
    from ..models.generative.settings import UNET_SETTINGS
    from ..models.released.formats import check_spec, is_canonical
    from ..registry.roles import ROLES

    for ds, roles in (cfg.get("models") or {}).items():
        for role, spec in (roles or {}).items():
            section = f"models.{ds}.{role}"
            if role not in ROLES:
                raise ConfigError(f"config key `{section}`: unknown model role {role!r}; known: {', '.join(ROLES)}")
            if spec is None:
                continue
            if not isinstance(spec, dict):
                raise ConfigError(f"config key `{section}` must be a mapping, got {spec!r}")
            types = role_setting_types(role)
            if "weights" in spec:  # canonical weights: the format's keys (generative folders: their own too)
                if is_canonical(role, spec):
                    check_spec(role, spec, section)
                else:  # a ddpm / pmf folder: its path, and the training settings it may hold
                    _typed_settings(section, spec, {**(types or {}), "weights": str | None}, strict_keys=False)
                continue
            if types is None:
                raise ConfigError(f"config key `{section}`: role {role!r} cannot be trained; set "
                                  f"`{section}.weights` to canonical weights")
            _typed_settings(section, spec, types)
            _check_attributes(cfg, ds, section, spec)
            if isinstance(spec.get("unet"), dict):
                _typed_settings(f"{section}.unet", spec["unet"], UNET_SETTINGS)
            _check_resolution(cfg, ds, role, spec)
            if role == "pmf" and "steps" in spec:
                _check_fm_warmup(section, spec)


def _check_attributes(cfg: dict, ds: str, section: str, spec: dict) -> None:
    """A trained role's ``attributes`` as its training reads them (``synthetic.settings.resolve_attributes``): null (the
    query attributes of the dataset's tasks), ``all``, or a list of the dataset's labels; a wrong one changes the
    role's recipe, so it must fail here, not when the network is trained."""
    from .. import registry
    from ..models.synthetic.settings import resolve_attributes

    if "attributes" not in spec or spec["attributes"] is None or ds not in registry.DATASET_SPECS:
        return
    tasks = [t.get("attribute") for t in (cfg.get("tasks") or {}).values() if (t or {}).get("dataset") == ds]
    resolve_attributes(spec["attributes"], list(registry.get_dataset_spec(ds).attributes), tasks,
                       f"{section}.attributes")


def _check_fm_warmup(section: str, spec: dict) -> None:
    """The pmf's flow-matching warm start leaves MeanFlow steps (``generative.settings.flow_matching_steps``): a
    preset that lowers ``steps`` below an inherited ``fm_warmup_steps`` fails when the config is loaded, not after
    training."""
    from ..models.generative.settings import PMF_DEFAULTS, flow_matching_steps
    from ..models.training.settings import RoleConfigError

    try:
        flow_matching_steps({**PMF_DEFAULTS, **spec}, int(spec["steps"]))
    except RoleConfigError as e:
        raise ConfigError(f"config key `{section}`: {e}") from None


def _check_resolution(cfg: dict, ds: str, role: str, spec: dict) -> None:
    """A trained network of ``ds`` takes its images' size: ``datasets.<ds>.resolution`` is a multiple of what it
    downsamples by (the ddpm / pmf UNet: 2 per level; the perceptual autoencoder: 4), or training would stop
    after the data is rendered."""
    from ..models.generative.settings import unet_downsampling
    from ..models.synthetic.settings import AUTOENCODER_DOWNSAMPLING

    resolution = ((cfg.get("datasets") or {}).get(ds) or {}).get("resolution")
    if role in ("ddpm", "pmf") and (spec.get("unet") or {}).get("block_out_channels"):
        boc = spec["unet"]["block_out_channels"]
        factor, why = unet_downsampling(boc), f"`models.{ds}.{role}.unet.block_out_channels` has {len(boc)} levels"
    elif role == "perceptual":
        factor, why = AUTOENCODER_DOWNSAMPLING, f"the `models.{ds}.perceptual` autoencoder downsamples by it"
    else:
        return
    if isinstance(resolution, int) and resolution % factor:
        raise ConfigError(f"config key `datasets.{ds}.resolution` ({resolution}) must be a multiple of {factor}: "
                          f"{why} (e.g. {resolution + factor - resolution % factor})")
