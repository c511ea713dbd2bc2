"""The `Split` object every loader returns, the `DatasetError`, and the rendered-cache format.

See docs/internals.md ("Data") for the contract.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..core.errors import DatasetError
from ..core.io import atomic_path, from_uint8, load_npz, save_npz

SPLIT_NAMES = ("train", "val", "test")


IndexLike = torch.Tensor | np.ndarray | Sequence[int] | slice | int


@dataclass
class Split:
    """One split of a dataset.

    ``images`` is a uint8 N x C x H x W tensor; for real datasets it is read lazily (on first access,
    all at once), so prefer ``float_images(idx)`` which reads only the rows asked for.
    """

    dataset: str
    name: str
    sample_ids: torch.Tensor          # int64 N, sorted ascending
    labels: torch.Tensor              # float32 N x A in {0, 1}
    identity: torch.Tensor            # int64 N
    attribute_names: list[str]
    _images: torch.Tensor | None = None
    _reader: Callable[[np.ndarray], torch.Tensor] | None = field(default=None, repr=False)
    paths: list[str] | None = field(default=None, repr=False)   # real datasets: one file per row

    def __len__(self) -> int:
        return int(self.sample_ids.numel())

    @property
    def images(self) -> torch.Tensor:
        if self._images is None:
            if self._reader is None:
                raise DatasetError(f"split {self.dataset}/{self.name} has neither images nor a reader")
            self._images = self._reader(np.arange(len(self)))
        return self._images

    def _rows(self, idx: IndexLike) -> np.ndarray:
        if isinstance(idx, slice):
            return np.arange(len(self))[idx]
        if torch.is_tensor(idx):
            idx = idx.cpu().numpy()
        rows = np.asarray(idx)
        if rows.dtype == bool:
            rows = np.nonzero(rows)[0]
        return rows.astype(np.int64).reshape(-1)

    def uint8_images(self, idx: IndexLike, errors: dict[int, str] | None = None) -> torch.Tensor:
        """uint8 rows ``idx`` (reads only those files for a lazy split).

        ``errors``: a dict to collect images that cannot be read (position in ``idx`` -> reason; their
        rows are zeros) instead of raising a DatasetError at the first one."""
        rows = self._rows(idx)
        if self._images is not None or self._reader is None:
            return self.images[torch.as_tensor(rows)]
        return self._reader(rows) if errors is None else self._reader(rows, errors=errors)

    def float_images(self, idx: IndexLike | None = None, errors: dict[int, str] | None = None) -> torch.Tensor:
        """float32 rows ``idx`` (all rows if None) in [-1, 1]: ``x / 127.5 - 1`` (``errors``: as
        :meth:`uint8_images`)."""
        if idx is None:
            idx = slice(None)
        return from_uint8(self.uint8_images(idx, errors))

    def index_of(self, sample_ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Row indices of ``sample_ids``; a DatasetError names ids that are not in this split."""
        ids = torch.as_tensor(sample_ids, dtype=torch.int64).reshape(-1).contiguous()  # a shard: a strided view
        pos = torch.searchsorted(self.sample_ids, ids)
        pos_c = pos.clamp(max=max(len(self) - 1, 0))
        ok = (pos < len(self)) & (self.sample_ids[pos_c] == ids) if len(self) else torch.zeros_like(ids, dtype=bool)
        if not bool(ok.all()):
            missing = ids[~ok][:10].tolist()
            raise DatasetError(f"sample ids {missing} are not in split {self.dataset}/{self.name}")
        return pos_c

    def attribute(self, name: str) -> torch.Tensor:
        """The label column of attribute ``name``."""
        if name not in self.attribute_names:
            raise DatasetError(f"attribute {name!r} is not one of {self.dataset}'s attributes: "
                               f"{', '.join(self.attribute_names)}")
        return self.labels[:, self.attribute_names.index(name)]

    def subset(self, rows: IndexLike, name: str | None = None) -> Split:
        """A new Split with rows ``rows`` (kept in sample-id order)."""
        r = np.sort(self._rows(rows))
        t = torch.as_tensor(r)
        reader = None
        if self._images is None and self._reader is not None:
            parent = self._reader

            def reader(sub: np.ndarray, **kw) -> torch.Tensor:
                return parent(r[sub], **kw)
        return Split(self.dataset, name or self.name, self.sample_ids[t], self.labels[t], self.identity[t],
                     list(self.attribute_names), None if self._images is None else self._images[t], reader,
                     None if self.paths is None else [self.paths[i] for i in r])


# ---------------------------------------------------------------- rendered cache (synthetic datasets)

def save_split(split: Split, out_dir: str | os.PathLike, meta: dict | None = None) -> Path:
    """Write ``<out_dir>/<split>.npz`` (images, sample_ids, labels, identity, attribute_names + meta)."""
    path = Path(out_dir) / f"{split.name}.npz"
    arrays = dict(images=split.images.numpy(), sample_ids=split.sample_ids.numpy(),
                  labels=split.labels.numpy(), identity=split.identity.numpy(),
                  attribute_names=np.array(split.attribute_names))
    for k, v in (meta or {}).items():
        arrays[f"meta_{k}"] = np.asarray(v)
    save_npz(path, **arrays)
    return path


def load_cached_split(dataset: str, split: str, data_dir: str | os.PathLike,
                      expect: dict | None = None) -> Split:
    """Read ``<data_dir>/<split>.npz`` written by ``vcebench data render``; check its meta against ``expect``."""
    path = Path(data_dir) / f"{split}.npz"
    if not path.exists():
        raise DatasetError(f"rendered split {path} does not exist; render it with "
                           f"`vcebench data render {dataset} --out {data_dir}` (splits: {', '.join(SPLIT_NAMES)})")
    z = load_npz(path)
    for k, v in (expect or {}).items():
        have = z.get(f"meta_{k}")
        if have is not None and have.item() != v:
            raise DatasetError(f"{path} was rendered with {k} = {have.item()} but config key "
                               f"`datasets.{dataset}.{k}` is {v}; re-render it with "
                               f"`vcebench data render {dataset} --out {data_dir}`")
    return Split(dataset, split, torch.from_numpy(z["sample_ids"]).long(), torch.from_numpy(z["labels"]).float(),
                 torch.from_numpy(z["identity"]).long(), [str(a) for a in z["attribute_names"]],
                 torch.from_numpy(z["images"]))


def write_attribute_table(path: str | os.PathLike, splits: Sequence[Split]) -> None:
    """``sample_id, split, identity, <attributes>`` for all rows of ``splits`` (atomic)."""
    names = splits[0].attribute_names
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sample_id", "split", "identity", *names])
        for s in splits:
            lab = s.labels.numpy().astype(int)
            for i, (sid, ident) in enumerate(zip(s.sample_ids.tolist(), s.identity.tolist())):
                w.writerow([sid, s.name, ident, *lab[i].tolist()])
