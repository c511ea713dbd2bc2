"""Stream aligned originals and counterfactuals through the metrics; assemble metrics.json.

The classifier is run once per batch on x and on the stored (uint8) counterfactuals: its
logits are cached in ``EvalBatch.extra`` (FR, MAD, COUT reuse them), ``pred = f(x)`` and
``flipped = f(cf) == target`` are recomputed from what is actually evaluated; disagreements
with the ``pred`` / ``flipped`` arrays written by ``vcebench explain`` (e.g. from rounding
to uint8) are counted in metrics.json under ``checks``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from vcebench.core.io import from_uint8, input_fingerprint, load_npz, to_uint8

from .base import SUBSETS, EvalBatch, InsufficientSamples, Metric, MetricError
from .bootstrap import BOOTSTRAP_DEFAULTS, BOOTSTRAP_METHOD, Resamples, percentile_interval

CF_KEYS = ("sample_id", "cf", "target")


def load_counterfactuals(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read ``counterfactuals.npz`` (docs/internals.md) and check its arrays."""

    if not os.path.exists(path):
        raise FileNotFoundError(f"counterfactuals {path} not found; create them with `vcebench explain`")
    z = load_npz(path)
    missing = [k for k in CF_KEYS if k not in z]
    if missing:
        raise MetricError(f"{path}: missing array(s) {missing}; expected {list(CF_KEYS)} (docs/internals.md)")
    n = len(z["sample_id"])
    if z["cf"].dtype != np.uint8 or z["cf"].ndim != 4 or z["cf"].shape[0] != n:
        raise MetricError(f"{path}: `cf` must be uint8 N x C x H x W with N = {n} sample ids, "
                          f"got {z['cf'].dtype} {z['cf'].shape}")
    for k in ("target", "pred", "flipped"):
        if k in z and z[k].shape != (n,):
            raise MetricError(f"{path}: `{k}` has shape {z[k].shape}, expected ({n},)")
    if not np.isin(z["target"], (0, 1)).all():
        raise MetricError(f"{path}: `target` must hold class indices 0 / 1")
    if len(np.unique(z["sample_id"])) != n:
        raise MetricError(f"{path}: duplicate sample ids")
    if n == 0:
        raise MetricError(f"{path}: holds no counterfactuals")
    return z


class SampleIdMismatch(MetricError):
    """Counterfactual rows that were not made from the dataset's image of their sample id."""


def check_inputs(path: str | os.PathLike, input_hash: np.ndarray, rows: np.ndarray, x: Tensor, cf: np.ndarray,
                 sample_id: np.ndarray) -> None:
    """Refuse rows ``rows`` of a counterfactuals file whose stored ``input_hash`` differs from the
    fingerprint of the dataset's image ``x`` of the same sample id with the stored CF (swapped ids or
    CF rows, stale or foreign rows)."""

    bad = np.nonzero(input_fingerprint(to_uint8(x), cf[rows]) != input_hash[rows])[0]
    if len(bad):
        ids = [int(i) for i in sample_id[rows[bad]][:5]]
        raise SampleIdMismatch(f"{path}: {len(bad)} row(s) hold a counterfactual that was not made from the "
                               f"dataset's image of their sample id (first ids: {ids}): swapped or stale rows; "
                               f"re-run `vcebench explain` for this task and method")


def check_same_ids(cf_ids: np.ndarray | Tensor, orig_ids: np.ndarray | Tensor) -> None:
    """The counterfactuals must cover exactly the given originals (same set of sample ids)."""
    a = set(np.asarray(cf_ids).tolist())
    b = set(np.asarray(orig_ids).tolist())
    if a != b:
        extra, missing = sorted(a - b), sorted(b - a)
        raise MetricError(f"counterfactuals and originals have different sample ids: {len(extra)} CF id(s) "
                          f"without an original (first: {extra[:5]}), {len(missing)} original(s) without a "
                          f"CF (first: {missing[:5]})")


def make_batches(x_of: Callable[[np.ndarray], Tensor], cf: np.ndarray, sample_id: np.ndarray,
                 target: np.ndarray, label: np.ndarray, classifier: nn.Module, batch_size: int,
                 gt_of: Callable[[np.ndarray], Tensor] | None = None,
                 device: torch.device | str = "cpu") -> Iterator[EvalBatch]:
    """EvalBatches in file order. ``x_of(rows)`` / ``gt_of(rows)`` give [-1, 1] images for row indices."""

    n = len(sample_id)
    for start in range(0, n, batch_size):
        rows = np.arange(start, min(n, start + batch_size))
        x = x_of(rows).float().to(device)
        cfb = from_uint8(cf[rows]).to(device)
        with torch.no_grad():
            logits_x, logits_cf = classifier(x).float(), classifier(cfb).float()
        tgt = torch.as_tensor(target[rows]).long().to(device)
        yield EvalBatch(x=x, cf=cfb, sample_id=torch.as_tensor(sample_id[rows]).long().to(device), target=tgt,
                        flipped=logits_cf.argmax(1) == tgt, label=torch.as_tensor(label[rows]).long().to(device),
                        gt_cf=None if gt_of is None else gt_of(rows).float().to(device),
                        extra={"logits_x": logits_x, "logits_cf": logits_cf}, pred=logits_x.argmax(1))


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _update_all(metrics: Sequence[Metric], batches: Iterable[EvalBatch], sizes: dict[str, int],
                seconds: dict[str, float]) -> set[int]:
    """Update every metric with every batch, counting each subset's size into ``sizes`` and each metric's
    time into ``seconds``; the sample ids seen (a duplicate id is a MetricError)."""
    ids_seen: set[int] = set()
    for batch in batches:
        ids = batch.sample_id.tolist()
        if ids_seen.intersection(ids) or len(set(ids)) != len(ids):
            raise MetricError("duplicate sample ids in the evaluation stream")
        ids_seen.update(ids)
        for s in SUBSETS:
            if s.startswith("correct") and bool((batch.label < 0).any()):
                continue
            sizes[s] += int(batch.subset(s).sum())
        for m in metrics:
            t0 = time.perf_counter()
            m.update(batch)
            seconds[m.name] += time.perf_counter() - t0
    return ids_seen


def directions(m: Metric) -> dict[str, bool | None]:
    """Column -> higher is better of metric ``m``: its registration's (``MetricSpec.columns``, set by
    :func:`metrics.build_metrics`, or looked up by name for a metric built by hand); an unregistered metric
    states its own ``higher_is_better``."""
    hib = getattr(m, "higher_is_better", None)
    if hib is None:
        from vcebench import registry

        hib = dict(registry.metrics()[m.name].columns)
    return hib


def run_metrics(metrics: Sequence[Metric], batches: Iterable[EvalBatch], progress: bool = False,
                strict: bool = False, bootstrap: dict | None = None, keep_resamples: bool = False,
                records: bool = False) -> dict:
    """Update every metric with every batch, then compute.

    A metric with fewer samples than it needs raises :class:`InsufficientSamples`; with ``strict`` that
    error propagates, otherwise the metric's outputs are ``None`` and the reason is kept in ``skipped``.

    Returns the metrics.json core: ``metrics``, ``higher_is_better``, ``n``, ``subsets``
    (metric output -> subset name, plus ``sizes`` per subset), ``roles`` (metric -> roles),
    ``skipped`` (metric -> reason, e.g. fewer successful counterfactuals than FID needs) and
    ``seconds`` per metric family (timing of update + compute, network passes shared through the
    batch cache are charged to the first metric that needs them).

    ``bootstrap`` (``{resamples, feature_resamples, seed, level}``, defaults
    ``bootstrap.BOOTSTRAP_DEFAULTS``; ``None``: the defaults, ``{"resamples": 0}``: none) adds
    ``intervals`` (output -> ``[lo, hi]``, or ``None`` when most resamples left the subset empty)
    and ``bootstrap`` (the settings used) for every metric that has a ``bootstrap`` method;
    ``keep_resamples`` also ``resampled`` (output -> its value in each resample, NaN where the subset was empty;
    the tuner's pick stability, ``vcebench.protocol.search.pick_agreement``); ``records`` also ``records``, the
    per-input :class:`~metrics.records.SampleRecord` (what ``samples.npz`` holds; no metrics.json key).
    """
    sizes = dict.fromkeys(SUBSETS, 0)
    seconds = {m.name: 0.0 for m in metrics}
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, desc="evaluate", unit="batch")
    ids_seen = _update_all(metrics, batches, sizes, seconds)
    out: dict = {"metrics": {}, "higher_is_better": {}, "n": {}, "subsets": {"sizes": sizes}, "roles": {},
                 "skipped": {}, "seconds": seconds}
    for m in metrics:
        out["roles"][m.name] = list(m.roles)
        t0 = time.perf_counter()
        try:
            values = m.compute()
        except InsufficientSamples as e:
            if strict:
                raise
            out["skipped"][m.name] = str(e)
            for k, higher in directions(m).items():
                out["metrics"][k] = None
                out["higher_is_better"][k] = higher
                out["subsets"][k] = m.subset
                out["n"][k] = 0
            continue
        finally:
            seconds[m.name] += time.perf_counter() - t0
        for k, v in values.items():
            out["metrics"][k] = _finite(float(v))
            out["higher_is_better"][k] = directions(m).get(k)  # None: an output that is no table column
            out["subsets"][k] = m.subset
            out["n"][k] = int(m.n.get(k, 0))
        out["n"].update({k: int(v) for k, v in m.n.items() if k not in values})  # e.g. FID_originals
    if ids_seen:
        draws, boot = _intervals(out, metrics, sorted(ids_seen), {**BOOTSTRAP_DEFAULTS, **(bootstrap or {})},
                                 keep_resamples)
        if records:
            from .records import build_record

            out["records"] = build_record(metrics, sorted(ids_seen), draws, boot, out["subsets"], list(out["skipped"]))
    return out


def _intervals(out: dict, metrics: Sequence[Metric], ids: list[int], cfg: dict,
               keep: bool = False) -> tuple[Resamples | None, dict[str, np.ndarray]]:
    """``out['intervals']``, ``out['bootstrap']``: percentile bootstrap intervals (``bootstrap.py``); ``keep``:
    ``out['resampled']``, the resampled values themselves. Returns the count matrix (None: no bootstrap) and
    every output's resampled values."""
    b, bf = int(cfg["resamples"]), int(cfg["feature_resamples"])
    if b < 1:
        return None, {}
    t0 = time.perf_counter()
    draws = Resamples.draw(ids, max(b, bf), int(cfg["seed"]))
    intervals: dict[str, list[float] | None] = {}
    boot: dict[str, np.ndarray] = {}
    for m in metrics:
        if m.name in out["skipped"] or not hasattr(m, "bootstrap"):
            continue
        for k, values in m.bootstrap(draws.head(bf if getattr(m, "feature_bootstrap", False) else b)).items():
            intervals[k] = percentile_interval(values, float(cfg["level"]))
            boot[k] = np.asarray(values, dtype=float)
    out["intervals"] = intervals
    if keep:
        out["resampled"] = {k: v.tolist() for k, v in boot.items()}
    out["bootstrap"] = {"resamples": b, "feature_resamples": bf, "seed": int(cfg["seed"]),
                        "level": float(cfg["level"]), "n_inputs": len(ids), "method": BOOTSTRAP_METHOD,
                        "seconds": time.perf_counter() - t0}
    return draws, boot
