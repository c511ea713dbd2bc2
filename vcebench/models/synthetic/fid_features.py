"""The synthetic ``fid_features`` extractor ("fidnet"), the synthetic stand-in for Inception pool3.

A VGG-style CNN with a 128-d linear bottleneck, trained (different seed, width, data and objective than the
explained classifier) on two tasks from the bottleneck: every attribute of the dataset (BCE)
and the strength of a random degradation applied to half of each batch (Gaussian blur sigma and
noise std, regressed). The second task makes the features respond to image quality as
Inception features do (a pure attribute classifier is blur-invariant, so FID could not tell a
blurry Tweedie estimate from a sharp sample). The name, e.g. ``synthfaces-fidnet-v1 (trained,
128-d)``, travels with every FID number. ``metrics.json`` records FID(train, test) for clean,
blurred and noisy test images as a sensitivity check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core.frechet import feature_frechet_distance as frechet_distance
from ...core.io import from_uint8
from ..checkpoints import save_trained
from .augment import gaussian_blur
from .classifier import fit_attributes


class DegradationHead(nn.Module):
    """Regresses (blur sigma / max_blur, noise std / max_noise) from the bottleneck; training only."""

    def __init__(self, dim: int):
        super().__init__()
        self.lin = nn.Linear(dim, 2)

    def forward(self, f: Tensor) -> Tensor:
        return self.lin(f)


def degradation_loss(max_blur: float, max_noise: float):
    """BCE on attributes + MSE on the degradation strengths, on a randomly degraded copy of the batch."""
    def loss(net: nn.Module, head: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        n = x.shape[0]
        sb = torch.rand(n) * max_blur * (torch.rand(n) < 0.5)
        sn = torch.rand(n) * max_noise * (torch.rand(n) < 0.5)
        xd = (gaussian_blur(x, sb) + sn.view(n, 1, 1, 1) * torch.randn_like(x)).clamp(-1, 1)
        f = net.features(xd.contiguous(memory_format=torch.channels_last))
        target = torch.stack([sb / max_blur, sn / max_noise], dim=1)
        return F.mse_loss(head(f), target) + F.binary_cross_entropy_with_logits(net.head(f), y)
    return loss


def shuffle_patches(x: Tensor, p: int, g: torch.Generator) -> Tensor:
    """Each image's ``p`` x ``p`` patches in a random order (colours and local texture kept, layout lost)."""
    n, c, h, w = x.shape
    tiles = x.unfold(2, p, p).unfold(3, p, p).reshape(n, c, (h // p) * (w // p), p, p)
    perm = torch.stack([torch.randperm(tiles.shape[2], generator=g) for _ in range(n)])
    tiles = tiles[torch.arange(n)[:, None], :, perm].permute(0, 2, 1, 3, 4)
    k = h // p
    return tiles.reshape(n, c, k, k, p, p).permute(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


@torch.no_grad()
def extract(net: nn.Module, x: Tensor, batch: int = 256) -> Tensor:
    net.eval()
    return torch.cat([net.features(x[i:i + batch]) for i in range(0, x.shape[0], batch)])


def train_fid_features(settings: dict, splits: dict, out_dir: str | Path, *, dataset: str,
                       task_attributes: list[str], progress: bool = True, **_: Any) -> dict[str, Any]:
    net, config, metrics = fit_attributes(
        settings, splits, out_dir, role="fid_features", dataset=dataset, task_attributes=task_attributes,
        progress=progress, extra_loss=degradation_loss(settings["max_blur"], settings["max_noise"]),
        extra_module=DegradationHead, key_prefix=f"models.{dataset}.fid_features", embed_dim=settings["embed_dim"])
    name = f"{dataset}-fidnet-v1"
    config["name"] = name
    config["feature_dim"] = settings["embed_dim"]
    train, test = splits["train"], splits["test"]
    n = min(2000, train.images.shape[0], test.images.shape[0])
    xr, xt = from_uint8(train.images[:n]), from_uint8(test.images[:n])
    g = torch.Generator().manual_seed(0)
    fr = extract(net, xr)
    checks = {
        "clean": frechet_distance(fr, extract(net, xt)),
        # structure destroyed, colours kept (what an undertrained generator draws): must be far from real
        "patches_shuffled_8px": frechet_distance(fr, extract(net, shuffle_patches(xt, 8, g))),
        "blur_sigma_1.0": frechet_distance(fr, extract(net, gaussian_blur(xt, torch.full((n,), 1.0)))),
        "noise_std_0.1": frechet_distance(
            fr, extract(net, (xt + 0.1 * torch.randn(xt.shape, generator=g)).clamp(-1, 1))),
    }
    metrics.update({"name": name, "feature_dim": settings["embed_dim"], "fid_train_vs_test": checks,
                    "n_fid": n, "sensitive_to_degradation": checks["clean"] < min(
                        checks["blur_sigma_1.0"], checks["noise_std_0.1"], checks["patches_shuffled_8px"])})
    save_trained(out_dir, net, config, metrics)
    return metrics
