"""The MeanFlow objective of the ``pmf`` role (``vcebench.models.generative.pmf``): the (t, r) sampler, du/dt
(exact JVP or finite difference), the adaptive weighting, pMF's losses on the one-step prediction and the loss.

MeanFlow (Geng et al. 2025) regresses the average velocity ``u(z, r, t)`` on ``stopgrad(v - (t - r) du/dt)``
(Eq. 9-10), per sample summed over pixels, with the adaptive weight ``l / sg(l + eps)^p``; pixel MeanFlow
(Lyy-iiis/pMF ``pmf.py``) predicts ``x_u`` and adds perceptual losses on ``x_hat = z - t u`` (off by default
here, :class:`ImageLoss`). ``model`` below: a ``pmf.PixelMeanFlow`` (wrapped in DistributedDataParallel
where said); the network and the rest of the recipe: ``pmf.py``.
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor, nn

from ...registry.roles import LOSS_ROLES
from ..training.distributed import Shard, full_precision, unwrap
from ..training.settings import RoleConfigError
from .settings import MEANFLOW_DEFAULTS


def sample_tr(n: int, g: torch.Generator, cfg: dict, flow_matching_only: bool) -> tuple[Tensor, Tensor]:
    """(t, r) for one batch. t: logit-normal(``t_mean``, ``t_std``), with a ``p_t_uniform`` share
    U(0, 1) and a ``p_t1`` share exactly 1 (one-step sampling from noise). r: ``r = t`` (flow
    matching) with ``p_fm``, ``r = 0`` (FiRe's G) with ``p_r0``, else U(0, t). ``cfg``: a ``pmf`` block
    (keys it leaves out: :data:`MEANFLOW_DEFAULTS`)."""
    cfg = {**MEANFLOW_DEFAULTS, **cfg}
    t = torch.sigmoid(torch.randn(n, generator=g) * float(cfg["t_std"]) + float(cfg["t_mean"]))
    u1, u2, u3, u4 = torch.rand(4, n, generator=g)
    t = torch.where(u1 < float(cfg["p_t_uniform"]), u2, t)
    t = torch.where(u3 < float(cfg["p_t1"]), torch.ones_like(t), t)
    if flow_matching_only:
        return t, t.clone()
    p_fm, p_r0 = float(cfg["p_fm"]), float(cfg["p_r0"])
    r = torch.where(u4 < p_fm, t, torch.where(u4 < p_fm + p_r0, torch.zeros_like(t), u2 * t))
    return t, r


def du_dt(model: nn.Module, z: Tensor, t: Tensor, h: Tensor, v: Tensor, x_u: Tensor, mode: str,
          fd_eps: float = MEANFLOW_DEFAULTS["fd_eps"]) -> Tensor:
    """Total derivative ``du/dt`` along the tangent (dz = v, dr = 0, dt = 1), i.e. (dz, dt, dh) = (v, 1, 1).

    ``u = (z - x_u) / c(t)``, ``c = max(t, t_clip)``: ``du/dt = (v - dx_u) / c - (z - x_u) c' / c^2``
    with the network's directional derivative ``dx_u`` from ``torch.func.jvp`` (``exact``) or a forward
    difference ``(net(z + e v, t + e, h + e) - x_u) / e`` (``fd``). ``x_u``: the primal output.
    ``exact`` where an operation of the network or the backend has no forward-mode derivative (PyTorch's
    NotImplementedError) falls back to ``fd`` for the rest of this model's life, with a note once
    (:func:`jvp_used` says which one ran).
    """
    if mode not in ("exact", "fd"):
        raise RoleConfigError(f"config key `models.<dataset>.pmf.jvp` must be 'exact' or 'fd', got {mode!r}")
    with torch.no_grad(), full_precision(z.device.type):  # a finite difference needs fp32 under bf16 autocast
        ones = torch.ones_like(t)
        dx = None
        if mode == "exact" and getattr(model, "_exact_jvp_error", None) is None:
            try:
                _, dx = torch.func.jvp(model.x_pred, (z, t, h), (v, ones, ones))
            except NotImplementedError as e:  # no forward-mode formula here: the finite difference instead
                model._exact_jvp_error = str(e).splitlines()[0][:200]
                print(f"[train pmf] jvp: exact has no forward-mode derivative on {z.device.type} "
                      f"({model._exact_jvp_error}); using the finite difference (jvp: fd)", file=sys.stderr)
        if dx is None:
            dx = (model.x_pred(z + fd_eps * v, t + fd_eps, h + fd_eps) - x_u) / fd_eps
        c = t.clamp_min(model.t_clip).reshape(-1, 1, 1, 1)
        dc = (t > model.t_clip).to(z.dtype).reshape(-1, 1, 1, 1)
        return (v - dx) / c - (z - x_u) * dc / c**2


def jvp_used(model: nn.Module, mode: str) -> str:
    """The du/dt that :func:`du_dt` computed for ``model`` under the recipe's ``mode``: ``exact``, ``fd``, or
    ``fd (fallback: ...)`` when ``exact`` had no forward-mode derivative."""
    err = getattr(model, "_exact_jvp_error", None)
    return f"fd (fallback: {err})" if mode == "exact" and err is not None else mode


def adaptive(loss: Tensor, eps: float, p: float) -> Tensor:
    """MeanFlow's / pMF's adaptive weighting of a per-sample loss: ``l / sg(l + eps)^p`` (``p = 1``: every
    sample's term has gradient scale ~1 whatever its size)."""
    return loss / (loss.detach() + float(eps)) ** float(p)


class ImageLoss(nn.Module):
    """pMF's losses on the one-step prediction ``x_hat = z - t u(z, r, t)`` (Lyy-iiis/pMF ``pmf.py``), per sample:
    ``w_p ad(d_p(x_hat, x)) + w_f ad(||f(x_hat) - f(x)||^2)`` on the rows with ``t < max_t``, 0 on the others,
    ``ad`` the adaptive weighting (:func:`adaptive`).

    pMF's LPIPS (weight 0.4) is the dataset's ``perceptual`` distance here; its ConvNeXt feature distance
    (weight 0.1, squared L2 of the network's outputs) the dataset's ``fid_features`` embedding, the only other
    feature network the synthetic sets have. Both networks are frozen; the gradient reaches the PMF through
    ``x_hat``. pMF first takes one random resized crop of both images to 224 px; at the synthetic sets' 32 px
    both networks see the whole image."""

    def __init__(self, perceptual: nn.Module | None, features: nn.Module | None, perceptual_weight: float,
                 features_weight: float, max_t: float, eps: float, p: float):
        super().__init__()
        self.perceptual, self.features = perceptual, features
        self.perceptual_weight, self.features_weight = float(perceptual_weight), float(features_weight)
        self.max_t, self.eps, self.p = float(max_t), float(eps), float(p)
        for net in (perceptual, features):
            if net is not None:
                net.eval().requires_grad_(False)

    def forward(self, x_hat: Tensor, x: Tensor, t: Tensor) -> Tensor:
        """The per-sample term (N,) for predictions ``x_hat`` of clean images ``x`` at times ``t`` (N,)."""
        on = t < self.max_t  # the whole batch is computed (no batch shape that changes from step to step)
        out = torch.zeros(x.shape[0], device=x.device, dtype=torch.float32)
        if self.perceptual_weight > 0:
            d = self.perceptual(x_hat, x).float()
            out = out + self.perceptual_weight * adaptive(torch.where(on, d, 0.0), self.eps, self.p)
        if self.features_weight > 0:
            d = (self.features(x_hat).float() - self.features(x).float()).pow(2).sum(1)
            out = out + self.features_weight * adaptive(torch.where(on, d, 0.0), self.eps, self.p)
        return out


def image_loss(settings: dict, networks: dict[str, nn.Module] | None) -> ImageLoss | None:
    """The :class:`ImageLoss` of a ``pmf`` block (None when both weights are 0, the default) on the trained
    ``networks`` ({role: network}: ``perceptual`` a distance ``(x, y) -> (N,)``, ``fid_features`` an embedding
    ``x -> (N, D)``). A weight on without its network: a :class:`RoleConfigError` naming the role to train."""
    cfg = {**MEANFLOW_DEFAULTS, **settings}
    nets = dict(networks or {})
    wanted = {key: role for key, role in LOSS_ROLES["pmf"].items() if float(cfg[key]) > 0}
    for key in LOSS_ROLES["pmf"]:
        if float(cfg[key]) < 0:
            raise RoleConfigError(f"config key `models.<dataset>.pmf.{key}` must be >= 0 (0: off), got {cfg[key]!r}")
    if not wanted:
        return None
    missing = [f"{role} (for `{key}`)" for key, role in wanted.items() if nets.get(role) is None]
    if missing:
        raise RoleConfigError(f"the pmf recipe trains against the dataset's trained {', '.join(missing)}, which "
                              f"does not exist yet: train it first (`vcebench train <role> --task <task>`) or set "
                              f"the weight to 0")
    return ImageLoss(nets.get("perceptual") if "perceptual_weight" in wanted else None,
                     nets.get("fid_features") if "features_weight" in wanted else None,
                     float(cfg["perceptual_weight"]), float(cfg["features_weight"]), float(cfg["perceptual_max_t"]),
                     float(cfg["adaptive_eps"]), float(cfg["adaptive_p"]))


def meanflow_loss(model: nn.Module, x: Tensor, g: torch.Generator, cfg: dict, flow_matching_only: bool,
                  shard: Shard | None = None, images: ImageLoss | None = None) -> tuple[Tensor, Tensor]:
    """Pixel MeanFlow loss (MeanFlow Eq. 9-10; pMF ``forward``): per-sample squared error of ``u``
    against ``stopgrad(v - (t - r) du/dt)`` summed over pixels, adaptive weight ``l / sg(l + 0.01)^p``.
    Returns (weighted mean loss, unweighted per-sample loss). ``model`` may be wrapped in
    DistributedDataParallel; with ``shard`` the noise is drawn for the whole batch ``x`` and the
    rank's rows are kept (``vcebench.models.training.distributed``). ``cfg``: a ``pmf`` block (keys it leaves out:
    :data:`MEANFLOW_DEFAULTS`). ``images``: pMF's losses on the one-step prediction, added per sample."""
    drawn = meanflow_draw(x, g, cfg, flow_matching_only)
    if shard is not None:
        drawn = shard.take(*drawn)
    return meanflow_compute(model, drawn, cfg, flow_matching_only, images)


def meanflow_draw(x: Tensor, g: torch.Generator, cfg: dict, flow_matching_only: bool) -> tuple[Tensor, ...]:
    """The randomness of one MeanFlow step on the CPU: (x, t, r, eps) for the whole batch ``x``."""
    t, r = sample_tr(x.shape[0], g, {**MEANFLOW_DEFAULTS, **cfg}, flow_matching_only)
    return x, t, r, torch.randn(x.shape, generator=g)


def meanflow_compute(model: nn.Module, drawn: tuple[Tensor, ...], cfg: dict,
                     flow_matching_only: bool, images: ImageLoss | None = None) -> tuple[Tensor, Tensor]:
    """The MeanFlow loss of :func:`meanflow_loss` on drawn (x, t, r, eps) on the model's device (with
    ``images``, plus pMF's losses on ``x_hat = z - t u``; the second number stays the MeanFlow error)."""
    cfg = {**MEANFLOW_DEFAULTS, **cfg}
    x, t, r, eps = drawn
    pmf = unwrap(model)
    tt = t.reshape(-1, 1, 1, 1)
    z = (1 - tt) * x + tt * eps
    v = eps - x
    h = t - r
    x_u = model(z, t, h).float()
    u = (z - x_u) / t.clamp_min(pmf.t_clip).reshape(-1, 1, 1, 1)
    target = v
    if not flow_matching_only:
        # the whole batch: rows with h = 0 (r = t, flow matching) get v - 0 * du/dt = v exactly; no host
        # sync and no batch shape that changes from step to step (cuDNN re-tunes each new shape on a GPU)
        d = du_dt(pmf, z, t, h, v, x_u.detach(), str(cfg["jvp"]), float(cfg["fd_eps"]))
        target = v - h.reshape(-1, 1, 1, 1) * d
    per_sample = (u - target.detach()).pow(2).sum(dim=(1, 2, 3))
    loss = adaptive(per_sample, float(cfg["adaptive_eps"]), float(cfg["adaptive_p"]))
    if images is not None:
        loss = loss + images(z - tt * u, x, t)
    return loss.mean(), per_sample.detach()
