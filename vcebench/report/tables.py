"""Task tables: one row per method from the run's results, cell formatting, and the CSV / Markdown / LaTeX
writers. The cells' marks come from the paired tests (:mod:`.pairs`): ``'best'`` bold, ``'tied'`` underlined."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from .. import registry
from ..core.io import atomic_path, write_text

COST_COLUMNS = list(registry.COST_COLUMNS)
# How each row's settings were made (metrics.json `protocol`; not ranked): the starting log-SNR and
# whether the settings came from the tuned file (1) or not (0; e.g. the `_paper` rows).
PROTOCOL_COLUMNS = list(registry.PROTOCOL_COLUMNS)
# a cell's 95 % bootstrap interval travels as <col>_lo / <col>_hi (csv), shown as value ± half-width
INTERVAL_SUFFIXES = ("_lo", "_hi")
# a cell's precision in <task>.csv: six significant digits
CSV_FLOAT_FORMAT = "%.6g"
# column -> {row index: 'best' (bold) | 'tied' (underlined)}: the marks of the paired tests (vcebench.report.pairs)
Marks = dict[str, dict[int, str]]
# on the header of a column that cannot rank this task's methods as its direction says (vcebench.report.validity)
HEADER_MARK = "†"
# after the label of a row that is never ranked for what it does to the image (vcebench.report.validity: a
# regeneration); its footer sentence says why
ROW_MARK = "‡"
# Headers of the columns that are no metric's (a metric's come from its registration, registry.column_labels).
PRETTY = {"sec_per_cf": "s/CF", "tflops_per_cf": "TFLOPs/CF", "nfe_per_cf": "NFE/CF", "peak_mem_mb": "Mem (MB)",
          "mean_steps": "steps", "log_snr": "log-SNR"}


def column_label(col: str) -> str:
    """A column's table header (LaTeX math allowed: ``S$^3$``)."""
    return registry.column_labels().get(col, PRETTY.get(col, col))


def method_label(m: str) -> str:
    """``fire`` -> ``FiRe`` (``registry.MethodSpec.label``); a variant ``<method>_<variant>`` ->
    ``<Method> (<variant>)``; an imported or unknown name unchanged."""
    from ..config.tasks import split_method

    try:
        base, variant = split_method(m)
    except ValueError:
        return m
    label = registry.get_method_spec(base).label
    return label if variant is None else f"{label} ({variant.replace('_', '-')})"


def load_task_table(results: Path, task: str, methods: list[str], kind: str, synthetic: bool,
                    profiles: Path | None = None) -> tuple[pd.DataFrame, dict[str, bool]]:
    """One row per method from ``results/<task>/<method>/{metrics,profile}.json`` and counterfactuals.npz:
    the metrics with their bootstrap intervals (``<col>_lo``, ``<col>_hi``, last), the cost columns of all
    n CFs (``vcebench.costs.columns``; empty for a truth row, ``tasks.is_truth``), the protocol columns. ``profiles``:
    where ``<method>/profile.json`` lives when not beside the metrics (a seed rerun uses the main run's per-call
    FLOPs and time)."""
    from ..config.tasks import is_truth
    from ..costs.columns import cost_columns

    rows, higher = [], registry.column_directions()
    for m in methods:
        row: dict = {"method": m}
        mpath = results / task / m / "metrics.json"
        bootstrap = None
        if mpath.exists():
            mj = json.loads(mpath.read_text())
            row.update(mj.get("metrics", {}))
            for k, iv in (mj.get("intervals") or {}).items():
                if iv is not None:
                    row[f"{k}_lo"], row[f"{k}_hi"] = iv
            bootstrap = mj.get("bootstrap")
            row["n"] = mj.get("n_inputs", mj.get("n", {}).get("FR") if isinstance(mj.get("n"), dict) else None)
            proto = mj.get("protocol") or {}
            row.update(log_snr=proto.get("log_snr"), tuned=None if not proto else int(bool(proto.get("tuned"))))
        ppath = (results / task if profiles is None else profiles) / m / "profile.json"
        pj = json.loads(ppath.read_text()) if ppath.exists() else None
        # a truth row is rendered by the dataset, not computed by a method: it has no cost
        if not is_truth(m) and (pj is not None or (results / task / m / "counterfactuals.npz").exists()):
            costs = cost_columns(results / task / m / "counterfactuals.npz", pj, bootstrap)
            costs.pop("cost_sources")
            row.update(costs)
        rows.append(row)
    cols = ["method", "n"] + registry.table_columns(kind, synthetic) + COST_COLUMNS + PROTOCOL_COLUMNS
    cols += [c + s for c in cols[2:] for s in INTERVAL_SUFFIXES if any(c + s in r for r in rows)]
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df:
            df[c] = np.nan
    for c in COST_COLUMNS:
        higher[c] = False
    for c in registry.unranked_columns():  # e.g. the unedited input's floors: shown, never ranked
        higher.pop(c, None)
    return df[cols], higher


def format_value(v) -> str:
    """A cell's number: ``--`` for none, integers as such, else three or so significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "--"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    a = abs(float(v))
    if a == 0:
        return "0"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2e}"


def _half_width(row: pd.Series, col: str) -> float | None:
    """Half the width of the cell's bootstrap interval (``None`` without one)."""
    lo, hi = row.get(col + "_lo"), row.get(col + "_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi) or pd.isna(row.get(col)):
        return None
    return (float(hi) - float(lo)) / 2


def _fmt_hw(v: float) -> str:
    """A half-width to two significant digits."""
    if v == 0:
        return "0"
    return f"{v:.2g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.1e}"


def display_columns(df: pd.DataFrame) -> list[str]:
    """The table's columns: everything but ``n`` and the interval bounds."""
    return [c for c in df.columns if c != "n" and not c.endswith(INTERVAL_SUFFIXES)]


def direction_arrow(col: str, higher: dict[str, bool], tex: bool) -> str:
    if col not in higher:
        return ""
    if tex:
        return r"$\uparrow$" if higher[col] else r"$\downarrow$"
    return "↑" if higher[col] else "↓"


def to_markdown(df: pd.DataFrame, higher: dict[str, bool], title: str = "", footer: list[str] | None = None,
                marked: Iterable[str] = (), marks: Marks | None = None, flagged: Iterable[str] = ()) -> str:
    """The table (``marks``, column -> {row index: 'best' | 'tied'} from :func:`.pairs.marks`: 'best' **bold**,
    'tied' underlined; none: no marks; a cell with a bootstrap interval reads ``value ± half-width``) and its
    footer lines (default: the n of each row); the ``marked`` columns' headers carry ``†`` and the ``flagged``
    rows' labels ``‡`` (their footer sentences say why: :mod:`vcebench.report.validity`)."""
    cols = display_columns(df)
    marked, flagged = set(marked), set(flagged)
    head = ["Method"] + [f"{_md_math(column_label(c))}{direction_arrow(c, higher, False)}"
                         f"{HEADER_MARK if c in marked else ''}" for c in cols[1:]]
    lines = ([f"### {title}", ""] if title else []) + ["| " + " | ".join(head) + " |",
                                                        "|" + "---|" * len(head)]
    marks = marks or {}
    for i, row in df.iterrows():
        label = method_label(row["method"]) + (f" {ROW_MARK}" if row["method"] in flagged else "")
        cells = [f"*{label}*" if _is_baseline(row) else label]
        for c in cols[1:]:
            s = format_value(row[c])
            mk = marks.get(c, {}).get(i)
            s = f"**{s}**" if mk == "best" else f"<u>{s}</u>" if mk == "tied" else s
            hw = _half_width(row, c)
            cells.append(s if hw is None else f"{s} ± {_fmt_hw(hw)}")
        lines.append("| " + " | ".join(cells) + " |")
    if footer is None and "n" in df and df["n"].notna().any():
        footer = [f"n = {', '.join(f'{method_label(m)}: {format_value(n)}' for m, n in zip(df['method'], df['n']))}"]
    if footer:
        lines += [""] + [f"{f}  " if j < len(footer) - 1 else f for j, f in enumerate(footer)]
    return "\n".join(lines) + "\n"


def _is_baseline(row: pd.Series) -> bool:
    from ..config.tasks import is_baseline

    return is_baseline(row["method"])


def _md_math(label: str) -> str:
    """A header's LaTeX superscript as text (``S$^3$`` -> ``S³``)."""
    import re

    sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
    return re.sub(r"\$\^(\d+)\$", lambda m: m.group(1).translate(sup), label)


def _tex_escape(s: str) -> str:
    return s.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def to_latex(df: pd.DataFrame, higher: dict[str, bool], caption: str = "", label: str = "",
             footer: list[str] | None = None, marked: Iterable[str] = (), marks: Marks | None = None,
             flagged: Iterable[str] = ()) -> str:
    """A booktabs table: ``marks`` as in :func:`to_markdown` ('best' bold, 'tied' underlined), arrows from each
    metric's direction, a cell with a bootstrap interval as ``value $\\pm$ half-width``, ``$^\\dagger$`` on the
    ``marked`` columns' headers, ``$^\\ddagger$`` after the ``flagged`` rows' labels; ``footer`` lines go below
    it as a table note."""
    cols = display_columns(df)
    marks = marks or {}
    marked, flagged = set(marked), set(flagged)
    head = ["Method"] + [column_label(c) if "$" in column_label(c) else _tex_escape(column_label(c))
                         for c in cols[1:]]
    head = [h + direction_arrow(c, higher, True) + (r"$^\dagger$" if c in marked else "")
            for h, c in zip(head, cols)]
    out = [r"\begin{table}[t]", r"\centering", r"\small", r"\setlength{\tabcolsep}{3pt}"]
    if caption:
        out.append(r"\caption{" + _tex_escape(caption) + "}")
    if label:
        out.append(r"\label{" + label + "}")
    out += [r"\begin{tabular}{l" + "c" * (len(cols) - 1) + "}", r"\toprule", " & ".join(head) + r" \\",
            r"\midrule"]
    for i, row in df.iterrows():
        cells = [_tex_escape(method_label(row["method"])) + (r"$^\ddagger$" if row["method"] in flagged else "")]
        for c in cols[1:]:
            s = format_value(row[c])
            mk = marks.get(c, {}).get(i)
            s = r"\textbf{" + s + "}" if mk == "best" else r"\underline{" + s + "}" if mk == "tied" else s
            hw = _half_width(row, c)
            cells.append(s if hw is None else s + r"{\tiny${}\pm{}$" + _fmt_hw(hw) + "}")
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    if footer:
        out += [r"\par\smallskip", r"\begin{minipage}{\linewidth}\scriptsize"]
        out += [_tex_note(f) + r"\\" for f in footer]
        out.append(r"\end{minipage}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


def _md_to_text(s: str) -> str:
    """A footer line without its markdown emphasis (for the LaTeX note)."""
    return s.replace("**", "").replace("`", "")


def _tex_note(s: str) -> str:
    """A footer line as LaTeX text: escaped, with its few symbols in math mode."""
    out = _tex_escape(_md_to_text(s)).replace("#", r"\#")
    for sym, tex in ((HEADER_MARK, r"$^\dagger$"), (ROW_MARK, r"$^\ddagger$"),
                     ("±", r"$\pm$"), ("≥", r"$\geq$"), ("≤", r"$\leq$"),
                     ("×", r"$\times$"), ("→", r"$\to$")):
        out = out.replace(sym, tex)
    return out


def write_task_tables(df: pd.DataFrame, higher: dict[str, bool], out_dir: Path, task: str,
                      footer: list[str] | None = None, marked: Iterable[str] = (), marks: Marks | None = None,
                      flagged: Iterable[str] = ()) -> None:
    with atomic_path(out_dir / f"{task}.csv") as tmp:
        df.to_csv(tmp, index=False, float_format=CSV_FLOAT_FORMAT)
    kw = dict(footer=footer, marked=marked, marks=marks, flagged=flagged)
    write_text(out_dir / f"{task}.md", to_markdown(df, higher, title=task, **kw))
    write_text(out_dir / f"{task}.tex", to_latex(df, higher, caption=f"vcebench results on {task}",
                                                  label=f"tab:{task}", **kw))
