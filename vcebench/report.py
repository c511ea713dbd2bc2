"""Comparison tables (CSV / Markdown / LaTeX), paper tables (the figures: vcebench.figures),
and the metric-regression check used by CI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import registry
from .io import atomic_path

COST_COLUMNS = list(registry.COST_COLUMNS)
# How each row's settings were made (metrics.json `protocol`; not ranked): the starting log-SNR and
# whether the settings came from the tuned file (1) or not (0; e.g. the `_paper` rows).
PROTOCOL_COLUMNS = list(registry.PROTOCOL_COLUMNS)
# a cell's 95 % bootstrap interval travels as <col>_lo / <col>_hi (csv), shown as value ± half-width
INTERVAL_SUFFIXES = ("_lo", "_hi")
# Headers of the columns that are no metric's (a metric's come from its registration, registry.column_labels).
PRETTY = {"sec_per_cf": "s/CF", "tflops_per_cf": "TFLOPs/CF", "nfe_per_cf": "NFE/CF", "peak_mem_mb": "Mem (MB)",
          "mean_steps": "steps", "log_snr": "log-SNR"}


def column_label(col: str) -> str:
    """A column's table header (LaTeX math allowed: ``S$^3$``)."""
    return registry.column_labels().get(col, PRETTY.get(col, col))


def method_label(m: str) -> str:
    """``fire`` -> ``FiRe`` (``registry.MethodSpec.label``); a variant ``<method>_<variant>`` ->
    ``<Method> (<variant>)``; an imported or unknown name unchanged."""
    from .tasks import split_method

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
    n CFs (``vcebench.costs``), the protocol columns. ``profiles``: where ``<method>/profile.json`` lives when
    not beside the metrics (a seed rerun uses the main run's per-call FLOPs and time)."""
    from .costs import cost_columns

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
            higher.update(mj.get("higher_is_better", {}))
            row["n"] = mj.get("n_inputs", mj.get("n", {}).get("FR") if isinstance(mj.get("n"), dict) else None)
            proto = mj.get("protocol") or {}
            row.update(log_snr=proto.get("log_snr"), tuned=None if not proto else int(bool(proto.get("tuned"))))
        ppath = (results / task if profiles is None else profiles) / m / "profile.json"
        pj = json.loads(ppath.read_text()) if ppath.exists() else None
        if pj is not None or (results / task / m / "counterfactuals.npz").exists():
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


def rank_marks(values: pd.Series, higher: bool) -> dict[int, str]:
    """Index -> 'best' / 'second' (ties share a rank), NaNs ignored."""
    v = pd.to_numeric(values, errors="coerce")
    finite = v.dropna()
    if finite.empty:
        return {}
    uniq = sorted(finite.unique(), reverse=higher)
    marks = {}
    for i, val in v.items():
        if pd.isna(val):
            continue
        if val == uniq[0]:
            marks[i] = "best"
        elif len(uniq) > 1 and val == uniq[1]:
            marks[i] = "second"
    return marks


def _fmt(v) -> str:
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


def _marks(df: pd.DataFrame, cols: list[str], higher: dict[str, bool]) -> dict[str, dict[int, str]]:
    """Best / second per column among the explainers (the do-nothing rows, ``tasks.is_baseline``, are
    reference rows and never ranked)."""
    from .tasks import is_baseline

    ranked = ~df["method"].map(is_baseline).astype(bool)
    return {c: rank_marks(df[c].where(ranked), higher.get(c, False)) for c in cols if c in higher}


def _arrow(col: str, higher: dict[str, bool], tex: bool) -> str:
    if col not in higher:
        return ""
    if tex:
        return r"$\uparrow$" if higher[col] else r"$\downarrow$"
    return "↑" if higher[col] else "↓"


def to_markdown(df: pd.DataFrame, higher: dict[str, bool], title: str = "", footer: list[str] | None = None) -> str:
    """The table (best **bold**, second underlined; a cell with a bootstrap interval reads ``value ± half-width``)
    and its footer lines (default: the n of each row)."""
    cols = display_columns(df)
    head = ["Method"] + [f"{_md_math(column_label(c))}{_arrow(c, higher, False)}" for c in cols[1:]]
    lines = ([f"### {title}", ""] if title else []) + ["| " + " | ".join(head) + " |",
                                                        "|" + "---|" * len(head)]
    marks = _marks(df, cols[1:], higher)
    for i, row in df.iterrows():
        label = method_label(row["method"])
        cells = [f"*{label}*" if _is_baseline(row) else label]
        for c in cols[1:]:
            s = _fmt(row[c])
            mk = marks.get(c, {}).get(i)
            s = f"**{s}**" if mk == "best" else f"<u>{s}</u>" if mk == "second" else s
            hw = _half_width(row, c)
            cells.append(s if hw is None else f"{s} ± {_fmt_hw(hw)}")
        lines.append("| " + " | ".join(cells) + " |")
    if footer is None and "n" in df and df["n"].notna().any():
        footer = [f"n = {', '.join(f'{method_label(m)}: {_fmt(n)}' for m, n in zip(df['method'], df['n']))}"]
    if footer:
        lines += [""] + [f"{f}  " if j < len(footer) - 1 else f for j, f in enumerate(footer)]
    return "\n".join(lines) + "\n"


def _is_baseline(row: pd.Series) -> bool:
    from .tasks import is_baseline

    return is_baseline(row["method"])


def _md_math(label: str) -> str:
    """A header's LaTeX superscript as text (``S$^3$`` -> ``S³``)."""
    import re

    sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
    return re.sub(r"\$\^(\d+)\$", lambda m: m.group(1).translate(sup), label)


def _tex_escape(s: str) -> str:
    return s.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def to_latex(df: pd.DataFrame, higher: dict[str, bool], caption: str = "", label: str = "",
             footer: list[str] | None = None) -> str:
    """A booktabs table: best in bold, second underlined, arrows from each metric's direction, a cell with a
    bootstrap interval as ``value $\\pm$ half-width``; ``footer`` lines go below it as a table note."""
    cols = display_columns(df)
    marks = _marks(df, cols[1:], higher)
    head = ["Method"] + [column_label(c) if "$" in column_label(c) else _tex_escape(column_label(c))
                         for c in cols[1:]]
    head = [h + _arrow(c, higher, True) for h, c in zip(head, cols)]
    out = [r"\begin{table}[t]", r"\centering", r"\small", r"\setlength{\tabcolsep}{3pt}"]
    if caption:
        out.append(r"\caption{" + _tex_escape(caption) + "}")
    if label:
        out.append(r"\label{" + label + "}")
    out += [r"\begin{tabular}{l" + "c" * (len(cols) - 1) + "}", r"\toprule", " & ".join(head) + r" \\",
            r"\midrule"]
    for i, row in df.iterrows():
        cells = [_tex_escape(method_label(row["method"]))]
        for c in cols[1:]:
            s = _fmt(row[c])
            mk = marks.get(c, {}).get(i)
            s = r"\textbf{" + s + "}" if mk == "best" else r"\underline{" + s + "}" if mk == "second" else s
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


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _md_to_text(s: str) -> str:
    """A footer line without its markdown emphasis (for the LaTeX note)."""
    return s.replace("**", "").replace("`", "")


def _tex_note(s: str) -> str:
    """A footer line as LaTeX text: escaped, with its few symbols in math mode."""
    out = _tex_escape(_md_to_text(s)).replace("#", r"\#")
    for sym, tex in (("±", r"$\pm$"), ("≥", r"$\geq$"), ("≤", r"$\leq$"), ("×", r"$\times$"), ("→", r"$\to$")):
        out = out.replace(sym, tex)
    return out


def write_task_tables(df: pd.DataFrame, higher: dict[str, bool], out_dir: Path, task: str,
                      footer: list[str] | None = None) -> None:
    with atomic_path(out_dir / f"{task}.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")
    write_text(out_dir / f"{task}.md", to_markdown(df, higher, title=task, footer=footer))
    write_text(out_dir / f"{task}.tex", to_latex(df, higher, caption=f"vcebench results on {task}",
                                                  label=f"tab:{task}", footer=footer))


# --- the table footer: intervals, n per column, protocol, costs, warnings -----------------------------

SUBSET_WORDS = {"all": "all inputs", "successful": "successful CFs", "correct": "correctly classified inputs",
                "correct_successful": "correct and successful"}


def load_metrics_json(results: Path, task: str, methods: list[str]) -> dict[str, dict]:
    """``{method: metrics.json}`` of the rows that have one."""
    out = {}
    for m in methods:
        p = results / task / m / "metrics.json"
        if p.exists():
            out[m] = json.loads(p.read_text())
    return out


def _per_row(values: dict[str, object]) -> str:
    """``16 for every row`` or ``FiRe 13, DiME 16, ...``."""
    uniq = set(values.values())
    if len(uniq) == 1:
        return f"{_fmt(next(iter(uniq)))} for every row"
    return ", ".join(f"{method_label(m)} {_fmt(v)}" for m, v in values.items())


def task_footer(df: pd.DataFrame, metas: dict[str, dict], tuned: dict | None = None,
                feature_dim: int | None = None) -> list[str]:
    """Footer lines of a task table (markdown; ``to_latex`` turns them into a table note): what ± means, the
    n behind each column, the protocol (noise rule, selection rule, n, seeds, feature extractor), where the
    cost columns come from, and warnings (a DDPM row whose every sample flipped at its first guidance scale).
    Reads what the rows' metrics.json hold and leaves out what they do not."""
    from .tasks import is_baseline

    lines: list[str] = []
    shown = [c for c in display_columns(df)[1:]]
    boot = next((mj.get("bootstrap") for mj in metas.values() if mj.get("bootstrap")), None)
    if boot:
        lines.append(
            f"± = half-width of the 95 % percentile bootstrap interval over the n inputs ({boot['resamples']} "
            f"resamples, FID/sFID/KID {boot['feature_resamples']}, seed {boot['seed']}; subsets follow the drawn "
            "inputs); bounds in the csv (`<column>_lo`, `<column>_hi`). A resample repeats inputs, which adds to "
            "FID's small-n bias: FID/sFID intervals can lie above the value; KID is unbiased at any n.")
    # n per column, grouped by subset and counts
    groups: dict[tuple, list[str]] = {}
    for c in shown:
        counts = {m: (mj.get("n") or {}).get(c) for m, mj in metas.items()}
        if not any(v is not None for v in counts.values()):
            continue
        subset = next((mj.get("subsets", {}).get(c) for mj in metas.values() if mj.get("subsets", {}).get(c)), None)
        key = (subset, tuple(counts.items()))
        groups.setdefault(key, []).append(c)
    if groups:
        parts = []
        for (subset, counts), cols in groups.items():
            where = SUBSET_WORDS.get(subset, subset or "")
            extra = " vs all n originals" if {"FID", "sFID", "KID"} & set(cols) else ""
            parts.append(f"{', '.join(cols)} ({where}{extra}): {_per_row(dict(counts))}")
        lines.append("n per column: " + "; ".join(parts) + ".")
    # protocol
    protos = {m: mj.get("protocol") for m, mj in metas.items() if mj.get("protocol")}
    bits = []
    if protos:
        rules: dict[str, list[str]] = {}
        for m, p in protos.items():
            if p.get("log_snr") is None:
                continue
            rule = p.get("noise_rule", "?")
            if rule == "snr_matched":
                rule += (f" (log-SNR {p.get('log_snr_shift', 0):+.2f}: {p.get('reference_resolution')} px → "
                         f"{p.get('resolution')} px)")
            rules.setdefault(rule, []).append(method_label(m))
        bits.append("noise rule " + "; ".join(f"{r}: {', '.join(ms)}" for r, ms in rules.items()))
        tuned_rows = [method_label(m) for m, p in protos.items() if p.get("tuned")]
        if tuned_rows:
            how = f"tuned settings ({next(p['tuned_file'] for p in protos.values() if p.get('tuned'))}"
            if tuned and tuned.get("rule"):
                r = tuned["rule"]
                req = ", ".join(f"{k} ≥ {v}" for k, v in (r.get("require") or {}).items())
                how += f"; lowest {r.get('minimize')}" + (f" subject to {req}" if req else "")
                val = tuned.get("validation") or {}
                if val:
                    how += f", on {val.get('n')} `{val.get('split')}` inputs never evaluated"
            bits.append(f"selection: {how}) for {', '.join(tuned_rows)}; the other rows: paper defaults + config "
                        "(`method_defaults`, `tasks.<task>.params`, variants)")
        else:
            bits.append("selection: paper defaults + config (`method_defaults`, `tasks.<task>.params`, variants); "
                        "no tuned settings")
    else:
        bits.append("selection: paper defaults + config (no protocol record in metrics.json)")
    any_mj = next(iter(metas.values()), {})
    n_inputs = {m: mj.get("n_inputs") for m, mj in metas.items()}
    split = (any_mj.get("inputs") or {}).get("eval_split")
    bits.append(f"n inputs: {_per_row(n_inputs)}" + (f" (the first n of the `{split}` split)" if split else ""))
    seed_bits = [f"generation seed {any_mj.get('seed')}"] if any_mj.get("seed") is not None else []
    if any_mj.get("seeds"):
        seed_bits.append(f"sFID split seeds {any_mj['seeds']}")
    if boot:
        seed_bits.append(f"bootstrap seed {boot['seed']}")
    if seed_bits:
        bits.append(", ".join(seed_bits))
    extractor = (any_mj.get("models") or {}).get("fid_features")
    if extractor:
        dim = f", {feature_dim}-d" if feature_dim and f"{feature_dim}-d" not in extractor else ""
        kid = any_mj.get("kid") or {}
        bits.append(f"FID/sFID/KID features: {extractor}{dim}" + (
            f"; KID kernel {kid.get('kernel')}" if kid.get("kernel") else ""))
    lines.append("Protocol: " + "; ".join(bits) + ".")
    lines.append("Costs: NFE/CF and steps are means over all n CFs (counterfactuals.npz); TFLOPs/CF = each "
                 "network's FLOPs per call (profile run) × each CF's calls; s/CF: the explain run's generation "
                 "time over all n; Mem: the profile run.")
    # honest rows
    base = [method_label(m) for m in df["method"] if is_baseline(m)]
    if base:
        lines.append(f"{', '.join(base)}: the input as its own CF, not ranked: FR = 0 by construction (target = "
                     "1 − f(x)), FR_oracle = share of inputs whose oracle query bit already disagrees with f(x) "
                     "(the floor of every row's FR_oracle); columns over successful CFs are empty (--).")
    for m, mj in metas.items():
        g = mj.get("guidance") or {}
        if g.get("all_flipped_at_first_scale"):
            scales = ((mj.get("protocol") or {}).get("params") or {}).get("scales")
            lines.append(f"**Warning** {method_label(m)}: every sample flipped at its first guidance scale "
                         f"({_fmt(g.get('first_scale'))}); the retry schedule"
                         + (f" {list(scales)}" if scales else "") + " was never exercised.")
    return lines


# --- Pareto fronts (`snakemake pareto`) -------------------------------------------------------------

PARETO_QUALITY = ["KID", "FID", "FVA", "FR_oracle", "GT_L1_region"]


def pareto_front(cost: np.ndarray, quality: np.ndarray, higher: bool) -> np.ndarray:
    """Bool mask of the points no other point dominates (cost no higher and quality no worse, one of them
    strictly better); NaN points are never on the front."""
    c, q = np.asarray(cost, float), np.asarray(quality, float)
    q = -q if higher else q  # lower is better from here on
    ok = np.isfinite(c) & np.isfinite(q)
    front = np.zeros(len(c), bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (c <= c[i]) & (q <= q[i]) & ((c < c[i]) | (q < q[i]))
        front[i] = not dominated.any()
    return front


def pareto_figures(path: Path, snr_path: Path, df: pd.DataFrame, higher: dict[str, bool], title: str = "") -> None:
    """(1) each quality column against TFLOPs and seconds per CF, one line per method through its budgets, the
    front over all points circled; (2) each quality column against the starting log-SNR. ``df`` rows carry
    ``base`` (the method), ``sweep`` (``budget`` | ``snr`` | ``default``) and the table's columns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quality = [c for c in PARETO_QUALITY if c in df and pd.to_numeric(df[c], errors="coerce").notna().any()]
    if "KID" in quality and "FID" in quality:
        quality.remove("FID")  # KID: unbiased at the synthetic tasks' n (the footer says why)
    bases = list(dict.fromkeys(df["base"]))
    colors = {b: plt.cm.tab10(i % 10) for i, b in enumerate(bases)}
    fig, axes = plt.subplots(len(quality), 2, figsize=(9, 2.6 * len(quality)), squeeze=False)
    for r, qcol in enumerate(quality):
        for c, cost in enumerate(["tflops_per_cf", "sec_per_cf"]):
            ax = axes[r, c]
            sub = df[df["sweep"].isin(["budget", "default"])]
            x, y = pd.to_numeric(sub[cost], errors="coerce"), pd.to_numeric(sub[qcol], errors="coerce")
            for b in bases:
                m = (sub["base"] == b).to_numpy()
                order = np.argsort(x[m].to_numpy())
                ax.plot(x[m].to_numpy()[order], y[m].to_numpy()[order], "o-", color=colors[b], label=method_label(b),
                        ms=4, lw=1)
            front = pareto_front(x.to_numpy(), y.to_numpy(), higher.get(qcol, False))
            if front.any():
                fx, fy = x.to_numpy()[front], y.to_numpy()[front]
                o = np.argsort(fx)
                ax.plot(fx[o], fy[o], "-", color="k", lw=2, alpha=0.3, zorder=0)
                ax.scatter(fx, fy, s=90, facecolors="none", edgecolors="k", lw=1.2, zorder=3, label="front")
            ax.set_xscale("log")
            ax.set_xlabel("TFLOPs per CF" if cost == "tflops_per_cf" else "seconds per CF", fontsize=8)
            ax.set_ylabel(f"{qcol} {_arrow(qcol, higher, False)}", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle(f"{title}: quality vs cost (FiRe: K; DDPM baselines: respacing at the same starting SNR)",
                 fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)

    fig, axes = plt.subplots(1, len(quality), figsize=(3.2 * len(quality), 3.0), squeeze=False)
    sub = df[df["sweep"].isin(["snr", "default"])]
    for j, qcol in enumerate(quality):
        ax = axes[0, j]
        for b in bases:
            m = sub["base"] == b
            x = pd.to_numeric(sub.loc[m, "log_snr"], errors="coerce").to_numpy()
            y = pd.to_numeric(sub.loc[m, qcol], errors="coerce").to_numpy()
            o = np.argsort(x)
            ax.plot(x[o], y[o], "o-", color=colors[b], label=method_label(b), ms=4, lw=1)
        ax.set_xlabel("starting log-SNR", fontsize=8)
        ax.set_ylabel(f"{qcol} {_arrow(qcol, higher, False)}", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{title}: quality vs starting log-SNR (default budget)", fontsize=9)
    fig.tight_layout()
    with atomic_path(snr_path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


# --- regression -----------------------------------------------------------------------------------

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
    body = "".join(
        f"| {r['task']} | {r['method']} | {r['metric']} | {_fmt(r['reference'])} | {_fmt(r['current'])} | "
        f"{_fmt(r.get('delta', float('nan')))} | {_fmt(r['tolerance'])} | {r['status']} |\n" for r in rows)
    return head + body
