"""ACE: adversarial counterfactual visual explanations (Jeanneret, Simon, Jurie, CVPR 2023).

Reference: guillaumejs2403/ACE, run as in ``scripts/celeba-attack.sh`` (``--attack_method PGD
--attack_iterations 50 --attack_joint True --dist_l1 0.001 --timestep_respacing 50 --sampling_time_fraction
0.1 --sampling_stochastic True --sampling_inpaint 0.15``; ``--sampling_dilation`` and ``--attack_step`` /
``--attack_epsilon`` at ``main.py``'s defaults 15, 1 and 255). The steps, in order:

1. Pre-explanation (``main.py`` ``filter_fn`` -> ``attack.perturb``; ``core/attacks_and_models.py`` ``PGD.attack``
   with ``JointClassifierDDPM``): PGD on the image in [0, 1] against the classifier seen *through the DDPM
   filter*: the image is noised to respaced step tau (``q_sample``), denoised by ancestral sampling down to
   step 0 (fresh noise at every step and every attack iteration, none at the last step), and classified;
   the gradient runs back through the whole chain. The loss is the classifier's cross-entropy towards the
   target plus the distance term ``dist_weight * ||x_adv - x||_1`` (``ace_l1``) or ``dist_weight *
   ||x_adv - x||_2`` (``ace_l2``) (``main.py`` ``get_dist_fn``); each of the ``attack_steps`` iterations moves
   ``attack_step / 255`` against the sign of the total gradient and projects into the l-inf ball of
   ``attack_epsilon / 255`` (255: no bound) and [0, 1].
2. Mask (``core/utils.py`` ``generate_mask``): the channel-summed ``|x_adv - x|``, divided by its per-sample
   maximum, max-pool dilated by ``dilation``; the input is kept where it is below ``inpaint`` (0.15).
3. Inpainting (``main.py`` ``filter_fn``): the pre-explanation noised to the same tau, then at each step
   ``i = tau .. 0`` the kept region is replaced by the input noised to step i (fresh noise) before the
   ancestral step; at the end the kept region is the input, bit for bit.

tau is ``start_step`` (ACE: ``int(0.1 * 50) = 5`` steps, i.e. noised to respaced step 4 of 50, denoised by
5 UNet calls), set by the noise protocol from the reference step 4 of 50 like every DDPM row.

Differences from the reference code:

- The classifier loss is summed over the batch (ACE: ``BCEWithLogitsLoss``, the batch mean), so the balance
  between the classifier and the distance terms does not depend on the batch size: it equals ACE's at batch
  size 1 (the CelebA script's batch of 3 weighs the distance 3x more).
- All noise comes from each sample's own streams (``SampleGenerators``): one for the attack, one for the
  inpainting; ACE draws from the global generator.
- A pre-explanation equal to the input (nothing changed) keeps the whole input; ACE divides by a zero
  maximum there (NaN mask, everything inpainted).
- A sample whose attack gradient or inpainting state turns non-finite fails (returns its input); the
  batch goes on without it.
- ACE's classifier is the 1-logit DenseNet on [0, 1] images; here the task's classifier on [-1, 1] images
  (its 2-logit cross-entropy is ACE's BCE for a 1-logit head).
"""

from __future__ import annotations

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .base import (
    FAIL_NONFINITE_GRAD,
    FAIL_NONFINITE_STATE,
    NFE,
    ActiveBatch,
    Counterfactuals,
    finalize,
    nonfinite,
)
from .ddpm import Schedule
from .guidance import target_ce
from .masks import difference_mask
from .params import AceParams
from .pgd import from_unit, pgd_step, sample_norm, to_unit


def ddpm_filter(models: TaskModels, sched: Schedule, x: Tensor, tau: int, noise: SampleGenerators) -> Tensor:
    """ACE's filter (``JointClassifierDDPM.forward``): ``x`` noised to step ``tau``, then ancestral sampling
    down to 0 (``tau + 1`` UNet calls, no noise at the last); differentiable in ``x``."""
    shape, dev = x.shape[1:], x.device
    z = sched.q_sample(x, tau, noise.randn(*shape, device=dev))
    for i in range(tau, -1, -1):
        mean, var, _ = sched.p_mean_variance_grad(models.ddpm, z, i)
        z = mean + var.sqrt() * noise.randn(*shape, device=dev) if i > 0 else mean
    return z


def distance_grad(u: Tensor, u0: Tensor, distance: str) -> Tensor:
    """Gradient in ``u`` of ``||u - u0||_1`` or ``||u - u0||_2`` per sample (0 where ``u = u0``, as autograd's)."""
    d = u - u0
    if distance == "l1":
        return d.sign()
    return d / sample_norm(d).clamp_min(1e-12)


@torch.enable_grad()
def attack_grad(models: TaskModels, sched: Schedule, p: AceParams, u: Tensor, u0: Tensor, target: Tensor,
                noise: SampleGenerators) -> Tensor:
    """Gradient in ``u`` (images in [0, 1]) of ACE's attack loss: the cross-entropy towards ``target`` of the
    classifier on the DDPM-filtered image, plus the weighted distance to ``u0``."""
    u_in = u.detach().requires_grad_(True)
    logits = models.classifier(ddpm_filter(models, sched, from_unit(u_in), p.start_step, noise))
    g = torch.autograd.grad(target_ce(logits, target).sum(), u_in)[0]
    return g + p.dist_weight * distance_grad(u, u0, p.distance)


@torch.no_grad()
def inpaint(models: TaskModels, sched: Schedule, tau: int, pe: Tensor, x: Tensor, keep: Tensor,
            noise: SampleGenerators) -> Tensor:
    """ACE's RePaint-style filtering (``filter_fn``): the pre-explanation ``pe`` noised to ``tau``; before each
    ancestral step the region ``keep`` is the input noised to that step; the result is the input on ``keep``."""
    shape, dev = x.shape[1:], x.device
    z = sched.q_sample(pe, tau, noise.randn(*shape, device=dev))
    for i in range(tau, -1, -1):
        z = torch.where(keep, sched.q_sample(x, i, noise.randn(*shape, device=dev)), z)
        mean, var, _ = sched.p_mean_variance(models.ddpm, z, i)
        z = mean + var.sqrt() * noise.randn(*shape, device=dev) if i > 0 else mean
    return torch.where(keep, x, z)


def ace_explain(x: Tensor, target: Tensor, models: TaskModels, gen: SampleGenerators, p: AceParams,
                nfe: NFE) -> ActiveBatch:
    """ACE on a batch: the PGD pre-explanation through the DDPM filter, its mask, the inpainting. Returns the
    batch's record: ``out["cf"]`` (the counterfactuals, the input where failed), ``out["mask"]`` (inpainted)."""
    sched = Schedule.from_ddpm(models.ddpm, p.respacing)
    b = ActiveBatch(x, nfe, cf=x.clone(), mask=torch.zeros_like(x[:, :1], dtype=torch.bool))
    s = b.start(x=x, u0=to_unit(x), target=target.to(x.device))
    s.u = s.u0.clone()
    attack_noise, inpaint_noise = gen.fork("attack"), gen.fork("inpaint")
    for _ in range(p.attack_steps):  # 1. the pre-explanation (PGD.attack)
        if len(b) == 0:
            break
        g = attack_grad(models, sched, p, s.u, s.u0, s.target, attack_noise.subset(b.row_list))
        bad = nonfinite(g)
        b.fail(bad, FAIL_NONFINITE_GRAD)
        s.u = pgd_step(s.u, g, s.u0, "linf", p.attack_step / 255, p.attack_epsilon / 255)
        b.keep((~bad).cpu())
    if len(b):
        pe = from_unit(s.u)
        keep = difference_mask(s.x, pe, p.dilation) < p.inpaint  # 2. generate_mask; True = keep the input
        cf = inpaint(models, sched, p.start_step, pe, s.x, keep, inpaint_noise.subset(b.row_list))  # 3.
        b.fail(nonfinite(cf), FAIL_NONFINITE_STATE)
        b.record(cf=cf, mask=~keep)
    return b


class ACE:
    """``ace`` and its variants (``ace_l1``, ``ace_l2``: config ``variants.ace``) behind the Method interface."""

    roles = ("classifier", "ddpm")

    def __init__(self, name: str, params: AceParams):
        self.name, self.params = name, params

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals:
        nfe = NFE(len(x))
        models = nfe.counted(models)
        b = ace_explain(x, target, models, generator, self.params, nfe)
        steps = torch.full((len(x),), self.params.attack_steps, dtype=torch.int64)
        return finalize(x, b.out["cf"], target, models, steps, b.failed, b.reason, nfe, {"mask": b.out["mask"]})
