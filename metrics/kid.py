"""KID, the kernel inception distance (Binkowski et al. 2018, "Demystifying MMD GANs").

KID is the squared maximum mean discrepancy between the feature distributions of the originals
and of the counterfactuals under the cubic polynomial kernel ``k(a, b) = (a . b / D + 1)^3``
(D the feature dimension), estimated with the unbiased estimator

    MMD_u^2 = mean_{i != j} k(x_i, x_j) + mean_{i != j} k(y_i, y_j) - 2 mean_{i, j} k(x_i, y_j).

Unlike FID it has no bias at small n (FID's covariance of 100 rows in 128-d is singular and its
expected value depends on n), so it is the column to read at the synthetic tasks' n = 100.
Large sets are handled as in the reference implementations (clean-fid, torchmetrics): the
estimate is averaged over ``subsets`` random subsets of at most ``subset_size`` rows of each set
(drawn without replacement with a fixed seed); when both sets fit, the one estimate on all rows
is used. Sets as in FID: all explained originals against the counterfactuals in ``subset``.

The bootstrap (``metrics.bootstrap``) recomputes the estimator with the drawn inputs' counts:
pairs of two draws of the same input are left out of the within-set means, as the diagonal is,
so that a repeated row does not add its self-similarity ``k(x, x)``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .base import EvalBatch, MetricError, Subset, embed, require
from .bootstrap import Resamples
from .fid import FeatureRows, _OriginalFeatures


def polynomial_kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a b^T / D + 1)^3`` for (m, D) and (n, D) float64 rows."""
    return (a @ b.T / a.shape[1] + 1.0) ** 3


def mmd2_unbiased(kxx: np.ndarray, kyy: np.ndarray, kxy: np.ndarray) -> float:
    """The unbiased MMD^2 from the three kernel matrices (each set needs >= 2 rows)."""
    m, n = len(kxx), len(kyy)
    if m < 2 or n < 2:
        raise MetricError(f"KID needs at least 2 rows in each set, got {m} and {n}")
    xx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    yy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(xx + yy - 2 * kxy.mean())


def kid(x: np.ndarray, y: np.ndarray, subsets: int = 100, subset_size: int = 1000,
        seed: int = 0) -> tuple[float, float]:
    """(KID, std over subsets) of feature rows ``x`` (m, D) and ``y`` (n, D); std 0 with one estimate."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise MetricError(f"KID: feature sets of shapes {x.shape} and {y.shape}")
    if subsets < 1 or subset_size < 2:
        raise MetricError(f"KID needs subsets >= 1 and subset_size >= 2, got {subsets}, {subset_size}")
    if len(x) <= subset_size and len(y) <= subset_size:
        return mmd2_unbiased(polynomial_kernel(x, x), polynomial_kernel(y, y), polynomial_kernel(x, y)), 0.0
    g = torch.Generator().manual_seed(int(seed))
    values = []
    for _ in range(subsets):
        a = x[torch.randperm(len(x), generator=g)[:subset_size].numpy()]
        b = y[torch.randperm(len(y), generator=g)[:subset_size].numpy()]
        values.append(mmd2_unbiased(polynomial_kernel(a, a), polynomial_kernel(b, b), polynomial_kernel(a, b)))
    return float(np.mean(values)), float(np.std(values))


def weighted_mmd2(kxx: np.ndarray, kyy: np.ndarray, kxy: np.ndarray, wx: np.ndarray, wy: np.ndarray) -> np.ndarray:
    """(B,) the unbiased estimator on count-weighted rows (``wx`` (B, m), ``wy`` (B, n)): within-set means
    over pairs of distinct inputs, weighted by the product of their counts; all-ones counts give
    :func:`mmd2_unbiased`. NaN where a set has fewer than 2 distinct rows drawn."""
    def within(k: np.ndarray, w: np.ndarray) -> np.ndarray:
        num = np.einsum("bi,ij,bj->b", w, k, w) - (w ** 2) @ np.diag(k)
        den = w.sum(1) ** 2 - (w ** 2).sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return num / np.where(den > 0, den, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        cross = np.einsum("bi,ij,bj->b", wx, kxy, wy) / (wx.sum(1) * wy.sum(1))
    return within(kxx, wx) + within(kyy, wy) - 2 * cross


class KID:
    """KID(all explained originals, counterfactuals in ``subset``) on ``fid_features`` (lower is better)."""

    name = "KID"
    roles = ("fid_features",)
    feature_bootstrap = True

    def __init__(self, fid_features: nn.Module | None, subset: Subset = "successful", reference=None,
                 extractor: str = "", subsets: int = 100, subset_size: int = 1000, seed: int = 0):
        self.net, self.subset = fid_features, subset
        self.subsets, self.subset_size, self.seed = int(subsets), int(subset_size), int(seed)
        self.record = {"kid": {"kernel": "(a.b / D + 1)^3", "subsets": self.subsets,
                               "subset_size": self.subset_size, "seed": self.seed}}  # into metrics.json
        self.originals_of = _OriginalFeatures(fid_features, reference, extractor)
        self.rows = FeatureRows()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        cf = embed(batch, self.net, "fid_features", "cf")[keep] if keep.any() else None
        self.rows.add(batch.sample_id, self.originals_of(batch), keep, cf)

    def compute(self) -> dict[str, float]:
        _, o, _, c = self.rows.arrays()
        require(len(c), 2, "KID", self.subset)
        require(len(o), 2, "KID (originals)", "all")
        value, self.std = kid(o, c, self.subsets, self.subset_size, self.seed)
        self.n = {"KID": len(c), "KID_originals": len(o)}
        return {"KID": value}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        o_ids, o, c_ids, c = self.rows.arrays()
        if len(c) < 2:
            return {"KID": np.full(len(resamples), np.nan)}
        return {"KID": weighted_mmd2(polynomial_kernel(o, o), polynomial_kernel(c, c), polynomial_kernel(o, c),
                                     resamples.weights(o_ids), resamples.weights(c_ids))}
