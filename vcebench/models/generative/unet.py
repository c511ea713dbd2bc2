"""The backbone of the two generative roles (``ddpm``, ``pmf``) and the checks of its ``unet:`` block.

Both roles use the same diffusers ``UNet2DModel`` (built by :func:`build_unet` from the
``unet:`` block of a role's config), so that a dataset's DDPM and PMF get the same backbone
size; the PMF adds a second timestep embedding for ``h = t - r`` (``class_embed_type="timestep"``).
Their training loop is ``vcebench.models.training.generative.train_generative``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..training.settings import RoleConfigError, require
from .settings import UNET_DEFAULTS, UNET_KEYS, unet_downsampling


def unet_kwargs(unet_cfg: dict, channels: int, resolution: int, h_conditioned: bool, role: str) -> dict:
    """``UNet2DModel`` constructor arguments from a role's ``unet:`` block.

    Attention-free down/up blocks; ``attention: true`` adds self-attention only in the mid block
    (lowest resolution). The PMF (``h_conditioned``) gets ``class_embed_type="timestep"``, i.e. a
    second sinusoidal + MLP embedding, fed ``h = t - r`` (docs/protocol.md, Pixel MeanFlow).
    """
    unknown = sorted(set(unet_cfg) - UNET_KEYS)
    if unknown:
        raise RoleConfigError(f"unknown key(s) {unknown} in `models.<dataset>.{role}.unet`; allowed: "
                              f"{sorted(UNET_KEYS)}")
    boc = tuple(int(c) for c in require(unet_cfg, "block_out_channels", f"{role}.unet"))
    unet_cfg = {**UNET_DEFAULTS, **unet_cfg}
    groups = int(unet_cfg["norm_num_groups"])
    if any(c % groups for c in boc):
        raise RoleConfigError(f"`models.<dataset>.{role}.unet.block_out_channels` {list(boc)} must be "
                              f"divisible by norm_num_groups={groups}")
    if resolution % unet_downsampling(boc):
        raise RoleConfigError(f"resolution {resolution} is not divisible by 2**{len(boc) - 1} "
                              f"(`models.<dataset>.{role}.unet.block_out_channels` has {len(boc)} levels)")
    return dict(
        sample_size=resolution, in_channels=channels, out_channels=channels, block_out_channels=boc,
        layers_per_block=int(unet_cfg["layers_per_block"]),
        down_block_types=("DownBlock2D",) * len(boc), up_block_types=("UpBlock2D",) * len(boc),
        add_attention=bool(unet_cfg["attention"]), attention_head_dim=8,
        norm_num_groups=groups, dropout=float(unet_cfg["dropout"]),
        class_embed_type="timestep" if h_conditioned else None,
    )


def build_unet(kwargs: dict) -> nn.Module:
    from diffusers import UNet2DModel

    return UNet2DModel(**kwargs)


class ExplicitGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` written as mean/var arithmetic so forward-mode AD (``torch.func.jvp``) is fast.

    Same parameters and output as ``nn.GroupNorm`` (up to float rounding); the fused CPU kernel has
    no efficient forward-mode derivative (~200x slower than its forward in a probe).
    """

    def forward(self, x: Tensor) -> Tensor:
        n, c = x.shape[:2]
        g = x.reshape(n, self.num_groups, -1)
        mean = g.mean(-1, keepdim=True)
        var = (g - mean).pow(2).mean(-1, keepdim=True)
        y = ((g - mean) * torch.rsqrt(var + self.eps)).reshape(x.shape)
        if self.affine:
            shape = (1, c) + (1,) * (x.ndim - 2)
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y


def use_explicit_groupnorm(module: nn.Module) -> nn.Module:
    """Swap every ``nn.GroupNorm`` in ``module`` for :class:`ExplicitGroupNorm` (weights kept)."""
    for name, child in list(module.named_children()):
        if type(child) is nn.GroupNorm:
            new = ExplicitGroupNorm(child.num_groups, child.num_channels, child.eps, child.affine)
            if child.affine:
                new.weight, new.bias = child.weight, child.bias
            setattr(module, name, new)
        else:
            use_explicit_groupnorm(child)
    return module
