"""Metric families of the ACE / DiME / FastDiME protocol (docs/protocol.md, Metrics), by task kind.

Faces: FID sFID KID FVA FS MNAC CD COUT L1 FR; x-ray: FID KID L1 MAD S3 FR; synthetic tasks add
GT_L1 (+ region / input floor), GT_precision, GT_recall and FR_oracle. Which metrics a task kind
evaluates, their roles, table columns and directions are registered in ``vcebench.registry``
(plug-ins included); ``builders.py`` builds each built-in. Each metric takes its evaluation subset
as an explicit constructor argument (``SUBSETS`` in ``base.py``):

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
    "check_declared", "frechet_distance", "metric_names", "required_roles",
]

def metric_names(task) -> list[str]:
    """Metric families evaluated for ``task`` (a ``vcebench.config.tasks.Task``): the registry's metrics of its kind
    (``vcebench.registry``; plug-ins included)."""
    from vcebench import registry

    return registry.metric_names(task.kind, task.synthetic)


def required_roles(task) -> tuple[str, ...]:
    """Network roles ``vcebench evaluate`` loads for ``task`` (the classifier always)."""
    from vcebench import registry

    return registry.eval_roles(task.kind, task.synthetic)


def build_metrics(task, models, cfg: dict, *, fid_reference: FIDReference | None = None,
                  train_labels: np.ndarray | None = None, train_attribute_names: Sequence[str] | None = None,
                  only: Sequence[str] | None = None) -> list[Metric]:
    """The task's metrics with their protocol subsets (module docstring), each built by its registered
    factory (``vcebench.registry``, built-ins: ``metrics/builders.py``).

    ``fid_reference``: precomputed original features (else FID computes them from the batches);
    ``train_labels`` / ``train_attribute_names``: the training split's labels, for CD;
    ``only``: restrict to these metric families (default: :func:`metric_names`).
    """
    from vcebench import registry

    from .builders import MetricContext

    known = registry.metrics()
    names = list(only) if only is not None else metric_names(task)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise MetricError(f"unknown metric(s) {unknown}; known: {', '.join(known)}")
    for n in names:
        for role in known[n].roles:
            if getattr(models, role, None) is None:
                raise MetricError(f"metric {n} needs the {role!r} network, which is not loaded "
                                  f"(vcebench.models.load_task_models roles=...)")
    ctx = MetricContext(task, models, cfg, fid_reference, train_labels, train_attribute_names)
    out: list[Metric] = []
    for n in names:
        spec = known[n]
        m = spec.build(ctx)
        if getattr(m, "higher_is_better", None) is None:  # the registration is the one declaration
            m.higher_is_better = dict(spec.columns)
        check_declared(spec, m)
        if getattr(m, "roles", None) is None:
            m.roles = spec.roles
        out.append(m)
    return out


def check_declared(spec, m) -> None:
    """A built metric must be what its registration says: same name, and a direction for every declared
    column that agrees with the declared one (``vcebench.registry.MetricSpec``). Directions are declared
    once, in the registration: the built-ins' classes state none and get the spec's; a plug-in class that
    states its own ``higher_is_better`` too must agree with its registration."""
    hib = getattr(m, "higher_is_better", None)
    if getattr(m, "name", None) != spec.name or not isinstance(hib, dict):
        raise MetricError(f"metric {spec.name!r} ({spec.source}): its factory built {m!r}, which needs `name` = "
                          f"{spec.name!r} and a `higher_is_better` mapping (metrics/base.py, Metric)")
    for col, higher in spec.columns:
        if col not in hib or (higher is not None and bool(hib[col]) != higher):
            raise MetricError(f"metric {spec.name!r} ({spec.source}): column {col!r} is registered with "
                              f"higher_is_better={higher} but the metric reports {hib.get(col, 'nothing')}")
