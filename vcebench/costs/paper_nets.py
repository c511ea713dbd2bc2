"""Paper-size networks with random weights (``build_networks``), for counting FLOPs and timing.

Architectures per dataset (CelebA 128 px, CelebA-HQ 256 px, CheXpert 512 px) and their sources:
``vcebench.paper.scale``'s docstring. FiRe's released PMF backbones: :class:`ReleasedDiT`.
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
from ..models.released.guided_flags import DEFAULT_CHANNEL_MULT


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
    pmf_dit: DiTSize | None = None  # the ``released`` PMF's size; None: FiRe's released one at ``resolution``
    extra: dict[str, Any] = field(default_factory=dict)


def guided_unet_levels(resolution: int, base: int = 128, attention_at: tuple[int, ...] = (32, 16, 8)
                       ) -> dict[str, tuple]:
    """``unet_channels`` / ``unet_attention`` of guided-diffusion's UNet at ``resolution`` with DiME's flags:
    ``num_channels`` ``base`` times guided-diffusion's default ``channel_mult`` for the image size,
    attention on the feature maps of side ``attention_at``."""
    mult = DEFAULT_CHANNEL_MULT[resolution]
    return {"unet_channels": tuple(int(base * m) for m in mult),
            "unet_attention": tuple(resolution // 2**i in attention_at for i in range(len(mult)))}


CELEBA = PaperSetting()
CELEBAHQ = PaperSetting(dataset="celebahq", resolution=256, **guided_unet_levels(256))  # 40 attributes, Smiling
CHEXPERT = PaperSetting(dataset="chexpert", resolution=512, n_attributes=1, query_index=0,  # Pacemaker
                        **guided_unet_levels(512))


SETTINGS = {"celeba": CELEBA, "celebahq": CELEBAHQ, "chexpert": CHEXPERT}


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


# FiRe's released PMF backbones (model card of ``DapaoZeng/FiRe``): DiT-B/8 at 128 px (CelebA), DiT-B/16 at
# 256 px (CelebA-HQ), DiT-B/32 at 512 px (CheXpert); 256 patch tokens each, 2 classes (+1 null).
RELEASED_PATCH = {128: 8, 256: 16, 512: 32}


@dataclass(frozen=True)
class DiTSize:
    """A DiT's sizes (DiT-B: hidden 768, depth 12, 12 heads, MLP ratio 4; Peebles & Xie 2023, Table 1)."""

    resolution: int
    patch: int
    hidden: int = 768
    depth: int = 12
    heads: int = 12
    mlp_ratio: float = 4.0
    channels: int = 3
    num_classes: int = 2  # plus one null class (classifier-free guidance)
    freq_dim: int = 256

    @property
    def tokens(self) -> int:
        return (self.resolution // self.patch) ** 2

    @property
    def name(self) -> str:
        return f"DiT-B/{self.patch}"


def released_dit(resolution: int) -> DiTSize:
    """The size of FiRe's released PMF backbone at ``resolution`` (:data:`RELEASED_PATCH`)."""
    if resolution not in RELEASED_PATCH:
        raise ValueError(f"FiRe released PMF backbones exist at {sorted(RELEASED_PATCH)} px, not {resolution}")
    return DiTSize(resolution, RELEASED_PATCH[resolution])


def dit_formula_flops(d: DiTSize) -> float:
    """The standard DiT count of one forward, in FLOPs (2 x multiply-accumulates): per block and token
    ``(4 + 2 mlp_ratio) hidden^2`` for qkv, the projection and the MLP, plus ``2 tokens hidden`` for the two
    attention matmuls; plus the patch embedding and the output projection (``tokens x C p^2 x hidden`` each).
    Left out, as in the DiT paper's count: the conditioning MLPs and modulations (per sample, not per token)."""
    n, h = d.tokens, d.hidden
    per_block = n * (4 + 2 * d.mlp_ratio) * h * h + 2 * n * n * h
    patch_layers = 2 * n * d.channels * d.patch**2 * h
    return 2.0 * (d.depth * per_block + patch_layers)


class _TimeEmbed(nn.Module):
    """DiT's ``TimestepEmbedder``: sinusoidal features of ``1000 t``, then Linear - SiLU - Linear."""

    def __init__(self, d: int, freq_dim: int):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, d), nn.SiLU(), nn.Linear(d, d))

    def forward(self, t: Tensor) -> Tensor:
        return self.mlp(_timestep_features(t, self.freq_dim))


class _AdaLNZeroBlock(nn.Module):
    """A DiT block: LayerNorm (no affine) modulated by shift / scale from the conditioning, self-attention and
    a GELU MLP, each residual branch gated (adaLN-Zero; the zero initialisation of the modulation is training's
    business, the weights here are random)."""

    def __init__(self, d: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        hidden = int(d * mlp_ratio)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        b, n, d = x.shape
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(c)[:, None].chunk(6, dim=-1)
        y = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(y).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + gate1 * self.proj(a)
        y = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.fc2(F.gelu(self.fc1(y), approximate="tanh"))


class ReleasedDiT(nn.Module):
    """FiRe's released PMF backbone at one resolution, for FLOP counting and timing (inference path).

    A DiT (patch embedding by a strided convolution, fixed position embedding, adaLN-Zero blocks, a modulated
    output layer) with pMF-style conditioning: ``c = emb(t) + emb(h) + emb(omega) + class embedding``, where
    ``h = t - r`` is the MeanFlow interval, ``omega`` the guidance scale (1: none) and the class the null class
    (index ``num_classes``) unless given.
    """

    def __init__(self, size: DiTSize):
        super().__init__()
        d, p, c = size.hidden, size.patch, size.channels
        self.size = size
        self.patch_embed = nn.Conv2d(c, d, kernel_size=p, stride=p)
        self.register_buffer("pos", torch.zeros(1, size.tokens, d))
        self.t_embed, self.h_embed, self.omega_embed = (_TimeEmbed(d, size.freq_dim) for _ in range(3))
        self.y_embed = nn.Embedding(size.num_classes + 1, d)
        self.blocks = nn.ModuleList(_AdaLNZeroBlock(d, size.heads, size.mlp_ratio) for _ in range(size.depth))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.head = nn.Linear(d, c * p * p)

    def forward(self, z: Tensor, t: Tensor, h: Tensor, y: Tensor | None = None,
                omega: Tensor | None = None) -> Tensor:
        b, c, hh, ww = z.shape
        p = self.size.patch
        if y is None:
            y = torch.full((b,), self.size.num_classes, dtype=torch.long, device=z.device)
        if omega is None:
            omega = torch.ones(b, dtype=z.dtype, device=z.device)
        x = self.patch_embed(z).flatten(2).transpose(1, 2) + self.pos
        cond = self.t_embed(t) + self.h_embed(h) + self.omega_embed(omega) + self.y_embed(y)
        for blk in self.blocks:
            x = blk(x, cond)
        shift, scale = self.final_modulation(cond)[:, None].chunk(2, dim=-1)
        out = self.head(self.final_norm(x) * (1 + scale) + shift)
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


# The PMF architectures ``build_networks`` builds: FiRe's released DiT at the setting's resolution, or the UNet
# with an h = t - r embedding (the size of the DDPM's UNet; this benchmark's own PMFs are UNets).
PMF_KINDS = ("released", "unet")


def build_networks(s: PaperSetting = CELEBA, device: torch.device | str = "meta", pmf: str = "unet",
                   include: tuple[str, ...] = ("unet", "pmf", "classifier", "perceptual")) -> dict[str, nn.Module]:
    """The four networks at paper size with random weights, frozen (``meta``: no memory, shapes only).

    Keyed by their NFE-counter names (``unet`` is the ``ddpm`` role).
    """
    import torchvision
    from diffusers import UNet2DModel

    if pmf not in PMF_KINDS:
        raise ValueError(f"pmf architecture must be one of {', '.join(PMF_KINDS)}, got {pmf!r}")
    builders: dict[str, Callable[[], nn.Module]] = {
        "unet": lambda: EpsUNet(UNet2DModel(**unet_config(s, out_channels=6)), s.num_train_timesteps),
        "pmf": lambda: (PMFNet(UNet2DModel(**unet_config(s, out_channels=3, h_conditioning=True)), "unet")
                        if pmf == "unet" else PMFNet(ReleasedDiT(s.pmf_dit or released_dit(s.resolution)), "dit")),
        "classifier": lambda: BinaryHead(torchvision.models.densenet121(weights=None, num_classes=s.n_attributes),
                                         kind="1logit", index=s.query_index),
        "perceptual": lambda: VGGPerceptual(torchvision.models.vgg19(weights=None).features[: s.vgg_layer]),
    }
    with torch.device(device):
        return {name: freeze(builders[name]()) for name in include}
