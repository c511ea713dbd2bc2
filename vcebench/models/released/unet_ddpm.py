"""``UNetDDPM``: a released DDPM network behind the ``ddpm`` role's epsilon contract."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..generative.ddpm import DiffusersDDPM, EpsDDPM
from .guided_diffusers import to_diffusers
from .guided_unet import GuidedUNet
from .schedule import alphas_cumprod_for


class UNetDDPM(EpsDDPM):
    """A released DDPM network ``unet(x, t)`` (``in_channels`` / ``out_channels`` attributes) with its
    training schedule: ``diffusion_steps`` betas of ``noise_schedule``, float64, as guided-diffusion
    computes them. Used for the guided-diffusion format (:mod:`vcebench.models.released.guided_unet`) and
    FastDiME's medical format (:mod:`vcebench.models.released.fastdime_unet`).

    With a learned sigma (``out_channels == 2 * in_channels``) the second half is the variance value
    ``v`` that guided-diffusion's ``LEARNED_RANGE`` sampler, used by DiME / FastDiME / MaskDiME, turns
    into the per-pixel variance of every ancestral step (guided mean shift and noise);
    ``methods/ddpm.py`` does the same on the respaced schedule.
    """

    def __init__(self, unet: nn.Module, num_train_timesteps: int, noise_schedule: str = "linear", name: str = ""):
        super().__init__()
        self.unet, self.name = unet, name
        self.num_train_timesteps = int(num_train_timesteps)
        self.learned_variance = unet.out_channels == 2 * unet.in_channels
        self.register_buffer("alphas_cumprod", torch.from_numpy(alphas_cumprod_for(noise_schedule,
                                                                                    self.num_train_timesteps)),
                             persistent=False)

    def eps_var(self, z: Tensor, t: Tensor) -> tuple[Tensor, Tensor | None]:
        out = self.unet(z, t)
        c = z.shape[1]
        if self.learned_variance:
            return out[:, :c], out[:, c:]
        return out, None

    def to_diffusers(self) -> DiffusersDDPM:
        """The same model as a diffusers ``UNet2DModel`` + ``DDPMScheduler`` (float32; learned variance
        as ``variance_type="learned_range"``). In memory: a saved diffusers config has one head width
        for all levels, so with ``num_heads`` on levels of different widths the saved copy would differ."""
        from diffusers import DDPMScheduler

        if not isinstance(self.unet, GuidedUNet):
            raise TypeError(f"to_diffusers converts a guided-diffusion UNet, not {type(self.unet).__name__}")
        f = self.unet.flags
        betas = 1 - self.alphas_cumprod / torch.cat([torch.ones(1, dtype=torch.float64), self.alphas_cumprod[:-1]])
        sched = DDPMScheduler(num_train_timesteps=self.num_train_timesteps, trained_betas=betas.tolist(),
                              prediction_type="epsilon", clip_sample=True,
                              variance_type="learned_range" if self.learned_variance else "fixed_small")
        if f["noise_schedule"] == "linear":  # recorded as the named schedule, recomputed in float64 on load
            sched = DDPMScheduler(num_train_timesteps=self.num_train_timesteps, beta_schedule="linear",
                                  beta_start=float(betas[0]), beta_end=float(betas[-1]), prediction_type="epsilon",
                                  clip_sample=True, variance_type=sched.config.variance_type)
        return DiffusersDDPM(to_diffusers(self.unet), sched).eval()
