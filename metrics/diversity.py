"""sigma_L (optional): diversity of the counterfactuals of one input over seeds.

Mean pairwise perceptual (LPIPS) distance between the S counterfactuals an input gets
from S seeds, averaged over inputs (higher = more diverse explanations). The distance is
any ``(x, y) -> (N,)`` network, e.g. ``models.perceptual`` or an LPIPS module built from
local weights (never downloaded). The CFs over seeds travel in ``EvalBatch.extra['cf_seeds']``
with shape (S, N, C, H, W); the evaluation does not produce them by default.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import torch
from torch import Tensor

from .base import EvalBatch, MetricError, Subset, require


class SigmaL:
    name = "sigma_L"
    higher_is_better = {"sigma_L": True}  # not registered (optional): its class is its one declaration
    roles = ("perceptual",)

    def __init__(self, distance: Callable[[Tensor, Tensor], Tensor], subset: Subset = "all"):
        self.distance, self.subset = distance, subset
        self.sum = 0.0
        self.count = 0
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        cfs = batch.extra.get("cf_seeds")
        if cfs is None or cfs.ndim != 5 or cfs.shape[0] < 2 or cfs.shape[1] != batch.x.shape[0]:
            raise MetricError("sigma_L needs EvalBatch.extra['cf_seeds'] of shape (S >= 2, N, C, H, W)")
        keep = batch.subset(self.subset)
        if not keep.any():
            return
        with torch.no_grad():
            pairs = [self.distance(cfs[i][keep], cfs[j][keep]).double().view(-1)
                     for i, j in combinations(range(cfs.shape[0]), 2)]
        per_input = torch.stack(pairs).mean(0)
        self.sum += float(per_input.sum())
        self.count += int(per_input.numel())

    def compute(self) -> dict[str, float]:
        require(self.count, 1, "sigma_L", self.subset)
        self.n = {"sigma_L": self.count}
        return {"sigma_L": self.sum / self.count}
