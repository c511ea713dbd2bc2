"""`vcebench evaluate` as a library (its arguments and printing: :mod:`vcebench.cli.evaluate`):
the task's metrics for one method, or the FID reference statistics.

Which metrics, on which subsets, with which networks: ``metrics/__init__.py``. Without
``--fid-ref`` the originals' features are computed on the fly (same numbers, slower).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import EvalSettings


def metric_families() -> list[str]:
    """The built-in metric families (``--only``; the plug-ins' join them, ``vcebench.registry``)."""
    from ..registry import BUILTIN_METRICS

    return [s.name for s in BUILTIN_METRICS]


def eval_config(config: list[str] | None, task: str, method: str | None, n_eval: int | None = None) -> dict:
    """The config of one evaluate job: the files ``config`` checked for ``task`` and ``method`` (None: the
    method-independent settings, the FID reference), ``n_eval`` in place of the config's; ``task`` checked."""
    from ..config.tasks import get_task
    from ..protocol.settings import load_settings

    cfg = load_settings(config, only=(task, method))
    if n_eval is not None:
        cfg["n_eval"] = int(n_eval)
    get_task(cfg, task)
    return cfg


def eval_settings(cfg: dict, task: str, method: str | None, *, data_dir: str | None = None,
                  model_dir: str = "resources/models") -> tuple[EvalSettings, torch.device]:
    """``method``'s settings on ``task`` (None: the FID reference's), resolved once from ``cfg``
    (:func:`eval_config`), and the torch device of their runtime options."""
    from ..config.tasks import get_task
    from ..core.runtime import setup_torch
    from ..protocol.run_settings import EvalSettings

    settings = EvalSettings.resolve(cfg, get_task(cfg, task), method, data_dir=data_dir, model_dir=model_dir)
    return settings, setup_torch(settings.runtime.threads, settings.runtime.device, settings.runtime.cuda)


def samples_path(metrics_out: str) -> str:
    """Where the per-input record of the row whose metrics.json is ``metrics_out`` goes: beside it
    (``metrics.records.SAMPLES_FILE``)."""
    from pathlib import Path

    from metrics.records import SAMPLES_FILE

    return str(Path(metrics_out).with_name(SAMPLES_FILE))


def _image_batches(split, rows: np.ndarray, batch_size: int, device) -> Iterator[torch.Tensor]:
    for s in range(0, len(rows), batch_size):
        yield split.float_images(rows[s:s + batch_size]).to(device)


def write_reference(settings: EvalSettings, out: str, device, progress: bool = True) -> None:
    """FID features of every original of ``settings.split`` -> ``out`` (metrics.fid.FIDReference). The
    loaders read whole sections of the configuration: they get ``settings.config``."""
    from metrics.fid import compute_reference

    from ..data import load_split
    from ..models import load_task_models

    task, cfg = settings.task, settings.config
    split = load_split(cfg, task.dataset, settings.split, settings.data_dir)
    models = load_task_models(cfg, task, roles=("fid_features",), device=device, model_dir=settings.model_dir)
    bs = int(settings.metrics["batch_size"])
    batches = _image_batches(split, np.arange(len(split)), bs, device)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, total=-(-len(split) // bs), desc="fid reference", unit="batch")
    ref = compute_reference(batches, split.sample_ids, models.fid_features,
                            models.names.get("fid_features", "fid_features"))
    ref.save(out)
    print(f"{task.name}: FID reference of {len(split)} originals ({ref.extractor}, "
          f"{ref.features.shape[1]}-d) -> {out}")


def metric_inputs(names: list[str]) -> set[str]:
    """What the metrics ``names`` need beside the networks (``MetricSpec.inputs``)."""
    from .. import registry

    return {i for n in names for i in registry.get_metric_spec(n).inputs}


def build_task_metrics(settings: EvalSettings, names: list[str], need: set[str], models, ids: np.ndarray,
                   fid_ref: str | None) -> list:
    """The metrics ``names`` of ``settings.task``, with what they declare they need (``MetricSpec.inputs``): the
    FID reference (checked to cover ``ids``) and the training labels. The metrics and the split loader read
    whole sections of the configuration: they get ``settings.config``."""
    from metrics import build_metrics
    from metrics.fid import FIDReference

    from ..data import load_split

    task, cfg = settings.task, settings.config
    train = None
    if "train_labels" in need:
        train = load_split(cfg, task.dataset, "train", settings.data_dir)
    reference = FIDReference.load(fid_ref) if fid_ref and "fid_reference" in need else None
    if reference is not None:
        reference.check_covers(ids)
    return build_metrics(task, models, cfg, fid_reference=reference,
                         train_labels=None if train is None else train.labels.numpy(),
                         train_attribute_names=None if train is None else train.attribute_names, only=names)


def gt_counterfactuals(config: Mapping[str, Any], task, ids: np.ndarray):
    """Rows -> the ground-truth counterfactuals of those rows' samples, quantised like x and cf (``config``: the
    whole configuration, whose ``datasets`` section configures the renderer)."""
    import torch

    from ..core.io import from_uint8, to_uint8
    from ..data import get_synthetic

    ds = get_synthetic(config, task.dataset)

    def gt_of(r: np.ndarray) -> torch.Tensor:
        return from_uint8(to_uint8(ds.gt_counterfactuals(torch.from_numpy(ids[r]), task.attribute)))

    return gt_of


def _input_reader(cfs_path: str, z, ids: np.ndarray, split, rows: np.ndarray):
    """File rows -> their input images from the split, each checked against the file's ``input_hash`` (when it
    has one; a warning when not)."""
    from metrics.evaluation import check_inputs

    if "input_hash" not in z:
        print(f"vcebench evaluate: warning: {cfs_path} has no `input_hash` (written by an older vcebench "
              f"explain): the rows cannot be checked against the dataset's images", file=sys.stderr)

    def x_of(r: np.ndarray) -> torch.Tensor:
        x = split.float_images(rows[r])
        if "input_hash" in z:
            check_inputs(cfs_path, z["input_hash"], r, x, z["cf"], ids)
        return x

    return x_of


def _checked(batches, z, checks: dict[str, int]):
    """The batches (file order), counting where they disagree with the file's ``pred`` / ``flipped`` and where
    a target is not 1 - prediction into ``checks``."""
    pos = 0
    for b in batches:
        r = np.arange(pos, pos + len(b.sample_id))
        pos += len(r)
        if "pred" in z:
            checks["pred_disagreements"] += int((b.pred.cpu().numpy() != z["pred"][r]).sum())
        if "flipped" in z:
            checks["flipped_disagreements"] += int((b.flipped.cpu().numpy() != z["flipped"][r]).sum())
        checks["target_not_1_minus_pred"] += int((b.target != 1 - b.pred).sum())
        yield b


def evaluate_task(settings: EvalSettings, cfs_path: str, *, fid_ref: str | None = None, device="cpu",
                  only: list[str] | None = None, progress: bool = False, strict: bool = False,
                  models=None, resampled: bool = False, samples_out: str | None = None,
                  config_paths: list[str] | None = None) -> dict:
    """Everything `vcebench evaluate` writes to metrics.json for the counterfactuals ``cfs_path`` of
    ``settings.method``, whose inputs come from ``settings.split`` (``models``: preloaded TaskModels, tests).
    ``resampled``: also ``resampled``, each metric's value in every bootstrap resample (no metrics.json key).
    ``samples_out``: also write the per-input record there (``samples.npz``, :mod:`metrics.records`).
    ``config_paths``: the files the job was given (its resolved-settings file, or config files; None: the default
    ones), for its ``provenance`` record (:mod:`vcebench.core.provenance`, made first: a changed split file fails
    before any scoring)."""
    import torch

    from metrics import metric_names, required_roles
    from metrics.evaluation import load_counterfactuals

    from ..data import load_split
    from ..protocol.provenance import job_record

    t0 = time.perf_counter()
    provenance = job_record(settings, config_paths)
    task = settings.task
    names = list(only) if only else metric_names(task)
    z = load_counterfactuals(cfs_path)
    ids = z["sample_id"].astype(np.int64)
    split = load_split(settings.config, task.dataset, settings.split, settings.data_dir)
    rows = split.index_of(torch.from_numpy(ids)).numpy()  # DatasetError names ids not in the split
    coverage = check_coverage(cfs_path, ids, split, settings.n_eval, strict)
    x_of = _input_reader(cfs_path, z, ids, split, rows)
    label = split.attribute(task.attribute)[rows].long().numpy()
    if models is None:
        from ..models import load_task_models

        roles = tuple(r for r in required_roles(task) if r == "classifier" or
                      any(r in roles_of(n) for n in names))
        models = load_task_models(settings.config, task, roles=roles, device=device, model_dir=settings.model_dir)
    gt_of = gt_counterfactuals(settings.config, task, ids) if "ground_truth" in metric_inputs(names) else None
    core, metrics, checks = score(settings, names, models, x_of, z["cf"], ids, z["target"], label, gt_of=gt_of,
                                  fid_ref=fid_ref, device=device, progress=progress, strict=strict, stored=z,
                                  keep_resamples=resampled, records=samples_out is not None)
    if samples_out is not None:
        from metrics.records import write_samples

        write_samples(samples_out, core["records"])
    used = sorted({r for m in metrics for r in m.roles} | {"classifier"})
    inputs = {"counterfactuals": str(cfs_path), "fid_reference": fid_ref, "eval_split": settings.split,
              "n_counterfactuals": int(len(ids)), "input_hash_checked": "input_hash" in z, **coverage}
    record = {k: v for m in metrics for k, v in (getattr(m, "record", None) or {}).items()}  # the metrics' settings
    out = _metrics_json(settings, z, core, checks, inputs, {r: models.names.get(r, r) for r in used}, record, t0)
    out["provenance"] = provenance
    return {**out, "resampled": core.get("resampled", {})} if resampled else out


def score(settings: EvalSettings, names: list[str], models, x_of, cf: np.ndarray, ids: np.ndarray,
          target: np.ndarray, label: np.ndarray, *, gt_of=None, fid_ref: str | None = None, device="cpu",
          progress: bool = False, strict: bool = False, stored: Mapping[str, np.ndarray] | None = None,
          built: list | None = None, keep_resamples: bool = False,
          records: bool = False) -> tuple[dict, list, dict]:
    """The metrics ``names`` of ``settings.task`` on uint8 counterfactuals ``cf`` of the inputs ``x_of(rows)``
    (sample ids ``ids``, targets, attribute labels: -1 where unknown, which leaves the ``correct`` subsets
    out), with their bootstrap intervals: (``run_metrics``' result, the metrics, the checks against the
    ``pred`` / ``flipped`` arrays of ``stored``, a counterfactuals file). `vcebench evaluate` and the Python
    API (``vcebench.evaluate``) both score through here (``built``: the metrics ``names``, already built;
    ``records``: ``run_metrics``' per-input record too)."""
    from metrics.evaluation import make_batches, run_metrics

    metrics = (built if built is not None
               else build_task_metrics(settings, names, metric_inputs(names), models, ids, fid_ref))
    bs = int(settings.metrics["batch_size"])
    checks = {"pred_disagreements": 0, "flipped_disagreements": 0, "target_not_1_minus_pred": 0}
    batches = make_batches(x_of, cf, ids, target, label, models.classifier, bs, gt_of, device=device)
    core = run_metrics(metrics, _checked(batches, stored or {}, checks), progress=progress, strict=strict,
                       bootstrap=settings.metrics["bootstrap"], keep_resamples=keep_resamples, records=records)
    return core, metrics, checks

def _metrics_json(settings: EvalSettings, z, core: dict, checks: dict, inputs: dict, models: dict, record: dict,
                  t0: float) -> dict:
    """metrics.json from the metrics' results ``core`` and their settings ``record``, in its key order."""
    from metrics.base import SUBSETS

    from ..config.kernels import record as kernel_record

    m = settings.metrics
    return {
        "task": settings.task.name, "method": settings.method, "n_inputs": inputs["n_counterfactuals"],
        "metrics": core["metrics"], "higher_is_better": core["higher_is_better"], "n": core["n"],
        "models": models,
        "intervals": core.get("intervals", {}), "bootstrap": core.get("bootstrap"),
        "subsets": core["subsets"], "subset_definitions": SUBSETS,
        "seeds": list(m["sfid_seeds"]), "seed": settings.seed,
        "frechet_method": m["frechet_method"],
        "skipped": core["skipped"], "checks": checks,
        "inputs": inputs,
        **record,
        "guidance": guidance_summary(z),
        "protocol": None if settings.protocol is None else dict(settings.protocol),
        "kernels": kernel_record(),
        "seconds": core["seconds"], "seconds_total": time.perf_counter() - t0,
    }


def check_coverage(cfs_path, ids: np.ndarray, split, n_eval: int, strict: bool) -> dict:
    """The counterfactuals should cover the first ``n_eval`` evaluation sample ids (what ``vcebench explain``
    makes): missing or extra ids are an error under ``strict``, a warning otherwise. Returns the counts
    recorded in metrics.json."""
    from metrics import MetricError

    from .explain import shard_ids

    expected = shard_ids(split.sample_ids, n_eval, 0, 1).numpy()
    missing, extra = np.setdiff1d(expected, ids), np.setdiff1d(ids, expected)
    if len(missing) or len(extra):
        msg = (f"{cfs_path} holds {len(ids)} counterfactual(s) for n_eval = {n_eval} ({len(expected)} evaluation "
               f"sample ids): {len(missing)} missing (first: {[int(i) for i in missing[:5]]}), {len(extra)} "
               f"beyond them (first: {[int(i) for i in extra[:5]]})")
        if strict:
            raise MetricError(msg + "; re-run `vcebench explain` (or drop --strict)")
        print(f"vcebench evaluate: warning: {msg}", file=sys.stderr)
    return {"n_eval": int(n_eval), "n_expected": int(len(expected)), "n_missing": int(len(missing)),
            "n_extra": int(len(extra))}


def guidance_summary(z: dict) -> dict | None:
    """Which guidance scale produced each sample's CF (DDPM family: ``info_scale``, the last scale tried, and
    ``info_attempts``): counts per scale and per number of attempts, and whether every sample flipped at its
    first scale (the retry schedule then never ran). ``None`` for methods without a scale schedule."""
    if "info_scale" not in z or "info_attempts" not in z:
        return None
    scale, attempts = np.asarray(z["info_scale"], np.float64), np.asarray(z["info_attempts"], np.int64)
    flipped = np.asarray(z.get("flipped", np.zeros(len(scale), bool)), bool)
    first = float(scale[attempts == 1].min()) if (attempts == 1).any() else None
    return {"samples_per_scale": {f"{s:g}": int((scale == s).sum()) for s in np.unique(scale)},
            "samples_per_attempts": {int(a): int((attempts == a).sum()) for a in np.unique(attempts)},
            "first_scale": first, "all_flipped_at_first_scale": bool(len(scale) and (attempts == 1).all()
                                                                       and flipped.all())}


def roles_of(name: str) -> tuple[str, ...]:
    from metrics import MetricError

    from ..registry import metrics

    known = metrics()
    if name not in known:
        raise MetricError(f"unknown metric {name!r} (--only); known: {', '.join(known)}")
    return known[name].roles

