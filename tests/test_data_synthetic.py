"""Synthetic datasets: determinism, ground-truth counterfactuals, correlations, identity splits."""

import copy

import numpy as np
import pytest
import torch

from vcebench.data import DatasetError, eval_split_name, get_synthetic, load_split
from vcebench.data.base import save_split
from vcebench.data.registry import synthetic_meta


def small(cfg, name, **kw):
    cfg = copy.deepcopy(cfg)
    d = cfg["datasets"][name]
    d.update({"n_identities": 40, "images_per_identity": 8} if name == "synthfaces" else {"n_patients": 60})
    d.update(kw)
    return cfg


@pytest.mark.parametrize("name", ["synthfaces", "synthxray"])
def test_rerender_is_byte_identical_and_batch_independent(cfg, name):
    ds = get_synthetic(small(cfg, name), name)
    ids = torch.tensor([3, 17, 5, 40])
    a = ds.render_uint8(ids)
    b = ds.render_uint8(ids)
    assert torch.equal(a, b)
    alone = ds.render_uint8(ids[1:2])
    assert torch.equal(alone[0], a[1])
    ds.batch_size = 1  # one batch per worker thread
    torch.set_num_threads(2)
    try:
        threaded = ds.render_uint8(ids)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert torch.equal(threaded, a)
    other_seed = get_synthetic(small(cfg, name, seed=1), name).render_uint8(ids)
    assert not torch.equal(other_seed, a)
    c = 3 if name == "synthfaces" else 1
    assert a.shape == (4, c, 32, 32) and a.dtype == torch.uint8


@pytest.mark.parametrize("name", ["synthfaces", "synthxray"])
def test_splits_are_disjoint_by_identity(cfg, name):
    c = small(cfg, name)
    ds = get_synthetic(c, name)
    ids = {s: ds.split_sample_ids(s) for s in ("train", "val", "test")}
    idents = {s: set(ds.identity_of(v).tolist()) for s, v in ids.items()}
    assert not idents["train"] & idents["val"] and not idents["train"] & idents["test"]
    assert not idents["val"] & idents["test"]
    all_ids = torch.cat(list(ids.values()))
    assert len(all_ids) == ds.n_samples == len(set(all_ids.tolist()))
    assert len(ids["train"]) > len(ids["test"]) > len(ids["val"]) > 0
    split = load_split(c, name, "test")
    assert torch.equal(split.sample_ids, ids["test"]) and bool((split.sample_ids.diff() > 0).all())
    assert split.images.shape[0] == len(split) and split.labels.shape == (len(split), len(split.attribute_names))
    assert eval_split_name(name) == "test"


@pytest.mark.parametrize("attr", ["Smiling", "Mouth_Slightly_Open", "Wearing_Lipstick"])
def test_mouth_counterfactuals_are_local_to_mouth_and_cheeks(cfg, attr):
    ds = get_synthetic(small(cfg, "synthfaces"), "synthfaces")
    ids = torch.arange(0, 320, 10)
    x = ds.render_uint8(ids).float()
    cf = ((ds.gt_counterfactuals(ids, attr) + 1) * 127.5).round()
    changed = (cf - x).abs().amax(1) > 0
    region = ds.attribute_region(ids, attr)
    assert region.float().mean() < 0.25  # a box around mouth and cheeks, not the face
    assert changed.flatten(1).any(1).all()  # every sample changed
    assert not (changed & ~region).any(), f"{attr} changed pixels outside the mouth/cheek box"
    strong = (cf - x).abs().amax(1).flatten(1)
    assert strong.amax(1).min() > 10
    if attr == "Smiling":  # clearly visible: on average several pixels change by more than 30/255
        assert (strong > 30).sum(1).float().mean() > 3


def test_counterfactual_changes_only_the_query_label_and_is_the_image_when_unchanged(cfg):
    ds = get_synthetic(small(cfg, "synthfaces"), "synthfaces")
    sid = 21
    lab = ds.labels([sid])[0]
    j = ds.attribute_names.index("Young")
    same = ds.render_counterfactual(sid, "Young", int(lab[j]))
    assert torch.equal(same, ds.render([sid])[0])
    flipped = ds.render_counterfactual(sid, "Young", 1 - int(lab[j]))
    assert (flipped - same).abs().max() > 0.3
    ids = torch.arange(0, 320, 16)
    young = ds.gt_counterfactuals(ids, "Young")
    corners = (young - ds.render(ids))[:, :, -2:, [0, 1, -2, -1]]  # background / clothes: untouched by age
    assert corners.abs().max() == 0
    with pytest.raises(DatasetError, match="no attribute"):
        ds.render_counterfactual(sid, "Smile", 1)


def test_pacemaker_counterfactual_removes_a_bright_device(cfg):
    ds = get_synthetic(small(cfg, "synthxray"), "synthxray")
    lab = ds.labels(torch.arange(60))
    ids = torch.nonzero(lab[:, ds.attribute_names.index("Pacemaker")] > 0)[:, 0][:8]
    x, cf = ds.render(ids), ds.gt_counterfactuals(ids, "Pacemaker")
    diff = (x - cf)
    changed = diff.abs().flatten(1) > 1e-6
    assert (changed.float().mean(1) < 0.12).all() and (changed.sum(1) > 3).all()
    assert (diff.flatten(1).amax(1) > 0.3).all()  # the device is brighter than what it covered


@pytest.mark.parametrize("name", ["synthfaces", "synthxray"])
def test_measured_correlations_match_documented_matrix(cfg, name):
    c = copy.deepcopy(cfg)
    if name == "synthfaces":
        c["datasets"][name].update(n_identities=2500, images_per_identity=8)
    else:
        c["datasets"][name].update(n_patients=10000)
    ds = get_synthetic(c, name)
    lab = ds.labels(torch.arange(ds.n_samples)).numpy().astype(np.float64)
    measured = np.corrcoef(lab.T)
    documented = ds.correlation()
    assert np.allclose(np.diag(documented), 1)
    assert np.abs(measured - documented).max() < 0.08
    assert np.abs(lab.mean(0) - ds.marginals()).max() < 0.04
    if name == "synthfaces":
        n = ds.attribute_names
        r = lambda a, b: documented[n.index(a), n.index(b)]  # noqa: E731
        assert r("Smiling", "Mouth_Slightly_Open") > 0.3 and r("Young", "Gray_Hair") < -0.3
        assert r("Male", "No_Beard") < -0.3 and r("Male", "Wearing_Lipstick") < -0.5
        assert len(n) >= 10
    else:
        assert documented[ds.attribute_names.index("Pacemaker"), ds.attribute_names.index("Cardiomegaly")] > 0.3


def test_resolution_independent_geometry(cfg):
    c32, c64 = small(cfg, "synthfaces"), small(cfg, "synthfaces", resolution=64)
    a = get_synthetic(c32, "synthfaces").render([7])
    b = get_synthetic(c64, "synthfaces").render([7])
    b_down = torch.nn.functional.avg_pool2d(b, 2)
    assert (a - b_down).abs().mean() < 0.06


def test_cache_round_trip_and_mismatch(cfg, tmp_path):
    c = small(cfg, "synthxray")
    ds = get_synthetic(c, "synthxray")
    split = load_split(c, "synthxray", "val")
    save_split(split, tmp_path, synthetic_meta(ds))
    back = load_split(c, "synthxray", "val", data_dir=tmp_path)
    assert torch.equal(back.images, split.images) and torch.equal(back.labels, split.labels)
    assert back.attribute_names == split.attribute_names
    assert torch.equal(back.float_images(back.index_of(split.sample_ids[[2, 0]])), split.float_images([2, 0]))
    with pytest.raises(DatasetError, match="resolution"):
        load_split(small(cfg, "synthxray", resolution=64), "synthxray", "val", data_dir=tmp_path)
    with pytest.raises(DatasetError, match="vcebench data render"):
        load_split(c, "synthxray", "train", data_dir=tmp_path)
    with pytest.raises(DatasetError, match="not in split"):
        back.index_of([10 ** 9])


@pytest.mark.parametrize("module", ["synthfaces", "synthxray"])
def test_docstring_matrix_is_the_sampling_networks(module):
    import importlib

    mod = importlib.import_module(f"vcebench.data.{module}")
    names, corr = mod.attribute_correlation()
    rows = {}
    for line in mod.__doc__.splitlines():
        parts = line.split()
        if parts and parts[0] in names + ["prevalence"] and len(parts) == len(names) + 1:
            rows[parts[0]] = [float(v) for v in parts[1:]]
    documented = np.array([rows[n] for n in names])
    assert np.abs(documented - corr).max() <= 0.006
    assert np.abs(np.array(rows["prevalence"]) - mod.ATTRIBUTE_NETWORK.marginals()).max() <= 0.006
