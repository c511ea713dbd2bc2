"""How a judge sees the renderer's true counterfactuals (synthetic datasets): numbers for its card.

A judge is fit for the protocol when it agrees with the ground truth: the oracle (and the explained
classifier) reads the true counterfactual of x as the other class, and the embedding judges (identity,
SimSiam) see it as the same face / patient. ``Counterfactuals`` renders them (``vcebench.steps.train``
passes one to every trainer of a synthetic dataset); the identity and SimSiam recipes also train on them
(``cf_views``: the share of a batch's second views that is a true counterfactual of the first).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...core.io import from_uint8

# (split, attribute) -> uint8 N x C x H x W: the split's images with only that attribute flipped
Counterfactuals = Callable[[Any, str], Tensor]
N_CHECK = 1000  # test inputs the checks use (the first, by sample id)


def flipped_views(counterfactuals: Counterfactuals | None, split: Any, attributes: Sequence[str]) -> Tensor | None:
    """A x N x C x H x W uint8: ``split`` rendered with each of ``attributes`` flipped (None without a renderer)."""
    if counterfactuals is None or not attributes:
        return None
    return torch.stack([counterfactuals(split, a) for a in attributes])


def mix_views(x: Tensor, idx: Tensor, views: Tensor | None, share: float) -> Tensor:
    """Rows ``idx`` of uint8 images ``x`` with a ``share`` of them replaced by a true counterfactual (a random
    query attribute flipped); global torch RNG (the trainer's seed)."""
    out = x[idx]
    if views is None or share <= 0:
        return out
    use = torch.rand(len(idx)) < share
    which = torch.randint(0, views.shape[0], (len(idx),))
    if bool(use.any()):
        out = out.clone()
        out[use] = views[which[use], idx[use]]
    return out


@torch.no_grad()
def truth_agreement(net: torch.nn.Module, attribute_names: Sequence[str], test: Any, attributes: Sequence[str],
                    counterfactuals: Counterfactuals | None, batch: int = 256) -> dict[str, Any] | None:
    """Per query attribute: the share of the first ``N_CHECK`` test inputs whose true counterfactual ``net``
    labels as the flipped class (``net``: logits per attribute, > 0 = present), and the share it labels
    right on the inputs themselves."""
    if counterfactuals is None:
        return None
    net.eval()
    sub = _first(test, N_CHECK)
    out: dict[str, Any] = {}
    for a in attributes:
        if a not in attribute_names:
            continue
        j, y = list(attribute_names).index(a), sub.labels[:, list(sub.attribute_names).index(a)] > 0.5
        cf = counterfactuals(sub, a)
        pred_x = torch.cat([net(from_uint8(sub.images[i:i + batch]))[:, j] > 0 for i in range(0, len(y), batch)])
        pred_cf = torch.cat([net(from_uint8(cf[i:i + batch]))[:, j] > 0 for i in range(0, len(y), batch)])
        out[a] = {"n": int(len(y)), "input_accuracy": float((pred_x == y).float().mean()),
                  "truth_agreement": float((pred_cf == ~y).float().mean())}
    return out


@torch.no_grad()
def truth_similarity(embed: Callable[[Tensor], Tensor], test: Any, attributes: Sequence[str],
                     counterfactuals: Counterfactuals | None, threshold: float | None = None) -> dict[str, Any] | None:
    """Per query attribute: cosine between the embeddings of each of the first ``N_CHECK`` test inputs and its
    true counterfactual (mean, and the share above ``threshold``: the truth's FVA for an identity net), beside
    the mean cosine of an input with the test input half the split away (another identity: the level of "a
    different face / patient")."""
    if counterfactuals is None:
        return None
    sub = _first(test, N_CHECK)
    e = F.normalize(embed(sub.images), dim=1)
    # half the split apart: another face / patient (a split lists an identity's images together)
    other = float((e * torch.roll(e, len(e) // 2, 0)).sum(1).mean())
    out: dict[str, Any] = {}
    for a in attributes:
        cos = (e * F.normalize(embed(counterfactuals(sub, a)), dim=1)).sum(1)
        row = {"n": int(len(cos)), "mean_cos_truth": float(cos.mean()), "mean_cos_other_image": other}
        if threshold is not None:
            row[f"share_cos_truth_gt_{threshold:.3g}"] = float((cos > threshold).float().mean())
        out[a] = row
    return out


def _first(split: Any, n: int) -> Any:
    """The first ``n`` rows of a split (by position; splits are sorted by sample id)."""

    k = min(n, len(split.sample_ids))
    return dataclasses.replace(split, sample_ids=split.sample_ids[:k], labels=split.labels[:k],
                               identity=split.identity[:k], _images=split.images[:k], _reader=None,
                               paths=split.paths[:k] if split.paths else None)
