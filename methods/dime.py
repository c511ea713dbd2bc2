"""DiME: diffusion models for counterfactual explanations (Jeanneret et al., ACCV 2022).

Reference: guillaumejs2403/DiME ``core/sample_utils.py`` (``get_DiME_iterative_sampling``) and
``main.py``. Reference behaviour kept (differences from the paper's text):
the input is noised to respaced step ``start_step`` but guidance starts at ``start_step - 1``;
the classifier term is the logit loss (``--use_logits True`` in the CelebA scripts); classifier
and perceptual gradients are divided by ``sqrt(abar_t)``, the l1 term acts on ``z_t - x``.
Difference: every retry (scales 8, 10, 15) re-draws the SAME noise (the reference draws fresh
sampling noise per retry), so results do not depend on batch composition.
"""

from __future__ import annotations

from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .ddpm import DDPMMethod, Schedule, denoise, l1_terms, sample_step
from .guidance import guidance_grads
from .params import DimeParams


def dime_attempt(models: TaskModels, sched: Schedule, p: DimeParams, x: Tensor, target: Tensor,
                 gen: SampleGenerators, scale: float) -> Tensor:
    """One DiME run at classifier scale ``scale``; the clean image is re-estimated by unguided
    ancestral denoising of z down to 0 after every guided step (~tau^2 / 2 UNet calls)."""
    shape = x.shape[1:]
    noise = gen.fork("steps")
    z = sched.q_sample(x, p.start_step, gen.fork("init").randn(*shape, device=x.device))
    x_t = x.clone()
    for i in range(p.start_step - 1, -1, -1):
        mean, var, x0hat = sched.p_mean_variance(models.ddpm, z, i)
        # Med's DiME: the classifier on the one-step estimate, its l1 on the generated image (diffusion.py:655-667)
        x_cls = x0hat if p.guidance_form == "med" else x_t
        g_cls, g_perc = guidance_grads(models, x_cls, x, target, scale, p.perc, p.cls_loss)
        l1_clean, l1_noisy = l1_terms(p, z, x_t, x, scale)
        grads = (g_cls + g_perc + l1_clean) / sched.sqrt_abar(i, x) + l1_noisy
        z = sample_step(mean, var, grads, i, noise.randn(*shape, device=x.device) if i > 0 else None)
        if i > 0:  # x_t: unguided denoising of z_{i-1} down to 0 (the recursive clean estimate)
            x_t = denoise(sched, models.ddpm, z, i - 1, lambda: noise.randn(*shape, device=x.device))
    return z


class DiME(DDPMMethod):
    def _attempt(self, models, sched, x, target, gen, scale):
        return dime_attempt(models, sched, self.params, x, target, gen, scale), {}
