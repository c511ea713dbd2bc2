"""The recipes of the small synthetic roles: each role's defaults (:data:`RECIPE_DEFAULTS`), the choices of the
settings that name one, the rows a role trains on, and the check of a recipe's ``attributes``.

Torch-free on purpose: the config check that runs when the workflow builds its DAG reads these tables
(``vcebench.protocol.settings``) and would otherwise start torch (seconds) in every ``snakemake`` call. The
trainers that use them: ``classifier.py``, ``oracle.py``, ``face_identity.py``, ``perceptual.py``, ``simsiam.py``,
``fid_features.py`` (``vcebench.models.recipes.TRAINERS`` pairs each role's defaults with its trainer).
"""

from __future__ import annotations

from typing import Any

from ...config.load import ConfigError

CLASSIFIER_DEFAULTS: dict[str, Any] = {
    "arch": "vgg", "width": 16, "blocks": 1, "pool": "avgmax", "attributes": None, "data_half": "A", "steps": 1500,
    "batch": 64, "lr": 6e-3, "weight_decay": 5e-4, "seed": 11, "noise": 0.1, "blur": 0.5, "shift": 1,
    "flip": True,
}
ORACLE_DEFAULTS: dict[str, Any] = {
    **CLASSIFIER_DEFAULTS, "arch": "resnet", "width": 12, "attributes": "all", "data_half": "B", "seed": 23,
    "steps": 1000,
    "adv_eps": 0.04, "adv_steps": 1, "adv_frac": 0.25, "adv_start": 0.0,
    "fool_eps": [0.03, 0.06, 0.12], "fool_steps": 10, "fool_n": 400,
}
IDENTITY_DEFAULTS: dict[str, Any] = {
    "arch": "vgg", "width": 16, "blocks": 1, "pool": "avg", "embed_dim": 64, "steps": 900, "batch": 64, "lr": 3e-3,
    "weight_decay": 5e-4, "seed": 31, "margin": 0.25, "scale": 16.0, "noise": 0.1, "blur": 0.5, "shift": 1,
    "flip": True, "cf_views": 0.0,
}
PERCEPTUAL_DEFAULTS: dict[str, Any] = {
    "width": 16, "steps": 300, "batch": 64, "lr": 3e-3, "weight_decay": 0.0, "seed": 41, "noise": 0.2, "blur": 1.0,
}
SIMSIAM_DEFAULTS: dict[str, Any] = {
    "arch": "vgg", "width": 16, "blocks": 1, "dim": 128, "pred_dim": 32, "steps": 500, "batch": 64,
    "lr": 0.05, "weight_decay": 1e-4, "seed": 62, "min_scale": 0.5, "noise": 0.1, "blur": 1.0, "jitter": 0.3,
    "cf_views": 0.0,
}
FID_DEFAULTS: dict[str, Any] = {
    **CLASSIFIER_DEFAULTS, "arch": "vgg", "pool": "avg", "width": 24, "embed_dim": 128, "attributes": "all",
    "data_half": "all", "seed": 51,
    "steps": 700, "noise": 0.0, "blur": 0.0, "max_blur": 1.5, "max_noise": 0.2,
}
# each small role's recipe defaults (a setting's type is its default's type, when the config is checked)
RECIPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "classifier": CLASSIFIER_DEFAULTS, "oracle": ORACLE_DEFAULTS, "identity": IDENTITY_DEFAULTS,
    "perceptual": PERCEPTUAL_DEFAULTS, "simsiam": SIMSIAM_DEFAULTS, "fid_features": FID_DEFAULTS,
}

# the trunks and poolings of the small networks (a recipe's `arch` / `pool`; checked when the config is loaded)
TRUNK_ARCHS = ("resnet", "vgg")
TRUNK_POOLS = ("avg", "avgmax")
# the training rows a role uses (`data_half`, ``classifier.select_rows``): identity half A or B, or all of them
DATA_HALVES = ("A", "B", "all")
# The recipes' settings that name a choice (any role that has the key; the others' types are their defaults'):
# checked when the config is loaded. `attributes` (null, all or a list of the dataset's labels) is checked against
# the dataset (vcebench.protocol.settings, :func:`resolve_attributes`).
SETTING_CHOICES: dict[str, tuple[Any, ...]] = {"arch": TRUNK_ARCHS, "pool": TRUNK_POOLS,
                                               "data_half": (*DATA_HALVES, None)}
# The perceptual autoencoder's downsampling (``nets.AutoEncoder``: two stride-2 stages): the decoder gives back the
# input's size only for multiples of it.
AUTOENCODER_DOWNSAMPLING = 4


def resolve_attributes(spec: Any, available: list[str], task_attributes: list[str], key: str) -> list[str]:
    """``null`` -> the query attributes of the tasks on this dataset; ``all`` -> every attribute; or a list."""
    if spec is None:
        names = list(task_attributes)
    elif spec == "all":
        names = list(available)
    elif isinstance(spec, list):
        names = list(spec)
    else:
        raise ConfigError(f"config key `{key}` must be null, 'all' or a list of attribute names, got {spec!r}")
    unknown = [a for a in names if a not in available]
    if unknown or not names:
        raise ConfigError(f"config key `{key}`: unknown attribute(s) {unknown} (dataset has {available})")
    return names
