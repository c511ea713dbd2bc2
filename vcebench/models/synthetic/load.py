"""Build and load a trained synthetic network from its folder (``config.json`` + ``model.safetensors``)."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from ...core.errors import CheckpointError
from ..base import freeze
from ..checkpoints import load_state_strict, read_trained
from .nets import AutoEncoder, SimSiamNet, SyntheticNet
from .perceptual import EncoderOnly


def build_trained_net(config: dict) -> nn.Module:
    """Instantiate the architecture described by ``config.json['net']`` (weights not loaded)."""
    a = dict(config["net"])
    kind = a.pop("kind")
    if kind == "SyntheticNet":
        return SyntheticNet(**a)
    if kind == "SimSiamNet":
        return SimSiamNet(**a)
    if kind == "AutoEncoderEncoder":
        return EncoderOnly(AutoEncoder(**a))
    raise ValueError(f"unknown network kind {kind!r}")


def load_trained_net(role: str, path: str | Path) -> tuple[nn.Module, dict]:
    """The raw trained network of ``role`` in ``path`` (eval mode, frozen) and its config."""
    config, state = read_trained(role, path)
    try:
        net = build_trained_net(config)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"role {role!r}: {Path(path) / 'config.json'} does not describe a known "
                              f"architecture ({e})") from e
    load_state_strict(role, Path(path) / "model.safetensors", net, state)
    return freeze(net), config
