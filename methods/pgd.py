"""Projected gradient descent on images, shared by ACE's pre-explanation and the pixel attack.

Both attack images in the ``[0, 1]`` range, as ACE does (``core/attacks_and_models.py``: ``Attack``, ``PGD``):
budgets and step sizes are in its units (1/255 is one grey level). Helpers convert from and to the
``[-1, 1]`` images every method receives.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .params import Norm


def to_unit(x: Tensor) -> Tensor:
    """``[-1, 1]`` -> ``[0, 1]``."""
    return (x + 1) / 2


def from_unit(u: Tensor) -> Tensor:
    """``[0, 1]`` -> ``[-1, 1]``."""
    return u * 2 - 1


def sample_norm(d: Tensor) -> Tensor:
    """Per-sample l2 norm of ``d``, shaped to broadcast over it (N, 1, 1, 1)."""
    return d.flatten(1).norm(dim=1).view(-1, *[1] * (d.ndim - 1))


def project(u: Tensor, u0: Tensor, norm: Norm, eps: float) -> Tensor:
    """``u`` projected into the ``norm`` ball of radius ``eps`` around ``u0``, then clamped to [0, 1]
    (ACE ``linf_norm_proj`` / ``l2_norm_proj``)."""
    d = u - u0
    if norm == "linf":
        d = d.clamp(-eps, eps)
    else:
        n = sample_norm(d)
        d = torch.where(n > eps, d * (eps / n.clamp_min(1e-12)), d)
    return (u0 + d).clamp(0, 1)


def pgd_step(u: Tensor, grad: Tensor, u0: Tensor, norm: Norm, step: float, eps: float) -> Tensor:
    """One PGD update that lowers the loss whose gradient is ``grad``: ``linf`` moves by ``step`` along its sign
    (ACE ``PGD.attack``), ``l2`` by ``step`` along its per-sample unit direction; then :func:`project`."""
    if norm == "linf":
        u = u - step * grad.sign()
    else:
        u = u - step * grad / sample_norm(grad).clamp_min(1e-12)
    return project(u, u0, norm, eps)
