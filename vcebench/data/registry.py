"""Dataset names -> loaders: ``load_split``, ``get_synthetic``, ``eval_split_name``, ``attribute_names``."""

from __future__ import annotations

import os
from pathlib import Path

from ..config.tasks import REAL_DATASETS, SYNTHETIC_DATASETS
from .base import DatasetError, Split, load_cached_split
from .synthetic import SyntheticDataset

_MEMO: dict[tuple, Split] = {}
_MEMO_MAX = 6


def _dataset_cfg(cfg: dict, name: str) -> dict:
    if name not in SYNTHETIC_DATASETS + REAL_DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(SYNTHETIC_DATASETS + REAL_DATASETS)}")
    return dict((cfg.get("datasets") or {}).get(name) or {})


def get_synthetic(cfg: dict, name: str) -> SyntheticDataset:
    """The renderer of synthetic dataset ``name`` configured by ``cfg["datasets"][name]``."""
    dc = _dataset_cfg(cfg, name)
    if name == "synthfaces":
        from .synthfaces import SynthFaces

        return SynthFaces(resolution=dc.get("resolution", 32), seed=dc.get("seed", 0),
                          n_identities=dc.get("n_identities", 1200),
                          images_per_identity=dc.get("images_per_identity", 10))
    if name == "synthxray":
        from .synthxray import SynthXray

        return SynthXray(resolution=dc.get("resolution", 32), seed=dc.get("seed", 0),
                         n_identities=dc.get("n_patients", 6000),
                         images_per_identity=dc.get("images_per_patient", 1))
    raise DatasetError(f"dataset {name!r} is not synthetic (synthetic: {', '.join(SYNTHETIC_DATASETS)})")


def _synthetic_meta(ds: SyntheticDataset) -> dict:
    return dict(resolution=ds.resolution, seed=ds.seed, n_identities=ds.n_identities,
                images_per_identity=ds.images_per_identity)


def load_split(cfg: dict, name: str, split: str, data_dir: str | os.PathLike | None = None) -> Split:
    """Split ``split`` of dataset ``name``.

    Synthetic datasets: read ``<data_dir>/<split>.npz`` (written by ``vcebench data render``) when
    ``data_dir`` is given, else render in memory (memoised per process). Real datasets read the
    folders named in ``cfg["datasets"][name]``; ``data_dir`` is ignored for them.
    """
    dc = _dataset_cfg(cfg, name)
    if name in SYNTHETIC_DATASETS:
        ds = get_synthetic(cfg, name)
        meta = _synthetic_meta(ds)
        if data_dir is not None:
            return load_cached_split(name, split, Path(data_dir), expect=meta)
        key = (name, split, tuple(sorted(meta.items())))
        if key not in _MEMO:
            if len(_MEMO) >= _MEMO_MAX:
                _MEMO.pop(next(iter(_MEMO)))
            _MEMO[key] = ds.split(split)
        return _MEMO[key]
    if name == "celeba":
        from .celeba import load_celeba

        return load_celeba(dc, split, seed=int(cfg.get("seed", 0)))
    if name == "celebahq":
        from .celeba import load_celebahq

        return load_celebahq(dc, split)
    from .chexpert import load_chexpert

    return load_chexpert(dc, split, seed=int(cfg.get("seed", 0)))


def eval_split_name(dataset: str) -> str:
    """The split counterfactuals are evaluated on: ``test`` (synthetic, CelebA-HQ, CheXpert) or
    ``minival`` (CelebA: the seeded 1000 of the validation partition, as in DiME/ACE)."""
    if dataset not in SYNTHETIC_DATASETS + REAL_DATASETS:
        raise DatasetError(f"unknown dataset {dataset!r}; known: {', '.join(SYNTHETIC_DATASETS + REAL_DATASETS)}")
    return "minival" if dataset == "celeba" else "test"


def tune_split_name(dataset: str) -> str:
    """The split `vcebench tune` picks settings on, never the evaluation split: ``val`` (synthetic,
    CelebA-HQ, CheXpert) or ``tune`` (CelebA: the validation partition without ``minival``)."""
    eval_split_name(dataset)  # checks the name
    return "tune" if dataset == "celeba" else "val"


def attribute_names(dataset: str, cfg: dict | None = None) -> list[str]:
    """The label columns of ``dataset`` (CelebA's 40 names for the real face datasets)."""
    if dataset == "synthfaces":
        from .synthfaces import ATTRIBUTES

        return list(ATTRIBUTES)
    if dataset == "synthxray":
        from .synthxray import ATTRIBUTES as XA

        return list(XA)
    if dataset in ("celeba", "celebahq"):
        from .celeba import CELEBA_ATTRIBUTES

        return list(CELEBA_ATTRIBUTES)
    if dataset == "chexpert":
        from .chexpert import CHEXPERT_ATTRIBUTES

        return list(CHEXPERT_ATTRIBUTES)
    raise DatasetError(f"unknown dataset {dataset!r}; known: {', '.join(SYNTHETIC_DATASETS + REAL_DATASETS)}")
