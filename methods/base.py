"""The Method interface (ARCHITECTURE.md) and what every method returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from vcebench.models.base import TaskModels
from vcebench.rng import SampleGenerators


@dataclass
class Counterfactuals:
    images: Tensor  # N x C x H x W in [-1, 1]
    flipped: Tensor  # bool N: classifier(cf) == target
    steps: Tensor  # int N: refinement / guided steps actually used
    info: dict[str, Tensor] = field(default_factory=dict)  # per-sample extras, first dim N


class Method(Protocol):
    name: str

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals: ...


def cat_counterfactuals(parts: list[Counterfactuals]) -> Counterfactuals:
    keys = set.intersection(*(set(p.info) for p in parts)) if parts else set()
    return Counterfactuals(
        images=torch.cat([p.images for p in parts]),
        flipped=torch.cat([p.flipped for p in parts]),
        steps=torch.cat([p.steps for p in parts]),
        info={k: torch.cat([p.info[k] for p in parts]) for k in sorted(keys)},
    )
