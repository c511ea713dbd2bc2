"""FiRe: fixed-noise refinement for visual counterfactual explanations (FiRe paper, Sec. 3, Algorithm 1).

Equation names refer to the paper's labels (``eq:fixed_noise_init`` ... ``eq:blending``).
Choices the paper leaves open, made here:

- The loss at step k is taken on ``X_k(Z) = M_soft^k * G(Z_t^k, t) + (1 - M_soft^k) * X0``
  (``loss_mask: current``, the default; docs/protocol.md): the current soft mask re-blends the PMF
  prediction G(Z_t^k) computed at the end of step k - 1, whose autograd graph is reused (no second PMF
  forward). Algorithm 1's X_k was blended with M_soft^{k-1}: ``loss_mask: previous`` takes the loss on that
  image (at k = 0, where no earlier mask exists, on M_soft^0). At k = 0 the PMF is run once on Z_t^0.
- The gradient is divided by its mean magnitude over the whole image (``grad_norm: image``, the default),
  so a larger mask (rho) also takes a larger step inside it; ``grad_norm: mask`` divides by the mean
  magnitude inside the hard mask, so rho sets where Z moves and not how far.
- TV (``lambda_tv``) is the per-pixel mean of the absolute neighbour differences of ``X - X_0``
  (``tv_reduction: mean``): at 0.01 it is about 1e-4 of the loss, i.e. effectively off;
  ``tv_reduction: sum`` sums over the pixels instead (the weight then acts at any resolution).
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
from functools import partial
from types import SimpleNamespace

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .base import (
    FAIL_NONFINITE_GRAD,
    FAIL_NONFINITE_STATE,
    NFE,
    ActiveBatch,
    Counterfactuals,
    finalize,
    nonfinite,
)
from .graphs import Drawn, StepGraphs, at_step
from .guidance import mean_abs_normalize, p_target, perceptual, smoothgrad, target_ce, tv_loss
from .masks import dilate_radius, feather, largest_component, nested_topk, top_ratio, top_ratio_count
from .params import FireParams


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
    """Algorithm 1 (FiRe: fixed-noise counterfactual refinement), batched: each sample stops on its own and
    leaves the batch; a sample whose state turns non-finite fails and returns its input.

    The ablations are the strategies above: :func:`noise_levels` / :func:`renoise` (``mode``) and
    ``MASKS[p.mask]``; :func:`step_size` holds the constant-step ablation.
    """
    models, dev = nfe.counted(models), x0.device
    f, levels, make_masks = models.classifier, noise_levels(p), MASKS[p.mask]
    sg_gen, rn_gen = generator.fork("fire/smoothgrad"), generator.fork("fire/renoise")
    b, s, z0 = fire_start(x0, target, generator, p, nfe)
    graph = None  # (Z leaf, G(Z)): the PMF graph of the last prediction, reused by the next gradient
    for k, t_k in enumerate(levels):  # Line 3
        if len(b) == 0:
            break
        m_hard, m_soft = make_masks(f, s, p, sg_gen.subset(b.row_list))  # Lines 4-7, Eqs. orig/hard/soft_mask
        if graph is None:
            graph, s.sel = pmf_graph(models.pmf, s.z, t_k, True), torch.arange(len(b), device=dev)
        blend = m_soft if p.loss_mask == "current" or k == 0 else s.m_soft
        grad = joint_gradient(models, graph, s, blend, p, m_hard)  # Line 8, Eqs. joint_loss, clean_to_noisy_gradient
        eta = step_size(p, k, len(levels), s.p).view(-1, 1, 1, 1)  # Line 9, Eq. adaptive_step
        z_next = m_hard * (s.z - eta * grad) + (1 - m_hard) * s.z0  # Line 10, Eq. masked_update
        reuse = k < len(levels) - 1 and p.mode != "reverse"
        graph = pmf_graph(models.pmf, z_next, t_k, reuse)  # Line 11, Eq. pmf_prediction
        x_next = m_soft * graph[1].detach() + (1 - m_soft) * s.x0  # Line 12, Eq. blending
        with torch.no_grad():
            p_next = p_target(f(x_next), s.target)  # Eq. target_prob
        bad_grad, bad_state = nonfinite(grad), nonfinite(x_next) | ~torch.isfinite(p_next)
        b.fail(s.live & bad_grad, FAIL_NONFINITE_GRAD)
        b.fail(s.live & bad_state, FAIL_NONFINITE_STATE)
        ok = ~(bad_grad | bad_state)
        b.record(s.live & ok, x_cf=x_next.detach(), z=z_next.detach(), m_hard=m_hard, m_soft=m_soft, steps=k + 1,
                 p_final=p_next)
        done = p_next >= p.p_flip if p.early_stop else torch.zeros_like(ok)  # Lines 13-14
        s.live = s.live & ok & ~done
        s.z, s.p, s.x, s.m_hard, s.m_soft = z_next.detach(), p_next.detach(), x_next.detach(), m_hard, m_soft
        s.sel = torch.arange(len(b), device=dev)
        live, keep = torch.stack([s.live, s.live if p.compaction else ok]).cpu()  # the step's one host sync
        if not live.any():
            break
        graph = graph if reuse else None
        b.keep(keep)  # batch compaction: finished (or failed) samples leave
        if p.mode == "reverse" and k + 1 < len(levels):
            renoise(s, levels[k + 1], rn_gen.subset(b.row_list))
    return fire_result(b, z0)


def fire_start(x0: Tensor, target: Tensor, generator: SampleGenerators, p: FireParams,
               nfe: NFE) -> tuple[ActiveBatch, SimpleNamespace, Tensor]:
    """Lines 1-2: (the batch with its outputs, its working state, Z_t^0); shared by both loops."""
    dev = x0.device
    eps = generator.fork("fire/init").randn(*x0.shape[1:], device=dev)
    z0 = (1 - p.t) * x0 + p.t * eps  # Line 1, Eq. fixed_noise_init: Z_t^0 = (1 - t) X_0 + t Z^0
    mask0, zeros = torch.zeros_like(x0[:, :1]), torch.zeros(len(x0), device=dev)
    b = ActiveBatch(x0, nfe, x_cf=x0.clone(), z=torch.zeros_like(x0), m_hard=mask0, m_soft=mask0.clone(),
                    steps=torch.zeros(len(x0), dtype=torch.long, device=dev), p_final=zeros)
    # Line 2: X_0 is the first clean image, M_hard^{-1} = 0.
    s = b.start(x0=x0, z0=z0, eps=eps, target=target.to(dev), z=z0, x=x0, m_hard=mask0, m_soft=mask0.clone(),
                p=zeros, live=torch.ones(len(x0), dtype=torch.bool, device=dev))
    return b, s, z0


def fire_result(b: ActiveBatch, z0: Tensor) -> FireResult:
    o = b.out
    return FireResult(x_cf=o["x_cf"], z=o["z"], z0=z0, m_hard=o["m_hard"], m_soft=o["m_soft"], steps=o["steps"],
                      p_final=o["p_final"], failed=b.failed, reason=b.reason)


# --- the sync-free loop: masking instead of compaction ---------------------------------------------
def fire_refine_masked(x0: Tensor, target: Tensor, models: TaskModels, generator: SampleGenerators,
                       p: FireParams, nfe: NFE) -> FireResult:
    """Algorithm 1 as :func:`fire_refine`, with no host read inside the loop (``sync_free`` / ``cuda_graphs``):
    the batch keeps its shape for all K updates; a sample that stops (early stopping, failure) keeps its
    recorded outputs and its working state frozen. Each update is :func:`fire_step`, a function of tensors
    (its index k a device tensor, its SmoothGrad noise drawn before it) that ``cuda_graphs`` replays as a
    CUDA graph on a CUDA device (methods/graphs.py); on a CPU it runs eagerly. The step recomputes the PMF
    graph at Z_t^k instead of reusing the previous step's (an autograd graph cannot outlive its capture):
    2K PMF forwards instead of K + 1 (``mode: reverse``: the same 2K), the same values."""
    models, dev = nfe.counted(models), x0.device
    levels = noise_levels(p)
    b, s, z0 = fire_start(x0, target, generator, p, nfe)
    sg_gen = generator.fork("fire/smoothgrad").subset(b.row_list)
    rn_gen = generator.fork("fire/renoise").subset(b.row_list)
    steps = StepGraphs(partial(fire_step, models, p), p.cuda_graphs and dev.type == "cuda", nfe)
    factors = step_factors(p, len(levels), s.p)
    for k, t_k in enumerate(levels):
        drawn = {"noise": sg_gen.randn(p.smoothgrad_n, *x0.shape[1:], device=dev)} if p.mask == "fire" else {}
        t = torch.tensor(t_k, dtype=torch.float64, device=dev)  # float64: the PMF rounds it as it rounds t_k
        o = steps("fire", k=torch.tensor(k, device=dev), t=t, factors=factors, x0=s.x0, z0=s.z0, target=s.target,
                  z=s.z, x=s.x, m_hard=s.m_hard, m_soft=s.m_soft, p_k=s.p, **drawn)
        ok = ~(o["bad_grad"] | o["bad_state"])
        b.fail(s.live & o["bad_grad"], FAIL_NONFINITE_GRAD)
        b.fail(s.live & o["bad_state"], FAIL_NONFINITE_STATE)
        b.record(s.live & ok, x_cf=o["x"], z=o["z"], m_hard=o["m_hard"], m_soft=o["m_soft"], steps=k + 1,
                 p_final=o["p"])
        done = o["p"] >= p.p_flip if p.early_stop else torch.zeros_like(ok)  # Lines 13-14
        live = s.live & ok & ~done
        for name in ("z", "x", "p", "m_hard", "m_soft"):  # a stopped sample's state is frozen
            old = getattr(s, name)
            setattr(s, name, torch.where(live.view(-1, *[1] * (old.ndim - 1)), o[name], old))
        s.live = live
        if p.mode == "reverse" and k + 1 < len(levels):
            renoise(s, levels[k + 1], rn_gen)
    return fire_result(b, z0)


def fire_step(models: TaskModels, p: FireParams, *, k: Tensor, t: Tensor, factors: Tensor, x0: Tensor, z0: Tensor,
              target: Tensor, z: Tensor, x: Tensor, m_hard: Tensor, m_soft: Tensor, p_k: Tensor,
              noise: Tensor | None = None) -> dict[str, Tensor]:
    """One update of Algorithm 1 (Lines 4-12 and Eq. target_prob) from tensors only: the masks of X_k, the
    gradient through a fresh PMF graph at Z_t^k, the masked update, the blend and p_target(X_{k+1});
    ``k`` and the noise level ``t`` 0-dim device tensors, ``factors`` :func:`step_factors`; ``noise`` the
    SmoothGrad copies (``mask: fire``)."""
    s = SimpleNamespace(x0=x0, z0=z0, target=target, z=z, x=x, m_hard=m_hard, m_soft=m_soft, p=p_k,
                        sel=torch.arange(len(z), device=z.device))
    m_hard_k, m_soft_k = MASKS[p.mask](models.classifier, s, p, Drawn(noise) if noise is not None else None)
    graph = pmf_graph(models.pmf, z, t, True)
    blend = m_soft_k if p.loss_mask == "current" else torch.where(k == 0, m_soft_k, m_soft)
    grad = joint_gradient(models, graph, s, blend, p, m_hard_k)
    eta = step_size_at(p, k, factors, p_k).view(-1, 1, 1, 1)
    z_next = m_hard_k * (z - eta * grad) + (1 - m_hard_k) * z0
    x_next = m_soft_k * pmf_graph(models.pmf, z_next, t, False)[1] + (1 - m_soft_k) * x0
    with torch.no_grad():
        p_next = p_target(models.classifier(x_next), target)
    return {"z": z_next.detach(), "x": x_next, "p": p_next, "m_hard": m_hard_k, "m_soft": m_soft_k,
            "bad_grad": nonfinite(grad), "bad_state": nonfinite(x_next) | ~torch.isfinite(p_next)}


# --- the pieces of a step --------------------------------------------------------------------
def pmf_graph(pmf, z: Tensor, t: float | Tensor, keep_graph: bool) -> tuple[Tensor, Tensor]:
    """(Z leaf, G_theta(Z, t)), Eq. pmf_prediction; with ``keep_graph`` the graph is kept for a gradient."""
    with torch.set_grad_enabled(keep_graph):
        leaf = z.detach().requires_grad_(keep_graph)
        return leaf, pmf.predict_clean(leaf, t)


def joint_gradient(models: TaskModels, graph: tuple[Tensor, Tensor], s, m_soft: Tensor, p: FireParams,
                   m_hard: Tensor | None = None) -> Tensor:
    """Eqs. joint_loss and clean_to_noisy_gradient: the gradient of L_joint on
    ``X_k(Z) = M_soft G(Z) + (1 - M_soft) X_0`` w.r.t. Z_t^k, through the PMF graph of the last
    prediction (rows ``s.sel`` of it) and the soft-mask blend (``M_soft``: the caller's, by ``loss_mask``);
    divided by its mean magnitude over the image, or inside ``m_hard`` (``grad_norm: mask``)."""
    leaf, g = graph
    with torch.enable_grad():
        x_of_z = m_soft * g[s.sel] + (1 - m_soft) * s.x0
        loss = p.lambda_cls * target_ce(models.classifier(x_of_z), s.target)
        if p.lambda_perc:
            loss = loss + p.lambda_perc * perceptual(models, x_of_z, s.x0)
        if p.lambda_tv:
            tv = tv_loss(x_of_z - s.x0)
            loss = loss + p.lambda_tv * (tv * x_of_z[0, 0].numel() if p.tv_reduction == "sum" else tv)
        grad = torch.autograd.grad(loss.sum(), leaf)[0][s.sel]
    if p.grad_norm == "mask" and m_hard is not None:
        inside = (grad.abs() * m_hard).flatten(1).sum(1) / (m_hard.flatten(1).sum(1) * grad.shape[1]).clamp_min(1)
        return grad / inside.clamp_min(1e-12).view(-1, 1, 1, 1)
    return mean_abs_normalize(grad)


def step_size(p: FireParams, k: int, K: int, p_k: Tensor) -> Tensor:
    """Eq. adaptive_step: 0.3 eta at k = 0, then eta k / (K - 1) [(P_flip - p_target(X_k)) / P_flip]_+;
    the constant eta when ``adaptive_step`` is off (ablation)."""
    if not p.adaptive_step:
        return torch.full_like(p_k, p.eta)
    if k == 0:
        return torch.full_like(p_k, 0.3 * p.eta)
    return p.eta * k / (K - 1) * ((p.p_flip - p_k) / p.p_flip).clamp_min(0)


def step_size_at(p: FireParams, k: Tensor, factors: Tensor, p_k: Tensor) -> Tensor:
    """:func:`step_size` with the step ``k`` a 0-dim device tensor (no host branch) and ``factors`` =
    :func:`step_factors`: the same numbers, as ``eta k / (K - 1)`` is the float32 value the eager scalar rounds to."""
    if not p.adaptive_step:
        return torch.full_like(p_k, p.eta)
    adaptive = at_step(factors, k) * ((p.p_flip - p_k) / p.p_flip).clamp_min(0)
    return torch.where(k == 0, torch.full_like(p_k, 0.3 * p.eta), adaptive)


def step_factors(p: FireParams, K: int, like: Tensor) -> Tensor:
    """``eta k / (K - 1)`` for k = 0 .. K - 1 (0 at k = 0, where :func:`step_size` takes 0.3 eta), on ``like``'s
    device, made once before the loop (a host-to-device copy inside a captured step is not allowed)."""
    return torch.tensor([p.eta * k / (K - 1) if k else 0.0 for k in range(K)], dtype=like.dtype, device=like.device)


# --- masks (Lines 4-7) and their ablations -----------------------------------------------------
def fire_masks(f, s, p: FireParams, gen: SampleGenerators) -> tuple[Tensor, Tensor]:
    """Eqs. orig_mask, hard_mask, soft_mask: SmoothGrad attribution A^k of X_k, its top-rho largest
    connected component dilated by r (M_orig^k), the union M_hard^k, and M_soft^k = Feather(M_orig^k, w)."""
    noise = gen.randn(p.smoothgrad_n, *s.x.shape[1:], device=s.x.device)
    attribution = smoothgrad(f, s.x, s.target, noise, p.smoothgrad_sigma)
    max_fg = top_ratio_count(s.x[0, 0].numel(), p.rho) if p.masked else None  # masked: fixed rounds, no sync
    m_orig = dilate_radius(largest_component(top_ratio(attribution, p.rho), max_fg), p.dilation)
    return torch.maximum(s.m_hard, m_orig), feather(m_orig, p.feather)


def maskdime_masks(f, s, p: FireParams, gen: SampleGenerators) -> tuple[Tensor, Tensor]:
    """Ablation: MaskDiME's nested top-k masks from the plain classifier gradient at X_k (no union)."""
    with torch.enable_grad():
        x_in = s.x.detach().requires_grad_(True)
        grad_x = torch.autograd.grad(target_ce(f(x_in), s.target).sum(), x_in)[0]
    return nested_topk(grad_x.abs().mean(1, keepdim=True), p.rho, p.maskdime_rho, 2 * p.dilation + 1)


def no_masks(f, s, p: FireParams, gen: SampleGenerators) -> tuple[Tensor, Tensor]:
    """Ablation: edit everywhere (no attribution)."""
    return torch.ones_like(s.m_hard), torch.ones_like(s.m_hard)


MASKS = {"fire": fire_masks, "maskdime": maskdime_masks, "none": no_masks}


# --- noise levels (``mode``) ------------------------------------------------------------------
def noise_levels(p: FireParams) -> list[float]:
    """The noise level of each update: t for all K (Algorithm 1); ablations: one update (``one_step``),
    or K decreasing levels t (1 - k / K) (``reverse``, with :func:`renoise` between them)."""
    K = 1 if p.mode == "one_step" else p.K
    return [p.t * (1 - k / K) for k in range(K)] if p.mode == "reverse" else [p.t] * K


def renoise(s, t_next: float, gen: SampleGenerators) -> None:
    """``reverse`` ablation: re-noise the blended prediction (and Z_t^0) at the next, lower level with fresh noise."""
    s.z = (1 - t_next) * s.x + t_next * gen.randn(*s.x.shape[1:], device=s.x.device)
    s.z0 = (1 - t_next) * s.x0 + t_next * s.eps


class FiRe:
    """FiRe and its ablation variants (``fire_<variant>``) behind the Method interface."""

    def __init__(self, name: str, params: FireParams):
        self.name, self.params = name, params
        self.roles = ("classifier", "pmf") + (("perceptual",) if params.lambda_perc else ())

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals:
        nfe = NFE(len(x))
        refine = fire_refine_masked if self.params.masked else fire_refine
        r = refine(x, target, models, generator, self.params, nfe)
        info = {"mask_hard": r.m_hard.bool(), "mask_soft": r.m_soft.half(), "p_target": r.p_final}
        return finalize(x, r.x_cf, target, models, r.steps, r.failed, r.reason, nfe, info)
