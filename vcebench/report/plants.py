"""Faults planted on a finished run's counterfactuals, to show end to end what the paired regression catches
(docs/ci.md, ``scripts/plant_regression.py``).

A plant degrades the RUN's file ``results/<task>/<method>/counterfactuals.npz`` (never the reference); the run's
own evaluate job then scores the planted file, so every table column and ``samples.npz`` is recomputed by the
harness, and ``vcebench report regression`` compares them with the reference. A counterfactuals file here is
the mapping of arrays :func:`vcebench.core.io.load_npz` gives (docs/internals.md); each plant returns a new
mapping and the sample ids it planted, the row given left as is:

- :func:`unedited`: a share of the row's flipped CFs replaced by the unedited input (the ``input`` row's CF);
- :func:`attack`: a share of the row's flipped CFs, among the inputs the attack flips too, replaced by the
  pixel attack's CF for the same input (the ``pixel_attack`` row's): the classifier still flips, the oracle
  mostly not (a method drifting adversarial, FR unchanged);
- :func:`noised`: every CF of the row plus seeded Gaussian noise of ``sigma`` grey levels (a realism fault),
  with :func:`strength` the rule that picks ``sigma``: the smallest (by bisection) that raises a metric of the
  planted file, e.g. its FID, by a factor.

A replaced input takes the donor row's :data:`DONOR_KEYS` (image, flags, input fingerprint: the file stays one
that ``vcebench evaluate`` accepts); its other per-input arrays (steps, network calls) stay the method's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..core.io import input_fingerprint

Cfs = Mapping[str, np.ndarray]
DONOR_KEYS = ("cf", "flipped", "failed", "input_hash")
SHARE = 0.1  # of the row's flipped CFs (the plants)
FACTOR = 1.3  # the realism plant's rise of the metric (FID + 30 %)


def planted_count(flipped: np.ndarray, share: float) -> int:
    """How many inputs a plant of ``share`` of a row's flipped CFs takes: ``ceil(share * flipped)``."""
    return int(np.ceil(round(share * int(np.asarray(flipped, bool).sum()), 9)))


def _aligned(row: Cfs, donor: Cfs, what: str) -> np.ndarray:
    """Positions in ``donor`` of ``row``'s sample ids (ValueError naming ``what`` when one is missing)."""
    pos = {int(s): i for i, s in enumerate(donor["sample_id"])}
    missing = [int(s) for s in row["sample_id"] if int(s) not in pos]
    if missing:
        raise ValueError(f"the {what} row lacks {len(missing)} of the planted row's inputs "
                         f"(first: {missing[:5]})")
    return np.array([pos[int(s)] for s in row["sample_id"]], np.int64)


def replaced(row: Cfs, donor: Cfs, at: np.ndarray, what: str) -> dict[str, np.ndarray]:
    """``row`` with the inputs at positions ``at`` taken from ``donor`` (same sample ids), :data:`DONOR_KEYS`."""
    out = {k: np.array(v, copy=True) for k, v in row.items()}
    src = _aligned(row, donor, what)[at]
    for key in DONOR_KEYS:
        if key in out and key in donor:
            out[key][at] = np.asarray(donor[key])[src]
    return out


def unedited(row: Cfs, inputs: Cfs, share: float = SHARE) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the planted file, the planted sample ids): ``share`` of ``row``'s flipped CFs (:func:`planted_count`,
    the first in file order) replaced by the unedited input, ``inputs`` being the ``input`` row's file (its CF
    is the input, not flipped)."""
    flipped = np.asarray(row["flipped"], bool)
    at = np.flatnonzero(flipped)[:planted_count(flipped, share)]
    return replaced(row, inputs, at, "input"), np.asarray(row["sample_id"], np.int64)[at]


def attack(row: Cfs, attacked: Cfs, share: float = SHARE) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the planted file, the planted sample ids): ``share`` of ``row``'s flipped CFs (:func:`planted_count`),
    the first in file order whose input the attack flips too, replaced by the attack's CF (``attacked``: the
    ``pixel_attack`` row's file)."""
    flipped = np.asarray(row["flipped"], bool)
    both = flipped & np.asarray(attacked["flipped"], bool)[_aligned(row, attacked, "attack")]
    at = np.flatnonzero(both)[:planted_count(flipped, share)]
    return replaced(row, attacked, at, "attack"), np.asarray(row["sample_id"], np.int64)[at]


def noised(row: Cfs, inputs: Cfs, sigma: float, seed: int = 0) -> dict[str, np.ndarray]:
    """``row`` with every CF plus ``sigma`` x standard normal noise (seeded, in grey levels; rounded, clipped to
    uint8) and its input fingerprints recomputed against the unedited inputs (``inputs``: the ``input`` row)."""
    out = {k: np.array(v, copy=True) for k, v in row.items()}
    z = np.random.default_rng(seed).standard_normal(out["cf"].shape)
    out["cf"] = np.clip(np.rint(out["cf"].astype(np.float64) + sigma * z), 0, 255).astype(np.uint8)
    if "input_hash" in out:
        out["input_hash"] = input_fingerprint(np.asarray(inputs["cf"])[_aligned(row, inputs, "input")], out["cf"])
    return out


def strength(value_at: Callable[[float], float], factor: float = FACTOR, start: float = 1.0, steps: int = 8,
             top: float = 128.0) -> tuple[float, float, float]:
    """(sigma, value at 0, value at sigma): the rule that sets the realism plant's strength on the planted copy,
    not by hand: ``sigma`` doubled from ``start`` until ``value_at(sigma)`` reaches ``factor`` x ``value_at(0)``,
    then ``steps`` bisections; the smallest sigma found that reaches it. ValueError when ``top`` does not."""
    base = value_at(0.0)
    goal = factor * base
    lo, hi = 0.0, start
    while (v := value_at(hi)) < goal:
        lo, hi = hi, 2 * hi
        if hi > top:
            raise ValueError(f"noise of {top:g} grey levels does not raise the value {base:.4g} by x{factor:g}")
    for _ in range(steps):
        mid = (lo + hi) / 2
        m = value_at(mid)
        lo, hi, v = (mid, hi, v) if m < goal else (lo, mid, m)
    return hi, base, v
