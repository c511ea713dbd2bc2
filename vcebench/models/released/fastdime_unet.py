"""FastDiME's medical DDPM (nina-weng/FastDiME_Med, the CheXpert pacemaker model) in its released layout.

A released model is a folder with ``ckpt.tar`` (a torch checkpoint whose ``model`` entry is the
state dict) and ``config.pickle`` (the training configuration: ``{'BaseConfig': {...},
'ModelConfig': {...}, 'TrainingConfig': {...}}`` of plain values). The pickle is read with
:func:`read_plain_pickle`, which executes nothing: it admits dict / list / tuple / str / int /
float / bool / None and refuses any class or callable.

Network (parameter names are the checkpoint's):

- ``time_embeddings.time_blocks``: a frozen table (``0.weight``, T x C) of ``[sin, cos]`` features with
  frequencies ``10000^(-i / (C/2 - 1))``, then Linear - SiLU - Linear to ``TIME_EMB_MULT * C``.
- ``first``: 3x3 conv to ``BASE_CH``. ``encoder_blocks``: per level 2 res-blocks at ``BASE_CH * mult``, a
  stride-2 conv (``downsample``) between levels. ``bottleneck_blocks``: a res-block with attention and
  one without. ``decoder_blocks``: per level 3 res-blocks on the concatenated skips, nearest x2 +
  conv (``upsample.1``) between levels. ``final``: GroupNorm - SiLU - 3x3 conv (epsilon).
- Res-block: GroupNorm(8) ``normlize_1`` - SiLU - ``conv_1``, plus ``dense_1(SiLU(emb))``, then
  ``normlize_2`` - SiLU - dropout - ``conv_2``, plus the skip (``match_input``, a 1x1 conv when the
  width changes), then attention when the level has it (``APPLY_ATTENTION``): GroupNorm(8) and a
  4-head ``nn.MultiheadAttention`` over positions, added to its input.

The diffusion: ``TIMESTEPS`` (1000) linear betas ``1e-4 .. 0.02`` (scaled by 1000 / T), epsilon
prediction, no learned variance.
"""

from __future__ import annotations

import io
import math
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))
# What a config.pickle may leave out (FastDiME_Med's own fields, not vcebench settings): ModelConfig's attention
# (the only one supported, the released models') and TrainingConfig's number of diffusion steps.
ATTENTION_TYPE = "ori_att"
TIMESTEPS = 1000


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle that holds (or would run) something other than plain values."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickleError(f"refusing to load {module}.{name}: only plain values (dict, list, tuple, str, "
                                f"int, float, bool, None) are admitted")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refusing a persistent id: only plain values are admitted")


def _check_plain(obj: Any, where: str = "root") -> None:
    if not isinstance(obj, PLAIN_TYPES):
        raise UnsafePickleError(f"refusing {type(obj).__name__} at {where}: only dict, list, tuple, str, int, "
                                f"float, bool and None are admitted")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_plain(k, f"{where} key")
            _check_plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")


def read_plain_pickle(path: str | Path) -> Any:
    """Unpickle ``path`` without executing anything; plain values only (else :class:`UnsafePickleError`)."""
    data = Path(path).read_bytes()
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError as e:
        raise UnsafePickleError(f"{path}: {e}") from None
    except Exception as e:  # truncated / not a pickle
        raise UnsafePickleError(f"{path}: not a readable pickle of plain values ({type(e).__name__}: {e})") from e
    _check_plain(obj)
    return obj


def sinusoid_table(steps: int, dim: int) -> Tensor:
    half = dim // 2
    w = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    a = torch.arange(steps, dtype=torch.float32)[:, None] * w[None]
    return torch.cat([a.sin(), a.cos()], dim=-1)


class TimeEmbedding(nn.Module):
    def __init__(self, steps: int, dim: int, out_dim: int):
        super().__init__()
        table = nn.Embedding(steps, dim)
        table.weight.requires_grad_(False)
        with torch.no_grad():
            table.weight.copy_(sinusoid_table(steps, dim))
        self.time_blocks = nn.Sequential(table, nn.Linear(dim, out_dim), nn.SiLU(), nn.Linear(out_dim, out_dim))

    def forward(self, t: Tensor) -> Tensor:
        return self.time_blocks(t.long())


class PositionAttention(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.group_norm = nn.GroupNorm(8, ch)
        self.mhsa = nn.MultiheadAttention(ch, 4, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        s = self.group_norm(x).reshape(b, c, h * w).transpose(1, 2)
        s, _ = self.mhsa(s, s, s, need_weights=False)
        return x + s.transpose(1, 2).reshape(b, c, h, w)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, dropout: float, emb: int, attention: bool):
        super().__init__()
        self.normlize_1 = nn.GroupNorm(8, cin)
        self.conv_1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.dense_1 = nn.Linear(emb, cout)
        self.normlize_2 = nn.GroupNorm(8, cout)
        self.dropout = nn.Dropout2d(dropout)
        self.conv_2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.match_input = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        self.attention = PositionAttention(cout) if attention else nn.Identity()

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv_1(F.silu(self.normlize_1(x))) + self.dense_1(F.silu(emb))[:, :, None, None]
        h = self.conv_2(self.dropout(F.silu(self.normlize_2(h))))
        return self.attention(h + self.match_input(x))


class DownSample(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.downsample = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        return self.downsample(x)


class UpSample(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(ch, ch, 3, padding=1))

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        return self.upsample(x)


class FastDiMEUNet(nn.Module):
    """FastDiME_Med's ``UNet`` from its ``config.pickle`` values; ``forward(x, t)`` -> epsilon."""

    def __init__(self, in_channels: int = 1, base_channels: int = 64, mult: tuple[int, ...] = (1, 2, 4, 4),
                 attention: tuple[bool, ...] = (False, False, False, False), dropout: float = 0.1,
                 time_mult: int = 4, table_steps: int = 1000, num_res_blocks: int = 2):
        super().__init__()
        if len(attention) != len(mult):
            raise ValueError(f"APPLY_ATTENTION {attention} needs one entry per level of BASE_CH_MULT {mult}")
        self.in_channels, self.out_channels = in_channels, in_channels
        emb = base_channels * time_mult
        self.time_embeddings = TimeEmbedding(table_steps, base_channels, emb)  # 1000 rows whatever T
        self.first = nn.Conv2d(in_channels, base_channels, 3, padding=1)
        self.encoder_blocks = nn.ModuleList()
        skips, ch = [base_channels], base_channels
        for level, m in enumerate(mult):
            for _ in range(num_res_blocks):
                self.encoder_blocks.append(ResBlock(ch, base_channels * m, dropout, emb, attention[level]))
                ch = base_channels * m
                skips.append(ch)
            if level != len(mult) - 1:
                self.encoder_blocks.append(DownSample(ch))
                skips.append(ch)
        self.bottleneck_blocks = nn.ModuleList([ResBlock(ch, ch, dropout, emb, True),
                                                ResBlock(ch, ch, dropout, emb, False)])
        self.decoder_blocks = nn.ModuleList()
        for level in reversed(range(len(mult))):
            for _ in range(num_res_blocks + 1):
                self.decoder_blocks.append(ResBlock(skips.pop() + ch, base_channels * mult[level], dropout, emb,
                                                    attention[level]))
                ch = base_channels * mult[level]
            if level != 0:
                self.decoder_blocks.append(UpSample(ch))
        self.final = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, in_channels, 3, padding=1))

    @classmethod
    def from_config(cls, config: dict) -> FastDiMEUNet:
        """From ``config.pickle``'s ``ModelConfig`` / ``TrainingConfig`` (KeyError naming a missing entry)."""
        mc, tc = config["ModelConfig"], config["TrainingConfig"]
        if mc.get("ATTENTION_TYPE", ATTENTION_TYPE) != ATTENTION_TYPE:  # the checkpoint's own field
            raise ValueError(f"ATTENTION_TYPE {mc['ATTENTION_TYPE']!r} is not supported (only {ATTENTION_TYPE!r}, the "
                             f"released models' setting)")
        return cls(in_channels=int(tc["IMG_SHAPE"][0]), base_channels=int(mc["BASE_CH"]),
                   mult=tuple(int(m) for m in mc["BASE_CH_MULT"]),
                   attention=tuple(bool(a) for a in mc["APPLY_ATTENTION"]), dropout=float(mc["DROPOUT_RATE"]),
                   time_mult=int(mc["TIME_EMB_MULT"]))

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        emb = self.time_embeddings(t)
        h = self.first(x)
        skips = [h]
        for block in self.encoder_blocks:
            h = block(h, emb)
            skips.append(h)
        for block in self.bottleneck_blocks:
            h = block(h, emb)
        for block in self.decoder_blocks:
            if isinstance(block, ResBlock):
                h = torch.cat([h, skips.pop()], dim=1)
            h = block(h, emb)
        return self.final(h)
