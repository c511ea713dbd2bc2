"""CelebA and CelebA-HQ (user-supplied folders), read lazily.

CelebA (``datasets.celeba.root``)::

    img_align_celeba/000001.jpg ...        (the Kaggle mirror's img_align_celeba/img_align_celeba/ also works)
    list_attr_celeba.txt | .csv            official: count line, header line, "000001.jpg -1 1 ..." ; Kaggle: csv
    list_eval_partition.txt | .csv         "000001.jpg 0" ; Kaggle: image_id,partition  (0 train, 1 val, 2 test)
    identity_CelebA.txt                    optional: "000001.jpg 2880" (person ids; else one id per image)

Preprocessing as DiME / ACE (``core/dataset.py``): resize the shorter side to 128, centre crop 128,
[-1, 1]. ``sample_id`` = the number in the file name. Counterfactuals are evaluated on ``minival``:
``datasets.celeba.minival`` (1000) validation images drawn with a seeded generator *without*
replacement (DiME drew with replacement and got 966 unique images; we fix that).

CelebA-HQ (``datasets.celebahq.root``, the CelebAMask-HQ release)::

    CelebA-HQ-img/0.jpg ... 29999.jpg
    CelebAMask-HQ-attribute-anno.txt       count line, header line, "0.jpg 1 -1 ..."
    CelebA-HQ-to-CelebA-mapping.txt        "idx orig_idx orig_file"

Its split is CelebA's partition of each image's original (``list_eval_partition`` under
``datasets.celebahq.celeba_root``); 256 px.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .. import registry
from ..core.errors import DatasetError
from ..core.rng import sample_seed
from .base import Split
from .real import file_number, find_file, make_reader, read_lines, read_pm1_table, require_root

CELEBA_ATTRIBUTES = registry.get_dataset_spec("celeba").attributes  # vcebench/registry/builtin_specs.py
PARTITIONS = {"train": 0, "val": 1, "test": 2}


def read_partition(root: Path, dataset: str, key: str) -> dict[str, int]:
    """``list_eval_partition`` (.txt ``file p`` or .csv ``image_id,partition``) -> {file: partition}."""
    path = find_file(root, ["list_eval_partition.txt", "list_eval_partition.csv"], dataset, key,
                     "CelebA partition file")
    where = f"{path} (config key `datasets.{dataset}.{key}`)"
    lines = read_lines(path, where)
    csv = path.suffix.lower() == ".csv"
    if csv:
        head = [h.strip() for h in lines[0].split(",")]
        if len(head) != 2:
            raise DatasetError(f"{where}: expected the header image_id,partition, got {lines[0][:60]!r}")
        lines = lines[1:]
    out: dict[str, int] = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        parts = [p.strip() for p in (line.split(",") if csv else line.split())]
        if len(parts) != 2 or parts[1] not in ("0", "1", "2"):
            raise DatasetError(f"{where}, line {i + 1 + csv}: expected '<image> <partition 0|1|2>', got {line[:60]!r}")
        out[parts[0]] = int(parts[1])
    return out


def read_identities(root: Path) -> dict[str, int] | None:
    path = root / "identity_CelebA.txt"
    if not path.exists():
        return None
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _image_dir(root: Path, names: list[str], dataset: str) -> Path:
    for cand in (root / names[0] / names[0], root / names[0]):
        if cand.is_dir():
            return cand
    raise DatasetError(f"image folder {root / names[0]} not found (config key `datasets.{dataset}.root`): "
                       f"expected {'/'.join(names)} holding the images")


def _check_images(img_dir: Path, files: list[str], dataset: str) -> None:
    present = set(p.name for p in img_dir.iterdir())
    missing = [f for f in files if f not in present]
    if missing:
        raise DatasetError(f"{len(missing)} image(s) listed in the annotations are missing from {img_dir} "
                           f"(config key `datasets.{dataset}.root`), e.g. {', '.join(missing[:3])}")


def load_celeba(dc: dict, split: str, seed: int = 0) -> Split:
    """CelebA split ``train``, ``val``, ``test``, ``minival`` (the evaluation split) or ``tune`` (the rest of
    the validation partition: the inputs `vcebench tune` may use, disjoint from ``minival``)."""
    if split not in (*PARTITIONS, "minival", "tune"):
        raise DatasetError(f"unknown CelebA split {split!r}; known: train, val, test, minival, tune")
    root = require_root(dc, "celeba")
    attr_path = find_file(root, ["list_attr_celeba.txt", "list_attr_celeba.csv"], "celeba", "root",
                          "CelebA attribute file")
    files, names, labels = read_pm1_table(attr_path, "celeba", "root", expect_columns=CELEBA_ATTRIBUTES)
    part = read_partition(root, "celeba", "root")
    where = f"{attr_path}"
    ids = np.array([file_number(f, where) for f in files], dtype=np.int64)
    missing = [f for f in files if f not in part]
    if missing:
        raise DatasetError(f"{len(missing)} image(s) of {attr_path} have no partition in list_eval_partition "
                           f"(config key `datasets.celeba.root`), e.g. {', '.join(missing[:3])}")
    p = np.array([part[f] for f in files])
    keep = p == PARTITIONS["val" if split in ("minival", "tune") else split]
    rows = np.nonzero(keep)[0]
    if split in ("minival", "tune"):
        n = int(dc["minival"])
        rng = np.random.default_rng(sample_seed(seed, 0, "celeba/minival"))
        mini = rng.choice(rows, size=min(n, len(rows)), replace=False)
        rows = mini if split == "minival" else np.setdiff1d(rows, mini)
    rows = rows[np.argsort(ids[rows], kind="stable")]
    img_dir = _image_dir(root, ["img_align_celeba"], "celeba")
    sel_files = [files[r] for r in rows]
    _check_images(img_dir, sel_files, "celeba")
    idents = read_identities(root)
    ident = np.array([idents.get(f, -1) if idents else file_number(f, where) for f in sel_files], dtype=np.int64)
    paths = [str(img_dir / f) for f in sel_files]
    res = int(dc["resolution"])
    return Split("celeba", split, torch.from_numpy(ids[rows]), torch.from_numpy(labels[rows]).float(),
                 torch.from_numpy(ident), list(names), None,
                 make_reader(paths, ids[rows].tolist(), res, 3, "celeba",
                             int(dc["min_image_size"])), paths)


def read_hq_mapping(root: Path) -> dict[int, str]:
    """``CelebA-HQ-to-CelebA-mapping.txt`` -> {hq idx: original CelebA file name}."""
    path = find_file(root, ["CelebA-HQ-to-CelebA-mapping.txt"], "celebahq", "root", "CelebA-HQ mapping file")
    lines = read_lines(path, f"{path} (config key `datasets.celebahq.root`)")
    out = {}
    for i, line in enumerate(lines[1:]):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit():
            raise DatasetError(f"{path} (config key `datasets.celebahq.root`), line {i + 2}: expected "
                               f"'idx orig_idx orig_file', got {line[:60]!r}")
        out[int(parts[0])] = parts[2]
    return out


def load_celebahq(dc: dict, split: str, seed: int = 0) -> Split:
    """CelebA-HQ split ``train``, ``val`` or ``test`` (CelebA's partition of each image's original)."""
    if split not in PARTITIONS:
        raise DatasetError(f"unknown CelebA-HQ split {split!r}; known: {', '.join(PARTITIONS)}")
    root = require_root(dc, "celebahq")
    celeba_root = require_root(dc, "celebahq", "celeba_root", "the CelebA folder holding list_eval_partition")
    attr_path = find_file(root, ["CelebAMask-HQ-attribute-anno.txt"], "celebahq", "root", "CelebA-HQ attribute file")
    files, names, labels = read_pm1_table(attr_path, "celebahq", "root", expect_columns=CELEBA_ATTRIBUTES)
    ids = np.array([file_number(f, str(attr_path)) for f in files], dtype=np.int64)
    mapping = read_hq_mapping(root)
    part = read_partition(celeba_root, "celebahq", "celeba_root")
    orig = []
    for i in ids.tolist():
        if i not in mapping or mapping[i] not in part:
            raise DatasetError(f"CelebA-HQ image {i} has no entry in CelebA-HQ-to-CelebA-mapping.txt or its "
                               f"original in list_eval_partition (config keys `datasets.celebahq.root`, "
                               f"`datasets.celebahq.celeba_root`)")
        orig.append(mapping[i])
    p = np.array([part[o] for o in orig])
    rows = np.nonzero(p == PARTITIONS[split])[0]
    rows = rows[np.argsort(ids[rows], kind="stable")]
    img_dir = _image_dir(root, ["CelebA-HQ-img"], "celebahq")
    sel = [files[r] for r in rows]
    _check_images(img_dir, sel, "celebahq")
    idents = read_identities(celeba_root)
    ident = np.array([idents.get(orig[r], -1) if idents else file_number(orig[r], "mapping") for r in rows],
                     dtype=np.int64)
    paths = [str(img_dir / f) for f in sel]
    res = int(dc["resolution"])
    return Split("celebahq", split, torch.from_numpy(ids[rows]), torch.from_numpy(labels[rows]).float(),
                 torch.from_numpy(ident), list(names), None,
                 make_reader(paths, ids[rows].tolist(), res, 3, "celebahq",
                             int(dc["min_image_size"])), paths)
