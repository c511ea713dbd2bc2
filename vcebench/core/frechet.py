"""The Fréchet distance between two Gaussians (FID, Heusel et al. 2017): the one implementation.

``metrics.fid`` (FID / sFID of counterfactuals), ``vcebench.models.synthetic.fid_features`` (the fid_features
sensitivity checks) and ``vcebench.models.generative.ddpm`` / ``pmf`` (sample quality) all call this module; it
imports only NumPy, SciPy and torch, so both packages can import it without an import circle.

``||mu1 - mu2||^2 + Tr(sigma1 + sigma2 - 2 sqrt(sigma1 sigma2))`` as pytorch-fid / clean-fid compute it:
``scipy.linalg.sqrtm`` of the product, ``eps`` added to both diagonals only when that square root is
not finite, the imaginary part dropped when it is numerically zero. :func:`sqrtm` never passes
``disp`` (deprecated in SciPy 1.16 and removed in 1.18) and accepts both return conventions (a
complex or a real array; a ``(root, error)`` pair), so the same code runs on every SciPy in
pyproject.toml's range.
"""

from __future__ import annotations

import numpy as np

FRECHET_METHODS = ("sqrtm", "eigvals")


class FrechetError(ValueError):
    """Statistics that have no Fréchet distance (mismatched dimensions, a complex square root)."""


def sqrtm(a: np.ndarray) -> np.ndarray:
    """Principal matrix square root (``scipy.linalg.sqrtm`` without the removed ``disp`` argument)."""
    from scipy import linalg

    out = linalg.sqrtm(a)
    if isinstance(out, tuple):  # (root, error estimate), as with disp=False
        out = out[0]
    return np.asarray(out)


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray,
                     eps: float = 1e-6, method: str = "sqrtm") -> float:
    """Fréchet distance of N(mu1, sigma1) and N(mu2, sigma2), in float64.

    ``method="sqrtm"``: pytorch-fid / clean-fid (``scipy.linalg.sqrtm``); ``"eigvals"``: torchmetrics
    (``Tr sqrt(A) = sum sqrt(eig(A))``, ~3x faster at D = 2048, equal to ~1e-12 when the covariances
    are well conditioned; config key ``metrics.frechet_method``).
    """
    mu1, mu2 = np.atleast_1d(mu1).astype(np.float64), np.atleast_1d(mu2).astype(np.float64)
    sigma1, sigma2 = np.atleast_2d(sigma1).astype(np.float64), np.atleast_2d(sigma2).astype(np.float64)
    if mu1.shape != mu2.shape or sigma1.shape != sigma2.shape:
        raise FrechetError(f"feature statistics differ in dimension: {mu1.shape} vs {mu2.shape}")
    diff = mu1 - mu2
    if method == "eigvals":
        import torch

        ev = torch.linalg.eigvals(torch.from_numpy(sigma1 @ sigma2)).sqrt().real.sum().item()
        return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2 * ev)
    if method != "sqrtm":
        raise FrechetError(f"unknown Frechet distance method {method!r} (config key `metrics.frechet_method`); "
                           f"known: {', '.join(FRECHET_METHODS)}")
    covmean = sqrtm(sigma1 @ sigma2)
    if not np.isfinite(covmean).all():
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = sqrtm((sigma1 + offset) @ (sigma2 + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise FrechetError(f"FID: sqrtm has an imaginary component of {np.abs(covmean.imag).max():.3g}")
        covmean = covmean.real
    return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean))


def feature_frechet_distance(feat_a, feat_b, method: str = "sqrtm") -> float:
    """Fréchet distance of Gaussians fitted to two feature sets (N x D tensors or arrays): mean and
    unbiased covariance (ddof = 1, ``np.cov`` as pytorch-fid)."""
    a = np.asarray(feat_a.detach().cpu().double() if hasattr(feat_a, "detach") else feat_a, np.float64)
    b = np.asarray(feat_b.detach().cpu().double() if hasattr(feat_b, "detach") else feat_b, np.float64)
    return frechet_distance(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False),
                            method=method)
