"""Cost columns from the same n counterfactuals as the quality columns.

NFE and steps per CF are the means over every counterfactual of ``counterfactuals.npz`` (the methods'
own per-sample counters, ``info_nfe_<net>_<fwd|bwd>``, and ``steps``). FLOPs per CF = sum over networks
of (forward calls x forward FLOPs per call + backward calls x backward FLOPs per call), with the per-call
FLOPs counted once per network (batch 1, :func:`network_call_flops`). Time per CF is the explain run's
generation time over all n; peak memory is the explain run's peak during generation.

The explain run records its own costs in each shard's ``timing-<i>-of-<n>.json`` (seconds, peak memory,
per-call FLOPs); merging the shards writes them as ``profile.json`` (:func:`explain_profile`), so every
cost column comes from the run that made the counterfactuals. ``vcebench profile task`` writes a
``profile.json`` of the same shape from a separate profiling run (with FLOPs also counted over whole
counterfactuals); a profile without per-call FLOPs (older files) gives its own FLOPs per CF, stated as
the source.

Each mean also gets a percentile bootstrap interval over the inputs (``metrics.bootstrap``), so that
cost cells carry an interval like the quality cells.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.io import load_npz

if TYPE_CHECKING:
    import torch

# NFE counter name (methods/base.py NFE) -> model role
NFE_ROLES = {"classifier": "classifier", "unet": "ddpm", "pmf": "pmf", "perceptual": "perceptual"}


def network_call_flops(models, x: torch.Tensor, nfe_by_network: dict[str, dict[str, float]]) -> dict[str, Any]:
    """``flops_per_call``: FLOPs of one call (batch 1, the shape of ``x``) of every network the method called,
    forward and input backward (``costs.flops.per_call_flops``), from which the report derives FLOPs per CF
    for all n CFs of counterfactuals.npz; ``tflops_per_cf_from_calls``: the same product with the mean calls
    ``nfe_by_network`` (``vcebench.costs.measure.nfe_by_network``)."""
    from .flops import flops_from_nfe, per_call_flops

    nets = {net: getattr(models, NFE_ROLES[net]) for net, d in nfe_by_network.items()
            if (d["fwd"] or d["bwd"]) and net in NFE_ROLES and getattr(models, NFE_ROLES[net], None) is not None}
    calls = per_call_flops(nets, int(x.shape[-1]), channels=int(x.shape[1]))
    used = {k: v for k, v in nfe_by_network.items() if k in calls}
    return {"flops_per_call": calls, "tflops_per_cf_from_calls": flops_from_nfe(used, calls) / 1e12}


class CostRecordError(ValueError):
    """Shard timing records that cannot be merged into one profile (the message says why)."""


def read_explain_profile(paths: list[str | Path]) -> dict[str, Any]:
    """:func:`explain_profile` of the timing files ``paths``; CostRecordError naming the files when one is not
    readable JSON or the records do not merge."""
    import json

    records = []
    for p in paths:
        try:
            records.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError) as e:
            raise CostRecordError(f"timing file {p} is not readable JSON ({e})") from e
    try:
        return explain_profile(records)
    except (KeyError, TypeError, ValueError) as e:  # CostRecordError is a ValueError
        raise CostRecordError(f"timing files {', '.join(map(str, paths))}: expected explain timing records with "
                              f"`seconds` and `n` ({type(e).__name__}: {e})") from e


def explain_profile(records: list[dict[str, Any]]) -> dict[str, Any]:
    """``profile.json`` of an explain run from its shards' timing records: ``sec_per_cf`` = total generation
    seconds / total n, ``peak_mem_mb`` = the largest shard's peak, ``flops_per_call`` (the same in every shard
    that ran a network), and where each came from."""
    if not records:
        raise CostRecordError("no timing records to merge")
    n = sum(int(r["n"]) for r in records)
    seconds = sum(float(r["seconds"]) for r in records)
    methods = sorted({str(r.get("method")) for r in records})
    if len(methods) > 1:
        raise CostRecordError(f"timing records of different methods: {methods}")
    per_call: dict[str, Any] = {}
    for r in records:
        for net, calls in (r.get("flops_per_call") or {}).items():
            if per_call.setdefault(net, calls) != calls:
                raise CostRecordError(f"shards disagree on the FLOPs per call of {net!r}: {per_call[net]} vs {calls}")
    peaks = [float(r["peak_mem_mb"]) for r in records if r.get("peak_mem_mb") is not None]
    first = records[0]
    out = {"method": methods[0], "n": n, "seconds_total": seconds, "sec_per_cf": seconds / n if n else None,
           "sec_per_cf_source": f"explain timings ({len(records)} shard files, n = {n})",
           "peak_mem_mb": max(peaks) if peaks else None, "peak_mem_kind": first.get("peak_mem_kind"),
           "peak_mem_source": "explain run (peak during generation, largest shard)",
           "flops_per_call": per_call, "batch_size": first.get("batch_size"),
           "explain_batch_size": sorted({int(r["batch_size"]) for r in records if "batch_size" in r})}
    machine = ("device", "threads", "torch", "kernels", "models", "gates", "flop_convention", "provenance")
    out.update({k: first[k] for k in machine if k in first})
    return out


def nfe_per_sample(z: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """``{net: {"fwd": (n,), "bwd": (n,)}}`` from the ``info_nfe_<net>_<dir>`` arrays of a counterfactuals file."""
    out: dict[str, dict[str, np.ndarray]] = {}
    n = len(z["sample_id"])
    for key, value in z.items():
        if not key.startswith("info_nfe_"):
            continue
        net, _, direction = key[len("info_nfe_"):].rpartition("_")
        if direction in ("fwd", "bwd") and net:
            d = out.setdefault(net, {"fwd": np.zeros(n), "bwd": np.zeros(n)})
            d[direction] = np.asarray(value, np.float64)
    return dict(sorted(out.items()))


def flops_per_sample(nfe: dict[str, dict[str, np.ndarray]], per_call: dict[str, dict[str, Any]]) -> np.ndarray:
    """(n,) FLOPs of each counterfactual: its calls of each network times that network's FLOPs per call."""
    total = None
    for net, d in nfe.items():
        if not (d["fwd"].any() or d["bwd"].any()):
            continue
        if net not in per_call:
            raise KeyError(f"profile.json has no per-call FLOPs of network {net!r} (flops_per_call: "
                           f"{sorted(per_call)}); rerun `vcebench profile task`")
        f = d["fwd"] * float(per_call[net]["fwd_flops"]) + d["bwd"] * float(per_call[net]["bwd_flops"])
        total = f if total is None else total + f
    return total if total is not None else np.zeros(len(next(iter(nfe.values()))["fwd"]) if nfe else 0)


def _interval(values: np.ndarray, bootstrap: dict[str, Any]) -> list[float] | None:
    from metrics.bootstrap import percentile_interval, resample_counts

    v = np.asarray(values, np.float64)
    b = int(bootstrap["resamples"])
    if len(v) == 0 or b < 1:
        return None
    w = resample_counts(len(v), b, int(bootstrap["seed"]))
    return percentile_interval(w @ v / len(v), float(bootstrap["level"]))


def cost_columns(cf_path: Path, profile: dict[str, Any] | None, bootstrap: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """``nfe_per_cf``, ``mean_steps``, ``tflops_per_cf`` over all n of ``cf_path`` (+ ``<col>_lo`` / ``_hi``),
    ``sec_per_cf`` / ``peak_mem_mb`` from ``profile``, and ``cost_sources`` saying where each came from. A file
    written by `vcebench import` (``steps`` -1: unknown) has none: another code base made its CFs."""
    from metrics.bootstrap import BOOTSTRAP_DEFAULTS

    bootstrap = {**BOOTSTRAP_DEFAULTS, **(bootstrap or {})}
    profile = profile or {}
    out: dict[str, Any] = {"sec_per_cf": profile.get("sec_per_cf"), "peak_mem_mb": profile.get("peak_mem_mb")}
    sources = {"sec_per_cf": profile.get("sec_per_cf_source", "profile run") if profile else None,
               "peak_mem_mb": profile.get("peak_mem_source", "profile run") if profile else None}
    if not Path(cf_path).exists():
        out.update({c: profile.get(c) for c in ("nfe_per_cf", "mean_steps", "tflops_per_cf")})
        sources.update(dict.fromkeys(("nfe_per_cf", "mean_steps", "tflops_per_cf"), "profile run"))
        out["cost_sources"] = sources
        return out
    z = load_npz(cf_path)
    n = len(z["sample_id"])
    if n and (np.asarray(z.get("steps", np.zeros(n))) < 0).all():  # `vcebench import`: nothing was counted
        out.update(dict.fromkeys(("nfe_per_cf", "mean_steps", "tflops_per_cf")))
        sources.update(dict.fromkeys(("nfe_per_cf", "mean_steps", "tflops_per_cf"), "imported: not counted"))
        out["cost_sources"] = sources
        return out
    nfe = nfe_per_sample(z)
    fwd = np.sum([d["fwd"] for d in nfe.values()], axis=0) if nfe else np.zeros(n)
    steps = np.asarray(z.get("steps", np.zeros(n)), np.float64)
    per_sample = {"nfe_per_cf": fwd, "mean_steps": steps}
    sources.update(nfe_per_cf=f"counterfactuals.npz (n = {n})", mean_steps=f"counterfactuals.npz (n = {n})")
    per_call = profile.get("flops_per_call")
    if per_call:
        per_sample["tflops_per_cf"] = flops_per_sample(nfe, per_call) / 1e12
        sources["tflops_per_cf"] = f"per-call FLOPs x NFE of counterfactuals.npz (n = {n})"
    else:
        out["tflops_per_cf"] = profile.get("tflops_per_cf")
        sources["tflops_per_cf"] = "profile run" if profile else None
    for col, v in per_sample.items():
        out[col] = float(v.mean()) if n else None
        iv = _interval(v, bootstrap)
        if iv is not None:
            out[f"{col}_lo"], out[f"{col}_hi"] = iv
    out["cost_sources"] = sources
    return out
