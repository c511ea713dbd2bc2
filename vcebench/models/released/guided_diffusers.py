"""The guided-diffusion UNet (:mod:`vcebench.models.released.guided_unet`) as a diffusers ``UNet2DModel``: its config
and its weights under diffusers' names."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from .guided_flags import FLAG_KEYS, resolve_flags
from .guided_unet import AttentionBlock, Downsample, GuidedUNet, ResBlock


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


class _KeyMap:
    """The guided-diffusion -> diffusers names of a network's parameters, and its attention blocks (whose
    fused qkv is split by :func:`_attention_state`)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {f"time_embed.{i}.{p}": f"time_embedding.linear_{k}.{p}"
                                      for i, k in ((0, 1), (2, 2)) for p in ("weight", "bias")}
        self.names.update({
            "input_blocks.0.0.weight": "conv_in.weight", "input_blocks.0.0.bias": "conv_in.bias",
            "out.0.weight": "conv_norm_out.weight", "out.0.bias": "conv_norm_out.bias",
            "out.2.weight": "conv_out.weight", "out.2.bias": "conv_out.bias"})
        self.attn: list[tuple[str, str, AttentionBlock]] = []  # (source prefix, diffusers prefix, module)

    def block(self, src: str, module: nn.Module, dst: str, kind: str) -> None:
        if kind == "res":
            self.names.update(_resblock_keys(src, dst))
        elif kind == "attn":
            self.attn.append((src, dst, module))
        else:  # plain conv down / up sampler
            conv = "op" if isinstance(module, Downsample) else "conv"
            self.names.update({f"{src}.{conv}.{p}": f"{dst}.conv.{p}" for p in ("weight", "bias")})

    def down_and_middle(self, net: GuidedUNet, levels: int, nrb: int) -> None:
        i = 1
        for level in range(levels):
            for j in range(nrb):
                seq = net.input_blocks[i]
                self.block(f"input_blocks.{i}.0", seq[0], f"down_blocks.{level}.resnets.{j}", "res")
                if len(seq) > 1:
                    self.block(f"input_blocks.{i}.1", seq[1], f"down_blocks.{level}.attentions.{j}", "attn")
                i += 1
            if level != levels - 1:
                m = net.input_blocks[i][0]
                self.block(f"input_blocks.{i}.0", m, f"down_blocks.{level}.downsamplers.0",
                           "res" if isinstance(m, ResBlock) else "conv")
                i += 1
        self.block("middle_block.0", net.middle_block[0], "mid_block.resnets.0", "res")
        self.block("middle_block.1", net.middle_block[1], "mid_block.attentions.0", "attn")
        self.block("middle_block.2", net.middle_block[2], "mid_block.resnets.1", "res")

    def up(self, net: GuidedUNet, levels: int, nrb: int) -> None:
        o = 0
        for up in range(levels):
            for j in range(nrb + 1):
                seq = net.output_blocks[o]
                self.block(f"output_blocks.{o}.0", seq[0], f"up_blocks.{up}.resnets.{j}", "res")
                k = 1
                if k < len(seq) and isinstance(seq[k], AttentionBlock):
                    self.block(f"output_blocks.{o}.1", seq[1], f"up_blocks.{up}.attentions.{j}", "attn")
                    k += 1
                if k < len(seq):
                    self.block(f"output_blocks.{o}.{k}", seq[k], f"up_blocks.{up}.upsamplers.0",
                               "res" if isinstance(seq[k], ResBlock) else "conv")
                o += 1


def to_diffusers(net: GuidedUNet) -> nn.Module:
    """The same network as a diffusers ``UNet2DModel`` with the weights of ``net`` (float32)."""
    from diffusers import UNet2DModel

    f, nrb = net.flags, int(net.flags["num_res_blocks"])
    legacy = not f["use_new_attention_order"]
    state = {k: v.float() for k, v in net.state_dict().items()}
    levels = len(f["channel_mult"])
    keys = _KeyMap()
    keys.down_and_middle(net, levels, nrb)
    keys.up(net, levels, nrb)
    new = {keys.names[k]: v for k, v in state.items() if k in keys.names}
    for src, dst, m in keys.attn:
        new.update(_attention_state(state, src, dst, m.heads, legacy))
    model = UNet2DModel(**diffusers_config({k: v for k, v in f.items() if k in FLAG_KEYS}))
    model.load_state_dict(new, strict=True)
    mods = dict(model.named_modules())
    for _, dst, m in keys.attn:  # per-module head counts (num_heads fixed across levels of different width)
        a = mods[dst]
        a.heads = m.heads
        a.scale = (a.inner_dim // m.heads) ** -0.5 if hasattr(a, "inner_dim") else a.scale
    return model.eval()
