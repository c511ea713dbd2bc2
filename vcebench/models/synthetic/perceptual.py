"""The ``perceptual`` role: an LPIPS-like distance ``perceptual(x, y) -> (N,)``.

Synthetic data: the encoder of a small denoising autoencoder trained on that data (never a
random backbone). The distance follows LPIPS (Zhang et al. 2018, Eq. 1) without the learned
channel weights: channel-normalised feature differences, squared, summed over channels,
averaged over space, then averaged over the encoder's three scales.
Real data: see :mod:`vcebench.models.released.canonical` (LPIPS from the lpips package, or DiME's
VGG19 ``features[:18]`` MSE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core.io import from_uint8
from ..checkpoints import save_trained
from ..training.loops import count_params, loss_summary, train_loop
from .augment import augment, gaussian_blur
from .nets import AutoEncoder, normalize_channels, sequential_maps


class FeatureDistance(nn.Module):
    """LPIPS-style distance on the feature maps of ``backbone.feature_maps(x)`` (a list of N x C x H x W)."""

    def __init__(self, backbone: nn.Module, name: str = ""):
        super().__init__()
        self.backbone, self.name = backbone, name

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        fx, fy = self.backbone.feature_maps(x), self.backbone.feature_maps(y)
        d = [((normalize_channels(a) - normalize_channels(b)) ** 2).sum(1).mean(dim=(1, 2)) for a, b in zip(fx, fy)]
        return torch.stack(d, dim=0).mean(0)


class EncoderOnly(nn.Module):
    """The encoder half of :class:`AutoEncoder` (what the perceptual distance needs at inference)."""

    def __init__(self, ae: AutoEncoder):
        super().__init__()
        self.enc = ae.enc

    def feature_maps(self, x: Tensor) -> list[Tensor]:
        return sequential_maps(self.enc, x)


@torch.no_grad()
def sanity(dist: FeatureDistance, images_uint8: Tensor, n: int = 256) -> dict[str, Any]:
    """Distance grows with distortion strength, and a mild distortion is closer than another image."""
    g = torch.Generator().manual_seed(0)
    x = from_uint8(images_uint8[:n])
    other = x.roll(1, dims=0)
    out: dict[str, Any] = {"noise": {}, "blur": {}}
    for s in (0.02, 0.05, 0.1, 0.2):
        out["noise"][str(s)] = float(dist(x, (x + s * torch.randn(x.shape, generator=g)).clamp(-1, 1)).mean())
    for s in (0.5, 1.0, 2.0):
        out["blur"][str(s)] = float(dist(x, gaussian_blur(x, torch.full((x.shape[0],), s))).mean())
    d_other = dist(x, other)
    d_mild = dist(x, (x + 0.05 * torch.randn(x.shape, generator=g)).clamp(-1, 1))
    out["other_image"] = float(d_other.mean())
    out["2afc_mild_noise_closer_than_other_image"] = float((d_mild < d_other).float().mean())
    out["monotone"] = all(list(v.values()) == sorted(v.values()) for v in (out["noise"], out["blur"]))
    return out


def train_perceptual(settings: dict, splits: dict, out_dir: str | Path, *, dataset: str, progress: bool = True,
                     **_: Any) -> dict[str, Any]:
    train = splits["train"]
    images, c = train.images, train.images.shape[1]
    torch.manual_seed(settings["seed"])
    ae = AutoEncoder(c, settings["width"]).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(ae.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"])

    def step(_: int) -> Tensor:
        idx = torch.randint(0, images.shape[0], (settings["batch"],))
        x = from_uint8(images[idx]).contiguous(memory_format=torch.channels_last)
        xin = augment(x, settings["noise"], settings["blur"])
        return F.mse_loss(ae(xin), x)

    hist = train_loop(ae, opt, step, settings["steps"], out_dir, settings["seed"], settings,
                      desc=f"{dataset}/perceptual", lr=settings["lr"], progress=progress)
    enc = EncoderOnly(ae)
    test = splits["test"]
    with torch.no_grad():
        xt = from_uint8(test.images[:512])
        mse = float(F.mse_loss(ae(xt), xt))
    name = f"{dataset}-perceptual-dae{settings['width']}-v1"
    config = {"role": "perceptual", "dataset": dataset, "name": name,
              "net": {"kind": "AutoEncoderEncoder", "in_channels": c, "width": settings["width"]},
              "resolution": int(images.shape[-1]), "train": settings}
    metrics = {"role": "perceptual", "dataset": dataset, "name": name,
               "test_reconstruction_mse": mse,
               "test_reconstruction_psnr_db": float(10 * torch.log10(torch.tensor(4.0 / mse))),
               "distance_sanity": sanity(FeatureDistance(enc), test.images), "steps": settings["steps"],
               "batch_size": settings["batch"], "samples_seen": settings["steps"] * settings["batch"],
               "params": count_params(enc), "train_seconds": round(hist["train_seconds"], 2),
               "images_per_second": hist["images_per_second"],
               "threads": torch.get_num_threads(), **loss_summary(hist["losses"])}
    save_trained(out_dir, enc, config, metrics)
    return metrics
