"""Each trainable role's recipe (its defaults and trainer, ``TRAINERS``; ``ddpm`` and ``pmf``: ``GENERATIVE``)
and ``evaluate_generative``, which re-evaluates a trained ddpm / pmf folder. Training a role of a dataset
(``train_role``) is :mod:`vcebench.steps.train`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.io import write_json
from ..registry.roles import GENERATIVE
from .generative.ddpm import DDPM_DEFAULTS, DiffusersDDPM, evaluate_ddpm
from .generative.pmf import PMF_DEFAULTS, PixelMeanFlow, evaluate_pmf
from .synthetic.classifier import CLASSIFIER_DEFAULTS, DATA_HALVES, train_classifier
from .synthetic.face_identity import IDENTITY_DEFAULTS, train_identity
from .synthetic.fid_features import FID_DEFAULTS, train_fid_features
from .synthetic.nets import TRUNK_ARCHS, TRUNK_POOLS
from .synthetic.oracle import ORACLE_DEFAULTS, train_oracle
from .synthetic.perceptual import PERCEPTUAL_DEFAULTS, train_perceptual
from .synthetic.simsiam import SIMSIAM_DEFAULTS, train_simsiam
from .training.loops import to_float_images

TRAINERS = {
    "classifier": (CLASSIFIER_DEFAULTS, train_classifier),
    "oracle": (ORACLE_DEFAULTS, train_oracle),
    "identity": (IDENTITY_DEFAULTS, train_identity),
    "perceptual": (PERCEPTUAL_DEFAULTS, train_perceptual),
    "simsiam": (SIMSIAM_DEFAULTS, train_simsiam),
    "fid_features": (FID_DEFAULTS, train_fid_features),
}
TRAINABLE = (*TRAINERS, *GENERATIVE)
# The recipes' settings that name a choice (any role that has the key; the others' types are their defaults'):
# checked when the config is loaded. `attributes` (null, all or a list of the dataset's labels) is checked against
# the dataset (vcebench.protocol.settings).
SETTING_CHOICES: dict[str, tuple[Any, ...]] = {"arch": TRUNK_ARCHS, "pool": TRUNK_POOLS,
                                               "data_half": (*DATA_HALVES, None)}


def evaluate_generative(role: str, model_dir: str | Path, val_images_uint8: Tensor,
                        feature_fn: Callable[[Tensor], Tensor] | None = None, feature_name: str | None = None,
                        reference_ddpm_dir: str | Path | None = None, seed: int = 0, n_images: int | None = None,
                        n_samples: int | None = None, write: bool = True,
                        classifiers: dict[str, Callable[[Tensor], Tensor]] | None = None,
                        fire_t: dict[str, float] | None = None) -> dict[str, Any]:
    """Re-evaluate a trained ``ddpm`` / ``pmf`` folder with a feature network (FID) and, for the pmf,
    against the dataset's DDPM (the pmf quality gate); merged into ``model_dir/metrics.json``
    under ``"eval_fid"`` (and ``"quality_gate"``) when ``write``. Returns the new entries.
    ``n_images`` / ``n_samples`` (None: the role's ``eval_images`` / ``n_samples`` defaults, as its training
    evaluated): validation images and generated samples. ``classifiers`` ({attribute: classifier}) and
    ``fire_t`` ({attribute: the task's FiRe noise level}): the pmf gate's label check, as training measures it
    (``steps.train.generative_references`` gives all four references).

    For the zoo: call it once ``fid_features`` (and the ``ddpm``) of the dataset exist, e.g.
    ``evaluate_generative("pmf", dir, val.images, fidnet, name, reference_ddpm_dir=ddpm_dir)``.
    """

    model_dir = Path(model_dir)
    if role not in GENERATIVE:
        raise ValueError(f"evaluate_generative: role must be 'ddpm' or 'pmf', got {role!r}")

    defaults = DDPM_DEFAULTS if role == "ddpm" else PMF_DEFAULTS
    n_images = defaults["eval_images"] if n_images is None else n_images
    n_samples = defaults["n_samples"] if n_samples is None else n_samples
    val = to_float_images(val_images_uint8[:n_images], f"evaluate_generative({role}): val_images_uint8")
    if role == "ddpm":
        model = DiffusersDDPM.from_pretrained_dir(model_dir)
        ev, _ = evaluate_ddpm(model, val, seed + 1, n_samples, feature_fn=feature_fn, feature_name=feature_name)
        new: dict[str, Any] = {"eval_fid": ev}
    else:
        from .generative.levels import EVAL_T_FLOW
        from .generative.quality import gate, with_fire_t

        model = PixelMeanFlow.load(model_dir)
        ref = DiffusersDDPM.from_pretrained_dir(reference_ddpm_dir) if reference_ddpm_dir else None
        t_flow = with_fire_t(EVAL_T_FLOW, fire_t)
        ev, _ = evaluate_pmf(model, val, seed + 1, n_samples, feature_fn=feature_fn, feature_name=feature_name,
                             ddpm=ref, t_flow=t_flow, classifiers=classifiers)
        new = {"eval_fid": ev, "quality_gate": gate(ev, fire_t=fire_t)}
    if write:
        path = model_dir / "metrics.json"
        old = json.loads(path.read_text()) if path.is_file() else {}
        write_json(path, {**old, **new})
    return new
