"""Quality-vs-cost Pareto fronts of a budget / noise-level sweep (``snakemake pareto``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.io import atomic_path
from .tables import direction_arrow, method_label

PARETO_QUALITY = ["KID", "FID", "FVA", "FR_oracle", "GT_L1_region"]
COSTS = ("tflops_per_cf", "sec_per_cf")


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
    _cost_figure(plt, path, df, higher, title, quality, colors)
    _snr_figure(plt, snr_path, df, higher, title, quality, colors)


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _cost_figure(plt, path: Path, df: pd.DataFrame, higher: dict[str, bool], title: str, quality: list[str],
                 colors: dict) -> None:
    """Each quality column (rows) against each cost (columns), the budget sweep's points, the front circled."""
    fig, axes = plt.subplots(len(quality), 2, figsize=(9, 2.6 * len(quality)), squeeze=False)
    sub = df[df["sweep"].isin(["budget", "default"])]
    for r, qcol in enumerate(quality):
        for c, cost in enumerate(COSTS):
            ax = axes[r, c]
            x, y = pd.to_numeric(sub[cost], errors="coerce"), pd.to_numeric(sub[qcol], errors="coerce")
            for b, color in colors.items():
                m = (sub["base"] == b).to_numpy()
                order = np.argsort(x[m].to_numpy())
                ax.plot(x[m].to_numpy()[order], y[m].to_numpy()[order], "o-", color=color, label=method_label(b),
                        ms=4, lw=1)
            front = pareto_front(x.to_numpy(), y.to_numpy(), higher.get(qcol, False))
            if front.any():
                fx, fy = x.to_numpy()[front], y.to_numpy()[front]
                o = np.argsort(fx)
                ax.plot(fx[o], fy[o], "-", color="k", lw=2, alpha=0.3, zorder=0)
                ax.scatter(fx, fy, s=90, facecolors="none", edgecolors="k", lw=1.2, zorder=3, label="front")
            ax.set_xscale("log")
            ax.set_xlabel("TFLOPs per CF" if cost == "tflops_per_cf" else "seconds per CF", fontsize=8)
            ax.set_ylabel(f"{qcol} {direction_arrow(qcol, higher, False)}", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle(f"{title}: quality vs cost (the same budgets for every method: FiRe's K, the DDPM baselines' "
                 "guided steps, ACE's attack iterations; each at its starting SNR)", fontsize=9)
    _save(plt, fig, path)


def _snr_figure(plt, path: Path, df: pd.DataFrame, higher: dict[str, bool], title: str, quality: list[str],
                colors: dict) -> None:
    """Each quality column against the starting log-SNR of the noise-level sweep."""
    fig, axes = plt.subplots(1, len(quality), figsize=(3.2 * len(quality), 3.0), squeeze=False)
    sub = df[df["sweep"].isin(["snr", "default"])]
    for j, qcol in enumerate(quality):
        ax = axes[0, j]
        for b, color in colors.items():
            m = sub["base"] == b
            x = pd.to_numeric(sub.loc[m, "log_snr"], errors="coerce").to_numpy()
            y = pd.to_numeric(sub.loc[m, qcol], errors="coerce").to_numpy()
            o = np.argsort(x)
            ax.plot(x[o], y[o], "o-", color=color, label=method_label(b), ms=4, lw=1)
        ax.set_xlabel("starting log-SNR", fontsize=8)
        ax.set_ylabel(f"{qcol} {direction_arrow(qcol, higher, False)}", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{title}: quality vs starting log-SNR (default budget)", fontsize=9)
    _save(plt, fig, path)
