"""CheXpert with user-supplied pacemaker labels (the FastDiME_Med shortcut task), read lazily.

``datasets.chexpert.root`` is the ``CheXpert-v1.0`` or ``CheXpert-v1.0-small`` folder holding
``train.csv`` / ``valid.csv`` (their ``Path`` column starts with that folder's name) and the images.
``datasets.chexpert.pacemaker_csv`` is a CSV with columns ``Path,Pacemaker`` (0/1); only frontal
images listed there are used. Patients (``patientNNNNN`` in the path) are split train:val:test =
7:2:1 with a seeded permutation. Images: grayscale, shorter side resized to
``datasets.chexpert.resolution`` (512), centre-cropped. ``sample_id = patient * 10000 + study * 10 + view``.
Labels: Pacemaker (user CSV), Cardiomegaly and Effusion (CheXpert's ``Cardiomegaly`` / ``Pleural
Effusion``, 1 -> 1, uncertain / blank / 0 -> 0, "U-zeros"), Male (``Sex``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import registry
from ..core.errors import DatasetError
from ..core.rng import sample_seed
from .base import Split
from .real import make_reader, require_root, source

CHEXPERT_ATTRIBUTES = registry.get_dataset_spec("chexpert").attributes  # vcebench/registry/builtin_specs.py
FRACTIONS = {"train": 0.7, "val": 0.2, "test": 0.1}
_PATH_RE = re.compile(r"patient(\d+)/study(\d+)/view(\d+)")


def _key(path: str) -> str:
    """The part of a CheXpert path from ``train/`` or ``valid/`` on (independent of the root folder name)."""
    m = re.search(r"(train|valid|test)/patient\d+/study\d+/view\d+[^/]*$", str(path).replace("\\", "/"))
    return m.group(0) if m else str(path)


def _read_csv(path: Path, key: str, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read {path} (config key `datasets.chexpert.{key}`): {e}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DatasetError(f"{path} (config key `datasets.chexpert.{key}`): missing column(s) {missing}; "
                           f"expected {', '.join(columns)}. Data: {source('chexpert')}")
    return df


def _read_pacemaker_csv(pm_path: Path) -> pd.DataFrame:
    """The pacemaker labels (0 / 1; anything else is a DatasetError naming the row), indexed by path key."""
    pm = _read_csv(pm_path, "pacemaker_csv", ("Path", "Pacemaker"))
    values = pd.to_numeric(pm["Pacemaker"], errors="coerce")
    bad = ~values.isin([0, 1])
    if bad.any():
        i = int(np.nonzero(bad.to_numpy())[0][0])
        got = pm["Pacemaker"].iloc[i]
        got = got.item() if isinstance(got, np.generic) else got  # 2, not np.int64(2)
        raise DatasetError(f"{pm_path} (config key `datasets.chexpert.pacemaker_csv`), row {i + 2}: Pacemaker must "
                           f"be 0 or 1, got {got!r}")
    pm = pm.assign(Pacemaker=values)
    return pm.assign(key=pm["Path"].map(_key)).drop_duplicates("key").set_index("key")


def load_chexpert(dc: dict, split: str, seed: int = 0) -> Split:
    if split not in FRACTIONS:
        raise DatasetError(f"unknown CheXpert split {split!r}; known: {', '.join(FRACTIONS)}")
    root = require_root(dc, "chexpert")
    pm_path = require_root(dc, "chexpert", "pacemaker_csv", "a CSV file with columns Path,Pacemaker")
    tables = [root / n for n in ("train.csv", "valid.csv") if (root / n).exists()]
    if not tables:
        raise DatasetError(f"neither train.csv nor valid.csv found in {root} (config key `datasets.chexpert.root`; "
                           f"expected the CheXpert-v1.0 or CheXpert-v1.0-small folder). Data: {source('chexpert')}")
    meta = pd.concat([_read_csv(t, "root", ("Path", "Sex", "Frontal/Lateral")) for t in tables], ignore_index=True)
    meta = meta[meta["Frontal/Lateral"] == "Frontal"]
    meta = meta.assign(key=meta["Path"].map(_key)).drop_duplicates("key").set_index("key")
    pm = _read_pacemaker_csv(pm_path)
    keys = sorted(set(pm.index) & set(meta.index))
    if not keys:
        raise DatasetError(f"no frontal image of {', '.join(str(t) for t in tables)} is listed in {pm_path} "
                           f"(config keys `datasets.chexpert.root`, `datasets.chexpert.pacemaker_csv`); "
                           f"paths are matched from 'train/patient.../study.../view...' on")
    parsed = [_PATH_RE.search(k) for k in keys]
    if any(m is None for m in parsed):
        k = keys[[m is None for m in parsed].index(True)]
        raise DatasetError(f"CheXpert path {k!r} does not contain patientNNNNN/studyN/viewN")
    patient = np.array([int(m.group(1)) for m in parsed], dtype=np.int64)
    ids = np.array([int(m.group(1)) * 10000 + int(m.group(2)) * 10 + int(m.group(3)) for m in parsed], dtype=np.int64)
    # patient split 7:2:1
    uniq = np.unique(patient)
    perm = np.random.default_rng(sample_seed(seed, 0, "chexpert/split")).permutation(uniq)
    n_tr, n_va = int(round(FRACTIONS["train"] * len(uniq))), int(round(FRACTIONS["val"] * len(uniq)))
    which = {"train": perm[:n_tr], "val": perm[n_tr:n_tr + n_va], "test": perm[n_tr + n_va:]}[split]
    rows = np.nonzero(np.isin(patient, which))[0]
    rows = rows[np.argsort(ids[rows], kind="stable")]
    sel = [keys[r] for r in rows]
    m, p = meta.loc[sel], pm.loc[sel]

    def pos(col: str) -> np.ndarray:
        return (m[col].fillna(0).to_numpy() == 1).astype(np.float32) if col in m.columns else np.zeros(len(sel),
                                                                                                     np.float32)

    labels = np.stack([pos("Cardiomegaly"), pos("Pleural Effusion"), (m["Sex"] == "Male").to_numpy(np.float32),
                       p["Pacemaker"].to_numpy(np.float32)], axis=1)
    base = root.parent
    paths = []
    for k, orig in zip(sel, m["Path"].tolist()):
        cand = [base / orig, root / k]
        paths.append(str(next((c for c in cand if c.exists()), cand[0])))
    missing = [q for q in paths if not Path(q).exists()]
    if missing:
        raise DatasetError(f"{len(missing)} CheXpert image(s) not found (config key `datasets.chexpert.root`), "
                           f"e.g. {missing[0]}. Data: {source('chexpert')}")
    res = int(dc["resolution"])
    return Split("chexpert", split, torch.from_numpy(ids[rows]), torch.from_numpy(labels),
                 torch.from_numpy(patient[rows]), list(CHEXPERT_ATTRIBUTES), None,
                 make_reader(paths, ids[rows].tolist(), res, 1, "chexpert",
                             int(dc["min_image_size"])), paths)
