"""Closeness of a counterfactual to its input: FVA / FS, S^3, L1.

- FVA / FS (DiME ``compute_FVA.py``): cosine similarity of identity embeddings of x and cf
  (reference: VGGFace2 ResNet-50; real faces here: facenet-pytorch InceptionResnetV1-VGGFace2;
  synthetic: the trained identity network; ``models.names['identity']`` says which).
  FVA = % with cosine > 0.5, FS = mean cosine; successful counterfactuals.
- S^3 (ACE ``compute_SimSiamSimilarity.py``): mean cosine similarity of SimSiam embeddings
  (ResNet-50 + projector, no predictor); correctly classified inputs with all their CFs.
- L1 (FastDiME medical protocol): mean ``|x - cf|`` over pixels and channels in [0, 1] units,
  on the uint8-quantised images the evaluation reads.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from .base import EvalBatch, Subset, cosine, embed, require
from .bootstrap import Resamples, Samples, weighted_means


class FaceVerification:
    """FVA (% cosine > 0.5) and FS (mean cosine) of identity embeddings (higher is better)."""

    name = "FVA"
    roles = ("identity",)
    threshold = 0.5  # DiME compute_FVA.py: dist > 0.5

    def __init__(self, identity: nn.Module, subset: Subset = "successful"):
        self.net, self.subset = identity, subset
        self.cos, self.match = Samples(), Samples()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        if not keep.any():
            return
        c = cosine(embed(batch, self.net, "identity", "x"), embed(batch, self.net, "identity", "cf"))[keep]
        ids = batch.sample_id[keep]
        self.cos.add(ids, c)
        self.match.add(ids, (c > self.threshold).double())

    def compute(self) -> dict[str, float]:
        require(self.cos.count, 1, "FVA/FS", self.subset)
        self.n = {"FVA": self.cos.count, "FS": self.cos.count}
        return {"FVA": 100.0 * self.match.mean(), "FS": self.cos.mean()}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {"FVA": weighted_means(self.match, resamples, scale=100.0), "FS": weighted_means(self.cos, resamples)}

    def per_sample(self) -> dict[str, Samples]:
        return {"FVA": self.match, "FS": self.cos}


class SimSiamSimilarity:
    """S^3: mean cosine similarity of SimSiam embeddings of x and cf (higher is better)."""

    name = "S3"
    roles = ("simsiam",)

    def __init__(self, simsiam: nn.Module, subset: Subset = "correct"):
        self.net, self.subset = simsiam, subset
        self.cos = Samples()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        if keep.any():
            c = cosine(embed(batch, self.net, "simsiam", "x"), embed(batch, self.net, "simsiam", "cf"))[keep]
            self.cos.add(batch.sample_id[keep], c)

    def compute(self) -> dict[str, float]:
        require(self.cos.count, 1, "S3", self.subset)
        self.n = {"S3": self.cos.count}
        return {"S3": self.cos.mean()}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {"S3": weighted_means(self.cos, resamples)}

    def per_sample(self) -> dict[str, Samples]:
        return {"S3": self.cos}


class L1Distance:
    """L1: mean |x - cf| per sample in [0, 1] units, averaged over samples (lower is better)."""

    name = "L1"
    roles: tuple[str, ...] = ()

    def __init__(self, subset: Subset = "all"):
        self.subset = subset
        self.l1 = Samples()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        keep = batch.subset(self.subset)
        if keep.any():
            self.l1.add(batch.sample_id[keep], ((batch.x - batch.cf).abs().flatten(1).double().mean(1) / 2)[keep])

    def compute(self) -> dict[str, float]:
        require(self.l1.count, 1, "L1", self.subset)
        self.n = {"L1": self.l1.count}
        return {"L1": self.l1.mean()}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {"L1": weighted_means(self.l1, resamples)}

    def per_sample(self) -> dict[str, Samples]:
        return {"L1": self.l1}
