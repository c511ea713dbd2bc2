"""`vcebench import` as a library: counterfactual images written by another code base -> the
``counterfactuals.npz`` that `vcebench evaluate` scores. The layouts, the mapping file and every check are
described once, in :mod:`vcebench.cli.import_cf` (the verb's `--help`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import UserError

LAYOUTS = ("dime", "generic")


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


DIME_GROUPS = [(cc, ccf) for cc in ("CC", "IC") for ccf in ("CCF", "ICF")]


MAX_LISTED = 8


class ImportFolderError(UserError, ValueError):
    """A counterfactual folder that cannot be imported; the message names the files at fault."""


@dataclass
class Entry:
    """One counterfactual file and what the folder says about it (``-1``: not stated)."""

    file: Path
    sample_id: int = -1
    target: int = -1
    pred: int = -1
    cf_pred: int = -1


def _problems(path, problems: list[str], what: str) -> ImportFolderError:
    shown = "; ".join(problems[:MAX_LISTED])
    more = f"; ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return ImportFolderError(f"{path}: {what}: {shown}{more}")


def _image_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def read_info(path: Path) -> dict[str, int]:
    """A DiME / ACE ``Info/<id>.txt``: ``key: value`` lines (label, pred, target, cf pred, ...)."""
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            try:
                out[key.strip()] = int(float(value))
            except ValueError:
                continue
    missing = [k for k in ("pred", "target", "cf pred") if k not in out]
    if missing:
        raise ImportFolderError(f"{path}: Info file lacks {missing} (expected DiME/ACE lines `pred: 0`, "
                                "`target: 1`, `cf pred: 1`)")
    return out


def list_dime(root: Path) -> list[Entry]:
    """Entries of a DiME / ACE experiment folder ``{CC,IC}/{CCF,ICF}/{CF,Info}/``."""
    groups = [root / cc / ccf for cc, ccf in DIME_GROUPS if (root / cc / ccf / "CF").is_dir()]
    if not groups:
        hint = ""
        if (root / "Results").is_dir():
            exps = sorted(p.name for p in (root / "Results").iterdir() if p.is_dir())
            hint = f" (it has Results/; pass one of {[str(root / 'Results' / e) for e in exps]})"
        raise ImportFolderError(f"{root}: not a DiME/ACE experiment folder: no CC/CCF/CF, CC/ICF/CF, IC/CCF/CF "
                                f"or IC/ICF/CF subfolder{hint}")
    entries, missing_info = [], []
    for g in groups:
        for f in _image_files(g / "CF", IMAGE_SUFFIXES):
            info_path = g / "Info" / f"{f.stem}.txt"
            if not info_path.is_file():
                missing_info.append(str(info_path))
                continue
            info = read_info(info_path)
            entries.append(Entry(f, target=info["target"], pred=info["pred"], cf_pred=info["cf pred"]))
    if missing_info:
        raise _problems(root, missing_info, f"{len(missing_info)} counterfactual(s) without their Info file")
    return entries


def list_generic(root: Path) -> list[Entry]:
    return [Entry(f) for f in _image_files(root, IMAGE_SUFFIXES + (".npy",))]


def read_mapping(path: Path) -> dict[str, tuple[int, int]]:
    """``file -> (sample_id, target or -1)`` from a CSV with columns file, sample_id[, target]."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    cols = set(rows[0]) if rows else set()
    if not {"file", "sample_id"} <= cols:
        raise ImportFolderError(f"{path}: mapping CSV needs columns `file` and `sample_id` (optional `target`), "
                                f"got {sorted(cols)}")
    out: dict[str, tuple[int, int]] = {}
    for i, r in enumerate(rows, start=2):
        key = Path(r["file"].strip()).name
        try:
            sid = int(r["sample_id"])
            tgt = int(r["target"]) if r.get("target") not in (None, "") else -1
        except ValueError:
            raise ImportFolderError(f"{path}: line {i}: sample_id / target must be integers, got {r}") from None
        if key in out:
            raise ImportFolderError(f"{path}: line {i}: file {key!r} mapped twice")
        out[key] = (sid, tgt)
    return out


def assign_ids(entries: list[Entry], mapping: dict[str, tuple[int, int]] | None, root: Path) -> None:
    """Set each entry's sample id (from ``mapping``, by file name or stem, else the file name itself)."""
    bad = []
    for e in entries:
        if mapping is not None:
            hit = mapping.get(e.file.name, mapping.get(e.file.stem))
            if hit is None:
                bad.append(f"{e.file}: not in the mapping CSV")
                continue
            e.sample_id = hit[0]
            if hit[1] >= 0:
                e.target = hit[1]
        elif e.file.stem.isdigit():
            e.sample_id = int(e.file.stem)
        else:
            bad.append(f"{e.file}: file name is not a sample id (give --mapping)")
    if bad:
        raise _problems(root, bad, f"{len(bad)} file(s) without a sample id")


def check_ids(entries: list[Entry], expected: np.ndarray, in_split: np.ndarray, root: Path) -> list[Entry]:
    """Exactly one file per expected id; returns the entries sorted by sample id."""
    by_id: dict[int, list[Entry]] = {}
    for e in entries:
        by_id.setdefault(e.sample_id, []).append(e)
    problems = [f"sample id {sid} given by {len(es)} files: {', '.join(str(e.file) for e in es)}"
                for sid, es in sorted(by_id.items()) if len(es) > 1]
    split_set, expected_set = set(in_split.tolist()), set(expected.tolist())
    for sid, es in sorted(by_id.items()):
        if sid not in split_set:
            problems.append(f"{es[0].file}: sample id {sid} is not in the task's evaluation split")
        elif sid not in expected_set:
            problems.append(f"{es[0].file}: sample id {sid} is not among the {len(expected)} evaluated ids "
                            "(config `n_eval`)")
    missing = sorted(expected_set - set(by_id))
    if missing:
        problems.append(f"{len(missing)} evaluation id(s) have no file (first: {missing[:10]})")
    if problems:
        raise _problems(root, problems, f"{len(problems)} problem(s) with the sample ids")
    return [by_id[int(s)][0] for s in sorted(expected_set)]


def load_image(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    """One counterfactual as uint8 C x H x W of ``shape``; ImportFolderError (naming the file) otherwise."""
    c, h, w = shape
    if path.suffix.lower() == ".npy":
        try:
            a = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ImportFolderError(f"{path}: unreadable .npy ({e})") from None
        if a.ndim == 3 and a.shape[-1] == c and a.shape[0] != c:
            a = np.transpose(a, (2, 0, 1))
        if a.ndim == 2 and c == 1:
            a = a[None]
        if a.shape != shape:
            raise ImportFolderError(f"{path}: array of shape {a.shape}, expected {shape} (C x H x W)")
        if a.dtype == np.uint8:
            return a
        if not np.issubdtype(a.dtype, np.floating):
            raise ImportFolderError(f"{path}: dtype {a.dtype}; expected uint8, or float in [-1, 1]")
        lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
        if not np.isfinite(a).all() or lo < -1.001 or hi > 1.001:
            raise ImportFolderError(f"{path}: float values in [{lo:.4g}, {hi:.4g}]; expected finite values in "
                                    "[-1, 1] (or uint8)")
        return np.round((np.clip(a, -1, 1) + 1) * 127.5).astype(np.uint8)
    from PIL import Image, UnidentifiedImageError

    want = "L" if c == 1 else "RGB"
    try:
        with Image.open(path) as im:
            im.load()
            mode, size = im.mode, im.size
            a = np.asarray(im)
    except (OSError, SyntaxError, ValueError, UnidentifiedImageError) as e:
        raise ImportFolderError(f"{path}: corrupt or unreadable image ({e})") from None
    if mode != want:
        extra = {"P": "a palette image", "I;16": "a 16-bit image", "I": "a 32-bit integer image",
                 "F": "a float image", "RGBA": "has an alpha channel", "LA": "has an alpha channel",
                 "1": "a 1-bit image"}.get(mode, f"mode {mode}")
        raise ImportFolderError(f"{path}: {extra} (PIL mode {mode!r}); expected 8-bit "
                                f"{'grey (mode L)' if c == 1 else 'RGB'} for this task")
    if size != (w, h):
        raise ImportFolderError(f"{path}: {size[0]}x{size[1]} pixels, expected {w}x{h} (the evaluation split's "
                                "size)")
    return a[None] if a.ndim == 2 else np.ascontiguousarray(np.transpose(a, (2, 0, 1)))


def read_folder(path: str | Path, layout: str, shape: tuple[int, int, int], expected: np.ndarray,
                in_split: np.ndarray, mapping: str | Path | None = None) -> tuple[list[Entry], np.ndarray]:
    """Entries (sorted by sample id, exactly ``expected``) and their images (uint8 N x C x H x W)."""
    root = Path(path)
    if not root.is_dir():
        raise ImportFolderError(f"{root}: no such folder")
    if layout not in LAYOUTS:
        raise ImportFolderError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    entries = list_dime(root) if layout == "dime" else list_generic(root)
    if not entries:
        raise ImportFolderError(f"{root}: no counterfactual images ({', '.join(IMAGE_SUFFIXES)}"
                                f"{', .npy' if layout == 'generic' else ''}) found")
    assign_ids(entries, read_mapping(Path(mapping)) if mapping else None, root)
    entries = check_ids(entries, np.asarray(expected), np.asarray(in_split), root)
    images, bad = [], []
    for e in entries:
        try:
            images.append(load_image(e.file, shape))
        except ImportFolderError as err:
            bad.append(str(err))
    if bad:
        raise _problems(root, bad, f"{len(bad)} bad image file(s)")
    return entries, np.stack(images)


def import_folder(cfg: dict, task, path: str | Path, layout: str, out: str | Path, *, mapping=None,
                  data_dir: str | None = None, model_dir: str = "resources/models", device="cpu",
                  models=None) -> dict:
    """Read ``path``, classify x and cf with the task's classifier, write ``out``; returns a summary."""
    import torch

    from ..core.io import from_uint8, save_npz, write_json
    from ..data import eval_split_name, load_split
    from .explain import shard_ids

    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), data_dir=data_dir)
    expected = shard_ids(split.sample_ids, int(cfg["n_eval"]), 0, 1).numpy()
    shape = tuple(int(s) for s in split.float_images(torch.zeros(1, dtype=torch.int64)).shape[1:])
    entries, cf = read_folder(path, layout, shape, expected, split.sample_ids.numpy(), mapping)
    if models is None:
        from ..models import load_task_models

        models = load_task_models(cfg, task, roles=("classifier",), device=str(device), model_dir=model_dir)
    ids = np.array([e.sample_id for e in entries], np.int64)
    rows = split.index_of(torch.from_numpy(ids))
    bs = int(cfg["batch_size"])
    pred, pred_cf = [], []
    with torch.no_grad():
        for s in range(0, len(ids), bs):
            pred.append(models.classifier(split.float_images(rows[s:s + bs]).to(device)).argmax(1).cpu())
            pred_cf.append(models.classifier(from_uint8(cf[s:s + bs]).to(device)).argmax(1).cpu())
    pred, pred_cf = torch.cat(pred).numpy().astype(np.int64), torch.cat(pred_cf).numpy().astype(np.int64)
    ext_target = np.array([e.target for e in entries], np.int64)
    target = np.where(ext_target >= 0, ext_target, 1 - pred)
    if not np.isin(target, (0, 1)).all():
        raise ImportFolderError(f"{path}: targets must be 0 or 1, got {sorted(set(target.tolist()))}")
    ext_pred = np.array([e.pred for e in entries], np.int64)
    ext_cf_pred = np.array([e.cf_pred for e in entries], np.int64)
    flipped = pred_cf == target
    n = len(ids)
    save_npz(out, sample_id=ids, cf=cf, target=target, pred=pred, flipped=flipped,
             steps=np.full(n, -1, np.int64), failed=np.zeros(n, bool),
             info_external_target=ext_target, info_external_pred=ext_pred, info_external_cf_pred=ext_cf_pred)
    known = ext_cf_pred >= 0
    summary = {"task": task.name, "source": str(path), "layout": layout, "mapping": None if mapping is None
               else str(mapping), "n": n, "flipped": int(flipped.sum()),
               "target_from": "folder" if (ext_target >= 0).all() else
               ("classifier" if (ext_target < 0).all() else "folder where given, else classifier"),
               "disagreements": {"pred": int((ext_pred[ext_pred >= 0] != pred[ext_pred >= 0]).sum()),
                                 "cf_pred": int((ext_cf_pred[known] != pred_cf[known]).sum())},
               "files": [str(e.file) for e in entries]}
    write_json(Path(out).with_name("import.json"), summary)
    return summary


def import_job(config: list[str] | None, task: str, path: str | Path, layout: str, out: str | Path, *,
               mapping=None, data_dir: str | None = None, model_dir: str = "resources/models",
               resolved: str | None = None) -> dict:
    """`vcebench import`: the config files ``config`` checked (or the run's merged config ``resolved``,
    :func:`vcebench.steps.settings.job_config`), torch set up from them, then :func:`import_folder` on ``task``."""
    from ..config.tasks import get_task
    from ..core.runtime import setup_torch
    from .settings import job_config

    cfg = job_config(config, resolved)
    device = setup_torch(cfg["threads"], cfg["device"], cfg["cuda"])
    return import_folder(cfg, get_task(cfg, task), path, layout, out, mapping=mapping, data_dir=data_dir,
                         model_dir=model_dir, device=device)
