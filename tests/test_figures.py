"""vcebench.report.figures: one |diff| scale per figure, flipped marks, the efficiency figure's legend, galleries."""

import numpy as np
import pandas as pd
import pytest

from vcebench.report import figures


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


def test_gallery_command_shares_one_scale_and_reports_probabilities(tmp_path, monkeypatch):
    """`vcebench report gallery`: one PNG per method, the same |diff| scale for all, p(target) of the
    task's classifier on the input and on the counterfactual."""
    import torch

    import vcebench.models
    from vcebench.cli import main
    from vcebench.config.load import load_config
    from vcebench.core.io import from_uint8, load_npz, save_npz
    from vcebench.costs.standins import fake_counterfactuals, standin_models
    from vcebench.data import load_split
    from vcebench.report import figures as figs

    cfg_path = tmp_path / "small.yaml"
    cfg_path.write_text("threads: 1\ndatasets:\n  synthfaces: {n_identities: 40, images_per_identity: 8}\n")
    config = ["--config", "config/config.yaml", "--config", str(cfg_path)]
    split = load_split(load_config(config[1::2]), "synthfaces", "test")
    ids = torch.sort(split.sample_ids).values[:12]
    x = split.float_images(split.index_of(ids))
    models = standin_models(split.attribute_names, 3, threshold=float(x.flatten(1).mean(1).median()))
    res = tmp_path / "results"
    fake_counterfactuals(x, ids, models.classifier, res / "synthfaces_smile" / "a" / "counterfactuals.npz")
    z = load_npz(res / "synthfaces_smile" / "a" / "counterfactuals.npz")
    z["cf"] = z["cf"][::-1].copy()  # method b: large, wrong edits (another image)
    save_npz(res / "synthfaces_smile" / "b" / "counterfactuals.npz", **z)
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda *a, **k: models, raising=False)
    calls = []
    real = figs.gallery_figure
    monkeypatch.setattr(figs, "gallery_figure", lambda *a, **k: (calls.append((a, k)), real(*a, **k)))
    assert main(["report", "gallery", "--task", "synthfaces_smile", "--methods", "a", "b", "--results", str(res),
                 "--out-dir", str(res), "--n-gallery", "4", *config]) == 0
    assert [c[0][1] for c in calls] == ["a", "b"]
    assert calls[0][0][8] == calls[1][0][8] > 0  # one vmax for both methods
    for (path, _m, inputs, cf, p_before, p_after, target, flipped, _vmax), k in calls:
        assert path.read_bytes()[:4] == b"\x89PNG" and k["gt"] is not None and len(k["ids"]) == 4
        with torch.no_grad():
            p = torch.softmax(models.classifier(from_uint8(cf)), 1).numpy()
        np.testing.assert_allclose(p_after, p[np.arange(4), target], rtol=1e-5)
        np.testing.assert_array_equal(flipped, p.argmax(1) == target)
        assert ((p_before < 0.5) == (target == 1 - models.classifier(from_uint8(inputs)).argmax(1).numpy())).all()
