"""The paired CI regression: every per-input quantity of a rerun against the reference's, input by input.

CI reruns the reference's own seed on the same inputs, so on one kind of CPU every input's outcome repeats, and
across kinds it moves by the measured drift only (:data:`vcebench.report.regression.CPU_DRIFT`). A seed band
(what a new noise draw could do) is the wrong yardstick for that; this module compares the per-row records
``results/<task>/<method>/samples.npz`` (written by the evaluate job; schema ``vcebench-samples/1``) with the
reference's copies (``<reference>/samples/<task>/<method>.npz``, written by ``vcebench report accept``):

- a **rate** (FR, FR_oracle, FVA: per-input values 0 / 1, NaN outside the metric's subset) fails when it loses
  more than :data:`~vcebench.report.regression.PAIRED_MAX_LOST` input net: inputs that were a success in the
  reference and are not now, minus the reverse;
- a **mean** (L1, GT_L1, MNAC, ...) fails when the t-interval (level :data:`PAIRED_LEVEL`) of the per-input
  differences, now minus reference, lies wholly past the drift band ``rel * mean |reference|`` in the
  metric's bad direction: the rerun's mean is significantly outside reference +- drift;
- **FID, KID, sFID**: a paired bootstrap over the inputs on the stored CF feature rows (``features/<NET>``) and
  the originals' rows (the task's ``fid_ref.npz``): each resample draws the inputs once, with the same counts
  for the reference and the rerun, and recomputes the metric of both with the functions of ``metrics/fid.py``
  and ``metrics/kid.py``; it fails when the percentile interval (level :data:`FEATURE_LEVEL`) of the
  difference lies past the drift band.

``strict``: a rate with any input changed, or an interval wholly outside the band on either side, is
``CHANGED``. A record here is a plain mapping of arrays (:func:`read_records`), so another reader can feed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from metrics.records import SAMPLES_FILE, SCHEMA, read_samples

RECORDS_DIR = "samples"  # <reference>/samples/<task>/<method>.npz and <reference>/samples/<task>/originals.npz
ORIGINALS_FILE = "originals.npz"
FEATURE_METRICS = ("FID", "KID", "sFID")
RATE_METRICS = ("FR", "FR_oracle", "FVA")  # per-input 0 / 1 (any other column whose reference values are too)
PAIRED_LEVEL = 0.99  # two-sided, of the means' t-interval
FEATURE_RESAMPLES = 200
# two-sided, of the feature metrics' percentile interval: 5 of the 200 resamples lie beyond each bound (at 0.99
# a bound is the single most extreme resample, and a FID + 30 % realism plant on smile FiRe passed on it;
# scripts/plant_regression.py). A deterministic rerun's differences are 0 in every resample whatever the level.
FEATURE_LEVEL = 0.95
FEATURE_SEED = 0
MAX_INPUTS = 64  # inputs per row kept in the reference
FLOAT16_ABOVE = 512  # feature dimension above which the reference stores the rows as float16

Records = Mapping[str, np.ndarray]


def read_records(path: Path) -> dict[str, np.ndarray]:
    """The arrays of one ``samples.npz`` as a flat mapping (``ids``, ``q/<COLUMN>``, ...), read and checked by
    :func:`metrics.records.read_samples` (a ``RecordError`` naming the file when it is off its schema)."""
    r = read_samples(path)
    out: dict[str, np.ndarray] = {"ids": r.ids, "schema": np.asarray(r.schema),
                                  "boot_counts_sha256": np.asarray(r.boot_counts_sha256)}
    for prefix, group in (("q", r.q), ("subset", r.subset), ("features", r.features), ("boot", r.boot)):
        out.update({f"{prefix}/{k}": v for k, v in group.items()})
    return out


def reference_records_dir(ref_dir: Path, task: str) -> Path:
    """``<ref_dir>/samples/<task>``: the reference's per-row records of ``task``."""
    return Path(ref_dir) / RECORDS_DIR / task


def has_records(ref_dir: Path, task: str) -> bool:
    """Whether the reference holds at least one row's record of ``task``."""
    d = reference_records_dir(ref_dir, task)
    return d.is_dir() and any(p.name != ORIGINALS_FILE for p in d.glob("*.npz"))


def read_run_records(results: Path, task: str, methods: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{method: record}`` of the rows of ``methods`` that have ``results/<task>/<method>/samples.npz``."""
    return {m: read_records(p) for m in methods if (p := Path(results) / task / m / SAMPLES_FILE).exists()}


def read_reference_records(ref_dir: Path, task: str) -> dict[str, dict[str, np.ndarray]]:
    """``{method: record}`` of every row the reference holds a record of."""
    d = reference_records_dir(ref_dir, task)
    return {p.stem: read_records(p) for p in sorted(d.glob("*.npz")) if p.name != ORIGINALS_FILE}


def read_originals(path: Path) -> dict[str, np.ndarray] | None:
    """``sample_id`` and ``features`` of an FID reference file (``fid_ref.npz`` or the reference's
    ``originals.npz``); None when there is none."""
    if not Path(path).exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        return {"sample_id": np.asarray(z["sample_id"], np.int64), "features": z["features"]}


def trim_records(rec: Records, max_inputs: int = MAX_INPUTS,
                 float16_above: int = FLOAT16_ABOVE) -> dict[str, np.ndarray]:
    """What the reference keeps of a row's record: the first ``max_inputs`` ids with their ``q/``,
    ``subset/`` and ``features/`` columns (features as float16 when wider than ``float16_above``); no
    bootstrap replicates."""
    keep = slice(0, min(max_inputs, len(rec["ids"])))
    out: dict[str, np.ndarray] = {"ids": np.asarray(rec["ids"], np.int64)[keep], "schema": np.array(SCHEMA),
                                  "boot_counts_sha256": np.asarray("")}  # no replicates kept: no count matrix
    for k, v in rec.items():
        if k.startswith(("q/", "subset/")):
            out[k] = np.asarray(v)[keep]
        elif k.startswith("features/"):
            f = np.asarray(v)[keep]
            out[k] = f.astype(np.float16 if f.shape[1] > float16_above else np.float32)
    return out


def trim_originals(orig: Mapping[str, np.ndarray], ids: np.ndarray, dtype: np.dtype) -> dict[str, np.ndarray]:
    """The originals' feature rows of ``ids`` (sorted), as ``dtype``."""
    pos = {int(s): i for i, s in enumerate(orig["sample_id"])}
    ids = np.unique(np.asarray(ids, np.int64))
    return {"sample_id": ids, "features": np.asarray(orig["features"])[[pos[int(i)] for i in ids]].astype(dtype)}


def _aligned(ref: Records, cur: Records, key: str) -> np.ndarray | None:
    """``cur[key]`` on the reference's ids, in their order (None when an id or the key is missing now)."""
    if key not in cur:
        return None
    pos = {int(s): i for i, s in enumerate(cur["ids"])}
    if any(int(i) not in pos for i in ref["ids"]):
        return None
    return np.asarray(cur[key])[[pos[int(i)] for i in ref["ids"]]]


def _row(task: str, method: str, metric: str, **kw) -> dict:
    return {"task": task, "method": method, "metric": metric, **kw}


def _status(lo: float, hi: float, band: float, higher: bool, strict: bool) -> str:
    """REGRESSED / CHANGED / improved / ok of an interval [lo, hi] of now - reference against +- band."""
    worse = hi < -band if higher else lo > band
    better = lo > band if higher else hi < -band
    if strict:
        return "CHANGED" if (worse or better) else "ok"
    return "REGRESSED" if worse else ("improved" if better else "ok")


def rate_check(task: str, method: str, col: str, ref: np.ndarray, cur: np.ndarray | None, higher: bool,
               max_lost: int, strict: bool = False) -> dict:
    """One rate, input by input: ``reference`` / ``current`` count the inputs that are a success (positive when
    higher is better, whatever the scale, 1 or 100; else 0; NaN, outside the subset, never is), ``delta`` the net
    change in inputs."""
    def success(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, float)
        return v > 0 if higher else v == 0

    was = success(ref)
    row = _row(task, method, col, reference=float(was.sum()), tolerance=float(0 if strict else max_lost))
    if cur is None:
        return {**row, "current": np.nan, "status": "MISSING"}
    now = success(cur)
    lost, gained = int((was & ~now).sum()), int((~was & now).sum())
    row.update(current=float(now.sum()), delta=float(gained - lost), lost=lost, gained=gained)
    if strict:
        return {**row, "status": "CHANGED" if lost or gained else "ok"}
    return {**row, "status": "REGRESSED" if lost - gained > max_lost else ("improved" if gained > lost else "ok")}


def t_interval(d: np.ndarray, level: float = PAIRED_LEVEL) -> tuple[float, float]:
    """The two-sided t-interval of the mean of ``d`` (a point when every difference is the same)."""
    from scipy import stats

    m = float(np.mean(d))
    if len(d) < 2:
        return m, m
    half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1)) * float(np.std(d, ddof=1)) / np.sqrt(len(d))
    return m - half, m + half


def mean_check(task: str, method: str, col: str, ref: np.ndarray, cur: np.ndarray | None, higher: bool,
               rel: float, strict: bool = False, level: float = PAIRED_LEVEL) -> dict | None:
    """One mean, paired over the inputs finite in both (None when the reference has no finite value):
    ``delta`` is the mean difference, ``interval`` its t-interval, ``tolerance`` the drift band."""
    ref = np.asarray(ref, float)
    if not np.isfinite(ref).any():
        return None
    band = rel * float(np.mean(np.abs(ref[np.isfinite(ref)])))
    row = _row(task, method, col, reference=float(np.nanmean(ref)), tolerance=band)
    both = np.isfinite(ref) & (np.isfinite(np.asarray(cur, float)) if cur is not None else False)
    if cur is None or not both.any():
        return {**row, "current": np.nan, "status": "MISSING"}
    cur = np.asarray(cur, float)
    d = cur[both] - ref[both]
    lo, hi = t_interval(d, level)
    return {**row, "current": float(np.nanmean(cur)), "delta": float(d.mean()), "interval": (lo, hi),
            "paired": int(both.sum()), "status": _status(lo, hi, band, higher, strict)}


def feature_values(metric: str, o: np.ndarray, c: np.ndarray, keep: np.ndarray, counts: np.ndarray,
                   sfid_seeds: list[int], ids: np.ndarray) -> np.ndarray:
    """(B,) ``metric`` of each row of ``counts`` (B, n) over the inputs ``ids`` (sorted): the originals'
    rows ``o`` (n, D) of every input against the CF rows ``c`` (n, D) of the inputs ``keep``, computed by the
    metric's own bootstrap functions (``metrics.fid.weighted_frechet``, ``metrics.kid.weighted_mmd2``,
    ``metrics.fid.SFID.bootstrap``)."""
    from metrics.bootstrap import Resamples
    from metrics.fid import SFID, FIDReference, weighted_frechet
    from metrics.kid import polynomial_kernel, weighted_mmd2

    o, c = np.asarray(o, np.float64), np.asarray(c, np.float64)[keep]
    w = counts.astype(np.float64)
    if keep.sum() < 2:
        return np.full(len(counts), np.nan)
    if metric == "FID":
        return weighted_frechet(o, w, c, w[:, keep])
    if metric == "KID":
        return weighted_mmd2(polynomial_kernel(o, o), polynomial_kernel(c, c), polynomial_kernel(o, c), w, w[:, keep])
    if metric == "sFID":
        s = SFID(None, sfid_seeds, reference=FIDReference(ids, o, "records"))
        s.ids, s.orig, s.cf = [ids], [o], {int(i): f for i, f in zip(ids[keep], c)}
        return s.bootstrap(Resamples(ids, counts))["sFID"]
    raise ValueError(f"no paired bootstrap for {metric!r} (one of {', '.join(FEATURE_METRICS)})")


def _keep(rec: Records, metric: str, ids_of: Records) -> np.ndarray | None:
    """The inputs whose CF enters ``metric``: ``subset/<metric>``, else the flipped ones (``q/FR`` = 1), on the
    ids of ``ids_of``."""
    for key in (f"subset/{metric}", "q/FR"):
        v = _aligned(ids_of, rec, key)
        if v is not None:
            return np.asarray(v, bool) if key.startswith("subset/") else np.asarray(v, float) > 0
    return None


def feature_check(task: str, method: str, metric: str, ref: Records, cur: Records | None,
                  originals: tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], higher: bool, rel: float,
                  sfid_seeds: list[int], strict: bool = False, level: float = FEATURE_LEVEL,
                  resamples: int = FEATURE_RESAMPLES) -> dict | None:
    """A feature metric by a paired bootstrap (module docstring); ``originals``: the reference's and the
    rerun's original feature rows (``sample_id``, ``features``). None when the reference record has no
    features. The rerun's rows are rounded to the reference's stored dtype first (float16 when wide)."""
    from metrics.bootstrap import resample_counts

    nets = sorted(k for k in ref if k.startswith("features/"))
    if not nets:
        return None
    net = nets[0]
    ids = np.asarray(ref["ids"], np.int64)
    counts = resample_counts(len(ids), resamples, FEATURE_SEED)
    ones = np.ones((1, len(ids)), np.int64)
    o_ref = trim_originals(originals[0], ids, ref[net].dtype)["features"]
    k_ref = _keep(ref, metric, ref)
    if k_ref is None:  # no subset and no FR: which CFs enter the metric is unknown
        return None
    point = float(feature_values(metric, o_ref, ref[net], k_ref, ones, sfid_seeds, ids)[0])
    row = _row(task, method, metric, reference=point, tolerance=rel * abs(point))
    c_cur = _aligned(ref, cur, net) if cur is not None else None
    k_cur = _keep(cur, metric, ref) if cur is not None else None
    if c_cur is None or k_cur is None:
        return {**row, "current": np.nan, "status": "MISSING"}
    c_cur = np.asarray(c_cur).astype(ref[net].dtype)
    o_cur = trim_originals(originals[1], ids, ref[net].dtype)["features"]
    now = float(feature_values(metric, o_cur, c_cur, k_cur, ones, sfid_seeds, ids)[0])
    d = (feature_values(metric, o_cur, c_cur, k_cur, counts, sfid_seeds, ids)
         - feature_values(metric, o_ref, ref[net], k_ref, counts, sfid_seeds, ids))
    d = d[np.isfinite(d)]
    if not len(d):
        return {**row, "current": now, "delta": now - point, "status": "MISSING"}
    lo, hi = (float(np.quantile(d, q)) for q in (0.5 - level / 2, 0.5 + level / 2))
    return {**row, "current": now, "delta": now - point, "interval": (lo, hi),
            "status": _status(lo, hi, rel * abs(point), higher, strict)}


def is_rate(col: str, ref: np.ndarray) -> bool:
    """A rate: a column of :data:`RATE_METRICS`, or one whose finite reference values are all 0 or 1 (or all 0
    or 100)."""
    v = np.asarray(ref, float)
    v = v[np.isfinite(v)]
    return col in RATE_METRICS or (len(v) > 0 and any(bool(np.isin(v, (0.0, top)).all()) for top in (1.0, 100.0)))


def paired_check(task: str, reference: Mapping[str, Records], current: Mapping[str, Records],
                 originals: tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]] | None,
                 higher: Mapping[str, bool], feature_metrics: Mapping[str, list[str]], rel: float, max_lost: int,
                 sfid_seeds: list[int], strict: bool = False) -> tuple[list[dict], list[dict]]:
    """Rows (task, method, metric, reference, current, delta, tolerance, status, interval) of every per-input
    quantity of every reference row: each ``q/<COL>`` with a direction in ``higher`` (a rate or a mean), and
    the metrics ``feature_metrics[method]`` (of FID, KID, sFID: the ones the reference table has) by the paired
    bootstrap. A reference row without a record now is ``MISSING``; failing rows are also returned apart."""
    rows: list[dict] = []
    for m, ref in reference.items():
        cur = current.get(m)
        for key in sorted(k for k in ref if k.startswith("q/")):
            col = key[2:]
            if col not in higher:
                continue
            now = _aligned(ref, cur, key) if cur is not None else None
            if is_rate(col, ref[key]):
                rows.append(rate_check(task, m, col, ref[key], now, higher[col], max_lost, strict))
            elif (row := mean_check(task, m, col, ref[key], now, higher[col], rel, strict)) is not None:
                rows.append(row)
        for metric in feature_metrics.get(m, []):
            if originals is not None and (row := feature_check(task, m, metric, ref, cur, originals,
                                                              higher.get(metric, False), rel, sfid_seeds,
                                                              strict)) is not None:
                rows.append(row)
    return rows, [r for r in rows if r["status"] in ("REGRESSED", "CHANGED", "MISSING")]


def covered(reference: Mapping[str, Records], feature_metrics: Mapping[str, list[str]],
            has_originals: bool) -> dict[str, set[str]]:
    """``{method: columns}`` the paired check guards (the cell check leaves them to it)."""
    out = {}
    for m, ref in reference.items():
        cols = {k[2:] for k in ref if k.startswith("q/")}
        if has_originals and any(k.startswith("features/") for k in ref):
            cols |= {c for c in feature_metrics.get(m, []) if _keep(ref, c, ref) is not None}
        out[m] = cols
    return out


def smallest_failing(rec: Records, higher: Mapping[str, bool], rel: float, max_lost: int) -> dict[str, tuple]:
    """``{column: (smallest failing change in the table's units, in % of the value, how derived)}`` of one
    reference row's record under the paired rules, exact where the rule is: a rate loses ``max_lost + 1``
    inputs (points of its subset: FVA counts the flipped inputs only); a mean moves every input by the drift
    band (one CPU kind: every input repeats, the t-interval is a point)."""
    out = {}
    for key in sorted(k for k in rec if k.startswith("q/")):
        col, v = key[2:], np.asarray(rec[key], float)
        fin = v[np.isfinite(v)]
        if col not in higher or not len(fin):
            continue
        if is_rate(col, v):
            wins = int((fin > 0).sum() if higher[col] else (fin == 0).sum())
            out[col] = (100.0 * (max_lost + 1) / len(fin), 100.0 * (max_lost + 1) / wins if wins else np.nan,
                        "rule")
        else:
            band, mean = rel * float(np.mean(np.abs(fin))), float(np.mean(fin))
            out[col] = (band, 100.0 * band / abs(mean) if mean else np.nan, "rule")
    return out


def detection_markdown(records: Mapping[str, Mapping[str, Records]], values: Mapping[str, Mapping[str, dict]],
                       feature_metrics: list[str], higher: Mapping[str, bool], rel: float, max_lost: int) -> str:
    """The paired check's smallest failing change per metric, min / median / max over the rows of ``records``
    (``{task: {method: the reference's record}}``): the rates and means by the rule (:func:`smallest_failing`),
    the feature metrics' lower bound (the drift band of the table value in ``values[task][method]``; the
    bootstrap interval's half-width comes on top). What ``detection.md`` says beside the seeds' bands."""
    cells: dict[str, list[tuple]] = {}
    for task, rows in records.items():
        for m, rec in rows.items():
            for col, cell in smallest_failing(rec, higher, rel, max_lost).items():
                cells.setdefault(col, []).append(cell)
            for col in feature_metrics:
                v = values.get(task, {}).get(m, {}).get(col)
                if v is not None and np.isfinite(v) and any(k.startswith("features/") for k in rec):
                    cells.setdefault(col, []).append((rel * abs(v), 100.0 * rel, "lower bound"))
    n = max((len(r["ids"]) for rows in records.values() for r in rows.values()), default=0)
    lines = [f"## The paired check (the default mode), n = {n} inputs per row", "",
             f"Smallest change that fails, per metric, over the reference rows' records (min / median / max; "
             f"`pct`: in % of the value). Rates: more than {max_lost} input(s) lost net fails, so "
             f"{max_lost + 1} inputs of the metric's subset (FVA: the flipped inputs) is the smallest failing "
             f"change, exactly (`rule`). Means: the paired t-interval ({100 * PAIRED_LEVEL:g} %) past the CPU-kind "
             f"drift band, {100 * rel:.3g} % of the mean: exact for a move of every input on the reference's CPU "
             f"kind (`rule`). {', '.join(FEATURE_METRICS)}: the paired bootstrap interval "
             f"({100 * FEATURE_LEVEL:g} %, {FEATURE_RESAMPLES} resamples) past the same band: the band is a "
             "`lower bound`, the interval's half-width comes on top (scripts/plant_regression.py measures "
             "planted faults end to end).", "",
             "| metric | rows | min | median | max | min_pct | median_pct | max_pct | derived |",
             "|---|---|---|---|---|---|---|---|---|"]
    for col in sorted(cells, key=lambda c: (c not in RATE_METRICS, c not in FEATURE_METRICS, c)):
        a = np.array([c[0] for c in cells[col]], float)
        p = np.array([c[1] for c in cells[col]], float)
        p = p[np.isfinite(p)]
        stats = [_fmt(f(a)) for f in (np.min, np.median, np.max)]
        stats += [_fmt(f(p)) if len(p) else "--" for f in (np.min, np.median, np.max)]
        lines.append(f"| {col} | {len(a)} | " + " | ".join(stats) + f" | {cells[col][0][2]} |")
    return "\n".join(lines) + "\n"


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) >= 1e-2 or v == 0 else f"{v:.2e}"
