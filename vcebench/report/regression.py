"""The CI metric-regression check: a table against its reference, within each metric's tolerance."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .tables import format_value


def regression_check(current: pd.DataFrame, reference: pd.DataFrame, tolerances: dict, higher: dict[str, bool],
                     task: str) -> tuple[list[dict], list[dict]]:
    """Rows (task, method, metric, ref, now, delta, tol, status) for every toleranced metric.

    A metric regresses when it moves past its tolerance in its bad direction; moving in the good
    direction is reported as ``improved`` and does not fail. Tolerances: ``{metric: abs}`` or
    ``{metric: {abs: a, rel: r}}`` (the larger applies); ``default`` applies to the rest.
    """
    rows, failures = [], []
    ref = reference.set_index("method")
    cur = current.set_index("method")
    default = tolerances.get("default")
    for m in ref.index:
        for col, refval in ref.loc[m].items():
            tol = tolerances.get(col, default)
            if tol is None or col == "n" or pd.isna(refval) or col not in higher:
                continue
            if isinstance(tol, dict):
                tol = max(float(tol.get("abs", 0)), float(tol.get("rel", 0)) * abs(float(refval)))
            now = cur.loc[m, col] if (m in cur.index and col in cur.columns) else np.nan
            row = {"task": task, "method": m, "metric": col, "reference": float(refval),
                   "current": float(now) if pd.notna(now) else np.nan, "tolerance": float(tol)}
            if pd.isna(now):
                row["status"] = "MISSING"
            else:
                delta = float(now) - float(refval)
                row["delta"] = delta
                bad = -delta if higher[col] else delta
                row["status"] = "REGRESSED" if bad > tol else ("improved" if bad < -tol else "ok")
            rows.append(row)
            if row["status"] in ("REGRESSED", "MISSING"):
                failures.append(row)
    return rows, failures


def regression_markdown(rows: list[dict]) -> str:
    head = ("| task | method | metric | reference | current | delta | tolerance | status |\n"
            "|---|---|---|---|---|---|---|---|\n")
    fv = format_value
    body = "".join(
        f"| {r['task']} | {r['method']} | {r['metric']} | {fv(r['reference'])} | {fv(r['current'])} | "
        f"{fv(r.get('delta', float('nan')))} | {fv(r['tolerance'])} | {r['status']} |\n" for r in rows)
    return head + body
