"""Generative evaluation: how good the ``ddpm`` and ``pmf`` roles' images are.

Sharpness against real images, FID on a feature network, the share of classifier labels an estimate
keeps, sample grids, and the pmf quality gate (the one-step predictor against the DDPM's Tweedie
estimate). Each role's own evaluation (``ddpm.evaluate_ddpm``, ``pmf.evaluate_pmf``) is built from these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...core.frechet import feature_frechet_distance
from ...core.io import atomic_path
from .levels import REFERENCE_T_FLOW


def save_grid(images: Tensor, path: Path, nrow: int = 8) -> None:
    """Write [-1, 1] images as one PNG grid, atomically."""
    from torchvision.utils import save_image

    with atomic_path(path) as tmp:
        save_image((images.clamp(-1, 1) + 1) / 2, tmp, nrow=nrow, padding=1, format="png")


def high_frequency_energy(x: Tensor) -> Tensor:
    """Mean squared response to a 3x3 Laplacian, per image (a sharpness measure)."""
    k = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], dtype=x.dtype)
    k = k.reshape(1, 1, 3, 3).repeat(x.shape[1], 1, 1, 1)
    return F.conv2d(x, k, groups=x.shape[1]).pow(2).mean(dim=(1, 2, 3))


def sharpness_ratio(pred: Tensor, real: Tensor) -> float:
    """High-frequency energy of ``pred`` relative to real images: 1 = as sharp as the data,
    < 1 blurrier (Tweedie / MMSE estimates), > 1 noisier. A realism proxy until a FID is available."""
    return float(high_frequency_energy(pred).mean() / high_frequency_energy(real).mean().clamp_min(1e-12))


def batched(fn: Callable[[Tensor], Tensor], x: Tensor, batch_size: int = 128) -> Tensor:
    return torch.cat([fn(x[i:i + batch_size]) for i in range(0, x.shape[0], batch_size)])


def generative_quality(fake: Tensor, real: Tensor, feature_fn: Callable[[Tensor], Tensor] | None = None,
                       feature_name: str | None = None) -> dict[str, float | str]:
    """Realism of generated / predicted images vs real ones: sharpness ratio (always) and
    FID on ``feature_fn`` features (when given; its name travels with the number)."""
    out: dict[str, float | str] = {"sharpness_ratio": sharpness_ratio(fake, real)}
    if feature_fn is not None:
        with torch.no_grad():
            out["fid"] = feature_frechet_distance(batched(feature_fn, fake), batched(feature_fn, real))
        out["fid_features"] = feature_name or getattr(feature_fn, "name", type(feature_fn).__name__)
    return out


def predicted_labels(classifiers: dict[str, Callable[[Tensor], Tensor]], x: Tensor) -> dict[str, Tensor]:
    """Per attribute, the predicted label (argmax of the 2 logits) of every image of ``x``."""
    return {attr: batched(lambda xx, f=f: f(xx).argmax(1, keepdim=True).float(), x)
            for attr, f in classifiers.items()}


def label_kept(classifiers: dict[str, Callable[[Tensor], Tensor]], pred: Tensor,
               ref_labels: dict[str, Tensor]) -> dict[str, float]:
    """Per attribute, the share of images of ``pred`` predicted as in ``ref_labels``
    (:func:`predicted_labels` of the reference images)."""
    return {attr: float((lab == ref_labels[attr]).float().mean())
            for attr, lab in predicted_labels(classifiers, pred).items()}


def with_fire_t(t_flow, fire_t: dict[str, float] | None) -> tuple[float, ...]:
    """The flow times a PMF is evaluated at for its gate: ``t_flow`` and each task's FiRe level, ascending."""
    return tuple(sorted(set(t_flow) | set((fire_t or {}).values())))


LABEL_MARGIN = 0.02  # the PMF may keep up to 2 points fewer labels than the DDPM's Tweedie estimate


def gate(m: dict, t_key: str = f"t{REFERENCE_T_FLOW:g}", fire_t: dict[str, float] | None = None) -> dict[str, Any]:
    """The pmf quality gate (needs the ddpm comparison), one definition wherever it is measured (training,
    ``vcebench models check``, training curves); ``checks`` lists what ``passed`` requires (every check the
    evaluation measured), ``failed`` the checks that did not pass.

    - ``mse_within_2x``: one-step MSE of G(z_t, t) at most twice the DDPM's Tweedie MSE at t = 0.4.
    - ``label_kept_vs_tweedie``: at each task's operating noise (``fire_t``: {attribute: the
      task's FiRe t}; else t = 0.4), G keeps the classifier's label at least as often as the DDPM's
      Tweedie (MMSE) estimate from the same noise, less :data:`LABEL_MARGIN`. Tweedie's rate is what
      the noise itself leaves of the label, so an absolute bar (the old ``label_kept_95``, still
      reported) cannot be met at 32 px by any denoiser.
    - ``fid_lower``: FID of G(z_0.4) below Tweedie's (measured with a feature network).
    """
    row = m["predict_clean"].get(t_key, {})
    if "ddpm_tweedie" not in row:
        return {"evaluated": False, "why": "no ddpm given (train_pmf(..., reference_ddpm=...))"}
    tw = row["ddpm_tweedie"]
    ratio = row["mse_ratio_vs_tweedie"]
    out = {"evaluated": True, "mse_ratio_vs_tweedie": ratio, "mse_within_2x": ratio <= 2.0,
           "sharpness_ratio_pmf": row["sharpness_ratio"], "sharpness_ratio_tweedie": tw["sharpness_ratio"],
           "sharper_than_tweedie": abs(math.log(row["sharpness_ratio"])) < abs(math.log(tw["sharpness_ratio"]))}
    if "fid" in row:
        out.update(fid_pmf=row["fid"], fid_tweedie=tw["fid"], fid_lower=row["fid"] < tw["fid"])
    if "label_kept" in row:
        out.update(label_kept=row["label_kept"], label_kept_95=min(row["label_kept"].values()) >= 0.95)
        if "label_kept" in tw:
            out["label_kept_tweedie"] = tw["label_kept"]
    if fire_t:
        at = {}
        for attr, tf in fire_t.items():
            r = m["predict_clean"].get(f"t{tf:g}", {})
            if attr in r.get("label_kept", {}):
                at[attr] = {"t": tf, "pmf": r["label_kept"][attr],
                            "tweedie": r.get("ddpm_tweedie", {}).get("label_kept", {}).get(attr)}
        out["label_kept_at_fire_t"] = at
    versus = out.get("label_kept_at_fire_t") or {
        a: {"t": REFERENCE_T_FLOW, "pmf": v, "tweedie": out.get("label_kept_tweedie", {}).get(a)}
        for a, v in out.get("label_kept", {}).items()}
    versus = {a: v for a, v in versus.items() if v.get("tweedie") is not None}
    if versus:
        out["label_margin"] = LABEL_MARGIN
        out["label_kept_vs_tweedie"] = all(v["pmf"] >= v["tweedie"] - LABEL_MARGIN - 1e-12 for v in versus.values())
    checks = [k for k in ("mse_within_2x", "label_kept_vs_tweedie", "fid_lower") if k in out]
    out["passed"] = all(out[k] for k in checks)
    out["checks"] = checks
    out["failed"] = [k for k in checks if not out[k]]
    return out


def write_pmf_grids(grids: dict[str, Tensor], out_dir: Path) -> None:
    """``samples.png`` (1-step from t = 1) and ``predict_t0.4.png`` (rows: real, z_t, G, [Tweedie], h=0)."""
    save_grid(grids["samples"], out_dir / "samples.png")
    if "t0.4_pred" in grids:
        rows = [grids["real"], grids["t0.4_noisy"], grids["t0.4_pred"]]
        if "t0.4_tweedie" in grids:
            rows.append(grids["t0.4_tweedie"])
        rows.append(grids["t0.4_h0"])
        save_grid(torch.cat([r[:8] for r in rows]), out_dir / "predict_t0.4.png", nrow=8)
