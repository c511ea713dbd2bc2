"""Real-dataset loaders on tiny fake folders in the real on-disk formats, and their error paths."""

import copy

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from fakes import celeba_labels, make_celeba, make_celebahq, make_chexpert
from PIL import Image

from vcebench.data import DatasetError, eval_split_name, load_split
from vcebench.data.celeba import CELEBA_ATTRIBUTES


def with_ds(cfg, name, **kw):
    cfg = copy.deepcopy(cfg)
    cfg["datasets"][name].update(kw)
    return cfg


@pytest.mark.parametrize("fmt,nested", [("txt", False), ("csv", True)])
def test_celeba_splits_labels_and_images(cfg, tmp_path, fmt, nested):
    root = make_celeba(tmp_path / "celeba", n=12, fmt=fmt, kaggle_nested=nested)
    c = with_ds(cfg, "celeba", root=str(root), resolution=16, minival=2)
    labels = (celeba_labels(12) > 0).astype(np.float32)
    tr, va, te = (load_split(c, "celeba", s) for s in ("train", "val", "test"))
    assert tr.sample_ids.tolist() == [1, 2, 5, 6, 9, 10] and va.sample_ids.tolist() == [3, 7, 11]
    assert te.sample_ids.tolist() == [4, 8, 12]
    assert tr.attribute_names == list(CELEBA_ATTRIBUTES)
    assert np.array_equal(tr.labels.numpy(), labels[[0, 1, 4, 5, 8, 9]])
    x = va.float_images([0, 2])
    assert x.shape == (2, 3, 16, 16) and x.dtype == torch.float32 and x.min() >= -1 and x.max() <= 1
    # DiME/ACE preprocessing: Resize(res), CenterCrop(res), ToTensor, Normalize(0.5, 0.5)
    ref = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    expected = ref(Image.open(va.paths[0]).convert("RGB"))
    assert (va.float_images([0])[0] - expected).abs().max() < 1e-5
    assert va.images.shape == (3, 3, 16, 16)
    mv = load_split(c, "celeba", "minival")
    assert len(mv) == 2 and len(set(mv.sample_ids.tolist())) == 2 and set(mv.sample_ids.tolist()) <= {3, 7, 11}
    assert torch.equal(load_split(c, "celeba", "minival").sample_ids, mv.sample_ids)  # seeded
    assert eval_split_name("celeba") == "minival"


def test_celeba_minival_draws_without_replacement(cfg, tmp_path):
    root = make_celeba(tmp_path / "c", n=40, partitions=[1] * 40)
    mv = load_split(with_ds(cfg, "celeba", root=str(root), minival=40), "celeba", "minival")
    assert sorted(mv.sample_ids.tolist()) == list(range(1, 41))


def test_celebahq_uses_celeba_partition_of_the_original(cfg, tmp_path):
    croot = make_celeba(tmp_path / "celeba", n=8)
    hq = make_celebahq(tmp_path / "hq", croot, n=8)
    c = with_ds(cfg, "celebahq", root=str(hq), celeba_root=str(croot), resolution=8)
    # hq i maps to CelebA file 8 - i; CelebA partitions cycle 0,0,1,2 over files 1..8
    part = {f: (0, 0, 1, 2)[(f - 1) % 4] for f in range(1, 9)}
    for name, p in (("train", 0), ("val", 1), ("test", 2)):
        s = load_split(c, "celebahq", name)
        assert s.sample_ids.tolist() == [i for i in range(8) if part[8 - i] == p]
    s = load_split(c, "celebahq", "test")
    assert s.float_images([0]).shape == (1, 3, 8, 8)
    with pytest.raises(DatasetError, match="celeba_root"):
        load_split(with_ds(cfg, "celebahq", root=str(hq), celeba_root=None), "celebahq", "test")


@pytest.mark.parametrize("small", [True, False])
def test_chexpert_frontal_patient_split(cfg, tmp_path, small):
    root, pm = make_chexpert(tmp_path, n_patients=30, small=small)
    c = with_ds(cfg, "chexpert", root=str(root), pacemaker_csv=str(pm), resolution=12)
    splits = {s: load_split(c, "chexpert", s) for s in ("train", "val", "test")}
    patients = {s: set(v.identity.tolist()) for s, v in splits.items()}
    assert [len(patients[s]) for s in ("train", "val", "test")] == [21, 6, 3]
    assert not (patients["train"] & patients["val"]) and not (patients["train"] & patients["test"])
    n_frontal = 30 + 10  # one frontal per patient, a second study for every third patient
    assert sum(len(v) for v in splits.values()) == n_frontal
    tr = splits["train"]
    assert tr.attribute_names == ["Cardiomegaly", "Effusion", "Male", "Pacemaker"]
    assert torch.equal(tr.attribute("Pacemaker"), (tr.identity % 2 == 0).float())
    assert torch.equal(tr.attribute("Male"), (tr.identity % 2 == 1).float())
    assert torch.equal(tr.attribute("Cardiomegaly"), (tr.identity % 4 == 0).float())
    assert tr.attribute("Effusion").sum() == 0  # -1 (uncertain) counts as negative
    assert (tr.sample_ids // 10000 == tr.identity).all() and bool((tr.sample_ids.diff() > 0).all())
    assert tr.float_images([0, 1]).shape == (2, 1, 12, 12)
    assert all("frontal" in p for p in tr.paths)


# ---------------------------------------------------------------- error paths

def test_missing_root_names_the_key_and_source(cfg, tmp_path):
    with pytest.raises(DatasetError, match=r"datasets\.celeba\.root.*not set.*mmlab"):
        load_split(cfg, "celeba", "val")
    with pytest.raises(DatasetError, match=r"datasets\.celeba\.root.*does not exist"):
        load_split(with_ds(cfg, "celeba", root=str(tmp_path / "nope")), "celeba", "val")
    with pytest.raises(DatasetError, match=r"datasets\.chexpert\.root.*stanford"):
        load_split(cfg, "chexpert", "test")


def test_missing_annotation_file(cfg, tmp_path):
    root = make_celeba(tmp_path / "c", n=4)
    (root / "list_attr_celeba.txt").unlink()
    with pytest.raises(DatasetError, match=r"list_attr_celeba\.txt, list_attr_celeba\.csv"):
        load_split(with_ds(cfg, "celeba", root=str(root)), "celeba", "val")
    root = make_celeba(tmp_path / "d", n=4)
    (root / "list_eval_partition.txt").unlink()
    with pytest.raises(DatasetError, match="list_eval_partition"):
        load_split(with_ds(cfg, "celeba", root=str(root)), "celeba", "val")


@pytest.mark.parametrize("fmt", ["txt", "csv"])
def test_malformed_annotation(cfg, tmp_path, fmt):
    root = make_celeba(tmp_path / fmt, n=4, fmt=fmt)
    path = root / f"list_attr_celeba.{fmt}"
    lines = path.read_text().splitlines()
    c = with_ds(cfg, "celeba", root=str(root))
    k = 3 if fmt == "txt" else 2  # third data row
    sep = " " if fmt == "txt" else ","
    bad = lines.copy()
    bad[k] = sep.join(bad[k].split(sep)[:-1]) if fmt == "csv" else " ".join(bad[k].split()[:-1])
    path.write_text("\n".join(bad) + "\n")
    with pytest.raises(DatasetError, match=rf"line {k + 1}: expected 41 columns"):
        load_split(c, "celeba", "val")
    bad = lines.copy()
    parts = bad[k].split() if fmt == "txt" else bad[k].split(",")
    parts[5] = "0"
    bad[k] = sep.join(parts)
    path.write_text("\n".join(bad) + "\n")
    with pytest.raises(DatasetError, match=r"must be -1 or 1, got 0"):
        load_split(c, "celeba", "val")


def test_corrupt_image_names_sample_and_path(cfg, tmp_path):
    root = make_celeba(tmp_path / "c", n=4)
    (root / "img_align_celeba" / "000003.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    s = load_split(with_ds(cfg, "celeba", root=str(root)), "celeba", "val")
    with pytest.raises(DatasetError, match=r"sample 3 at .*000003\.jpg"):
        s.float_images([0])
    (root / "img_align_celeba" / "000003.jpg").unlink()
    with pytest.raises(DatasetError, match=r"missing.*000003\.jpg"):
        load_split(with_ds(cfg, "celeba", root=str(root)), "celeba", "val")


def test_chexpert_bad_pacemaker_values(cfg, tmp_path):
    root, pm = make_chexpert(tmp_path, n_patients=4)
    text = pm.read_text().splitlines()
    text[2] = text[2].rsplit(",", 1)[0] + ",yes"
    pm.write_text("\n".join(text) + "\n")
    c = with_ds(cfg, "chexpert", root=str(root), pacemaker_csv=str(pm))
    with pytest.raises(DatasetError, match=r"pacemaker_csv.*row 3: Pacemaker must be 0 or 1"):
        load_split(c, "chexpert", "train")
    pm.write_text("Path,Device\n")
    with pytest.raises(DatasetError, match=r"missing column.*Pacemaker"):
        load_split(c, "chexpert", "train")
