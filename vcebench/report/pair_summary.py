"""The verdict over tasks: per method wins / ties / losses of the paired tests, and mean ranks with the groups
no test separates (a critical-difference diagram).

Reads the tasks' ``<task>_pairs.csv`` (:mod:`.pairs`). A win is a pair the corrected test separates in the
method's favour, a loss one it separates against it, a tie one it does not. The mean ranks follow Demšar (2006,
"Statistical comparisons of classifiers over multiple data sets", JMLR 7, section 3.2.2): each block (one task and
one column) ranks its methods by point value (1 = best, ties share the mean rank); the critical difference of the
Nemenyi test is ``q_alpha sqrt(k (k + 1) / (6 N))`` over N blocks and k methods (``q_alpha``: the studentized
range quantile / sqrt 2), and methods whose mean ranks lie within it form a group no test separates. The blocks of
one task share its inputs and are not independent: the diagram is descriptive, the per-task tests are the verdict.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .pairs import ALPHA
from .tables import method_label


def read_pairs(out_dir: Path, tasks: list[str]) -> dict[str, pd.DataFrame]:
    """``{task: <out_dir>/<task>_pairs.csv}`` (a FileNotFoundError naming the one missing)."""
    out = {}
    for t in tasks:
        p = Path(out_dir) / f"{t}_pairs.csv"
        if not p.exists():
            raise FileNotFoundError(f"{p}: no paired comparisons of {t}; write them with `vcebench report pairs "
                                    f"--task {t}`")
        out[t] = pd.read_csv(p, keep_default_na=True).fillna({"better": ""})
    return out


def wins_ties_losses(pairs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (method, column): wins, ties, losses summed over the tasks."""
    counts: dict[tuple[str, str], list[int]] = {}
    for df in pairs.values():
        for r in df.itertuples():
            for m, other in ((r.a, r.b), (r.b, r.a)):
                c = counts.setdefault((m, r.column), [0, 0, 0])
                c[0 if r.better == m else 2 if r.better == other else 1] += 1
    rows = [{"method": m, "column": c, "wins": w, "ties": t, "losses": ls} for (m, c), (w, t, ls) in counts.items()]
    return pd.DataFrame(rows, columns=["method", "column", "wins", "ties", "losses"])


def block_ranks(pairs: dict[str, pd.DataFrame], higher: dict[str, bool]) -> pd.DataFrame:
    """Ranks (1 = best, ties averaged) per block (task, column) of the methods present in every block: one column
    per method, one row per block (blocks lacking one of them are left out)."""
    blocks = {}
    for task, df in pairs.items():
        for col, fam in df.groupby("column", sort=False):
            if higher.get(col) is None:
                continue
            v = pd.concat([pd.Series(fam["value_a"].values, fam["a"]), pd.Series(fam["value_b"].values, fam["b"])])
            v = v[~v.index.duplicated()]
            blocks[(task, col)] = v.rank(ascending=not higher[col], method="average")
    if not blocks:
        return pd.DataFrame()
    table = pd.DataFrame(blocks).T
    common = [m for m in table.columns if table[m].notna().all()] if len(table) else []
    keep = table.dropna(subset=common) if common else table.iloc[0:0]
    return keep[common]


def critical_difference(k: int, n_blocks: int, alpha: float = ALPHA) -> float:
    """Nemenyi's critical difference of mean ranks for k methods over n_blocks blocks (Demšar 2006, eq. 5)."""
    from scipy.stats import studentized_range

    if k < 2 or n_blocks < 1:
        return float("nan")
    q = studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q * math.sqrt(k * (k + 1) / (6 * n_blocks)))


def groups(mean_ranks: pd.Series, cd: float) -> list[list[str]]:
    """The maximal runs of methods (sorted by mean rank) whose mean ranks lie within ``cd``: the groups no test
    separates (two or more methods each)."""
    r = mean_ranks.sort_values()
    names, vals = list(r.index), r.to_numpy()
    out: list[list[str]] = []
    last_end = -1
    for i in range(len(vals)):
        j = i
        while j + 1 < len(vals) and vals[j + 1] - vals[i] < cd:
            j += 1
        if j > i and j > last_end:
            out.append(names[i:j + 1])
            last_end = j
    return out


def summary_markdown(wtl: pd.DataFrame, mean_ranks: pd.Series, cd: float, grouped: list[list[str]],
                     tasks: list[str], n_blocks: int) -> str:
    """``summary_pairs.md``: wins / ties / losses per method and column, then the mean ranks and their groups."""
    lines = ["# Paired comparisons over tasks", "",
             f"Tasks: {', '.join(tasks)}. Each cell: wins / ties / losses of the method's paired tests over the tasks "
             f"(a pair separated at {ALPHA} family-wise per task and column, Holm; docs/protocol.md, \"Paired "
             "comparisons\").", ""]
    if wtl.empty:
        return "\n".join(lines + ["No pairs: no task has two ranked rows with per-input records."]) + "\n"
    cols = list(dict.fromkeys(wtl["column"]))
    table = wtl.set_index(["method", "column"])
    lines += ["| Method | " + " | ".join(cols) + " | total |", "|---" * (len(cols) + 2) + "|"]
    for m in dict.fromkeys(wtl["method"]):
        cells, tot = [], np.zeros(3, int)
        for c in cols:
            if (m, c) in table.index:
                w = table.loc[(m, c), ["wins", "ties", "losses"]].to_numpy(int)
                tot += w
                cells.append("/".join(map(str, w)))
            else:
                cells.append("--")
        lines.append(f"| {method_label(m)} | " + " | ".join(cells) + f" | {'/'.join(map(str, tot))} |")
    lines += ["", "## Mean ranks (`summary_cd.png`)", ""]
    if mean_ranks.empty:
        return "\n".join(lines + ["No method is in every block: no mean ranks."]) + "\n"
    lines.append(f"Over {n_blocks} blocks (task x ranked column) of the {len(mean_ranks)} methods present in all; "
                 f"Nemenyi critical difference {cd:.2f} (Demšar 2006); descriptive, the blocks of a task share its "
                 "inputs.")
    lines.append("")
    lines += [f"- {method_label(m)}: {r:.2f}" for m, r in mean_ranks.sort_values().items()]
    lines.append("")
    lines.append("Groups no test separates: " + ("; ".join(", ".join(method_label(m) for m in g) for g in grouped)
                                                  if grouped else "none (every mean rank differs by more than CD)."))
    return "\n".join(lines) + "\n"


def summarize(out_dir: Path, tasks: list[str], higher: dict[str, bool]) -> str:
    """Writes ``<out_dir>/summary_pairs.md`` and ``summary_cd.png`` from the tasks' pairs; returns the markdown."""
    from .figures import cd_figure
    from .tables import write_text

    pairs = read_pairs(out_dir, tasks)
    ranks = block_ranks(pairs, higher)
    mean = ranks.mean() if not ranks.empty else pd.Series(dtype=float)
    cd = critical_difference(len(mean), len(ranks))
    grouped = groups(mean, cd) if len(mean) else []
    md = summary_markdown(wins_ties_losses(pairs), mean, cd, grouped, tasks, len(ranks))
    write_text(Path(out_dir) / "summary_pairs.md", md)
    cd_figure(Path(out_dir) / "summary_cd.png", mean, cd, grouped, len(ranks))
    return md
