"""guided-diffusion / improved-diffusion UNet in the parameter layout of its released checkpoints.

DiME (Jeanneret et al., ACCV 2022), ACE, FastDiME (CelebA) and MaskDiME all ship DDPMs trained
with openai's guided-diffusion code base (``UNetModel`` + ``GaussianDiffusion``). This module
rebuilds that network from the same flags so those ``.pt`` state dicts load strictly, and wraps it
behind the ``ddpm`` role contract (``vcebench/models/base.py``).

Architecture (names are the checkpoint's keys):

- ``time_embed``: sinusoidal embedding of the integer timestep (``[cos, sin]``, frequencies
  ``10000^(-i / half)``), then Linear - SiLU - Linear to ``4 * num_channels``.
- ``input_blocks``: ``input_blocks.0.0`` a 3x3 conv; per level ``num_res_blocks`` res-blocks (+ an
  attention block when the level's downsampling rate ``ds`` is an attention resolution), and
  between levels a down-sampling block: a res-block with ``down`` (``resblock_updown``) or a
  stride-2 conv (``op``).
- ``middle_block``: res-block, attention, res-block.
- ``output_blocks``: per level (reversed) ``num_res_blocks + 1`` res-blocks on the concatenated skip,
  attention where the input side had it, and after the last one of every level but the top an
  up-sampling block (res-block with ``up``, or nearest x2 + conv).
- ``out``: GroupNorm - SiLU - 3x3 conv to ``in_channels`` (``2 * in_channels`` with ``learn_sigma``:
  epsilon, then the variance interpolation value ``v`` in [-1, 1]).

Res-block: ``in_layers`` (GroupNorm(32) - SiLU - conv), ``emb_layers`` (SiLU - Linear to C or 2C),
``out_layers`` (GroupNorm - SiLU - Dropout - conv); with ``use_scale_shift_norm`` the embedding gives
(scale, shift) and ``out = norm(h) * (1 + scale) + shift``, else it is added before ``out_layers``.
``up``/``down`` resample both paths between the input normalisation and the first conv (nearest x2
/ 2x2 average pooling). The skip is an identity or a 1x1 conv.

Attention: ``norm``, ``qkv`` (1x1 Conv1d to 3C), ``proj_out``. Heads: ``num_heads`` fixed heads, or
``C / num_head_channels`` heads when ``num_head_channels != -1`` (the two give the same parameter
shapes but different outputs). The released models use the legacy head order
(``use_new_attention_order=False``): the 3C qkv channels are split into heads first, each head's
block holding its q, k, v; the new order splits q, k, v first. Logits ``(q k) / sqrt(d)`` with the
softmax in float32. GroupNorm runs in float32 (the reference's ``GroupNorm32``).

``use_fp16`` reproduces the reference's inference setting (``model.convert_to_fp16()`` after
loading): the convolutions of the input, middle and output blocks in float16, embeddings,
normalisation and the ``out`` head in float32.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .guided_flags import resolve_flags


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """``[cos(t w_i), sin(t w_i)]`` with ``w_i = max_period^(-i / half)`` (float32; zero-padded if dim is odd)."""
    half = dim // 2
    w = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    a = t.float()[:, None] * w[None]
    emb = torch.cat([torch.cos(a), torch.sin(a)], dim=-1)
    return F.pad(emb, (0, 1)) if dim % 2 else emb


class GroupNorm32(nn.GroupNorm):
    """GroupNorm(32) computed in float32, returned in the input's dtype."""

    def __init__(self, channels: int):
        super().__init__(32, channels)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.float()).to(x.dtype)


def _resample(x: Tensor, up: bool) -> Tensor:
    return F.interpolate(x, scale_factor=2, mode="nearest") if up else F.avg_pool2d(x, 2)


class ResBlock(nn.Module):
    def __init__(self, ch: int, emb_ch: int, dropout: float, out_ch: int | None = None,
                 scale_shift: bool = False, up: bool = False, down: bool = False):
        super().__init__()
        out_ch = out_ch or ch
        self.scale_shift, self.up, self.down = scale_shift, up, down
        self.in_layers = nn.Sequential(GroupNorm32(ch), nn.SiLU(), nn.Conv2d(ch, out_ch, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_ch, 2 * out_ch if scale_shift else out_ch))
        self.out_layers = nn.Sequential(GroupNorm32(out_ch), nn.SiLU(), nn.Dropout(dropout),
                                        nn.Conv2d(out_ch, out_ch, 3, padding=1))
        self.skip_connection = nn.Identity() if out_ch == ch else nn.Conv2d(ch, out_ch, 1)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        norm, act, conv = self.in_layers
        h = act(norm(x))
        if self.up or self.down:
            h, x = _resample(h, self.up), _resample(x, self.up)
        h = conv(h)
        e = self.emb_layers(emb).to(h.dtype)[:, :, None, None]
        out_norm, rest = self.out_layers[0], self.out_layers[1:]
        if self.scale_shift:
            scale, shift = e.chunk(2, dim=1)
            h = rest(out_norm(h) * (1 + scale) + shift)
        else:
            h = self.out_layers(h + e)
        return self.skip_connection(x) + h


class AttentionBlock(nn.Module):
    """Self-attention over the spatial positions; ``heads`` heads; ``legacy_order``: heads split before q/k/v."""

    def __init__(self, ch: int, heads: int, legacy_order: bool = True):
        super().__init__()
        if ch % heads:
            raise ValueError(f"attention: {ch} channels do not split into {heads} heads")
        self.heads, self.legacy_order = heads, legacy_order
        self.norm = GroupNorm32(ch)
        self.qkv = nn.Conv1d(ch, 3 * ch, 1)
        self.proj_out = nn.Conv1d(ch, ch, 1)

    def forward(self, x: Tensor) -> Tensor:
        b, c, *spatial = x.shape
        x = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x))
        n, d = qkv.shape[-1], c // self.heads
        if self.legacy_order:  # (b, heads, [q k v] of d channels, n)
            q, k, v = qkv.reshape(b * self.heads, 3 * d, n).split(d, dim=1)
        else:  # ([q k v], heads, d, n)
            q, k, v = (u.reshape(b * self.heads, d, n) for u in qkv.chunk(3, dim=1))
        s = d ** -0.25  # scaling both factors is the reference's float16-friendly 1/sqrt(d)
        w = torch.einsum("bct,bcs->bts", q * s, k * s)
        w = torch.softmax(w.float(), dim=-1).to(w.dtype)
        h = torch.einsum("bts,bcs->bct", w, v).reshape(b, c, n)
        return (x + self.proj_out(h)).reshape(b, c, *spatial)


class Downsample(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.op = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class EmbedSequential(nn.Sequential):
    """Children run in order; res-blocks also get the timestep embedding."""

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:  # type: ignore[override]
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb)
            else:
                x = layer(x)
        return x


class GuidedUNet(nn.Module):
    """The guided-diffusion ``UNetModel`` (unconditional) from guided-diffusion flags; ``forward(x, t)``."""

    def __init__(self, **flags: Any):
        super().__init__()
        f = resolve_flags(flags)
        self.flags = f
        mc, nrb, drop = int(f["num_channels"]), int(f["num_res_blocks"]), float(f["dropout"])
        mult, att = f["channel_mult"], f["attention_ds"]
        ss, updown = bool(f["use_scale_shift_norm"]), bool(f["resblock_updown"])
        legacy = not bool(f["use_new_attention_order"])
        in_ch = int(f["in_channels"])
        self.in_channels, self.model_channels = in_ch, mc
        self.out_channels = 2 * in_ch if f["learn_sigma"] else in_ch

        def heads(ch: int, n_heads: int) -> int:
            hc = int(f["num_head_channels"])
            if hc == -1:
                return int(n_heads)
            if ch % hc:
                raise ValueError(f"guided_diffusion: {ch} channels not divisible by num_head_channels {hc}")
            return ch // hc

        emb = 4 * mc
        self.time_embed = nn.Sequential(nn.Linear(mc, emb), nn.SiLU(), nn.Linear(emb, emb))
        ch = int(mult[0] * mc)
        self.input_blocks = nn.ModuleList([EmbedSequential(nn.Conv2d(in_ch, ch, 3, padding=1))])
        skips, ds = [ch], 1
        for level, m in enumerate(mult):
            for _ in range(nrb):
                layers: list[nn.Module] = [ResBlock(ch, emb, drop, int(m * mc), ss)]
                ch = int(m * mc)
                if ds in att:
                    layers.append(AttentionBlock(ch, heads(ch, f["num_heads"]), legacy))
                self.input_blocks.append(EmbedSequential(*layers))
                skips.append(ch)
            if level != len(mult) - 1:
                self.input_blocks.append(EmbedSequential(
                    ResBlock(ch, emb, drop, ch, ss, down=True) if updown else Downsample(ch)))
                skips.append(ch)
                ds *= 2
        self.middle_block = EmbedSequential(ResBlock(ch, emb, drop, ch, ss),
                                            AttentionBlock(ch, heads(ch, f["num_heads"]), legacy),
                                            ResBlock(ch, emb, drop, ch, ss))
        self.output_blocks = nn.ModuleList()
        for level, m in reversed(list(enumerate(mult))):
            for i in range(nrb + 1):
                layers = [ResBlock(ch + skips.pop(), emb, drop, int(m * mc), ss)]
                ch = int(m * mc)
                if ds in att:
                    layers.append(AttentionBlock(ch, heads(ch, f["num_heads_upsample"]), legacy))
                if level and i == nrb:
                    layers.append(ResBlock(ch, emb, drop, ch, ss, up=True) if updown else Upsample(ch))
                    ds //= 2
                self.output_blocks.append(EmbedSequential(*layers))
        self.out = nn.Sequential(GroupNorm32(ch), nn.SiLU(), nn.Conv2d(int(mult[0] * mc), self.out_channels, 3,
                                                                          padding=1))
        self.dtype = torch.float32

    def convert_to_fp16(self) -> GuidedUNet:
        """The reference's ``convert_to_fp16``: convolution weights of the torso in float16."""
        for part in (self.input_blocks, self.middle_block, self.output_blocks):
            for mod in part.modules():
                if isinstance(mod, (nn.Conv1d, nn.Conv2d)):
                    mod.half()
        self.dtype = torch.float16
        return self

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        emb = self.time_embed(timestep_embedding(t, self.model_channels))
        h, hs = x.to(self.dtype), []
        for block in self.input_blocks:
            h = block(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            h = block(torch.cat([h, hs.pop()], dim=1), emb)
        return self.out(h.to(x.dtype))
