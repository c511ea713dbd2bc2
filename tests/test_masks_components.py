"""On-device connected components (methods/components.py) against scipy's rule: ``ndimage.label`` with the
8-connected structure, then ``argmax`` of the component sizes (the first largest in raster order)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.components import (
    label_components,
    largest_component_scipy,
    largest_component_torch,
    largest_of_labels,
)
from methods.masks import largest_component


def scipy_largest(m: torch.Tensor, structure: np.ndarray | None = None) -> torch.Tensor:
    """The reference: ``scipy.ndimage.label`` (8-connected unless ``structure``) and the first largest component."""
    return largest_component_scipy(m) if structure is None else largest_component_scipy(m, structure)


def masks(rows: list[str]) -> torch.Tensor:
    """A (1, 1, H, W) mask drawn with '#' (foreground) and '.'."""
    return torch.tensor([[c == "#" for c in r] for r in rows], dtype=torch.float32).view(1, 1, len(rows), -1)


def snake(h: int, w: int) -> torch.Tensor:
    """A boustrophedon path through the whole image: every other row full, joined at alternating ends; its
    first pixel in raster order is a corner but its geodesic diameter is about H*W/2."""
    m = torch.zeros(h, w)
    m[::2] = 1
    for r in range(1, h, 2):
        m[r, w - 1 if r % 4 == 1 else 0] = 1
    return m.view(1, 1, h, w)


def spiral(n: int) -> torch.Tensor:
    """A square spiral wall, one pixel thick with one-pixel gaps, winding inwards."""
    m = np.zeros((n, n), dtype=np.float32)
    top, left, bottom, right = 0, 0, n - 1, n - 1
    while top <= bottom and left <= right:
        m[top, left:right + 1] = 1
        m[top:bottom + 1, right] = 1
        if top + 2 <= bottom:
            m[bottom, left:right + 1] = 1
        if left + 2 <= right and top + 2 <= bottom:
            m[top + 2:bottom + 1, left] = 1
        top, left, bottom, right = top + 2, left + 2, bottom - 2, right - 2
        if top <= bottom:
            m[top - 1, left - 1] = 1 if left - 1 >= 0 else 0
    return torch.from_numpy(m).view(1, 1, n, n)


@pytest.mark.parametrize("shape", [(32, 32), (64, 64), (17, 40), (48, 9), (1, 30), (30, 1)])
@pytest.mark.parametrize("density", [0.05, 0.3, 0.5, 0.6, 0.9])
def test_random_masks_match_scipy(shape, density):
    g = torch.Generator().manual_seed(hash((shape, density)) % 2**31)
    m = (torch.rand(12, 1, *shape, generator=g) < density).float()
    ref = scipy_largest(m)
    assert torch.equal(largest_component_torch(m), ref)
    if shape[0] * shape[1] <= 1024:  # the fixed, sync-free bound (n_fg - 1 rounds; slow for large masks on a CPU)
        assert torch.equal(largest_component(m, max_fg=int(m.flatten(1).sum(1).max())), ref)


def test_top_ratio_masks_with_their_fixed_bound_match_scipy():
    """FiRe's masks: the top 5 % of a smooth attribution; max_fg = top_ratio's count bounds the rounds."""
    from methods.masks import top_ratio, top_ratio_count

    g = torch.Generator().manual_seed(3)
    a = torch.nn.functional.avg_pool2d(torch.rand(16, 1, 64, 64, generator=g), 5, 1, 2)
    m = top_ratio(a, 0.05)
    assert torch.equal(largest_component(m, max_fg=top_ratio_count(64 * 64, 0.05)), scipy_largest(m))


@pytest.mark.parametrize("name, m", [
    ("empty", torch.zeros(1, 1, 8, 8)),
    ("full", torch.ones(1, 1, 8, 11)),
    ("one pixel", masks(["....", "..#.", "...."])),
    ("borders", masks(["#..#", "#..#", "....", "####"])),
    ("diagonal only", masks(["#....", ".#...", "..#..", "...#.", "##..#"])),
    ("anti-diagonal", masks(["...##", "..#..", ".#...", "#...#", "...#."])),
    ("tie, first in raster order wins", masks(["..##", "....", "##..", "...."])),
    ("tie, first pixel not first row of the other", masks(["...#", "#..#", "#...", "...."])),
    ("tie of three", masks(["#.#.#", ".....", "....."])),
    ("snake", snake(31, 16)),
    ("spiral", spiral(33)),
])
def test_edge_cases_match_scipy(name, m):
    got = largest_component_torch(m)
    assert torch.equal(got, scipy_largest(m)), name
    assert torch.equal(largest_component(m, max_fg=int(m.sum())), got), name


def test_labels_are_the_first_pixel_index():
    m = masks(["#..#", "#...", "...#"])
    lab = label_components(m).view(-1)
    assert lab.tolist() == [0, 12, 12, 3, 0, 12, 12, 12, 12, 12, 12, 11]  # background: H * W = 12


def test_fixed_bound_is_needed_and_enough_on_a_snake():
    """The fixed count is tight enough to matter: a snake needs many rounds, and n_fg - 1 rounds suffice."""
    m = snake(31, 16)
    full = label_components(m)
    assert not torch.equal(label_components(m, rounds=2), full)
    assert torch.equal(label_components(m, rounds=int(m.sum()) - 1), full)


def test_planted_faults_are_caught():
    """The edge cases discriminate: 4-connectivity fails the diagonal case, the last-largest tie rule the tie."""
    four = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=bool)
    diag = masks(["#....", ".#...", "..#..", "...#.", "##..#"])
    assert not torch.equal(scipy_largest(diag, four), largest_component_torch(diag))
    tie = masks(["..##", "....", "##..", "...."])
    lab = label_components(tie)
    last = largest_of_labels(torch.where(tie > 0.5, 15 - lab, lab), tie > 0.5)  # labels reversed: last wins
    assert not torch.equal(last.float(), largest_component_torch(tie))
    assert torch.equal(largest_component_torch(tie), scipy_largest(tie))
