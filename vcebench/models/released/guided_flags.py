"""guided-diffusion's command-line flags as the released DDPMs state them: the flags of a ``guided_diffusion``
config block (its keys, or a pasted ``model_flags`` string as DiME / ACE / FastDiME / MaskDiME write
``MODEL_FLAGS``), typed as guided-diffusion's argparse types them, checked and resolved into the UNet's
architecture (``guided_unet.GuidedUNet`` builds it).

Torch-free on purpose: the config check that runs when the workflow builds its DAG checks a block's flags
(``formats.check_spec``) and reads its schedule (``schedule.released_schedule``) without starting torch.
"""

from __future__ import annotations

import difflib
import shlex
from typing import Any

# DiME's CelebA flags (test.sh; the image size comes from main.py's --image_size 128).
DIME_CELEBA_FLAGS: dict[str, Any] = {
    "image_size": 128, "in_channels": 3, "num_channels": 128, "num_res_blocks": 2, "channel_mult": "",
    "attention_resolutions": "32,16,8", "num_heads": 4, "num_head_channels": -1, "num_heads_upsample": -1,
    "learn_sigma": True, "use_scale_shift_norm": True, "resblock_updown": True, "dropout": 0.0,
    "use_new_attention_order": False, "use_fp16": False, "diffusion_steps": 500, "noise_schedule": "linear",
}
FLAG_KEYS = frozenset(DIME_CELEBA_FLAGS)
# guided-diffusion's ``script_util.model_and_diffusion_defaults()``: every flag of its command lines, and what a
# pasted flag string (``model_flags``) is merged over, as DiME's / ACE's ``main.py`` do with argparse.
GUIDED_DIFFUSION_DEFAULTS: dict[str, Any] = {
    "image_size": 64, "num_channels": 128, "num_res_blocks": 2, "num_heads": 4, "num_heads_upsample": -1,
    "num_head_channels": -1, "attention_resolutions": "16,8", "channel_mult": "", "dropout": 0.0,
    "class_cond": False, "use_checkpoint": False, "use_scale_shift_norm": True, "resblock_updown": False,
    "use_fp16": False, "use_new_attention_order": False,
    "learn_sigma": False, "diffusion_steps": 1000, "noise_schedule": "linear", "timestep_respacing": "",
    "use_kl": False, "predict_xstart": False, "rescale_timesteps": False, "rescale_learned_sigmas": False,
}
CONFIG_FLAG_KEYS = frozenset(GUIDED_DIFFUSION_DEFAULTS) | FLAG_KEYS  # config keys of format guided_diffusion
# flags with one value this loader can run (eps-prediction of an unconditional UNet on raw timesteps); the
# sampler's step count is each method's `respacing`. use_checkpoint, use_kl and rescale_learned_sigmas only
# change training.
UNSUPPORTED_FLAGS: dict[str, tuple[Any, str]] = {
    "class_cond": (False, "class-conditional guided-diffusion UNets are not supported (DiME, ACE, FastDiME and "
                          "MaskDiME use class_cond False)"),
    "predict_xstart": (False, "only epsilon-prediction models are supported"),
    "rescale_timesteps": (False, "only models trained on raw timesteps are supported"),
    "timestep_respacing": ("", "the sampling step count is a setting of each method: config key "
                               "`method_defaults.<method>.respacing` (DiME's test.sh: 200)"),
}
DEFAULT_CHANNEL_MULT = {512: (0.5, 1, 1, 2, 2, 4, 4), 256: (1, 1, 2, 2, 4, 4), 224: (1, 1, 2, 3, 4),
                        128: (1, 1, 2, 3, 4), 64: (1, 2, 3, 4)}


def _ints(v: Any, name: str) -> tuple[float, ...]:
    if isinstance(v, str):
        return tuple(float(s) for s in v.split(",") if s.strip())
    if isinstance(v, (list, tuple)):
        return tuple(float(s) for s in v)
    raise ValueError(f"guided_diffusion flag {name!r} must be a comma-separated string or a list, got {v!r}")


def _str2bool(v: str) -> bool:
    """guided-diffusion's ``str2bool`` (argparse type of its boolean flags)."""
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if v.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise ValueError(f"boolean value expected, got {v!r}")


def flag_value(name: str, v: Any) -> Any:
    """``v`` typed as guided-diffusion's flag ``name`` (the type of its default, as its argparse does);
    comma lists (attention_resolutions, channel_mult) may also be YAML lists."""
    default = GUIDED_DIFFUSION_DEFAULTS.get(name, DIME_CELEBA_FLAGS.get(name))
    try:
        if isinstance(default, bool):
            if isinstance(v, bool):
                return v
            return _str2bool(str(v))
        if isinstance(default, (int, float)):
            if isinstance(v, bool):
                raise ValueError("a number expected")
            typed = type(default)(v)
            if isinstance(v, float) and isinstance(default, int) and typed != v:
                raise ValueError("an integer expected")
            return typed
    except ValueError as e:
        raise ValueError(f"--{name} {v!r}: {e}") from None
    if isinstance(v, (list, tuple)):
        return ",".join(str(i) for i in v)
    return str(v)


def parse_model_flags(text: str) -> dict[str, Any]:
    """A guided-diffusion flag string as DiME / ACE / MaskDiME / FastDiME write ``MODEL_FLAGS`` (and
    ``DIFFUSION_FLAGS``): ``--name value`` or ``--name=value``, each a flag of guided-diffusion's
    ``model_and_diffusion_defaults``, typed by its default; a repeated flag keeps its last value (argparse)."""
    if not isinstance(text, str):
        raise ValueError(f"`model_flags` must be a string of --flag value pairs, got {text!r}")
    tokens, out, i = shlex.split(text), {}, 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or tok == "--":
            raise ValueError(f"expected a --flag, got {tok!r}")
        name, eq, value = tok[2:].partition("=")
        if not eq:
            if i + 1 == len(tokens) or tokens[i + 1].startswith("--"):
                raise ValueError(f"--{name} has no value")
            i += 1
            value = tokens[i]
        i += 1
        if name not in GUIDED_DIFFUSION_DEFAULTS:
            close = difflib.get_close_matches(name, list(GUIDED_DIFFUSION_DEFAULTS), n=1)
            raise ValueError(f"unknown flag --{name}" + (f" (did you mean --{close[0]}?)" if close else "")
                             + "; guided-diffusion's flags: " + " ".join(f"--{k}" for k in GUIDED_DIFFUSION_DEFAULTS))
        out[name] = flag_value(name, value)
    return out


def guided_flags(keys: dict[str, Any], model_flags: str | None = None) -> dict[str, Any]:
    """The UNet flags (:data:`FLAG_KEYS`) of a config block: its guided-diffusion keys ``keys``, over
    DiME's CelebA flags; with a pasted flag string ``model_flags``, over guided-diffusion's defaults merged
    under the string (a key the string also sets must agree with it). ``ValueError`` names the flag."""
    given = {k: flag_value(k, v) for k, v in keys.items()}
    if model_flags is None:
        merged = {**GUIDED_DIFFUSION_DEFAULTS, **DIME_CELEBA_FLAGS, **given}
    else:
        parsed = parse_model_flags(model_flags)
        for k in sorted(set(given) & set(parsed)):
            if given[k] != parsed[k]:
                raise ValueError(f"key `{k}: {keys[k]}` contradicts `model_flags` (--{k} {parsed[k]})")
        if "image_size" not in parsed and "image_size" not in given:
            raise ValueError("`model_flags` has no --image_size and the key `image_size` is not set (guided-"
                             "diffusion's default 64 is rarely the model's: DiME passes --image_size 128 on its "
                             "own); set it")
        merged = {**GUIDED_DIFFUSION_DEFAULTS, **parsed, **given}
    for k, (ok, why) in UNSUPPORTED_FLAGS.items():
        if merged[k] != ok:
            raise ValueError(f"--{k} {merged[k]}: {why}")
    return {k: v for k, v in merged.items() if k in FLAG_KEYS}


def resolve_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Flags with DiME's CelebA defaults filled in; ``channel_mult`` and attention rates made explicit."""
    unknown = set(flags) - FLAG_KEYS
    if unknown:
        raise ValueError(f"unknown guided_diffusion flag(s) {sorted(unknown)}; known: {sorted(FLAG_KEYS)}")
    f = {**DIME_CELEBA_FLAGS, **flags}
    size = int(f["image_size"])
    if f["channel_mult"] in ("", None):
        if size not in DEFAULT_CHANNEL_MULT:
            raise ValueError(f"guided_diffusion: no default channel_mult for image_size {size}; set channel_mult")
        mult = DEFAULT_CHANNEL_MULT[size]
    else:
        mult = _ints(f["channel_mult"], "channel_mult")
    f["channel_mult"] = tuple(mult)
    f["attention_ds"] = tuple(sorted({size // int(r) for r in _ints(f["attention_resolutions"],
                                                                    "attention_resolutions")}))
    if f["num_heads_upsample"] == -1:
        f["num_heads_upsample"] = f["num_heads"]
    if f["noise_schedule"] not in ("linear", "cosine"):
        raise ValueError(f"guided_diffusion: noise_schedule must be linear or cosine, got {f['noise_schedule']!r}")
    return f
