"""`vcebench evaluate`: the task's metrics for one method, or the FID reference statistics.

Examples::

    vcebench evaluate --task synthfaces_smile --reference --out results/synthfaces_smile/fid_ref.npz
    vcebench evaluate --task synthfaces_smile --method fire \\
        --cfs results/synthfaces_smile/fire/counterfactuals.npz \\
        --fid-ref results/synthfaces_smile/fid_ref.npz --out results/synthfaces_smile/fire/metrics.json

Which metrics, on which subsets, with which networks: ``metrics/__init__.py``. Without
``--fid-ref`` the originals' features are computed on the fly (same numbers, slower).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cli import add_config_arg
from ..registry import BUILTIN_METRICS

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import EvalSettings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="compute a method's metrics (or the FID reference statistics)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task name (config key `tasks`)")
    p.add_argument("--method", help="method name (recorded in metrics.json)")
    p.add_argument("--reference", action="store_true",
                   help="write the FID reference statistics of all evaluation-split originals to --out")
    p.add_argument("--cfs", help="counterfactuals.npz (default results/<task>/<method>/counterfactuals.npz)")
    p.add_argument("--fid-ref", help="fid_ref.npz written by --reference (default: compute on the fly)")
    p.add_argument("--out", help="output path (default results/<task>/<method>/metrics.json, "
                                 "or results/<task>/fid_ref.npz with --reference)")
    p.add_argument("--data", help="rendered dataset cache folder (synthetic datasets; default: render in memory)")
    p.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    p.add_argument("--only", action="append", metavar="METRIC",
                   help="evaluate only these metric families (repeatable), e.g. --only FID --only FR; known: "
                        f"{', '.join(s.name for s in BUILTIN_METRICS)} and the plug-ins' (vcebench.registry)")
    p.add_argument("--strict", action="store_true",
                   help="fail when a metric has too few samples (default: write null and the reason under "
                        "`skipped`, e.g. FID of a method with < 2 successful counterfactuals)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--n-eval", type=int, default=None, metavar="N",
                   help="the counterfactuals cover the first N evaluation inputs, not config `n_eval` "
                        "(`pareto.n_eval`)")
    add_config_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Resolves the task (and the method's name, given or the --cfs folder's) once into an
    :class:`~vcebench.protocol.run_settings.EvalSettings`, then writes the FID reference or metrics.json."""
    from ..config.load import ConfigError
    from ..config.tasks import get_task
    from ..core.io import check_writable
    from ..core.runtime import setup_torch
    from ..protocol.run_settings import EvalSettings
    from ..protocol.settings import load_settings

    cfg = load_settings(args.config, only=(args.task, None if args.reference else args.method))
    if args.n_eval is not None:
        cfg["n_eval"] = int(args.n_eval)
    task = get_task(cfg, args.task)
    if not args.reference and not args.method and not args.cfs:
        raise ConfigError("vcebench evaluate needs --method (and/or --cfs), or --reference")
    method = None if args.reference else args.method or Path(args.cfs).parent.name
    settings = EvalSettings.resolve(cfg, task, method, data_dir=args.data, model_dir=args.models)
    device = setup_torch(settings.runtime.threads, settings.runtime.device, settings.runtime.cuda)
    if args.reference:
        out = args.out or f"results/{task.name}/fid_ref.npz"
        check_writable(Path(out).parent, "the FID reference")
        write_reference(settings, out, device, not args.no_progress)
        return 0
    cfs = args.cfs or f"results/{task.name}/{method}/counterfactuals.npz"
    out = args.out or f"results/{task.name}/{method}/metrics.json"
    check_writable(Path(out).parent, "metrics.json")  # before the evaluation, not after it
    result = evaluate_task(settings, cfs, fid_ref=args.fid_ref, device=device, only=args.only,
                           progress=not args.no_progress, strict=args.strict)
    from ..core.io import write_json

    write_json(out, result)
    for name, reason in result["skipped"].items():
        print(f"vcebench evaluate: warning: {name} skipped: {reason}", file=sys.stderr)
    shown = ", ".join(f"{k}={v:.4g}" if v is not None else f"{k}=skipped" for k, v in result["metrics"].items())
    print(f"{task.name}/{method}: {shown} ({result['seconds_total']:.1f} s) -> {out}")
    return 0


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
    bs = int(settings.metrics.get("batch_size", 100))
    batches = _image_batches(split, np.arange(len(split)), bs, device)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, total=-(-len(split) // bs), desc="fid reference", unit="batch")
    ref = compute_reference(batches, split.sample_ids, models.fid_features,
                            models.names.get("fid_features", "fid_features"))
    ref.save(out)
    print(f"{task.name}: FID reference of {len(split)} originals ({ref.extractor}, "
          f"{ref.features.shape[1]}-d) -> {out}")


def _build_metrics(settings: EvalSettings, names: list[str], models, ids: np.ndarray, fid_ref: str | None) -> list:
    """The metrics ``names`` of ``settings.task``, with the FID reference (checked to cover ``ids``) and the
    training labels where they need them. The metrics and the split loader read whole sections of the
    configuration: they get ``settings.config``."""
    from metrics import build_metrics
    from metrics.fid import FIDReference

    from ..data import load_split

    task, cfg = settings.task, settings.config
    train = None
    if "CD" in names:
        train = load_split(cfg, task.dataset, "train", settings.data_dir)
    reference = FIDReference.load(fid_ref) if fid_ref and ({"FID", "sFID"} & set(names)) else None
    if reference is not None:
        reference.check_covers(ids)
    return build_metrics(task, models, cfg, fid_reference=reference,
                         train_labels=None if train is None else train.labels.numpy(),
                         train_attribute_names=None if train is None else train.attribute_names, only=names)


def _gt_counterfactuals(config: Mapping[str, Any], task, ids: np.ndarray):
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
                  models=None) -> dict:
    """Everything `vcebench evaluate` writes to metrics.json for the counterfactuals ``cfs_path`` of
    ``settings.method``, whose inputs come from ``settings.split`` (``models``: preloaded TaskModels, tests)."""
    import torch

    from metrics import metric_names, required_roles
    from metrics.evaluation import load_counterfactuals, make_batches, run_metrics

    from ..data import load_split

    t0 = time.perf_counter()
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
                      any(r in _roles_of(n) for n in names))
        models = load_task_models(settings.config, task, roles=roles, device=device, model_dir=settings.model_dir)
    metrics = _build_metrics(settings, names, models, ids, fid_ref)
    gt_of = _gt_counterfactuals(settings.config, task, ids) if "GT" in names else None
    bs = int(settings.metrics.get("batch_size", 100))
    checks = {"pred_disagreements": 0, "flipped_disagreements": 0, "target_not_1_minus_pred": 0}
    batches = make_batches(x_of, z["cf"], ids, z["target"], label, models.classifier, bs, gt_of, device=device)
    core = run_metrics(metrics, _checked(batches, z, checks), progress=progress, strict=strict,
                       bootstrap=settings.metrics.get("bootstrap"))
    used = sorted({r for m in metrics for r in m.roles} | {"classifier"})
    inputs = {"counterfactuals": str(cfs_path), "fid_reference": fid_ref, "eval_split": settings.split,
              "n_counterfactuals": int(len(ids)), "input_hash_checked": "input_hash" in z, **coverage}
    return _metrics_json(settings, names, z, core, checks, inputs, {r: models.names.get(r, r) for r in used}, t0)


def _metrics_json(settings: EvalSettings, names: list[str], z, core: dict, checks: dict, inputs: dict,
                  models: dict, t0: float) -> dict:
    """metrics.json from the metrics' results ``core``, in its key order."""
    from metrics.base import SUBSETS

    from ..config.kernels import record as kernel_record

    m = settings.metrics
    return {
        "task": settings.task.name, "method": settings.method, "n_inputs": inputs["n_counterfactuals"],
        "metrics": core["metrics"], "higher_is_better": core["higher_is_better"], "n": core["n"],
        "models": models,
        "intervals": core.get("intervals", {}), "bootstrap": core.get("bootstrap"),
        "subsets": core["subsets"], "subset_definitions": SUBSETS,
        "seeds": list(m.get("sfid_seeds", [])), "seed": settings.seed,
        "frechet_method": m.get("frechet_method", "sqrtm"),
        "skipped": core["skipped"], "checks": checks,
        "inputs": inputs,
        "gt_change_threshold": m.get("gt_change_threshold", 0.05) if "GT" in names else None,
        "kid": ({"kernel": "(a.b / D + 1)^3", **{k: v for k, v in (m.get("kid") or {}).items()}}
                if "KID" in names else None),
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


def _roles_of(name: str) -> tuple[str, ...]:
    from metrics import MetricError

    from ..registry import metrics

    known = metrics()
    if name not in known:
        raise MetricError(f"unknown metric {name!r} (--only); known: {', '.join(known)}")
    return known[name].roles
