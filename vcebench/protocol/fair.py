"""The fairness rules of the comparison (docs/protocol.md, "The fair protocol"): the papers' values, one
resolution rule that carries them to a task's resolution, and one equal-compute rule. The search-space rule is
the tuning rule's (:mod:`vcebench.protocol.tune`).

- **Resolution rule** (:func:`scale_radius`, :func:`scale_kernel`): a pixel radius set at the paper's
  resolution is multiplied by ``resolution / paper_resolution`` and rounded half up (0.5 -> 1), never below 0;
  an odd kernel (a max-pool dilation of size ``2 r + 1``) scales its radius ``r``. A fraction of the image
  (FiRe's rho, MaskDiME's k and rho, FastDiME's and ACE's mask thresholds) and every guidance strength are
  unchanged. The starting noise follows the noise rule (:mod:`vcebench.protocol.noise`), not this one.
- **Equal-compute rule** (:data:`GUIDED_UPDATES`): every method gets the same number of guided updates per
  trajectory, FiRe's paper K = 15: FiRe ``K: 15``; a DDPM baseline ``guided_steps: 15`` (its respacing is
  derived so that its start step at the starting noise is 15: ``noise.respacing_for_steps``); ACE
  ``attack_steps: 15`` (one attack iteration backpropagates through its denoising chain). What a method does per
  trajectory as published is kept and costed in the tables: DiME's unguided chain after each step, the retry
  scales of the DDPM baselines (up to 3 trajectories), FastDiME-2(+)'s second pass.

:data:`PAPER` lists every value with its source. :func:`rule_params` is the rule applied to a synthetic task;
``config/config.yaml`` writes it out (tests/test_fair.py checks the two agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GUIDED_UPDATES = 15  # FiRe's K (paper Sec. 4.1): the guided updates per trajectory of every method
# the key that holds a method's guided-update count (the equal-compute rule)
UPDATE_KEY = {"fire": "K", "dime": "guided_steps", "fastdime": "guided_steps", "fastdime2": "guided_steps",
              "fastdime2plus": "guided_steps", "maskdime": "guided_steps", "ace": "attack_steps"}
DDPM_FAMILY = ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime")
# the real dataset a synthetic one stands for, and the resolution its papers' values were set at
DOMAIN = {"synthfaces": ("celeba", 128), "synthxray": ("chexpert", 512)}


@dataclass(frozen=True)
class PaperValue:
    value: Any
    kind: str  # radius | kernel | fraction | strength | other
    resolution: int | None  # px the value was set at (radius / kernel only)
    source: str


_FIRE = "FiRe paper Sec. 4.1"
_DIME = "DiME main.py / FastDiME_CelebA main.py (CelebA 128 px)"
_MED = "nina-weng/FastDiME_Med (CheXpert)"
_MASK = "clguo/MaskDiME test.sh (CelebA 128 px)"
_ACE = "guillaumejs2403/ACE scripts/celeba-attack.sh (CelebA 128 px)"
_MEDC = "nina-weng/FastDiME_Med@c0494c3"  # its code, file:line (the chexpert_med domain: the x-ray baselines)

# (domain, method family, param) -> PaperValue; `attribute` entries: (domain, method, param, attribute)
PAPER: dict[tuple, PaperValue] = {
    ("celeba", "fire", "dilation"): PaperValue(2, "radius", 128, _FIRE),
    ("celeba", "fire", "feather"): PaperValue(3, "radius", 128, _FIRE),
    ("chexpert", "fire", "dilation"): PaperValue(2, "radius", 512, _FIRE + " (CheXpert at 512 px)"),
    ("chexpert", "fire", "feather"): PaperValue(3, "radius", 512, _FIRE + " (CheXpert at 512 px)"),
    ("celeba", "fire", "rho", "Smiling"): PaperValue(0.05, "fraction", None, _FIRE),
    ("celeba", "fire", "rho", "Young"): PaperValue(0.12, "fraction", None, _FIRE),
    ("chexpert", "fire", "rho", "Pacemaker"): PaperValue(0.20, "fraction", None, _FIRE),
    ("*", "fire", "eta"): PaperValue(0.02, "strength", None, _FIRE),
    ("celeba", "ddpm", "scales"): PaperValue([8, 10, 15], "strength", None, _DIME),
    ("chexpert", "ddpm", "scales"): PaperValue([100], "strength", None, _MED + ": classifier scale 100"),
    ("celeba", "ddpm", "l1"): PaperValue(0.05, "strength", None, _DIME + ": l1 on the noisy state"),
    ("chexpert", "ddpm", "l1"): PaperValue(200.0, "strength", None, _MED + ": l1 on the denoised image"),
    ("celeba", "ddpm", "perc"): PaperValue(30.0, "strength", None, _DIME),
    ("chexpert", "ddpm", "perc"): PaperValue(0.0, "strength", None, _MED + ": no perceptual loss"),
    ("celeba", "ddpm", "ref_start"): PaperValue((60, 200), "other", None, _DIME + ": start 60 of 200"),
    ("chexpert", "ddpm", "ref_start"): PaperValue((80, 200), "other", None, _MED + ": start 400 of 1000"),
    ("celeba", "fastdime", "mask_dilation"): PaperValue(5, "kernel", 128, "ppegiosk/FastDiME_CelebA --dilation 5"),
    ("chexpert", "fastdime", "mask_dilation"): PaperValue(21, "kernel", 512, _MED + ": dilation 21 at 512 px"),
    ("chexpert", "fastdime", "mask_from_t"): PaperValue(0.2, "other", None, _MED + ": mask from t <= 200 of 1000"),
    ("*", "fastdime", "mask_threshold"): PaperValue(0.15, "fraction", None, "ppegiosk/FastDiME_CelebA"),
    ("*", "maskdime", "dilation"): PaperValue(5, "kernel", 128, _MASK + ": blur 5"),
    ("*", "maskdime", "grad_scale"): PaperValue(8.0, "strength", None, _MASK),
    ("celeba", "maskdime", "k", "Smiling"): PaperValue(0.05, "fraction", None, _MASK),
    ("celeba", "maskdime", "k", "Young"): PaperValue(0.1, "fraction", None, _MASK + " (age)"),
    # MaskDiME has no x-ray setting: its age value (the larger region) stands in; listed in NO_PAPER_VALUE
    ("chexpert", "maskdime", "k", "Pacemaker"): PaperValue(0.1, "fraction", None, "none: MaskDiME's age value"),
    ("*", "ace", "dilation"): PaperValue(15, "kernel", 128, _ACE + " --sampling_dilation 15"),
    ("*", "ace", "attack_step"): PaperValue(1.0, "strength", None, _ACE + " --attack_step 1 (/255)"),
    ("*", "ace", "dist_weight"): PaperValue(0.001, "strength", None, _ACE + " --dist_l1 0.001"),
    # the papers' budgets: the guided updates of one trajectory (a paper row's; the calibrated rows run 15)
    ("*", "fire", "paper_updates"): PaperValue(15, "other", None, _FIRE + ": K = 15"),
    ("celeba", "ddpm", "paper_updates"): PaperValue(60, "other", None, _DIME + ": 60 guided steps, the start 60 of "
                                                    "200 respaced steps, each scale of its retries in turn"),
    ("chexpert", "ddpm", "paper_updates"): PaperValue(400, "other", None, _MED + ": 400 guided steps, the start 400 "
                                                      "of 1000"),
    ("*", "ace", "paper_updates"): PaperValue(50, "other", None, _ACE + " --attack_iterations 50"),
    # FastDiME_Med exactly as its code runs (domain chexpert_med, falling back to chexpert)
    ("chexpert_med", "ddpm", "guidance_form"): PaperValue(
        "med", "other", None, _MEDC + " models/diffusion.py:313-325 (nn.L1Loss per pixel, .mean(1)), 601-612 (BCE "
        "of sigmoid(logit), not DiME's logit loss), 614-677 (the weighted sum, loss.mean().backward()), 756-761 "
        "(mean - beta_t grad scale / sqrt(alpha_t): the classifier scale multiplies the l1 too)"),
    ("chexpert_med", "ddpm", "l1"): PaperValue(200.0, "strength", None, _MEDC + " CFgenerating/config_cf.py:75-78 "
                                               "(Denoised_L1 200, on the denoised image)"),
    ("chexpert_med", "dime", "l1"): PaperValue(50.0, "strength", None, _MEDC + " CFgenerating/config_cf.py:75-77 "
                                               "(DiME: [Lc, Denoised_L1, L1] = [1, 0, 50], L1 on the generated "
                                               "image: generate_cf.py:81-84, diffusion.py:664-667)"),
    ("chexpert_med", "ddpm", "scales"): PaperValue([100], "strength", None, _MEDC + " CFgenerating/config_cf.py:82"),
    ("chexpert_med", "ddpm", "ref_start"): PaperValue((80, 200), "other", None,
                                                      _MEDC + " CFgenerating/config_cf.py:83-84 (400 of 1000)"),
    ("chexpert_med", "fastdime", "mask_dilation"): PaperValue(21, "kernel", 224, _MEDC + " CFgenerating/config_cf."
                                                              "py:93 (dilation 21), train/config.py:57-58 (224 px)"),
    ("chexpert_med", "fastdime", "warmup_fraction"): PaperValue(
        0.5, "other", None, _MEDC + " CFgenerating/config_cf.py:84,92 and models/diffusion.py:772 (the mask from t <= "
        "start_tau 200 of a trajectory from 400: after half of it)"),
}
# a domain whose facts not listed fall back to another's (Med's code is the CheXpert papers' protocol)
DOMAIN_FALLBACK = {"chexpert_med": "chexpert"}
# the domains `fair.rule_params(..., med_code=True)` (the default) reads instead
MED_CODE_DOMAIN = {"chexpert": "chexpert_med"}
# task params that are no paper value carried by the rule, with the reason (the test lists them)
NO_PAPER_VALUE = {
    ("synthxray_pacemaker", "maskdime", "k"): "MaskDiME publishes no x-ray setting: its age value 0.1 (the larger "
                                               "region of its two) is used",
    ("synthxray_pacemaker", "ace", "dilation"): "ACE publishes no x-ray setting: its CelebA 15 px at 128 px",
    ("synthxray_pacemaker", "maskdime", "dilation"): "MaskDiME publishes no x-ray setting: its CelebA 5 at 128 px",
}


def scale_radius(px: float, resolution: int, paper_resolution: int) -> int:
    """A pixel radius at ``paper_resolution`` carried to ``resolution``: scaled, rounded half up, >= 0."""
    if px < 0 or resolution <= 0 or paper_resolution <= 0:
        raise ValueError(f"scale_radius needs px >= 0 and positive resolutions, got {px}, {resolution}, "
                         f"{paper_resolution}")
    return max(0, int(math.floor(px * resolution / paper_resolution + 0.5)))


def scale_kernel(size: int, resolution: int, paper_resolution: int) -> int:
    """An odd dilation kernel ``2 r + 1`` at ``paper_resolution`` carried to ``resolution`` by its radius."""
    if size < 1 or size % 2 == 0:
        raise ValueError(f"a dilation kernel is odd and >= 1, got {size}")
    return 2 * scale_radius((size - 1) / 2, resolution, paper_resolution) + 1


def paper_value(domain: str, method: str, param: str, attribute: str | None = None) -> PaperValue:
    """The paper's value of ``param`` for ``method`` (a DDPM baseline's shared losses under family ``ddpm``,
    FastDiME-2 / -2+ under ``fastdime``) on ``domain`` (``celeba`` / ``chexpert``); KeyError when none."""
    fam = "fastdime" if method.startswith("fastdime") else method
    for key in ((domain, fam, param, attribute), ("*", fam, param, attribute), (domain, fam, param),
                ("*", fam, param), (domain, "ddpm", param), ("*", "ddpm", param)):
        if key in PAPER and (fam in DDPM_FAMILY or key[1] != "ddpm"):
            return PAPER[key]
    if domain in DOMAIN_FALLBACK:
        return paper_value(DOMAIN_FALLBACK[domain], method, param, attribute)
    raise KeyError(f"no paper value for {method}.{param} on {domain}")


def paper_updates(dataset: str, method: str) -> int:
    """The guided updates of one trajectory of ``method``'s paper (a paper row's budget, config
    ``variants.<method>.paper`` and ``tasks.<task>.params.<method>_paper``) on ``dataset``'s domain."""
    domain = DOMAIN[dataset][0] if dataset in DOMAIN else dataset
    return int(paper_value(domain, method, "paper_updates").value)


def carried(pv: PaperValue, resolution: int) -> Any:
    """``pv`` at ``resolution`` under the resolution rule (radii and kernels scaled, the rest unchanged)."""
    if pv.kind == "radius":
        return scale_radius(pv.value, resolution, pv.resolution)
    if pv.kind == "kernel":
        return scale_kernel(pv.value, resolution, pv.resolution)
    return pv.value


# the params the rule sets per method (the rest keep config.yaml's method_defaults: the papers' own values)
RULE_PARAMS = {"fire": ("rho", "dilation", "feather", "eta"),
               "dime": ("scales", "l1", "perc"),
               "fastdime": ("scales", "l1", "perc", "mask_dilation", "mask_threshold"),
               "maskdime": ("scales", "l1", "perc", "k", "dilation", "grad_scale"),
               "ace": ("dilation", "attack_step", "dist_weight")}


def pixel_values(dataset: str, method: str, attribute: str | None = None) -> dict[str, PaperValue]:
    """The paper's pixel values (radii, dilation kernels) of ``method`` that the resolution rule carries to a
    synthetic ``dataset`` (``{}`` for a dataset the papers ran on, or a method without paper values)."""
    if dataset not in DOMAIN:
        return {}
    fam = "fastdime" if method.startswith("fastdime") else method
    domain, _ = DOMAIN[dataset]
    values = {k: paper_value(domain, method, k, attribute) for k in RULE_PARAMS.get(fam, ())}
    return {k: pv for k, pv in values.items() if pv.kind in ("radius", "kernel")}


def rule_params(dataset: str, attribute: str, resolution: int, med_code: bool = True) -> dict[str, dict[str, Any]]:
    """Every tuned method's params on a synthetic task of ``dataset`` / ``attribute`` at ``resolution``: the
    papers' values (:data:`PAPER`) under the resolution rule, the equal-compute counts, the paper's start.
    ``med_code``: the x-ray baselines as FastDiME_Med's code runs them (domain ``chexpert_med``: its loss form,
    DiME's l1 50 on the generated image, its 224 px kernel, the mask after half the trajectory; ``False``: the
    x-ray protocol before issue #62, the papers' CheXpert values)."""
    domain, _ = DOMAIN[dataset]
    domain = MED_CODE_DOMAIN.get(domain, domain) if med_code else domain
    out: dict[str, dict[str, Any]] = {}
    for m in ("fire", *DDPM_FAMILY, "ace"):
        fam = "fastdime" if m.startswith("fastdime") else m
        p: dict[str, Any] = {}
        for k in RULE_PARAMS[fam]:
            p[k] = carried(paper_value(domain, m, k, attribute), resolution)
        p[UPDATE_KEY[m]] = GUIDED_UPDATES
        if m in DDPM_FAMILY:
            p["ref_start_step"], p["ref_respacing"] = paper_value(domain, m, "ref_start").value
            p["l1_on"] = "noisy" if domain == "celeba" else "clean"
            if domain == "chexpert_med":
                p["guidance_form"] = paper_value(domain, m, "guidance_form").value
                if fam == "fastdime":
                    p["mask_from_t"] = None
                    p["warmup_fraction"] = paper_value(domain, m, "warmup_fraction").value
            elif fam == "fastdime" and domain == "chexpert":
                p["mask_from_t"] = paper_value(domain, m, "mask_from_t").value
        out[m] = p
    return out
