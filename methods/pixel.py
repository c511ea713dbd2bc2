"""The pixel attack (method ``pixel``; the row ``pixel_attack``): projected gradient descent on the image against
the classifier, with no generator (Madry et al., ICLR 2018, without the random start).

It flips the classifier with an edit inside a small l-inf or l2 ball, which is no counterfactual: the
sanity row of the benchmark, ranked like every method, that the protocol's semantic columns (FR_oracle,
GT_L1_region, GT precision / recall) must catch. Each of ``steps`` iterations lowers the cross-entropy
towards the target (``methods/pgd.py``: the sign step for l-inf, the unit-gradient step for l2, then the
projection into the ``eps`` ball around the input and [0, 1]). Budgets are in units of the [0, 1] pixel
range (l-inf 8/255, l2 0.5: the usual CIFAR-size budgets). All ``steps`` run (no early stop), so the flip
survives the uint8 rounding of the saved counterfactual. Deterministic: the generator is not used.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .base import FAIL_NONFINITE_GRAD, NFE, ActiveBatch, Counterfactuals, finalize, nonfinite
from .guidance import target_ce
from .params import PixelParams
from .pgd import from_unit, pgd_step, to_unit


@torch.enable_grad()
def loss_grad(models: TaskModels, u: Tensor, target: Tensor) -> Tensor:
    """Gradient in ``u`` (images in [0, 1]) of the cross-entropy towards ``target``."""
    u_in = u.detach().requires_grad_(True)
    return torch.autograd.grad(target_ce(models.classifier(from_unit(u_in)), target).sum(), u_in)[0]


class PixelAttack:
    """PGD in pixel space behind the Method interface (a ranked method, not a reference row)."""

    roles = ("classifier",)

    def __init__(self, name: str, params: PixelParams):
        self.name, self.params = name, params

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals:
        p, nfe = self.params, NFE(len(x))
        models = nfe.counted(models)
        b = ActiveBatch(x, nfe, cf=x.clone())
        s = b.start(u0=to_unit(x), target=target.to(x.device))
        s.u = s.u0.clone()
        for _ in range(p.steps):
            if len(b) == 0:
                break
            g = loss_grad(models, s.u, s.target)
            bad = nonfinite(g)
            b.fail(bad, FAIL_NONFINITE_GRAD)
            s.u = pgd_step(s.u, g, s.u0, p.norm, p.step_size, p.eps)
            b.keep((~bad).cpu())
        if len(b):
            b.record(cf=from_unit(s.u))
        steps = torch.full((len(x),), p.steps, dtype=torch.int64)
        return finalize(x, b.out["cf"], target, models, steps, b.failed, b.reason, nfe)
