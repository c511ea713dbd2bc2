"""`vcebench tune`: equal settings per method, and the selection rule applied as configured."""

from __future__ import annotations

import math

import pytest

from vcebench.config.load import ConfigError
from vcebench.protocol.tune import candidate_settings, select, tune_methods

RULE = {"minimize": "FID", "require": {"FR": 95, "FR_oracle": 80}}


def _rows(*metrics):
    return [{"metrics": dict(zip(("FID", "FR", "FR_oracle"), m))} for m in metrics]


def test_lowest_fid_among_the_settings_that_meet_every_bound():
    rows = _rows((0.5, 94.9, 99),    # lowest FID, but FR < 95
                 (3.0, 100, 85),
                 (2.0, 96, 80),      # meets both bounds exactly: picked
                 (1.0, 100, 79.9),   # FR_oracle < 80
                 (2.5, 100, 100))
    pick, how = select(rows, RULE)
    assert pick == 2 and how["qualified"] and how["n_qualified"] == 3


def test_the_rule_is_read_from_the_config_not_assumed():
    rows = _rows((0.5, 94.9, 99), (3.0, 100, 85), (2.0, 96, 80))
    assert select(rows, {"minimize": "FID"})[0] == 0                         # no bounds: lowest FID
    assert select(rows, {"minimize": "FID", "require": {"FR": 90}})[0] == 0
    assert select(rows, {"minimize": "FID", "require": {"FR_oracle": 84}})[0] == 0
    assert select(rows, {"minimize": "FID", "require": {"FR_oracle": 86}})[0] == 0
    assert select(rows, {"minimize": "FID", "require": {"FR": 97}})[0] == 1
    assert select(rows, {"minimize": "FR_oracle", "require": {"FR": 95}})[0] == 2


def test_fallback_when_nothing_qualifies_is_the_smallest_shortfall_and_says_so():
    rows = _rows((1.0, 90, 50),      # shortfall 5 + 30 = 35
                 (9.0, 99, 70),      # shortfall 10: picked
                 (5.0, 100, 70),     # shortfall 10, lower FID than row 1: picked instead
                 (None, 99, 75))     # FID skipped (< 2 successful CFs): shortfall 5 but FID inf
    pick, how = select(rows, RULE)
    assert pick == 3 and not how["qualified"] and how["shortfall"] == pytest.approx(5)
    assert "shortfall" in how["how"]
    pick, _ = select(rows[:3], RULE)
    assert pick == 2


def test_missing_metric_never_qualifies_and_ties_keep_the_earlier_setting():
    rows = _rows((1.0, None, 99), (2.0, 100, 90), (2.0, 100, 95))
    assert select(rows, RULE)[0] == 1


def test_every_method_gets_the_same_number_of_settings(cfg):
    from vcebench.config.tasks import get_task, method_params

    task = get_task(cfg, "synthfaces_smile")
    n = cfg["tune"]["n_settings"]
    for m in tune_methods(cfg):
        untuned = method_params(cfg, task, m, candidate={})
        cands = candidate_settings(cfg["tune"]["space"][m], untuned, n, cfg["tune"]["seed"], m)
        if not cfg["tune"]["space"][m]:  # nothing to tune (the pixel attack: its budget defines the row)
            assert cands == [{}]
            continue
        assert len(cands) == n and cands[0] == {}
        assert cands == candidate_settings(cfg["tune"]["space"][m], untuned, n, cfg["tune"]["seed"], m)  # seeded
        for name, spec in cfg["tune"]["space"][m].items():
            lo, hi = spec["range"]
            vals = [c[name] for c in cands[1:]]
            if spec.get("relative"):
                base = untuned[name]
                vals = [v[0] / base[0] if isinstance(v, list) else v / base for v in vals]
            assert all(lo - 1e-3 * abs(lo) <= v <= hi + 1e-3 * abs(hi) for v in vals), (m, name, vals)
            # Latin hypercube: one draw in each of the n - 1 strata of the range
            u = [(math.log(v / lo) / math.log(hi / lo)) if spec.get("scale") == "log" else (v - lo) / (hi - lo)
                 for v in vals]
            assert sorted(int(min(x, 0.9999) * (n - 1)) for x in u) == list(range(n - 1)), (m, name)


def test_relative_knob_needs_the_parameter():
    with pytest.raises(ConfigError, match="no `k`"):
        candidate_settings({"k": {"range": [0.5, 2], "scale": "linear", "relative": True}}, {"rho": 0.1}, 4, 0, "fire")


def test_tune_methods_are_the_base_methods(cfg):
    assert tune_methods(cfg) == ["fire", "dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime", "ace", "pixel"]


def test_merge_keeps_the_other_methods_and_refuses_a_different_rule():
    from vcebench.protocol.tune import merge_tuned

    base = {"task": "t", "rule": RULE, "validation": {"n": 4}, "n_settings": 2, "seed": 0, "noise_rule": "x",
            "wall_seconds": 10}
    old = {**base, "settings": {"fire": {"rho": 1}, "dime": {}}, "picked": {"fire": {"setting": 1}, "dime": {}},
           "sweep": [{"method": "fire"}, {"method": "dime", "old": True}]}
    new = {**base, "wall_seconds": 5, "settings": {"dime": {"scales": [1]}}, "picked": {"dime": {"setting": 1}},
           "sweep": [{"method": "dime", "old": False}]}
    m = merge_tuned(old, new)
    assert m["settings"] == {"fire": {"rho": 1}, "dime": {"scales": [1]}} and m["wall_seconds"] == 15
    assert [r.get("old") for r in m["sweep"] if r["method"] == "dime"] == [False]
    with pytest.raises(ConfigError, match="rule"):
        merge_tuned(old, {**new, "rule": {"minimize": "FR"}})


def test_a_finished_setting_is_reused_only_with_the_same_network_weights(tmp_path, monkeypatch):
    """An interrupted sweep resumes from its finished settings; a network retrained under the same name
    (other training settings, other weights) makes every setting run again, never a stale row."""
    import numpy as np
    import torch

    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.models.checkpoints import weights_fingerprint
    from vcebench.steps import evaluate as ev_cmd
    from vcebench.steps import explain as ex_cmd
    from vcebench.steps.tune import _Sweep, _sweep_row

    runs = []

    def fake_generate(method, images, ids, models, settings, npz, device):
        runs.append(npz)
        np.savez(npz, steps=np.ones(len(ids)))
        return {"sec_per_cf": 0.1}

    monkeypatch.setattr(ex_cmd, "generate", fake_generate)
    monkeypatch.setattr(ev_cmd, "evaluate_task", lambda *a, **k: {"metrics": {"FID": 1.0, "FR": 100.0}})
    cfg = load_config()
    net = torch.nn.Linear(3, 2)

    def sweep(weights):
        models = type("M", (), {"names": {"classifier": "classifier (trained)"}})()
        return _Sweep(cfg, get_task(cfg, "synthfaces_smile"), None, "val", torch.arange(4), None, models,
                      {"classifier"}, ["FID", "FR"], tmp_path, tmp_path / "ref.npz", None, "resources/models",
                      "cpu", weights)

    before = {"classifier": weights_fingerprint(net)}
    row = _sweep_row(sweep(before), "fire", 0, {})
    assert _sweep_row(sweep(before), "fire", 0, {}) == row and len(runs) == 1  # resumed
    copy = torch.nn.Linear(3, 2)
    copy.load_state_dict(net.state_dict())
    assert weights_fingerprint(copy) == before["classifier"]  # the same weights in another object
    with torch.no_grad():
        net.weight[0, 0] += 1e-6
    after = {"classifier": weights_fingerprint(net)}
    assert after != before
    _sweep_row(sweep(after), "fire", 0, {})
    assert len(runs) == 2  # the same name, other weights: run again
    pixel = _sweep_row(sweep(after), "pixel", 0, {})  # no noise level: no log-SNR, and the row is written
    assert pixel["log_snr"] is None and pixel["metrics"]["FR"] == 100.0
