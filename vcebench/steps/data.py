"""`vcebench data` as a library (its arguments and printing: :mod:`vcebench.cli.data`): render the synthetic
datasets to their split files, check a dataset folder, a grid of images, the rendering speed, a synthetic
dataset's attribute statistics.

Every function takes the settings of :func:`settings` (the config with torch set up on the CPU). A problem
with a dataset (a missing folder, an unreadable image) is a :class:`DatasetError` naming it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config.tasks import SYNTHETIC_DATASETS
from ..data import DatasetError, eval_split_name, get_synthetic, load_split


def settings(config: list[str] | None, resolved: str | None = None) -> dict:
    """The settings of a `data` subverb: the config files ``config`` checked (or the run's merged config
    ``resolved``, :func:`vcebench.steps.settings.job_config`), torch on the CPU with config ``threads``."""
    from ..core.runtime import setup_torch
    from .settings import job_config

    cfg = job_config(config, resolved)
    setup_torch(cfg["threads"], "cpu")
    return cfg


def render(cfg: dict, dataset: str, out: Path, splits: list[str]) -> Iterator[tuple[str, Any, float]]:
    """Renders each split of synthetic ``dataset`` into ``<out>/<split>.npz``, yielding ``(name, split,
    seconds)`` after each is written; once all are, writes ``<out>/attributes.csv`` (the generator must run
    to its end)."""
    from ..data.base import save_split, write_attribute_table
    from ..data.registry import synthetic_meta

    ds = get_synthetic(cfg, dataset)
    done = []
    for name in splits:
        t = time.perf_counter()
        split = ds.split(name)
        save_split(split, out, synthetic_meta(ds))
        done.append(split)
        yield name, split, time.perf_counter() - t
    write_attribute_table(out / "attributes.csv", done)


def _with_roots(cfg: dict, dataset: str, roots: dict[str, str | None]) -> dict:
    """``cfg``'s section ``datasets.<dataset>`` with the folders of ``roots`` (None: the config's) set in it."""
    dc = cfg["datasets"].setdefault(dataset, {})
    for key, val in roots.items():
        if val is not None:
            dc[key] = val
    return dc


def split_files(cfg: dict, dataset: str, roots: dict[str, str | None], allow_modified: bool | None = None,
                record: str | Path | None = None) -> list:
    """The fingerprints of ``dataset``'s split and label files (:func:`vcebench.data.fingerprints.check_split_files`;
    ``record``: the first-seen record, default :func:`~vcebench.data.fingerprints.record_path`), with the
    folders of ``roots`` as in :func:`check`; none for a synthetic dataset. A changed file raises
    :class:`~vcebench.data.fingerprints.ModifiedSplitError` unless ``allow_modified``."""
    from ..data.fingerprints import check_split_files

    if dataset in SYNTHETIC_DATASETS:
        return []
    return check_split_files(dataset, _with_roots(cfg, dataset, roots), record=record,
                             allow_modified=allow_modified)


def check(cfg: dict, dataset: str, roots: dict[str, str | None], read_images: bool) -> Iterator[dict[str, Any]]:
    """Loads every split of ``dataset`` (train, val, test and its evaluation split), with the folders of
    ``roots`` (config keys of ``datasets.<dataset>``: ``root``, ``celeba_root``, ``pacemaker_csv``; None: the
    config's) over the config's; yields per split ``{name, n, identities, shape, decoded}``, every image
    decoded first when ``read_images``. :class:`DatasetError` on the first problem."""
    _with_roots(cfg, dataset, roots)
    for name in ["train", "val", "test"] + [s for s in (eval_split_name(dataset),) if s not in ("val", "test")]:
        s = load_split(cfg, dataset, name)
        decoded = bool(read_images and len(s))
        if decoded:
            for start in range(0, len(s), 256):
                s.uint8_images(slice(start, start + 256))
        shape = tuple(s.uint8_images([0]).shape[1:]) if len(s) else ()
        yield {"name": name, "n": len(s), "identities": len(s.identity.unique()), "shape": shape, "decoded": decoded}


def show(cfg: dict, dataset: str, out: Path, n: int, split: str | None = None, counterfactual: list[str] | None = None,
         resolution: int | None = None, root: str | None = None, scale: int = 1) -> int:
    """Writes a grid of ``n`` images of ``split`` (default the evaluation split) to ``out``; for a synthetic
    dataset spread over its people, with each image's ground-truth counterfactual and |difference| for every
    attribute of ``counterfactual``. Returns the number of tiles."""
    import torch
    from torchvision.utils import save_image

    from ..core.io import atomic_path

    if resolution and dataset in SYNTHETIC_DATASETS:
        cfg["datasets"][dataset]["resolution"] = resolution
    if root:
        cfg["datasets"][dataset]["root"] = root
    split_name = split or eval_split_name(dataset)
    if dataset in SYNTHETIC_DATASETS:
        ds = get_synthetic(cfg, dataset)
        ids = ds.split_sample_ids(split_name)
        ids = ids[torch.linspace(0, len(ids) - 1, min(n, len(ids))).round().long()]  # spread over people
        x = ds.render(ids)
        if counterfactual:
            tiles = [x]
            for attr in counterfactual:
                cf = ds.gt_counterfactuals(ids, attr)
                tiles += [cf, ((cf - x).abs().amax(1, keepdim=True) * 2 - 1).expand_as(x)]
            k = len(tiles)
            grid = torch.stack(tiles, 1).reshape(-1, *x.shape[1:])
            nrow = k * max(1, int(round((len(ids) / k) ** 0.5)))
        else:
            grid, nrow = x, max(1, int(round(len(ids) ** 0.5)))
    else:
        if counterfactual:
            raise DatasetError("--counterfactual needs a synthetic dataset (real data has no ground truth)")
        images = load_split(cfg, dataset, split_name)
        grid = images.float_images(slice(0, n))
        nrow = max(1, int(round(len(grid) ** 0.5)))
    if scale > 1:
        grid = torch.nn.functional.interpolate(grid, scale_factor=scale, mode="nearest")
    with atomic_path(out) as tmp:
        save_image((grid + 1) / 2, tmp, format=out.suffix.lstrip(".") or "png", nrow=nrow, padding=1,
                   pad_value=1.0)
    return len(grid)


def bench(cfg: dict, n: int, resolutions: list[int]) -> Iterator[tuple[str, int, int, float, float]]:
    """Rendering speed of every synthetic dataset at each resolution: yields ``(dataset, resolution, images,
    wall seconds, CPU seconds)`` of rendering the first ``n`` samples (after a warm-up of 64)."""
    import torch

    for name in SYNTHETIC_DATASETS:
        for res in resolutions:
            cfg["datasets"][name]["resolution"] = res
            ds = get_synthetic(cfg, name)
            ids = torch.arange(min(n, ds.n_samples))
            ds.render(ids[:64])
            t, c = time.perf_counter(), time.process_time()
            ds.render(ids)
            yield name, res, len(ids), time.perf_counter() - t, time.process_time() - c


def torch_threads() -> int:
    """The torch threads the rendering runs on."""
    import torch

    return torch.get_num_threads()


def describe(cfg: dict, dataset: str) -> str:
    """Attribute prevalences and correlation matrix of synthetic ``dataset``."""
    return get_synthetic(cfg, dataset).describe()
