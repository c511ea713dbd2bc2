"""FastDiME, FastDiME-2 and FastDiME-2+ (Weng et al., 2024).

Reference: ppegiosk/FastDiME_CelebA ``core/sample_utils.py`` (``get_FastDiME_iterative_sampling``,
``generate_mask``) and ``main.py`` (the two-pass variants). Reference behaviour kept:
the clean image guiding step i is the clipped Tweedie estimate from step i + 1 (the input at
the first step), gradients are taken w.r.t. that detached estimate (no backprop through the
UNet) and are NOT divided by ``sqrt(abar_t)`` (``scale_grads=False``); the self-optimised mask
``B = dilate(|x - x0hat| / max) < threshold`` (1 = keep the input) starts after ``warmup_steps``
guided steps and re-noises the kept region with ``q(x, t_i)`` at the step just run
(an index the reference does not shift); the output is pasted back, ``z <- B x + (1 - B) z``.
Two-pass variants: pass 1 (no mask for -2, self-optimised mask for -2+) gives cf_1; pass 2
starts from the same noise with the fixed mask from ``|x - cf_1|`` applied at every step.
Difference: retries and the second pass re-draw the SAME noise (fresh noise in the reference).
"""

from __future__ import annotations

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .ddpm import DDPMMethod, Schedule, l1_terms, sample_step
from .guidance import guidance_grads
from .masks import difference_mask
from .params import FastDimeParams


def fastdime_attempt(models: TaskModels, sched: Schedule, p: FastDimeParams, x: Tensor, target: Tensor,
                     gen: SampleGenerators, scale: float, self_mask: bool,
                     fixed_keep: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One FastDiME pass; returns (z_0, keep mask B of the last step, 1 = input kept)."""
    shape, dev = x.shape[1:], x.device
    noise = gen.fork("steps")
    z = sched.q_sample(x, p.start_step, gen.fork("init").randn(*shape, device=dev))
    x_t = x.clone()
    keep = fixed_keep
    mask_t = None if p.mask_from_t is None else p.mask_from_t * int(models.ddpm.num_train_timesteps)
    for j, i in enumerate(range(p.start_step - 1, -1, -1)):
        mean, var, x0hat = sched.p_mean_variance(models.ddpm, z, i)
        g_cls, g_perc = guidance_grads(models, x_t, x, target, scale, p.perc, p.cls_loss)
        div = sched.sqrt_abar(i, x) if p.scale_grads else 1.0
        l1_clean, l1_noisy = l1_terms(p, z, x_t, x, scale)
        grads = (g_cls + g_perc + l1_clean) / div + l1_noisy
        z = sample_step(mean, var, grads, i, noise.randn(*shape, device=dev) if i > 0 else None)
        x_t = x0hat  # Tweedie estimate (FastDiME Eq. 4) guides the next step
        masking = j >= p.warmup_steps if mask_t is None else sched.train_steps[i] <= mask_t
        if self_mask and masking:  # self-optimised mask (Eq. 6)
            keep = (difference_mask(x, x_t, p.mask_dilation) < p.mask_threshold).to(x.dtype)
        if keep is not None:  # Eqs. 7-8: keep the input's clean image and noisy state outside the mask
            x_t = keep * x + (1 - keep) * x_t
            z = keep * sched.q_sample(x, i, noise.randn(*shape, device=dev)) + (1 - keep) * z
    if keep is not None:  # final paste-back
        z = keep * x + (1 - keep) * z
    else:
        keep = torch.zeros_like(x[:, :1])
    return z, keep


class FastDiME(DDPMMethod):
    """``fastdime`` (one pass, self-optimised mask), ``fastdime2`` and ``fastdime2plus`` (two passes)."""

    def __init__(self, name: str, params: FastDimeParams, passes: int = 1, first_pass_mask: bool = True):
        super().__init__(name, params)
        self.passes, self.first_pass_mask = passes, first_pass_mask

    def _attempt(self, models, sched, x, target, gen, scale):
        p = self.params
        z, keep = fastdime_attempt(models, sched, p, x, target, gen, scale, self_mask=self.first_pass_mask)
        if self.passes == 2:
            fixed = (difference_mask(x, z.clamp(-1, 1), p.mask_dilation) < p.mask_threshold).to(x.dtype)
            z, keep = fastdime_attempt(models, sched, p, x, target, gen, scale, self_mask=False, fixed_keep=fixed)
        return z, {"mask": keep < 0.5}
