"""The fair protocol's second round (issue #62, config/config.yaml): one rule for retries, ACE's noise by the DDPMs'
rule, the x-ray baselines as FastDiME_Med's code, searchable l1 weights, a derived trajectory starting closest to its
target. Each check is shown to reject the value it replaced (planted: the config with the old values, `before`)."""

from __future__ import annotations

import copy
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
def cfg():
    return load_config([ROOT / "config/config.yaml"])


@pytest.fixture(scope="module")
def before(cfg):
    """The config with the values issue #62 replaced planted back (the protocol before the second round)."""
    old_cfg = copy.deepcopy(cfg)
    old_cfg["protocol"].update(retries="per_attempt", respacing="smallest")
    del old_cfg["method_defaults"]["ace"]["chain_steps"]
    for m in ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime"):
        del old_cfg["tune"]["space"][m]["l1"]
    old = rule_params("synthxray", "Pacemaker", 32, med_code=False)
    for m in ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime"):
        params = old_cfg["tasks"]["synthxray_pacemaker"]["params"]
        p = params[m] = dict(params[m])
        for k in ("guidance_form", "warmup_fraction"):
            p.pop(k, None)
        p.update({k: v for k, v in old[m].items() if k in p or k == "mask_from_t"})
    return old_cfg


def _updates_per_input(cfg: dict, task: str, method: str) -> int:
    """The most guided updates a method may run on one input: per attempt times its attempts."""
    params, record = resolve_method(cfg, task, method, candidate={})
    per_attempt = params["start_step"] if UPDATE_KEY[method] == "guided_steps" else params[UPDATE_KEY[method]]
    return per_attempt * attempts(params)


def test_one_rule_for_retries_every_method_within_the_budget(cfg, before):
    for task in SYNTHETIC:
        for method in UPDATE_KEY:
            assert _updates_per_input(cfg, task, method) <= GUIDED_UPDATES, (task, method)
        # a method without retries keeps the whole budget; a 3-scale DDPM gets a third per attempt
        assert _updates_per_input(cfg, task, "fire") == GUIDED_UPDATES
        assert _updates_per_input(cfg, task, "ace") == GUIDED_UPDATES
    params, record = resolve_method(cfg, "synthfaces_smile", "dime", candidate={})
    assert (params["start_step"], record["attempts"], record["updates_per_attempt"]) == (5, 3, 5)
    assert resolve_method(cfg, "synthxray_pacemaker", "dime", candidate={})[0]["start_step"] == GUIDED_UPDATES
    # planted: before, the DDPM baselines retried with up to 3 x 15 updates while FiRe is capped at 15
    assert _updates_per_input(before, "synthfaces_smile", "dime") == 3 * GUIDED_UPDATES
    assert "attempts" not in resolve_method(before, "synthfaces_smile", "dime", candidate={})[1]


def _ace_noises(cfg: dict) -> set[float]:
    out = set()
    for off in np.linspace(*OFFSET_RANGE, 61):
        _, record = resolve_method(cfg, "synthfaces_smile", "ace", candidate={"log_snr_offset": float(off)})
        out.add(round(record["log_snr"], 6))
    return out


def test_ace_reaches_its_offsets_by_the_ddpms_rule(cfg, before):
    noises = _ace_noises(cfg)
    assert len(noises) >= 10, sorted(noises)
    params, record = resolve_method(cfg, "synthfaces_smile", "ace", candidate={"log_snr_offset": -1.3})
    assert params["start_step"] == 4 and record["chain_steps"] == 4  # the paper's filter length, held
    assert params["attack_steps"] == GUIDED_UPDATES  # one attack iteration: one classifier gradient through it
    # planted: the old fixed 50-step respacing reaches a handful of starts
    assert len(_ace_noises(before)) <= 5


def test_xray_baselines_are_meds_code_under_the_switch(cfg, before):
    med = rule_params("synthxray", "Pacemaker", 32, med_code=True)
    for c, want in ((cfg, med), (before, rule_params("synthxray", "Pacemaker", 32, med_code=False))):
        for m in ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime"):
            p = c["tasks"]["synthxray_pacemaker"]["params"][m]
            fam = "fastdime" if m.startswith("fastdime") else m
            keys = {*RULE_PARAMS[fam], "guidance_form", "mask_from_t", "warmup_fraction"} & set(want[m])
            assert {k: p.get(k) for k in keys} == {k: want[m][k] for k in keys}, (m, c is cfg)
    params, _ = resolve_method(cfg, "synthxray_pacemaker", "fastdime", candidate={})
    assert params["guidance_form"] == "med" and params["mask_from_t"] is None
    assert params["warmup_steps"] == round(0.5 * params["start_step"] + 1e-9)  # after half the trajectory
    assert resolve_method(before, "synthxray_pacemaker", "fastdime", candidate={})[0].get("guidance_form",
                                                                                        "dime") == "dime"


def test_every_l1_weight_is_searched_by_the_rule(cfg, before):
    assert space_violations(cfg["tune"]["space"], l1=True) == []
    assert all("l1" in cfg["tune"]["space"][m] for m in ("dime", "fastdime", "fastdime2", "fastdime2plus",
                                                            "maskdime"))
    assert space_violations(before["tune"]["space"], l1=False) == []
    # planted: the old spaces have no l1
    assert any(".l1:" in b for b in space_violations(before["tune"]["space"]))


def test_a_derived_trajectory_starts_closest_to_its_target(cfg):
    """`protocol.respacing: closest`: among the respacings whose start step is the asked one, the start nearest
    the target noise; DiME's paper noise (step 60 of 200) is then reached on its paper's own 200-step respacing."""
    from vcebench.protocol.noise import ddpm_schedule, respaced_log_snr, respacing_for_steps

    abar, _ = ddpm_schedule(cfg, "synthfaces")
    target = float(respaced_log_snr(abar, 200)[1][60])
    assert respacing_for_steps(abar, 60, target, "closest") == 200
    smallest = {**cfg, "protocol": {**cfg["protocol"], "respacing": "smallest"}}
    closer = 0
    for task in SYNTHETIC:
        for method in ("dime", "fastdime", "maskdime", "ace"):
            for off in np.linspace(*OFFSET_RANGE, 13):
                candidate = {"log_snr_offset": float(off)}
                new = resolve_method(cfg, task, method, candidate=candidate)[1]
                old = resolve_method(smallest, task, method, candidate=candidate)[1]
                gap_new, gap_old = (abs(r["log_snr"] - r["log_snr_target"]) for r in (new, old))
                assert new["start_step"] == old["start_step"] and gap_new <= gap_old + 1e-12, (task, method, off)
                closer += gap_new < gap_old - 1e-9
    assert closer > 0
    # planted: the old rule takes the smallest respacing with 60 steps left, a start off the paper's noise
    assert respacing_for_steps(abar, 60, target, "smallest") == 199
