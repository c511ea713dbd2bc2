"""8-connected components of binary masks on the mask's device, in torch (no host round trip).

Selects exactly the component that ``scipy.ndimage.label(m, structure=ones((3, 3)))`` followed by
``argmax(bincount(labels)[1:])`` selects: scipy numbers components in raster order of their first pixel
and ``argmax`` returns the first maximum, so among equally large components the one whose first pixel
comes first in raster order wins. Here every component is labelled by the raster index of its first
pixel (its minimum index), so the same rule is "largest size, then smallest label".

Labelling is min-label propagation: each round every foreground pixel takes the minimum label of its
3 x 3 neighbourhood (a max-pool of negated labels; the background never wins). After r rounds a pixel holds
the minimum index within geodesic distance r inside its component, so the component's minimum everywhere
once r reaches the component's geodesic eccentricity, at most (pixels in the component) - 1: ``n_fg - 1``
rounds, with ``n_fg`` the mask's foreground count, are provably enough. That fixed count, with no host
check, is what a CUDA graph runs (:func:`largest_component_fixed`; FiRe's masks hold top_ratio's k pixels).
Eager callers add pointer jumping, ``L[p] <- L[L[p]]`` (the "label propagation with shortcutting" of Liu &
Tarjan, "Simple concurrent labeling algorithms for connected components", SOSA 2019), and stop at
convergence (a host check per round): a jump only lowers a label to another pixel's label of the same
component, so the fixed point is the same, reached in a few rounds (8 on FiRe's 5 % masks at 128 px).
:func:`largest_component_scipy` is the reference, and the CPU default (methods/masks.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage
from torch import Tensor

EIGHT = np.ones((3, 3), dtype=bool)  # scipy's 8-connected structure


def _max3x3(neg: Tensor, low: float) -> Tensor:
    """The maximum over each pixel's 3 x 3 neighbourhood, itself included (outside the image counts as ``low``):
    one stride-1 max-pool on a GPU, two separable passes of shifted maxima on a CPU (where PyTorch's stride-1
    max-pool is an order of magnitude slower). Both are exact."""
    if neg.device.type != "cpu":
        return F.max_pool2d(neg, 3, stride=1, padding=1)
    p = F.pad(neg, (1, 1, 1, 1), value=low)
    rows = torch.maximum(torch.maximum(p[..., :-2], p[..., 1:-1]), p[..., 2:])
    return torch.maximum(torch.maximum(rows[..., :-2, :], rows[..., 1:-1, :]), rows[..., 2:, :])


def _propagate(neg: Tensor, fg: Tensor, big: float) -> Tensor:
    """One round of min-label propagation on negated labels ``neg`` (N, 1, H, W) (background ``-big``): each
    foreground pixel takes the largest negated label, i.e. the smallest label, of its 3 x 3 neighbourhood."""
    return torch.where(fg, _max3x3(neg, -big), neg)


def _jump(neg: Tensor, fg: Tensor, big: float) -> Tensor:
    """Pointer jumping, ``L[p] <- L[L[p]]``, on negated labels."""
    n, _, h, w = neg.shape
    flat = neg.reshape(n, h * w)
    ext = torch.cat([flat, flat.new_full((n, 1), -big)], dim=1)  # index h*w: the background's label
    jumped = ext.gather(1, (-flat).long())
    return torch.where(fg, jumped.view_as(neg), neg)


def _initial(m: Tensor) -> tuple[Tensor, Tensor, float]:
    """(negated labels: minus the raster index on the foreground, ``-big`` with ``big = H*W`` on the background;
    the foreground, bool; big)."""
    n, c, h, w = m.shape
    if c != 1:
        raise ValueError(f"masks must be (N, 1, H, W), got {tuple(m.shape)}")
    if h * w >= 2**24:
        raise ValueError(f"float32 labels are exact up to 2**24 pixels, got {h} x {w}")
    fg = m > 0.5
    big = float(h * w)
    idx = torch.arange(h * w, device=m.device, dtype=torch.float32).view(1, 1, h, w)
    return torch.where(fg, -idx, torch.full_like(idx, -big)).expand(n, 1, h, w), fg, big


def label_components(m: Tensor, rounds: int | None = None) -> Tensor:
    """Component labels of the binary masks ``m`` (N, 1, H, W): each foreground pixel gets the raster index
    of its component's first pixel, the background gets H*W; float32 (N, 1, H, W).

    ``rounds`` None: propagation and jumps until no label changes (one host check per round; eager only). An
    int: exactly that many rounds of plain propagation (two kernels each on a GPU), no host check
    (graph-capturable); ``n_fg - 1`` rounds are provably enough (module docstring)."""
    neg, fg, big = _initial(m)
    if rounds is not None:
        for _ in range(rounds):
            neg = _propagate(neg, fg, big)
        return -neg
    while True:
        nxt = _jump(_propagate(neg, fg, big), fg, big)
        if torch.equal(nxt, neg):
            return -neg
        neg = nxt


def largest_of_labels(lab: Tensor, fg: Tensor) -> Tensor:
    """Bool (N, 1, H, W): each sample's largest labelled component, ties to the smallest label (scipy's
    ``argmax`` over components numbered in raster order); all False for an empty mask."""
    n, _, h, w = lab.shape
    flat = lab.reshape(n, h * w).long()
    sizes = torch.zeros(n, h * w + 1, dtype=torch.long, device=lab.device)
    sizes.scatter_add_(1, flat, torch.ones_like(flat))  # sizes[:, l]: pixels labelled l
    sizes[:, h * w] = 0  # the background bin
    best = sizes.amax(1, keepdim=True)
    label_ids = torch.arange(h * w + 1, device=lab.device).expand(n, -1)
    chosen = torch.where(sizes == best, label_ids, h * w).amin(1, keepdim=True)  # the first largest
    return ((flat == chosen) & fg.reshape(n, h * w)).view(n, 1, h, w)


def largest_component_torch(m: Tensor, rounds: int | None = None) -> Tensor:
    """Each sample's largest 8-connected component of ``m`` > 0.5, as ``m``'s dtype; ``rounds`` as in
    :func:`label_components` (None: to convergence, eager)."""
    lab = label_components(m, rounds)
    return largest_of_labels(lab, m > 0.5).to(m.dtype)


def largest_component_fixed(m: Tensor, max_fg: int) -> Tensor:
    """:func:`largest_component_torch` with the provable fixed round count for masks of at most ``max_fg``
    foreground pixels (``max_fg - 1`` rounds, at least 0): no host synchronisation, graph-capturable."""
    return largest_component_torch(m, rounds=max(0, int(max_fg) - 1))


def largest_component_scipy(m: Tensor, structure: np.ndarray = EIGHT) -> Tensor:
    """The same selection by ``scipy.ndimage.label`` per sample on the host (the CPU default: faster there than
    the rounds above); ``structure`` the connectivity (8-connected)."""
    arr = m.detach().cpu().numpy() > 0.5
    out = np.zeros_like(arr)
    for i in range(arr.shape[0]):
        lab, n = ndimage.label(arr[i, 0], structure=structure)
        if n:
            out[i, 0] = lab == int(np.argmax(np.bincount(lab.ravel())[1:])) + 1
    return torch.from_numpy(out).to(device=m.device, dtype=m.dtype)
