"""Metric validity of a task table: every metric column checked against the true counterfactual (the truth row,
methods/ground_truth.py) and the unedited input (the do-nothing row, methods/no_edit.py).

A column cannot rank the methods of this task as its direction says, and gets a mark (``†``,
``tables.HEADER_MARK``) in the table header and one footer sentence, where

- the truth does not score better than the input (direction-aware): the column does not tell the true edit
  from no edit (e.g. L1 or S³, which the unedited input wins); or
- an explainer scores better than the truth beyond the bootstrap intervals (its interval and the truth's do
  not overlap; without intervals, the values): a value past the truth's is no better counterfactual, since
  the true change does not reach it (e.g. FVA on an attribute the identity network learned as identity).

For the columns in :data:`READ_AS_DISTANCE` (FR_oracle, MNAC, CD) the right reading is the distance to the
truth's value, not the direction: their signed distances (row - truth) go to the record and a footer line
says so. The record (:func:`validity_record`) is written beside the table as ``<task>_validity.json`` by
`vcebench report task`: a method's own metrics.json is written before the other rows exist.

A row whose counterfactuals the classifier reads all as one class, whatever their inputs' classes, regenerates the
image rather than edits it (:func:`regenerating_rows`, from the counts metrics.json's ``classifier_reads`` keeps):
its FR is the share of inputs of the other class, not a flip. It is never ranked: its label carries ``‡``
(``tables.ROW_MARK``) and one footer sentence says so (:func:`regeneration_lines`).

A ranked row that is known to be no counterfactual (``registry.MethodSpec.attack``: the pixel-space attack)
gets one footer sentence (:func:`attack_lines`): the columns that tell it from the truth (its value worse than
the truth's beyond the intervals; for :data:`READ_AS_DISTANCE`, its interval and the truth's apart), and the
columns that rank it first among the ranked rows (for :data:`READ_AS_DISTANCE`, closest to the truth's value):
those cannot tell an attack from a counterfactual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import registry
from ..config.tasks import is_attack, is_baseline, is_truth
from ..core.io import write_json
from .tables import HEADER_MARK, ROW_MARK, display_columns, format_value, method_label

READ_AS_DISTANCE = ("FR_oracle", "MNAC", "CD")


@dataclass(frozen=True)
class ColumnCheck:
    """One metric column of one task against the truth row (``truth``, its interval) and the input row."""

    column: str
    higher_is_better: bool
    truth: float
    truth_interval: tuple[float, float] | None
    input: float | None  # None: the input row has no value (a column over successful CFs) or no row
    beaten_by: tuple[str, ...]  # explainers better than the truth beyond the intervals
    distance_to_truth: dict[str, float] = field(default_factory=dict)  # READ_AS_DISTANCE: row - truth

    @property
    def truth_beats_input(self) -> bool | None:
        if self.input is None:
            return None
        return _better(self.truth, self.input, self.higher_is_better)

    @property
    def marked(self) -> bool:
        return self.truth_beats_input is False or bool(self.beaten_by)


def _better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


def _value(row: pd.Series, col: str) -> float | None:
    v = pd.to_numeric(pd.Series([row.get(col)]), errors="coerce").iloc[0]
    return None if pd.isna(v) else float(v)


def _bounds(row: pd.Series, col: str) -> tuple[float, float] | None:
    lo, hi = _value(row, col + "_lo"), _value(row, col + "_hi")
    return None if lo is None or hi is None else (lo, hi)


def check_columns(df: pd.DataFrame, higher: dict[str, bool]) -> dict[str, ColumnCheck]:
    """``{column: check}`` of every ranked metric column the truth row has a value in (none without a truth
    row). The input row is the first reference row that is not a truth row; the explainers, the unranked rows."""
    truth = next((r for _, r in df.iterrows() if is_truth(r["method"])), None)
    if truth is None:
        return {}
    inputs = next((r for _, r in df.iterrows() if is_baseline(r["method"]) and not is_truth(r["method"])), None)
    explainers = [r for _, r in df.iterrows() if not is_baseline(r["method"])]
    not_metrics = set(registry.COST_COLUMNS) | set(registry.PROTOCOL_COLUMNS)
    out = {}
    for col in display_columns(df)[1:]:
        t = _value(truth, col)
        if col not in higher or col in not_metrics or t is None:
            continue
        h = bool(higher[col])
        t_lo, t_hi = _bounds(truth, col) or (t, t)
        beaten = []
        for r in explainers:
            v = _value(r, col)
            if v is None:
                continue
            lo, hi = _bounds(r, col) or (v, v)
            if (lo > t_hi) if h else (hi < t_lo):
                beaten.append(r["method"])
        distance = {}
        if col in READ_AS_DISTANCE:
            distance = {r["method"]: v - t for r in explainers if (v := _value(r, col)) is not None}
        out[col] = ColumnCheck(col, h, t, _bounds(truth, col), None if inputs is None else _value(inputs, col),
                               tuple(beaten), distance)
    return out


@dataclass(frozen=True)
class AttackCheck:
    """How one metric column treats one attack row (``value``) against the truth row of its check."""

    column: str
    value: float
    caught: bool  # worse than the truth beyond the intervals (READ_AS_DISTANCE: the intervals apart)
    first: bool  # the best of the ranked rows (READ_AS_DISTANCE: the closest to the truth's value), ties included


def check_attacks(df: pd.DataFrame, checks: dict[str, ColumnCheck]) -> dict[str, list[AttackCheck]]:
    """``{attack row: [its check per column]}`` for every attack row (none without a truth row)."""
    rows = {r["method"]: r for _, r in df.iterrows() if not is_baseline(r["method"])}
    out: dict[str, list[AttackCheck]] = {}
    for name in (m for m in rows if is_attack(m)):
        a = rows[name]
        found = []
        for c, k in checks.items():
            v = _value(a, c)
            if v is None:
                continue
            lo, hi = _bounds(a, c) or (v, v)
            t_lo, t_hi = k.truth_interval or (k.truth, k.truth)
            values = [x for r in rows.values() if (x := _value(r, c)) is not None]
            if c in READ_AS_DISTANCE:
                caught = hi < t_lo or lo > t_hi
                first = abs(v - k.truth) <= min(abs(x - k.truth) for x in values)
            else:
                caught = hi < t_lo if k.higher_is_better else lo > t_hi
                first = v >= max(values) if k.higher_is_better else v <= min(values)
            found.append(AttackCheck(c, v, caught, first))
        out[name] = found
    return out


def attack_lines(attacks: dict[str, list[AttackCheck]], checks: dict[str, ColumnCheck]) -> list[str]:
    """The footer: per attack row, the columns that tell it from the truth and those that rank it first."""
    lines = []
    for name, found in attacks.items():
        caught = [f"{a.column} ({format_value(a.value)} vs {format_value(checks[a.column].truth)})"
                  for a in found if a.caught]
        first = [a.column for a in found if a.first]
        s = f"{method_label(name)} is no counterfactual: "
        s += (f"told from the true counterfactual by {', '.join(caught)}" if caught
              else "no column tells it from the true counterfactual beyond the intervals")
        if first:
            s += (f"; ranked first by {', '.join(first)}: {'this column' if len(first) == 1 else 'these columns'} "
                  f"cannot tell an attack from a counterfactual")
        lines.append(s + ".")
    return lines


def regenerating_rows(metas: dict[str, dict]) -> dict[str, dict]:
    """``{method: reads}`` of the rows whose counterfactuals the classifier reads all as one class while their
    inputs are of both (``metas``: each row's metrics.json; ``reads``: its ``classifier_reads``, the counts of
    inputs and of counterfactuals read as class 0 / 1)."""
    out = {}
    for m, meta in metas.items():
        reads = (meta or {}).get("classifier_reads")
        if not reads:
            continue
        inputs, cfs = reads["inputs"], reads["counterfactuals"]
        if min(inputs) > 0 and min(cfs) == 0:
            out[m] = reads
    return out


def regeneration_lines(rows: dict[str, dict], attribute: str) -> list[str]:
    """The footer: one sentence per regenerating row (:func:`regenerating_rows`)."""
    lines = []
    for m, reads in rows.items():
        inputs, cfs = reads["inputs"], reads["counterfactuals"]
        cls = attribute if cfs[1] > 0 else f"not {attribute}"
        other = inputs[0] if cfs[1] > 0 else inputs[1]
        lines.append(f"{ROW_MARK} {method_label(m)} regenerates rather than edits: the classifier reads all "
                     f"{sum(cfs)} of its counterfactuals as {cls}, whatever their input ({inputs[1]} inputs read "
                     f"as {attribute}, {inputs[0]} not), so its FR is the share of inputs of the other class "
                     f"({other} of {sum(inputs)}), not a flip; it is not ranked.")
    return lines


def marked_columns(checks: dict[str, ColumnCheck]) -> list[str]:
    return [c for c, k in checks.items() if k.marked]


def validity_lines(checks: dict[str, ColumnCheck], task: str, attribute: str) -> list[str]:
    """The footer: one sentence per marked column, then how to read the distance columns."""
    lines = []
    for c, k in checks.items():
        if not k.marked:
            continue
        s = f"{HEADER_MARK} {c} on {task}: the true counterfactual scores {format_value(k.truth)}"
        if k.truth_beats_input is False:
            s += (f", the unedited input {format_value(k.input)}: the column does not tell the true change of "
                  f"{attribute} from no edit")
        if k.beaten_by:
            side = "above" if k.higher_is_better else "below"
            verb = "scores" if len(k.beaten_by) == 1 else "score"
            s += (f"; {', '.join(method_label(m) for m in k.beaten_by)} {verb} {side} it beyond the intervals: "
                  f"values {side} the truth's are no better counterfactual (the true change of {attribute} does "
                  f"not reach them)")
        lines.append(s + ".")
    dist = [k for c, k in checks.items() if c in READ_AS_DISTANCE]
    if dist:
        lines.append(f"{', '.join(k.column for k in dist)}: read as the distance to the true counterfactual's "
                     f"value ({', '.join(f'{k.column} {format_value(k.truth)}' for k in dist)}), not as higher / "
                     f"lower is better; each row's signed distance in `{task}_validity.json`.")
    return lines


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else v


def validity_record(checks: dict[str, ColumnCheck], task: str, truth: str | None,
                    attacks: dict[str, list[AttackCheck]] | None = None) -> dict:
    """What `vcebench report task` writes to ``<task>_validity.json``."""
    return {"task": task, "truth_row": truth, "mark": HEADER_MARK, "read_as_distance": list(READ_AS_DISTANCE),
            "columns": {c: {"higher_is_better": k.higher_is_better, "truth": _finite(k.truth),
                            "truth_interval": None if k.truth_interval is None else list(k.truth_interval),
                            "input": _finite(k.input), "truth_beats_input": k.truth_beats_input,
                            "beaten_by": list(k.beaten_by), "marked": k.marked,
                            "distance_to_truth": {m: _finite(v) for m, v in k.distance_to_truth.items()}}
                        for c, k in checks.items()},
            "attacks": {m: {a.column: {"value": _finite(a.value), "caught": a.caught, "ranked_first": a.first}
                            for a in found} for m, found in (attacks or {}).items()}}


def write_validity(path: Path, df: pd.DataFrame, checks: dict[str, ColumnCheck], task: str,
                   attacks: dict[str, list[AttackCheck]] | None = None) -> None:
    truth = next((m for m in df["method"] if is_truth(m)), None)
    write_json(path, validity_record(checks, task, truth, attacks))
