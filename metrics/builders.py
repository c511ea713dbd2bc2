"""How each built-in metric is built for a task (the factories ``vcebench.registry`` names).

A factory takes a :class:`MetricContext` and returns a metric with its protocol subset (table in
``metrics/__init__.py``). A plug-in metric's factory takes the same context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import MetricError
from .classifier import MAD, FlipRate
from .cout import COUT
from .fid import FID, SFID, FIDReference
from .ground_truth import GroundTruth
from .kid import KID
from .oracle import MNAC, CorrelationDifference, OracleFlipRate
from .similarity import FaceVerification, L1Distance, SimSiamSimilarity


@dataclass
class MetricContext:
    """What a metric factory may use: the task (``vcebench.config.tasks.Task``), its loaded networks
    (``TaskModels``: every role the metric declares is loaded), the whole config, the precomputed FID
    reference features and the training split's labels (for CD; ``None`` when not loaded)."""

    task: Any
    models: Any
    cfg: dict
    fid_reference: FIDReference | None = None
    train_labels: np.ndarray | None = None
    train_attribute_names: Sequence[str] | None = None

    @property
    def settings(self) -> dict:
        """Config key ``metrics``."""
        return self.cfg["metrics"]

    @property
    def extractor(self) -> str:
        return self.models.names.get("fid_features", "")

    @property
    def frechet(self) -> str:
        return self.settings["frechet_method"]


def fid(ctx: MetricContext) -> FID:
    return FID(ctx.models.fid_features, "successful", ctx.fid_reference, ctx.extractor, ctx.frechet)


def sfid(ctx: MetricContext) -> SFID:
    return SFID(ctx.models.fid_features, ctx.settings["sfid_seeds"], "successful", ctx.fid_reference,
                ctx.extractor, ctx.frechet)


def kid(ctx: MetricContext) -> KID:
    kcfg = ctx.settings["kid"]
    return KID(ctx.models.fid_features, "successful", ctx.fid_reference, ctx.extractor,
               subsets=kcfg["subsets"], subset_size=kcfg["subset_size"], seed=kcfg["seed"])


def fva(ctx: MetricContext) -> FaceVerification:
    return FaceVerification(ctx.models.identity, "successful")


def mnac(ctx: MetricContext) -> MNAC:
    return MNAC(ctx.models.oracle, "successful")


def cd(ctx: MetricContext) -> CorrelationDifference:
    if ctx.train_labels is None or ctx.train_attribute_names is None:
        raise MetricError("CD needs the training split's labels (load_split(cfg, dataset, 'train'))")
    return CorrelationDifference(ctx.models.oracle, ctx.task.attribute, ctx.train_labels, ctx.train_attribute_names,
                                 "successful")


def cout(ctx: MetricContext) -> COUT:
    return COUT(ctx.models.classifier, "correct")


def fr(ctx: MetricContext) -> FlipRate:
    return FlipRate("all")


def l1(ctx: MetricContext) -> L1Distance:
    return L1Distance("all")


def mad(ctx: MetricContext) -> MAD:
    return MAD(ctx.models.classifier, "all")


def s3(ctx: MetricContext) -> SimSiamSimilarity:
    return SimSiamSimilarity(ctx.models.simsiam, "correct")


def ground_truth(ctx: MetricContext) -> GroundTruth:
    return GroundTruth(float(ctx.settings["gt_change_threshold"]), "correct_successful")


def fr_oracle(ctx: MetricContext) -> OracleFlipRate:
    return OracleFlipRate(ctx.models.oracle, ctx.task.attribute, "all")
