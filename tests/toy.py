"""A toy world for method tests: 3 x 16 x 16 images whose class is the brightness of a central blob.

- ``toy_images(n, seed)``: textured background + a centred Gaussian blob of amplitude +-[0.3, 0.8]
  (label 1 = bright); images in [-1, 1].
- ``ToyClassifier``: logit = 8 * (Gaussian-weighted central brightness), as (N, 2) ``[0, l]``.
- ``GaussianDDPM``: the exact eps-predictor of the (Gaussian) distribution the toy images are drawn
  from, on a linear 100-step schedule (``eps``, ``alphas_cumprod``, ``num_train_timesteps``).
- ``UNetDDPM``: the same contract around an untrained tiny diffusers UNet2DModel (shape / NFE tests).
- ``GaussianPMF``: the exact ``E[x | z_t]`` for ``z_t = (1 - t) x + t eps`` under the same prior.
- ``ToyPerceptual``: mean squared difference of 2x average-pooled images, (N,).
Every network is per-sample (no batch statistics), so results cannot depend on the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vcebench.models.base import TaskModels

SIZE = 16


def blob(size: int = SIZE, sigma: float = 2.0) -> Tensor:
    ax = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(ax[:, None] ** 2 + ax[None, :] ** 2) / (2 * sigma**2))
    return g


def toy_images(n: int, seed: int = 0, size: int = SIZE) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 2
    bg = 0.25 * torch.randn(n, 3, size // 4, size // 4, generator=g)
    bg = F.interpolate(bg, size=size, mode="bilinear", align_corners=False)
    amp = (labels.float() * 2 - 1) * (0.3 + 0.5 * torch.rand(n, generator=g))
    x = bg + amp.view(-1, 1, 1, 1) * blob(size)
    return x.clamp(-1, 1), labels


class ToyClassifier(nn.Module):
    def __init__(self, size: int = SIZE, gain: float = 8.0):
        super().__init__()
        w = blob(size, sigma=1.5)
        self.register_buffer("w", w / w.sum())
        self.gain = gain

    def forward(self, x: Tensor) -> Tensor:
        logit = self.gain * (x.mean(1) * self.w).flatten(1).sum(1)
        return torch.stack([torch.zeros_like(logit), logit], dim=1)


def linear_alphas_cumprod(T: int = 100) -> Tensor:
    betas = torch.linspace(1e-4 * 1000 / T, 0.02 * 1000 / T, T, dtype=torch.float64)
    return torch.cumprod(1 - betas, 0)


class ToyPrior:
    """The Gaussian that generates the toy images: x = B a + delta n, a ~ N(0, I), with B spanning the
    smooth backgrounds (std 0.25) and the blob (std 0.6). Posterior means are linear maps in its eigenbasis."""

    def __init__(self, size: int = SIZE, delta: float = 0.05):
        low = size // 4
        basis = []
        for c in range(3):
            for k in range(low * low):
                d = torch.zeros(1, 3, low, low)
                d.view(-1)[c * low * low + k] = 0.25
                basis.append(F.interpolate(d, size=size, mode="bilinear", align_corners=False).flatten())
        basis.append(0.6 * blob(size).expand(3, size, size).flatten())
        b = torch.stack(basis, 1).double()
        cov = b @ b.T + delta**2 * torch.eye(b.shape[0], dtype=torch.float64)
        lam, self.v = torch.linalg.eigh(cov)
        self.lam = lam.clamp_min(0)

    def posterior_mean(self, z: Tensor, a: Tensor, s: Tensor) -> Tensor:
        """E[x | z] for z = a x + s eps, with per-sample scalars a, s (N,)."""
        v, lam = self.v.to(z.device), self.lam.to(z.device)[None]
        a, s = a.double()[:, None], s.double()[:, None]
        coef = a * lam / (a**2 * lam + s**2)
        out = ((z.flatten(1).double() @ v) * coef) @ v.T
        return out.to(z.dtype).view_as(z)


_PRIOR: ToyPrior | None = None


def prior() -> ToyPrior:
    global _PRIOR
    if _PRIOR is None:
        _PRIOR = ToyPrior()
    return _PRIOR


class GaussianDDPM(nn.Module):
    """eps_theta(z, t) = E[eps | z_t] under the toy prior: the exact DDPM denoiser of the toy data."""

    def __init__(self, T: int = 100):
        super().__init__()
        self.num_train_timesteps = T
        self.alphas_cumprod = linear_alphas_cumprod(T)

    def eps(self, z: Tensor, t: Tensor) -> Tensor:
        ab = self.alphas_cumprod.to(z.device)[t.long()]
        a, s = ab.sqrt(), (1 - ab).sqrt()
        x0 = prior().posterior_mean(z, a, s)
        return (z - a.float().view(-1, 1, 1, 1) * x0) / s.float().view(-1, 1, 1, 1)


class UNetDDPM(nn.Module):
    """The ddpm contract around an untrained tiny diffusers UNet2DModel."""

    def __init__(self, T: int = 100, channels: int = 3, size: int = SIZE):
        super().__init__()
        from diffusers import UNet2DModel

        torch.manual_seed(0)
        self.unet = UNet2DModel(sample_size=size, in_channels=channels, out_channels=channels,
                                block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                                down_block_types=("DownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "UpBlock2D")).eval()
        for p in self.unet.parameters():
            p.requires_grad_(False)
        self.num_train_timesteps = T
        self.alphas_cumprod = linear_alphas_cumprod(T)
        self.calls = 0

    def eps(self, z: Tensor, t: Tensor) -> Tensor:
        self.calls += 1
        return 0.1 * self.unet(z, t).sample


class GaussianPMF(nn.Module):
    """G(z, t) = E[x | z_t] under the toy prior, z_t = (1 - t) x + t eps (differentiable in z)."""

    def predict_clean(self, z: Tensor, t) -> Tensor:
        t = torch.as_tensor(t, dtype=torch.float64, device=z.device).reshape(-1).expand(len(z))
        return prior().posterior_mean(z, 1 - t, t)

    def u(self, z: Tensor, r: Tensor, t: Tensor) -> Tensor:
        t = torch.as_tensor(t, dtype=z.dtype).reshape(-1, 1, 1, 1)
        return (z - self.predict_clean(z, t)) / t.clamp_min(0.05)


class ToyPerceptual(nn.Module):
    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return (F.avg_pool2d(x, 2) - F.avg_pool2d(y, 2)).pow(2).flatten(1).mean(1)


def toy_models(unet: bool = False) -> TaskModels:
    return TaskModels(classifier=ToyClassifier(), ddpm=UNetDDPM() if unet else GaussianDDPM(), pmf=GaussianPMF(),
                      perceptual=ToyPerceptual(), names={"classifier": "toy"})


def toy_target(models: TaskModels, x: Tensor) -> Tensor:
    with torch.no_grad():
        return 1 - models.classifier(x).argmax(1)
