"""Augmentations and the PGD attack of the small networks' training (classifier family, oracle, perceptual)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def gaussian_blur(x: Tensor, sigma: Tensor) -> Tensor:
    """Per-sample isotropic Gaussian blur (``sigma``: (N,), 0 = unchanged), separable, reflect padding."""
    n, c, h, w = x.shape
    radius = max(1, int(math.ceil(3 * float(sigma.max()))))
    r = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    s = sigma.to(x.dtype).clamp_min(1e-3)[:, None]
    k = torch.exp(-0.5 * (r[None] / s) ** 2)
    k = k / k.sum(dim=1, keepdim=True)
    k = k.repeat_interleave(c, dim=0)  # (N*C, K)
    y = F.pad(x.reshape(1, n * c, h, w), (radius, radius, radius, radius), mode="reflect")
    y = F.conv2d(y, k[:, None, None, :], groups=n * c)
    y = F.conv2d(y, k[:, None, :, None], groups=n * c)
    y = y.reshape(n, c, h, w)
    return torch.where((sigma > 0).view(n, 1, 1, 1), y, x)


def random_shift(x: Tensor, max_shift: int) -> Tensor:
    """Translate each sample by up to ``max_shift`` pixels (reflect padding)."""
    if max_shift <= 0:
        return x
    n, _, h, w = x.shape
    p = F.pad(x, (max_shift,) * 4, mode="reflect")
    dx = torch.randint(0, 2 * max_shift + 1, (n,))
    dy = torch.randint(0, 2 * max_shift + 1, (n,))
    return torch.stack([p[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])


def augment(x: Tensor, noise: float = 0.0, blur: float = 0.0, shift: int = 0, flip: bool = False,
            p: float = 0.5) -> Tensor:
    """Flip / shift / blur (sigma ~ U(0, blur) px) / Gaussian noise (std ~ U(0, noise)), each with prob. ``p``.

    Noise and blur augmentation keep the classifier's input gradients from being pure
    high-frequency adversarial directions (a clean-trained CNN is flipped by colour blobs).
    """
    n = x.shape[0]
    if flip:
        x = torch.where((torch.rand(n) < 0.5).view(n, 1, 1, 1), x.flip(3), x)
    x = random_shift(x, shift)
    if blur > 0:
        x = gaussian_blur(x, torch.rand(n) * blur * (torch.rand(n) < p))
    if noise > 0:
        std = torch.rand(n) * noise * (torch.rand(n) < p)
        x = x + std.view(n, 1, 1, 1) * torch.randn_like(x)
    return x.clamp(-1, 1)


def pgd(loss_fn: Callable[[Tensor], Tensor], x: Tensor, eps: float, steps: int,
        step_size: float | None = None, random_start: bool = True) -> Tensor:
    """L-inf PGD (Madry et al. 2018) that *maximises* ``loss_fn(x_adv).sum()``; stays in [-1, 1]."""
    step_size = step_size if step_size is not None else 2.5 * eps / max(steps, 1)
    x = x.detach()
    delta = (torch.rand_like(x) * 2 - 1) * eps if random_start else torch.zeros_like(x)
    for _ in range(steps):
        delta.requires_grad_(True)
        with torch.enable_grad():
            loss = loss_fn((x + delta).clamp(-1, 1)).sum()
            (g,) = torch.autograd.grad(loss, delta)
        delta = (delta.detach() + step_size * g.sign()).clamp(-eps, eps)
    return (x + delta).clamp(-1, 1).detach()
