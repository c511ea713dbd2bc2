"""COUT, the counterfactual transition score (Khorram & Fuxin 2022, C3LT), as ACE computes it.

Reference: ACE ``eval_utils/cout_metrics.py`` (``gen_masks``, ``calculate_cout``, ``auc``)
and ``compute_COUT.py`` (binary datasets, correctly classified inputs ``CC`` with all their
counterfactuals). Per input x with counterfactual cf:

1. pixels ordered by descending ``sum_c |cf - x|``;
2. ``step = max(1, H W // 50)``; for ``k = 1 .. ceil(HW / step)`` the first ``k step`` pixels
   (fewer in the last step) are copied from cf into x: ``cf * M + x * (1 - M)``;
3. ``c_k`` = classifier probability of x's predicted (original) class, ``c'_k = 1 - c_k``,
   with ``k = 0`` the unperturbed x;
4. ``AUC(c) = (c_0 / 2 + c_1 + ... + c_{S-1} + c_S / 2) * step / (H W)``;
5. ``COUT = mean over inputs of AUC(c') - AUC(c)``, in [-1, 1] (higher is better).

Faithful to the reference: the last, shorter step counts as a full step in the scaling
(so the factor is ``S step / HW``, slightly above 1 when ``step`` does not divide ``HW``).
Deliberate differences: ACE min-max normalises the difference map first, which is only a
monotone rescaling for the ordering but gives NaN for ``cf == x``; we order the raw sums
(stable sort, so ties are broken by pixel index, not arbitrarily). The reference
upsamples the mask bilinearly to the image size, an identity here (mask and image share HW).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import EvalBatch, Subset, SubsetMean, classifier_logits

COUT_NUM_STEPS = 50  # ACE `evaluate`: cout_num_steps


def cout_scores(x: Tensor, cf: Tensor, classifier: nn.Module, pred: Tensor | None = None,
                logits_cf: Tensor | None = None) -> Tensor:
    """Per-sample COUT (N,) of (N, C, H, W) images in [-1, 1] under a (N, 2)-logit classifier.

    ``pred`` is the original class of each x (default: the classifier's prediction on x,
    as ACE's binary branch ``label = model(imgs) > 0``). Once every pixel where cf differs from
    x has been inserted, the perturbed image *is* cf; those steps reuse ``classifier(cf)``
    (``logits_cf`` when given) instead of running the classifier again on identical inputs.
    """
    n, _, h, w = x.shape
    hw = h * w
    step = max(1, hw // COUT_NUM_STEPS)
    n_steps = math.ceil(hw / step)
    with torch.no_grad():
        logits_x = classifier(x).double()
        if pred is None:
            pred = logits_x.argmax(1)
        pred = pred.long().view(n, 1)
        p_cf = torch.softmax((classifier(cf) if logits_cf is None else logits_cf).double(), 1).gather(1, pred)
        diff = (cf - x).abs().sum(1).view(n, hw)
        n_changed = (diff > 0).sum(1)
        order = diff.argsort(dim=1, descending=True, stable=True)
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(hw, device=x.device).expand(n, hw))
        c = [torch.softmax(logits_x, 1).gather(1, pred).squeeze(1)]
        for k in range(1, n_steps + 1):
            inserted = min(k * step, hw)
            c_k = p_cf.squeeze(1).clone()
            rows = torch.nonzero(n_changed > inserted).view(-1)  # cf pixels still missing
            if len(rows):
                mask = (rank[rows] < inserted).view(-1, 1, h, w).to(x.dtype)
                perturbed = cf[rows] * mask + x[rows] * (1 - mask)
                c_k[rows] = torch.softmax(classifier(perturbed).double(), 1).gather(1, pred[rows]).squeeze(1)
            c.append(c_k)
        c = torch.stack(c, 1)  # (N, S + 1)
        c_prime = 1 - c

    def auc(curve: Tensor) -> Tensor:
        return (curve[:, 0] / 2 + curve[:, 1:-1].sum(1) + curve[:, -1] / 2) * step / hw

    return auc(c_prime) - auc(c)


class COUT(SubsetMean):
    """COUT over ``subset`` (default: correctly classified inputs, all their CFs)."""

    name = "COUT"
    roles = ("classifier",)

    def __init__(self, classifier: nn.Module, subset: Subset = "correct"):
        super().__init__(subset)
        self.classifier = classifier

    def values(self, batch: EvalBatch, keep: Tensor) -> Tensor:
        pred = classifier_logits(batch, self.classifier, "x").argmax(1)
        logits_cf = classifier_logits(batch, self.classifier, "cf")
        return cout_scores(batch.x[keep], batch.cf[keep], self.classifier, pred[keep], logits_cf[keep])
