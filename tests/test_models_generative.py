"""The generative roles (ddpm, pmf): training lowers the loss, save/load round-trips, JVP checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vcebench.models.generative.ddpm import DiffusersDDPM, build_ddpm, matched_timestep, train_ddpm
from vcebench.models.generative.meanflow import du_dt, meanflow_loss, sample_tr
from vcebench.models.generative.pmf import PixelMeanFlow, build_pmf, train_pmf
from vcebench.models.generative.unet import ExplicitGroupNorm, use_explicit_groupnorm

UNET = {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4}
TRAIN = {"steps": 4, "batch_size": 8, "lr": 2e-3, "warmup_steps": 1, "ema_decay": 0.9, "grad_clip": 1.0,
         "eval_images": 8, "n_samples": 4, "checkpoint_every": 2}


def _images(n: int = 32, c: int = 3, res: int = 8, seed: int = 0) -> torch.Tensor:
    """Smooth random blobs as uint8 images (a stand-in that a tiny model can fit)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, res), torch.linspace(-1, 1, res), indexing="ij")
    ctr = torch.rand(n, 2, 1, 1, generator=g) - 0.5
    blob = torch.exp(-((xx - ctr[:, 0]) ** 2 + (yy - ctr[:, 1]) ** 2) / 0.2)
    col = torch.rand(n, c, 1, 1, generator=g)
    x = blob[:, None] * col + (1 - blob[:, None]) * 0.2
    return (x * 255).round().clamp(0, 255).to(torch.uint8)


def _ddpm_cfg(**kw) -> dict:
    return {"unet": UNET, "num_train_timesteps": 50, "sample_steps": 5, **TRAIN, **kw}


def _pmf_cfg(**kw) -> dict:
    return {"unet": UNET, "fm_warmup": 0.25, "jvp": "fd", **TRAIN, **kw}


def _loss_falls(losses: list[float]) -> bool:
    k = max(1, len(losses) // 4)
    return sum(losses[-k:]) / k < sum(losses[:k]) / k


def test_ddpm_loss_falls():
    torch.manual_seed(0)
    ddpm = build_ddpm(_ddpm_cfg(), 3, 8)
    x = _images(16).float() / 127.5 - 1
    abar = ddpm.alphas_cumprod.float()
    opt = torch.optim.Adam(ddpm.unet.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 50, (16,), generator=g)
    eps = torch.randn(x.shape, generator=g)
    a = abar[t].reshape(-1, 1, 1, 1)
    z = a.sqrt() * x + (1 - a).sqrt() * eps
    losses = []
    for _ in range(12):  # fixed batch: the loss must fall
        loss = torch.nn.functional.mse_loss(ddpm.unet(z, t).sample, eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert _loss_falls(losses), losses


def test_pmf_loss_falls():
    torch.manual_seed(0)
    pmf = build_pmf(_pmf_cfg(), 3, 8)
    x = _images(16).float() / 127.5 - 1
    opt = torch.optim.Adam(pmf.parameters(), lr=3e-3)
    losses = []
    for _ in range(12):  # same (t, r, eps) every step: the per-sample loss must fall
        _, per_sample = meanflow_loss(pmf, x, torch.Generator().manual_seed(1), _pmf_cfg(), False)
        loss, _ = meanflow_loss(pmf, x, torch.Generator().manual_seed(1), _pmf_cfg(), False)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(per_sample.mean()))
    assert _loss_falls(losses), losses


def _feats(x: torch.Tensor) -> torch.Tensor:  # a dummy feature extractor: channel means and stds
    return torch.cat([x.mean((2, 3)), x.std((2, 3))], 1)


def _bright(x: torch.Tensor) -> torch.Tensor:  # a 2-logit stand-in classifier: "brighter than mid-grey"
    m = x.mean((1, 2, 3))
    return torch.stack([-m, m], 1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A tiny ddpm and pmf trained once (4 steps each) on 3-channel blobs."""
    root = tmp_path_factory.mktemp("gen")
    imgs = _images(24)
    train_ddpm(_ddpm_cfg(), imgs, root / "ddpm", seed=0, val_images_uint8=imgs[:8], progress=False,
               feature_fn=_feats, feature_name="dummy")
    train_pmf(_pmf_cfg(), imgs, root / "pmf", seed=0, val_images_uint8=imgs[:8], progress=False,
              reference_ddpm=DiffusersDDPM.from_pretrained_dir(root / "ddpm"), feature_fn=_feats,
              feature_name="dummy", classifiers={"Bright": _bright})
    return {"ddpm": root / "ddpm", "pmf": root / "pmf", "images": imgs}


def test_train_ddpm_writes_diffusers_folder_and_round_trips(trained: dict, tmp_path: Path):
    out = trained["ddpm"]
    m = json.loads((out / "metrics.json").read_text())
    for f in ("unet/config.json", "scheduler/scheduler_config.json", "metrics.json", "config.json", "samples.png"):
        assert (out / f).is_file(), f
    assert not (out / "checkpoint").exists()
    assert m["training"]["images_seen"] == TRAIN["steps"] * TRAIN["batch_size"]
    ddpm = DiffusersDDPM.from_pretrained_dir(out)
    assert ddpm.num_train_timesteps == 50 and ddpm.alphas_cumprod.dtype == torch.float64
    # bit-exact round trip: save the loaded model again and reload
    ddpm.save_pretrained(tmp_path / "again")
    again = DiffusersDDPM.from_pretrained_dir(tmp_path / "again")
    for (k, v), (k2, v2) in zip(ddpm.state_dict().items(), again.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2), k
    z = torch.randn(2, 3, 8, 8)
    t = torch.tensor([3, 40])
    with torch.no_grad():
        assert torch.equal(ddpm.eps(z, t), again.eps(z, t))
        assert ddpm.eps(z, t).shape == z.shape


def test_ddpm_loads_plain_save_pretrained_folder(tmp_path: Path):
    """A user's diffusers folder (UNet2DModel.save_pretrained + DDPMScheduler.save_pretrained) loads."""
    from diffusers import DDPMScheduler, UNet2DModel

    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), norm_num_groups=4,
                       layers_per_block=1, down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"), add_attention=False)
    unet.save_pretrained(tmp_path / "user" / "unet")
    scheduler = DDPMScheduler(num_train_timesteps=500, beta_start=2e-4, beta_end=0.04)
    scheduler.save_pretrained(tmp_path / "user" / "scheduler")
    ddpm = DiffusersDDPM.from_pretrained_dir(tmp_path / "user")
    assert ddpm.num_train_timesteps == 500
    ref = torch.cumprod(1 - torch.linspace(2e-4, 0.04, 500, dtype=torch.float64), 0)
    assert torch.allclose(ddpm.alphas_cumprod, ref, rtol=0, atol=1e-12)
    z = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(ddpm.eps(z, torch.tensor([1, 2])), unet(z, torch.tensor([1, 2])).sample)


def test_ddpm_wrong_folder_error_names_path(tmp_path: Path):
    (tmp_path / "nope").mkdir()
    with pytest.raises(FileNotFoundError, match="nope.*unet"):
        DiffusersDDPM.from_pretrained_dir(tmp_path / "nope")


def test_matched_timestep_matches_snr():
    ddpm = build_ddpm(_ddpm_cfg(num_train_timesteps=500), 3, 8)
    t = matched_timestep(ddpm.alphas_cumprod, 0.4)
    snr_ddpm = (ddpm.alphas_cumprod[t] / (1 - ddpm.alphas_cumprod[t])).sqrt()
    assert abs(float(snr_ddpm) - 0.6 / 0.4) < 0.02


def test_train_pmf_round_trip_and_predict_clean(trained: dict, tmp_path: Path):
    out = trained["pmf"]
    for f in ("model.safetensors", "config.json", "metrics.json", "samples.png", "predict_t0.4.png"):
        assert (out / f).is_file(), f
    m = json.loads((out / "metrics.json").read_text())
    assert m["training"]["images_seen"] == TRAIN["steps"] * TRAIN["batch_size"]  # the ddpm's budget
    gate = m["quality_gate"]
    assert gate["evaluated"] and gate["mse_ratio_vs_tweedie"] > 0
    pmf = PixelMeanFlow.load(out)
    pmf.save(tmp_path / "again")
    again = PixelMeanFlow.load(tmp_path / "again")
    for (k, v), (k2, v2) in zip(pmf.state_dict().items(), again.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2), k
    z = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        for t in (0.4, torch.tensor([0.2, 0.5, 1.0])):
            tt = torch.as_tensor(t).expand(3).reshape(-1, 1, 1, 1)
            expect = z - tt * pmf.u(z, torch.zeros(3), torch.as_tensor(t).expand(3))
            assert torch.equal(pmf.predict_clean(z, t), expect)
        assert torch.equal(pmf.predict_clean(z, 0.4), again.predict_clean(z, 0.4))


def test_pmf_load_errors(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        PixelMeanFlow.load(tmp_path)
    pmf = build_pmf(_pmf_cfg(), 3, 8)
    pmf.save(tmp_path / "a")
    (tmp_path / "a" / "model.safetensors").write_bytes(b"corrupt")
    with pytest.raises(ValueError, match="cannot read weights"):
        PixelMeanFlow.load(tmp_path / "a")
    other = build_pmf(_pmf_cfg(unet={**UNET, "block_out_channels": [8, 24]}), 3, 8)
    other.save(tmp_path / "b")
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    pmf.save(tmp_path / "b")  # weights of one architecture ...
    (tmp_path / "b" / "config.json").write_text(json.dumps(cfg))  # ... config of another
    with pytest.raises(ValueError, match="do not match the architecture"):
        PixelMeanFlow.load(tmp_path / "b")


def test_explicit_groupnorm_matches_nn_groupnorm():
    gn = torch.nn.GroupNorm(4, 8)
    torch.nn.init.normal_(gn.weight)
    torch.nn.init.normal_(gn.bias)
    x = torch.randn(2, 8, 5, 5)
    egn = use_explicit_groupnorm(torch.nn.Sequential(gn))[0]
    assert isinstance(egn, ExplicitGroupNorm)
    assert torch.allclose(egn(x), torch.nn.functional.group_norm(x, 4, gn.weight, gn.bias), atol=1e-5)


def test_pmf_du_dt_exact_matches_finite_difference():
    """du/dt along (dz = v, dr = 0, dt = 1): torch.func.jvp == central difference of u == the fd mode.

    float32 throughout (diffusers' sinusoidal time embedding always computes in float32)."""
    torch.manual_seed(0)
    pmf = build_pmf(_pmf_cfg(), 3, 8)
    use_explicit_groupnorm(pmf.net)
    z, v = torch.randn(3, 3, 8, 8), torch.randn(3, 3, 8, 8)
    t = torch.tensor([0.3, 0.6, 0.03])  # the last one is below t_clip = 0.05
    r = torch.tensor([0.0, 0.2, 0.0])
    with torch.no_grad():
        x_u = pmf.x_pred(z, t, t - r)
        exact = du_dt(pmf, z, t, t - r, v, x_u, "exact")
        e = 2e-3
        central = (pmf.u(z + e * v, r, t + e) - pmf.u(z - e * v, r, t - e)) / (2 * e)
        fd = du_dt(pmf, z, t, t - r, v, x_u, "fd")
        wrong = du_dt(pmf, z, t, t - r, -v, x_u, "exact")  # the check can fail: another tangent differs

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).norm() / b.norm())

    assert rel(central[:2], exact[:2]) < 2e-3
    assert rel(fd, exact) < 2e-2
    assert rel(wrong, exact) > 0.1


def test_sample_tr_covers_fire_use():
    g = torch.Generator().manual_seed(0)
    cfg = {"p_fm": 0.5, "p_r0": 0.4}
    t, r = sample_tr(20000, g, cfg, flow_matching_only=False)
    assert bool((r <= t).all()) and bool((t <= 1).all()) and bool((r >= 0).all())
    r0 = r == 0
    assert 0.35 < float(r0.float().mean()) < 0.45
    mid = (t[r0] > 0.2) & (t[r0] < 0.8)
    assert float(mid.float().mean()) > 0.6
    assert float(((t[r0] > 0.35) & (t[r0] < 0.45)).float().mean()) > 0.08  # FiRe's default t = 0.4
    t2, r2 = sample_tr(100, g, cfg, flow_matching_only=True)
    assert torch.equal(t2, r2)


def test_training_is_deterministic_and_resumes(tmp_path: Path):
    """Two runs with one seed give identical weights; an interrupted run resumes to the same weights."""
    from vcebench.models.training.generative import train_generative as train_loop

    imgs = _images(24)
    cfg = _pmf_cfg(steps=4, checkpoint_every=2)

    def run(out: Path, stop_at: int | None = None) -> dict:
        torch.manual_seed(0)
        pmf = build_pmf(cfg, 3, 8)

        def loss_fn(m, x, g, s):
            if s == stop_at:
                raise KeyboardInterrupt
            return meanflow_loss(m, x, g, cfg, s < 1)[0]

        return train_loop(pmf, loss_fn, cfg, imgs, out, 0, "pmf", progress=False)[0]

    a = run(tmp_path / "a")
    b = run(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "c", stop_at=3)
    assert (tmp_path / "c" / "checkpoint" / "state.pt").is_file()
    c = run(tmp_path / "c")
    assert all(torch.equal(a[k], c[k]) for k in a)


def test_bad_config_names_key():
    with pytest.raises(ValueError, match="models.<dataset>.pmf.steps"):
        train_pmf({"unet": UNET}, _images(4), Path("/nonexistent/should-not-be-written"), seed=0)
    with pytest.raises(ValueError, match="unknown key"):
        build_ddpm(_ddpm_cfg(typo=1), 3, 8)
    with pytest.raises(ValueError, match="uint8"):
        train_ddpm(_ddpm_cfg(), torch.rand(4, 3, 8, 8), Path("/nonexistent"), seed=0)


def test_pmf_quality_gate_checks_fid_mse_and_labels(trained: dict):
    """The pmf metrics.json carries the gate: MSE within 2x of Tweedie, the classifier's labels kept by
    G(z_0.4, 0.4) at least as often as by Tweedie less 2 points, one-step FID below Tweedie's (at every
    resolution); `passed` is exactly the AND of the checks, `failed` the checks that did not pass."""
    m = json.loads((trained["pmf"] / "metrics.json").read_text())
    g = m["quality_gate"]
    assert g["evaluated"] and g["checks"] == ["mse_within_2x", "label_kept_vs_tweedie", "fid_lower"]
    assert g["passed"] == all(g[k] for k in g["checks"])
    assert g["failed"] == [k for k in g["checks"] if not g[k]]
    kept = m["eval"]["predict_clean"]["t0.4"]["label_kept"]["Bright"]
    assert 0.0 <= kept <= 1.0 and g["label_kept"] == {"Bright": kept}
    assert g["label_kept_95"] == (kept >= 0.95)
    assert g["fid_lower"] == (g["fid_pmf"] < g["fid_tweedie"])
    d = json.loads((trained["ddpm"] / "metrics.json").read_text())
    assert d["eval"]["samples"]["fid"] >= 0 and d["eval"]["samples"]["fid_features"] == "dummy"
    assert "fid_note" not in d


def test_evaluate_generative_adds_fid_with_a_feature_function(trained: dict):
    from vcebench.models.recipes import evaluate_generative

    def feats(x: torch.Tensor) -> torch.Tensor:  # a dummy extractor: channel means and stds
        return torch.cat([x.mean((2, 3)), x.std((2, 3))], 1)

    imgs = trained["images"]
    trained_gate = json.loads((trained["pmf"] / "metrics.json").read_text())["quality_gate"]
    new = evaluate_generative("pmf", trained["pmf"], imgs, feats, "dummy", reference_ddpm_dir=trained["ddpm"],
                              n_samples=8)
    row = new["eval_fid"]["predict_clean"]["t0.4"]
    assert row["fid"] >= 0 and row["ddpm_tweedie"]["fid"] >= 0 and row["fid_features"] == "dummy"
    assert "fid_pmf" in new["quality_gate"] and new["quality_gate"]["checks"] == ["mse_within_2x", "fid_lower"]
    # with the classifiers and the tasks' FiRe levels it checks what training checks
    full = evaluate_generative("pmf", trained["pmf"], imgs, feats, "dummy", reference_ddpm_dir=trained["ddpm"],
                               n_samples=8, write=False, classifiers={"Bright": _bright}, fire_t={"Bright": 0.3})
    assert full["quality_gate"]["checks"] == trained_gate["checks"]
    assert set(full["quality_gate"]["label_kept_at_fire_t"]) == {"Bright"}
    assert "t0.3" in full["eval_fid"]["predict_clean"]
    saved = json.loads((trained["pmf"] / "metrics.json").read_text())
    assert saved["eval_fid"]["samples_1step"]["fid"] == new["eval_fid"]["samples_1step"]["fid"]
    assert "training" in saved  # merged, not replaced
    d = evaluate_generative("ddpm", trained["ddpm"], imgs, feats, "dummy", n_samples=8, write=False)
    assert d["eval_fid"]["samples"]["fid"] >= 0


def test_label_kept_is_one_for_a_constant_classifier():
    """A classifier that ignores its input keeps every label: the rate is exactly 1."""
    from vcebench.models.generative.pmf import evaluate_pmf

    pmf = build_pmf(_pmf_cfg(), 3, 8)
    val = _images(8).float() / 127.5 - 1

    def const(x: torch.Tensor) -> torch.Tensor:
        return torch.tensor([[0.0, 1.0]]).expand(len(x), 2)

    m, _ = evaluate_pmf(pmf, val, seed=0, n_samples=2, classifiers={"Const": const}, t_flow=(0.4,))
    assert m["predict_clean"]["t0.4"]["label_kept"] == {"Const": 1.0}


def test_gate_judges_labels_kept_against_tweedie_at_each_tasks_fire_t():
    """`fire_t` adds, per attribute, the labels kept by G and by Tweedie at that task's FiRe level; the label
    check passes when G keeps at least Tweedie's rate less 2 points there; the 95 % bar is only reported."""
    from vcebench.models.generative.quality import gate

    def row(pmf_kept: float, tw_kept: float) -> dict:
        return {"mse": 1.0, "sharpness_ratio": 0.9, "fid": 1.0, "mse_ratio_vs_tweedie": 1.0,
                "label_kept": {"Smiling": pmf_kept},
                "ddpm_tweedie": {"mse": 1.0, "sharpness_ratio": 0.5, "fid": 2.0, "label_kept": {"Smiling": tw_kept}}}

    m = {"predict_clean": {"t0.2": row(0.97, 0.98), "t0.4": row(0.6, 0.65)}}
    g = gate(m, fire_t={"Smiling": 0.2})
    assert g["label_kept_at_fire_t"] == {"Smiling": {"t": 0.2, "pmf": 0.97, "tweedie": 0.98}}
    assert g["label_kept_95"] is False and g["label_kept_vs_tweedie"] is True and g["passed"] is True
    assert "label_kept_at_fire_t" not in gate(m)
    assert gate(m)["label_kept_vs_tweedie"] is False  # without fire_t: at t = 0.4, 0.60 < 0.65 - 0.02
    m["predict_clean"]["t0.2"] = row(0.95, 0.98)
    assert gate(m, fire_t={"Smiling": 0.2})["passed"] is False  # 3 points below Tweedie


def test_gate_enforces_fid_and_names_the_failed_checks():
    from vcebench.models.generative.quality import gate

    row = {"mse": 1.0, "sharpness_ratio": 0.9, "fid": 3.0, "mse_ratio_vs_tweedie": 1.0,
           "ddpm_tweedie": {"mse": 1.0, "sharpness_ratio": 0.5, "fid": 2.0}}
    m = {"predict_clean": {"t0.4": row}}
    g = gate(m)
    assert g["passed"] is False and g["checks"] == ["mse_within_2x", "fid_lower"] and g["failed"] == ["fid_lower"]
    row["mse_ratio_vs_tweedie"] = 2.5
    assert gate(m)["failed"] == ["mse_within_2x", "fid_lower"]
    row.update(fid=1.0, mse_ratio_vs_tweedie=2.0)  # 2x is within
    assert gate(m)["passed"] is True and gate(m)["failed"] == []
