"""The Metric interface (docs/architecture.md): streaming update/compute with directions.

Besides the interface this module holds what every metric family shares: the explicit
evaluation subsets of the ACE protocol (docs/protocol.md, Metrics), a per-batch cache so
that one network pass (classifier, oracle, embeddings) serves every metric that needs it,
and the checks that turn bad input into a clear :class:`MetricError` instead of a NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch
from torch import Tensor

from vcebench.core.errors import UserError

from .bootstrap import Resamples, Samples, weighted_means

Subset = Literal["all", "successful", "correct", "correct_successful"]
SUBSETS: dict[str, str] = {
    "all": "every explained input",
    "successful": "inputs whose counterfactual flips the classifier (f(cf) == y')",
    "correct": "inputs the classifier gets right (f(x) == label), with all their counterfactuals",
    "correct_successful": "correctly classified inputs whose counterfactual flips the classifier",
}


class MetricError(UserError, ValueError):
    """Input a metric cannot evaluate honestly (mismatched ids, too few samples, bad shapes)."""


class InsufficientSamples(MetricError):
    """Fewer samples in a metric's subset than it needs (e.g. FID of < 2 successful CFs)."""


@dataclass
class EvalBatch:
    """One batch of aligned originals and counterfactuals.

    ``x``, ``cf`` in [-1, 1]; ``sample_id`` int64 N; ``target`` int N (y' = 1 - f(x));
    ``flipped`` bool N (f(cf) == y'); ``label`` int N (ground-truth query label, -1 unknown);
    ``gt_cf`` the synthetic ground-truth counterfactual or ``None``;
    ``extra`` anything else a metric needs (e.g. per-sample records) and the per-batch cache
    of network outputs (see :func:`cached`);
    ``pred`` int N, the classifier's prediction on ``x`` (``None``: ``1 - target``, the
    DiME/ACE convention for the target).
    """

    x: Tensor
    cf: Tensor
    sample_id: Tensor
    target: Tensor
    flipped: Tensor
    label: Tensor
    gt_cf: Tensor | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)
    pred: Tensor | None = None

    def __post_init__(self) -> None:
        n = self.x.shape[0]
        if self.cf.shape != self.x.shape:
            raise MetricError(f"counterfactuals have shape {tuple(self.cf.shape)} but the originals "
                              f"{tuple(self.x.shape)}; they must be aligned one to one")
        for name in ("sample_id", "target", "flipped", "label"):
            v = getattr(self, name)
            if v.shape != (n,):
                raise MetricError(f"EvalBatch.{name} has shape {tuple(v.shape)}, expected ({n},)")
        if self.pred is not None and self.pred.shape != (n,):
            raise MetricError(f"EvalBatch.pred has shape {tuple(self.pred.shape)}, expected ({n},)")
        if self.gt_cf is not None and self.gt_cf.shape != self.x.shape:
            raise MetricError(f"EvalBatch.gt_cf has shape {tuple(self.gt_cf.shape)}, "
                              f"expected {tuple(self.x.shape)}")

    @property
    def prediction(self) -> Tensor:
        """f(x): ``pred`` when given, else ``1 - target``."""
        return self.pred if self.pred is not None else 1 - self.target.long()

    def subset(self, subset: Subset) -> Tensor:
        """Boolean mask (N,) of the rows in ``subset`` (one of :data:`SUBSETS`)."""
        if subset == "all":
            return torch.ones_like(self.flipped, dtype=torch.bool)
        if subset == "successful":
            return self.flipped.bool()
        if subset in ("correct", "correct_successful"):
            if bool((self.label < 0).any()):
                raise MetricError(f"subset {subset!r} needs the ground-truth query label of every input, "
                                  "but some are unknown (label -1)")
            correct = self.prediction.long() == self.label.long()
            return correct & self.flipped.bool() if subset == "correct_successful" else correct
        raise MetricError(f"unknown evaluation subset {subset!r}; known: {', '.join(SUBSETS)}")


class Metric(Protocol):
    """A metric family: streams EvalBatches, returns named numbers.

    ``subset`` names the rows it evaluates (:data:`SUBSETS`), ``roles`` the networks it uses
    (their ``models.names`` go into metrics.json) and, after :meth:`compute`, ``n`` holds the
    number of samples behind each output. ``higher_is_better`` (column -> higher is better, None: shown,
    not ranked) is its registration's (``MetricSpec.columns``), set by :func:`metrics.build_metrics`.

    Optional methods: ``bootstrap(resamples) -> {output: (B,) values}`` (:mod:`.bootstrap`); ``per_sample() ->
    {column: Samples}`` for a column that is the mean of one value per input of its subset (the percentage
    columns: 100 x the mean of 0 / 1), what ``samples.npz`` records (:mod:`.records`, :func:`per_sample`);
    ``cf_features() -> (name, ids, rows)``, the feature rows of the kept counterfactuals (FID; KID and sFID use
    the same rows).
    """

    name: str
    higher_is_better: dict[str, bool | None]
    subset: str
    roles: tuple[str, ...]
    n: dict[str, int]

    def update(self, batch: EvalBatch) -> None: ...

    def compute(self) -> dict[str, float]: ...


def per_sample(m: Metric) -> dict[str, Samples]:
    """``m.per_sample()``: the per-input values behind each of ``m``'s mean columns; ``{}`` for a metric that
    is no mean over inputs (FID, KID, sFID, CD) or that does not keep its values."""
    fn = getattr(m, "per_sample", None)
    return dict(fn()) if fn is not None else {}


def cached(batch: EvalBatch, key: str, fn: Callable[[], Tensor]) -> Tensor:
    """``batch.extra[key]``, computing it with ``fn()`` (no grad) the first time.

    Metrics that share a network (FR/MAD/COUT the classifier, MNAC/CD/FR_oracle the oracle,
    FID/sFID the feature extractor) thus run it once per batch.
    """
    if key not in batch.extra:
        with torch.no_grad():
            batch.extra[key] = fn()
    return batch.extra[key]


def classifier_logits(batch: EvalBatch, classifier: torch.nn.Module, which: Literal["x", "cf"]) -> Tensor:
    """Cached (N, 2) classifier logits of the originals or the counterfactuals."""
    out = cached(batch, f"logits_{which}", lambda: classifier(getattr(batch, which)).float())
    if out.ndim != 2 or out.shape[1] != 2:
        raise MetricError(f"classifier must return (N, 2) logits (see vcebench.models.base.BinaryHead), "
                          f"got shape {tuple(out.shape)}")
    return out


def embed(batch: EvalBatch, net: torch.nn.Module, role: str, which: Literal["x", "cf", "gt_cf"]) -> Tensor:
    """Cached (N, D) output of the network of ``role`` on ``x``, ``cf`` or ``gt_cf``."""
    out = cached(batch, f"{role}_{which}", lambda: net(getattr(batch, which)).float())
    if out.ndim != 2 or out.shape[0] != batch.x.shape[0]:
        raise MetricError(f"model role {role!r} must return (N, D) outputs, got shape {tuple(out.shape)}")
    return out


def require(n: int, needed: int, metric: str, subset: str) -> None:
    """Fail clearly when a metric has fewer samples than it needs (never a silent NaN)."""
    if n < needed:
        raise InsufficientSamples(f"{metric} needs at least {needed} sample(s) in subset {subset!r} "
                          f"({SUBSETS.get(subset, subset)}), got {n}")


class SubsetMean:
    """A metric that is the mean of one per-sample value over a subset of the batch stream.

    Subclasses set ``name``, ``roles`` and implement
    ``values(batch, keep) -> Tensor`` (one value per kept row).
    """

    name: str

    def __init__(self, subset: Subset):
        self.subset = subset
        self.sum = 0.0
        self.count = 0
        self.samples = Samples()
        self.n: dict[str, int] = {}

    def values(self, batch: EvalBatch, keep: Tensor) -> Tensor:
        raise NotImplementedError

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        if not keep.any():
            return
        v = self.values(batch, keep)
        self.samples.add(batch.sample_id[keep], v)
        self.sum += float(v.double().sum())
        self.count += int(keep.sum())

    def compute(self) -> dict[str, float]:
        require(self.count, 1, self.name, self.subset)
        self.n = {self.name: self.count}
        return {self.name: self.sum / self.count}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {self.name: weighted_means(self.samples, resamples)}

    def per_sample(self) -> dict[str, Samples]:
        return {self.name: self.samples}


def cosine(a: Tensor, b: Tensor, eps: float = 1e-8) -> Tensor:
    """Row-wise cosine similarity in float64 (``torch.nn.CosineSimilarity`` as in DiME/ACE)."""
    a, b = a.double(), b.double()
    return (a * b).sum(1) / (a.norm(dim=1).clamp_min(eps) * b.norm(dim=1).clamp_min(eps))
