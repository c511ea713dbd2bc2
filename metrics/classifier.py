"""Metrics read off the explained classifier: FR (flip rate) and MAD.

FR (DiME / ACE): share of inputs whose counterfactual the classifier assigns to the target
``y' = 1 - f(x)``, in %, over *all* explained inputs. The evaluation recomputes
``f(cf)`` on the stored (uint8) counterfactuals and passes it as ``EvalBatch.flipped``.
MAD (FastDiME, medical protocol): mean ``|p(x) - p(cf)|`` of the classifier's probability of
the positive class (for two classes the same for either class); higher = larger shift.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from .base import EvalBatch, Subset, SubsetMean, classifier_logits, require
from .bootstrap import Resamples, Samples, weighted_means


class FlipRate:
    """FR: % of inputs in ``subset`` (default all) with ``f(cf) == y'``."""

    name = "FR"
    roles = ("classifier",)

    def __init__(self, subset: Subset = "all"):
        self.subset = subset
        self.hits = 0
        self.total = 0
        self.samples = Samples()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        self.hits += int(batch.flipped[keep].sum())
        self.total += int(keep.sum())
        self.samples.add(batch.sample_id[keep], batch.flipped[keep])

    def compute(self) -> dict[str, float]:
        require(self.total, 1, "FR", self.subset)
        self.n = {"FR": self.total}
        return {"FR": 100.0 * self.hits / self.total}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {"FR": weighted_means(self.samples, resamples, scale=100.0)}

    def per_sample(self) -> dict[str, Samples]:
        return {"FR": self.samples}


class MAD(SubsetMean):
    """MAD: mean |p_1(x) - p_1(cf)| of the classifier's softmax probability."""

    name = "MAD"
    roles = ("classifier",)

    def __init__(self, classifier: nn.Module, subset: Subset = "all"):
        super().__init__(subset)
        self.classifier = classifier

    def values(self, batch: EvalBatch, keep: Tensor) -> Tensor:
        p_x = torch.softmax(classifier_logits(batch, self.classifier, "x").double(), 1)[:, 1]
        p_cf = torch.softmax(classifier_logits(batch, self.classifier, "cf").double(), 1)[:, 1]
        return (p_x - p_cf).abs()[keep]
