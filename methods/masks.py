"""Spatial masks shared by FiRe, FastDiME and MaskDiME. Every operation is per sample.

Masks are float tensors (N, 1, H, W) with values in {0, 1} (binary) or [0, 1] (soft).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .components import largest_component_fixed, largest_component_scipy, largest_component_torch


def top_ratio_count(pixels: int, ratio: float) -> int:
    """How many pixels :func:`top_ratio` keeps out of ``pixels``: ``max(1, int(ratio * pixels))``, at most all."""
    return max(1, min(pixels, int(ratio * pixels)))


def top_ratio(a: Tensor, ratio: float) -> Tensor:
    """Binary mask of the ``max(1, int(ratio * H * W))`` largest values of ``a`` (N, 1, H, W), per sample."""
    n = a.shape[0]
    flat = a.reshape(n, -1)
    idx = flat.topk(top_ratio_count(flat.shape[1], ratio), dim=1).indices
    return torch.zeros_like(flat).scatter_(1, idx, 1.0).view_as(a)


def largest_component(m: Tensor, max_fg: int | None = None) -> Tensor:
    """Keep each sample's largest 8-connected component (ties: the one met first in raster order): the
    component ``scipy.ndimage.label`` + ``argmax(bincount)`` keeps (methods/components.py), bit for bit.

    ``max_fg`` None (eager): scipy on a CPU tensor, on another device the labels propagated there to
    convergence (a host check per round, no copy of the mask). ``max_fg`` an int, the most foreground pixels a
    mask can hold (``top_ratio``'s k): a fixed, provably sufficient round count on the device, no host read."""
    if max_fg is not None:
        return largest_component_fixed(m, max_fg)
    return largest_component_scipy(m) if m.device.type == "cpu" else largest_component_torch(m)


def dilate(m: Tensor, kernel: int) -> Tensor:
    """Binary dilation with a ``kernel x kernel`` square (max-pool, stride 1); ``kernel`` odd, 1 = identity."""
    if kernel % 2 != 1:
        raise ValueError(f"dilation kernel must be odd, got {kernel}")
    if kernel == 1:
        return m
    return F.max_pool2d(m, kernel, stride=1, padding=kernel // 2)


def dilate_radius(m: Tensor, r: int) -> Tensor:
    """Dilate by radius ``r`` pixels (a (2r+1)^2 square)."""
    return dilate(m, 2 * r + 1)


def feather(m: Tensor, w: int) -> Tensor:
    """Soft mask: 1 on ``m``, falling linearly to 0 over ``w`` pixels outside it (chessboard distance).

    ``mean_{i=0..w} Dilate(m, i)``: pixels at distance d <= w get ``(w + 1 - d) / (w + 1)``,
    pixels farther than ``w`` get exactly 0.
    """
    acc, cur = m.clone(), m
    for _ in range(w):
        cur = dilate(cur, 3)
        acc = acc + cur
    return acc / (w + 1)


def nested_topk(a: Tensor, k: float, rho: float, kernel: int) -> tuple[Tensor, Tensor]:
    """MaskDiME's dual masks (``compute_grad_masks_nested2``): Mz = top-k of ``a``, Mx = top ``rho * k``
    inside Mz, both dilated with a ``kernel`` square (the reference's Gaussian blur > 0 is the same
    square dilation). ``a`` is (N, 1, H, W)."""
    n = a.shape[0]
    flat = a.reshape(n, -1)
    k1 = max(1, int(k * flat.shape[1]))
    k2 = max(1, int(rho * k1))
    idx = flat.topk(k1, dim=1).indices  # sorted descending: the first k2 are the top k2
    mz = torch.zeros_like(flat).scatter_(1, idx, 1.0).view_as(a)
    mx = torch.zeros_like(flat).scatter_(1, idx[:, :k2], 1.0).view_as(a)
    return dilate(mz, kernel), dilate(mx, kernel)


def difference_mask(x: Tensor, x_hat: Tensor, kernel: int) -> Tensor:
    """FastDiME ``generate_mask``: channel-summed |x - x_hat| in [0, 1] units, normalised by its
    per-sample max, then max-pool dilated; (N, 1, H, W) in [0, 1]."""
    m = ((x - x_hat).abs() / 2).sum(1, keepdim=True)
    m = m / m.flatten(1).amax(1).clamp_min(1e-12).view(-1, 1, 1, 1)
    return dilate(m, kernel)
