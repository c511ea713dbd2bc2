"""The hyperparameters of the built-in methods: one typed, frozen dataclass per method (defaults = its paper's),
the ranges of every numeric setting (``BOUNDS``, :mod:`vcebench.config.bounds`) and the parser that builds one
from a config mapping (:func:`parse_params`).

Torch-free on purpose: the config check that runs when the workflow builds its DAG parses every method's
settings (``vcebench.protocol.settings``) and would otherwise start torch (seconds) in every ``snakemake`` call.
Each method module imports its class from here (``methods.fire.FireParams`` is this module's ``FireParams``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from vcebench.config.bounds import Bound
from vcebench.config.load import ConfigError, check_keys, coerce_value, field_types
from vcebench.models.generative.levels import REFERENCE_T_FLOW

Norm = Literal["linf", "l2"]  # the PGD balls (methods/pgd.py)

P = TypeVar("P")


def parse_params(cls: type[P], params: dict[str, Any], section: str, image_size: int | None = None) -> P:
    """Build the dataclass ``cls`` from a config mapping: unknown keys and wrong types are
    :class:`ConfigError` naming ``section.key``; missing keys take the dataclass defaults. Every value is held to
    the class's ``BOUNDS`` (:mod:`vcebench.config.bounds`; a length in pixels to ``image_size`` when given), then
    to its ``validate``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    check_keys(section, params, set(fields))
    hints = field_types(cls)
    values = {}
    for k, v in params.items():
        values[k] = coerce_value(v, hints[k], f"{section}.{k}")
    try:
        obj = cls(**values)
    except TypeError as e:
        raise ConfigError(f"`{section}`: {e}") from None
    for k, bound in getattr(cls, "BOUNDS", {}).items():
        value = getattr(obj, k)
        for v in value if isinstance(value, tuple) else (value,):
            require(v is None or bound.contains(v, image_size), section,
                    f"{k} must be in {bound.describe(image_size)}, got {v!r}")
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate(section)
    return obj


def require(ok: bool, section: str, msg: str) -> None:
    """Raise :class:`ConfigError` about ``section`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"`{section}`: {msg}")


@dataclass(frozen=True)
class FireParams:
    """FiRe hyperparameters; defaults = the paper's (Sec. 4.1 "Implementation details")."""

    t: float = REFERENCE_T_FLOW  # fixed noise level (0.4)
    K: int = 15  # max refinement updates
    p_flip: float = 0.85  # early-stopping threshold on p_target
    eta: float = 0.02  # base guidance scale (Eq. adaptive_step)
    smoothgrad_n: int = 20  # SmoothGrad copies, one batched pass
    smoothgrad_sigma: float = 0.15  # SmoothGrad noise std (images in [-1, 1])
    lambda_cls: float = 1.0
    lambda_perc: float = 0.2
    lambda_tv: float = 0.01
    rho: float = 0.05  # saliency ratio (task specific)
    dilation: int = 2  # r: dilation radius in pixels
    feather: int = 3  # w: feather width in pixels
    mode: Literal["fixed", "one_step", "reverse"] = "fixed"
    mask: Literal["fire", "maskdime", "none"] = "fire"
    adaptive_step: bool = True  # false: constant eta
    early_stop: bool = True
    compaction: bool = True  # finished samples leave the batch
    maskdime_rho: float = 0.5  # mask = maskdime: share of the top-k kept for the blend mask
    loss_mask: Literal["current", "previous"] = "current"  # the soft mask of the loss image (module docstring)
    grad_norm: Literal["image", "mask"] = "image"  # mean |grad| over the image or inside the hard mask
    tv_reduction: Literal["mean", "sum"] = "mean"  # TV per pixel (mean: effectively off at 0.01) or summed
    sync_free: bool = False  # true: the masked loop (fire_refine_masked): no host read, the batch keeps its shape
    cuda_graphs: bool = False  # true (implies sync_free): on a CUDA device each update replays a captured graph

    @property
    def masked(self) -> bool:
        """Whether the sync-free, masked loop runs (``sync_free`` or ``cuda_graphs``)."""
        return self.sync_free or self.cuda_graphs

    # the range of every numeric setting (vcebench.config.bounds): checked in each config layer and resolved
    BOUNDS: ClassVar[dict[str, Bound]] = {
        "t": Bound(0, 1, lo_open=True, hi_open=True), "K": Bound(1, 1000), "p_flip": Bound(0, 1, lo_open=True),
        "eta": Bound(0, 100), "smoothgrad_n": Bound(1, 1000), "smoothgrad_sigma": Bound(0, 10),
        "lambda_cls": Bound(0, 1e4), "lambda_perc": Bound(0, 1e4), "lambda_tv": Bound(0, 1e4),
        "rho": Bound(0, 1, lo_open=True), "dilation": Bound(0, pixels=True), "feather": Bound(0, pixels=True),
        "maskdime_rho": Bound(0, 1, lo_open=True)}


@dataclass(frozen=True)
class GuidedDDPMParams:
    """The settings every DDPM-family method shares; defaults = DiME's CelebA settings of the reference code."""

    respacing: int = 200
    start_step: int = 60  # tau, in respaced steps
    scales: tuple[float, ...] = (8.0, 10.0, 15.0)  # classifier scales, tried in turn until the CF flips
    l1: float = 0.05
    perc: float = 30.0
    # where the l1 term is taken: ``noisy`` = ||z - x||_1 on the noisy state (DiME, FastDiME_CelebA, MaskDiME);
    # ``clean`` = ||x_t - x||_1 on the clean image that guides the step, a clean-image gradient beside the
    # classifier's (FastDiME_Med's x-ray protocol)
    l1_on: str = "noisy"
    # the form of the guidance loss: ``dime`` = DiME's logit loss x the classifier scale beside the l1 gradient
    # ``l1 * sign`` unscaled; ``med`` = FastDiME_Med's (models/diffusion.py:614-677): the BCE of the classifier
    # and the per-pixel mean l1 on the clean image, the whole loss x the classifier scale (its step, 756-763)
    guidance_form: str = "dime"
    BOUNDS: ClassVar[dict[str, Bound]] = {  # vcebench.config.bounds; a subclass adds its own
        "respacing": Bound(1, 10000), "start_step": Bound(0, 10000), "scales": Bound(0, 1e4), "l1": Bound(0, 1e4),
        "perc": Bound(0, 1e4)}

    def validate(self, section: str) -> None:
        require(1 <= self.start_step < self.respacing, section,
                f"start_step must be in [1, respacing) = [1, {self.respacing}), got {self.start_step}")
        require(self.l1_on in ("noisy", "clean"), section, f"l1_on must be noisy or clean, got {self.l1_on!r}")
        require(self.guidance_form in ("dime", "med"), section,
                f"guidance_form must be dime or med, got {self.guidance_form!r}")
        require(self.guidance_form == "dime" or self.l1_on == "clean", section,
                "guidance_form med takes its l1 on the clean image: set l1_on: clean")

    @property
    def cls_loss(self) -> str:
        """The classifier loss of :func:`methods.guidance.guidance_grads`: DiME's logit loss, Med's BCE."""
        return "bce" if self.guidance_form == "med" else "logit"


@dataclass(frozen=True)
class DimeParams(GuidedDDPMParams):
    """DiME hyperparameters; defaults = the CelebA settings of the reference code."""


@dataclass(frozen=True)
class MaskDimeParams(GuidedDDPMParams):
    """MaskDiME hyperparameters; defaults = the CelebA settings of the reference ``test.sh``."""

    k: float = 0.05  # top-k ratio of H*W for the noisy-state mask Mz
    rho: float = 0.5  # share of the top-k kept for the clean-image mask Mx
    dilation: int = 5  # odd square kernel
    grad_scale: float = 8.0  # s in g = s (g_cls + g_dist)
    sync_free: bool = False  # true: masking instead of compaction, no host read in the guided steps
    cuda_graphs: bool = False  # true (implies sync_free): on a CUDA device each guided step replays a captured graph

    @property
    def masked(self) -> bool:
        """Whether the sync-free, masked path runs (``sync_free`` or ``cuda_graphs``)."""
        return self.sync_free or self.cuda_graphs

    BOUNDS: ClassVar[dict[str, Bound]] = {
        **GuidedDDPMParams.BOUNDS, "k": Bound(0, 1, lo_open=True), "rho": Bound(0, 1, lo_open=True),
        "dilation": Bound(1, pixels=True), "grad_scale": Bound(0, 1e4)}

    def validate(self, section: str) -> None:
        super().validate(section)
        require(self.dilation % 2 == 1, section, f"dilation must be odd, got {self.dilation}")


@dataclass(frozen=True)
class FastDimeParams(GuidedDDPMParams):
    """FastDiME hyperparameters; defaults = the CelebA settings of the reference code."""

    mask_threshold: float = 0.15
    mask_dilation: int = 5  # odd max-pool kernel
    warmup_steps: int = 30  # guided steps before the self-optimised mask starts
    scale_grads: bool = False  # divide guidance gradients by sqrt(abar_t) (reference default: no)
    # the self-optimised mask starts at the first step whose train timestep is <= mask_from_t x T (FastDiME_Med:
    # t <= 200 of 1000, i.e. 0.2) instead of after ``warmup_steps`` guided steps; null: warmup_steps
    mask_from_t: float | None = None
    BOUNDS: ClassVar[dict[str, Bound]] = {
        **GuidedDDPMParams.BOUNDS, "mask_threshold": Bound(0, 1), "mask_dilation": Bound(1, pixels=True),
        "warmup_steps": Bound(0, 10000), "mask_from_t": Bound(0, 1, lo_open=True)}  # mask_from_t: or null

    def validate(self, section: str) -> None:
        super().validate(section)
        require(self.mask_dilation % 2 == 1, section, f"mask_dilation must be odd, got {self.mask_dilation}")


@dataclass(frozen=True)
class AceParams:
    """ACE hyperparameters; defaults = ``scripts/celeba-attack.sh`` (and ``main.py``'s defaults it keeps)."""

    respacing: int = 50  # --timestep_respacing
    start_step: int = 4  # tau in respaced steps (0.1 x 50 steps: noised to step 4); set by the noise protocol
    distance: Literal["l1", "l2"] = "l1"  # the distance term of the attack loss (ACE l1 / ACE l2)
    dist_weight: float = 0.001  # --dist_l1 (or --dist_l2)
    attack_steps: int = 50  # --attack_iterations
    attack_step: float = 1.0  # --attack_step, in 1/255 of the [0, 1] range
    attack_epsilon: float = 255.0  # --attack_epsilon, l-inf bound in 1/255 (255: none)
    dilation: int = 15  # --sampling_dilation (odd max-pool kernel)
    inpaint: float = 0.15  # --sampling_inpaint: keep the input where the dilated mask is below this
    BOUNDS: ClassVar[dict[str, Bound]] = {  # vcebench.config.bounds
        "respacing": Bound(1, 10000), "start_step": Bound(0, 10000), "dist_weight": Bound(0, 1e4),
        "attack_steps": Bound(1, 10000), "attack_step": Bound(0, 255, lo_open=True),
        "attack_epsilon": Bound(0, 255, lo_open=True), "dilation": Bound(1, pixels=True), "inpaint": Bound(0, 1)}

    def validate(self, section: str) -> None:
        require(0 <= self.start_step < self.respacing, section,
                f"start_step must be in [0, respacing) = [0, {self.respacing}), got {self.start_step}")
        require(self.dilation % 2 == 1, section, f"dilation must be odd, got {self.dilation}")


@dataclass(frozen=True)
class PixelParams:
    """PGD budget: the ball (``norm``, radius ``eps``), the step size and the number of steps ([0, 1] units)."""

    norm: Norm = "linf"
    eps: float = 8 / 255
    step_size: float = 2 / 255
    steps: int = 20
    BOUNDS: ClassVar[dict[str, Bound]] = {  # vcebench.config.bounds
        "eps": Bound(0, 1000, lo_open=True), "step_size": Bound(0, 1000, lo_open=True), "steps": Bound(1, 10000)}


@dataclass
class NoEditParams:
    """No hyperparameters."""


@dataclass
class GroundTruthParams:
    """No hyperparameters."""
