"""Small CPU networks for the synthetic roles (32 px, faces 3 channels, x-rays 1 channel).

Two trunk families so that the explained classifier and the oracle differ in architecture:

- ``resnet``: a pre-activation-free ResNet (He et al. 2016) with one basic block per stage,
  BatchNorm and SiLU (smooth activations give smoother input gradients for guidance);
- ``vgg``: plain conv-BN-ReLU pairs with max-pooling (Simonyan & Zisserman 2015 style).

Every trunk maps ``(N, C, H, W)`` in [-1, 1] to ``(N, feature_dim)``; heads are separate
modules (``SyntheticNet``) so one trunk serves classification, embedding and SimSiam.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .settings import AUTOENCODER_DOWNSAMPLING, TRUNK_ARCHS, TRUNK_POOLS

Arch = Literal["resnet", "vgg"]


def sequential_maps(layers: nn.ModuleList, x: Tensor) -> list[Tensor]:
    """Run ``layers`` one after the other; the output of each (the feature maps a perceptual distance reads)."""
    maps, h = [], x
    for layer in layers:
        h = layer(h)
        maps.append(h)
    return maps


def _conv_bn(ci: int, co: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co)]


class BasicBlock(nn.Module):
    """conv-BN-SiLU-conv-BN + (projected) shortcut, then SiLU."""

    def __init__(self, ci: int, co: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(ci, co, stride), nn.SiLU(), *_conv_bn(co, co))
        self.skip = (nn.Identity() if ci == co and stride == 1 else
                     nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co)))

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.body(x) + self.skip(x))


def global_pool(h: Tensor, pool: str) -> Tensor:
    """``avg``: global average pooling; ``avgmax``: [average, max] (keeps small local evidence, e.g. a mouth)."""
    if pool == "avgmax":
        return torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3))], dim=1)
    return h.mean(dim=(2, 3))


class ResNetTrunk(nn.Module):
    """Stem (stride 1) + stages of widths ``width * (1, 2, 4)``; stages 2-3 downsample by 2."""

    def __init__(self, in_channels: int, width: int = 16, blocks: int = 1, pool: str = "avg"):
        super().__init__()
        self.pool = pool
        ws = (width, 2 * width, 4 * width)
        self.stem = nn.Sequential(*_conv_bn(in_channels, width), nn.SiLU())
        stages, ci = [], width
        for i, co in enumerate(ws):
            layers = [BasicBlock(ci, co, 1 if i == 0 else 2)]
            layers += [BasicBlock(co, co, 1) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layers))
            ci = co
        self.stages = nn.ModuleList(stages)
        self.feature_dim = ws[-1] * (2 if pool == "avgmax" else 1)

    def feature_maps(self, x: Tensor) -> list[Tensor]:
        maps, h = [], self.stem(x)
        for s in self.stages:
            h = s(h)
            maps.append(h)
        return maps

    def forward(self, x: Tensor) -> Tensor:
        return global_pool(self.feature_maps(x)[-1], self.pool)


class VGGTrunk(nn.Module):
    """Three stages of (conv-BN-ReLU) x ``blocks`` at widths ``width * (1, 2, 4)``, max-pool between."""

    def __init__(self, in_channels: int, width: int = 24, blocks: int = 1, pool: str = "avg"):
        super().__init__()
        self.pool = pool
        ws = (width, 2 * width, 4 * width)
        stages, ci = [], in_channels
        for i, co in enumerate(ws):
            layers: list[nn.Module] = [nn.MaxPool2d(2)] if i > 0 else []
            for _ in range(blocks):
                layers += [*_conv_bn(ci, co), nn.ReLU()]
                ci = co
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.feature_dim = ws[-1] * (2 if pool == "avgmax" else 1)

    def feature_maps(self, x: Tensor) -> list[Tensor]:
        return sequential_maps(self.stages, x)

    def forward(self, x: Tensor) -> Tensor:
        return global_pool(self.feature_maps(x)[-1], self.pool)


def build_trunk(arch: str, in_channels: int, width: int, blocks: int = 1, pool: str = "avg") -> nn.Module:
    if pool not in TRUNK_POOLS:
        raise ValueError(f"unknown pooling {pool!r}; known: {', '.join(TRUNK_POOLS)}")
    if arch == "resnet":
        return ResNetTrunk(in_channels, width, blocks, pool)
    if arch == "vgg":
        return VGGTrunk(in_channels, width, blocks, pool)
    raise ValueError(f"unknown trunk architecture {arch!r}; known: {', '.join(TRUNK_ARCHS)}")


class SyntheticNet(nn.Module):
    """Trunk + optional bottleneck + linear head. ``features(x)`` is the (bottleneck) embedding.

    ``out_dim``: number of head outputs (0 = no head); ``embed_dim``: size of a linear
    bottleneck after the trunk (0 = use the trunk's pooled features directly).
    """

    def __init__(self, arch: str, in_channels: int, width: int, blocks: int = 1,
                 out_dim: int = 0, embed_dim: int = 0, pool: str = "avg"):
        super().__init__()
        self.trunk = build_trunk(arch, in_channels, width, blocks, pool)
        d = self.trunk.feature_dim
        self.embed = nn.Linear(d, embed_dim) if embed_dim else nn.Identity()
        self.feature_dim = embed_dim or d
        self.head = nn.Linear(self.feature_dim, out_dim) if out_dim else nn.Identity()

    def features(self, x: Tensor) -> Tensor:
        return self.embed(self.trunk(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


class SimSiamNet(nn.Module):
    """SimSiam (Chen & He 2021): backbone + 3-layer projector, and a 2-layer predictor for training.

    Mirrors facebookresearch/simsiam ``builder.py`` at small width; the embedding used by
    S^3 is the projector output (ACE ``eval_utils/simsiam.py``: no predictor).
    """

    def __init__(self, arch: str, in_channels: int, width: int, blocks: int = 1,
                 dim: int = 128, pred_dim: int = 32):
        super().__init__()
        self.trunk = build_trunk(arch, in_channels, width, blocks)
        d = self.trunk.feature_dim
        self.projector = nn.Sequential(
            nn.Linear(d, d, bias=False), nn.BatchNorm1d(d), nn.ReLU(),
            nn.Linear(d, d, bias=False), nn.BatchNorm1d(d), nn.ReLU(),
            nn.Linear(d, dim, bias=False), nn.BatchNorm1d(dim, affine=False))
        self.predictor = nn.Sequential(nn.Linear(dim, pred_dim, bias=False), nn.BatchNorm1d(pred_dim),
                                       nn.ReLU(), nn.Linear(pred_dim, dim))
        self.feature_dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return self.projector(self.trunk(x))


class AutoEncoder(nn.Module):
    """Conv encoder (3 scales) + mirrored decoder; the encoder's maps feed the perceptual distance."""

    DOWNSAMPLING = AUTOENCODER_DOWNSAMPLING  # two stride-2 stages

    def __init__(self, in_channels: int, width: int = 16):
        super().__init__()
        ws = (width, 2 * width, 4 * width)
        self.enc = nn.ModuleList([
            nn.Sequential(nn.Conv2d(in_channels, ws[0], 3, 1, 1), nn.SiLU(), nn.Conv2d(ws[0], ws[0], 3, 1, 1),
                          nn.SiLU()),
            nn.Sequential(nn.Conv2d(ws[0], ws[1], 3, 2, 1), nn.SiLU(), nn.Conv2d(ws[1], ws[1], 3, 1, 1), nn.SiLU()),
            nn.Sequential(nn.Conv2d(ws[1], ws[2], 3, 2, 1), nn.SiLU(), nn.Conv2d(ws[2], ws[2], 3, 1, 1), nn.SiLU()),
        ])
        self.dec = nn.Sequential(
            nn.Upsample(scale_factor=2), nn.Conv2d(ws[2], ws[1], 3, 1, 1), nn.SiLU(),
            nn.Upsample(scale_factor=2), nn.Conv2d(ws[1], ws[0], 3, 1, 1), nn.SiLU(),
            nn.Conv2d(ws[0], in_channels, 3, 1, 1))

    def feature_maps(self, x: Tensor) -> list[Tensor]:
        return sequential_maps(self.enc, x)

    def forward(self, x: Tensor) -> Tensor:
        return self.dec(self.feature_maps(x)[-1])


def normalize_channels(f: Tensor, eps: float = 1e-10) -> Tensor:
    """Unit-normalise feature vectors along channels (LPIPS, Zhang et al. 2018, Eq. 1)."""
    return f / torch.sqrt((f * f).sum(dim=1, keepdim=True) + eps)


class AttributeClassifier(nn.Module):
    """``oracle(x) -> (N, A)`` attribute logits, with ``attribute_names`` and ``name``."""

    def __init__(self, net: nn.Module, attribute_names: list[str], name: str = ""):
        super().__init__()
        self.net, self.attribute_names, self.name = net, list(attribute_names), name

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
