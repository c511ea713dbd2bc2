"""Training curves (vcebench/steps/curves.py): snapshots of one run, the wsd schedule's shared trunk, and the
plateau rule."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from vcebench.models.generative.pmf import train_pmf
from vcebench.models.training.generative import decay_start, lr_at, snapshot_path, train_generative, trunk_path
from vcebench.models.training.settings import RoleConfigError
from vcebench.steps.curves import plateau, to_markdown


def _rows(values: dict[int, float]) -> list[dict]:
    return [{"step": s, "fid": v} for s, v in values.items()]


def test_plateau_is_the_first_budget_whose_later_doublings_all_gain_little():
    # 300 -> 600: 50 %, 600 -> 1200: 20 %, 1200 -> 2400: 5 %, 2400 -> 4800: 2 %
    p = plateau(_rows({300: 20.0, 600: 10.0, 1200: 8.0, 2400: 7.6, 4800: 7.448}), "fid")
    assert p["budget"] == 1200
    assert [round(q["relative_gain"], 3) for q in p["pairs"]] == [0.5, 0.2, 0.05, 0.02]


def test_plateau_needs_the_last_doubling_flat():
    # an early flat stretch, then a drop: still improving, no plateau
    assert plateau(_rows({300: 20.0, 600: 19.5, 1200: 10.0}), "fid")["budget"] is None
    # a worse number after doubling is a gain below the threshold
    assert plateau(_rows({300: 5.0, 600: 5.2}), "fid")["budget"] == 300
    # budgets that are not doublings of each other are not compared
    assert plateau(_rows({300: 20.0, 1000: 5.0}), "fid") == {"budget": None, "key": "fid", "gain": 0.1,
                                                              "pairs": [], "cap": 25_600, "at_cap": False}


def test_a_curve_still_falling_at_the_budget_cap_is_trained_to_the_cap():
    # the faces DDPM's shape: the last doubling still gains 16 %, and it ends at the cap
    p = plateau(_rows({6400: 4.6, 12800: 3.97, 25600: 3.34}), "fid", cap=25_600)
    assert p["budget"] is None and p["at_cap"]
    assert not plateau(_rows({6400: 4.6, 12800: 3.97}), "fid", cap=25_600)["at_cap"]  # short of it: train longer
    assert not plateau(_rows({6400: 4.6, 12800: 4.5, 25600: 4.4}), "fid", cap=25_600)["at_cap"]  # a plateau
    md = to_markdown({"dataset": "d", "role": "ddpm", "recipe": {"steps": 25600, "batch_size": 4},
                      "scoring": {"n_val": 16, "n_samples": 8}, "rows": _rows({12800: 3.97, 25600: 3.34}),
                      "plateau": plateau(_rows({12800: 3.97, 25600: 3.34}), "fid"),
                      "plateau_samples_kid": plateau([], "sample_kid")})
    assert "fid: no plateau up to the budget cap (25600 steps): trained to the cap" in md
    assert "sample_kid: no plateau in the curve (train longer)" in md


def test_snapshots_hold_the_ema_weights_and_change_nothing(tmp_path):
    images = torch.randint(0, 256, (16, 1, 4, 4), dtype=torch.uint8)
    cfg = {"steps": 4, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 1000}

    def loss_fn(net, x, g, step):
        return ((net(x) - x) ** 2).mean()

    def run(out, snaps):
        torch.manual_seed(0)
        return train_generative(nn.Conv2d(1, 1, 3, padding=1), loss_fn, cfg, images, out, 0, "ddpm",
                                progress=False, snapshots=snaps)

    shadow, _ = run(tmp_path / "a", (2, 4))
    plain, _ = run(tmp_path / "b", ())
    assert all(torch.equal(shadow[k], plain[k]) for k in plain)
    last = load_file(str(snapshot_path(tmp_path / "a", 4)))
    assert all(torch.equal(last[k], shadow[k]) for k in shadow)
    early = load_file(str(snapshot_path(tmp_path / "a", 2)))
    assert not torch.equal(early["weight"], last["weight"])
    assert not (tmp_path / "b" / "snapshots").exists()


def test_wsd_rate_is_the_same_for_every_budget_until_its_decay():
    for total in (100, 200, 400):
        rates = [lr_at(s, 1.0, 10, total, "wsd", 0.2) for s in range(total)]
        start = decay_start(total, 0.2)
        assert start == total - total // 5
        assert rates[:10] == [(s + 1) / 10 for s in range(10)]            # linear warm-up
        assert set(rates[10:start]) == {1.0}                              # stable: independent of the budget
        assert all(a > b for a, b in zip(rates[start - 1:], rates[start:]))  # then falls every step
        assert rates[-1] == pytest.approx(0.1)                            # to 10 % of the base, as the cosine
    assert lr_at(399, 1.0, 10, 400) == pytest.approx(0.1, abs=1e-4)
    with pytest.raises(RoleConfigError, match="lr_schedule"):
        lr_at(20, 1.0, 10, 100, "linear")


def _conv_run(out, images, cfg, trunk=None):
    def loss_fn(net, x, g, step):
        return ((net(x + 0.1 * torch.randn(x.shape, generator=g)) - x) ** 2).mean()

    torch.manual_seed(0)
    return train_generative(nn.Conv2d(1, 1, 3, padding=1), loss_fn, cfg, images, out, 0, "ddpm",
                            progress=False, trunk_dir=trunk)


def test_a_budget_continued_from_a_shorter_budgets_trunk_is_the_run_of_that_budget(tmp_path):
    images = torch.randint(0, 256, (16, 1, 4, 4), dtype=torch.uint8)
    cfg = {"batch_size": 4, "lr": 1e-2, "warmup_steps": 2, "checkpoint_every": 3, "lr_schedule": "wsd",
           "decay_fraction": 0.25}
    trunk = tmp_path / "trunk"
    short, _ = _conv_run(tmp_path / "b8", images, {**cfg, "steps": 8}, trunk)
    (fp,) = [d.name for d in trunk.iterdir()]                # one folder per recipe
    assert trunk_path(trunk, fp, 6).is_file()                 # its state at its decay start
    long, stats = _conv_run(tmp_path / "b16", images, {**cfg, "steps": 16}, trunk)
    assert stats["resumed_from_step"] == 6 and trunk_path(trunk, fp, 12).is_file()
    alone, alone_stats = _conv_run(tmp_path / "alone", images, {**cfg, "steps": 16})
    assert alone_stats["resumed_from_step"] == 0
    assert all(torch.equal(long[k], alone[k]) for k in alone)  # bit for bit: the trunk is the same run
    assert not torch.equal(short["weight"], long["weight"])
    # a trunk of another recipe is not continued; a cosine run cannot share one
    other, other_stats = _conv_run(tmp_path / "other", images, {**cfg, "steps": 16, "lr": 2e-2}, trunk)
    assert other_stats["resumed_from_step"] == 0
    assert len(list(trunk.iterdir())) == 2 and trunk_path(trunk, fp, 6).is_file()  # nothing overwritten
    no_warmup = {k: v for k, v in cfg.items() if k != "warmup_steps"}  # unset: a share of the budget
    with pytest.raises(RoleConfigError, match="warmup_steps"):
        _conv_run(tmp_path / "nw", images, {**no_warmup, "steps": 16}, trunk)
    with pytest.raises(RoleConfigError, match="wsd"):
        _conv_run(tmp_path / "cos", images, {**cfg, "steps": 16, "lr_schedule": "cosine"}, trunk)
    # a corrupt trunk state is set aside, the earlier one is continued (and the state written again)
    trunk_path(trunk, fp, 12).write_bytes(b"not a state")
    again, again_stats = _conv_run(tmp_path / "b16b", images, {**cfg, "steps": 16}, trunk)
    assert again_stats["resumed_from_step"] == 6 and (trunk / fp / "step-000012.pt.corrupt").is_file()
    assert all(torch.equal(again[k], alone[k]) for k in alone)
    assert torch.load(trunk_path(trunk, fp, 12), weights_only=True)["step"] == 12


def test_pmf_on_a_shared_trunk_needs_a_warm_up_in_steps(tmp_path):
    images = torch.randint(0, 256, (8, 3, 8, 8), dtype=torch.uint8)
    cfg = {"unet": {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4}, "steps": 4,
           "batch_size": 4, "lr": 1e-3, "lr_schedule": "wsd", "fm_warmup": 0.25}
    with pytest.raises(RoleConfigError, match="fm_warmup_steps"):
        train_pmf(cfg, images, tmp_path / "pmf", 0, progress=False, trunk_dir=tmp_path / "trunk")


def test_a_wsd_curve_trains_each_budget_on_the_shared_trunk(cfg, tmp_path):
    """`vcebench models curve` with a wsd recipe: one run per budget, ascending, each continuing the trunk."""
    import copy

    from vcebench.config.tasks import get_task
    from vcebench.steps.curves import training_curve

    c = copy.deepcopy(cfg)
    c["datasets"]["synthfaces"].update(n_identities=12, images_per_identity=2, resolution=16)
    c["models"]["synthfaces"]["ddpm"] = {
        "unet": {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4},
        "num_train_timesteps": 50, "steps": 8, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1,
        "lr_schedule": "wsd", "decay_fraction": 0.5, "eval_images": 4, "n_samples": 2, "sample_steps": 2, "seed": 3}
    out = tmp_path / "curve"
    done = training_curve(c, get_task(c, "synthfaces_smile"), "ddpm", 8, [2, 4], out, n_val=4, progress=False,
                          score=False)
    assert done["snapshots"] == [2, 4, 8]
    for budget, trunk_from in ((2, 0), (4, 1), (8, 2)):
        run = out / f"train-{budget:06d}"
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["training"]["steps"] == budget
        assert metrics["training"]["resumed_from_step"] == trunk_from  # the previous budget's decay start
        assert snapshot_path(run, budget).is_file()
    assert sorted(p.name for p in (out / "trunk").glob("*/step-*.pt")) == [
        "step-000001.pt", "step-000002.pt", "step-000004.pt"]
    assert done["trained"] == str(out / "train-000008" / "metrics.json")


def test_score_only_trains_nothing_and_lists_the_budgets_still_training(cfg, tmp_path, monkeypatch):
    """`--score-only` beside a background run: the trained budgets are scored, the others are pending, and
    the curve is not finished (the card gets no curve) until none is."""
    import copy

    import vcebench.steps.curves as curves
    from vcebench.config.tasks import get_task
    from vcebench.steps.networks import _finished_curve

    c = copy.deepcopy(cfg)
    c["datasets"]["synthfaces"].update(n_identities=12, images_per_identity=8, resolution=16)
    c["models"]["synthfaces"]["ddpm"] = {
        "unet": {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4},
        "num_train_timesteps": 50, "steps": 8, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1,
        "lr_schedule": "wsd", "decay_fraction": 0.5, "eval_images": 4, "n_samples": 2, "sample_steps": 2}
    task, out = get_task(c, "synthfaces_smile"), tmp_path / "curve"
    means = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())  # a stand-in feature network, no judge needed
    monkeypatch.setattr(curves, "generative_references", lambda *a: {"feature_fn": means, "feature_name": "means"})
    scored = []
    monkeypatch.setattr(curves, "score_ddpm", lambda net, *a: scored.append(1) or {"tweedie_t0.4_fid": 1.0})
    with pytest.raises(curves.ConfigError, match="no budget"):
        curves.training_curve(c, task, "ddpm", 8, [4], out, n_val=4, progress=False, train=False)
    curves.training_curve(c, task, "ddpm", 4, [], out, n_val=4, progress=False, score=False)  # budget 4 only
    got = curves.training_curve(c, task, "ddpm", 8, [4], out, n_val=4, progress=False, train=False)
    assert got["pending"] == [8] and [r["step"] for r in got["rows"]] == [4]
    assert not (out / "train-000008").exists()                      # nothing trained
    assert "not trained yet: budgets 8" in curves.to_markdown(got)
    assert _finished_curve(out / "curve.json") is None               # unfinished: no card curve
    longer = curves.training_curve(c, task, "ddpm", 16, [4], out, n_val=4, progress=False, train=False)
    assert longer["pending"] == [16] and len(scored) == 1           # a larger wsd budget keeps the scored row


def test_score_pmf_records_the_gate_as_training_measures_it():
    """A curve row carries the gate of models.generative.quality.gate with the tasks' FiRe levels: its verdict,
    the failed checks, and the labels kept at each task's level (evaluated there even off the curve's t)."""
    from vcebench.models.generative.ddpm import build_ddpm
    from vcebench.models.generative.pmf import build_pmf, evaluate_pmf
    from vcebench.models.generative.quality import gate
    from vcebench.steps.curves import score_pmf, to_markdown

    torch.manual_seed(0)
    unet = {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4}
    pmf = build_pmf({"unet": unet}, 3, 8).eval()
    ddpm = build_ddpm({"unet": unet, "num_train_timesteps": 50, "sample_steps": 5}, 3, 8)
    val = torch.rand(16, 3, 8, 8) * 2 - 1

    def feats(x):
        return torch.cat([x.mean((2, 3)), x.std((2, 3))], 1)

    def bright(x):
        m = x.mean((1, 2, 3))
        return torch.stack([-m, m], 1)

    row = score_pmf(pmf, val, feats, (0.2, 0.4), 8, 0, ddpm, {"Bright": bright}, {"Bright": 0.3})
    ev, _ = evaluate_pmf(pmf, val, 0, n_samples=2, feature_fn=feats, ddpm=ddpm, t_flow=(0.2, 0.3, 0.4),
                         classifiers={"Bright": bright})
    g = gate(ev, fire_t={"Bright": 0.3})
    assert g["checks"] == ["mse_within_2x", "label_kept_vs_tweedie", "fid_lower"]
    assert row["gate_passed"] == g["passed"] and row["gate_failed"] == g["failed"]
    assert row["gate_label_kept_at_fire_t"] == g["label_kept_at_fire_t"]
    assert set(row["gate_label_kept_at_fire_t"]) == {"Bright"}
    # the FIDs at the FiRe level too (the gate at FiRe's operating noise, issue #61), as the evaluation measured them
    for t in ("0.2", "0.3", "0.4"):
        assert row[f"predict_clean_t{t}_fid"] == ev["predict_clean"][f"t{t}"]["fid"]
        assert row[f"ddpm_tweedie_t{t}_fid"] == ev["predict_clean"][f"t{t}"]["ddpm_tweedie"]["fid"]
    assert "gate_passed" not in score_pmf(pmf, val, feats, (0.4,), 8, 0)  # no DDPM: no gate
    # a level's numbers whatever other levels are scored (a new FiRe level leaves t 0.2 and 0.4 as they were)
    alone, _ = evaluate_pmf(pmf, val, 0, n_samples=2, feature_fn=feats, ddpm=ddpm, t_flow=(0.4,),
                            classifiers={"Bright": bright})
    assert alone["predict_clean"]["t0.4"] == ev["predict_clean"]["t0.4"]
    md = to_markdown({"dataset": "d", "role": "pmf", "recipe": {"steps": 8, "batch_size": 4},
                      "scoring": {"n_val": 16, "n_samples": 8}, "rows": [{"step": 8, **row}],
                      "plateau": plateau([], "x"), "plateau_samples_kid": plateau([], "y")})
    lab = row["gate_label_kept_at_fire_t"]["Bright"]
    assert f"Bright (t 0.3, pmf {lab['pmf']:.4g}, tweedie {lab['tweedie']:.4g})" in md
