"""Metric families of the ACE / DiME / FastDiME protocol (docs/protocol.md, Metrics), by task kind.

Faces: FID sFID KID FVA FS MNAC CD COUT FR L1; x-ray: FID KID L1 MAD S3 FR; synthetic tasks add
GT_L1 (+ region / input floor), GT_precision, GT_recall and FR_oracle. Each metric takes
its evaluation subset as an explicit constructor argument (``SUBSETS`` in ``base.py``):

=========================  ======================  ===========================
metric                     subset                  network role
=========================  ======================  ===========================
FR                         all                     classifier
FID, sFID, KID             successful (vs all x)   fid_features
FVA, FS                    successful              identity
MNAC, CD                   successful              oracle
COUT, S3                   correct                 classifier, simsiam
L1, MAD                    all                     -, classifier
GT_*                       correct_successful      (synthetic renderer)
FR_oracle                  all                     oracle
=========================  ======================  ===========================

Every output also gets a 95 % percentile bootstrap interval over the explained inputs
(``bootstrap.py``; ``run_metrics(..., bootstrap=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import SUBSETS, EvalBatch, InsufficientSamples, Metric, MetricError
from .classifier import MAD, FlipRate
from .cout import COUT
from .diversity import SigmaL
from .fid import FID, SFID, FeatureStats, FIDReference, frechet_distance
from .ground_truth import GroundTruth
from .kid import KID
from .oracle import MNAC, CorrelationDifference, OracleFlipRate
from .similarity import FaceVerification, L1Distance, SimSiamSimilarity

__all__ = [
    "COUT", "FID", "MAD", "MNAC", "SFID", "SUBSETS", "CorrelationDifference", "EvalBatch", "FIDReference",
    "FaceVerification", "FeatureStats", "FlipRate", "GroundTruth", "InsufficientSamples", "KID", "L1Distance",
    "Metric", "MetricError", "OracleFlipRate", "SigmaL", "SimSiamSimilarity", "build_metrics",
    "frechet_distance", "metric_names", "required_roles",
]

FACE_METRICS = ("FID", "sFID", "KID", "FVA", "MNAC", "CD", "COUT", "FR", "L1")  # FVA also reports FS
XRAY_METRICS = ("FID", "KID", "L1", "MAD", "S3", "FR")
SYNTHETIC_METRICS = ("GT", "FR_oracle")
ROLES = {"FID": ("fid_features",), "sFID": ("fid_features",), "KID": ("fid_features",), "FVA": ("identity",),
         "MNAC": ("oracle",), "CD": ("oracle",), "COUT": ("classifier",), "FR": ("classifier",), "L1": (),
         "MAD": ("classifier",), "S3": ("simsiam",), "GT": (), "FR_oracle": ("oracle",)}


def metric_names(task) -> list[str]:
    """Metric families evaluated for ``task`` (a ``vcebench.tasks.Task``)."""
    names = list(FACE_METRICS if task.kind == "faces" else XRAY_METRICS)
    return names + list(SYNTHETIC_METRICS) if task.synthetic else names


def required_roles(task) -> tuple[str, ...]:
    """Network roles ``vcebench evaluate`` loads for ``task`` (the classifier always)."""
    roles = ["classifier"]
    for name in metric_names(task):
        roles += [r for r in ROLES[name] if r not in roles]
    return tuple(roles)


def build_metrics(task, models, cfg: dict, *, fid_reference: FIDReference | None = None,
                  train_labels: np.ndarray | None = None, train_attribute_names: Sequence[str] | None = None,
                  only: Sequence[str] | None = None) -> list[Metric]:
    """The task's metrics with their protocol subsets (module docstring).

    ``fid_reference``: precomputed original features (else FID computes them from the batches);
    ``train_labels`` / ``train_attribute_names``: the training split's labels, for CD;
    ``only``: restrict to these metric families (default: :func:`metric_names`).
    """
    mcfg = cfg.get("metrics", {}) or {}
    names = list(only) if only is not None else metric_names(task)
    unknown = [n for n in names if n not in ROLES]
    if unknown:
        raise MetricError(f"unknown metric(s) {unknown}; known: {', '.join(ROLES)}")
    for n in names:
        for role in ROLES[n]:
            if getattr(models, role, None) is None:
                raise MetricError(f"metric {n} needs the {role!r} network, which is not loaded "
                                  f"(vcebench.models.load_task_models roles=...)")
    extractor = models.names.get("fid_features", "")
    frechet = mcfg.get("frechet_method", "sqrtm")
    out: list[Metric] = []
    for n in names:
        if n == "FID":
            out.append(FID(models.fid_features, "successful", fid_reference, extractor, frechet))
        elif n == "sFID":
            out.append(SFID(models.fid_features, mcfg.get("sfid_seeds", [0]), "successful", fid_reference,
                            extractor, frechet))
        elif n == "KID":
            kcfg = mcfg.get("kid", {}) or {}
            out.append(KID(models.fid_features, "successful", fid_reference, extractor,
                           subsets=kcfg.get("subsets", 100), subset_size=kcfg.get("subset_size", 1000),
                           seed=kcfg.get("seed", 0)))
        elif n == "FVA":
            out.append(FaceVerification(models.identity, "successful"))
        elif n == "MNAC":
            out.append(MNAC(models.oracle, "successful"))
        elif n == "CD":
            if train_labels is None or train_attribute_names is None:
                raise MetricError("CD needs the training split's labels (load_split(cfg, dataset, 'train'))")
            out.append(CorrelationDifference(models.oracle, task.attribute, train_labels, train_attribute_names,
                                             "successful"))
        elif n == "COUT":
            out.append(COUT(models.classifier, "correct"))
        elif n == "FR":
            out.append(FlipRate("all"))
        elif n == "L1":
            out.append(L1Distance("all"))
        elif n == "MAD":
            out.append(MAD(models.classifier, "all"))
        elif n == "S3":
            out.append(SimSiamSimilarity(models.simsiam, "correct"))
        elif n == "GT":
            out.append(GroundTruth(float(mcfg.get("gt_change_threshold", 0.05)), "correct_successful"))
        elif n == "FR_oracle":
            out.append(OracleFlipRate(models.oracle, task.attribute, "all"))
    return out
