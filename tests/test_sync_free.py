"""The sync-free paths of FiRe and MaskDiME (``sync_free`` / ``cuda_graphs``): no host read inside the loop,
checked by a guard that makes every host read of a tensor raise, and the eager path's counterfactuals bit
for bit (masking instead of batch compaction; every op of the toy networks is per sample)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

import methods
from methods import fire, maskdime
from methods.base import NFE, parse_params
from methods.fire import FireParams
from methods.graphs import StepGraphs
from tests.test_methods import NaNOnMarker
from tests.toy import GaussianDDPM, GaussianPMF, toy_images, toy_models, toy_target
from vcebench.config.load import ConfigError
from vcebench.core.rng import SampleGenerators

HOST_READS = ("item", "cpu", "numpy", "tolist", "__bool__", "__int__", "__float__", "__index__")


class HostRead(RuntimeError):
    """A tensor was read on the host inside a guarded region."""


class NoHostReads:
    """While active, every host read of a tensor (``.item()``, ``.cpu()``, ``.numpy()``, ``.tolist()``, ``bool``,
    ``int``, ``float``, ``__index__``: a ``.any()`` or a comparison in an ``if`` included) raises :class:`HostRead`.
    The CPU has no ``torch.cuda.set_sync_debug_mode``; these are the calls that synchronise on a GPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.mp, self.active = monkeypatch, False
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._guarded(name, original))

    def _guarded(self, name: str, original):
        def call(t, *args, **kwargs):
            if self.active:
                raise HostRead(f"Tensor.{name} inside a sync-free region")
            return original(t, *args, **kwargs)
        return call

    @contextlib.contextmanager
    def region(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False


@pytest.fixture
def guard(monkeypatch) -> NoHostReads:
    return NoHostReads(monkeypatch)


@pytest.fixture(scope="module")
def world():
    x, _ = toy_images(8)
    models = toy_models()
    return x, toy_target(models, x), models


def gens(n: int) -> SampleGenerators:
    return SampleGenerators(0, list(range(n)))


FIRE = {"rho": 0.05, "dilation": 1, "feather": 2}
SPREAD = {**FIRE, "p_flip": 0.6, "eta": 0.01, "K": 12, "adaptive_step": False}  # samples stop after 4 to 7 updates
FIRE_SETTINGS = {
    "paper defaults": FIRE,
    "early stops spread": SPREAD,
    "reverse": {**SPREAD, "mode": "reverse"},
    "maskdime mask": {**SPREAD, "mask": "maskdime"},
    "previous loss mask, mask norm": {**FIRE, "loss_mask": "previous", "grad_norm": "mask", "K": 5},
    "one step": {**FIRE, "mode": "one_step"},
}
MASKDIME = {"respacing": 20, "start_step": 8, "k": 0.1, "dilation": 3}
MASKDIME_SETTINGS = {
    "defaults": MASKDIME,
    "retries spread": {**MASKDIME, "scales": [0.5, 2.0, 8.0]},  # samples flip at the first or second scale
    "l1 on the clean image": {**MASKDIME, "scales": [0.3, 1.0], "l1_on": "clean"},
}


def assert_same(a, b) -> None:
    assert torch.equal(a.images, b.images)
    assert torch.equal(a.steps, b.steps) and torch.equal(a.flipped, b.flipped)
    for k in ("failed", "fail_reason", "mask_hard", "mask_soft", "p_target", "mask", "scale", "attempts"):
        if k in a.info:
            assert torch.equal(a.info[k], b.info[k]), k


# --- the guard --------------------------------------------------------------------------------------
def test_guard_raises_on_a_planted_host_read(guard):
    """The guard is not vacuous: a tiny loop with one planted host read fails, the same loop without passes."""
    def loop(x: torch.Tensor, plant: str | None) -> torch.Tensor:
        for _ in range(3):
            x = torch.where(x > 0, x * 0.5, x)
            if plant == "item":
                x = x * x.max().item()
            elif plant == "any":
                if (x > 10).any():
                    break
            elif plant == "cpu":
                x = x + x.cpu()
            elif plant == "float":
                x = x * float(x.sum())
        return x

    with guard.region():
        loop(torch.randn(4), None)
        for plant in ("item", "any", "cpu", "float"):
            with pytest.raises(HostRead):
                loop(torch.randn(4), plant)
    loop(torch.randn(4), "item")  # outside the region nothing is guarded


def guard_loop(monkeypatch, guard: NoHostReads) -> None:
    """Guard FiRe's loop only: from the end of ``fire_start`` (the batch's set-up reads the host once) to
    ``fire_result``."""
    start, result = fire.fire_start, fire.fire_result

    def guarded_start(*args, **kwargs):
        out = start(*args, **kwargs)
        guard.active = True
        return out

    def unguarded_result(*args, **kwargs):
        guard.active = False
        return result(*args, **kwargs)

    monkeypatch.setattr(fire, "fire_start", guarded_start)
    monkeypatch.setattr(fire, "fire_result", unguarded_result)


@pytest.mark.parametrize("setting", ["paper defaults", "reverse", "maskdime mask"])
def test_fire_masked_loop_reads_nothing_on_the_host(world, guard, monkeypatch, setting):
    x, target, models = world
    p = parse_params(FireParams, {**FIRE_SETTINGS[setting], "sync_free": True}, "fire")
    guard_loop(monkeypatch, guard)
    r = fire.fire_refine_masked(x, target, models, gens(len(x)), p, NFE(len(x)))
    assert not guard.active and (r.steps > 0).all()


def test_guard_catches_the_eager_loop_and_a_planted_item(world, guard, monkeypatch):
    """The same guard on the compaction loop (one `.cpu()` per update) and on the masked loop with an
    `.item()` planted in its step size both raise."""
    x, target, models = world
    guard_loop(monkeypatch, guard)
    p = parse_params(FireParams, FIRE, "fire")
    with pytest.raises(HostRead):
        fire.fire_refine(x, target, models, gens(len(x)), p, NFE(len(x)))
    guard.active = False
    size = fire.step_size_at
    monkeypatch.setattr(fire, "step_size_at", lambda p, k, f, p_k: size(p, k, f, p_k) * p_k.max().item() ** 0)
    with pytest.raises(HostRead):
        fire.fire_refine_masked(x, target, models, gens(len(x)), p, NFE(len(x)))
    guard.active = False


@pytest.mark.parametrize("setting", list(MASKDIME_SETTINGS))
def test_maskdime_guided_steps_read_nothing_on_the_host(world, guard, monkeypatch, setting):
    """Each attempt (its guided steps and their noise) runs under the guard; a planted read in the step fails."""
    x, target, models = world
    attempt = maskdime.maskdime_attempt

    def guarded(*args, **kwargs):
        with guard.region():
            return attempt(*args, **kwargs)

    monkeypatch.setattr(maskdime, "maskdime_attempt", guarded)
    method = methods.get_method("maskdime", {**MASKDIME_SETTINGS[setting], "sync_free": True})
    assert (method(x, target, models, gens(len(x))).steps > 0).all()
    step = maskdime.maskdime_step
    monkeypatch.setattr(maskdime, "maskdime_step", lambda *a, **k: {**step(*a, **k), "_": k["z"].sum().item()})
    with pytest.raises(HostRead):
        method(x, target, models, gens(len(x)))


# --- the sync-free paths give the eager counterfactuals ----------------------------------------------
@pytest.mark.parametrize("setting", list(FIRE_SETTINGS))
@pytest.mark.parametrize("switch", ["sync_free", "cuda_graphs"])  # cuda_graphs on a CPU: the sync-free eager path
def test_fire_masked_equals_eager(world, setting, switch):
    x, target, models = world
    eager = methods.get_method("fire", FIRE_SETTINGS[setting])(x, target, models, gens(len(x)))
    masked = methods.get_method("fire", {**FIRE_SETTINGS[setting], switch: True})(x, target, models, gens(len(x)))
    assert_same(eager, masked)
    if setting == "early stops spread":
        assert len(set(eager.steps.tolist())) > 2  # compaction did shrink the batch several times


@pytest.mark.parametrize("setting", list(MASKDIME_SETTINGS))
@pytest.mark.parametrize("switch", ["sync_free", "cuda_graphs"])
def test_maskdime_masked_equals_eager(world, setting, switch):
    x, target, models = world
    eager = methods.get_method("maskdime", MASKDIME_SETTINGS[setting])(x, target, models, gens(len(x)))
    masked = methods.get_method("maskdime", {**MASKDIME_SETTINGS[setting], switch: True})(x, target, models,
                                                                                         gens(len(x)))
    assert_same(eager, masked)
    if setting == "retries spread":
        assert len(set(eager.info["attempts"].tolist())) == 2


@pytest.mark.parametrize("name, params", [("fire", SPREAD), ("maskdime", MASKDIME_SETTINGS["retries spread"])])
def test_midrun_failure_masked_equals_eager(world, name, params):
    """A sample whose state turns NaN mid-run fails alone on both paths (it stays in the masked batch)."""
    x, target, _ = world
    xb = x.clone()
    xb[3, 0, 0, 0] = 200.0
    m = toy_models()
    m.pmf, m.ddpm = NaNOnMarker(GaussianPMF()), NaNOnMarker(GaussianDDPM())
    eager = methods.get_method(name, params)(xb, target, m, gens(len(x)))
    masked = methods.get_method(name, {**params, "sync_free": True})(xb, target, m, gens(len(x)))
    assert eager.info["failed"].tolist() == [i == 3 for i in range(len(x))]
    assert_same(eager, masked)


def test_masked_fire_counts_the_recomputed_pmf_forwards(world):
    """The masked step recomputes the PMF graph at Z_t^k (docs/profiling.md): 2K PMF forwards, eager's K + 1."""
    x, target, models = world
    params = {**FIRE, "K": 4, "early_stop": False}
    eager = methods.get_method("fire", params)(x, target, models, gens(len(x)))
    masked = methods.get_method("fire", {**params, "sync_free": True})(x, target, models, gens(len(x)))
    assert torch.equal(eager.info["nfe_pmf_fwd"], torch.full((len(x),), 5.0, dtype=torch.float64))
    assert torch.equal(masked.info["nfe_pmf_fwd"], eager.info["nfe_pmf_fwd"] + 3)
    assert torch.equal(masked.info["nfe_pmf_bwd"], eager.info["nfe_pmf_bwd"])


def test_step_graphs_on_a_cpu_call_the_step():
    calls = []
    step = StepGraphs(lambda c, *, a: calls.append(c) or {"b": a + c}, capture=False)
    assert torch.equal(step("k", 2.0, a=torch.ones(2))["b"], torch.full((2,), 3.0)) and calls == [2.0]
    assert not step.graphs


def test_new_params_are_parsed_and_typed():
    assert parse_params(FireParams, {"cuda_graphs": True}, "fire").masked
    assert not parse_params(FireParams, {}, "fire").masked
    with pytest.raises(ConfigError):
        parse_params(FireParams, {"sync_free": "sometimes"}, "fire")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("name, params", [("fire", SPREAD), ("maskdime", MASKDIME_SETTINGS["retries spread"])])
def test_cuda_graphs_equal_the_sync_free_path_on_a_gpu(world, monkeypatch, name, params):
    """Replayed steps give the sync-free eager path's counterfactuals and network counts on the same GPU. The toy
    networks' constants move to the GPU first (a host-to-device copy cannot be captured)."""
    from tests import toy

    dev = torch.device("cuda")
    x, target, _ = world
    models = toy_models()
    for role in ("classifier", "pmf", "perceptual", "ddpm"):
        getattr(models, role).to(dev)
    monkeypatch.setattr(models.ddpm, "alphas_cumprod", models.ddpm.alphas_cumprod.to(dev))
    monkeypatch.setattr(toy.prior(), "v", toy.prior().v.to(dev))
    monkeypatch.setattr(toy.prior(), "lam", toy.prior().lam.to(dev))
    x, target = x.to(dev), target.to(dev)
    eager = methods.get_method(name, {**params, "sync_free": True})(x, target, models, gens(len(x)))
    graphed = methods.get_method(name, {**params, "cuda_graphs": True})(x, target, models, gens(len(x)))
    assert torch.equal(eager.steps, graphed.steps) and torch.equal(eager.flipped, graphed.flipped)
    torch.testing.assert_close(graphed.images, eager.images, atol=1e-5, rtol=0)
    for k in eager.info:
        if k.startswith("nfe_"):
            assert torch.equal(eager.info[k], graphed.info[k]), k
