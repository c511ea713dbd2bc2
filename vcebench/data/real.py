"""Shared pieces of the real-dataset loaders: root checks, annotation parsing, lazy image reading."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from .. import registry
from ..core.errors import DatasetError


def source(dataset: str) -> str:
    """Where to get ``dataset`` (its declaration's ``source``)."""
    return registry.get_dataset_spec(dataset).source or "?"


def require_root(dc: dict, dataset: str, key: str = "root", what: str = "") -> Path:
    """The folder in ``datasets.<dataset>.<key>``; DatasetError if it is unset or missing."""
    val = dc.get(key)
    hint = f" ({what})" if what else ""
    flag = "--" + key.replace("_", "-")  # `vcebench data check` has --root, --celeba-root, --pacemaker-csv
    if not val:
        raise DatasetError(f"config key `datasets.{dataset}.{key}` is not set: point it at the {dataset} "
                           f"folder{hint}, e.g. with --config a YAML file containing "
                           f"`datasets: {{{dataset}: {{{key}: /path}}}}` or `vcebench data check {dataset} "
                           f"{flag} /path`. Data: {source(dataset)}")
    path = Path(os.path.expanduser(str(val)))
    if not path.exists():
        raise DatasetError(f"config key `datasets.{dataset}.{key}`: {path} does not exist (expected the "
                           f"{dataset} folder{hint}). Data: {source(dataset)}")
    return path


def find_file(root: Path, names: Sequence[str], dataset: str, key: str, what: str) -> Path:
    """The first of ``names`` (relative to ``root``) that exists, or a DatasetError listing them."""
    for n in names:
        if (root / n).exists():
            return root / n
    raise DatasetError(f"{what} not found under {root} (config key `datasets.{dataset}.{key}`): expected one of "
                       f"{', '.join(names)}. Data: {source(dataset)}")


def read_pm1_table(path: Path, dataset: str, key: str, first_col: str = "image_id",
                   expect_columns: Sequence[str] | None = None) -> tuple[list[str], list[str], np.ndarray]:
    """Parse an attribute table with values in {-1, 1}: (file names, attribute names, N x A uint8 in {0, 1}).

    Accepts the official ``.txt`` form (line 1: the number of rows, line 2: the attribute names,
    then ``<file> v1 v2 ...`` separated by spaces) and the ``.csv`` form (header ``image_id,<names>``).
    """
    where = f"{path} (config key `datasets.{dataset}.{key}`)"
    lines = read_lines(path, where)
    if not lines:
        raise DatasetError(f"{where}: the file is empty")
    if path.suffix.lower() == ".csv":
        header = [h.strip() for h in lines[0].split(",")]
        names, rows, sep, start = header[1:], lines[1:], ",", 2
        count = None
    else:
        if len(lines) < 2:
            raise DatasetError(f"{where}: expected a count line and a header line, found {len(lines)} line(s)")
        try:
            count = int(lines[0].strip())
        except ValueError:
            raise DatasetError(f"{where}: line 1 should be the number of images (official .txt format), "
                               f"got {lines[0][:60]!r}") from None
        names, rows, sep, start = lines[1].split(), lines[2:], None, 3
    if expect_columns is not None and list(names) != list(expect_columns):
        missing = [c for c in expect_columns if c not in names]
        raise DatasetError(f"{where}: header should list the {len(expect_columns)} attributes "
                           f"{', '.join(expect_columns[:3])}, ...; missing {missing[:5]}, got {len(names)} columns")
    files: list[str] = []
    vals = np.empty((len(rows), len(names)), dtype=np.int8)
    n = 0
    for i, line in enumerate(rows):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(sep)]
        if len(parts) != len(names) + 1:
            raise DatasetError(f"{where}, line {i + start}: expected {len(names) + 1} columns (file name + "
                               f"{len(names)} attributes), found {len(parts)}")
        try:
            row = [int(float(v)) for v in parts[1:]]
        except ValueError:
            raise DatasetError(f"{where}, line {i + start}: attribute values must be -1 or 1, "
                               f"got {line[:80]!r}") from None
        if any(v not in (-1, 1) for v in row):
            bad = next(v for v in row if v not in (-1, 1))
            raise DatasetError(f"{where}, line {i + start}: attribute values must be -1 or 1, got {bad}")
        files.append(parts[0])
        vals[n] = row
        n += 1
    vals = vals[:n]
    if count is not None and count != n:
        raise DatasetError(f"{where}: line 1 announces {count} images but the table has {n} rows")
    return files, list(names), (vals > 0).astype(np.uint8)


def read_lines(path: Path, where: str) -> list[str]:
    """The lines of a text annotation file; DatasetError if it is not readable text."""
    try:
        return path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{where}: cannot read it as text ({e})") from None


def file_number(name: str, where: str) -> int:
    """``000001.jpg`` -> 1 (the CelebA sample id)."""
    stem = Path(name).stem
    if not stem.isdigit():
        raise DatasetError(f"{where}: image name {name!r} is not a number (expected e.g. 000001.jpg)")
    return int(stem)


def make_reader(paths: Sequence[str], sample_ids: Sequence[int], resolution: int, channels: int,
                dataset: str, min_size: int = 16) -> callable:
    """A reader ``rows -> uint8 tensor rows x C x res x res``: resize the shorter side to ``resolution``
    (PIL bilinear, antialiased, as torchvision's ``Resize``) and centre-crop, as DiME/ACE/FastDiME.

    An image whose shorter side is below ``min_size`` px (config ``datasets.<dataset>.min_image_size``)
    is refused like an unreadable file; one upscaled more than 2x is read with a warning. With
    ``errors`` (a dict), a refused image becomes a zero row and ``errors[position] = reason`` instead of
    a DatasetError (``vcebench explain`` fails that sample, not the shard).
    """

    from PIL import Image, UnidentifiedImageError
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    mode = "RGB" if channels == 3 else "L"
    key = f"datasets.{dataset}.min_image_size"

    def read_one(r: int) -> np.ndarray:
        path = paths[r]
        try:
            with Image.open(path) as im:
                small = min(im.size)
                if small < min_size:
                    raise DatasetError(f"{dataset}: image of sample {int(sample_ids[r])} at {path} is "
                                       f"{im.size[0]}x{im.size[1]} px, below the minimum of {min_size} px "
                                       f"(config key `{key}`)")
                if 2 * small < resolution:
                    warnings.warn(f"{dataset}: image of sample {int(sample_ids[r])} at {path} is "
                                  f"{im.size[0]}x{im.size[1]} px, upscaled {resolution / small:.1f}x to "
                                  f"{resolution} px", stacklevel=2)
                im = im.convert(mode)
                im = TF.resize(im, resolution, interpolation=InterpolationMode.BILINEAR)
                im = TF.center_crop(im, resolution)
                return np.array(im, dtype=np.uint8)
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as e:
            if isinstance(e, DatasetError):
                raise
            raise DatasetError(f"{dataset}: cannot read image of sample {int(sample_ids[r])} at {path}: {e} "
                               f"(expected a readable JPEG/PNG; re-download it from {source(dataset)})") from None

    def read(rows: np.ndarray, errors: dict[int, str] | None = None) -> torch.Tensor:
        out = torch.zeros(len(rows), channels, resolution, resolution, dtype=torch.uint8)
        for k, r in enumerate(np.asarray(rows).tolist()):
            try:
                arr = read_one(r)
            except DatasetError as e:
                if errors is None:
                    raise
                errors[k] = str(e)
                continue
            out[k] = torch.from_numpy(arr.reshape(resolution, resolution, -1)).permute(2, 0, 1)
        return out

    return read
