"""Networks "defined by their own code", as a user's package would hold them, for the ``torch_module`` format:
a small DiT-style pixel-MeanFlow backbone (patch embedding, adaLN-Zero blocks, a class embedding with a null
class, x-prediction from (z, t, h, y)) and a small classifier. Imported by class path
(``tests.user_nets:TinyDiT``) like the FiRe authors' repository would be."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def time_embedding(t: Tensor, dim: int) -> Tensor:
    half = dim // 2
    w = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    a = t.float()[:, None] * w[None]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=1)


class AdaLNBlock(nn.Module):
    """DiT block: self-attention and MLP, each modulated (shift, scale, gate) by the conditioning."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        s1, b1, g1, s2, b2, g2 = self.ada(c)[:, None].chunk(6, dim=2)
        h = self.norm1(x) * (1 + s1) + b1
        x = x + g1 * self.attn(h, h, h, need_weights=False)[0]
        return x + g2 * self.mlp(self.norm2(x) * (1 + s2) + b2)


class TinyDiT(nn.Module):
    """x-prediction DiT conditioned on t, h = t - r and a class label (``num_classes`` is the null class)."""

    def __init__(self, input_size: int = 32, patch_size: int = 8, in_channels: int = 3, hidden_size: int = 32,
                 depth: int = 2, num_heads: int = 2, num_classes: int = 2):
        super().__init__()
        self.p, self.c, self.n = patch_size, in_channels, input_size // patch_size
        self.x_embedder = nn.Conv2d(in_channels, hidden_size, patch_size, stride=patch_size)
        self.pos_embed = nn.Parameter(torch.randn(1, self.n * self.n, hidden_size) * 0.02)
        self.t_embedder = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.SiLU(),
                                        nn.Linear(hidden_size, hidden_size))
        self.h_embedder = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.SiLU(),
                                        nn.Linear(hidden_size, hidden_size))
        self.y_embedder = nn.Embedding(num_classes + 1, hidden_size)  # + the null class
        self.blocks = nn.ModuleList(AdaLNBlock(hidden_size, num_heads) for _ in range(depth))
        self.final_norm = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size))
        self.final = nn.Linear(hidden_size, patch_size * patch_size * in_channels)
        self.hidden = hidden_size

    def forward(self, z: Tensor, t: Tensor, h: Tensor, y: Tensor) -> Tensor:
        b = z.shape[0]
        x = self.x_embedder(z).flatten(2).transpose(1, 2) + self.pos_embed
        c = (self.t_embedder(time_embedding(t, self.hidden)) + self.h_embedder(time_embedding(h, self.hidden))
             + self.y_embedder(y))
        for block in self.blocks:
            x = block(x, c)
        shift, scale = self.final_ada(c)[:, None].chunk(2, dim=2)
        x = self.final(self.final_norm(x) * (1 + scale) + shift)  # (b, n*n, p*p*c)
        x = x.reshape(b, self.n, self.n, self.p, self.p, self.c).permute(0, 5, 1, 3, 2, 4)
        return z + x.reshape(b, self.c, self.n * self.p, self.n * self.p)  # a residual x-prediction


class UserClassifier(nn.Module):
    """Conv - pool - linear: (N, 2) logits of images in [-1, 1]."""

    def __init__(self, channels: int = 3, width: int = 8):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(width, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x).flatten(1))


class NotAModule:
    pass


class EpsNet(nn.Module):
    """A tiny epsilon-prediction network ``forward(z, t)`` (integer timesteps)."""

    def __init__(self, channels: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.temb = nn.Embedding(1000, channels)

    def forward(self, z: Tensor, t: Tensor) -> Tensor:
        return self.conv(z) + self.temb(t)[:, :, None, None]
