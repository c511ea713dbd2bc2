"""ACE (methods/ace.py) and the pixel attack (methods/pixel.py) on the toy world of tests/toy.py: the flip, the
input kept outside ACE's mask, the attack's budget, batch-size independence, NFE counts, config typos.
(The flip, batch and non-finite-input checks every method passes are in tests/test_methods.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import methods
from tests.test_methods import TOY_PARAMS
from tests.test_methods_explain import fake_world  # noqa: F401  (a fixture)
from tests.toy import toy_images, toy_models, toy_target
from vcebench.config.load import ConfigError, load_config
from vcebench.core.rng import SampleGenerators
from vcebench.protocol.noise import resolve_method
from vcebench.protocol.settings import check_settings

ACE = TOY_PARAMS["ace"]


@pytest.fixture(scope="module")
def world():
    x, _ = toy_images(8)
    models = toy_models()
    return x, toy_target(models, x), models


def run(name, params, x, target, models, ids=None):
    ids = list(range(len(x))) if ids is None else ids
    return methods.get_method(name, params)(x, target, models, SampleGenerators(0, ids))


@pytest.mark.parametrize("name", ["ace", "ace_l2"])
def test_ace_flips_and_keeps_the_input_outside_its_mask(world, name):
    x, target, models = world
    cf = run(name, TOY_PARAMS[name], x, target, models)
    assert cf.flipped.all() and not cf.info["failed"].any()
    mask = cf.info["mask"]
    assert mask.shape == (len(x), 1, *x.shape[2:]) and mask.dtype == torch.bool
    outside = (~mask).expand_as(x)
    assert outside.any() and mask.any()
    assert torch.equal(cf.images[outside], x[outside])  # bit for bit (filter_fn's final paste)
    assert (cf.images - x).abs()[mask.expand_as(x)].amax() > 0.1  # the edit is inside


@pytest.mark.parametrize("norm, eps, step", [("linf", 0.4, 0.04), ("l2", 3.0, 0.5)])
def test_pixel_attack_flips_within_its_budget(world, norm, eps, step):
    x, target, models = world
    cf = run("pixel_attack", {"norm": norm, "eps": eps, "step_size": step}, x, target, models)
    assert cf.flipped.float().mean() >= 0.75 and not cf.info["failed"].any()
    d = (cf.images - x).flatten(1) / 2  # the budget is in units of the [0, 1] range
    size = d.abs().amax(1) if norm == "linf" else d.norm(dim=1)
    assert (size <= eps * (1 + 1e-5)).all() and (size > 0.5 * eps).all()
    assert cf.images.abs().max() <= 1


def test_pixel_attack_budget_in_the_config_bounds_the_edit(world):
    """The configured row `pixel_attack` (l-inf 8/255) stays inside 8/255 even where it cannot flip the toy."""
    x, target, models = world
    params = resolve_method(load_config(), "synthfaces_smile", "pixel_attack")[0]
    cf = run("pixel_attack", params, x, target, models)
    assert params["norm"] == "linf" and params["eps"] == pytest.approx(8 / 255, rel=1e-4)
    assert ((cf.images - x).abs().flatten(1).amax(1) / 2 <= params["eps"] * (1 + 1e-5)).all()


@pytest.mark.parametrize("name", ["ace", "ace_l2", "pixel_attack"])
def test_identical_outputs_for_batch_sizes_1_3_and_8(world, name):
    """Per-sample noise streams: a sample's counterfactual is the same bits alone, in a batch of 3 or of 8."""
    x, target, models = world
    full = run(name, TOY_PARAMS[name], x, target, models)
    parts = [run(name, TOY_PARAMS[name], x[i:i + 3], target[i:i + 3], models, list(range(i, min(i + 3, 8))))
             for i in range(0, 8, 3)]
    assert torch.equal(torch.cat([p.images for p in parts]), full.images)
    alone = run(name, TOY_PARAMS[name], x[5:6], target[5:6], models, [5])
    assert torch.equal(alone.images[0], full.images[5])
    if "mask" in full.info:
        assert torch.equal(alone.info["mask"][0], full.info["mask"][5])


def test_ace_noise_comes_from_the_sample_stream(world):
    x, target, models = world
    a = run("ace", ACE, x[:2], target[:2], models, [0, 1])
    b = run("ace", ACE, x[:2], target[:2], models, [10, 11])  # other sample ids, other noise
    assert not torch.equal(a.images, b.images)


def test_ace_nfe_counted_at_the_network_boundary(world):
    """Per attack iteration: tau + 1 UNet calls forward and backward through the filter, one classifier call
    forward and backward; then tau + 1 UNet calls to inpaint and the final flip check."""
    x, target, models = world
    tau, a = ACE["start_step"], ACE["attack_steps"]
    cf = run("ace", ACE, x, target, models)
    assert (cf.info["nfe_unet_fwd"] == (a + 1) * (tau + 1)).all()
    assert (cf.info["nfe_unet_bwd"] == a * (tau + 1)).all()
    assert (cf.info["nfe_classifier_fwd"] == a + 1).all() and (cf.info["nfe_classifier_bwd"] == a).all()
    assert (cf.steps == a).all()
    px = run("pixel_attack", TOY_PARAMS["pixel_attack"], x, target, models)
    assert (px.info["nfe_classifier_fwd"] == 21).all() and (px.info["nfe_classifier_bwd"] == 20).all()
    assert (px.info["nfe_unet_fwd"] == 0).all()


def test_ace_variants_and_protocol_noise(cfg):
    """`ace_l1` / `ace_l2` set the distance; the start step follows the noise rule like every DDPM row."""
    p1, rec = resolve_method(cfg, "synthfaces_smile", "ace_l1", candidate={})  # untuned: the rule's values
    p2, _ = resolve_method(cfg, "synthfaces_smile", "ace_l2", candidate={})
    assert (p1["distance"], p2["distance"]) == ("l1", "l2")
    assert rec["reference_start"] == "4 of 50" and rec["start_step"] == p1["start_step"]
    assert rec["log_snr"] is not None and p1["dilation"] == 5  # its kernel 15 at 128 px by the resolution rule
    paper, rec_paper = resolve_method(cfg, "synthfaces_smile", "ace_paper")
    assert rec_paper["noise_rule"] == "paper" and paper["start_step"] == 4  # the paper's tau at 50 steps
    assert methods.get_method("pixel_attack", resolve_method(cfg, "synthfaces_smile", "pixel_attack")[0]).roles == \
        ("classifier",)


@pytest.mark.parametrize("where, key", [
    (("method_defaults", "ace"), "dist_wieght"),
    (("variants", "ace", "l2"), "distnce"),
    (("method_defaults", "pixel"), "epss"),
    (("variants", "pixel", "attack"), "step"),
])
def test_a_typo_in_their_params_fails_at_the_config_check(where, key):
    cfg = load_config()
    layer = cfg
    for k in where:
        layer = layer[k]
    layer[key] = 1.0
    with pytest.raises(ConfigError, match=key):
        check_settings(cfg)


@pytest.mark.parametrize("params, msg", [({"distance": "l3"}, "ace.distance"), ({"dilation": 4}, "dilation"),
                                         ({"attack_steps": 0}, "attack_steps")])
def test_ace_bad_values(params, msg):
    with pytest.raises(ConfigError, match=msg):
        methods.get_method("ace", params)


def test_pixel_bad_values():
    with pytest.raises(ConfigError, match="pixel_attack.norm"):
        methods.get_method("pixel_attack", {"norm": "l1"})


@pytest.mark.parametrize("name", ["ace_l1", "pixel_attack"])
def test_explain_files_do_not_depend_on_the_batch_size(fake_world, tmp_path, monkeypatch, name):  # noqa: F811
    """Through `vcebench explain` (config settings, the noise rule, uint8 files): batch 1 and batch 7 write the
    same file; ACE's saved counterfactual is the input's uint8 outside its mask."""
    import vcebench.protocol.noise
    from vcebench.core.io import load_npz
    from vcebench.protocol.run_settings import RunSettings
    from vcebench.steps.explain import explain_shard

    # the toy DDPM has its own 100-step schedule, not the synthfaces DDPM's the start step was derived from
    monkeypatch.setattr(vcebench.protocol.noise, "check_ddpm_schedule", lambda *a: None)
    cfg, split = fake_world
    # ACE's fixed 50-step respacing (`chain_steps: null`): the respacing derived from its start on the synthfaces
    # schedule (500 steps) does not fit the toy's 100
    toy = {"ace_l1": {"attack_step": 4.0, "attack_steps": 20, "dist_weight": 0.01, "dilation": 1, "chain_steps": None},
           "pixel_attack": TOY_PARAMS["pixel_attack"]}[name]
    task = {**cfg["tasks"]["synthfaces_smile"]}
    task["params"] = {**task["params"], name: toy}
    cfg = {**cfg, "tasks": {**cfg["tasks"], "synthfaces_smile": task}}
    files = []
    for bs in (1, 7):
        out = tmp_path / f"b{bs}/shard-0-of-1.npz"
        explain_shard(RunSettings.resolve({**cfg, "batch_size": bs}, "synthfaces_smile", name), 0, 1, out)
        files.append(load_npz(out))
    a, b = files
    for k in a:
        if not k.startswith("info_nfe") and k not in ("seconds",):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert a["flipped"].mean() >= 0.7
    if name == "ace_l1":
        outside = ~np.broadcast_to(a["info_mask"], a["cf"].shape)
        assert outside.any()
        np.testing.assert_array_equal(a["cf"][outside], split.images[:7].numpy()[outside])
