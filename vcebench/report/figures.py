"""The figures of a task: qualitative grid, efficiency plot and a gallery per method (PNG, matplotlib).

Every |diff| map is the per-pixel mean over channels of ``|a - b|`` in [0, 1] units (uint8 / 255), drawn
on one colour scale per figure (the gallery: one scale shared by all methods of a task), with a colour
bar, so that a brighter pixel means a larger change wherever it appears.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.io import atomic_path
from .tables import method_label

DIFF_CMAP = "inferno"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int = 110) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    _plt().close(fig)


def abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-pixel mean over channels of |a - b| in [0, 1] units; uint8 ... x C x H x W -> ... x H x W."""
    return np.abs(a.astype(np.float32) - b.astype(np.float32)).mean(-3) / 255.0


def diff_scale(*diffs: np.ndarray | None, q: float = 99.5) -> float:
    """The shared upper end of the |diff| colour scale: the ``q``-th percentile of all given maps (at
    least 1/255, so that an unchanged image stays black)."""
    vals = [d.ravel() for d in diffs if d is not None and d.size]
    if not vals:
        return 1.0
    return max(float(np.percentile(np.concatenate(vals), q)), 1 / 255)


def _show(ax, img: np.ndarray) -> None:
    img = np.transpose(img, (1, 2, 0))
    if img.shape[2] == 1:
        ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=255)
    else:
        ax.imshow(img)


def _blank(ax) -> None:
    ax.set_xticks([])
    ax.set_yticks([])


def _mark(ax, flipped: bool) -> None:
    """A tick (flipped) or a cross (not flipped) in the image's top-right corner."""
    ax.text(0.97, 0.95, "\u2713" if flipped else "\u2717", transform=ax.transAxes, ha="right", va="top",
            fontsize=9, fontweight="bold", color="white",
            bbox={"boxstyle": "round,pad=0.1", "fc": "#1a9850" if flipped else "#d73027", "ec": "none"})


def qualitative_figure(path: Path, inputs: np.ndarray, cfs: dict[str, np.ndarray], gt: np.ndarray | None = None,
                       ids: list[int] | None = None, flipped: dict[str, np.ndarray] | None = None) -> None:
    """Rows = samples; columns = input, (ground truth, |GT - input|), each method's CF (with a flipped
    (tick) / not flipped (cross) mark) and |CF - input|; every |diff| on one scale, with a colour bar."""
    plt = _plt()
    n = inputs.shape[0]
    gt_diff = abs_diff(gt, inputs) if gt is not None else None
    diffs = {m: abs_diff(c, inputs) for m, c in cfs.items()}
    vmax = diff_scale(gt_diff, *diffs.values())
    cols = ["input"] + (["ground truth", "|GT - input|"] if gt is not None else [])
    cols += [c for m in cfs for c in (method_label(m), "|diff|")]
    fig, axes = plt.subplots(n, len(cols), figsize=(1.05 * len(cols) + 0.7, 1.1 * n + 0.5), squeeze=False)
    im = None
    for r in range(n):
        c = 0
        _show(axes[r, c], inputs[r])
        if ids is not None:
            axes[r, c].set_ylabel(f"id {ids[r]}", fontsize=6)
        c += 1
        if gt is not None:
            _show(axes[r, c], gt[r])
            im = axes[r, c + 1].imshow(gt_diff[r], cmap=DIFF_CMAP, vmin=0, vmax=vmax)
            c += 2
        for m, arr in cfs.items():
            _show(axes[r, c], arr[r])
            if flipped is not None and m in flipped:
                _mark(axes[r, c], bool(flipped[m][r]))
            im = axes[r, c + 1].imshow(diffs[m][r], cmap=DIFF_CMAP, vmin=0, vmax=vmax)
            c += 2
    for ax in axes.ravel():
        _blank(ax)
    for j, name in enumerate(cols):
        axes[0, j].set_title(name, fontsize=7)
    bottom = 0.22 / fig.get_figheight() if flipped is not None else 0.0
    fig.tight_layout(pad=0.2, rect=(0, bottom, 1 - 0.6 / fig.get_figwidth(), 1))
    cax = fig.add_axes((1 - 0.5 / fig.get_figwidth(), 0.1, 0.12 / fig.get_figwidth(), 0.8))
    cb = fig.colorbar(im, cax=cax)
    cb.set_label("|diff| (mean over channels, [0, 1])", fontsize=6)
    cb.ax.tick_params(labelsize=6)
    if flipped is not None:
        fig.text(0.005, 0.02 / fig.get_figheight(), "\u2713 flipped   \u2717 not flipped (the task's classifier)",
                 fontsize=7, va="bottom")
    _save(fig, path)


def _mem_legend_values(mem: np.ndarray) -> list[float]:
    """Up to three round peak-memory values spanning the measured range (the size legend's entries)."""
    mem = mem[np.isfinite(mem) & (mem > 0)]
    if not len(mem):
        return []
    vals = sorted({float(f"{v:.2g}") for v in (mem.min(), np.median(mem), mem.max())})
    return [v for v in vals if v > 0]


def efficiency_figure(path: Path, df: pd.DataFrame, title: str = "") -> None:
    """(a) time per CF vs FID, marker area proportional to peak memory (with a size legend);
    (b) GFLOPs per CF (paper Fig. 2)."""
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    mem = pd.to_numeric(df["peak_mem_mb"], errors="coerce").to_numpy(dtype=float)
    top = np.nanmax(mem) if np.isfinite(mem).any() and np.nanmax(mem) > 0 else 1.0

    def size(m):
        return 40 + 400 * np.nan_to_num(m, nan=0.0) / top

    x = pd.to_numeric(df["sec_per_cf"], errors="coerce").to_numpy(dtype=float)
    y = pd.to_numeric(df["FID"], errors="coerce").to_numpy(dtype=float)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, m in enumerate(df["method"]):
        if np.isfinite(x[i]) and np.isfinite(y[i]):
            a.scatter(x[i], y[i], s=size(mem[i]), alpha=0.6, color=colors[i % len(colors)])
            a.annotate(method_label(m), (x[i], y[i]), fontsize=7, xytext=(5, 5), textcoords="offset points")
    handles = [a.scatter([], [], s=size(v), color="grey", alpha=0.4, label=f"{v:g} MB")
               for v in _mem_legend_values(mem)]
    if handles:
        a.legend(handles=handles, title="peak memory", fontsize=7, title_fontsize=7, labelspacing=1.3,
                 borderpad=0.9, loc="best", frameon=True)
    finite = x[np.isfinite(x) & (x > 0)]
    if len(finite) > 1 and finite.max() / finite.min() > 20:
        a.set_xscale("log")
    a.set_xlabel("seconds per counterfactual" + (" (log scale)" if a.get_xscale() == "log" else ""))
    a.set_ylabel("FID (lower is better)")
    a.set_title("(a) time vs FID (marker area = peak memory)", fontsize=9)
    a.margins(0.25)
    if a.get_xscale() == "linear":
        a.set_xlim(left=0)
    gf = pd.to_numeric(df["tflops_per_cf"], errors="coerce").to_numpy(dtype=float) * 1e3
    labels = [method_label(m) for m in df["method"]]
    bars = b.bar(labels, np.nan_to_num(gf, nan=0.0), color=[colors[i % len(colors)] for i in range(len(df))])
    for rect, v in zip(bars, gf):
        b.annotate("n/a" if not np.isfinite(v) else f"{v:.3g}", (rect.get_x() + rect.get_width() / 2,
                   rect.get_height()), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                   textcoords="offset points")
    b.set_ylabel("GFLOPs per counterfactual")
    b.set_title("(b) compute per counterfactual (2 x MACs, fwd + bwd)", fontsize=9)
    b.tick_params(axis="x", rotation=45, labelsize=7)
    b.margins(y=0.15)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _save(fig, path)


def _rgb(img: np.ndarray) -> np.ndarray:
    """uint8 C x H x W (C = 1 or 3) -> float H x W x 3 in [0, 1]."""
    img = np.transpose(img, (1, 2, 0)).astype(np.float32) / 255.0
    return np.repeat(img, 3, axis=2) if img.shape[2] == 1 else img


def gallery_figure(path: Path, method: str, inputs: np.ndarray, cf: np.ndarray, p_before: np.ndarray,
                   p_after: np.ndarray, target: np.ndarray, flipped: np.ndarray, vmax: float,
                   gt: np.ndarray | None = None, ids: list[int] | None = None, class_names=("0", "1")) -> None:
    """One method's counterfactuals, one sample per row: input, CF, (ground truth), |CF - input|,
    (|GT - input|) on the scale ``[0, vmax]`` (shared by all galleries of a task, colour bar), and the
    classifier's probability of the target class before (input) and after (CF).

    Drawn as one image (the tiles side by side, nearest-neighbour) in one axes with text labels: a grid of
    axes costs matplotlib about 3 s per figure, and a task has a gallery per method."""
    plt = _plt()
    from matplotlib import cm, colors

    n, h, w = inputs.shape[0], inputs.shape[-2], inputs.shape[-1]
    cols = ["input", "counterfactual"] + (["ground truth"] if gt is not None else []) + ["|CF - input|"]
    cols += ["|GT - input|"] if gt is not None else []
    cmap = plt.get_cmap(DIFF_CMAP)
    d_cf = abs_diff(cf, inputs)
    d_gt = abs_diff(gt, inputs) if gt is not None else None
    pad, label = max(1, h // 16), max(4, h // 4)  # white gap between tiles, room for the label under each tile
    cell_h, cell_w = h + label + pad, w + pad
    mosaic = np.ones((n * cell_h + pad, len(cols) * cell_w + pad, 3), np.float32)
    texts = []  # (x, y, text, kwargs) in pixels of the mosaic
    for r in range(n):
        tname = class_names[int(target[r])]
        tiles = [(_rgb(inputs[r]), f"p({tname}) = {p_before[r]:.2f}"), (_rgb(cf[r]), f"p({tname}) = {p_after[r]:.2f}")]
        if gt is not None:
            tiles.append((_rgb(gt[r]), ""))
        tiles.append((cmap(np.clip(d_cf[r] / vmax, 0, 1))[..., :3], f"mean {d_cf[r].mean():.3f}"))
        if gt is not None:
            tiles.append((cmap(np.clip(d_gt[r] / vmax, 0, 1))[..., :3], f"mean {d_gt[r].mean():.3f}"))
        y0 = pad + r * cell_h
        for c, (tile, text) in enumerate(tiles):
            x0 = pad + c * cell_w
            mosaic[y0:y0 + h, x0:x0 + w] = tile
            if text:
                texts.append((x0 + w / 2, y0 + h + label / 2, text, {"ha": "center", "va": "center", "fontsize": 6}))
        ok = bool(flipped[r])
        texts.append((pad + 2 * cell_w - pad - 1, y0 + 1, "\u2713" if ok else "\u2717",
                      {"ha": "right", "va": "top", "fontsize": 8, "fontweight": "bold", "color": "white",
                       "bbox": {"boxstyle": "round,pad=0.1", "fc": "#1a9850" if ok else "#d73027", "ec": "none"}}))
        if ids is not None:
            texts.append((pad - 1, y0 + h / 2, f"id {ids[r]}", {"ha": "right", "va": "center", "fontsize": 6,
                                                                  "rotation": 90}))
    scale = 1.3 / w  # inches per tile pixel
    fig_w, fig_h = mosaic.shape[1] * scale + 1.2, mosaic.shape[0] * scale + 0.8
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0.35 / fig_w, 0.1 / fig_h, mosaic.shape[1] * scale / fig_w, mosaic.shape[0] * scale / fig_h))
    ax.imshow(mosaic, interpolation="nearest")
    ax.set_axis_off()
    for j, name in enumerate(cols):
        ax.text(pad + j * cell_w + w / 2, -pad, name, ha="center", va="bottom", fontsize=7)
    for x, y, text, kw in texts:
        ax.text(x, y, text, **kw)
    fig.suptitle(f"{method_label(method)}: p(target) before -> after; \u2713 flipped \u2717 not flipped",
                 fontsize=8, y=1 - 0.08 / fig_h, va="top")
    cax = fig.add_axes((1 - 0.6 / fig_w, 0.1, 0.12 / fig_w, 0.78))
    cb = fig.colorbar(cm.ScalarMappable(norm=colors.Normalize(0, vmax), cmap=cmap), cax=cax)
    cb.set_label("|diff| ([0, 1]; same scale for every method)", fontsize=6)
    cb.ax.tick_params(labelsize=6)
    _save(fig, path)


def cd_figure(path: Path, mean_ranks: pd.Series, cd: float, groups: list[list[str]], n_blocks: int) -> None:
    """A critical-difference diagram (Demšar 2006, Fig. 1): the methods on a mean-rank axis (1 = best, left), the
    critical difference as a bar above it, and a thick line under each group no test separates."""
    plt = _plt()
    r = mean_ranks.sort_values()
    k = max(len(r), 2)
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.3 * len(r)))
    ax.set_xlim(-1.2, k + 2.2)
    ax.set_ylim(-1.2 - 0.3 * len(r), 1.6)
    ax.axis("off")
    ax.hlines(0, 1, k, color="k", lw=1)
    for t in range(1, k + 1):
        ax.vlines(t, 0, 0.12, color="k", lw=1)
        ax.text(t, 0.2, str(t), ha="center", va="bottom", fontsize=8)
    if np.isfinite(cd) and len(r):
        ax.hlines(1.1, 1, 1 + cd, color="tab:red", lw=2)
        ax.text(1 + cd / 2, 1.2, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8, color="tab:red")
    for i, (m, v) in enumerate(r.items()):
        y, right = -0.5 - 0.3 * i, i >= len(r) / 2  # the better half labelled left, the other right
        ax.vlines(v, y, 0, color="0.4", lw=0.8)
        ax.hlines(y, v, k + 0.1 if right else 0.9, color="0.4", lw=0.8)
        ax.text(k + 0.15 if right else 0.85, y, f"{method_label(m)} ({v:.2f})", va="center",
                ha="left" if right else "right", fontsize=8)
    for j, g in enumerate(groups):
        ax.hlines(-0.15 - 0.12 * j, r[g].min() - 0.03, r[g].max() + 0.03, color="k", lw=3)
    ax.set_title(f"Mean rank over {n_blocks} blocks (task x column); bars: groups within the critical difference"
                 if len(r) else "No method is in every block: no mean ranks", fontsize=9)
    _save(fig, path)
