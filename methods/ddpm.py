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
from dataclasses import dataclass, field

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels
from vcebench.models.generative.schedule import space_timesteps

from .base import FAIL_NONFINITE_STATE, NFE, ActiveBatch, Counterfactuals, finalize, nonfinite
from .graphs import at_step
from .guidance import l1_grad, mean_l1_grad
from .params import GuidedDDPMParams


def l1_terms(p: GuidedDDPMParams, z: Tensor, x_t: Tensor, x: Tensor,
             scale: float = 1.0) -> tuple[Tensor | float, Tensor | float]:
    """(clean-image l1 gradient, noisy-state l1 gradient), weighted by ``p.l1``; the other one is 0 (``p.l1_on``).
    Under ``guidance_form: med`` Med's per-pixel mean l1 times the classifier ``scale`` (its step multiplies the
    whole loss's gradient by it: models/diffusion.py:761)."""
    if p.guidance_form == "med":
        return scale * p.l1 * mean_l1_grad(x_t, x), 0.0
    if p.l1_on == "clean":
        return p.l1 * l1_grad(x_t, x), 0.0
    return 0.0, p.l1 * l1_grad(z, x)


@dataclass
class Schedule:
    """A respaced DDPM schedule; index ``i`` in ``[0, respacing)`` is a respaced step."""

    timesteps: Tensor  # long (R,): the train timestep of each respaced step
    abar: Tensor  # float64 (R,)
    betas: Tensor
    coef_x0: Tensor  # posterior mean coefficients (float64)
    coef_z: Tensor
    variance: Tensor  # clipped posterior variance (float64)
    train_steps: list[int] = field(default_factory=list)  # ``timesteps`` on the host, read by every step
    _cache: dict = field(default_factory=dict, repr=False, compare=False)  # device copies (see _s)

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
                   coef_z=(1 - abar_prev) * alphas.sqrt() / (1 - abar), variance=variance,
                   train_steps=ts.tolist())

    def _s(self, v: str, i: int | Tensor, like: Tensor) -> Tensor:
        """Coefficient ``v`` at step ``i`` (an int or a 0-dim device tensor) as a 0-dim tensor of ``like``'s
        dtype and device; each vector is copied to the device once, so a step reads it there without a host
        round trip."""
        key = (v, like.dtype, like.device)
        if key not in self._cache:
            self._cache[key] = self._vectors()[v].to(dtype=like.dtype, device=like.device)
        return at_step(self._cache[key], i)

    def _train_step(self, i: int | Tensor, z: Tensor) -> Tensor:
        """The network's timestep for each row of ``z`` at respaced step ``i`` (an int, or a 0-dim device tensor
        read on the device: no host round trip, so a captured step can take it as an input)."""
        if torch.is_tensor(i):
            key = ("timesteps", z.device)
            if key not in self._cache:
                self._cache[key] = self.timesteps.to(z.device)
            return at_step(self._cache[key], i).expand(len(z))
        return torch.full((len(z),), self.train_steps[i], dtype=torch.long, device=z.device)

    def _vectors(self) -> dict[str, Tensor]:
        return {"sqrt_abar": self.abar.sqrt(), "sqrt_1m_abar": (1 - self.abar).sqrt(), "coef_x0": self.coef_x0,
                "coef_z": self.coef_z, "variance": self.variance, "log_beta": self.betas.log(),
                "log_variance": self.variance.log()}

    def sqrt_abar(self, i: int | Tensor, like: Tensor) -> Tensor:
        return self._s("sqrt_abar", i, like)

    def q_sample(self, x: Tensor, i: int | Tensor, noise: Tensor) -> Tensor:
        """z_i = sqrt(abar_i) x + sqrt(1 - abar_i) eps."""
        return self._s("sqrt_abar", i, x) * x + self._s("sqrt_1m_abar", i, x) * noise

    @torch.no_grad()
    def p_mean_variance(self, ddpm, z: Tensor, i: int | Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One UNet call: (posterior mean, variance, clipped Tweedie estimate x0hat) at step ``i``."""
        return self.p_mean_variance_grad(ddpm, z, i)

    def p_mean_variance_grad(self, ddpm, z: Tensor, i: int | Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`p_mean_variance` that autograd can run through (ACE's attack through the DDPM)."""
        t = self._train_step(i, z)
        eps, v = ddpm.eps_var(z, t) if getattr(ddpm, "learned_variance", False) else (ddpm.eps(z, t), None)
        x0 = ((z - self._s("sqrt_1m_abar", i, z) * eps) / self._s("sqrt_abar", i, z)).clamp(-1, 1)
        mean = self._s("coef_x0", i, z) * x0 + self._s("coef_z", i, z) * z
        return mean, self.learned_variance(v, i, z) if v is not None else self._s("variance", i, z), x0

    def learned_variance(self, v: Tensor, i: int | Tensor, like: Tensor) -> Tensor:
        """guided-diffusion's ``LEARNED_RANGE``: ``exp(f log beta_i + (1 - f) log var~_i)``, ``f = (v + 1) / 2``,
        per pixel, on the respaced schedule (beta_i and the clipped posterior variance var~_i)."""
        f = (v.float() + 1) / 2
        log_var = f * self._s("log_beta", i, f) + (1 - f) * self._s("log_variance", i, f)
        return log_var.exp().to(like.dtype)


def sample_step(mean: Tensor, var: Tensor, grads: Tensor, i: int, noise: Tensor) -> Tensor:
    """Guided ancestral step: ``mu' = mu - Sigma g``; ``z_{i-1} = mu' + sigma eps`` (no noise at i = 0)."""
    mean = mean - var * grads
    return mean + var.sqrt() * noise if i > 0 else mean


@torch.no_grad()
def denoise(sched: Schedule, ddpm, z: Tensor, start: int, noise_fn: Callable[[], Tensor]) -> Tensor:
    """Unguided ancestral sampling from step ``start`` down to 0 (``start + 1`` UNet calls); returns x at 0."""
    for i in range(start, -1, -1):
        mean, var, _ = sched.p_mean_variance(ddpm, z, i)
        z = sample_step(mean, var, torch.zeros_like(z), i, noise_fn() if i > 0 else None)
    return z


class DDPMMethod:
    """A DDPM baseline behind the Method interface: :func:`run_ddpm_method` around the subclass's
    ``_attempt(models, sched, x, target, generators, scale) -> (z_0, extras)``."""

    passes = 1

    def __init__(self, name: str, params):
        self.name, self.params = name, params
        self.roles = ("classifier", "ddpm") + (("perceptual",) if params.perc else ())

    masked = False  # a subclass with a sync-free path: its ``sync_free`` / ``cuda_graphs`` (run_ddpm_method)

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals:
        return run_ddpm_method(self.params, x, target, models, generator, self._attempt, passes=self.passes,
                               masked=self.masked)

    def _attempt(self, models: TaskModels, sched: Schedule, x: Tensor, target: Tensor, gen: SampleGenerators,
                 scale: float) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError


AttemptFn = Callable[[TaskModels, Schedule, Tensor, Tensor, SampleGenerators, float],
                     tuple[Tensor, dict[str, Tensor]]]


def run_ddpm_method(p, x: Tensor, target: Tensor, models: TaskModels, generator: SampleGenerators,
                    attempt: AttemptFn, passes: int, masked: bool = False) -> Counterfactuals:
    """DiME's classifier-scale schedule (``main.py``), shared by the DDPM baselines: try each scale of
    ``p.scales`` in order on the samples not flipped yet; ``steps`` = guided steps run.

    ``attempt(models, sched, x, target, generators, scale) -> (z_0, extras)`` runs one method on the
    active samples; it draws its noise from fresh forks of their generators, so every retry starts
    from the SAME noise. A sample that never flips keeps its last attempt's counterfactual; one whose
    state turns non-finite fails and returns its input. ``p.respacing`` and ``p.start_step`` set the
    trajectory (``passes`` trajectories per attempt). ``masked``: the batch keeps its shape (a sample that
    flipped or failed is run again but keeps its record), so every attempt has the same shapes for a
    captured step; the one host read is whether any sample is left, between attempts.
    """
    nfe = NFE(len(x))
    models = nfe.counted(models)
    sched = Schedule.from_ddpm(models.ddpm, p.respacing)
    b = ActiveBatch(x, nfe, cf=x.clone(), scale=torch.zeros(len(x), device=x.device),
                    attempts=torch.zeros(len(x), dtype=torch.int64, device=x.device))
    target = target.to(x.device)
    active = torch.ones(len(b), dtype=torch.bool, device=x.device)  # masked: the rows still trying
    for scale in p.scales:
        if len(b) == 0:
            break
        xs, ts = x[b.index], target[b.index]
        z, extras = attempt(models, sched, xs, ts, generator.subset(b.row_list), float(scale))
        bad = nonfinite(z)
        b.fail(active & bad, FAIL_NONFINITE_STATE)
        b.record(active, cf=z.clamp(-1, 1), scale=float(scale), attempts=b.out["attempts"][b.index] + 1, **extras)
        with torch.no_grad():
            flipped = (models.classifier(z.clamp(-1, 1)).argmax(1) == ts) & ~bad
        if masked:
            active = active & ~flipped & ~bad
            if not bool(active.any()):  # between attempts: no sample left
                break
        else:
            b.keep((~flipped & ~bad).cpu())  # the attempt's one host sync: flipped / failed samples leave
            active = torch.ones(len(b), dtype=torch.bool, device=x.device)
    info = {k: v for k, v in b.out.items() if k != "cf"}
    steps = b.out["attempts"] * p.start_step * passes
    return finalize(x, b.out["cf"], target, models, steps, b.failed, b.reason, nfe, info)
