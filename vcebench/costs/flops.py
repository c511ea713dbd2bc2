"""Per-call FLOPs: one forward and one input backward of each network role, measured with torch's
``FlopCounterMode`` (:mod:`vcebench.costs.measure`), and FLOPs per CF from the calls per CF (NFE)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..models.generative.levels import REFERENCE_T_FLOW
from .measure import count_flops


def role_call(name: str, net: nn.Module, x: Tensor) -> Tensor:
    """One call of network ``name`` on ``x``: the call its users make (``unet``: eps at step 10)."""
    b = x.shape[0]
    if name == "unet":
        return net.eps(x, torch.full((b,), 10, dtype=torch.long, device=x.device))
    if name == "pmf":
        return net.predict_clean(x, REFERENCE_T_FLOW)
    if name == "perceptual":
        return net(x, torch.zeros_like(x))
    return net(x)


def per_call_flops(nets: dict[str, nn.Module], resolution: int, batch: int = 1,
                   channels: int = 3) -> dict[str, dict[str, Any]]:
    """FLOPs of one call of each role at ``batch``: forward, and the backward to the input alone.

    The backward is measured as (forward + backward) - forward with frozen weights, i.e. the input
    gradient only, which is what guidance computes. Perceptual: one call embeds both images.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, net in nets.items():
        dev = next(itertools.chain(net.parameters(), net.buffers()), torch.zeros(0)).device  # cpu if neither
        x = torch.zeros(batch, channels, resolution, resolution, device=dev)
        with torch.no_grad():
            _, fwd = count_flops(role_call, name, net, x)

        def fwd_bwd(name: str = name, net: nn.Module = net, dev: torch.device = dev) -> None:
            xg = torch.zeros(batch, channels, resolution, resolution, device=dev, requires_grad=True)
            torch.autograd.grad(role_call(name, net, xg).sum(), xg)

        _, both = count_flops(fwd_bwd)
        out[name] = {"params": sum(p.numel() for p in net.parameters()),
                     "fwd_flops": fwd.total, "bwd_flops": both.total - fwd.total}
    return out


def flops_from_nfe(nfe: Mapping[str, Mapping[str, float]], calls: dict[str, dict[str, Any]]) -> float:
    """FLOPs per CF = sum over networks of fwd calls x fwd FLOPs + bwd calls x bwd FLOPs."""
    total = 0.0
    for net, d in nfe.items():
        if net not in calls:
            raise KeyError(f"no per-call FLOPs measured for network {net!r}")
        total += d.get("fwd", 0.0) * calls[net]["fwd_flops"] + d.get("bwd", 0.0) * calls[net]["bwd_flops"]
    return total
