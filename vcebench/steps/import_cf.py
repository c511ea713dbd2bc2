"""`vcebench import` as a library: counterfactuals written by another code base -> the ``counterfactuals.npz``
that `vcebench evaluate` scores. The layouts, the mapping file and every check are described once, in
:mod:`vcebench.cli.import_cf` (the verb's `--help`); each layout's reader is in :mod:`.import_layouts` (dime,
generic), :mod:`.import_peal` and :mod:`.import_rcsb`.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .import_layouts import Entry, ImportFolderError, list_dime, list_generic, load_image, problems_error
from .import_peal import list_peal
from .import_rcsb import list_rcsb

READERS = {"dime": lambda root, shape: list_dime(root), "generic": lambda root, shape: list_generic(root),
           "peal": list_peal, "rcsb": list_rcsb}
LAYOUTS = tuple(READERS)
NEEDS_MAPPING = ("peal",)  # its records carry no id at all (rows of an array)
INPUT_TOLERANCE = 8.0  # mean |their input - ours| in 0..255 above which a record is not of the mapped input


def read_mapping(path: Path) -> dict[str, tuple[int | None, int]]:
    """``file -> (sample_id, target or -1)`` from a CSV with columns file, sample_id[, target]; an empty
    ``sample_id`` (None) leaves that record out of the import, on purpose."""
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
            sid = int(r["sample_id"]) if (r["sample_id"] or "").strip() else None
            tgt = int(r["target"]) if r.get("target") not in (None, "") else -1
        except ValueError:
            raise ImportFolderError(f"{path}: line {i}: sample_id / target must be integers, got {r}") from None
        if key in out:
            raise ImportFolderError(f"{path}: line {i}: file {key!r} mapped twice")
        out[key] = (sid, tgt)
    return out


def assign_ids(entries: list[Entry], mapping: dict[str, tuple[int | None, int]] | None,
               root: Path) -> tuple[list[Entry], list[Entry]]:
    """Set each entry's sample id (from ``mapping``, by its key or else its file's name or stem; without a
    mapping, the key or the file's name itself); returns (the entries to import, those the mapping leaves out)."""
    bad, kept, left_out = [], [], []
    for e in entries:
        if mapping is not None:
            hit = mapping.get(e.key) if e.key else mapping.get(e.file.name, mapping.get(e.file.stem))
            if hit is None:
                bad.append(f"{e.where}: not in the mapping CSV (key {e.key or e.file.name!r})")
                continue
            if hit[0] is None:
                left_out.append(e)
                continue
            e.sample_id = hit[0]
            if hit[1] >= 0:
                e.target = hit[1]
        elif (e.key or e.file.stem).isdigit():
            e.sample_id = int(e.key or e.file.stem)
        else:
            bad.append(f"{e.where}: file name is not a sample id (give --mapping)")
        kept.append(e)
    keyed = {e.key for e in entries if e.key}
    if mapping is not None and keyed:  # a mapping of an array's rows or a run's indices names exactly those
        bad += [f"the mapping names {k!r}, which is not among the {len(entries)} records"
                for k in sorted(set(mapping) - keyed, key=lambda k: (len(k), k))]
    if bad:
        raise problems_error(root, bad, f"{len(bad)} mismatch(es) between the records and the sample ids")
    return kept, left_out


def check_ids(entries: list[Entry], expected: np.ndarray, in_split: np.ndarray, root: Path) -> list[Entry]:
    """Exactly one file per expected id; returns the entries sorted by sample id."""
    by_id: dict[int, list[Entry]] = {}
    for e in entries:
        by_id.setdefault(e.sample_id, []).append(e)
    problems = [f"sample id {sid} given by {len(es)} records: {', '.join(e.where for e in es)}"
                for sid, es in sorted(by_id.items()) if len(es) > 1]
    split_set, expected_set = set(in_split.tolist()), set(expected.tolist())
    for sid, es in sorted(by_id.items()):
        if sid not in split_set:
            problems.append(f"{es[0].where}: sample id {sid} is not in the task's evaluation split")
        elif sid not in expected_set:
            problems.append(f"{es[0].where}: sample id {sid} is not among the {len(expected)} evaluated ids "
                            "(config `n_eval`)")
    missing = sorted(expected_set - set(by_id))
    if missing:
        problems.append(f"{len(missing)} evaluation id(s) have no counterfactual (first: {missing[:10]})")
    if problems:
        raise problems_error(root, problems, f"{len(problems)} problem(s) with the sample ids")
    return [by_id[int(s)][0] for s in sorted(expected_set)]


def read_folder(path: str | Path, layout: str, shape: tuple[int, int, int], expected: np.ndarray,
                in_split: np.ndarray, mapping: str | Path | None = None
                ) -> tuple[list[Entry], np.ndarray, list[Entry]]:
    """Entries (sorted by sample id, exactly ``expected``), their images (uint8 N x C x H x W) and the records
    the mapping leaves out."""
    root = Path(path)
    if not root.exists():
        raise ImportFolderError(f"{root}: no such file or folder")
    if layout not in LAYOUTS:
        raise ImportFolderError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if layout in NEEDS_MAPPING and not mapping:
        raise ImportFolderError(f"{root}: layout {layout} records no sample ids: give --mapping (docs/import.md)")
    entries = READERS[layout](root, shape)
    if not entries:
        raise ImportFolderError(f"{root}: no counterfactuals found (layout {layout}; docs/import.md)")
    entries, left_out = assign_ids(entries, read_mapping(Path(mapping)) if mapping else None, root)
    entries = check_ids(entries, np.asarray(expected), np.asarray(in_split), root)
    images, bad = [], []
    for e in entries:
        try:
            images.append(e.image if e.image is not None else load_image(e.file, shape))
        except ImportFolderError as err:
            bad.append(str(err))
    if bad:
        raise problems_error(root, bad, f"{len(bad)} bad image file(s)")
    return entries, np.stack(images), left_out


def check_inputs(entries: list[Entry], x: np.ndarray, root: Path) -> float | None:
    """The records that carry the other code base's copy of their input (PEAL's ``x_list``, RCSB's logged
    ``images``) must be of the input they are mapped to: mean |theirs - ours| (0..255) at most
    :data:`INPUT_TOLERANCE` each; returns the largest such distance (None: no record carries its input)."""
    dist = [(float(np.abs(e.source_input.astype(np.float32) - (e.input_view or np.asarray)(xi).astype(np.float32))
                   .mean()), e) for e, xi in zip(entries, x) if e.source_input is not None]
    bad = [f"{e.where} -> sample id {e.sample_id}: mean |difference| {d:.1f}" for d, e in dist if d > INPUT_TOLERANCE]
    if bad:
        raise problems_error(root, bad, f"{len(bad)} record(s) whose own copy of the input is not the mapped "
                                        f"sample's image (mean |difference| over {INPUT_TOLERANCE:g} of 255: a "
                                        "wrong mapping, or other images or preprocessing than this split's)")
    return max(d for d, _ in dist) if dist else None


def import_folder(cfg: dict, task, path: str | Path, layout: str, out: str | Path, *, mapping=None,
                  data_dir: str | None = None, model_dir: str = "resources/models", device="cpu",
                  models=None) -> dict:
    """Read ``path``, classify x and cf with the task's classifier, write ``out``; returns a summary."""
    import torch

    from ..core.io import from_uint8, save_npz, to_uint8, write_json
    from ..data import eval_split_name, load_split
    from .explain import shard_ids

    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), data_dir=data_dir)
    expected = shard_ids(split.sample_ids, int(cfg["n_eval"]), 0, 1).numpy()
    shape = tuple(int(s) for s in split.float_images(torch.zeros(1, dtype=torch.int64)).shape[1:])
    entries, cf, left_out = read_folder(path, layout, shape, expected, split.sample_ids.numpy(), mapping)
    if models is None:
        from ..models import load_task_models

        models = load_task_models(cfg, task, roles=("classifier",), device=str(device), model_dir=model_dir)
    ids = np.array([e.sample_id for e in entries], np.int64)
    rows = split.index_of(torch.from_numpy(ids))
    bs = int(cfg["batch_size"])
    pred, pred_cf, x_u8 = [], [], []
    keep_x = any(e.source_input is not None for e in entries)
    with torch.no_grad():
        for s in range(0, len(ids), bs):
            x = split.float_images(rows[s:s + bs])
            x_u8 += [to_uint8(x)] if keep_x else []
            pred.append(models.classifier(x.to(device)).argmax(1).cpu())
            pred_cf.append(models.classifier(from_uint8(cf[s:s + bs]).to(device)).argmax(1).cpu())
    input_distance = check_inputs(entries, np.concatenate(x_u8), Path(path)) if keep_x else None
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
               "input_distance": input_distance, "left_out": [e.where for e in left_out],
               "files": [e.where for e in entries]}
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
