"""The Metric interface (ARCHITECTURE.md): streaming update/compute with directions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from torch import Tensor


@dataclass
class EvalBatch:
    """One batch of aligned originals and counterfactuals.

    ``x``, ``cf`` in [-1, 1]; ``sample_id`` int64 N; ``target`` int N (y' = 1 - f(x));
    ``flipped`` bool N (f(cf) == y'); ``label`` int N (ground-truth query label, -1 unknown);
    ``gt_cf`` the synthetic ground-truth counterfactual or ``None``;
    ``extra`` anything else a metric needs (e.g. per-sample records).
    """

    x: Tensor
    cf: Tensor
    sample_id: Tensor
    target: Tensor
    flipped: Tensor
    label: Tensor
    gt_cf: Tensor | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)


class Metric(Protocol):
    name: str
    higher_is_better: dict[str, bool]

    def update(self, batch: EvalBatch) -> None: ...

    def compute(self) -> dict[str, float]: ...
