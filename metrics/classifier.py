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
    """FR: % of inputs in ``subset`` (default all) with ``f(cf) == y'``.

    With two classes it also counts which class the classifier reads each input and each counterfactual as
    (``record["classifier_reads"]``, into metrics.json): a row whose counterfactuals all read as one class
    whatever their input's class regenerates the image rather than edits it, and its FR is then the share of
    inputs of the other class (``vcebench.report.validity.regenerating_rows``)."""

    name = "FR"
    roles = ("classifier",)

    def __init__(self, subset: Subset = "all"):
        self.subset = subset
        self.hits = 0
        self.total = 0
        self.samples = Samples()
        self.n: dict[str, int] = {}
        self.reads = {"inputs": np.zeros(2, np.int64), "counterfactuals": np.zeros(2, np.int64)}
        self.binary = True

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        self.hits += int(batch.flipped[keep].sum())
        self.total += int(keep.sum())
        self.samples.add(batch.sample_id[keep], batch.flipped[keep])
        target, flipped = batch.target[keep].long(), batch.flipped[keep].bool()
        if self.binary and bool(((target == 0) | (target == 1)).all()):
            read = torch.where(flipped, target, 1 - target)  # f(cf): y' where it flipped, else f(x) = 1 - y'
            self.reads["inputs"] += np.bincount((1 - target).cpu().numpy(), minlength=2)
            self.reads["counterfactuals"] += np.bincount(read.cpu().numpy(), minlength=2)
        else:
            self.binary = False

    @property
    def record(self) -> dict:
        """How many inputs and counterfactuals the classifier reads as class 0 / 1 (two classes only)."""
        if not self.binary or not self.total:
            return {}
        return {"classifier_reads": {k: [int(c) for c in v] for k, v in self.reads.items()}}

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
