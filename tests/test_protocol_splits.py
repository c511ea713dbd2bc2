"""The tuning split is never the evaluation split: disjoint by sample id, for every dataset."""

from __future__ import annotations

import copy

import pytest
from fakes import make_celeba, make_celebahq, make_chexpert

from vcebench.data import eval_split_name, load_split, tune_split_name


def _with(cfg, name, **kw):
    cfg = copy.deepcopy(cfg)
    cfg["datasets"][name].update(kw)
    return cfg


def _disjoint(cfg, dataset):
    tune = load_split(cfg, dataset, tune_split_name(dataset))
    ev = load_split(cfg, dataset, eval_split_name(dataset))
    a, b = set(tune.sample_ids.tolist()), set(ev.sample_ids.tolist())
    assert a and b and not (a & b)
    return tune, ev


@pytest.mark.parametrize("dataset, kw", [("synthfaces", {"n_identities": 60, "images_per_identity": 8}),
                                         ("synthxray", {"n_patients": 200})])
def test_synthetic_tune_split_is_disjoint_from_the_evaluation_split(cfg, dataset, kw):
    tune, ev = _disjoint(_with(cfg, dataset, **kw), dataset)
    assert not set(tune.identity.tolist()) & set(ev.identity.tolist())  # and by person


def test_celeba_tune_split_is_the_validation_partition_without_minival(cfg, tmp_path):
    root = make_celeba(tmp_path / "c", n=40, partitions=[1] * 30 + [2] * 10)
    c = _with(cfg, "celeba", root=str(root), minival=12)
    tune, ev = _disjoint(c, "celeba")
    val = set(load_split(c, "celeba", "val").sample_ids.tolist())
    assert len(ev) == 12 and len(tune) == 18
    assert set(tune.sample_ids.tolist()) | set(ev.sample_ids.tolist()) == val


def test_celebahq_and_chexpert_tune_splits_are_disjoint(cfg, tmp_path):
    croot = make_celeba(tmp_path / "celeba", n=16)
    hq = make_celebahq(tmp_path / "hq", croot, n=16)
    _disjoint(_with(cfg, "celebahq", root=str(hq), celeba_root=str(croot), resolution=8), "celebahq")
    root, pm = make_chexpert(tmp_path, n_patients=30, small=True)
    tune, ev = _disjoint(_with(cfg, "chexpert", root=str(root), pacemaker_csv=str(pm), resolution=12), "chexpert")
    assert not set(tune.identity.tolist()) & set(ev.identity.tolist())
