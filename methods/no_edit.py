"""The do-nothing baseline: the input itself as its "counterfactual" (method name ``input``).

It runs through the same DAG and evaluation as every method, so its row gives each metric's
value for an unedited image: L1 = 0, FR = 0 (the target is ``1 - f(x)`` and ``f(x)`` is
unchanged), FR_oracle = the share of inputs on which the oracle's query bit already disagrees
with the classifier (the floor every method's FR_oracle starts from), COUT and GT_L1 of no edit.
Metrics over successful CFs (FID, KID, FVA, MNAC, CD) have no rows and are reported as skipped.
It needs only the classifier (one call, for the final flip check).
"""

from __future__ import annotations

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .base import NFE, Counterfactuals, finalize
from .params import NoEditParams


class NoEdit:
    roles = ("classifier",)

    def __init__(self, name: str = "input", params: NoEditParams | None = None):
        self.name, self.params = name, params or NoEditParams()

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels, generator: SampleGenerators) -> Counterfactuals:
        n = len(x)
        failed = torch.zeros(n, dtype=torch.bool)
        return finalize(x, x.clone(), target, models, torch.zeros(n, dtype=torch.int64), failed,
                        torch.zeros(n, dtype=torch.int64), NFE(n))
