"""Faults planted on a row's per-input records, to show what the paired regression catches (docs/ci.md).

Used by the regression's tests on fake records and by ``scripts/plant_regression.py`` on a copy of a finished
run. Each plant returns a new record (:mod:`vcebench.report.paired`'s mapping of arrays), the input left as is:

- :func:`unedited_cfs`: a share of the row's flipped CFs replaced by the unedited input: FR, FR_oracle and
  every rate lose those inputs, the inputs leave the ``subset/`` masks, their CF feature rows become the
  originals' rows;
- :func:`oracle_failures`: a share of the row's oracle successes turned to failures, FR unchanged (the
  adversarial drift: a CF that still flips the classifier but no longer changes the attribute);
- :func:`realism`: the row's CF feature rows pushed along a fixed random direction until its FID has risen by
  a factor (bisection on the scale, FID by the paired check's own function).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .paired import RATE_METRICS, Records, feature_values, trim_originals


def _chosen(mask: np.ndarray, share: float) -> np.ndarray:
    """The first ``ceil(share * count)`` positions of ``mask`` (at least one when any)."""
    pos = np.flatnonzero(mask)
    return pos[: int(np.ceil(share * len(pos)))] if len(pos) else pos


def unedited_cfs(rec: Records, originals: Mapping[str, np.ndarray] | None = None,
                 share: float = 0.1) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the planted record, the sample ids planted): ``share`` of the flipped inputs (``q/FR`` = 1) get the
    unedited input as CF (module docstring); ``originals`` gives their feature rows."""
    out = {k: np.array(v, copy=True) for k, v in rec.items()}
    hit = _chosen(np.asarray(rec["q/FR"], float) == 1.0, share)
    for key in out:
        if key.startswith("q/") and key[2:] in RATE_METRICS:
            out[key][hit] = 0.0
        elif key.startswith("subset/"):
            out[key][hit] = False
    if originals is not None:
        for key in [k for k in out if k.startswith("features/")]:
            rows = trim_originals(originals, out["ids"], out[key].dtype)
            pos = {int(s): i for i, s in enumerate(rows["sample_id"])}
            out[key][hit] = rows["features"][[pos[int(out["ids"][i])] for i in hit]]
    return out, np.asarray(rec["ids"], np.int64)[hit]


def oracle_failures(rec: Records, share: float = 0.1) -> dict[str, np.ndarray]:
    """``share`` of the inputs with ``q/FR_oracle`` = 1 turned to 0; every other column as it was."""
    out = {k: np.array(v, copy=True) for k, v in rec.items()}
    out["q/FR_oracle"][_chosen(np.asarray(rec["q/FR_oracle"], float) == 1.0, share)] = 0.0
    return out


def realism(rec: Records, originals: Mapping[str, np.ndarray], factor: float = 1.3,
            seed: int = 0) -> tuple[dict[str, np.ndarray], float, float]:
    """(the planted record, FID before, FID after): the CF feature rows of the kept inputs (``subset/FID``, else
    ``q/FR`` = 1) moved by ``scale * sd * z`` (``z`` standard normal, seeded) with ``scale`` bisected until the
    row's FID is ``factor`` times its own."""
    out = {k: np.array(v, copy=True) for k, v in rec.items()}
    net = sorted(k for k in rec if k.startswith("features/"))[0]
    ids = np.asarray(rec["ids"], np.int64)
    keep = (np.asarray(rec["subset/FID"], bool) if "subset/FID" in rec else np.asarray(rec["q/FR"], float) == 1.0)
    o = trim_originals(originals, ids, np.float64)["features"]
    c = np.asarray(rec[net], np.float64)
    z = np.random.default_rng(seed).standard_normal(c.shape) * c[keep].std(0, keepdims=True)
    ones = np.ones((1, len(ids)), np.int64)

    def fid(scale: float) -> float:
        return float(feature_values("FID", o, c + scale * z, keep, ones, [0], ids)[0])

    before, lo, hi = fid(0.0), 0.0, 1.0
    while fid(hi) < factor * before and hi < 1e6:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fid(mid) < factor * before else (lo, mid)
    out[net] = (c + hi * z).astype(rec[net].dtype)
    return out, before, fid(hi)
