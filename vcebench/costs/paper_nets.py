"""Paper-size CelebA networks with random weights (``build_networks``), for counting FLOPs and timing.

Architectures (CelebA 128 px protocol) and their sources: ``vcebench.paper.scale``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.base import BinaryHead, freeze


@dataclass(frozen=True)
class PaperSetting:
    """The CelebA-protocol sizes and method settings (docs/protocol.md, config ``method_defaults``)."""

    dataset: str = "celeba"
    resolution: int = 128
    n_attributes: int = 40
    query_index: int = 31  # CelebA "Smiling"
    unet_channels: tuple[int, ...] = (128, 128, 256, 384, 512)
    unet_attention: tuple[bool, ...] = (False, False, True, True, True)  # feature maps 32, 16, 8
    layers_per_block: int = 2
    norm_groups: int = 32
    head_dim: int = 64
    vgg_layer: int = 18
    num_train_timesteps: int = 500
    respacing: int = 200
    start_step: int = 60  # tau: guided steps per pass
    scales: tuple[float, ...] = (8.0, 10.0, 15.0)
    fire_K: int = 15
    smoothgrad_n: int = 20
    extra: dict[str, Any] = field(default_factory=dict)


CELEBA = PaperSetting()


SETTINGS = {"celeba": CELEBA}


def unet_config(s: PaperSetting, out_channels: int, h_conditioning: bool = False) -> dict[str, Any]:
    """diffusers ``UNet2DModel`` kwargs of the guided-diffusion UNet described in the module docstring."""
    down = tuple("AttnDownBlock2D" if a else "DownBlock2D" for a in s.unet_attention)
    up = tuple("AttnUpBlock2D" if a else "UpBlock2D" for a in reversed(s.unet_attention))
    cfg: dict[str, Any] = dict(
        sample_size=s.resolution, in_channels=3, out_channels=out_channels,
        down_block_types=down, up_block_types=up, block_out_channels=s.unet_channels,
        layers_per_block=s.layers_per_block, attention_head_dim=s.head_dim, norm_num_groups=s.norm_groups,
        downsample_type="resnet", upsample_type="resnet", resnet_time_scale_shift="scale_shift",
    )
    if h_conditioning:
        cfg["class_embed_type"] = "timestep"
    return cfg


class EpsUNet(nn.Module):
    """``ddpm`` role: ``eps(z, t)`` from a learn-sigma UNet (first 3 output channels), linear betas."""

    def __init__(self, unet: nn.Module, num_train_timesteps: int):
        super().__init__()
        self.unet = unet
        self.num_train_timesteps = num_train_timesteps
        betas = torch.linspace(1e-4 * 1000 / num_train_timesteps, 0.02 * 1000 / num_train_timesteps,
                               num_train_timesteps, dtype=torch.float64, device="cpu")
        self.alphas_cumprod = torch.cumprod(1 - betas, 0)

    def eps(self, z: Tensor, t: Tensor) -> Tensor:
        return self.unet(z, t).sample[:, : z.shape[1]]

    def forward(self, z: Tensor, t: Tensor) -> Tensor:
        return self.eps(z, t)


class PMFNet(nn.Module):
    """``pmf`` role: x-prediction network ``net(z, t, h)``; ``u = (z - x_u) / max(t, 0.05)`` (pMF)."""

    def __init__(self, net: nn.Module, kind: str):
        super().__init__()
        self.net, self.kind = net, kind

    def x_pred(self, z: Tensor, r: Tensor, t: Tensor) -> Tensor:
        if self.kind == "unet":
            return self.net(z, t * 1000, class_labels=(t - r) * 1000).sample
        return self.net(z, t, t - r)

    def u(self, z: Tensor, r: Tensor | float, t: Tensor | float) -> Tensor:
        t = torch.as_tensor(t, dtype=z.dtype, device=z.device).expand(z.shape[0])
        r = torch.as_tensor(r, dtype=z.dtype, device=z.device).expand(z.shape[0])
        return (z - self.x_pred(z, r, t)) / t.clamp(min=0.05).view(-1, 1, 1, 1)

    def predict_clean(self, z: Tensor, t: Tensor | float) -> Tensor:
        tt = torch.as_tensor(t, dtype=z.dtype, device=z.device).expand(z.shape[0])
        return z - tt.view(-1, 1, 1, 1) * self.u(z, 0.0, tt)

    def forward(self, z: Tensor, t: Tensor | float) -> Tensor:
        return self.predict_clean(z, t)


def _timestep_features(t: Tensor, dim: int) -> Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * 1000 * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1)


class _RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Block(nn.Module):
    def __init__(self, d: int, heads: int, mlp_ratio: float):
        super().__init__()
        hidden = (int(d * mlp_ratio) + 7) // 8 * 8
        self.heads = heads
        self.norm1, self.norm2 = _RMSNorm(d), _RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.w12 = nn.Linear(d, 2 * hidden, bias=False)
        self.w3 = nn.Linear(hidden, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(a)
        g, u = self.w12(self.norm2(x)).chunk(2, dim=-1)
        return x + self.w3(F.silu(g) * u)


class PMFDiT(nn.Module):
    """A pMF-B/16-style transformer for FLOP counting (Lyy-iiis/pMF ``pmfDiT``; inference path only)."""

    def __init__(self, resolution: int, patch: int = 16, d: int = 768, depth: int = 16, heads: int = 12,
                 bottleneck: int = 128, prefix_tokens: int = 18, mlp_ratio: float = 8 / 3):
        super().__init__()
        self.patch, self.prefix = patch, prefix_tokens
        n = (resolution // patch) ** 2
        self.embed_in = nn.Linear(3 * patch * patch, bottleneck)
        self.embed_out = nn.Linear(bottleneck, d)
        self.t_embed = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
        self.h_embed = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
        self.tokens = nn.Parameter(torch.zeros(1, prefix_tokens, d))
        self.pos = nn.Parameter(torch.zeros(1, prefix_tokens + n, d))
        self.blocks = nn.ModuleList(_Block(d, heads, mlp_ratio) for _ in range(depth))
        self.norm = _RMSNorm(d)
        self.head = nn.Linear(d, 3 * patch * patch)

    def forward(self, z: Tensor, t: Tensor, h: Tensor) -> Tensor:
        b, c, hh, ww = z.shape
        p = self.patch
        x = z.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)
        x = self.embed_out(self.embed_in(x))
        cond = self.t_embed(_timestep_features(t, 256)) + self.h_embed(_timestep_features(h, 256))
        seq = torch.cat([self.tokens.expand(b, -1, -1) + cond[:, None], x], dim=1) + self.pos
        for blk in self.blocks:
            seq = blk(seq)
        out = self.head(self.norm(seq[:, self.prefix:]))
        gh, gw = hh // p, ww // p
        return out.view(b, gh, gw, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, c, hh, ww)


class VGGPerceptual(nn.Module):
    """``perceptual`` role: per-sample MSE of VGG19 ``features[:layer]`` (DiME ``PerceptualLoss``)."""

    def __init__(self, features: nn.Module):
        super().__init__()
        self.features = features
        self.register_buffer("mu", torch.tensor([0.485, 0.456, 0.406]).view(1, -1, 1, 1))
        self.register_buffer("sigma", torch.tensor([0.229, 0.224, 0.225]).view(1, -1, 1, 1))

    def embed(self, x: Tensor) -> Tensor:
        return self.features(((x.clamp(-1, 1) + 1) / 2 - self.mu) / self.sigma).flatten(1)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return F.mse_loss(self.embed(x), self.embed(y), reduction="none").mean(1)


def build_networks(s: PaperSetting = CELEBA, device: torch.device | str = "meta", pmf: str = "unet",
                   include: tuple[str, ...] = ("unet", "pmf", "classifier", "perceptual")) -> dict[str, nn.Module]:
    """The four networks at paper size with random weights, frozen (``meta``: no memory, shapes only).

    Keyed by their NFE-counter names (``unet`` is the ``ddpm`` role).
    """
    import torchvision
    from diffusers import UNet2DModel

    if pmf not in ("unet", "dit_b16"):
        raise ValueError(f"pmf architecture must be 'unet' or 'dit_b16', got {pmf!r}")
    builders: dict[str, Callable[[], nn.Module]] = {
        "unet": lambda: EpsUNet(UNet2DModel(**unet_config(s, out_channels=6)), s.num_train_timesteps),
        "pmf": lambda: (PMFNet(UNet2DModel(**unet_config(s, out_channels=3, h_conditioning=True)), "unet")
                        if pmf == "unet" else PMFNet(PMFDiT(s.resolution), "dit_b16")),
        "classifier": lambda: BinaryHead(torchvision.models.densenet121(weights=None, num_classes=s.n_attributes),
                                         kind="1logit", index=s.query_index),
        "perceptual": lambda: VGGPerceptual(torchvision.models.vgg19(weights=None).features[: s.vgg_layer]),
    }
    with torch.device(device):
        return {name: freeze(builders[name]()) for name in include}
