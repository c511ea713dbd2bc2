"""A generative run's training budget in the units two recipes are compared in: steps x batch (images seen) and
FLOPs.

The FLOPs of a step are counted, not estimated: one step of the run's own objective (``GenerativeLoss``), its
forward and its backward, under ``FlopCounterMode`` (``vcebench.costs.measure.FLOP_CONVENTION``; the optimiser's
few elementwise operations per parameter are not counted). A step's count does not depend on the drawn noise
(the objectives compute every row of the batch, whatever its draw), only on its mode (the pmf's flow-matching
warm start against its MeanFlow steps), so one step of each mode times the steps in that mode is the run's total.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import torch
from torch import Tensor, nn

from ..models.training.generative import GenerativeLoss
from .measure import FLOP_CONVENTION, count_flops


def step_flops(model: nn.Module, loss_fn: GenerativeLoss, x: Tensor, step: int) -> int:
    """FLOPs of training step ``step`` on batch ``x`` (float images in [-1, 1]): the loss and its backward, on a
    copy of ``model`` (the model's weights and gradients are left as they are)."""
    net = copy.deepcopy(model).train()

    def one_step() -> None:
        loss = loss_fn(net, x, torch.Generator().manual_seed(step), step)
        (loss[0] if isinstance(loss, tuple) else loss).backward()

    return count_flops(one_step)[1].total


def run_budget(model: nn.Module, loss_fn: GenerativeLoss, steps: int, x: Tensor) -> dict[str, Any]:
    """The budget of a ``steps``-step run of ``loss_fn`` at the batch of ``x``: steps, batch, images seen, and
    FLOPs (per step of each mode, named by ``loss_fn.mode_names``, and in all)."""
    modes = Counter(loss_fn.mode(s) for s in range(steps))
    first = {m: next(s for s in range(steps) if loss_fn.mode(s) == m) for m in modes}
    per_mode = {m: step_flops(model, loss_fn, x, first[m]) for m in modes}
    bs = int(x.shape[0])
    return {"steps": int(steps), "batch_size": bs, "images": int(steps) * bs,
            "flops": int(sum(per_mode[m] * n for m, n in modes.items())),
            "flops_per_step": [{"mode": loss_fn.mode_names.get(m, str(m)), "steps": int(n), "flops": int(per_mode[m])}
                               for m, n in sorted(modes.items(), key=lambda kv: first[kv[0]])],
            "convention": FLOP_CONVENTION + "; one training step = the loss's forward and backward"}


def total_budget(own: dict[str, Any], start: dict[str, Any] | None) -> dict[str, Any]:
    """A continued run's budget with the budget of the weights it started from (``start``: None, none): steps,
    images and FLOPs added."""
    if start is None:
        return own
    return {**own, "start": start, "total": {k: int(start.get("total", start)[k]) + int(own[k])
                                             for k in ("steps", "images", "flops")}}
