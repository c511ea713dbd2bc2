"""Percentile bootstrap over the explained inputs: a 95 % interval for every metric.

A leaf module (no import of the metric families), so that ``base.py`` can use :class:`Samples`.

One resample draws the n explained inputs with replacement (seeded); it is stored as a count
vector ``w`` (how often each input was drawn), and every metric is recomputed on the resampled
inputs by weighting each input's contribution with its count. Subsets follow the resampled
inputs: a metric over the successful counterfactuals uses the drawn inputs whose CF flips, so
its size varies between resamples as it would between evaluation sets. The interval is the
(2.5, 97.5) percentile of the resampled values (Efron's percentile interval).

Metrics expose ``bootstrap(resamples) -> {output: (B,) values}``; :class:`Resamples` maps their
sample ids to the columns of the count matrix. Means over a subset (FR, FVA, L1, ...) are
``sum(w v) / sum(w)`` over the rows they kept (:func:`weighted_means`); feature metrics
(FID, sFID, KID) use weighted feature statistics (``fid.py``, ``kid.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

BOOTSTRAP_DEFAULTS = {"resamples": 1000, "feature_resamples": 200, "seed": 0, "level": 0.95}
BOOTSTRAP_METHOD = ("percentile bootstrap over the explained inputs (drawn with replacement; subsets such as the "
                    "successful CFs follow the drawn inputs; FID / sFID / KID from the drawn inputs' feature rows)")


def resample_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) int64: how often each of ``n`` inputs is drawn in each resample of size ``n``."""
    if n < 1 or resamples < 1:
        raise ValueError(f"bootstrap needs n >= 1 inputs and >= 1 resamples, got n={n}, resamples={resamples}")
    g = torch.Generator().manual_seed(int(seed))
    draws = torch.randint(0, n, (resamples, n), generator=g)
    counts = torch.zeros(resamples, n, dtype=torch.int64)
    counts.scatter_add_(1, draws, torch.ones_like(draws))
    return counts.numpy()


@dataclass
class Resamples:
    """The count matrix ``counts`` (B, n) over the explained inputs ``ids`` (sorted, unique)."""

    ids: np.ndarray
    counts: np.ndarray

    @classmethod
    def draw(cls, ids, resamples: int, seed: int) -> Resamples:
        ids = np.unique(np.asarray(ids, np.int64))
        return cls(ids, resample_counts(len(ids), resamples, seed))

    def __len__(self) -> int:
        return self.counts.shape[0]

    def head(self, b: int) -> Resamples:
        """The first ``b`` resamples (expensive metrics use fewer)."""
        return Resamples(self.ids, self.counts[:b])

    def weights(self, sample_ids) -> np.ndarray:
        """(B, len(sample_ids)) float64 counts of those inputs (columns in the order given)."""
        ids = np.asarray(sample_ids.cpu() if torch.is_tensor(sample_ids) else sample_ids, np.int64).reshape(-1)
        cols = np.searchsorted(self.ids, ids)
        if len(ids) and (cols.max() >= len(self.ids) or (self.ids[np.minimum(cols, len(self.ids) - 1)] != ids).any()):
            raise ValueError("bootstrap: a metric holds sample ids that are not among the explained inputs")
        return self.counts[:, cols].astype(np.float64)


class Samples:
    """Per-input values of one metric output (sample id, value), kept for the bootstrap."""

    def __init__(self) -> None:
        self.ids: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def add(self, sample_ids: Tensor, values: Tensor) -> None:
        self.ids.append(sample_ids.detach().cpu().numpy().astype(np.int64).reshape(-1))
        self.values.append(values.detach().cpu().double().numpy().reshape(-1))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.ids:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        return np.concatenate(self.ids), np.concatenate(self.values)

    @property
    def count(self) -> int:
        return int(sum(len(i) for i in self.ids))

    def mean(self) -> float:
        return float(self.arrays()[1].mean())


def weighted_means(samples: Samples, resamples: Resamples, scale: float = 1.0) -> np.ndarray:
    """(B,) ``scale * sum(w v) / sum(w)`` over the kept rows; NaN where a resample drew none of them."""
    ids, v = samples.arrays()
    w = resamples.weights(ids)
    den = w.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return scale * (w @ v) / np.where(den > 0, den, np.nan)


def percentile_interval(values: np.ndarray, level: float = 0.95, min_valid: float = 0.5) -> list[float] | None:
    """``[lo, hi]``: the (1 - level) / 2 and (1 + level) / 2 percentiles of the finite ``values``
    (``None`` when fewer than ``min_valid`` of them are finite, e.g. a subset empty in most resamples)."""
    v = np.asarray(values, np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    if len(v) == 0 or len(finite) < min_valid * len(v):
        return None
    a = (1 - level) / 2
    lo, hi = np.quantile(finite, [a, 1 - a])
    return [float(lo), float(hi)]
