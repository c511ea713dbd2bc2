"""The methods' speed paths: no host reads inside a step; compiled / bf16 networks (vcebench.models.accelerate)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import methods
from tests.test_methods import TOY_PARAMS
from tests.toy import toy_images, toy_models, toy_target
from vcebench.core.rng import SampleGenerators
from vcebench.models.accelerate import accelerate


@pytest.fixture(scope="module")
def world():
    x, _ = toy_images(4)
    models = toy_models()
    return x, toy_target(models, x), models


def run(name, params, world, models=None):
    x, target, toy = world
    return methods.get_method(name, params)(x, target, models or toy, SampleGenerators(0, list(range(len(x)))))


@contextlib.contextmanager
def host_reads():
    """Count the explicit device-to-host reads (``.cpu()``, ``.item()``, ``.tolist()``, ``.numpy()``) made."""
    counts = {"n": 0}
    saved = {m: getattr(torch.Tensor, m) for m in ("cpu", "item", "tolist", "numpy")}

    def counting(orig):
        def f(self, *a, **k):
            counts["n"] += 1
            return orig(self, *a, **k)
        return f

    for m, orig in saved.items():
        setattr(torch.Tensor, m, counting(orig))
    try:
        yield counts
    finally:
        for m, orig in saved.items():
            setattr(torch.Tensor, m, orig)


def test_fire_reads_the_host_once_per_update(world):
    """FiRe's loop (mask-free ablation, so no connected components) makes one host read per update:
    the stop / compaction decision."""
    reads = {}
    for K in (3, 7):
        with host_reads() as c:
            cf = run("fire_x", {**TOY_PARAMS["fire"], "mask": "none", "early_stop": False, "K": K}, world)
        assert (cf.steps == K).all()
        reads[K] = c["n"]
    assert reads[7] - reads[3] == 4


@pytest.mark.parametrize("name", ["dime", "fastdime", "fastdime2plus", "maskdime"])
def test_ddpm_trajectories_never_read_the_host(world, name):
    """A DDPM baseline's guided trajectory (one classifier-scale attempt) makes no host read; the retry
    loop around it reads once per attempt."""
    x, target, models = world
    method = methods.get_method(name, {**TOY_PARAMS[name], "start_step": 5, "warmup_steps": 2} if "fast" in name
                                           else {**TOY_PARAMS[name], "start_step": 5})
    inner, reads = method._attempt, []

    def attempt(*args):
        with host_reads() as c:
            out = inner(*args)
        reads.append(c["n"])
        return out

    method._attempt = attempt
    cf = method(x, target, models, SampleGenerators(0, list(range(len(x)))))
    assert reads and reads == [0] * len(reads)
    assert cf.info["attempts"].max() == len(reads)


def test_accelerate_off_is_the_identity(world):
    models = world[2]
    assert accelerate(models) is models


@pytest.mark.parametrize("name", ["fire", "maskdime"])
def test_compiled_networks_give_the_same_counterfactuals(world, name):
    """torch.compile at the network boundary (aot_eager: dynamo + AOTAutograd, forward and backward) changes
    neither the counterfactuals (within float tolerance) nor the steps and NFE counts."""
    p = {**TOY_PARAMS[name], "K": 3} if name == "fire" else {**TOY_PARAMS[name], "start_step": 3, "scales": [8.0]}
    ref = run(name, p, world)
    got = run(name, p, world, accelerate(world[2], compile=True, backend="aot_eager"))
    torch.testing.assert_close(got.images, ref.images, atol=1e-5, rtol=0)
    assert torch.equal(got.steps, ref.steps)
    for k in ref.info:
        if k.startswith("nfe_"):
            assert torch.equal(got.info[k], ref.info[k]), k


@pytest.mark.slow
def test_inductor_compiled_fire_matches(world, tmp_path):
    """The real compiler (inductor, C++ kernels on the CPU), with a persistent cache directory."""
    p = {**TOY_PARAMS["fire"], "K": 3}
    ref = run("fire", p, world)
    got = run("fire", p, world, accelerate(world[2], compile=True, cache_dir=str(tmp_path / "cache")))
    torch.testing.assert_close(got.images, ref.images, atol=1e-4, rtol=0)
    assert torch.equal(got.steps, ref.steps)
    assert any((tmp_path / "cache").iterdir())


def test_bf16_generative_networks_only(world):
    """bf16 autocast wraps the ddpm and pmf calls only (float32 out); the classifier is untouched."""
    models = world[2]
    fast = accelerate(models, bf16_generative=True)
    assert fast.classifier is models.classifier and fast.perceptual is models.perceptual
    x = world[0]
    z = fast.pmf.predict_clean(x, 0.4)
    assert z.dtype == torch.float32
    cf = run("fire", {**TOY_PARAMS["fire"], "K": 3}, world, fast)
    assert torch.isfinite(cf.images).all()
