"""Guidance losses and gradients shared by every method.

The classifier always returns (N, 2) logits (``vcebench.models.base.BinaryHead``), so the
target's log-odds ``logits[y'] - logits[1 - y']`` is the sigmoid logit of a 1-logit head
(DiME's ``selected = (2y' - 1) * logit``) and the softmax log-odds of a 2-logit head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def p_target(logits: Tensor, target: Tensor) -> Tensor:
    """softmax(f(X))[y'] (FiRe Eq. target_prob)."""
    return logits.float().softmax(dim=1).gather(1, target.view(-1, 1).to(logits.device)).squeeze(1)


def target_log_odds(logits: Tensor, target: Tensor) -> Tensor:
    """s_{y'} - s_{1-y'}: the log-odds of the target class, (N,)."""
    t = target.view(-1, 1).to(logits.device)
    return (logits.gather(1, t) - logits.gather(1, 1 - t)).squeeze(1)


def target_ce(logits: Tensor, target: Tensor) -> Tensor:
    """Per-sample cross-entropy towards the target, (N,)."""
    return F.cross_entropy(logits.float(), target.to(logits.device).long(), reduction="none")


def logit_loss(logits: Tensor, target: Tensor) -> Tensor:
    """DiME's ``use_logits`` loss ``-(2y' - 1) * logit``: minus the target log-odds, (N,)."""
    return -target_log_odds(logits, target)


def tv_loss(d: Tensor) -> Tensor:
    """Anisotropic total variation of ``d`` (mean absolute neighbour difference), (N,)."""
    dh = (d[:, :, 1:, :] - d[:, :, :-1, :]).abs().flatten(1).mean(1)
    dw = (d[:, :, :, 1:] - d[:, :, :, :-1]).abs().flatten(1).mean(1)
    return dh + dw


def bce_loss(logits: Tensor, target: Tensor) -> Tensor:
    """FastDiME_Med's classifier loss (models/diffusion.py:601-612, ``F.binary_cross_entropy(sigmoid(logit),
    y')``): the cross-entropy towards the target, which is that BCE for a 1-logit head read as ``[0, logit]``."""
    return target_ce(logits, target)


CLASSIFIER_LOSSES = {"logit": logit_loss, "bce": bce_loss}


def mean_l1_grad(z: Tensor, x: Tensor) -> Tensor:
    """Gradient in ``z`` of FastDiME_Med's per-sample L1 (models/diffusion.py:313-325: ``nn.L1Loss(reduction=
    'none')`` then the mean over the pixels): ``sign(z - x) / (C H W)``."""
    return torch.sign(z - x) / z[0].numel()


def l1_grad(z: Tensor, x: Tensor) -> Tensor:
    """Gradient of ``||z - x||_1`` with respect to ``z`` (DiME's l1 term on the noisy state; on the clean image
    under ``l1_on: clean``)."""
    return torch.sign(z - x)


def perceptual(models, x: Tensor, ref: Tensor) -> Tensor:
    """``models.perceptual(x, ref) -> (N,)``; a clear error when the role was not loaded."""
    if models.perceptual is None:
        raise ValueError("this method's perceptual weight is > 0 but the `perceptual` model role was not "
                         "loaded; load it (vcebench.models.load_task_models roles=...) or set the weight to 0")
    return models.perceptual(x, ref)


def mean_abs_normalize(g: Tensor, eps: float = 1e-12) -> Tensor:
    """g / mean|g| per sample (FiRe's mean-absolute gradient normalisation)."""
    return g / g.abs().flatten(1).mean(1).clamp_min(eps).view(-1, *([1] * (g.ndim - 1)))


@torch.enable_grad()
def guidance_grads(models, x_t: Tensor, x: Tensor, target: Tensor, cls_scale: float,
                   perc_weight: float, cls_loss: str = "logit") -> tuple[Tensor, Tensor]:
    """Gradients w.r.t. the clean image ``x_t`` of ``cls_scale * logit_loss(f(x_t))`` (``cls_loss: bce``:
    FastDiME_Med's :func:`bce_loss`) and of ``perc_weight * Perc(x_t, x)`` (DiME ``clean_class_cond_fn`` /
    ``dist_cond_fn``); one backward each."""
    x_in = x_t.detach().requires_grad_(True)
    loss_c = cls_scale * CLASSIFIER_LOSSES[cls_loss](models.classifier(x_in), target).sum()
    g_cls = torch.autograd.grad(loss_c, x_in)[0]
    if perc_weight == 0:
        return g_cls, torch.zeros_like(g_cls)
    loss_p = perc_weight * perceptual(models, x_in, x).sum()
    g_perc = torch.autograd.grad(loss_p, x_in)[0]
    return g_cls, g_perc


@torch.enable_grad()
def smoothgrad(classifier: nn.Module, x: Tensor, target: Tensor, noise: Tensor, sigma: float) -> Tensor:
    """SmoothGrad attribution (Smilkov et al. 2017) of the target log-odds, averaged over channels.

    ``noise`` is (B, N, C, H, W): N perturbed copies per sample, all in ONE batched pass.
    Returns A = mean_copies |grad_X s_target| reduced over channels, (B, 1, H, W).
    The target log-odds is used instead of the raw target logit so that a 1-logit head exposed as
    ``[0, l]`` has a non-zero attribution for target 0 as well.
    """
    b, n = noise.shape[:2]
    xs = (x.detach().unsqueeze(1) + sigma * noise).flatten(0, 1).requires_grad_(True)
    s = target_log_odds(classifier(xs), target.view(-1, 1).expand(-1, n).reshape(-1))  # copies by expand (graph-safe)
    g = torch.autograd.grad(s.sum(), xs)[0]
    return g.abs().view(b, n, *x.shape[1:]).mean(1).mean(1, keepdim=True)
