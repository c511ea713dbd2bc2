"""The networks of a task, by role, and the small interfaces methods and metrics rely on.

Roles (docs/architecture.md): classifier, ddpm, pmf, perceptual, oracle, identity,
simsiam, fid_features. Every role is an ``nn.Module`` in eval mode with frozen
parameters; the call conventions are:

- ``classifier(x) -> (N, 2)`` logits of the task's binary query (a 1-logit head
  ``l`` is exposed as ``[0, l]`` so that softmax gives ``sigmoid(l)``); see
  :class:`BinaryHead`.
- ``ddpm``: :class:`DDPMBackbone` (``eps(z, t)`` with integer train timesteps,
  ``alphas_cumprod`` float64, ``num_train_timesteps``).
- ``pmf``: ``predict_clean(z, t) -> x`` (one network call), ``u(z, r, t)``.
- ``perceptual(x, y) -> (N,)`` distance.
- ``oracle(x) -> (N, A)`` attribute logits, with ``attribute_names``.
- ``identity(x)``, ``simsiam(x)``, ``fid_features(x) -> (N, D)`` embeddings,
  each with a ``name`` that travels with the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor, nn

from ..registry.roles import HEAD_KINDS, ROLES


class BinaryHead(nn.Module):
    """Expose a multi-output classifier as 2 logits for one binary query.

    ``kind="1logit"``: column ``index`` is a sigmoid logit ``l``; returns ``[0, l]``.
    ``kind="2logit"``: the network already returns (N, 2) logits.
    """

    def __init__(self, net: nn.Module, kind: str = "1logit", index: int = 0):
        super().__init__()
        if kind not in HEAD_KINDS:
            raise ValueError(f"classifier head kind must be one of {list(HEAD_KINDS)}, got {kind!r}")
        self.net, self.kind, self.index = net, kind, index

    def forward(self, x: Tensor) -> Tensor:
        out = self.net(x)
        if self.kind == "2logit":
            return out
        logit = out[:, self.index] if out.ndim == 2 else out
        return torch.stack([torch.zeros_like(logit), logit], dim=1)


class DDPMBackbone(Protocol):
    num_train_timesteps: int
    alphas_cumprod: Tensor  # float64, (T,)

    def eps(self, z: Tensor, t: Tensor) -> Tensor: ...


class PMFBackbone(Protocol):
    def predict_clean(self, z: Tensor, t: Tensor | float) -> Tensor: ...

    def u(self, z: Tensor, r: Tensor, t: Tensor) -> Tensor: ...


@dataclass
class TaskModels:
    """Networks resolved for one task; roles a task does not need stay ``None``."""

    classifier: nn.Module | None = None
    ddpm: nn.Module | None = None
    pmf: nn.Module | None = None
    perceptual: nn.Module | None = None
    oracle: nn.Module | None = None
    identity: nn.Module | None = None
    simsiam: nn.Module | None = None
    fid_features: nn.Module | None = None
    names: dict[str, str] = field(default_factory=dict)  # role -> human-readable model name
    # role -> its quality gate ({"passed", "failed"}) where the trained network's metrics.json holds one (the pmf)
    gates: dict[str, dict] = field(default_factory=dict)

    def to(self, device: torch.device | str) -> TaskModels:
        for role in ROLES:
            m = getattr(self, role)
            if m is not None:
                setattr(self, role, m.to(device))
        return self


def freeze(m: nn.Module) -> nn.Module:
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m
