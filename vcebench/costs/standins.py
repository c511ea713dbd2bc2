"""Stand-in networks and counterfactuals: random weights where trained ones are not needed.

- :func:`standin_models` / :func:`arch_standin_models`: every evaluation role, tiny or with the synthetic
  zoo's architectures, and a classifier that thresholds mean brightness (so that counterfactuals can flip
  it); for timing ``vcebench evaluate`` (``vcebench benchmark``) and for the metric tests.
- :func:`fake_counterfactuals`: a counterfactuals.npz whose images are the inputs with a brightened or
  darkened patch.
- :func:`tiny_standins`: the method roles (classifier, ddpm, pmf, perceptual) as one-layer networks behind
  the paper-scale wrappers, to count the real methods' network calls at paper settings in seconds.

The numbers these networks produce mean nothing; their shapes and call counts are the point.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..core.io import save_npz, to_uint8
from ..models.base import BinaryHead, TaskModels, freeze
from ..models.synthetic.nets import SimSiamNet, SyntheticNet
from .paper_nets import CELEBA, EpsUNet, PMFNet, VGGPerceptual


class _TinyNet(nn.Module):
    """Two strided convolutions + global pooling + linear head (random weights, seeded)."""

    def __init__(self, channels: int, out: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.body = nn.Sequential(nn.Conv2d(channels, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, out))
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _BrightnessClassifier(nn.Module):
    """Stand-in classifier: logit of class 1 = ``gain * (mean(x) - threshold)`` (plus a small random CNN term)."""

    def __init__(self, channels: int, seed: int, threshold: float = 0.0, gain: float = 40.0):
        super().__init__()
        self.cnn, self.threshold, self.gain = _TinyNet(channels, 1, seed), threshold, gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logit = self.gain * (x.flatten(1).mean(1) - self.threshold) + 0.1 * self.cnn(x)[:, 0]
        return torch.stack([torch.zeros_like(logit), logit], 1)


class _WithLogit(nn.Module):
    """Adds a brightness logit to a random network of the trained classifier's architecture (timing
    stand-in: the network runs at full cost, the brightness term makes flips possible)."""

    def __init__(self, net: nn.Module, threshold: float, gain: float = 40.0):
        super().__init__()
        self.net, self.threshold, self.gain = net, threshold, gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logit = self.gain * (x.flatten(1).mean(1) - self.threshold) + 1e-3 * self.net(x)[:, 0]
        return torch.stack([torch.zeros_like(logit), logit], 1)


class _Features(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.features(x)


class _Oracle(_TinyNet):
    def __init__(self, channels: int, attribute_names: Sequence[str], seed: int):
        super().__init__(channels, len(attribute_names), seed)
        self.attribute_names = list(attribute_names)


def standin_models(attribute_names: Sequence[str], channels: int = 3, seed: int = 0, threshold: float = 0.0):
    """TaskModels with tiny random networks for every evaluation role (tests, benchmark).

    The classifier thresholds mean brightness at ``threshold`` (pass the median of the data).
    """

    nets = {"classifier": _BrightnessClassifier(channels, seed, threshold),
            "oracle": _Oracle(channels, attribute_names, seed + 1),
            "identity": _TinyNet(channels, 32, seed + 2), "simsiam": _TinyNet(channels, 32, seed + 3),
            "fid_features": _TinyNet(channels, 64, seed + 4)}
    return TaskModels(**{k: freeze(v) for k, v in nets.items()},
                      names={k: f"standin-{k}-seed{seed}" for k in nets})


def arch_standin_models(attribute_names: Sequence[str], channels: int = 3, threshold: float = 0.0):
    """Random-weight networks with the synthetic zoo's default architectures (vcebench/models): the
    timing of every network pass is that of the trained models."""

    a = len(attribute_names)
    torch.manual_seed(0)
    oracle = SyntheticNet("vgg", channels, 16, 1, out_dim=a)
    oracle.attribute_names = list(attribute_names)
    nets = {"classifier": _WithLogit(SyntheticNet("resnet", channels, 16, 1, out_dim=a), threshold),
            "oracle": oracle, "identity": SyntheticNet("resnet", channels, 16, 1, embed_dim=64),
            "simsiam": SimSiamNet("resnet", channels, 16, 1),
            "fid_features": _Features(SyntheticNet("resnet", channels, 24, 1, embed_dim=128))}
    return TaskModels(**{k: freeze(v) for k, v in nets.items()}, names={k: f"arch-standin-{k}" for k in nets})


def fake_counterfactuals(x: torch.Tensor, sample_ids: torch.Tensor, classifier: nn.Module, path: str | Path,
                         seed: int = 0) -> None:
    """Write a counterfactuals.npz (docs/internals.md): a random square patch of each input is
    brightened (target 1) or darkened (target 0), growing 4, 8, 12, 16 px until the classifier flips."""

    g = torch.Generator().manual_seed(seed)
    n, _, h, w = x.shape
    with torch.no_grad():
        pred = torch.cat([classifier(x[s:s + 256]).argmax(1) for s in range(0, n, 256)])
    sign = (1 - 2 * pred).float().view(n, 1, 1)  # + brightens towards class 1
    cf, todo = x.clone(), torch.ones(n, dtype=torch.bool)
    corner = torch.randint(0, max(1, h - 16), (n, 2), generator=g)
    for size in (4, 8, 12, 16):
        for i in torch.nonzero(todo).view(-1).tolist():
            r, c = corner[i].tolist()
            cf[i, :, r:r + size, c:c + size] = (x[i, :, r:r + size, c:c + size] + sign[i]).clamp(-1, 1)
        with torch.no_grad():
            todo = classifier(cf).argmax(1) == pred
    flipped = ~todo
    save_npz(path, sample_id=sample_ids, cf=to_uint8(cf), target=1 - pred, pred=pred, flipped=flipped,
             steps=torch.ones(n, dtype=torch.long), failed=torch.zeros(n, dtype=torch.bool))


class _TinyClassifier(nn.Module):
    def __init__(self, channels: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.fc = nn.Linear(4, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(torch.tanh(self.conv(x)).mean((2, 3)))


class _TinyTimeNet(nn.Module):
    """z, t -> image-shaped output (a stand-in UNet / PMF network: one conv, time as a bias)."""

    def __init__(self, channels: int = 3, out_channels: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(channels, out_channels, 3, padding=1)

    def forward(self, z: Tensor, t: Tensor, h: Tensor | None = None) -> Tensor:
        return self.conv(z) * 0.1 + 0.01 * t.float().view(-1, 1, 1, 1)


class _Sample:
    def __init__(self, sample: Tensor):
        self.sample = sample


class _TinyUNetLike(nn.Module):
    def __init__(self, out_channels: int):
        super().__init__()
        self.net = _TinyTimeNet(3, out_channels)

    def forward(self, z: Tensor, t: Tensor, class_labels: Tensor | None = None) -> _Sample:
        return _Sample(self.net(z, t))


def tiny_standins(seed: int = 0) -> Any:
    """TaskModels of tiny random networks with the paper-scale wrappers (EpsUNet, PMFNet, VGGPerceptual).

    For counting calls (NFE) of the real methods at paper settings in seconds; the numbers they
    produce mean nothing.
    """

    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        models = TaskModels(
            classifier=BinaryHead(_TinyClassifier(), kind="1logit", index=0),
            ddpm=EpsUNet(_TinyUNetLike(out_channels=6), CELEBA.num_train_timesteps),
            pmf=PMFNet(_TinyUNetLike(out_channels=3), "unet"),
            perceptual=VGGPerceptual(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())),
            names={"classifier": "tiny stand-in", "ddpm": "tiny stand-in", "pmf": "tiny stand-in",
                   "perceptual": "tiny stand-in"})
    for role in ("classifier", "ddpm", "pmf", "perceptual"):
        freeze(getattr(models, role))
    return models
