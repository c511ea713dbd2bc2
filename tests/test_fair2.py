"""The switches of the fair protocol's second version (config/presets/fair2.yaml, issue #62; defaults: today's):
one rule for retries, ACE's noise by the DDPMs' rule, the x-ray baselines as FastDiME_Med's code, searchable l1
weights. Each check is shown to reject today's default (planted: the config without the preset)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vcebench.config.load import load_config
from vcebench.protocol.fair import GUIDED_UPDATES, RULE_PARAMS, UPDATE_KEY, rule_params
from vcebench.protocol.noise import attempts, resolve_method
from vcebench.protocol.space import OFFSET_RANGE, space_violations

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ("synthfaces_smile", "synthfaces_age", "synthxray_pacemaker")


@pytest.fixture(scope="module")
def today():
    return load_config()


@pytest.fixture(scope="module")
def fair2():
    return load_config([ROOT / "config/config.yaml", ROOT / "config/presets/fair2.yaml"])


def _updates_per_input(cfg: dict, task: str, method: str) -> int:
    """The most guided updates a method may run on one input: per attempt times its attempts."""
    params, record = resolve_method(cfg, task, method, candidate={})
    per_attempt = params["start_step"] if UPDATE_KEY[method] == "guided_steps" else params[UPDATE_KEY[method]]
    return per_attempt * attempts(params)


def test_one_rule_for_retries_every_method_within_the_budget(fair2, today):
    for task in SYNTHETIC:
        for method in UPDATE_KEY:
            assert _updates_per_input(fair2, task, method) <= GUIDED_UPDATES, (task, method)
        # a method without retries keeps the whole budget; a 3-scale DDPM gets a third per attempt
        assert _updates_per_input(fair2, task, "fire") == GUIDED_UPDATES
        assert _updates_per_input(fair2, task, "ace") == GUIDED_UPDATES
    params, record = resolve_method(fair2, "synthfaces_smile", "dime", candidate={})
    assert (params["start_step"], record["attempts"], record["updates_per_attempt"]) == (5, 3, 5)
    assert resolve_method(fair2, "synthxray_pacemaker", "dime", candidate={})[0]["start_step"] == GUIDED_UPDATES
    # planted: today the DDPM baselines retry with up to 3 x 15 updates while FiRe is capped at 15
    assert _updates_per_input(today, "synthfaces_smile", "dime") == 3 * GUIDED_UPDATES
    assert "attempts" not in resolve_method(today, "synthfaces_smile", "dime", candidate={})[1]


def _ace_noises(cfg: dict) -> set[float]:
    out = set()
    for off in np.linspace(*OFFSET_RANGE, 61):
        _, record = resolve_method(cfg, "synthfaces_smile", "ace", candidate={"log_snr_offset": float(off)})
        out.add(round(record["log_snr"], 6))
    return out


def test_ace_reaches_its_offsets_by_the_ddpms_rule(fair2, today):
    noises = _ace_noises(fair2)
    assert len(noises) >= 10, sorted(noises)
    params, record = resolve_method(fair2, "synthfaces_smile", "ace", candidate={"log_snr_offset": -1.3})
    assert params["start_step"] == 4 and record["chain_steps"] == 4  # the paper's filter length, held
    assert params["attack_steps"] == GUIDED_UPDATES  # one attack iteration: one classifier gradient through it
    # planted: today's fixed 50-step respacing reaches a handful of starts
    assert len(_ace_noises(today)) <= 5


def test_xray_baselines_are_meds_code_under_the_switch(fair2, today):
    med = rule_params("synthxray", "Pacemaker", 32, med_code=True)
    for cfg, want in ((fair2, med), (today, rule_params("synthxray", "Pacemaker", 32))):
        for m in ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime"):
            p = cfg["tasks"]["synthxray_pacemaker"]["params"][m]
            fam = "fastdime" if m.startswith("fastdime") else m
            keys = {*RULE_PARAMS[fam], "guidance_form", "mask_from_t", "warmup_fraction"} & set(want[m])
            assert {k: p.get(k) for k in keys} == {k: want[m][k] for k in keys}, (m, cfg is fair2)
    params, _ = resolve_method(fair2, "synthxray_pacemaker", "fastdime", candidate={})
    assert params["guidance_form"] == "med" and params["mask_from_t"] is None
    assert params["warmup_steps"] == round(0.5 * params["start_step"] + 1e-9)  # after half the trajectory
    assert resolve_method(today, "synthxray_pacemaker", "fastdime", candidate={})[0].get("guidance_form",
                                                                                        "dime") == "dime"


def test_every_l1_weight_is_searched_by_the_rule(fair2, today):
    assert space_violations(fair2["tune"]["space"], l1=True) == []
    assert all("l1" in fair2["tune"]["space"][m] for m in ("dime", "fastdime", "fastdime2", "fastdime2plus",
                                                            "maskdime"))
    assert space_violations(today["tune"]["space"]) == []
    # planted: today's spaces have no l1
    assert any(".l1:" in b for b in space_violations(today["tune"]["space"], l1=True))


def test_a_derived_trajectory_starts_closest_to_its_target(fair2):
    """`protocol.respacing: closest`: among the respacings whose start step is the asked one, the start nearest
    the target noise; DiME's paper noise (step 60 of 200) is then reached on its paper's own 200-step respacing."""
    from vcebench.protocol.noise import ddpm_schedule, respaced_log_snr, respacing_for_steps

    abar, _ = ddpm_schedule(fair2, "synthfaces")
    target = float(respaced_log_snr(abar, 200)[1][60])
    assert respacing_for_steps(abar, 60, target, "closest") == 200
    smallest = {**fair2, "protocol": {**fair2["protocol"], "respacing": "smallest"}}
    closer = 0
    for task in SYNTHETIC:
        for method in ("dime", "fastdime", "maskdime", "ace"):
            for off in np.linspace(*OFFSET_RANGE, 13):
                candidate = {"log_snr_offset": float(off)}
                new = resolve_method(fair2, task, method, candidate=candidate)[1]
                old = resolve_method(smallest, task, method, candidate=candidate)[1]
                gap_new, gap_old = (abs(r["log_snr"] - r["log_snr_target"]) for r in (new, old))
                assert new["start_step"] == old["start_step"] and gap_new <= gap_old + 1e-12, (task, method, off)
                closer += gap_new < gap_old - 1e-9
    assert closer > 0
    # planted: today's rule takes the smallest respacing with 60 steps left, a start off the paper's noise
    assert respacing_for_steps(abar, 60, target, "smallest") == 199
