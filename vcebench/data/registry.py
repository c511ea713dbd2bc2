"""Dataset names -> loaders: ``load_split``, ``get_synthetic`` (the splits and labels a dataset declares:
``specs.py``).

Each dataset is declared once (``vcebench.registry.DatasetSpec``, vcebench/registry/builtin_specs.py): its
loader, label names and splits are read from there."""

from __future__ import annotations

import os
from pathlib import Path

from ..config.tasks import SYNTHETIC_DATASETS
from ..core.errors import DatasetError
from .base import Split, load_cached_split
from .specs import dataset_spec
from .synthetic import SyntheticDataset

_MEMO: dict[tuple, Split] = {}
_MEMO_MAX = 6


def _dataset_cfg(cfg: dict, name: str) -> dict:
    dataset_spec(name)
    return dict((cfg.get("datasets") or {}).get(name) or {})


def get_synthetic(cfg: dict, name: str) -> SyntheticDataset:
    """The renderer of synthetic dataset ``name`` configured by ``cfg["datasets"][name]``."""
    dc, spec = _dataset_cfg(cfg, name), dataset_spec(name)
    if not spec.synthetic:
        raise DatasetError(f"dataset {name!r} is not synthetic (synthetic: {', '.join(SYNTHETIC_DATASETS)})")
    return spec.load()(dc)


def synthetic_meta(ds: SyntheticDataset) -> dict:
    """The generator settings a rendered split file records (a cached split must match them)."""
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
        meta = synthetic_meta(ds)
        if data_dir is not None:
            return load_cached_split(name, split, Path(data_dir), expect=meta)
        key = (name, split, tuple(sorted(meta.items())))
        if key not in _MEMO:
            if len(_MEMO) >= _MEMO_MAX:
                _MEMO.pop(next(iter(_MEMO)))
            _MEMO[key] = ds.split(split)
        return _MEMO[key]
    return dataset_spec(name).load()(dc, split, seed=int(cfg["seed"]))


