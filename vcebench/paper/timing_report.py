"""The report of ``vcebench profile gpu`` (:func:`vcebench.paper.timing.run`): its progress lines, markdown
table (rows, the variants summary, each variant's network errors against fp32) and the files it writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.io import write_json, write_text
from .scale import PAPER_MINUTES_1000

PAPER_SEC_PER_CF = PAPER_MINUTES_1000 * 60 / 1000  # 0.382 s


def row_line(i: int, n: int, r: dict[str, Any], elapsed: float) -> str:
    """The progress line of row ``i`` of ``n`` (``elapsed`` seconds since the run started)."""
    if "error" in r:
        return f"[{i + 1}/{n}] {r['method']} {r['variant']} b{r['batch']}: ERROR {r['error']}  ({elapsed:.0f} s)"
    return (f"[{i + 1}/{n}] {r['method']:8s} {r['variant']:26s} b{r['batch']:<3d} es={int(r['early_stop'])} "
            f"{r['sec_per_cf']:.4f} s/CF [{r['sec_per_cf_min']:.4f}, {r['sec_per_cf_max']:.4f}]  "
            f"steps {r['mean_steps']:.1f}  {r['achieved_tflops_per_s']:.0f} TFLOP/s  "
            f"warm-up {r['warmup_seconds']:.1f} s  ({elapsed:.0f} s)")


def write_report(out: Path, report: dict[str, Any], name: str = "gpu_profile") -> None:
    """Write ``out/<name>.json`` and its table ``out/<name>.md`` (each atomically)."""
    write_json(out / f"{name}.json", report)
    write_text(out / f"{name}.md", format_markdown(report))


def format_markdown(r: dict[str, Any]) -> str:
    """The markdown report of a :func:`vcebench.paper.timing.run` report ``r``."""
    lines = [f"# FiRe and MaskDiME wall time at paper scale ({r['setting']} {r['resolution']} px, random weights)",
             "", f"Device: **{r['device']}**; torch {r['torch']}, CUDA {r['cuda']}, cuDNN {r.get('cudnn')}. "
             f"Paper (Fig. 2): 6.37 min per 1,000 CFs at batch 5 = {r['paper_sec_per_cf']:.3f} s/CF.", "",
             f"PMF: {r.get('pmf', 'unet')} (`released`: FiRe's released DiT backbone at this resolution). "
             "Produced by `vcebench profile gpu` (vcebench.paper.timing: variants, what random weights change). "
             "es = early stopping; FiRe with es=0 runs all K = 15 updates (upper bound). MaskDiME runs one "
             "classifier scale (8) here: 60 of 200 guided steps. TFLOPs/CF from the measured NFE x per-call FLOPs. "
             "s/CF is the median of the timed passes over the n inputs (after one warm-up batch), "
             "[min, max] their spread; +compile uses torch.compile mode "
             f"`{r.get('compile_mode')}` on every network call of both methods (vcebench.models.accelerate).",
             "", "| method | variant | batch | n | es | s/CF (median) | [min, max] | reps | vs paper | "
             "mean updates / steps | s/update | TFLOPs/CF | TFLOP/s | share of peak | peak GiB | edit diff vs fp32 | "
             "warm-up s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in r["rows"]:
        if "error" in row:
            lines.append(f"| {row['method']} | {row['variant']} | {row['batch']} | {row['n']} | | error: "
                         f"{row['error'][:120]} | | | | | | | | | | | |")
            continue
        spu = f"{row['sec_per_update']:.4f}" if "sec_per_update" in row else ""
        mem = f"{row['peak_mem_gib']:.1f}" if row.get("peak_mem_gib") is not None else ""
        ed = f"{row['edit_rel_diff_vs_fp32']:.2e}" if "edit_rel_diff_vs_fp32" in row else ""
        speedup = PAPER_SEC_PER_CF / row["sec_per_cf"]
        lines.append(f"| {row['method']} | {row['variant']} | {row['batch']} | {row['n']} | {int(row['early_stop'])} | "
                     f"{row['sec_per_cf']:.4f} | [{row['sec_per_cf_min']:.4f}, {row['sec_per_cf_max']:.4f}] | "
                     f"{row['repeats']} | {speedup:.1f}x | {row['mean_steps']:.1f} | "
                     f"{spu} | {row['tflops_per_cf']:.2f} | {row['achieved_tflops_per_s']:.0f} | {_share(row)} | "
                     f"{mem} | {ed} | "
                     f"{row['warmup_seconds']:.1f} |")
    lines += summary_lines(r)
    if r["errors"]:
        keys = list(next(iter(r["errors"].values())))
        lines += ["", "Relative L2 error of each network's output against fp32 (one random batch of 4):", "",
                  "| variant | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
        for var, e in r["errors"].items():
            lines.append(f"| {var} | " + " | ".join(f"{e[k]:.1e}" for k in keys) + " |")
    for sk in r.get("skipped", []):
        lines.append(f"\nSkipped: {sk['method']} {sk['variant']} b{sk['batch']} ({sk['why']}).")
    if "total_seconds" in r:
        lines.append(f"\nTotal wall time of the run: {r['total_seconds']:.0f} s.")
    return "\n".join(lines) + "\n"


def _share(row: dict[str, Any]) -> str:
    """A row's share of the device's peak FLOP rate, as a percentage (n/a: unknown peak)."""
    return f"{100 * row['share_of_peak']:.1f} %" if row.get("share_of_peak") is not None else "n/a"


def summary_lines(r: dict[str, Any]) -> list[str]:
    """The table of variants: per method, updates (FiRe: K, early stopping off) or scales (MaskDiME) and
    variant, s/CF at batch 5 and at the fastest batch measured, with its TFLOP/s and share of the peak."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in r["rows"]:
        if "error" not in row:
            what = f"{row['K']} updates" if row.get("K") else f"{row.get('mean_attempts') or 0:.0f} scale(s)"
            groups.setdefault((row["method"], what, row["variant"]), []).append(row)
    if not groups:
        return []
    lines = ["", "Variants (median s/CF at the smallest batch measured, the paper's 5 on a GPU, and at the fastest):",
             "", "| method | updates / scales | variant | smallest batch | s/CF there | fastest batch | s/CF there | "
             "TFLOP/s there | share of peak there |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for (method, what, variant), rows in groups.items():
        small = min(rows, key=lambda x: x["batch"])
        best = min(rows, key=lambda x: x["sec_per_cf"])
        lines.append(f"| {method} | {what} | {variant} | {small['batch']} | {small['sec_per_cf']:.4f} | "
                     f"{best['batch']} | {best['sec_per_cf']:.4f} | {best['achieved_tflops_per_s']:.1f} | "
                     f"{_share(best)} |")
    return lines
