"""The noise protocol: every method's starting noise as a log-SNR, one rule for all (vcebench.protocol.noise)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from vcebench.config.load import ConfigError
from vcebench.protocol.noise import (
    ddpm_log_snr,
    flow_log_snr,
    flow_t,
    nearest_start_step,
    resolve_method,
)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_nearest_start_step_on_a_known_schedule():
    """A schedule whose log-SNR falls linearly 10 -> -10 over 101 train steps: respaced to 11 steps, step i
    has log-SNR 10 - 2 i, so a target of 3.1 is step 3 (4.0), 2.9 step 4 (2.0), and the ends clip to [1, 10]."""
    abar = _sigmoid(np.linspace(10.0, -10.0, 101))
    np.testing.assert_allclose(ddpm_log_snr(abar)[::10], 10.0 - 2.0 * np.arange(11), atol=1e-9)
    assert nearest_start_step(abar, 11, 3.1) == 3
    assert nearest_start_step(abar, 11, 2.9) == 4
    assert nearest_start_step(abar, 11, 50.0) == 1  # never step 0 (no guided step)
    assert nearest_start_step(abar, 11, -50.0) == 10
    assert nearest_start_step(abar, 101, 3.15) == 34  # 10 - 0.2 i closest to 3.15: i = 34.25


def test_the_remembered_search_answers_as_the_search_per_schedule():
    """`respacing_for_steps` remembers its answers (a config check asks for the same ones hundreds of times): the
    same steps and target on another schedule get that schedule's answer, each the first respacing whose start
    step at the target is the step count (or the closest), as the plain walk over the respacings finds it."""
    from vcebench.protocol.noise import respacing_for_steps

    def walk(abar, g, target):  # the rule as docs/protocol.md states it
        gaps = {r: abs(nearest_start_step(abar, r, target) - g) for r in range(max(2, g + 1), len(abar) + 1)}
        return min(gaps, key=lambda r: (gaps[r], r))

    steep, flat = _sigmoid(np.linspace(10.0, -10.0, 101)), _sigmoid(np.linspace(4.0, -4.0, 101))
    for g, target in [(3, 3.1), (10, 0.0), (15, -2.5), (30, 6.0)]:
        answers = [respacing_for_steps(abar, g, target) for abar in (steep, flat, steep, flat)]
        assert answers == [walk(steep, g, target), walk(flat, g, target)] * 2
    assert respacing_for_steps(steep, 3, 3.1) != respacing_for_steps(flat, 3, 3.1)  # the schedules differ here


def test_flow_log_snr_round_trip_and_the_resolution_shift():
    for t in (0.05, 0.15, 0.4, 0.8):
        assert flow_t(flow_log_snr(t)) == pytest.approx(t)
    # simple diffusion's shift 2 ln(128 / 32) moves t = 0.4 to sqrt(SNR) = 1.5 * 4 = 6, i.e. t = 1 / 7
    assert flow_t(flow_log_snr(0.4) + 2 * math.log(4)) == pytest.approx(1 / 7)


def test_fire_and_ddpm_follow_one_rule(cfg):
    """snr_matched shifts every method by the same 2 ln(128 / 32); paper runs the papers' values."""
    p, r = resolve_method(cfg, "synthfaces_age", "fire_paper")
    assert r["noise_rule"] == "paper" and p["t"] == pytest.approx(0.4) and r["tuned"] is False
    new = copy.deepcopy(cfg)
    new["tuned"] = {}
    new["tasks"]["synthfaces_age"]["params"]["dime"] = {"respacing": 100}
    fire = resolve_method(new, "synthfaces_age", "fire")[1]
    dime = resolve_method(new, "synthfaces_age", "dime")[1]
    dime_paper = resolve_method(new, "synthfaces_age", "dime_paper")[1]
    assert fire["noise_rule"] == dime["noise_rule"] == "snr_matched"
    assert fire["log_snr_shift"] == dime["log_snr_shift"] == pytest.approx(2 * math.log(4))
    assert fire["t"] == pytest.approx(1 / 7)
    assert dime["log_snr_target"] - dime["log_snr_reference"] == pytest.approx(2 * math.log(4))
    # the DDPM's own schedule (linear 2e-4..0.04, T = 500): 60 of 200 is train step 150; shifted, 9 of 100
    assert dime_paper["log_snr_reference"] == pytest.approx(float(ddpm_log_snr(_linear_abar())[150]))
    assert (dime["start_step"], dime["respacing"]) == (9, 100)


def _linear_abar():
    return np.cumprod(1 - np.linspace(2e-4, 0.04, 500))


def test_paper_rule_at_the_paper_respacing_is_the_paper_start(cfg):
    new = copy.deepcopy(cfg)
    new["protocol"]["noise"] = "paper"
    new["tasks"]["synthfaces_smile"]["params"]["maskdime"].update(respacing=200, guided_steps=None)
    new["tuned"] = {}
    p, r = resolve_method(new, "synthfaces_smile", "maskdime")
    assert (p["start_step"], r["train_timestep"]) == (60, 150)


@pytest.mark.parametrize("respacing", [25, 50, 200])
def test_changing_only_respacing_keeps_the_starting_snr(cfg, respacing):
    """A budget variant that changes `respacing` starts at the step of the new trajectory nearest the same
    log-SNR: within half the log-SNR gap between neighbouring respaced steps of the target."""
    new = copy.deepcopy(cfg)
    new["tuned"] = {}
    new["variants"]["dime"]["R"] = {"respacing": respacing, "guided_steps": None}  # the respacing sets the trajectory
    base = resolve_method(new, "synthfaces_smile", "dime")[1]
    v = resolve_method(new, "synthfaces_smile", "dime_R")[1]
    assert v["log_snr_target"] == pytest.approx(base["log_snr_target"])
    from vcebench.protocol.noise import respaced_log_snr

    _, lam = respaced_log_snr(_linear_abar(), respacing)
    s = v["start_step"]
    assert abs(lam[s] - v["log_snr_target"]) <= min(abs(lam[s - 1] - v["log_snr_target"]),
                                                    abs(lam[min(s + 1, respacing - 1)] - v["log_snr_target"]))


@pytest.mark.parametrize("guided", [3, 15, 30])
def test_changing_only_guided_steps_keeps_the_starting_snr(cfg, guided):
    """The equal-compute budget (`guided_steps`, the Pareto variants g3..g30): the trajectory is respaced so that
    the start step at the same log-SNR is the step count, the respaced step nearest that log-SNR."""
    from vcebench.protocol.noise import respaced_log_snr

    new = copy.deepcopy(cfg)
    new["tuned"] = {}
    new["variants"]["dime"]["G"] = {"guided_steps": guided}
    base = resolve_method(new, "synthfaces_smile", "dime")[1]
    p, v = resolve_method(new, "synthfaces_smile", "dime_G")
    # `protocol.retries: shared`: DiME's 3 retry scales share the steps (start at the count per attempt)
    per_attempt = v.get("updates_per_attempt", guided)
    assert v["log_snr_target"] == pytest.approx(base["log_snr_target"]) and p["start_step"] == per_attempt
    _, lam = respaced_log_snr(_linear_abar(), p["respacing"])
    s = p["start_step"]
    assert abs(lam[s] - v["log_snr_target"]) <= min(abs(lam[s - 1] - v["log_snr_target"]),
                                                    abs(lam[s + 1] - v["log_snr_target"]))


def test_offset_and_derived_keys(cfg):
    new = copy.deepcopy(cfg)
    new["tuned"] = {}
    new["tasks"]["synthfaces_smile"]["params"]["fastdime"]["log_snr_offset"] = 1.0
    p, r = resolve_method(new, "synthfaces_smile", "fastdime")
    assert r["log_snr_target"] == pytest.approx(r["log_snr_reference"] + 2 * math.log(4) + 1.0)
    assert p["warmup_steps"] == max(1, int(0.5 * p["start_step"] + 0.5))
    assert not {"log_snr_offset", "ref_start_step", "ref_respacing", "warmup_fraction", "protocol"} & set(p)
    new["tasks"]["synthfaces_smile"]["params"]["dime"]["start_step"] = 9
    with pytest.raises(ConfigError, match="start_step.*derived"):
        resolve_method(new, "synthfaces_smile", "dime")


def test_every_configured_method_resolves_and_builds(cfg):
    import methods
    from methods import base_method
    from vcebench import registry
    from vcebench.config.tasks import all_methods, get_task, runs_on

    for task in cfg["tasks"]:
        for name in all_methods(cfg):
            if not runs_on(get_task(cfg, task), name):  # the truth row on a real task
                continue
            params, record = resolve_method(cfg, task, name)
            m = methods.get_method(name, params, task=get_task(cfg, task), config=cfg)
            if registry.get_method_spec(base_method(name)).noise is None:  # reference rows, the pixel attack
                assert m.name == name and record["log_snr"] is None
                continue
            assert m.name == name and math.isfinite(record["log_snr"])


def test_tuned_file_is_read_after_the_task_and_before_a_variant(cfg, tmp_path):
    """config/tuned/<task>.yaml (written by `vcebench tune`) is merged after the task's settings and before
    a variant's; `paper` rows and `protocol.use_tuned: false` leave it out; the record says which."""
    import yaml

    from vcebench.config.load import attach_tuned

    new = copy.deepcopy(cfg)
    new["protocol"]["tuned_dir"] = "tuned"
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "synthfaces_smile.yaml").write_text(yaml.safe_dump(
        {"date": "2026-01-02", "settings": {"fire": {"rho": 0.5, "log_snr_offset": -1.0, "K": 3},
                                            "maskdime": {"scales": [1.0, 2.0]}, "dime": {}}}))
    attach_tuned(new, tmp_path)
    p, r = resolve_method(new, "synthfaces_smile", "fire")
    assert p["rho"] == 0.5 and r["tuned"] and r["tuned_file"] == "tuned/synthfaces_smile.yaml"
    assert r["tuned_date"] == "2026-01-02" and r["log_snr_offset"] == -1.0
    assert r["log_snr"] == pytest.approx(flow_log_snr(0.4) + 2 * math.log(4) - 1.0)
    assert resolve_method(new, "synthfaces_smile", "fire_K5")[0]["K"] == 5  # the variant wins over the tuned K
    assert resolve_method(new, "synthfaces_smile", "fire_K5")[0]["rho"] == 0.5
    pp, rp = resolve_method(new, "synthfaces_smile", "fire_paper")
    assert pp["rho"] == 0.05 and not rp["tuned"] and pp["t"] == pytest.approx(0.4)
    assert resolve_method(new, "synthfaces_smile", "maskdime")[0]["scales"] == [1.0, 2.0]
    assert not resolve_method(new, "synthfaces_age", "maskdime")[1]["tuned"]  # no file for that task
    # the tuning picked DiME's untuned setting ({}): the row is tuned, its settings are the untuned ones
    pd_, rd = resolve_method(new, "synthfaces_smile", "dime")
    assert rd["tuned"] and pd_ == resolve_method({**new, "tuned": {}}, "synthfaces_smile", "dime")[0]
    assert not resolve_method(new, "synthfaces_smile", "fastdime")[1]["tuned"]  # not in the file
    new["protocol"]["use_tuned"] = False
    assert not resolve_method(new, "synthfaces_smile", "fire")[1]["tuned"]
