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
from .generative.ddpm import DiffusersDDPM, evaluate_ddpm
from .generative.pmf import PixelMeanFlow, evaluate_pmf
from .generative.settings import DDPM_DEFAULTS, PMF_DEFAULTS
from .synthetic.classifier import train_classifier
from .synthetic.face_identity import train_identity
from .synthetic.fid_features import train_fid_features
from .synthetic.oracle import train_oracle
from .synthetic.perceptual import train_perceptual
from .synthetic.settings import RECIPE_DEFAULTS
from .synthetic.simsiam import train_simsiam
from .training.loops import to_float_images

# each small role's recipe: its defaults (``synthetic.settings.RECIPE_DEFAULTS``) and its trainer
TRAINERS = {role: (RECIPE_DEFAULTS[role], train) for role, train in (
    ("classifier", train_classifier), ("oracle", train_oracle), ("identity", train_identity),
    ("perceptual", train_perceptual), ("simsiam", train_simsiam), ("fid_features", train_fid_features))}
TRAINABLE = (*TRAINERS, *GENERATIVE)


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
