"""Ground-truth metrics on synthetic tasks (ours, beyond the reference protocols).

The synthetic renderer knows the true counterfactual ``gt_cf``: the same sample rendered
with only the query attribute flipped (``get_synthetic(...).gt_counterfactuals``). The
truly changed region R is where gt_cf differs from x; a CF pixel counts as changed where
the CF differs from x. A pixel differs when the largest per-channel absolute difference,
in [0, 1] units, exceeds ``threshold`` (config ``metrics.gt_change_threshold``; default
0.05 ~ 13 grey levels, above uint8 rounding and the low-amplitude noise diffusion
reconstructions leave everywhere).

- GT_L1: mean |cf - gt_cf| ([0, 1] units, all pixels and channels), GT_L1_region: the same
  inside R; GT_L1_input / GT_L1_region_input: the same numbers for the unedited input
  (cf = x), the do-nothing baseline a useful counterfactual must beat.
- GT_precision: share of the CF's changed pixels that lie in R; GT_recall: share of R the CF
  changed. Per sample, then averaged (samples with an empty changed set or an empty R are
  left out of precision or recall, respectively; the counts say how many remain).

Subset: successful counterfactuals of correctly classified inputs. gt_cf flips the *true*
label, which is the counterfactual's target only when f(x) is right.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from .base import EvalBatch, MetricError, Subset, require
from .bootstrap import Resamples, Samples, weighted_means


def changed_pixels(a: Tensor, b: Tensor, threshold: float) -> Tensor:
    """(N, H, W) bool: max over channels of |a - b| / 2 (images in [-1, 1]) above ``threshold``."""
    return ((a - b).abs().amax(1) / 2) > threshold


class GroundTruth:
    """GT_L1, GT_L1_region (+ the input's floor values), GT_precision, GT_recall."""

    name = "GT"
    outputs = ("GT_L1", "GT_L1_region", "GT_L1_input", "GT_L1_region_input", "GT_precision", "GT_recall")
    roles: tuple[str, ...] = ()

    def __init__(self, threshold: float = 0.05, subset: Subset = "correct_successful"):
        if not 0 <= threshold < 1:
            raise MetricError(f"GT change threshold must be in [0, 1) (config key `metrics.gt_change_threshold`),"
                              f" got {threshold}")
        self.threshold, self.subset = threshold, subset
        self.record = {"gt_change_threshold": threshold}  # into metrics.json
        self.sums = {k: 0.0 for k in self.outputs}
        self.counts = {k: 0 for k in self.outputs}
        self.samples = {k: Samples() for k in self.outputs}
        self.n: dict[str, int] = {}

    def _add(self, key: str, ids: Tensor, values: Tensor) -> None:
        self.sums[key] += float(values.double().sum())
        self.counts[key] += int(values.numel())
        self.samples[key].add(ids, values)

    def update(self, batch: EvalBatch) -> None:
        if batch.gt_cf is None:
            raise MetricError("GT metrics need the ground-truth counterfactuals (EvalBatch.gt_cf); "
                              "they exist for synthetic datasets only")
        keep = batch.subset(self.subset)
        if not keep.any():
            return
        ids = batch.sample_id[keep]
        x, cf, gt = batch.x[keep].double(), batch.cf[keep].double(), batch.gt_cf[keep].double()
        region = changed_pixels(gt, x, self.threshold)  # (N, H, W)
        edited = changed_pixels(cf, x, self.threshold)
        for suffix, img in (("", cf), ("_input", x)):
            err = (img - gt).abs() / 2  # (N, C, H, W), [0, 1] units
            self._add("GT_L1" + suffix, ids, err.flatten(1).mean(1))
            r = region.unsqueeze(1).expand_as(err)
            has = region.flatten(1).any(1)
            per = (err * r).flatten(1).sum(1) / r.flatten(1).sum(1).clamp_min(1)
            self._add("GT_L1_region" + suffix, ids[has], per[has])
        hit = (edited & region).flatten(1).sum(1).double()
        n_edit, n_region = edited.flatten(1).sum(1), region.flatten(1).sum(1)
        self._add("GT_precision", ids[n_edit > 0], (hit / n_edit.clamp_min(1))[n_edit > 0])
        self._add("GT_recall", ids[n_region > 0], (hit / n_region.clamp_min(1))[n_region > 0])

    def compute(self) -> dict[str, float]:
        require(self.counts["GT_L1"], 1, "GT_L1", self.subset)
        self.n = dict(self.counts)
        return {k: (self.sums[k] / self.counts[k] if self.counts[k] else float("nan")) for k in self.sums}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        return {k: weighted_means(s, resamples) for k, s in self.samples.items()}

    def per_sample(self) -> dict[str, Samples]:
        return dict(self.samples)
