"""MaskDiME (Guo et al., 2026): DiME with gradient top-k dual masks and one-step clean estimates.

Reference: clguo/MaskDiME ``core/sample_utils.py`` (``get_MaskDiME_sampling_CelebA``,
``compute_grad_masks_nested2``) run as in ``test.sh`` (``grads_clip False``, ``per_channel False``,
``grad_scale 8``, ``topk_ratio 0.05``, ``x_t_rate 0.5``, blur 5). Reference behaviour kept:
the clean image is ``Mx_prev * x0hat + (1 - Mx_prev) * x`` (the input at the first step); the
classifier gradient (scaled by the retry scale and divided by ``sqrt(abar_t)``) gives
``Mz = top-k`` and ``Mx = top (rho k)`` of its channel-mean magnitude, both dilated; the total
``grad_scale * (g_cls + g_dist)`` moves the posterior mean inside Mz with no sampling noise, and
outside Mz the state is reset to ``q(x, t_i)`` at the step just run, so the output carries
``sqrt(1 - abar_0)`` noise outside the mask. Differences: masks by max-pool dilation (equal to the
reference's Gaussian blur > 0); retries re-draw the SAME noise.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .base import counter_of
from .ddpm import DDPMMethod, Schedule, l1_terms
from .graphs import StepGraphs
from .guidance import guidance_grads
from .masks import nested_topk
from .params import MaskDimeParams


def maskdime_attempt(models: TaskModels, sched: Schedule, p: MaskDimeParams, x: Tensor, target: Tensor,
                     gen: SampleGenerators, scale: float) -> tuple[Tensor, Tensor]:
    """One MaskDiME run; returns (z_0, Mz of the last step). With ``p.masked`` the step index is a device
    tensor and, under ``cuda_graphs`` on a CUDA device, each step replays a captured graph (methods/graphs.py);
    the noise of every step is drawn before it, so the steps read nothing back on the host either way."""
    shape, dev = x.shape[1:], x.device
    noise = gen.fork("steps")
    z = sched.q_sample(x, p.start_step, gen.fork("init").randn(*shape, device=dev))
    capture = p.cuda_graphs and dev.type == "cuda"
    step = StepGraphs(partial(maskdime_step, models, sched, p), capture, counter_of(models))
    masks: dict[str, Tensor] = {}  # Mx of the previous step (none at the first)
    for i in range(p.start_step - 1, -1, -1):
        at = torch.tensor(i, device=dev) if p.masked else i
        o = step("maskdime", float(scale), i=at, z=z, x=x, target=target, noise=noise.randn(*shape, device=dev),
                 **masks)
        z, masks = o["z"], {"mx": o["mx"]}
    return z, o["mz"]


def maskdime_step(models: TaskModels, sched: Schedule, p: MaskDimeParams, scale: float, *, i: int | Tensor, z: Tensor,
                  x: Tensor, target: Tensor, noise: Tensor, mx: Tensor | None = None) -> dict[str, Tensor]:
    """One guided step (``get_MaskDiME_sampling_CelebA``'s loop body) from tensors: x0hat and the posterior,
    the clean image ``Mx_prev * x0hat + (1 - Mx_prev) * x`` (the input at the first step, ``mx`` None), the
    gradients, the nested masks and the masked update with ``noise`` for ``q(x, t_i)`` outside Mz."""
    mean, var, x0hat = sched.p_mean_variance(models.ddpm, z, i)
    x_t = x.clone() if mx is None else mx * x0hat + (1 - mx) * x
    g_cls, g_perc = guidance_grads(models, x_t, x, target, scale, p.perc, p.cls_loss)
    sab = sched.sqrt_abar(i, x)
    g_cls = g_cls / sab
    mz, mx = nested_topk(g_cls.abs().mean(1, keepdim=True), p.k, p.rho, p.dilation)
    l1_clean, l1_noisy = l1_terms(p, z, x_t, x, scale)
    grads = p.grad_scale * (g_cls + (g_perc + l1_clean) / sab + l1_noisy)
    z = mz * (mean - var * grads) + (1 - mz) * sched.q_sample(x, i, noise)
    return {"z": z, "mz": mz, "mx": mx}


class MaskDiME(DDPMMethod):
    @property
    def masked(self) -> bool:
        return self.params.masked

    def _attempt(self, models, sched, x, target, gen, scale):
        z, mz = maskdime_attempt(models, sched, self.params, x, target, gen, scale)
        return z, {"mask": mz > 0.5}
