"""pMF's recipe for the pmf role (issue #48), each part a config switch that is off unless a recipe sets it: the
losses on the one-step prediction (the perceptual distance and a feature distance, adaptively weighted, only for
t < 0.8; the shipped faces pmf's continuation trains with the perceptual one, issue #61), the exact JVP with its
finite-difference fallback, and the workflow's dependency on the networks the losses use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from vcebench.models.generative.meanflow import ImageLoss, du_dt, image_loss, jvp_used, meanflow_loss
from vcebench.models.generative.pmf import build_pmf, train_pmf
from vcebench.models.generative.unet import use_explicit_groupnorm
from vcebench.models.synthetic.nets import AutoEncoder
from vcebench.models.synthetic.perceptual import EncoderOnly, FeatureDistance
from vcebench.models.training.settings import RoleConfigError

UNET = {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4}
FULL = {"jvp": "exact", "perceptual_weight": 0.4, "features_weight": 0.1}


def _cfg(**kw) -> dict:
    return {"unet": UNET, "steps": 6, "batch_size": 8, "lr": 2e-3, "warmup_steps": 1, "ema_decay": 0.9,
            "grad_clip": 1.0, "eval_images": 8, "n_samples": 4, "checkpoint_every": 3, "fm_warmup_steps": 2, **kw}


def _images(n: int = 24, res: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.rand(n, 3, res, res, generator=g) * 255).round().to(torch.uint8)


def _networks() -> dict[str, nn.Module]:
    """Small stand-ins with the roles' call conventions: a perceptual distance (the synthetic role's class on an
    untrained encoder) and a feature embedding x -> (N, D)."""
    torch.manual_seed(3)
    perceptual = FeatureDistance(EncoderOnly(AutoEncoder(3, 4)), "test-perceptual")
    features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Tanh(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
    return {"perceptual": perceptual, "fid_features": features}


def test_the_image_loss_is_zero_from_t_08_and_positive_below():
    """Rows at t >= perceptual_max_t (0.8) add nothing and get no gradient; rows below add a positive term."""
    loss = image_loss(_cfg(**FULL), _networks())
    assert isinstance(loss, ImageLoss) and loss.max_t == 0.8
    x = torch.rand(4, 3, 8, 8) * 2 - 1
    x_hat = (x + 0.3 * torch.randn(4, 3, 8, 8)).requires_grad_(True)
    t = torch.tensor([0.2, 0.79, 0.8, 0.95])
    per = loss(x_hat, x, t)
    assert per.shape == (4,)
    assert bool((per[:2] > 0).all()), per
    assert per[2:].tolist() == [0.0, 0.0], per
    per.sum().backward()
    grad = x_hat.grad.abs().sum(dim=(1, 2, 3))
    assert bool((grad[:2] > 0).all()) and grad[2:].tolist() == [0.0, 0.0]
    # each term on its own is adaptively weighted (pMF: l / sg(l + 0.01)): a term's value stays below its weight
    only_p = image_loss(_cfg(perceptual_weight=0.4), _networks())
    assert only_p.features is None and bool((only_p(x_hat, x, t)[:2] < 0.4).all())


def test_the_recipe_is_off_by_default_and_a_missing_network_is_a_clear_error():
    assert image_loss(_cfg(), None) is None
    with pytest.raises(RoleConfigError, match=r"perceptual \(for `perceptual_weight`\)"):
        image_loss(_cfg(perceptual_weight=0.4), {"fid_features": _networks()["fid_features"]})
    with pytest.raises(RoleConfigError, match="features_weight` must be >= 0"):
        image_loss(_cfg(features_weight=-1.0), _networks())


def test_the_meanflow_loss_adds_the_image_loss_and_keeps_the_logged_error():
    torch.manual_seed(0)
    pmf = build_pmf(_cfg(), 3, 8)
    x = torch.rand(8, 3, 8, 8) * 2 - 1
    base, err = meanflow_loss(pmf, x, torch.Generator().manual_seed(1), _cfg(), False)
    losses = {"perceptual_weight": 0.4, "features_weight": 0.1}
    full, err2 = meanflow_loss(pmf, x, torch.Generator().manual_seed(1), _cfg(**losses), False,
                               images=image_loss(_cfg(**losses), _networks()))
    assert torch.equal(err, err2)  # the logged number is the MeanFlow error of u, the same draws
    assert float(full.detach()) > float(base.detach())


class _NoForwardAD(torch.autograd.Function):
    """The identity, with no forward-mode derivative (as an operation a backend lacks one for)."""

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g


def test_exact_jvp_falls_back_to_the_finite_difference_without_forward_ad(capsys):
    torch.manual_seed(0)
    pmf = build_pmf(_cfg(), 3, 8)
    use_explicit_groupnorm(pmf.net)
    z, v = torch.randn(3, 3, 8, 8), torch.randn(3, 3, 8, 8)
    t, r = torch.tensor([0.3, 0.6, 0.9]), torch.tensor([0.0, 0.2, 0.0])
    with torch.no_grad():
        x_u = pmf.x_pred(z, t, t - r)
        exact = du_dt(pmf, z, t, t - r, v, x_u, "exact")
        fd = du_dt(pmf, z, t, t - r, v, x_u, "fd")
    assert jvp_used(pmf, "exact") == "exact"
    assert not torch.equal(exact, fd)  # two computations (they agree to tolerance: test_models_generative)
    plain = pmf.x_pred
    pmf.x_pred = lambda zz, tt, hh: _NoForwardAD.apply(plain(zz, tt, hh))
    with torch.no_grad():
        fell_back = du_dt(pmf, z, t, t - r, v, x_u, "exact")
    assert torch.equal(fell_back, fd)
    assert jvp_used(pmf, "exact").startswith("fd (fallback: ") and "jvp: exact" in capsys.readouterr().err


def test_a_tiny_pmf_trains_with_the_full_recipe_deterministically(tmp_path: Path):
    """The full recipe (exact JVP, both image losses) trains: finite losses, the losses' networks named in
    metrics.json, and two runs with one seed give the same weights."""
    imgs = _images()
    runs = []
    for name in ("a", "b"):
        m = train_pmf(_cfg(**FULL), imgs, tmp_path / name, seed=5, progress=False, loss_networks=_networks())
        runs.append(m)
    m = runs[0]
    assert m["jvp"] == "exact"
    curve = m["training"]["loss_curve"]
    assert len(curve) == 6 and all(torch.isfinite(torch.tensor(curve)))
    assert m["image_loss"] == {"max_t": 0.8, "perceptual": {"weight": 0.4, "network": "test-perceptual"},
                               "features": {"weight": 0.1, "network": "fid_features"}}
    a, b = (load_file(str(tmp_path / n / "model.safetensors")) for n in ("a", "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert runs[0]["training"]["loss_curve"] == runs[1]["training"]["loss_curve"]
    # the image losses change the training: without them (same seed, same draws) other weights
    plain = train_pmf(_cfg(jvp="exact"), imgs, tmp_path / "plain", seed=5, progress=False)
    assert "image_loss" not in plain
    c = load_file(str(tmp_path / "plain" / "model.safetensors"))
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_the_workflow_trains_the_loss_networks_first_only_when_the_switch_is_on(cfg):
    from vcebench.workflow import gate_roles

    models = {"synthfaces": {**cfg["models"]["synthfaces"]}, "synthxray": {**cfg["models"]["synthxray"]}}
    gate = ["classifier", "fid_features", "ddpm"]
    assert gate_roles({"models": models}, "synthfaces", "pmf") == [*gate, "perceptual"]  # the faces recipe: on
    assert gate_roles({"models": models}, "synthxray", "pmf") == gate  # the x-ray recipe: off
    models["synthfaces"]["pmf"] = {**models["synthfaces"]["pmf"], "perceptual_weight": 0.0}
    assert gate_roles({"models": models}, "synthfaces", "pmf") == gate


def test_the_config_recipes_are_the_shipped_cards_and_each_switch_is_a_difference(cfg):
    """The shipped networks' cards compare recipes key by key: both sets' pmf (and every other role) install
    instead of training, and turning a switch away from the shipped recipe is one difference per switch."""
    from vcebench.config.load import DEFAULT_CONFIG, load_config
    from vcebench.models.shipping.cards import read_card, recipe_differences

    root = Path(__file__).resolve().parents[1]
    configs = {"ref1": cfg, "ref2": load_config([DEFAULT_CONFIG, root / "config/presets/ref2.yaml"])}
    for ds in ("synthfaces", "synthxray"):
        for s, cfg in configs.items():
            card = read_card(root / "networks" / s, ds, "pmf")
            assert card is not None and recipe_differences(card, cfg, ds, "pmf") == [], (s, ds)
            pmf = cfg["models"][ds]["pmf"]
            moved = sum(pmf.get(k, "fd" if k == "jvp" else 0.0) != v for k, v in FULL.items())
            assert moved == (2 if ds == "synthfaces" else 3)  # faces: the perceptual loss is the shipped one's
            changed = {**cfg, "models": {**cfg["models"], ds: {**cfg["models"][ds], "pmf": {**pmf, **FULL}}}}
            assert len(recipe_differences(card, changed, ds, "pmf")) == moved
            shipped = pmf.get("perceptual_weight", 0.0)
            for weight in (0.0, 0.4):
                arm = {**cfg, "models": {**cfg["models"], ds: {**cfg["models"][ds], "pmf": {
                    **pmf, "perceptual_weight": weight}}}}
                # written out as the shipped value: the same recipe; another value: a difference
                assert len(recipe_differences(card, arm, ds, "pmf")) == int(weight != shipped), (weight, s, ds)
    assert json.loads(json.dumps(cfg["models"]["synthxray"]["pmf"])).get("perceptual_weight") is None


def test_training_with_a_loss_network_not_trained_yet_names_the_command(cfg, tmp_path):
    from vcebench.config.load import ConfigError
    from vcebench.config.tasks import get_task
    from vcebench.steps.train import loss_networks

    task = get_task(cfg, "synthfaces_smile")
    off = {**cfg, "models": {**cfg["models"], "synthfaces": {**cfg["models"]["synthfaces"], "pmf": {
        **cfg["models"]["synthfaces"]["pmf"], "perceptual_weight": 0.0}}}}
    assert loss_networks(off, task, "pmf", tmp_path) == {}  # the switch off: trains against nothing
    with pytest.raises(ConfigError, match=r"perceptual network, which is not trained yet: `vcebench train perceptual "
                                          r"--task synthfaces_smile"):
        loss_networks(cfg, task, "pmf", tmp_path)  # the faces recipe's perceptual loss


def test_continued_training_starts_from_the_pinned_weights_and_refuses_others(tmp_path: Path):
    """``init_from`` / ``init_sha256`` (the ft_* ablation arms): a run starts from the named weights, its EMA too
    (at lr 0 the result is those weights up to the EMA's rounding, where a run from the seed's initialisation is
    far from them), and a file
    whose sha256 is not the pinned one, or no pin, is a clear error before any step."""
    from vcebench.models.shipping.cards import sha256

    imgs = _images()
    train_pmf(_cfg(), imgs, tmp_path / "first", seed=5, progress=False)
    start = tmp_path / "first" / "model.safetensors"
    w0 = load_file(str(start))
    frozen = {"lr": 0.0, "fm_warmup_steps": 0}
    m = train_pmf(_cfg(**frozen, init_from=str(start), init_sha256=sha256(start)), imgs, tmp_path / "cont",
                  seed=9, progress=False)
    assert m["training"]["init_sha256"] == sha256(start)
    w1 = load_file(str(tmp_path / "cont" / "model.safetensors"))
    assert max((w0[k] - w1[k]).abs().max().item() for k in w0) < 1e-6
    train_pmf(_cfg(**frozen), imgs, tmp_path / "fresh", seed=9, progress=False)
    w2 = load_file(str(tmp_path / "fresh" / "model.safetensors"))
    assert max((w0[k] - w2[k]).abs().max().item() for k in w0) > 1e-2
    with pytest.raises(RoleConfigError, match="has sha256 .* the recipe continues 00"):
        train_pmf(_cfg(init_from=str(start), init_sha256="00" * 32), imgs, tmp_path / "bad", seed=9, progress=False)
    with pytest.raises(RoleConfigError, match="needs `init_sha256`"):
        train_pmf(_cfg(init_from=str(start)), imgs, tmp_path / "unpinned", seed=9, progress=False)
    assert not (tmp_path / "bad" / "model.safetensors").exists()


def test_the_jvp_error_script_measures_fd_against_exact(tmp_path: Path):
    """scripts/pmf_jvp_error.py (docs/networks.md, the exact-JVP arm) on a tiny trained pmf: the finite
    difference is close to the exact JVP, but not equal to it (the two are really computed)."""
    import subprocess
    import sys

    import numpy as np

    imgs = _images()
    train_pmf(_cfg(), imgs, tmp_path / "pmf", seed=5, progress=False)
    np.savez(tmp_path / "train.npz", images=imgs.numpy())
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "scripts" / "pmf_jvp_error.py"), str(tmp_path / "pmf"),
                          str(tmp_path / "train.npz"), "--batch", "16", "--batches", "2"],
                         capture_output=True, text=True, check=True, cwd=root)
    rec = json.loads(out.stdout)
    med = rec["relative_error_of_the_target"]["median"]
    assert rec["rows"] > 0 and 0 < med < 0.05, rec
