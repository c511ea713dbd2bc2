"""Network calls (NFE) per counterfactual of every method at paper settings: the analytic counts, derived
from the reference code, and the same counts measured on the real methods with tiny stand-in networks.

An NFE table is ``{network: {"fwd": calls, "bwd": calls}}``.
"""

from __future__ import annotations

from typing import Any

import torch

from methods import get_method

from ..config.tasks import get_task, split_method
from ..core.rng import SampleGenerators
from ..costs.measure import nfe_by_network
from ..costs.standins import tiny_standins
from ..protocol.noise import resolve_method

NFE = dict[str, dict[str, float]]


def _nfe(**kw: float) -> NFE:
    out: NFE = {}
    for key, v in kw.items():
        net, d = key.rsplit("_", 1)
        out.setdefault(net, {"fwd": 0.0, "bwd": 0.0})[d] = float(v)
    return out


def _scale(n: NFE, k: float) -> NFE:
    return {net: {d: v * k for d, v in dv.items()} for net, dv in n.items()}


def ddpm_family_nfe(method: str, tau: int, attempts: float = 1.0) -> NFE:
    """Calls per CF of DiME / FastDiME(-2, -2+) / MaskDiME (reference code; ``methods/`` counts the same).

    Per pass of ``tau`` guided steps: one UNet call per step (DiME adds the unguided recursive
    denoising of ``tau - 1 - j`` steps after step j: tau (tau + 1) / 2 calls in all), a classifier
    forward + input gradient and one perceptual call + gradient per step. FastDiME-2 / -2+ run two
    passes. Each attempt (classifier scale) ends with one classifier forward (flip check), and the
    final counterfactual gets one more. ``attempts`` = mean classifier scales tried per CF.
    """
    unet = tau + tau * (tau - 1) / 2 if method == "dime" else tau
    passes = 2 if method in ("fastdime2", "fastdime2plus") else 1
    per_attempt = _nfe(unet_fwd=passes * unet, classifier_fwd=passes * tau + 1, classifier_bwd=passes * tau,
                       perceptual_fwd=passes * tau, perceptual_bwd=passes * tau)
    return _add(_scale(per_attempt, attempts), _nfe(classifier_fwd=1))


def fire_nfe(mean_updates: float, smoothgrad_n: int = 20) -> NFE:
    """Calls per CF of FiRe (Algorithm 1) with ``mean_updates`` refinement updates per CF.

    Per update: SmoothGrad (N classifier forwards + input gradients), the loss on the guided clean
    image (classifier and perceptual, forward + gradient, backward through the PMF), the PMF
    prediction of the updated state (kept with its graph for the next update's gradient, as
    ``methods/fire.py`` does), and one classifier forward for the early-stop test. Once per CF: the
    first PMF prediction and the final flip check.
    """
    return _add(_scale(fire_nfe_per_update(smoothgrad_n), mean_updates), _nfe(pmf_fwd=1, classifier_fwd=1))


def fire_nfe_per_update(smoothgrad_n: int = 20) -> NFE:
    """The per-update part of :func:`fire_nfe`."""
    return _nfe(classifier_fwd=smoothgrad_n + 2, classifier_bwd=smoothgrad_n + 1,
                pmf_fwd=1, pmf_bwd=1, perceptual_fwd=1, perceptual_bwd=1)


def _add(a: NFE, b: NFE) -> NFE:
    out = {net: dict(d) for net, d in a.items()}
    for net, d in b.items():
        for k, v in d.items():
            out.setdefault(net, {"fwd": 0.0, "bwd": 0.0})[k] = out.get(net, {}).get(k, 0.0) + v
    return out


def measured_paper_nfe(cfg: dict, task_name: str = "celeba_smile", n: int = 1, resolution: int = 8,
                       methods: tuple[str, ...] = ("fire", "dime", "fastdime", "fastdime2", "fastdime2plus",
                                                   "maskdime")) -> dict[str, dict[str, Any]]:
    """Run the real methods with ``task_name``'s (paper) hyperparameters on tiny stand-ins; read their NFE.

    Returns ``{method: {"nfe": {net: {fwd, bwd}}, "mean_steps": .., "analytic": NFE for the same
    steps / attempts, "match": bool}}`` (a random classifier decides how many attempts / updates run,
    so the analytic counts are evaluated at the observed ones).
    """

    task = get_task(cfg, task_name)
    models = tiny_standins()
    x = torch.rand(n, 3, resolution, resolution, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        target = 1 - models.classifier(x).argmax(1)
    out: dict[str, dict[str, Any]] = {}
    for name in methods:
        params = resolve_method(cfg, task, name)[0]
        cf = get_method(name, params)(x, target, models, SampleGenerators(int(cfg["seed"]), list(range(n))))
        measured = {k: v for k, v in nfe_by_network(cf.info).items() if v["fwd"] or v["bwd"]}
        steps = float(cf.steps.float().mean())
        base = split_method(name)[0]
        if base == "fire":
            analytic = fire_nfe(steps, int(params["smoothgrad_n"]))
        else:
            passes = 2 if base in ("fastdime2", "fastdime2plus") else 1
            analytic = ddpm_family_nfe(base, int(params["start_step"]), steps / (int(params["start_step"]) * passes))
        analytic = {k: v for k, v in analytic.items() if v["fwd"] or v["bwd"]}
        match = set(measured) == set(analytic) and all(
            abs(measured[k][d] - analytic[k][d]) < 1e-6 for k in measured for d in ("fwd", "bwd"))
        out[name] = {"nfe": measured, "mean_steps": steps, "analytic": analytic, "match": bool(match)}
    return out
