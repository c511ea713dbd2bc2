"""The seed spread of every table cell, and the CI regression tolerances derived from it.

`snakemake seeds` reruns generation and evaluation with each seed of ``seeds.seeds`` on the same trained
networks (``vcebench explain --seed``; the config's own seed is the main run). :func:`seed_table` puts
the runs of one task side by side: per method and metric the mean, standard deviation, min and max over
seeds (``results/<task>_seeds.{csv,md}``).

:func:`derive_tolerances` turns the spread into the tolerances of ``vcebench report regression``: the
difference of two runs with independent noise has standard deviation ``sqrt(2) sd``; the tolerance of a
metric is ``z sqrt(2)`` times its pooled standard deviation over every task and method (root mean of the
per-cell variances), as an absolute number, or relative to the value (pooled coefficient of variation)
for the scale-dependent columns (FID, sFID, FLOPs, NFE); never below the metric's floor
(``seeds.floors``: e.g. one input of the quick preset's 16 in a rate). The regression run uses the
main seed, so a change within the tolerance is one that a new noise draw could also have produced.
KID is absolute: an unbiased estimate whose value sits at or below zero for a good method, where a
coefficient of variation is meaningless.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

RELATIVE = ("FID", "sFID", "tflops_per_cf", "nfe_per_cf")
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


def derive_tolerances(spreads: list[pd.DataFrame], floors: dict[str, float], z: float = 3.0,
                      baselines: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``{metric: abs}`` or ``{metric: {rel, abs}}`` from the seed spreads of several tasks (module docstring;
    ``baselines``: rows left out, default the reference rows, ``tasks.is_baseline``)."""
    from ..config.tasks import is_baseline

    df = pd.concat(spreads, ignore_index=True)
    base = df["method"].isin(baselines) if baselines is not None else df["method"].map(is_baseline).astype(bool)
    df = df[~base & ~df["metric"].isin(NOT_CHECKED) & (df["n_seeds"] >= 2)]
    out: dict[str, Any] = {}
    for metric, g in df.groupby("metric", sort=False):
        floor = float(floors.get(metric, floors.get("default", 0.0)))
        if metric in RELATIVE:
            cv = (g["sd"] / g["mean"].abs().replace(0, np.nan)).dropna()
            rel = z * math.sqrt(2) * float(np.sqrt((cv ** 2).mean())) if len(cv) else 0.0
            out[metric] = {"rel": round(rel, 4), "abs": floor}
        else:
            sd = float(np.sqrt((g["sd"] ** 2).mean()))
            out[metric] = round(max(floor, z * math.sqrt(2) * sd), 4)
    return out


def tolerance_yaml(tol: dict[str, Any], seeds: list[int], tasks: list[str], z: float, floors: dict[str, float],
                   spreads: dict[str, pd.DataFrame]) -> str:
    """The tolerances file with a header saying how it was derived and the pooled spread behind each number."""
    import yaml

    head = ["# CI regression tolerances of `vcebench report regression`, DERIVED (not set by hand) by",
            "# `vcebench report tolerances` from the seed spread of `snakemake seeds` (vcebench/report/seeds.py):",
            f"#   seeds {seeds}, tasks {tasks}; tolerance = max(floor, {z:g} * sqrt(2) * pooled sd over tasks and",
            "#   methods), relative (pooled coefficient of variation) for FID, sFID, TFLOPs, NFE (KID absolute).",
            "# A metric fails when it moves past its tolerance in its bad direction; improvements never fail.",
            "# Wall time and memory depend on the machine and are not checked.",
            f"# floors: {json.dumps(floors)}"]
    return "\n".join(head) + "\n" + yaml.safe_dump(tol, sort_keys=False)
