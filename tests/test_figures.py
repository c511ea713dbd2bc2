"""vcebench.figures: one |diff| scale per figure, flipped marks, the efficiency figure's legend, galleries."""

import numpy as np
import pandas as pd
import pytest

from vcebench import figures


def _imgs(n=3, c=3, s=12, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, c, s, s), dtype=np.uint8)


def test_abs_diff_units_and_shared_scale():
    a = np.zeros((1, 3, 2, 2), np.uint8)
    b = a.copy()
    b[0, 0, 0, 0] = 255  # one channel of one pixel fully changed
    d = figures.abs_diff(b, a)
    assert d.shape == (1, 2, 2) and d[0, 0, 0] == pytest.approx(1 / 3) and d.sum() == pytest.approx(1 / 3)
    small, large = np.full((4, 4), 0.1), np.full((4, 4), 0.6)
    assert figures.diff_scale(small, large) == pytest.approx(0.6)  # the largest map sets the common scale
    assert figures.diff_scale(np.zeros((4, 4))) == pytest.approx(1 / 255)  # nothing changed: still a scale
    assert figures.diff_scale(None) == 1.0


@pytest.mark.parametrize("channels", [1, 3])
def test_qualitative_and_gallery_write_pngs(tmp_path, channels):
    x, gt = _imgs(c=channels), _imgs(c=channels, seed=1)
    cfs = {"fire": _imgs(c=channels, seed=2), "external_mine": _imgs(c=channels, seed=3)}
    flipped = {"fire": np.array([True, False, True]), "external_mine": np.array([False, False, True])}
    figures.qualitative_figure(tmp_path / "q.png", x, cfs, gt=gt, ids=[1, 2, 3], flipped=flipped)
    figures.gallery_figure(tmp_path / "g.png", "fire", x, cfs["fire"], np.array([0.1, 0.2, 0.3]),
                           np.array([0.9, 0.4, 0.8]), np.array([1, 0, 1]), flipped["fire"], vmax=0.5, gt=gt,
                           ids=[1, 2, 3], class_names=("no", "yes"))
    figures.gallery_figure(tmp_path / "g2.png", "fire", x, cfs["fire"], np.zeros(3), np.ones(3),
                           np.array([1, 0, 1]), flipped["fire"], vmax=0.5)  # no ground truth (real data)
    for f in ("q.png", "g.png", "g2.png"):
        assert (tmp_path / f).read_bytes()[:4] == b"\x89PNG"


def test_efficiency_figure_with_an_unprofiled_method(tmp_path):
    df = pd.DataFrame({"method": ["fire", "dime", "external_x"], "FID": [10.0, 12.0, 11.0],
                       "sec_per_cf": [0.1, 1.0, np.nan], "tflops_per_cf": [0.002, 0.05, np.nan],
                       "peak_mem_mb": [50.0, 200.0, np.nan]})
    figures.efficiency_figure(tmp_path / "e.png", df, title="t")
    assert (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"
    assert figures._mem_legend_values(df["peak_mem_mb"].to_numpy()) == [50.0, 120.0, 200.0]
