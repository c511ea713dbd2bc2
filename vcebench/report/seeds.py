"""The seed spread of every table cell, and the CI regression tolerances derived from it.

`snakemake seeds` reruns generation and evaluation with each seed of ``seeds.seeds`` on the same trained
networks (``vcebench explain --seed``; the config's own seed is the main run). :func:`seed_table` puts
the runs of one task side by side: per method and metric the mean, standard deviation, min and max over
seeds (``results/<task>_seeds.{csv,md}``).

:func:`derive_cell_tolerances` turns the spread into the tolerances of ``vcebench report regression``, one
per cell (task x method x metric), from that cell's spread alone (tolerances pooled over every task and method
let the noisiest cells set everyone's): the difference of two runs with independent noise has standard
deviation ``sqrt(2) sd``, so a cell's tolerance is ``max(floor, drift, z sqrt(2) sd)``, where ``floor`` is
the metric's ``seeds.floors`` (one input of the n in a rate) and ``drift`` the measured difference between CPU
kinds (``vcebench.report.regression.CPU_DRIFT``: 0 for the metrics exact across kinds, a share of the value
for the others), so that the same commit on another CPU passes. The regression run uses the main seed, so a
change within the tolerance is one that a new noise draw could also have produced.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NOT_CHECKED = ("sec_per_cf", "peak_mem_mb", "sFID_std", "log_snr", "tuned")  # machine-dependent or not a metric


def seed_dirs(results: Path, task: str, seeds: list[int], main_seed: int) -> dict[int, Path]:
    """Where each seed's ``<method>/metrics.json`` lives: the main run's ``results/<task>`` for the config's
    seed, ``results/<task>/seeds/<seed>`` for the others."""
    return {s: (results / task if s == main_seed else results / task / "seeds" / str(s)) for s in seeds}


def seed_table(tables: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """``method, metric, n_seeds, mean, sd, min, max`` over the per-seed tables (``method`` + metric columns)."""
    rows = []
    frames = {s: t.set_index("method") for s, t in tables.items()}
    methods = list(dict.fromkeys(m for t in tables.values() for m in t["method"]))
    cols = list(dict.fromkeys(c for t in tables.values() for c in t.columns
                              if c not in ("method", "n") and not c.endswith(("_lo", "_hi"))))
    for m in methods:
        for c in cols:
            v = np.array([pd.to_numeric(f.loc[m, c], errors="coerce") if (m in f.index and c in f.columns)
                          else np.nan for f in frames.values()], dtype=float)
            v = v[np.isfinite(v)]
            if len(v) == 0:
                continue
            rows.append({"method": m, "metric": c, "n_seeds": len(v), "mean": v.mean(),
                         "sd": v.std(ddof=1) if len(v) > 1 else np.nan, "min": v.min(), "max": v.max()})
    return pd.DataFrame(rows, columns=["method", "metric", "n_seeds", "mean", "sd", "min", "max"])


def seed_markdown(task: str, spread: pd.DataFrame, seeds: list[int]) -> str:
    """One row per method, one column per metric: ``mean ± sd [min, max]`` over the seeds."""
    from .tables import format_value as fv
    from .tables import method_label

    metrics = list(dict.fromkeys(spread["metric"]))
    lines = [f"### {task}: spread over generation seeds {seeds}", "",
             "| Method | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
    for m in dict.fromkeys(spread["method"]):
        sub = spread[spread["method"] == m].set_index("metric")
        cells = []
        for c in metrics:
            if c not in sub.index:
                cells.append("--")
                continue
            r = sub.loc[c]
            cells.append(f"{fv(r['mean'])} ± {fv(r['sd'])} [{fv(r['min'])}, {fv(r['max'])}]")
        lines.append(f"| {method_label(m)} | " + " | ".join(cells) + " |")
    lines += ["", "mean ± sd (ddof 1) [min, max] over the seeds; each seed reruns generation and evaluation on the "
              "same trained networks (`snakemake seeds`)."]
    return "\n".join(lines) + "\n"


def derive_cell_tolerances(spreads: dict[str, pd.DataFrame], floors: dict[str, float], z: float,
                           drift: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """``{task: {method: {metric: tolerance}}}``: per cell ``max(floor, drift, z sqrt(2) sd)`` (module
    docstring) around the seeds' mean, absolute. Every row is guarded, the reference rows too (a truth row that
    stops flipping is a broken pipeline); machine-dependent columns (``NOT_CHECKED``) and cells with fewer
    than 2 seeds are not."""
    exact, rel = set(drift.get("exact", [])), float(drift["rel"])
    out: dict[str, dict[str, dict[str, float]]] = {}
    for task, df in spreads.items():
        df = df[~df["metric"].isin(NOT_CHECKED) & (df["n_seeds"] >= 2)]
        cells: dict[str, dict[str, float]] = {}
        for r in df.itertuples(index=False):
            floor = float(floors.get(r.metric, floors.get("default", 0.0)))
            moved = 0.0 if r.metric in exact else rel * abs(float(r.mean))
            sd = float(r.sd) if np.isfinite(r.sd) else 0.0
            cells.setdefault(str(r.method), {})[str(r.metric)] = float(
                f"{max(floor, moved, z * math.sqrt(2) * sd):.4g}")
        out[task] = cells
    return out


def detection_power(cells: dict[str, dict[str, dict[str, float]]], values: dict[str, pd.DataFrame],
                    methods: list[str], metrics: list[str]) -> pd.DataFrame:
    """Per metric, the smallest change that fails on the rows ``methods`` (the tolerance, as it is absolute
    per cell), over tasks and rows: min / median / max in the metric's units and relative to the reference
    value (``values``: each task's reference table)."""
    rows = []
    for metric in metrics:
        a, r = [], []
        for task, ref in values.items():
            ref = ref.set_index("method")
            for m in methods:
                tol = (cells.get(task, {}).get(m) or {}).get(metric)
                if tol is None or m not in ref.index or metric not in ref.columns:
                    continue
                a.append(tol)
                v = abs(float(ref.loc[m, metric]))
                if v > 0:
                    r.append(100.0 * tol / v)
        if a:
            rows.append({"metric": metric, "cells": len(a), "min": min(a), "median": float(np.median(a)),
                         "max": max(a), "min_pct": min(r) if r else np.nan,
                         "median_pct": float(np.median(r)) if r else np.nan, "max_pct": max(r) if r else np.nan})
    return pd.DataFrame(rows)


def detection_markdown(power: pd.DataFrame, methods: list[str]) -> str:
    """The detection-power table: the smallest change per metric that fails (over the cells of ``methods``)."""
    from .tables import format_value as fv
    from .tables import method_label

    lines = [f"Smallest change that fails, per metric, over the cells of {', '.join(method_label(m) for m in methods)} "
             "(the per-cell tolerance; min / median / max over tasks and rows):", "",
             "| metric | cells | min | median | max | min (% of value) | median (%) | max (%) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in power.itertuples(index=False):
        lines.append(f"| {r.metric} | {r.cells} | {fv(r.min)} | {fv(r.median)} | {fv(r.max)} | {fv(r.min_pct)} | "
                     f"{fv(r.median_pct)} | {fv(r.max_pct)} |")
    return "\n".join(lines) + "\n"


def cell_tolerance_yaml(derived: dict[str, Any], drift: dict[str, Any], floors: dict[str, float], z: float,
                        cells: dict[str, dict[str, dict[str, float]]]) -> str:
    """The per-cell tolerances file: a header saying how and on what it was derived, then ``derived`` (commit,
    networks, the reference's sha256, seeds, n), ``cpu_drift`` and ``cells``."""
    import yaml

    head = ["# CI regression tolerances of `vcebench report regression`, one per cell (task x method x metric),",
            "# DERIVED (not set by hand) by `vcebench report tolerances` (`make reference`) from the spread of the",
            f"# generation seeds {derived['seeds']} (`snakemake seeds`) on the networks {derived['networks']}, at",
            f"# commit {derived['commit']}: tolerance = max(floor, CPU-kind drift, {z:g} * sqrt(2) * the cell's sd)",
            "# (vcebench/report/seeds.py), absolute, in the metric's units. A cell fails when it moves past its",
            "# tolerance in its bad direction; improvements never fail. `--strict`: any move past `cpu_drift`.",
            "# Wall time and memory depend on the machine and are not checked.",
            f"# floors: {json.dumps(floors)}"]
    body = {"derived": derived, "cpu_drift": drift, "cells": cells}
    return "\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False, width=120)
