"""Comparison tables (CSV / Markdown / LaTeX), paper tables, qualitative and efficiency figures,
and the metric-regression check used by CI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .io import atomic_path

COST_COLUMNS = ["sec_per_cf", "tflops_per_cf", "nfe_per_cf", "peak_mem_mb", "mean_steps"]
# How each row's settings were made (metrics.json `protocol`; not ranked): the starting log-SNR and
# whether the settings came from the tuned file (1) or not (0; e.g. the `_paper` rows).
PROTOCOL_COLUMNS = ["log_snr", "tuned"]
METRIC_COLUMNS = {
    "faces": ["FID", "sFID", "FVA", "FS", "MNAC", "CD", "COUT", "FR"],
    "xray": ["FID", "L1", "MAD", "S3", "FR"],
}
SYNTHETIC_COLUMNS = ["GT_L1", "GT_L1_region", "GT_precision", "GT_recall", "FR_oracle"]
# Floors printed beside GT_L1: the same numbers for the unedited input (not ranked).
FLOOR_COLUMNS = ["GT_L1_input", "GT_L1_region_input"]
# Directions of the columns a metrics.json may not declare (costs are always lower-is-better).
DEFAULT_HIGHER = {"FR": True, "FVA": True, "FS": True, "COUT": True, "MAD": True, "S3": True,
                  "FR_oracle": True, "GT_precision": True, "GT_recall": True, "mean_steps": False}
PRETTY = {"GT_L1_input": "GT_L1 (input)", "GT_L1_region_input": "GT_L1_region (input)",
          "S3": "S$^3$", "FR": "FR(%)", "sec_per_cf": "s/CF", "tflops_per_cf": "TFLOPs/CF",
          "nfe_per_cf": "NFE/CF", "peak_mem_mb": "Mem (MB)", "mean_steps": "steps", "log_snr": "log-SNR"}
METHOD_LABELS = {"fire": "FiRe", "dime": "DiME", "fastdime": "FastDiME", "fastdime2": "FastDiME-2",
                 "fastdime2plus": "FastDiME-2+", "maskdime": "MaskDiME"}


def method_label(m: str) -> str:
    """``fire`` -> ``FiRe``; a variant ``<method>_<variant>`` -> ``<Method> (<variant>)``."""
    from .tasks import split_method

    try:
        base, variant = split_method(m)
    except ValueError:
        return m
    label = METHOD_LABELS.get(base, base)
    return label if variant is None else f"{label} ({variant.replace('_', '-')})"


def task_columns(kind: str, synthetic: bool) -> list[str]:
    cols = list(METRIC_COLUMNS[kind])
    if synthetic:
        cols += SYNTHETIC_COLUMNS + FLOOR_COLUMNS
    return cols


def load_task_table(results: Path, task: str, methods: list[str], kind: str,
                    synthetic: bool) -> tuple[pd.DataFrame, dict[str, bool]]:
    """One row per method from ``results/<task>/<method>/{metrics,profile}.json``."""
    rows, higher = [], dict(DEFAULT_HIGHER)
    for m in methods:
        row: dict = {"method": m}
        mpath = results / task / m / "metrics.json"
        if mpath.exists():
            mj = json.loads(mpath.read_text())
            row.update(mj.get("metrics", {}))
            higher.update(mj.get("higher_is_better", {}))
            row["n"] = mj.get("n_inputs", mj.get("n", {}).get("FR") if isinstance(mj.get("n"), dict) else None)
            proto = mj.get("protocol") or {}
            row.update(log_snr=proto.get("log_snr"), tuned=None if not proto else int(bool(proto.get("tuned"))))
        ppath = results / task / m / "profile.json"
        if ppath.exists():
            pj = json.loads(ppath.read_text())
            row.update({c: pj.get(c) for c in COST_COLUMNS})
        rows.append(row)
    cols = ["method", "n"] + task_columns(kind, synthetic) + COST_COLUMNS + PROTOCOL_COLUMNS
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df:
            df[c] = np.nan
    for c in COST_COLUMNS:
        higher[c] = False
    for c in FLOOR_COLUMNS:
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


def _arrow(col: str, higher: dict[str, bool], tex: bool) -> str:
    if col not in higher:
        return ""
    if tex:
        return r"$\uparrow$" if higher[col] else r"$\downarrow$"
    return "↑" if higher[col] else "↓"


def to_markdown(df: pd.DataFrame, higher: dict[str, bool], title: str = "") -> str:
    cols = [c for c in df.columns if c != "n"]
    head = ["Method"] + [f"{PRETTY.get(c, c).replace('S$^3$', 'S³')}{_arrow(c, higher, False)}" for c in cols[1:]]
    lines = ([f"### {title}", ""] if title else []) + ["| " + " | ".join(head) + " |",
                                                        "|" + "---|" * len(head)]
    marks = {c: rank_marks(df[c], higher.get(c, False)) for c in cols[1:] if c in higher}
    for i, row in df.iterrows():
        cells = [method_label(row["method"])]
        for c in cols[1:]:
            s = _fmt(row[c])
            mk = marks.get(c, {}).get(i)
            cells.append(f"**{s}**" if mk == "best" else f"<u>{s}</u>" if mk == "second" else s)
        lines.append("| " + " | ".join(cells) + " |")
    if "n" in df and df["n"].notna().any():
        lines += ["", f"n = {', '.join(f'{method_label(m)}: {_fmt(n)}' for m, n in zip(df['method'], df['n']))}"]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    return s.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def to_latex(df: pd.DataFrame, higher: dict[str, bool], caption: str = "", label: str = "") -> str:
    """A booktabs table: best in bold, second underlined, arrows from each metric's direction."""
    cols = [c for c in df.columns if c != "n"]
    marks = {c: rank_marks(df[c], higher.get(c, False)) for c in cols[1:] if c in higher}
    head = ["Method"] + [_tex_escape(PRETTY.get(c, c)) if "$" not in PRETTY.get(c, "")
                         else PRETTY[c] for c in cols[1:]]
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
            cells.append(r"\textbf{" + s + "}" if mk == "best" else r"\underline{" + s + "}" if mk == "second"
                         else s)
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_task_tables(df: pd.DataFrame, higher: dict[str, bool], out_dir: Path, task: str) -> None:
    with atomic_path(out_dir / f"{task}.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")
    write_text(out_dir / f"{task}.md", to_markdown(df, higher, title=task))
    write_text(out_dir / f"{task}.tex", to_latex(df, higher, caption=f"vcebench results on {task}",
                                                  label=f"tab:{task}"))


# --- figures ---------------------------------------------------------------------------------------

def qualitative_figure(path: Path, inputs: np.ndarray, cfs: dict[str, np.ndarray], gt: np.ndarray | None = None,
                       ids: list[int] | None = None) -> None:
    """Rows = samples; columns = input, (GT CF), each method's CF and its |diff| map (paper Fig. 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = inputs.shape[0]
    cols = ["input"] + (["ground truth"] if gt is not None else []) + [c for m in cfs for c in (m, "|diff|")]
    fig, axes = plt.subplots(n, len(cols), figsize=(1.1 * len(cols), 1.15 * n + 0.4), squeeze=False)

    def show(ax, img, cmap=None):
        img = np.transpose(img, (1, 2, 0))
        if img.shape[2] == 1:
            img, cmap = img[..., 0], cmap or "gray"
        ax.imshow(img, cmap=cmap, vmin=0, vmax=255 if img.dtype == np.uint8 else None)

    for r in range(n):
        c = 0
        show(axes[r, c], inputs[r])
        c += 1
        if gt is not None:
            show(axes[r, c], gt[r])
            c += 1
        for arr in cfs.values():
            show(axes[r, c], arr[r])
            diff = np.abs(arr[r].astype(np.float32) - inputs[r].astype(np.float32)).sum(0)
            axes[r, c + 1].imshow(diff, cmap="inferno", vmin=0, vmax=max(diff.max(), 1))
            c += 2
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    for j, name in enumerate(cols):
        axes[0, j].set_title(method_label(name), fontsize=7)
    fig.tight_layout(pad=0.2)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def efficiency_figure(path: Path, df: pd.DataFrame, title: str = "") -> None:
    """(a) time per CF vs FID, marker size = peak memory; (b) FLOPs per CF (paper Fig. 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    mem = pd.to_numeric(df["peak_mem_mb"], errors="coerce").fillna(0).to_numpy()
    size = 40 + 400 * (mem / mem.max() if mem.max() > 0 else mem)
    x = pd.to_numeric(df["sec_per_cf"], errors="coerce")
    y = pd.to_numeric(df["FID"], errors="coerce")
    for i, m in enumerate(df["method"]):
        if pd.notna(x[i]) and pd.notna(y[i]):
            a.scatter(x[i], y[i], s=size[i], alpha=0.6)
            a.annotate(method_label(m), (x[i], y[i]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    a.set_xlabel("seconds per counterfactual")
    a.set_ylabel("FID")
    a.set_title("(a) time vs FID (size = peak memory)", fontsize=9)
    tf = pd.to_numeric(df["tflops_per_cf"], errors="coerce").fillna(0)
    b.bar([method_label(m) for m in df["method"]], tf)
    b.set_ylabel("TFLOPs per counterfactual")
    b.set_title("(b) compute per counterfactual", fontsize=9)
    b.tick_params(axis="x", rotation=45, labelsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
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
