"""The released formats' config blocks (``models.<dataset>.<role>`` with ``weights`` and ``format``): the roles each
format serves, its keys and their types, the checks of a block that read no file (:func:`check_spec`), and which
blocks are released weights at all (:func:`is_canonical`). The formats themselves: ``canonical.py``'s docstring.

Torch-free on purpose: the config check that runs when the workflow builds its DAG checks every block
(``vcebench.protocol.settings``) and would otherwise start torch (seconds) in every ``snakemake`` call. The
loaders, next to their networks: ``canonical.LOADERS`` (format -> loader) and ``torch_module.load_torch_module``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ...config.load import ConfigError, check_keys, coerce_value
from ...core.errors import CheckpointError
from ...registry.roles import HEAD_KINDS
from ..generative.settings import DIFFUSERS_FORMAT
from .guided_flags import CONFIG_FLAG_KEYS, guided_flags

LPIPS_NETS = ("vgg", "alex")  # the lpips format's backbones (`net`)
# The keys every canonical block may hold, with their types (checked when the config is loaded, whether or not the
# run uses the block): `weights` a path (null: not set yet; whether it exists is checked when a task needs it).
SPEC_TYPES: dict[str, Any] = {"weights": str | None, "format": str, "head": Literal[HEAD_KINDS], "num_outputs": int,
                              "index": int | None, "attribute_names": tuple[str, ...] | None,
                              "net": Literal[LPIPS_NETS], "name": str | None}
SPEC_KEYS = set(SPEC_TYPES)
# What a canonical block may leave out, per format (merged by load_canonical): DiME's CelebA classifier has 40
# sigmoid logits (``head: 1logit``); LPIPS' default backbone is VGG.
FORMAT_DEFAULTS: dict[str, dict[str, Any]] = {"dime_densenet121": {"head": "1logit"}, "lpips": {"net": "vgg"}}

# ----------------------------------------------------------------------------- torch_module

OUTPUTS = {"classifier": ("logits",), "pmf": ("x", "u"), "ddpm": ("eps",)}
INPUTS = {"pmf": ("z", "t", "r", "h", "y"), "ddpm": ("z", "t", "y")}
ROLE_KEYS = {"classifier": {"head", "index"}, "pmf": {"inputs", "class_label", "time_scale", "const"},
             "ddpm": {"inputs", "class_label", "diffusion_steps", "noise_schedule", "learn_sigma", "const"}}
TORCH_MODULE_KEYS = frozenset({"class", "kwargs", "state_dict", "output"}.union(*ROLE_KEYS.values()))
# What a block may leave out of its role's keys: a 2-logit classifier (column 0 of a 1-logit one); t, r and h
# unscaled (a ddpm's t always: time_scale is not one of its keys); guided-diffusion's linear schedule, no learned
# sigma.
TORCH_MODULE_DEFAULTS: dict[str, Any] = {"head": "2logit", "index": 0, "time_scale": 1.0, "noise_schedule": "linear",
                                         "learn_sigma": False}


def check_torch_module(role: str, spec: dict, key: str) -> None:
    """The block of a ``torch_module`` network, without importing or reading anything: the class path's
    form, the role's keys and its declared call convention. Raises a ConfigError naming the key."""
    cls = spec.get("class")
    if not isinstance(cls, str) or cls.count(":") != 1 or not all(cls.split(":")):
        raise ConfigError(f"config key `{key}.class` must be \"package.module:Name\" (the class that defines the "
                          f"network, importable in this environment), got {cls!r}")
    wrong = sorted((set(spec) & TORCH_MODULE_KEYS) - {"class", "kwargs", "state_dict", "output"} - ROLE_KEYS[role])
    if wrong:
        raise ConfigError(f"config key `{key}.{wrong[0]}` does not apply to a torch_module {role}; its keys: "
                          f"class, kwargs, state_dict, output, {', '.join(sorted(ROLE_KEYS[role]))}")
    if not isinstance(spec.get("kwargs", {}), dict):
        raise ConfigError(f"config key `{key}.kwargs` must be a mapping of constructor arguments, "
                          f"got {spec['kwargs']!r}")
    if spec.get("state_dict") is not None and not isinstance(spec["state_dict"], str):
        raise ConfigError(f"config key `{key}.state_dict` must be the checkpoint key holding the state dict "
                          f"(e.g. ema, model, state_dict) or null (the file is the state dict), "
                          f"got {spec['state_dict']!r}")
    if spec.get("output") not in OUTPUTS[role]:
        raise ConfigError(f"config key `{key}.output` declares what the {role} network returns: one of "
                          f"{', '.join(OUTPUTS[role])}, got {spec.get('output')!r}")
    if role == "classifier":
        head = {**TORCH_MODULE_DEFAULTS, **spec}["head"]
        if head not in ("1logit", "2logit"):
            raise ConfigError(f"config key `{key}.head` must be 1logit or 2logit, got {head!r}")
        return
    const = _check_const(role, spec.get("const", {}), key)
    inputs = spec.get("inputs")
    if (not isinstance(inputs, list) or not inputs or inputs[0] != "z" or len(set(inputs)) != len(inputs)
            or not set(inputs) <= set(INPUTS[role]) | set(const)):
        raise ConfigError(f"config key `{key}.inputs` lists the forward's positional arguments in order: z first, "
                          f"then any of {', '.join(INPUTS[role][1:])} (and of `{key}.const`) once each, "
                          f"got {inputs!r}")
    if ("y" in inputs) != ("class_label" in spec):
        raise ConfigError(f"config key `{key}.class_label` (the label passed as y, e.g. the null class) must be "
                          f"set exactly when `{key}.inputs` has y")
    if "class_label" in spec and (isinstance(spec["class_label"], bool) or not isinstance(spec["class_label"], int)):
        raise ConfigError(f"config key `{key}.class_label` must be an integer, got {spec['class_label']!r}")
    if role == "ddpm" and not isinstance(spec.get("diffusion_steps"), int):
        raise ConfigError(f"config key `{key}.diffusion_steps` (the training schedule's steps) must be set to an "
                          f"integer, got {spec.get('diffusion_steps')!r}")


def _check_const(role: str, const: object, key: str) -> dict:
    """``const``: a mapping of argument names (none of the role's ``inputs``) to numbers."""
    if not isinstance(const, dict):
        raise ConfigError(f"config key `{key}.const` must be a mapping of the forward's constant arguments to "
                          f"numbers (e.g. {{omega: 1.0, t_min: 0.0, t_max: 1.0}}), got {const!r}")
    for name, value in const.items():
        if not isinstance(name, str) or not name.isidentifier() or name in INPUTS[role]:
            raise ConfigError(f"config key `{key}.const` names {name!r}: an argument name other than "
                              f"{', '.join(INPUTS[role])} (those come from the sampler)")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key `{key}.const.{name}` must be a number, got {value!r}")
    return const


# ----------------------------------------------------------------------------- guided_diffusion

def guided_block_flags(role: str, spec: dict, key: str) -> dict[str, Any]:
    """The UNet flags of a ``guided_diffusion`` block: its flag keys and its pasted ``model_flags`` string
    (``guided_flags.guided_flags``); a ConfigError names the config key."""

    text = spec.get("model_flags")
    if text is not None and not isinstance(text, str):
        raise ConfigError(f"config key `{key}.model_flags` must be a string of --flag value pairs (DiME's "
                          f"MODEL_FLAGS), got {text!r}")
    try:
        return guided_flags({k: v for k, v in spec.items() if k in CONFIG_FLAG_KEYS}, text)
    except ValueError as e:
        raise ConfigError(f"config key `{key}{'.model_flags' if text is not None else ''}`: {e}") from None


# ----------------------------------------------------------------------------- the formats

@dataclass(frozen=True)
class Format:
    """One checkpoint layout: the roles it serves, its extra config keys and a check of its block that needs no
    file (``check(role, spec, key)``, run when the config is loaded); its loader: ``canonical.LOADERS``."""

    roles: tuple[str, ...]
    keys: frozenset[str] = frozenset()
    check: Callable[[str, dict, str], Any] | None = None


FORMAT_SPECS: dict[str, Format] = {
    "dime_densenet121": Format(("classifier", "oracle")),
    "ace_oracle_resnet50": Format(("oracle",)),
    "facenet_vggface2": Format(("identity",)),
    "simsiam_official": Format(("simsiam",)),
    "pytorch_fid_inception": Format(("fid_features",)),
    "vgg19_dime": Format(("perceptual",)),
    "lpips": Format(("perceptual",)),
    "guided_diffusion": Format(("ddpm",), CONFIG_FLAG_KEYS | {"model_flags"}, guided_block_flags),
    "fastdime_chexpert": Format(("ddpm",)),
    "torch_module": Format(("classifier", "pmf", "ddpm"), TORCH_MODULE_KEYS, check_torch_module),
}
# role -> its canonical formats
FORMATS: dict[str, tuple[str, ...]] = {role: tuple(f for f, spec in FORMAT_SPECS.items() if role in spec.roles)
                                       for spec in FORMAT_SPECS.values() for role in spec.roles}


def is_canonical(role: str, spec: dict) -> bool:
    """Whether the ``weights`` of a role's block are released weights (``canonical.load_canonical`` reads them;
    not a pmf folder written by vcebench, or a ddpm diffusers folder: ``task_models``' generative loaders)."""
    if role == "pmf":
        return spec.get("format") is not None
    if role == "ddpm":
        return spec.get("format", DIFFUSERS_FORMAT) != DIFFUSERS_FORMAT  # no format: a diffusers folder
    return True


def check_spec(role: str, spec: dict, key: str) -> None:
    """The block of canonical weights of ``role`` at config key ``key``: format, keys, their types
    (:data:`SPEC_TYPES`) and ranges, and the format's own check (run when the config is loaded, and again by
    ``canonical.load_canonical``)."""
    fmt = spec.get("format")
    if fmt not in FORMATS.get(role, ()):
        raise CheckpointError(f"role {role!r}: config key `{key}.format` is {fmt!r}; supported for this role: "
                              f"{', '.join(FORMATS.get(role, ())) or 'none (train it instead)'}")
    check_keys(key, spec, SPEC_KEYS | FORMAT_SPECS[fmt].keys)
    values = {k: coerce_value(v, SPEC_TYPES[k], f"{key}.{k}") for k, v in spec.items() if k in SPEC_TYPES}
    n_out, index = values.get("num_outputs"), values.get("index")
    if n_out is not None and n_out < 1:
        raise ConfigError(f"config key `{key}.num_outputs` must be >= 1, got {n_out!r}")
    if index is not None and not 0 <= index < (n_out or index + 1):
        raise ConfigError(f"config key `{key}.index` must be an output of the network (0 to "
                          f"{'num_outputs - 1' if n_out is None else n_out - 1}), got {index!r}")
    names = values.get("attribute_names")
    if names is not None and len(set(names)) != len(names):
        raise ConfigError(f"config key `{key}.attribute_names` names an output twice: {list(names)}")
    if names is not None and n_out is not None and len(names) != n_out:
        raise ConfigError(f"config key `{key}.attribute_names` names {len(names)} outputs, `{key}.num_outputs` "
                          f"is {n_out}")
    if FORMAT_SPECS[fmt].check is not None:
        FORMAT_SPECS[fmt].check(role, spec, key)
