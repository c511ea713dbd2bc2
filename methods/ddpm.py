"""The DDPM machinery shared by DiME, FastDiME(-2, -2+) and MaskDiME.

Respacing follows guided-diffusion's ``space_timesteps`` / ``SpacedDiffusion`` (used by all
three reference codes): ``respacing`` evenly spread train timesteps, betas recomputed from the
kept ``alphas_cumprod``, and the network called with the original train timestep.
The reference DDPMs learn their variance (``learn_sigma=True``): a ddpm with ``learned_variance``
(the guided-diffusion format) gives per-pixel variances interpolated between ``beta_i`` and the
clipped posterior variance, used for the guided mean shift and the noise as DiME's sampler does.
Other DDPMs (a diffusers UNet2DModel trained by vcebench predicts eps only) use the posterior
variance ("fixed small"), with its t = 0 value replaced by the t = 1 value as in guided-diffusion's
clipped log-variance (so the last step is still guided; no noise is added at t = 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import FAIL_NONFINITE_STATE, NFE, nonfinite


def space_timesteps(num_train_timesteps: int, respacing: int) -> list[int]:
    """guided-diffusion ``space_timesteps(T, [respacing])``: evenly strided train timesteps."""
    if not 1 <= respacing <= num_train_timesteps:
        raise ValueError(f"respacing must be in [1, {num_train_timesteps}], got {respacing}")
    if respacing == 1:
        return [0]
    stride = (num_train_timesteps - 1) / (respacing - 1)
    return sorted({round(i * stride) for i in range(respacing)})


@dataclass
class Schedule:
    """A respaced DDPM schedule; index ``i`` in ``[0, respacing)`` is a respaced step."""

    timesteps: Tensor  # long (R,): the train timestep of each respaced step
    abar: Tensor  # float64 (R,)
    betas: Tensor
    coef_x0: Tensor  # posterior mean coefficients (float64)
    coef_z: Tensor
    variance: Tensor  # clipped posterior variance (float64)

    @classmethod
    def from_ddpm(cls, ddpm, respacing: int) -> Schedule:
        ac = torch.as_tensor(ddpm.alphas_cumprod, dtype=torch.float64).cpu()
        ts = torch.tensor(space_timesteps(int(ddpm.num_train_timesteps), respacing), dtype=torch.long)
        abar = ac[ts]
        abar_prev = torch.cat([torch.ones(1, dtype=torch.float64), abar[:-1]])
        betas = 1 - abar / abar_prev
        alphas = 1 - betas
        post_var = betas * (1 - abar_prev) / (1 - abar)
        variance = torch.cat([post_var[1:2], post_var[1:]]) if len(post_var) > 1 else post_var
        return cls(timesteps=ts, abar=abar, betas=betas, coef_x0=betas * abar_prev.sqrt() / (1 - abar),
                   coef_z=(1 - abar_prev) * alphas.sqrt() / (1 - abar), variance=variance)

    def _s(self, v: Tensor, i: int, like: Tensor) -> Tensor:
        return torch.tensor(float(v[i]), dtype=like.dtype, device=like.device)

    def sqrt_abar(self, i: int, like: Tensor) -> Tensor:
        return self._s(self.abar.sqrt(), i, like)

    def q_sample(self, x: Tensor, i: int, noise: Tensor) -> Tensor:
        """z_i = sqrt(abar_i) x + sqrt(1 - abar_i) eps."""
        return self._s(self.abar.sqrt(), i, x) * x + self._s((1 - self.abar).sqrt(), i, x) * noise

    @torch.no_grad()
    def p_mean_variance(self, ddpm, z: Tensor, i: int) -> tuple[Tensor, Tensor, Tensor]:
        """One UNet call: (posterior mean, variance, clipped Tweedie estimate x0hat) at step ``i``."""
        t = torch.full((len(z),), int(self.timesteps[i]), dtype=torch.long, device=z.device)
        eps, v = ddpm.eps_var(z, t) if getattr(ddpm, "learned_variance", False) else (ddpm.eps(z, t), None)
        x0 = ((z - self._s((1 - self.abar).sqrt(), i, z) * eps) / self._s(self.abar.sqrt(), i, z)).clamp(-1, 1)
        mean = self._s(self.coef_x0, i, z) * x0 + self._s(self.coef_z, i, z) * z
        return mean, self.learned_variance(v, i, z) if v is not None else self._s(self.variance, i, z), x0

    def learned_variance(self, v: Tensor, i: int, like: Tensor) -> Tensor:
        """guided-diffusion's ``LEARNED_RANGE``: ``exp(f log beta_i + (1 - f) log var~_i)``, ``f = (v + 1) / 2``,
        per pixel, on the respaced schedule (beta_i and the clipped posterior variance var~_i)."""
        f = (v.float() + 1) / 2
        log_var = f * self._s(self.betas.log(), i, f) + (1 - f) * self._s(self.variance.log(), i, f)
        return log_var.exp().to(like.dtype)


def sample_step(mean: Tensor, var: Tensor, grads: Tensor, i: int, noise: Tensor) -> Tensor:
    """Guided ancestral step: ``mu' = mu - Sigma g``; ``z_{i-1} = mu' + sigma eps`` (no noise at i = 0)."""
    mean = mean - var * grads
    return mean + var.sqrt() * noise if i > 0 else mean


@torch.no_grad()
def denoise(sched: Schedule, ddpm, z: Tensor, start: int, noise_fn: Callable[[], Tensor], rows: Tensor,
            nfe: NFE) -> Tensor:
    """Unguided ancestral sampling from step ``start`` down to 0 (``start + 1`` UNet calls); returns x at 0."""
    for i in range(start, -1, -1):
        mean, var, _ = sched.p_mean_variance(ddpm, z, i)
        nfe.add("unet", rows)
        z = sample_step(mean, var, torch.zeros_like(z), i, noise_fn() if i > 0 else None)
    return z


AttemptFn = Callable[[Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]]


@torch.no_grad()
def retry_scales(x: Tensor, target: Tensor, classifier, scales: tuple[float, ...], attempt: AttemptFn,
                 nfe: NFE) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """DiME's classifier-scale schedule (main.py): try each scale in order on the samples not flipped yet.

    ``attempt(rows, x_rows, target_rows, scale) -> (cf, failed, fail_reason, extras)`` must draw its
    noise from fresh forks of the samples' generators, so every retry starts from the SAME noise.
    A sample that never flips keeps the last attempt's counterfactual.
    Returns (cf, flipped, scale, attempts, failed, fail_reason, extras).
    """
    n = len(x)
    cf = x.clone()
    flipped = torch.zeros(n, dtype=torch.bool)
    failed = torch.zeros(n, dtype=torch.bool)
    reason = torch.zeros(n, dtype=torch.int64)
    scale_used = torch.zeros(n)
    attempts = torch.zeros(n, dtype=torch.int64)
    extras: dict[str, Tensor] = {}
    for s in scales:
        rows = torch.nonzero(~flipped & ~failed).flatten()
        if len(rows) == 0:
            break
        dev = rows.to(x.device)
        out, bad, why, ext = attempt(rows, x[dev], target[dev], float(s))
        cf[dev] = out
        failed[rows] |= bad
        reason[rows] = torch.where(bad, why, reason[rows])
        scale_used[rows] = float(s)
        attempts[rows] += 1
        for k, v in ext.items():
            if k not in extras:
                extras[k] = torch.zeros((n, *v.shape[1:]), dtype=v.dtype)
            extras[k][rows] = v.cpu()
        logits = classifier(out)
        nfe.add("classifier", rows)
        flipped[rows] = (logits.argmax(1).cpu() == target[dev].cpu()) & ~bad
    return cf, flipped, scale_used, attempts, failed, reason, extras


def mark_nonfinite(state: Tensor, failed: Tensor, reason: Tensor, code: int = FAIL_NONFINITE_STATE) -> None:
    """Flag rows of ``state`` with NaN / inf as failed (in place), keeping the first reason."""
    bad = nonfinite(state).cpu() & ~failed
    reason[bad] = code
    failed |= bad
