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

# DiME's CelebA flags (test.sh; the image size comes from main.py's --image_size 128).
DIME_CELEBA_FLAGS: dict[str, Any] = {
    "image_size": 128, "in_channels": 3, "num_channels": 128, "num_res_blocks": 2, "channel_mult": "",
    "attention_resolutions": "32,16,8", "num_heads": 4, "num_head_channels": -1, "num_heads_upsample": -1,
    "learn_sigma": True, "use_scale_shift_norm": True, "resblock_updown": True, "dropout": 0.0,
    "use_new_attention_order": False, "use_fp16": False, "diffusion_steps": 500, "noise_schedule": "linear",
}
FLAG_KEYS = frozenset(DIME_CELEBA_FLAGS)
DEFAULT_CHANNEL_MULT = {512: (0.5, 1, 1, 2, 2, 4, 4), 256: (1, 1, 2, 2, 4, 4), 224: (1, 1, 2, 3, 4),
                        128: (1, 1, 2, 3, 4), 64: (1, 2, 3, 4)}


def _ints(v: Any, name: str) -> tuple[float, ...]:
    if isinstance(v, str):
        return tuple(float(s) for s in v.split(",") if s.strip())
    if isinstance(v, (list, tuple)):
        return tuple(float(s) for s in v)
    raise ValueError(f"guided_diffusion flag {name!r} must be a comma-separated string or a list, got {v!r}")


def resolve_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Flags with DiME's CelebA defaults filled in; ``channel_mult`` and attention rates made explicit."""
    unknown = set(flags) - FLAG_KEYS
    if unknown:
        raise ValueError(f"unknown guided_diffusion flag(s) {sorted(unknown)}; known: {sorted(FLAG_KEYS)}")
    f = {**DIME_CELEBA_FLAGS, **flags}
    size = int(f["image_size"])
    if f["channel_mult"] in ("", None):
        if size not in DEFAULT_CHANNEL_MULT:
            raise ValueError(f"guided_diffusion: no default channel_mult for image_size {size}; set channel_mult")
        mult = DEFAULT_CHANNEL_MULT[size]
    else:
        mult = _ints(f["channel_mult"], "channel_mult")
    f["channel_mult"] = tuple(mult)
    f["attention_ds"] = tuple(sorted({size // int(r) for r in _ints(f["attention_resolutions"],
                                                                    "attention_resolutions")}))
    if f["num_heads_upsample"] == -1:
        f["num_heads_upsample"] = f["num_heads"]
    if f["noise_schedule"] not in ("linear", "cosine"):
        raise ValueError(f"guided_diffusion: noise_schedule must be linear or cosine, got {f['noise_schedule']!r}")
    return f


def betas_for(schedule: str, steps: int) -> Tensor:
    """guided-diffusion's named beta schedules, float64: ``linear`` scaled by 1000 / T (Ho et al.'s
    1e-4..0.02 at T = 1000) or ``cosine`` (Nichol & Dhariwal 2021, betas capped at 0.999)."""
    if schedule == "linear":
        scale = 1000 / steps
        return torch.linspace(scale * 1e-4, scale * 0.02, steps, dtype=torch.float64)
    if schedule == "cosine":
        def abar(t: float) -> float:
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        return torch.tensor([min(1 - abar((i + 1) / steps) / abar(i / steps), 0.999) for i in range(steps)],
                            dtype=torch.float64)
    raise ValueError(f"unknown noise schedule {schedule!r}")


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


# ----------------------------------------------------------------------------- diffusers conversion

def diffusers_config(flags: dict[str, Any]) -> dict[str, Any]:
    """``UNet2DModel`` kwargs of the same network. Its ``attention_head_dim`` is one head width for
    all levels, so ``num_heads`` with levels of different widths needs :func:`to_diffusers`' per-module
    head counts (which a saved diffusers config cannot carry)."""
    f = resolve_flags(flags)
    mc, mult, att = int(f["num_channels"]), f["channel_mult"], f["attention_ds"]
    updown = bool(f["resblock_updown"])
    attn_level = [2 ** level in att for level in range(len(mult))]
    plain_down, plain_up = ("ResnetDownsampleBlock2D", "ResnetUpsampleBlock2D") if updown else ("DownBlock2D",
                                                                                               "UpBlock2D")
    chans = [int(m * mc) for m in mult]
    first_att = next((c for c, a in zip(chans, attn_level) if a), chans[-1])
    hc = int(f["num_head_channels"])
    return dict(
        sample_size=int(f["image_size"]), in_channels=int(f["in_channels"]),
        out_channels=2 * int(f["in_channels"]) if f["learn_sigma"] else int(f["in_channels"]),
        block_out_channels=tuple(chans), layers_per_block=int(f["num_res_blocks"]),
        down_block_types=tuple("AttnDownBlock2D" if a else plain_down for a in attn_level),
        up_block_types=tuple("AttnUpBlock2D" if a else plain_up for a in reversed(attn_level)),
        downsample_type="resnet" if updown else "conv", upsample_type="resnet" if updown else "conv",
        resnet_time_scale_shift="scale_shift" if f["use_scale_shift_norm"] else "default",
        attention_head_dim=hc if hc != -1 else first_att // int(f["num_heads"]),
        norm_num_groups=32, attn_norm_num_groups=32, norm_eps=1e-5, dropout=float(f["dropout"]),
        flip_sin_to_cos=True, freq_shift=0,
    )


def _resblock_keys(src: str, dst: str) -> dict[str, str]:
    pairs = {"in_layers.0": "norm1", "in_layers.2": "conv1", "emb_layers.1": "time_emb_proj",
             "out_layers.0": "norm2", "out_layers.3": "conv2", "skip_connection": "conv_shortcut"}
    return {f"{src}.{a}.{p}": f"{dst}.{b}.{p}" for a, b in pairs.items() for p in ("weight", "bias")}


def _attention_state(state: dict[str, Tensor], src: str, dst: str, heads: int, legacy: bool) -> dict[str, Tensor]:
    """qkv (3C x C x 1 Conv1d, head-major in the legacy order) -> to_q / to_k / to_v Linear layers."""
    w, b = state[f"{src}.qkv.weight"][..., 0], state[f"{src}.qkv.bias"]
    c = w.shape[1]
    if legacy:
        w, b = w.reshape(heads, 3, c // heads, c), b.reshape(heads, 3, c // heads)
        parts = [(w[:, i].reshape(c, c), b[:, i].reshape(c)) for i in range(3)]
    else:
        parts = list(zip(w.chunk(3, dim=0), b.chunk(3, dim=0)))
    out = {f"{dst}.group_norm.{p}": state[f"{src}.norm.{p}"] for p in ("weight", "bias")}
    for name, (wi, bi) in zip(("to_q", "to_k", "to_v"), parts):
        out[f"{dst}.{name}.weight"], out[f"{dst}.{name}.bias"] = wi.contiguous(), bi.contiguous()
    out[f"{dst}.to_out.0.weight"] = state[f"{src}.proj_out.weight"][..., 0]
    out[f"{dst}.to_out.0.bias"] = state[f"{src}.proj_out.bias"]
    return out


def to_diffusers(net: GuidedUNet) -> nn.Module:
    """The same network as a diffusers ``UNet2DModel`` with the weights of ``net`` (float32)."""
    from diffusers import UNet2DModel

    f, nrb = net.flags, int(net.flags["num_res_blocks"])
    legacy = not f["use_new_attention_order"]
    state = {k: v.float() for k, v in net.state_dict().items()}
    levels = len(f["channel_mult"])
    names: dict[str, str] = {"time_embed.0.weight": "time_embedding.linear_1.weight",
                             "time_embed.0.bias": "time_embedding.linear_1.bias",
                             "time_embed.2.weight": "time_embedding.linear_2.weight",
                             "time_embed.2.bias": "time_embedding.linear_2.bias",
                             "input_blocks.0.0.weight": "conv_in.weight", "input_blocks.0.0.bias": "conv_in.bias",
                             "out.0.weight": "conv_norm_out.weight", "out.0.bias": "conv_norm_out.bias",
                             "out.2.weight": "conv_out.weight", "out.2.bias": "conv_out.bias"}
    attn: list[tuple[str, str, AttentionBlock]] = []  # (source prefix, diffusers prefix, module)

    def block(src: str, module: nn.Module, dst: str, kind: str) -> None:
        if kind == "res":
            names.update(_resblock_keys(src, dst))
        elif kind == "attn":
            attn.append((src, dst, module))
        else:  # plain conv down / up sampler
            conv = "op" if isinstance(module, Downsample) else "conv"
            names.update({f"{src}.{conv}.{p}": f"{dst}.conv.{p}" for p in ("weight", "bias")})

    i = 1
    for level in range(levels):
        for j in range(nrb):
            seq = net.input_blocks[i]
            block(f"input_blocks.{i}.0", seq[0], f"down_blocks.{level}.resnets.{j}", "res")
            if len(seq) > 1:
                block(f"input_blocks.{i}.1", seq[1], f"down_blocks.{level}.attentions.{j}", "attn")
            i += 1
        if level != levels - 1:
            m = net.input_blocks[i][0]
            block(f"input_blocks.{i}.0", m, f"down_blocks.{level}.downsamplers.0",
                  "res" if isinstance(m, ResBlock) else "conv")
            i += 1
    block("middle_block.0", net.middle_block[0], "mid_block.resnets.0", "res")
    block("middle_block.1", net.middle_block[1], "mid_block.attentions.0", "attn")
    block("middle_block.2", net.middle_block[2], "mid_block.resnets.1", "res")
    o = 0
    for up in range(levels):
        for j in range(nrb + 1):
            seq = net.output_blocks[o]
            block(f"output_blocks.{o}.0", seq[0], f"up_blocks.{up}.resnets.{j}", "res")
            k = 1
            if k < len(seq) and isinstance(seq[k], AttentionBlock):
                block(f"output_blocks.{o}.1", seq[1], f"up_blocks.{up}.attentions.{j}", "attn")
                k += 1
            if k < len(seq):
                block(f"output_blocks.{o}.{k}", seq[k], f"up_blocks.{up}.upsamplers.0",
                      "res" if isinstance(seq[k], ResBlock) else "conv")
            o += 1
    new = {names[k]: v for k, v in state.items() if k in names}
    for src, dst, m in attn:
        new.update(_attention_state(state, src, dst, m.heads, legacy))
    model = UNet2DModel(**diffusers_config({k: v for k, v in f.items() if k in FLAG_KEYS}))
    model.load_state_dict(new, strict=True)
    mods = dict(model.named_modules())
    for _, dst, m in attn:  # per-module head counts (num_heads fixed across levels of different width)
        a = mods[dst]
        a.heads = m.heads
        a.scale = (a.inner_dim // m.heads) ** -0.5 if hasattr(a, "inner_dim") else a.scale
    return model.eval()
