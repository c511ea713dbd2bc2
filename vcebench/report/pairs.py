"""Paired comparisons of a task's ranked rows, and the table marks they decide.

Every row of a task's table is explained on the same inputs and resampled with the same count matrix
(``metrics.bootstrap.Resamples``, recorded per row in ``samples.npz``: :mod:`metrics.records`), so two rows are
paired: input i is the same input in both, and bootstrap replicate b is the same draw. For each pair of ranked
rows (``tasks.is_baseline`` rows are reference rows, never ranked: the rule of :mod:`.tables`) and each ranked
column (docs/protocol.md, "Paired comparisons"):

- the difference of the point values and its paired percentile bootstrap interval (the (2.5, 97.5) percentiles
  of the replicate differences ``boot_a[b] - boot_b[b]``; Efron & Tibshirani 1993, ch. 13 and 16);
- the two-sided p-value of "no difference" from the bootstrap standard error of the difference (a Wald test:
  ``z = diff / sd(d)`` over the B finite replicate differences d, ``p = 2 (1 - Phi(|z|))``; Efron & Tibshirani
  1993, ch. 16). Not the share of replicates on one side: that share is at least 1 / (B + 1), so with B = 1,000
  (200 for FID / sFID / KID) and Holm over 28 pairs no difference could ever pass 0.05, however large;
- for a 0 / 1 column over the same inputs in both rows (FR, FR_oracle; FVA when both rows keep the same
  inputs), the exact McNemar test: a binomial test of the discordant inputs (McNemar 1947; ``scipy.stats.binomtest``),
  which then decides the pair (it is exact at any n, the bootstrap is not);
- Holm's step-down correction (Holm 1979) over the family of one task and one column: its k (k - 1) / 2 pairs.

Marks (:func:`marks`): **bold** where a row is better than every other ranked row at the corrected 0.05 level;
otherwise the best point value and every row that no test separates from it are underlined ("not separable from
the best"). Without a record for a ranked row, its table has no marks, never marks from point values.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from metrics.bootstrap import percentile_interval
from metrics.records import SAMPLES_FILE, RecordError, SampleRecord, read_samples

from ..core.errors import UserError

ALPHA = 0.05  # family-wise per task and column (Holm)
LEVEL = 0.95  # of the paired difference's interval
PAIR_COLUMNS = ["column", "a", "b", "value_a", "value_b", "diff", "diff_lo", "diff_hi", "p_bootstrap",
                "p_mcnemar", "discordant", "test", "p", "p_holm", "separated", "better"]


class PairingError(UserError, ValueError):
    """Rows whose records were not drawn on the same inputs with the same count matrix (not paired)."""


@dataclass
class MarkNote:
    """What the marks of one table rest on: the columns marked, the unmarked ones with why, the ranked rows
    without a record."""

    marked: list[str] = field(default_factory=list)
    unmarked: dict[str, str] = field(default_factory=dict)
    no_record: list[str] = field(default_factory=list)


def tested_columns(df: pd.DataFrame, higher: dict[str, bool]) -> list[str]:
    """The ranked metric columns of the table (a direction, no cost column: a cost is measured once, not
    sampled over the inputs, and carries no test and no mark)."""
    from .. import registry

    return [c for c in df.columns if higher.get(c) is not None and c not in registry.COST_COLUMNS]


def ranked_rows(df: pd.DataFrame, unranked: Iterable[str] = ()) -> list[str]:
    """The table's ranked rows (every row but the reference rows, ``tasks.is_baseline``, and ``unranked``: rows
    that regenerate rather than edit, ``validity.regenerating_rows``), in table order."""
    from ..config.tasks import is_baseline

    skip = set(unranked)
    return [m for m in df["method"] if not is_baseline(m) and m not in skip]


def load_records(results: Path, task: str, methods: list[str]) -> dict[str, SampleRecord]:
    """``{method: record}`` of the rows that have ``results/<task>/<method>/samples.npz``."""
    return {m: read_samples(p) for m in methods if (p := Path(results) / task / m / SAMPLES_FILE).exists()}


def check_paired(records: dict[str, SampleRecord]) -> None:
    """The records must share their ids and the digest of their count matrix (a clear PairingError if not)."""
    if not records:
        return
    first, ref = next(iter(records.items()))
    for m, r in records.items():
        if not r.boot_counts_sha256:
            raise PairingError(f"{m}: its samples.npz has no bootstrap (evaluated with resamples = 0): no paired "
                               "comparison; evaluate it with the task's bootstrap settings")
        if len(r.ids) != len(ref.ids) or (r.ids != ref.ids).any():
            raise PairingError(f"{m} and {first} were evaluated on different inputs ({len(r.ids)} vs "
                               f"{len(ref.ids)} ids, or other ids): their rows are not paired; evaluate both on the "
                               "task's n_eval inputs")
        if r.boot_counts_sha256 != ref.boot_counts_sha256:
            raise PairingError(f"{m} and {first} were resampled with different count matrices (boot_counts_sha256 "
                               f"{r.boot_counts_sha256[:12]} vs {ref.boot_counts_sha256[:12]}): not paired; "
                               "evaluate both with the same metrics.bootstrap settings (resamples, seed)")


def bootstrap_p(diff: float, d: np.ndarray) -> float:
    """Two-sided p-value of "no difference" for the point difference ``diff`` with the bootstrap standard error of
    the replicate differences ``d`` (Wald: ``2 (1 - Phi(|diff| / sd(d)))``; NaN: fewer than 2 finite replicates;
    a zero spread gives 0 for a nonzero difference, 1 for none)."""
    from scipy.stats import norm

    d = np.asarray(d, np.float64)
    d = d[np.isfinite(d)]
    if len(d) < 2 or not np.isfinite(diff):
        return float("nan")
    se = float(d.std(ddof=1))
    if se == 0:
        return 1.0 if diff == 0 else 0.0
    return float(2 * norm.sf(abs(diff) / se))


def mcnemar(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """Exact McNemar test of paired 0 / 1 outcomes: (two-sided p, number of discordant inputs)."""
    from scipy.stats import binomtest

    n10, n01 = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    if n10 + n01 == 0:
        return 1.0, 0
    return float(binomtest(n10, n10 + n01, 0.5).pvalue), n10 + n01


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values over the finite entries of ``p`` (NaN stays NaN, outside the family)."""
    p = np.asarray(p, np.float64)
    out = np.full(len(p), np.nan)
    idx = np.nonzero(np.isfinite(p))[0]
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def _binary_pair(ra: SampleRecord, rb: SampleRecord, col: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The two rows' 0 / 1 values of ``col`` when both keep the same inputs (McNemar's pairs), else None."""
    if col not in ra.q or col not in rb.q:
        return None
    keep = ra.in_subset(col)
    if (keep != rb.in_subset(col)).any() or not keep.any():
        return None
    a, b = ra.q[col][keep], rb.q[col][keep]
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        return None
    return a, b


def _pair(col: str, a: str, b: str, va: float, vb: float, ra: SampleRecord, rb: SampleRecord) -> dict:
    """One comparison (before Holm): difference, paired interval, bootstrap and McNemar p, the deciding test."""
    row = {"column": col, "a": a, "b": b, "value_a": va, "value_b": vb, "diff": va - vb, "diff_lo": np.nan,
           "diff_hi": np.nan, "p_bootstrap": np.nan, "p_mcnemar": np.nan, "discordant": np.nan, "test": "none"}
    if col in ra.boot and col in rb.boot:
        if len(ra.boot[col]) != len(rb.boot[col]):
            raise PairingError(f"{col}: {a} has {len(ra.boot[col])} replicates, {b} {len(rb.boot[col])}: not paired")
        d = ra.boot[col] - rb.boot[col]
        iv = percentile_interval(d, LEVEL)
        if iv is not None:
            row["diff_lo"], row["diff_hi"] = iv
        row["p_bootstrap"] = bootstrap_p(va - vb, d)
        row["test"] = "bootstrap"
    binary = _binary_pair(ra, rb, col)
    if binary is not None:
        row["p_mcnemar"], row["discordant"] = mcnemar(*binary)
        row["test"] = "mcnemar"
    row["p"] = row["p_mcnemar"] if row["test"] == "mcnemar" else row["p_bootstrap"]
    return row


def compare(df: pd.DataFrame, higher: dict[str, bool], records: dict[str, SampleRecord],
            alpha: float = ALPHA, unranked: Iterable[str] = ()) -> pd.DataFrame:
    """Every pair of ranked rows with a record, in every ranked column where both have a value (:data:`PAIR_COLUMNS`;
    ``diff`` = a - b, ``better``: the row the corrected test finds better, empty when not separated)."""
    rows = [m for m in ranked_rows(df, unranked) if m in records]
    check_paired({m: records[m] for m in rows})
    values = df.set_index("method")
    out = []
    for col in tested_columns(df, higher):
        have = [m for m in rows if pd.notna(pd.to_numeric(values.at[m, col], errors="coerce"))]
        family = [_pair(col, a, b, float(values.at[a, col]), float(values.at[b, col]), records[a], records[b])
                  for a, b in itertools.combinations(have, 2)]
        adj = holm(np.array([r["p"] for r in family], np.float64))
        for r, p in zip(family, adj):
            sep = bool(np.isfinite(p) and p < alpha and r["diff"] != 0)
            good = (r["diff"] > 0) == bool(higher[col])
            out.append({**r, "p_holm": p, "separated": sep, "better": (r["a"] if good else r["b"]) if sep else ""})
    return pd.DataFrame(out, columns=PAIR_COLUMNS)


def marks(df: pd.DataFrame, higher: dict[str, bool], pairs: pd.DataFrame,
          records: dict[str, SampleRecord], unranked: Iterable[str] = ()) -> tuple[dict[str, dict[int, str]], MarkNote]:
    """Column -> {row index: 'best' | 'tied'} from the corrected tests (``'best'``: bold, better than every other
    ranked row; ``'tied'``: underlined, the best point value and the rows no test separates from it), and the
    note that says what they rest on (:func:`vcebench.report.footer.marks_line`)."""
    ranked = ranked_rows(df, unranked)
    note = MarkNote(no_record=[m for m in ranked if m not in records])
    out: dict[str, dict[int, str]] = {}
    for col in tested_columns(df, higher):
        v = pd.to_numeric(df[col], errors="coerce")
        have = [i for i, m in df["method"].items() if m in ranked and pd.notna(v[i])]
        if len(have) < 2:
            continue
        lacking = [df.at[i, "method"] for i in have if df.at[i, "method"] not in records
                   or col not in records[df.at[i, "method"]].boot]
        if lacking:
            note.unmarked[col] = f"no per-input record for {', '.join(lacking)}"
            continue
        out[col] = _column_marks(df, col, have, v, bool(higher[col]), pairs[pairs["column"] == col])
        note.marked.append(col)
    return out, note


def best_group(values: dict[str, float], fam: pd.DataFrame, hib: bool) -> list[str]:
    """The rows of one column that no corrected test puts below the best: the best point value's rows and every
    row a test does not separate from one of them (``values``: row -> value; ``fam``: the column's pairs). One
    row: it is better than every other ranked row (bold); several: tied (underlined)."""
    best_v = max(values.values()) if hib else min(values.values())
    best = [m for m, v in values.items() if v == best_v]
    sep = {frozenset((a, b)) for a, b, s in zip(fam["a"], fam["b"], fam["separated"]) if s}
    return [m for m in values if m in best or any(frozenset((m, b)) not in sep for b in best)]


def _column_marks(df: pd.DataFrame, col: str, have: list, v: pd.Series, hib: bool, fam: pd.DataFrame) -> dict[int, str]:
    """The marks of one column (see :func:`marks`)."""
    name = df["method"]
    group = set(best_group({name[i]: float(v[i]) for i in have}, fam, hib))
    rows = [i for i in have if name[i] in group]
    if len(rows) == 1:
        return {rows[0]: "best"}
    return dict.fromkeys(rows, "tied")


def verdict_markdown(pairs: pd.DataFrame) -> str:
    """The verdict of the tests as a table (the first of ``<task>_pairs.md``): a row per ranked row, a column per
    tested column, "**best**" where the row is better than every other ranked row at the corrected level, "tied"
    where it is among the rows no test separates from the best point value, empty elsewhere: what the table marks
    say, in the task tables' row and column labels (a docs excerpt can cut it: ``<task>_pairs.md table=1``)."""
    from .. import registry
    from .tables import _md_math, column_label, direction_arrow, method_label

    higher = registry.column_directions()
    rows = list(dict.fromkeys([*pairs["a"], *pairs["b"]]))
    cols = [c for c in dict.fromkeys(pairs["column"]) if higher.get(c) is not None]
    cells: dict[str, dict[str, str]] = {m: {} for m in rows}
    for col in cols:
        fam = pairs[pairs["column"] == col]
        values = {**dict(zip(fam["a"], fam["value_a"])), **dict(zip(fam["b"], fam["value_b"]))}
        group = best_group({m: float(v) for m, v in values.items()}, fam, bool(higher[col]))
        for m in group:
            cells[m][col] = "**best**" if len(group) == 1 else "tied"
    head = ["Method"] + [f"{_md_math(column_label(c))}{direction_arrow(c, higher, False)}" for c in cols]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join([method_label(m)] + [cells[m].get(c, "") for c in cols]) + " |" for m in rows]
    return "\n".join(out) + "\n"


def pairs_markdown(task: str, pairs: pd.DataFrame, alpha: float = ALPHA) -> str:
    """``<task>_pairs.md``: one table per column, a line per pair."""
    from .tables import format_value, method_label

    lines = [f"# {task}: paired comparisons", "",
             f"Each pair of ranked rows on the same inputs and bootstrap draws (docs/protocol.md, \"Paired "
             f"comparisons\"): Δ = a − b with its paired {LEVEL * 100:g} % percentile interval; p: exact McNemar on "
             f"the discordant inputs for 0 / 1 columns (FR, ...), else the paired bootstrap; p (Holm): corrected over "
             f"the pairs of the column; separated at {alpha} family-wise.", ""]
    if not pairs.empty:
        lines += ["## Verdict", "", "**best**: better than every other ranked row by the corrected tests; tied: "
                  "among the rows no corrected test separates from the best point value (the marks of the task "
                  "table).", "", verdict_markdown(pairs)]
    for col, fam in pairs.groupby("column", sort=False):
        lines += [f"## {col}", "", "| a | b | Δ (95 % CI) | test | p | p (Holm) | better |", "|---" * 7 + "|"]
        for r in fam.itertuples():
            ci = "" if pd.isna(r.diff_lo) else f" ({format_value(r.diff_lo)}, {format_value(r.diff_hi)})"
            better = method_label(r.better) if r.better else "not separated"
            lines.append(f"| {method_label(r.a)} | {method_label(r.b)} | {format_value(r.diff)}{ci} | {r.test} | "
                         f"{_fmt_p(r.p)} | {_fmt_p(r.p_holm)} | {better} |")
        lines.append("")
    if pairs.empty:
        lines.append("No pairs: fewer than two ranked rows with a per-input record (samples.npz).")
    lines += [attack_line(sorted(set(pairs["a"]) | set(pairs["b"])))] if not pairs.empty else []
    return "\n".join(line for line in lines if line is not None) + "\n"


def attack_line(rows: list[str]) -> str | None:
    """The one footer line on the ranked rows that are no counterfactual (``tasks.is_attack``), None without."""
    from ..config.tasks import is_attack
    from .tables import method_label

    attacks = [method_label(m) for m in rows if is_attack(m)]
    if not attacks:
        return None
    return (f"{', '.join(attacks)}: no counterfactual, ranked on purpose: a column that does not separate "
            f"{'it' if len(attacks) == 1 else 'them'} from the methods cannot tell an attack from a counterfactual.")


def _fmt_p(p: float) -> str:
    return "--" if pd.isna(p) else f"{p:.3g}" if p >= 1e-3 else f"{p:.1e}"


def task_pairs(results: Path, task: str, df: pd.DataFrame, higher: dict[str, bool],
               unranked: Iterable[str] = ()) -> tuple[pd.DataFrame, dict[str, dict[int, str]], MarkNote]:
    """The comparisons of a task's table, its marks and their note, from the rows' ``samples.npz`` (``unranked``:
    rows left out of both, see :func:`ranked_rows`)."""
    try:
        records = load_records(results, task, list(df["method"]))
    except RecordError as e:
        raise PairingError(str(e)) from None
    pairs = compare(df, higher, records, unranked=unranked)
    mk, note = marks(df, higher, pairs, records, unranked)
    return pairs, mk, note


def write_pairs(out_dir: Path, task: str, pairs: pd.DataFrame) -> None:
    """``<out_dir>/<task>_pairs.{csv,md}``."""
    from ..core.io import atomic_path
    from .tables import write_text

    with atomic_path(Path(out_dir) / f"{task}_pairs.csv") as tmp:
        pairs.to_csv(tmp, index=False, float_format="%.6g")
    write_text(Path(out_dir) / f"{task}_pairs.md", pairs_markdown(task, pairs))
