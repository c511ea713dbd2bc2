"""The true counterfactual as a row (method name ``truth``, label *Ground truth*): the synthetic renderer's image
of each input with only the query attribute changed (``SyntheticDataset.render_with``).

The sibling of the do-nothing row (methods/no_edit.py): it runs through the same explain / evaluate / report
path, so every metric column gets the value of the right edit next to the value of no edit, and a column
that scores the truth no better than the input, or a method better than the truth, is marked in the task's
table (vcebench/report/validity.py).

The target is the harness's, ``1 - f(x)`` (docs/architecture.md), the same for every row; the query attribute is
set to it. On an input the classifier gets right that is the true label flipped, so the CF is exactly the
renderer's ground truth (GT_L1 = 0); on an input it gets wrong, the target is the true label, the input
already shows it, and the row returns the input as rendered (no edit: the classifier's mistake is not the
image's). It exists on synthetic tasks only (``registry.MethodSpec.truth``): the harness builds it with the
task's renderer. It runs no network but the final flip check, and its cost is the renderer's, not a method's:
the tables leave its cost columns empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .base import NFE, Counterfactuals, finalize
from .params import GroundTruthParams

if TYPE_CHECKING:
    from vcebench.data.synthetic import SyntheticDataset


class GroundTruth:
    roles = ("classifier",)

    def __init__(self, name: str = "truth", params: GroundTruthParams | None = None, *,
                 renderer: SyntheticDataset, attribute: str):
        self.name, self.params = name, params or GroundTruthParams()
        self.renderer, self.attribute = renderer, attribute

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels, generator: SampleGenerators) -> Counterfactuals:
        n = len(x)
        cf = self.renderer.render_with(generator.sample_ids, self.attribute, target.cpu()).to(x.device)
        zeros = torch.zeros(n, dtype=torch.int64)
        return finalize(x, cf, target, models, zeros, torch.zeros(n, dtype=torch.bool), zeros.clone(), NFE(n))
