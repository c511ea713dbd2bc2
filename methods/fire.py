"""FiRe: fixed-noise refinement for visual counterfactual explanations (FiRe paper, Sec. 3, Algorithm 1).

Equation names refer to the paper's labels (``eq:fixed_noise_init`` ... ``eq:blending``).
Choices the paper leaves open, made here:

- The loss at step k is taken on ``X_k(Z) = M_soft^k * G(Z_t^k, t) + (1 - M_soft^k) * X0``
  (PROTOCOL.md): the current soft mask re-blends the PMF prediction G(Z_t^k) computed at the end
  of step k - 1, whose autograd graph is reused (no second PMF forward). At k = 0 the PMF is run
  once on Z_t^0.
- Attribution (``A^k``) uses the target log-odds ``s_{y'} - s_{1-y'}`` (the raw target logit of a
  1-logit head exposed as ``[0, l]`` is constant for y' = 0); SmoothGrad averages ``|grad|`` over
  the N noisy copies and over channels.
- ``Feather(M, w)``: 1 on M, falling linearly to 0 over w pixels (chessboard distance).
- Ablations (Tables 4-6): ``mode = one_step`` is one guided update (K = 1); ``mode = reverse``
  runs K guided steps over noise levels ``t (1 - k/K)``, re-noising the blended prediction with
  fresh noise at each level; ``mask = maskdime`` builds MaskDiME's nested top-k masks from the
  plain classifier gradient at X_k each step (no union memory, binary blend mask); ``mask = none``
  edits everywhere and skips the attribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from vcebench.models.base import TaskModels
from vcebench.rng import SampleGenerators

from .base import (
    FAIL_NONFINITE_GRAD,
    FAIL_NONFINITE_INPUT,
    FAIL_NONFINITE_STATE,
    NFE,
    Counterfactuals,
    finalize,
    nonfinite,
    require,
)
from .guidance import mean_abs_normalize, p_target, perceptual, smoothgrad, target_ce, tv_loss
from .masks import dilate_radius, feather, largest_component, nested_topk, top_ratio


@dataclass(frozen=True)
class FireParams:
    """FiRe hyperparameters; defaults = the paper's (Sec. 4.1 "Implementation details")."""

    t: float = 0.4  # fixed noise level
    K: int = 15  # max refinement updates
    p_flip: float = 0.85  # early-stopping threshold on p_target
    eta: float = 0.02  # base guidance scale (Eq. adaptive_step)
    smoothgrad_n: int = 20  # SmoothGrad copies, one batched pass
    smoothgrad_sigma: float = 0.15  # SmoothGrad noise std (images in [-1, 1])
    lambda_cls: float = 1.0
    lambda_perc: float = 0.2
    lambda_tv: float = 0.01
    rho: float = 0.05  # saliency ratio (task specific)
    dilation: int = 2  # r: dilation radius in pixels
    feather: int = 3  # w: feather width in pixels
    mode: Literal["fixed", "one_step", "reverse"] = "fixed"
    mask: Literal["fire", "maskdime", "none"] = "fire"
    adaptive_step: bool = True  # false: constant eta
    early_stop: bool = True
    compaction: bool = True  # finished samples leave the batch
    maskdime_rho: float = 0.5  # mask = maskdime: share of the top-k kept for the blend mask

    def validate(self, section: str) -> None:
        require(0 < self.t < 1, section, f"t must be in (0, 1), got {self.t}")
        require(self.K >= 1, section, f"K must be >= 1, got {self.K}")
        require(0 < self.rho <= 1, section, f"rho must be in (0, 1], got {self.rho}")
        require(0 < self.p_flip <= 1, section, f"p_flip must be in (0, 1], got {self.p_flip}")
        require(self.smoothgrad_n >= 1, section, "smoothgrad_n must be >= 1")
        require(self.dilation >= 0 and self.feather >= 0, section, "dilation and feather must be >= 0")


@dataclass
class FireResult:
    x_cf: Tensor  # X_cf (unclamped)
    z: Tensor  # the noisy state X_cf was predicted from
    z0: Tensor  # Z_t^0
    m_hard: Tensor  # union hard mask of the last update
    m_soft: Tensor  # soft mask of the last blend
    steps: Tensor
    p_final: Tensor  # p_target(X_cf)
    failed: Tensor
    reason: Tensor


def fire_refine(x0: Tensor, target: Tensor, models: TaskModels, generator: SampleGenerators, p: FireParams,
                nfe: NFE) -> FireResult:
    """Algorithm 1 (FiRe: fixed-noise counterfactual refinement), batched with per-sample early stopping."""
    f, pmf = models.classifier, models.pmf
    n, dev = len(x0), x0.device
    K = 1 if p.mode == "one_step" else p.K
    levels = [p.t * (1 - k / K) for k in range(K)] if p.mode == "reverse" else [p.t] * K
    ones = torch.ones_like(x0[:, :1])
    res = FireResult(x_cf=x0.clone(), z=torch.zeros_like(x0), z0=torch.zeros_like(x0), m_hard=torch.zeros_like(ones),
                     m_soft=torch.zeros_like(ones), steps=torch.zeros(n, dtype=torch.long),
                     p_final=torch.zeros(n), failed=nonfinite(x0).cpu(), reason=torch.zeros(n, dtype=torch.long))
    res.reason[res.failed] = FAIL_NONFINITE_INPUT

    # Line 1, Eq. fixed_noise_init: Z_t^0 = (1 - t) X0 + t Z^0, Z^0 ~ N(0, I).
    eps = generator.fork("fire/init").randn(*x0.shape[1:], device=dev)
    z0_all = (1 - p.t) * x0 + p.t * eps
    res.z0 = z0_all.clone()
    rows = torch.nonzero(~res.failed).flatten()  # global indices of the batch rows
    if len(rows) == 0:
        return res
    r = rows.to(dev)
    x0a, z0a, eps_a, tgt = x0[r], z0_all[r], eps[r], target.to(dev)[r]
    za = z0a.clone()
    xk = x0a.clone()  # Line 2: X_0 is the first clean image
    m_hard = torch.zeros_like(x0a[:, :1])  # M_hard^{-1} = 0
    p_k = torch.zeros(len(rows), device=dev)
    live = torch.ones(len(rows), dtype=torch.bool)  # rows still recording (== all rows under compaction)
    fwd = None  # (Z leaf, G(Z leaf), forward rows, selection of current rows in it): the reusable PMF graph
    sg_gen = generator.fork("fire/smoothgrad")
    rn_gen = generator.fork("fire/renoise")

    for k in range(K):  # Line 3
        t_k = levels[k]
        # Lines 4-7, Eqs. orig_mask / hard_mask / soft_mask.
        if p.mask == "fire":
            noise = sg_gen.subset(rows.tolist()).randn(p.smoothgrad_n, *x0.shape[1:], device=dev)
            attribution = smoothgrad(f, xk, tgt, noise, p.smoothgrad_sigma)
            nfe.add("classifier", rows, times=p.smoothgrad_n, bwd=True)
            m_orig = dilate_radius(largest_component(top_ratio(attribution, p.rho)), p.dilation)
            m_hard = torch.maximum(m_hard, m_orig)
            m_soft = feather(m_orig, p.feather)
        elif p.mask == "maskdime":
            with torch.enable_grad():
                x_in = xk.detach().requires_grad_(True)
                grad_x = torch.autograd.grad(target_ce(f(x_in), tgt).sum(), x_in)[0]
            nfe.add("classifier", rows, bwd=True)
            m_hard, m_soft = nested_topk(grad_x.abs().mean(1, keepdim=True), p.rho, p.maskdime_rho,
                                         2 * p.dilation + 1)
        else:
            m_hard, m_soft = torch.ones_like(m_hard), torch.ones_like(m_hard)

        # Line 8, Eqs. joint_loss and clean_to_noisy_gradient: grad of L_joint on X_k(Z) w.r.t. Z_t^k,
        # through the PMF prediction and the soft-mask blend.
        with torch.enable_grad():
            if fwd is None:
                leaf = za.detach().requires_grad_(True)
                fwd = (leaf, pmf.predict_clean(leaf, t_k), rows, torch.arange(len(rows), device=dev))
                nfe.add("pmf", rows)
            leaf, g_full, fwd_rows, sel = fwd
            x_of_z = m_soft * g_full[sel] + (1 - m_soft) * x0a
            loss = p.lambda_cls * target_ce(f(x_of_z), tgt)
            nfe.add("classifier", rows, bwd=True)
            if p.lambda_perc:
                loss = loss + p.lambda_perc * perceptual(models, x_of_z, x0a)
                nfe.add("perceptual", rows, bwd=True)
            if p.lambda_tv:
                loss = loss + p.lambda_tv * tv_loss(x_of_z - x0a)
            grad = torch.autograd.grad(loss.sum(), leaf)[0][sel]
            nfe.add_bwd("pmf", fwd_rows)
        grad = mean_abs_normalize(grad)

        # Line 9, Eq. adaptive_step.
        if not p.adaptive_step:
            eta_k = torch.full_like(p_k, p.eta)
        elif k == 0:
            eta_k = torch.full_like(p_k, 0.3 * p.eta)
        else:
            eta_k = p.eta * k / (K - 1) * ((p.p_flip - p_k) / p.p_flip).clamp_min(0)

        # Line 10, Eq. masked_update: Z^{k+1} = M_hard (Z^k - eta_k g) + (1 - M_hard) Z^0.
        z_next = m_hard * (za - eta_k.view(-1, 1, 1, 1) * grad) + (1 - m_hard) * z0a

        # Lines 11-12, Eqs. pmf_prediction and blending; keep the graph for the next gradient.
        reuse = k < K - 1 and p.mode != "reverse"
        with torch.set_grad_enabled(reuse):
            leaf = z_next.detach().requires_grad_(reuse)
            g_next = pmf.predict_clean(leaf, t_k)
        nfe.add("pmf", rows)
        x_next = m_soft * g_next.detach() + (1 - m_soft) * x0a
        with torch.no_grad():
            p_next = p_target(f(x_next), tgt)
        nfe.add("classifier", rows)

        # Failures: the sample returns its input; the rest of the batch goes on.
        bad_grad, bad_state = nonfinite(grad).cpu(), (nonfinite(x_next) | ~torch.isfinite(p_next)).cpu()
        bad = bad_grad | bad_state
        rec = live & ~bad
        gi = rows[rec]
        rd = rec.to(dev)
        res.x_cf[gi.to(dev)] = x_next[rd].detach()
        res.z[gi.to(dev)] = z_next[rd].detach()
        res.m_hard[gi.to(dev)] = m_hard[rd]
        res.m_soft[gi.to(dev)] = m_soft[rd]
        res.steps[gi] = k + 1
        res.p_final[gi] = p_next[rd].cpu()
        newly = live & bad
        res.failed[rows[newly]] = True
        res.reason[rows[newly & bad_grad]] = FAIL_NONFINITE_GRAD
        res.reason[rows[newly & ~bad_grad]] = FAIL_NONFINITE_STATE

        # Lines 13-14: early stopping at P_flip.
        done = (p_next >= p.p_flip).cpu() if p.early_stop else torch.zeros_like(bad)
        live = live & ~bad & ~done
        if not live.any():
            break
        za, p_k, xk = z_next.detach(), p_next.detach(), x_next.detach()
        fwd = (leaf, g_next, rows, torch.arange(len(rows), device=dev)) if reuse else None
        if p.mode == "reverse" and k + 1 < K:  # re-noise the prediction at the next, lower level
            t_n = levels[k + 1]
            za = (1 - t_n) * xk + t_n * rn_gen.subset(rows.tolist()).randn(*x0.shape[1:], device=dev)
            z0a = (1 - t_n) * x0a + t_n * eps_a
        keep = live if p.compaction else ~bad
        if not keep.all():  # batch compaction: finished / failed samples leave the batch
            kd = keep.to(dev)
            rows, live = rows[keep], live[keep]
            x0a, z0a, eps_a, tgt, za, xk, m_hard, p_k = (v[kd] for v in (x0a, z0a, eps_a, tgt, za, xk, m_hard, p_k))
            if fwd is not None:
                fwd = (fwd[0], fwd[1], fwd[2], fwd[3][kd])
    return res


class FiRe:
    """FiRe and its ablation variants (``fire_<variant>``) behind the Method interface."""

    def __init__(self, name: str, params: FireParams):
        self.name, self.params = name, params
        self.roles = ("classifier", "pmf") + (("perceptual",) if params.lambda_perc else ())

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals:
        nfe = NFE(len(x))
        r = fire_refine(x, target, models, generator, self.params, nfe)
        info = {"mask_hard": r.m_hard.bool().cpu(), "mask_soft": r.m_soft.half().cpu(), "p_target": r.p_final}
        return finalize(x, r.x_cf, target, models, r.steps, r.failed, r.reason, nfe, info)
