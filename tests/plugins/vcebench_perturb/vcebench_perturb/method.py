"""``perturb``: the input plus ``eps`` times the sign of per-sample Gaussian noise (every pixel moves by eps,
clipped to [-1, 1]); the classifier decides whether that flipped it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from methods.base import NFE, finalize, require


@dataclass
class PerturbParams:
    eps: float = 0.05  # in [-1, 1] image units

    def validate(self, section: str) -> None:
        require(0 < self.eps <= 1, section, f"eps must be in (0, 1], got {self.eps}")


class Perturb:
    def __init__(self, name: str, params: PerturbParams):
        self.name, self.params = name, params

    def __call__(self, x, target, models, generator):
        n = len(x)
        noise = generator.randn(*x.shape[1:], device=x.device)  # row i from sample i's own stream
        cf = (x + self.params.eps * torch.sign(noise)).clamp(-1, 1)
        zeros = torch.zeros(n, dtype=torch.int64)
        return finalize(x, cf, target, models, zeros + 1, torch.zeros(n, dtype=torch.bool), zeros, NFE(n))
