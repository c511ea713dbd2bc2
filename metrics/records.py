"""Per-input records of one evaluated row: ``results/<task>/<method>/samples.npz`` beside its metrics.json.

The harness's "log samples" (cf. lm-evaluation-harness ``--log_samples``): what each explained input contributed
to the row's columns, and the row's bootstrap replicates, so that two rows of a table can be compared input by
input (paired tests: :mod:`vcebench.report.pairs`). Schema ``vcebench-samples/1`` (docs/internals.md,
"samples.npz"):

- ``ids``: int64 (n,), sorted: the explained sample ids;
- ``schema``: 0-d str, ``"vcebench-samples/1"``;
- ``q/<COLUMN>``: float64 (n,), the per-input value whose mean is the column (the percentage columns FR,
  FR_oracle, FVA: 0 / 1, the column is 100 x the mean); NaN for an input outside the column's subset;
- ``subset/<COLUMN>``: bool (n,), the inputs in the column's subset (written when it is not every input);
- ``features/<NET>``: float32 (n, D), the FID feature rows of the counterfactuals (FID, KID, sFID use them); NaN
  rows for inputs outside FID's subset (the successful CFs);
- ``boot/<COLUMN>``: float64 (B,), the column's value in each bootstrap resample (every column that has a
  bootstrap, means and FID alike); replicate i is row i of the count matrix (``metrics.bootstrap.Resamples``),
  the feature metrics use its first ``feature_resamples`` rows;
- ``boot_counts_sha256``: 0-d str, :func:`counts_sha256` of that count matrix and ``ids`` (two rows with the same
  digest were resampled with the same draws: their replicates are paired).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .base import Metric, MetricError, per_sample
from .bootstrap import Resamples

SCHEMA = "vcebench-samples/1"
SAMPLES_FILE = "samples.npz"


class RecordError(MetricError):
    """A samples.npz that does not follow its schema (one line naming the file and the key)."""


@dataclass
class SampleRecord:
    """One row's per-input record (the arrays of ``samples.npz``, keyed by column without their prefix)."""

    ids: np.ndarray
    q: dict[str, np.ndarray] = field(default_factory=dict)
    subset: dict[str, np.ndarray] = field(default_factory=dict)
    features: dict[str, np.ndarray] = field(default_factory=dict)
    boot: dict[str, np.ndarray] = field(default_factory=dict)
    boot_counts_sha256: str = ""
    schema: str = SCHEMA

    def in_subset(self, column: str) -> np.ndarray:
        """bool (n,): the inputs in ``column``'s subset (its ``subset/`` mask, else every input)."""
        return self.subset.get(column, np.ones(len(self.ids), bool))


def counts_sha256(resamples: Resamples) -> str:
    """sha256 (hex) of the count matrix (int64, little-endian, C order) followed by the ids (int64)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(resamples.counts, "<i8").tobytes())
    h.update(np.ascontiguousarray(resamples.ids, "<i8").tobytes())
    return h.hexdigest()


def _spread(ids: np.ndarray, at: np.ndarray, values: np.ndarray, fill: float = np.nan) -> np.ndarray:
    """``values`` (rows of ``at``, a subset of ``ids``) placed on the rows of ``ids``, ``fill`` elsewhere."""
    out = np.full((len(ids),) + values.shape[1:], fill, np.float64)
    cols = np.searchsorted(ids, at)
    if len(at) and (cols.max() >= len(ids) or (ids[np.minimum(cols, len(ids) - 1)] != at).any()):
        raise RecordError("samples: a metric holds sample ids that are not among the explained inputs")
    out[cols] = values
    return out


def build_record(metrics: Sequence[Metric], ids: Sequence[int], resamples: Resamples | None,
                 boot: Mapping[str, np.ndarray], subsets: Mapping[str, str],
                 skipped: Sequence[str] = ()) -> SampleRecord:
    """The record of the ``metrics`` (after compute) over the explained ``ids``: their per-input values
    (:func:`metrics.base.per_sample`), FID's counterfactual feature rows, the replicates ``boot`` (column ->
    (B,)) drawn with ``resamples`` (None: no bootstrap, no digest); ``subsets``: column -> subset name
    (metrics.json ``subsets``); the ``skipped`` metrics are left out."""
    ids = np.unique(np.asarray(ids, np.int64))
    rec = SampleRecord(ids=ids, boot={k: np.asarray(v, np.float64) for k, v in boot.items()},
                       boot_counts_sha256="" if resamples is None else counts_sha256(resamples))
    for m in metrics:
        if m.name in skipped:
            continue
        for col, s in per_sample(m).items():
            at, v = s.arrays()
            rec.q[col] = _spread(ids, at, v)
            mask = np.isin(ids, at)
            if subsets.get(col, "all") != "all" or not mask.all():
                rec.subset[col] = mask
        if hasattr(m, "cf_features") and not rec.features:
            name, at, rows = m.cf_features()
            if len(at):
                rec.features[name] = _spread(ids, at, rows).astype(np.float32)
    return rec


def write_samples(path: str | os.PathLike, record: SampleRecord) -> None:
    """Write ``record`` to ``path`` (atomic, compressed npz; schema in this module's docstring)."""
    from vcebench.core.io import save_npz

    arrays: dict[str, np.ndarray] = {"ids": np.asarray(record.ids, np.int64), "schema": np.asarray(SCHEMA),
                                     "boot_counts_sha256": np.asarray(record.boot_counts_sha256)}
    for prefix, group, dtype in (("q", record.q, np.float64), ("subset", record.subset, bool),
                                 ("features", record.features, np.float32), ("boot", record.boot, np.float64)):
        arrays.update({f"{prefix}/{k}": np.asarray(v, dtype) for k, v in group.items()})
    _check(arrays, str(path))
    save_npz(path, **arrays)


def read_samples(path: str | os.PathLike) -> SampleRecord:
    """The record of ``samples.npz`` at ``path``, checked against the schema (:class:`RecordError`)."""
    from vcebench.core.io import load_npz

    if not os.path.exists(path):
        raise RecordError(f"{path}: no such samples.npz (written by `vcebench evaluate` beside metrics.json)")
    z = load_npz(path)
    _check(z, str(path))
    groups: dict[str, dict[str, np.ndarray]] = {"q": {}, "subset": {}, "features": {}, "boot": {}}
    for k, v in z.items():
        if "/" in k:
            groups[k.split("/", 1)[0]][k.split("/", 1)[1]] = v
    return SampleRecord(ids=z["ids"], q=groups["q"], subset=groups["subset"], features=groups["features"],
                        boot=groups["boot"], boot_counts_sha256=str(z["boot_counts_sha256"]), schema=str(z["schema"]))


def _check(z: Mapping[str, np.ndarray], where: str) -> None:
    """Every key and shape of the schema (a RecordError naming the first that is off)."""
    for k in ("ids", "schema", "boot_counts_sha256"):
        if k not in z:
            raise RecordError(f"{where}: no `{k}` (schema {SCHEMA})")
    if str(z["schema"]) != SCHEMA:
        raise RecordError(f"{where}: schema {str(z['schema'])!r}, this reader reads {SCHEMA!r}")
    ids = z["ids"]
    if ids.dtype != np.int64 or ids.ndim != 1 or (np.diff(ids) <= 0).any():
        raise RecordError(f"{where}: `ids` must be sorted unique int64 (n,), got {ids.dtype} {ids.shape}")
    n = len(ids)
    for k, v in z.items():
        prefix = k.split("/", 1)[0] if "/" in k else None
        if prefix is None:
            if k not in ("ids", "schema", "boot_counts_sha256"):
                raise RecordError(f"{where}: unknown key `{k}` (schema {SCHEMA})")
            continue
        want = {"q": ((n,), "f"), "subset": ((n,), "b"), "boot": (None, "f"), "features": (None, "f")}.get(prefix)
        if want is None:
            raise RecordError(f"{where}: unknown key `{k}` (prefixes: q/, subset/, features/, boot/)")
        shape, kind = want
        bad_shape = (v.shape != shape) if shape else (v.ndim != (2 if prefix == "features" else 1)
                                                     or (prefix == "features" and v.shape[0] != n))
        if v.dtype.kind != kind or bad_shape:
            raise RecordError(f"{where}: `{k}` is {v.dtype} {v.shape}, expected {'bool' if kind == 'b' else 'float'} "
                              f"{shape or ('(n, D)' if prefix == 'features' else '(B,)')} with n = {n}")
