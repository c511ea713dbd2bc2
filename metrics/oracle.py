"""Metrics read off the oracle (a multi-attribute classifier independent of the explained one).

- MNAC (DiME / ACE ``compute_MNAC.py``): per counterfactual, the number of attributes whose
  binarised oracle prediction (sigmoid > 0.5, i.e. logit > 0) differs between x and cf,
  query included; mean over successful counterfactuals.
- CD (ACE ``compute_CD.py``, ``diff=True``): ``corr_data[i] = Pearson(label_q, label_i)`` on
  the *training* labels, ``corr_cf[i] = Pearson(delta_i, delta_q)`` with
  ``delta = [oracle(cf) > .5] - [oracle(x) > .5]`` over successful counterfactuals,
  ``CD = sum_i |corr_cf[i] - corr_data[i]|`` over every oracle attribute (query included).
  A NaN correlation (a constant column) counts as 0 on both sides; ACE guards only corr_cf.
- FR_oracle (ours, synthetic tasks): % of inputs whose counterfactual the *oracle* assigns to
  the target value y' of the query attribute. High FR with low FR_oracle means the edits fool
  the classifier without changing the attribute (adversarial, not semantic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from .base import EvalBatch, MetricError, Subset, SubsetMean, embed, require
from .bootstrap import Resamples, Samples, weighted_means


def _oracle_bits(batch: EvalBatch, oracle: nn.Module, which: str) -> Tensor:
    return embed(batch, oracle, "oracle", which) > 0  # logit > 0 <=> sigmoid > 0.5


def _query_index(names: Sequence[str], query: str, what: str) -> int:
    if query not in names:
        raise MetricError(f"{what}: the query attribute {query!r} is not among the oracle's attributes "
                          f"{list(names)}")
    return list(names).index(query)


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation (``np.corrcoef``), 0 where it is undefined (constant input)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2:
        return 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(a, b)[0, 1]
    return 0.0 if np.isnan(c) else float(c)


class MNAC(SubsetMean):
    """Mean number of attributes changed according to the oracle (lower is better)."""

    name = "MNAC"
    roles = ("oracle",)

    def __init__(self, oracle: nn.Module, subset: Subset = "successful"):
        super().__init__(subset)
        self.oracle = oracle

    def values(self, batch: EvalBatch, keep: Tensor) -> Tensor:
        changed = _oracle_bits(batch, self.oracle, "x") != _oracle_bits(batch, self.oracle, "cf")
        return changed[keep].sum(1)


def weighted_pearson(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B, A) Pearson correlation of each column of ``a`` (m, A) with ``b`` (m,) under each row of
    counts ``w`` (B, m) (the correlation of the resampled rows), 0 where undefined as :func:`pearson`."""
    s = w.sum(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ma, mb = (w @ a) / s, (w @ b)[:, None] / s
        cov = (w @ (a * b[:, None])) / s - ma * mb
        va = (w @ (a * a)) / s - ma ** 2
        vb = (w @ (b * b))[:, None] / s - mb ** 2
        c = cov / np.sqrt(va * vb)
    tiny = 1e-12
    return np.where((va > tiny) & (vb > tiny) & np.isfinite(c), c, 0.0)


def data_correlations(train_labels: np.ndarray, train_names: Sequence[str], attribute_names: Sequence[str],
                      query: str) -> np.ndarray:
    """``corr_data[i] = Pearson(label_query, label_i)`` for each of ``attribute_names`` (NaN -> 0)."""
    labels = np.asarray(train_labels, np.float64)
    missing = [a for a in attribute_names if a not in train_names]
    if missing:
        raise MetricError(f"CD: oracle attributes {missing} have no training labels "
                          f"(training label columns: {list(train_names)})")
    if labels.ndim != 2 or labels.shape[1] != len(train_names):
        raise MetricError(f"CD: training labels of shape {labels.shape} do not match "
                          f"{len(train_names)} attribute names")
    col = {a: i for i, a in enumerate(train_names)}
    q = labels[:, col[_check_query(train_names, query)]]
    return np.array([pearson(q, labels[:, col[a]]) for a in attribute_names])


def _check_query(names: Sequence[str], query: str) -> str:
    if query not in names:
        raise MetricError(f"CD: query attribute {query!r} is not a training label column ({list(names)})")
    return query


class CorrelationDifference:
    """CD (lower is better): how far the CFs' attribute co-changes are from the data correlations."""

    name = "CD"
    roles = ("oracle",)

    def __init__(self, oracle: nn.Module, query: str, train_labels: np.ndarray | Tensor,
                 train_attribute_names: Sequence[str], subset: Subset = "successful"):
        self.oracle, self.subset = oracle, subset
        self.names = list(getattr(oracle, "attribute_names", []))
        if not self.names:
            raise MetricError("CD: the oracle has no `attribute_names`")
        self.q = _query_index(self.names, query, "CD")
        labels = train_labels.cpu().numpy() if torch.is_tensor(train_labels) else train_labels
        self.corr_data = data_correlations(labels, list(train_attribute_names), self.names, query)
        self.deltas: list[np.ndarray] = []
        self.ids: list[np.ndarray] = []
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        if not keep.any():
            return
        self.ids.append(batch.sample_id[keep].cpu().numpy().astype(np.int64))
        bx = _oracle_bits(batch, self.oracle, "x").double()
        bcf = _oracle_bits(batch, self.oracle, "cf").double()
        if bx.shape[1] != len(self.names):
            raise MetricError(f"CD: oracle returned {bx.shape[1]} attributes, attribute_names has "
                              f"{len(self.names)}")
        self.deltas.append((bcf - bx)[keep].cpu().numpy())

    def compute(self) -> dict[str, float]:
        deltas = np.concatenate(self.deltas) if self.deltas else np.zeros((0, len(self.names)))
        require(len(deltas), 2, "CD", self.subset)
        corr_cf = np.array([pearson(deltas[:, i], deltas[:, self.q]) for i in range(len(self.names))])
        self.corr_cf = corr_cf
        self.n = {"CD": len(deltas)}
        return {"CD": float(np.abs(corr_cf - self.corr_data).sum())}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        """CD of each resample: count-weighted Pearson correlations of the drawn rows' deltas."""
        if not self.deltas:
            return {"CD": np.full(len(resamples), np.nan)}
        d = np.concatenate(self.deltas)
        w = resamples.weights(np.concatenate(self.ids))  # (B, m)
        corr = weighted_pearson(d, d[:, self.q], w)  # (B, A)
        cd = np.abs(corr - self.corr_data[None]).sum(1)
        return {"CD": np.where(w.sum(1) >= 2, cd, np.nan)}


class OracleFlipRate:
    """FR_oracle: % of inputs whose CF the oracle assigns to the target value of the query."""

    name = "FR_oracle"
    roles = ("oracle",)

    def __init__(self, oracle: nn.Module, query: str, subset: Subset = "all"):
        self.oracle, self.subset = oracle, subset
        self.q = _query_index(list(getattr(oracle, "attribute_names", [])), query, "FR_oracle")
        self.hits = 0
        self.total = 0
        self.samples = Samples()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        if not keep.any():
            return
        says = _oracle_bits(batch, self.oracle, "cf")[:, self.q].long()
        hit = (says == batch.target.long())[keep]
        self.samples.add(batch.sample_id[keep], hit)
        self.hits += int(hit.sum())
        self.total += int(keep.sum())

    def compute(self) -> dict[str, float]:
        require(self.total, 1, "FR_oracle", self.subset)
        self.n = {"FR_oracle": self.total}
        return {"FR_oracle": 100.0 * self.hits / self.total}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {"FR_oracle": weighted_means(self.samples, resamples, scale=100.0)}

    def per_sample(self) -> dict[str, Samples]:
        return {"FR_oracle": self.samples}
