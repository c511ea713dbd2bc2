"""How much a task's verdict depends on the networks: the same table from two network sets (the same recipes,
other seeds; ``networks/ref1`` and ``networks/ref2``) compared cell by cell and rank by rank.

A cell's change is *inside* when the second set's value lies in the first set's 95 % bootstrap interval
(the interval covers the sampling of inputs, not the networks: a change outside it is the networks' doing).
Per metric, the methods' order is compared too (Kendall's tau over the ranked rows, and whether the best
method is the same): a conclusion that does not survive the second set is not a conclusion. Where both sets
have their paired tests (``<task>_pairs.csv``, :mod:`.pairs`), the verdict itself is compared
(:func:`surviving_pairs`): each pair the first set's tests separate is separated the same way on the second
(survives), the other way (reversed), or not at all (lost); pairs only the second set separates are new.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

SKIP = ("n", "sec_per_cf", "tflops_per_cf", "nfe_per_cf", "peak_mem_mb", "mean_steps", "log_snr", "tuned")


def metric_columns(a: pd.DataFrame) -> list[str]:
    """Metrics with an interval (``<m>_lo`` / ``<m>_hi``), costs aside."""
    return [c for c in a.columns if f"{c}_lo" in a.columns and f"{c}_hi" in a.columns and c not in SKIP]


def kendall_tau(x: list[float], y: list[float]) -> float | None:
    """Kendall's tau-a of two paired lists (ties count as neither), None below 2 pairs."""
    n, s = len(x), 0
    if n < 2:
        return None
    for i in range(n):
        for j in range(i + 1, n):
            if x[i] != x[j] and y[i] != y[j]:
                s += int(math.copysign(1, x[i] - x[j]) * math.copysign(1, y[i] - y[j]))
    return s / (n * (n - 1) / 2)


def compare(a: pd.DataFrame, b: pd.DataFrame, higher_is_better: dict[str, bool],
            ranked: list[str] | None = None) -> dict[str, Any]:
    """Cells (method x metric: a, its interval, b, inside) and per-metric rank agreement over ``ranked``
    methods (default: every method in both)."""
    a, b = a.set_index("method"), b.set_index("method")
    methods = [m for m in a.index if m in b.index]
    ranked = [m for m in (ranked or methods) if m in methods]
    cells, ranks = [], {}
    for m in metric_columns(a.reset_index()):
        if m not in b.columns:
            continue
        for meth in methods:
            va, vb, lo, hi = (a.at[meth, m], b.at[meth, m], a.at[meth, f"{m}_lo"], a.at[meth, f"{m}_hi"])
            if pd.isna(va) or pd.isna(vb):
                continue
            cells.append({"method": meth, "metric": m, "a": float(va), "a_lo": float(lo), "a_hi": float(hi),
                          "b": float(vb), "inside": bool(lo <= vb <= hi) if not (pd.isna(lo) or pd.isna(hi)) else None})
        pairs = [(meth, float(a.at[meth, m]), float(b.at[meth, m])) for meth in ranked
                 if not (pd.isna(a.at[meth, m]) or pd.isna(b.at[meth, m]))]
        if len(pairs) >= 2:
            sign = 1 if higher_is_better.get(m, False) else -1
            best_a = max(pairs, key=lambda p: sign * p[1])[0]
            best_b = max(pairs, key=lambda p: sign * p[2])[0]
            ranks[m] = {"kendall_tau": kendall_tau([p[1] for p in pairs], [p[2] for p in pairs]),
                        "best_a": best_a, "best_b": best_b, "same_best": best_a == best_b, "n_methods": len(pairs)}
    inside = [c["inside"] for c in cells if c["inside"] is not None]
    return {"cells": cells, "ranks": ranks, "n_cells": len(inside), "n_inside": int(sum(inside))}


def surviving_pairs(a: pd.DataFrame, b: pd.DataFrame) -> list[dict[str, Any]]:
    """Per column of two sets' paired tests (``<task>_pairs.csv`` frames, :data:`.pairs.PAIR_COLUMNS`), the pairs
    of ranked rows separated on ``a`` that ``b`` separates the same way (``survived``), the other way
    (``reversed``), or not (``lost``, each as ``"winner>loser"``), and the pairs separated on ``b`` only
    (``new``). Pairs present in one set only are left out."""
    key = ["column", "a", "b"]
    m = a[key + ["separated", "better"]].merge(b[key + ["separated", "better"]], on=key, suffixes=("_a", "_b"))
    m = m.fillna({"better_a": "", "better_b": ""}).astype({"separated_a": bool, "separated_b": bool})
    out = []
    for col, fam in m.groupby("column", sort=False):
        sep = fam[fam["separated_a"]]
        same_way = sep["better_a"] == sep["better_b"]
        lost = sep[~sep["separated_b"]]
        out.append({"column": col, "pairs": len(fam), "separated_a": len(sep),
                    "survived": int((sep["separated_b"] & same_way).sum()),
                    "reversed": int((sep["separated_b"] & ~same_way).sum()),
                    "lost": [f"{r.better_a}>{r.b if r.better_a == r.a else r.a}" for r in lost.itertuples()],
                    "new": int((fam["separated_b"] & ~fam["separated_a"]).sum())})
    return out


def surviving_markdown(rows: list[dict[str, Any]], name_a: str, name_b: str) -> list[str]:
    """The lines of :func:`surviving_pairs`' table (none without rows)."""
    if not rows:
        return []
    lines = ["", f"Paired verdicts (`<task>_pairs.csv` of both sets; Holm per column): the pairs `{name_a}` "
             f"separates, how many `{name_b}` separates the same way, the other way, and which it does not.", "",
             f"| column | pairs | separated ({name_a}) | survive | reversed | lost | new ({name_b}) |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        lost = ", ".join(r["lost"]) if r["lost"] else ""
        lines.append(f"| {r['column']} | {r['pairs']} | {r['separated_a']} | {r['survived']} | {r['reversed']} | "
                     f"{lost} | {r['new']} |")
    return lines


def to_markdown(task: str, result: dict[str, Any], name_a: str, name_b: str) -> str:
    """Per method: the cells outside the first set's interval; per metric: the rank agreement."""
    lines = [f"# {task}: network set `{name_a}` vs `{name_b}`", "",
             f"{result['n_inside']} of {result['n_cells']} cells of `{name_b}` lie inside `{name_a}`'s 95 % "
             f"interval.", "", "| metric | Kendall tau | best (" + name_a + ") | best (" + name_b + ") | same best |",
             "|---|---:|---|---|---|"]
    for m, r in result["ranks"].items():
        tau = "" if r["kendall_tau"] is None else f"{r['kendall_tau']:.2f}"
        lines.append(f"| {m} | {tau} | {r['best_a']} | {r['best_b']} | {'yes' if r['same_best'] else '**no**'} |")
    lines += surviving_markdown(result.get("pairs") or [], name_a, name_b)
    out = [c for c in result["cells"] if c["inside"] is False]
    lines += ["", f"Cells outside the interval ({len(out)}):", "", "| method | metric | " + name_a + " [95 % CI] | "
              + name_b + " |", "|---|---|---|---:|"]
    lines += [f"| {c['method']} | {c['metric']} | {c['a']:.4g} [{c['a_lo']:.4g}, {c['a_hi']:.4g}] | {c['b']:.4g} |"
              for c in out]
    return "\n".join(lines) + "\n"
