"""`vcebench tune`: equal settings per method, and the selection rule applied as configured."""

from __future__ import annotations

import math

import pytest

from vcebench.config.load import ConfigError
from vcebench.protocol.tune import candidate_settings, select, sweep_markdown, tune_methods

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
            if spec.get("scale") == "shift":  # an integer added to the radius (floored at 0): no strata
                from vcebench.protocol.tune import ODD_KERNELS

                radius = (lambda v: (v - 1) // 2) if (m, name) in ODD_KERNELS else (lambda v: v)
                assert all(lo <= radius(v) - radius(untuned[name]) <= hi and v >= 0 for v in vals), (m, name, vals)
                continue
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
           "sweep": [{"method": "fire"}, {"method": "dime", "old": True}], "models": {"pmf": "p", "ddpm": "d"}}
    new = {**base, "wall_seconds": 5, "settings": {"dime": {"scales": [1]}}, "picked": {"dime": {"setting": 1}},
           "sweep": [{"method": "dime", "old": False}], "models": {"ddpm": "d2"}}
    m = merge_tuned(old, {**new, "sweep": [{"method": "dime", "old": False, "seconds": 2.0}]})
    assert m["settings"] == {"fire": {"rho": 1}, "dime": {"scales": [1]}} and m["wall_seconds"] == 15
    assert m["models"] == {"pmf": "p", "ddpm": "d2"}  # the kept fire rows' networks stay named
    assert (m["compute_seconds"], m["untimed_rows"]) == (2.0, 1)  # the kept fire row, cached before times
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
        models = type("M", (), {"names": {"classifier": "classifier (trained)", "pmf": "pmf (trained)"}})()
        return _Sweep(cfg, get_task(cfg, "synthfaces_smile"), None, "val", torch.arange(4), None, models,
                      {"classifier", "pmf"}, ["FID", "FR"], tmp_path, tmp_path / "ref.npz", None, "resources/models",
                      "cpu", weights, {"fire": {"classifier", "pmf"}, "dime": {"classifier"},
                                       "pixel": {"classifier"}})

    before = {"classifier": weights_fingerprint(net)}
    row = _sweep_row(sweep(before), "fire", 0, {})
    assert _sweep_row(sweep(before), "fire", 0, {}) == row and len(runs) == 1  # resumed
    # the setting's own time is kept with its row: a resumed sweep's compute counts it (its wall time cannot)
    from vcebench.protocol.tune import compute_seconds
    assert row["seconds"] >= 0 and compute_seconds([row, row]) == {"compute_seconds": round(2 * row["seconds"], 1),
                                                                  "untimed_rows": 0}
    assert compute_seconds([{k: v for k, v in row.items() if k != "seconds"}])["untimed_rows"] == 1
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
    # a network only another method runs (the pmf: FiRe's) retrained: FiRe's rows run again, DiME's stay valid
    pmf_a, pmf_b = {**after, "pmf": "a" * 16}, {**after, "pmf": "b" * 16}
    _sweep_row(sweep(pmf_a), "dime", 0, {})
    _sweep_row(sweep(pmf_a), "fire", 0, {})
    n = len(runs)
    _sweep_row(sweep(pmf_b), "dime", 0, {})
    assert len(runs) == n  # resumed: DiME does not run the pmf
    _sweep_row(sweep(pmf_b), "fire", 0, {})
    assert len(runs) == n + 1


# --- sampler: tpe (config/config.yaml) --------------------------------------------------------------------
SPACE3 = {"log_snr_offset": {"range": [-3.0, 3.0], "scale": "linear", "relative": False},
          "eta": {"range": [0.25, 4.0], "scale": "log", "relative": True},
          "dilation": {"range": [-2, 2], "scale": "shift", "relative": True}}
UNTUNED3 = {"eta": 0.02, "dilation": 1}
KID_RULE = {"minimize": "KID", "require": {"FR": 95}}


def _bowl(calls=None, fail_at=None):
    """A narrow valley (optimum at offset 1.7, eta 0.09, dilation 3) that only flips where eta >= 0.01."""
    def evaluate(i, cand):
        if fail_at is not None and i == fail_at:
            raise KeyboardInterrupt("interrupted")
        if calls is not None:
            calls.append(i)
        o, e, d = cand.get("log_snr_offset", 0.0), cand.get("eta", 0.02), cand.get("dilation", 1)
        kid = 4 * (o - 1.7) ** 2 + 3 * math.log(e / 0.09) ** 2 + 0.5 * (d - 3) ** 2
        return {"KID": kid, "FR": 100.0 if e >= 0.01 else 5.0}
    return evaluate


def _search(tmp_path, evaluate, n_trials=32, key="k", db="s.db"):
    from vcebench.protocol.search import sequential_search

    return sequential_search(evaluate, SPACE3, UNTUNED3, n_trials=n_trials, seed=0, method="fire", rule=KID_RULE,
                             storage=f"sqlite:///{tmp_path / db}", settings_key=key)


def test_tpe_search_is_seeded_starts_untuned_and_finds_the_good_region(tmp_path):
    rows = _search(tmp_path, _bowl())
    assert len(rows) == 32 and [r["trial"] for r in rows] == list(range(32)) and rows[0]["overrides"] == {}
    again = _search(tmp_path, _bowl(), db="other.db")
    assert [r["overrides"] for r in again] == [r["overrides"] for r in rows]  # seeded
    best = min(r["metrics"]["KID"] for r in rows)
    lhs = [_bowl()(i, c) for i, c in enumerate(candidate_settings(SPACE3, UNTUNED3, 6, 0, "fire"))]
    lhs32 = [_bowl()(i, c) for i, c in enumerate(candidate_settings(SPACE3, UNTUNED3, 32, 0, "fire"))]
    assert best < min(m["KID"] for m in lhs) and best < min(m["KID"] for m in lhs32)  # beats 6 and 32 LHS draws
    assert best < 0.5


def test_tpe_search_resumes_after_an_interruption_as_if_never_stopped(tmp_path):
    calls = []
    with pytest.raises(KeyboardInterrupt):
        _search(tmp_path, _bowl(calls, fail_at=11), n_trials=20)
    assert calls == list(range(11))
    resumed = _search(tmp_path, _bowl(calls), n_trials=20)
    assert calls == list(range(11)) + list(range(11, 20))  # the finished trials are not run again
    whole = _search(tmp_path, _bowl(), n_trials=20, db="whole.db")
    assert [r["overrides"] for r in resumed] == [r["overrides"] for r in whole]


def test_tpe_search_refuses_a_study_made_under_other_settings(tmp_path):
    _search(tmp_path, _bowl(), n_trials=3, key="a")
    with pytest.raises(ConfigError, match="other settings"):
        _search(tmp_path, _bowl(), n_trials=3, key="b")


def test_front_dead_and_ranked():
    from vcebench.protocol.search import front, is_dead, ranked

    rows = [{"metrics": m} for m in ({"KID": 1.0, "FR_oracle": 50, "FR": 100}, {"KID": 2.0, "FR_oracle": 90, "FR": 100},
                                     {"KID": 3.0, "FR_oracle": 80, "FR": 9.0}, {"KID": 0.5, "FR_oracle": 40, "FR": 96},
                                     {"KID": None, "FR_oracle": 99, "FR": 0.0})]
    assert front(rows, "KID") == [3, 0, 1]  # row 2 is beaten by row 1 on both; row 4 has no KID
    assert [is_dead(r, 10) for r in rows] == [False, False, True, False, True]
    assert ranked(rows, KID_RULE) == [3, 0, 1, 2, 4]


def test_pick_stability_separates_a_stable_objective_from_noise():
    import numpy as np

    from vcebench.protocol.search import pick_stability

    rng = np.random.default_rng(0)
    clear = rng.normal([[0.0], [1.0], [2.0]], 0.3, size=(3, 100))  # per-input scores of 3 trials
    noisy = rng.normal([[0.0], [0.02], [0.04]], 1.0, size=(3, 100))

    def scorer(per_input):
        return lambda t, idx: {"KID": float(per_input[t][idx].mean()), "FR": 100.0}

    stable = pick_stability(scorer(clear), 3, 100, KID_RULE, resamples=100)
    unstable = pick_stability(scorer(noisy), 3, 100, KID_RULE, resamples=100)
    assert stable["pick"] == 0 and stable["agreement"] == 1.0
    assert unstable["agreement"] < 0.8 and sum(unstable["counts"]) == 100


def test_tpe_tuner_end_to_end_on_toy_models_reads_only_val(tmp_path, monkeypatch):
    """`vcebench tune` with sampler tpe on the toy world: real FiRe counterfactuals of 8 validation inputs;
    only `val` is ever loaded; every method explains the same number of validation CFs; the record says so."""
    import numpy as np
    import torch

    import vcebench.data as data
    import vcebench.models as vmodels
    from tests.toy import toy_images, toy_models
    from vcebench.config.load import load_config
    from vcebench.steps import evaluate as ev_cmd
    from vcebench.steps.tune import run_tune

    images, _ = toy_images(24, seed=3)
    loaded = []

    class Split:
        sample_ids = torch.arange(100, 124)

        def index_of(self, ids):
            return (torch.as_tensor(ids) - 100).numpy()

        def float_images(self, rows):
            return images[torch.as_tensor(rows)]

    def load_split(cfg, dataset, name, data_dir=None):
        loaded.append(name)
        return Split()

    def evaluate_task(settings, npz, **kw):  # FR of the toy classifier; a closeness score as the objective
        from metrics.bootstrap import resample_counts

        z = np.load(npz)
        cf = torch.as_tensor(z["cf"] if "cf" in z else z["images"]).float()
        x = images[torch.as_tensor(z["sample_id"]) - 100]
        cf = cf / 127.5 - 1 if cf.max() > 1.5 else cf
        flips = (toy_models().classifier(cf).argmax(1) == torch.as_tensor(z["target"])).double().numpy() * 100
        close = (cf - x).abs().flatten(1).mean(1).double().numpy()
        w = resample_counts(len(flips), 50, 0)  # one seeded draw over the same ids for every setting: paired
        boot = {"KID": (w @ close / w.sum(1)).tolist(), "FR": (w @ flips / w.sum(1)).tolist()}
        return {"metrics": {"KID": float(close.mean()), "FR": float(flips.mean())},
                **({"resampled": boot} if kw.get("resampled") else {})}

    monkeypatch.setattr(data, "load_split", load_split)
    monkeypatch.setattr(vmodels, "load_task_models", lambda *a, **k: toy_models())
    monkeypatch.setattr(ev_cmd, "write_reference", lambda *a, **k: None)
    monkeypatch.setattr(ev_cmd, "evaluate_task", evaluate_task)
    cfg = load_config(overrides={
        "protocol": {"tuned_dir": str(tmp_path / "tuned")}, "batch_size": 8,
        "tune": {"sampler": "tpe", "n": 8, "n_search": 4, "n_trials": 4, "promote": 2, "dead_fr": 10,
                 "metrics": ["KID", "FR"], "select": {"minimize": "KID", "require": {"FR": 50}},
                 "space": {"fire": {"log_snr_offset": {"range": [-3.0, 3.0], "scale": "linear", "relative": False},
                                    "eta": {"range": [0.25, 4.0], "scale": "log", "relative": True}}}}})
    cfg["method_defaults"]["fire"].update(K=3, smoothgrad_n=2)
    out = run_tune(cfg, "synthfaces_smile", work_dir=tmp_path / "work", method_names=["fire", "pixel"], log=None)
    assert set(loaded) == {"val"}
    assert out["sampler"] == "tpe" and out["validation"]["split"] == "val" and out["validation"]["n_search"] == 4
    fire, pixel = out["methods"]["fire"], out["methods"]["pixel"]
    assert fire["trials"] == 4 and fire["explained_val_cfs"] == 4 * 4 + 2 * 8 and len(fire["promoted"]) == 2
    assert pixel["trials"] == 1  # nothing to tune: its budget defines the row
    assert fire["pick"] in fire["promoted"] and out["settings"]["fire"] == next(
        r["overrides"] for r in out["sweep"] if r["method"] == "fire" and r["picked"])
    # the pick's stability under a bootstrap of the inputs, at both stages (the same 50 draws for every trial)
    agree = fire["pick_agreement"]
    assert agree["pick"] == fire["pick"] and agree["resamples"] == 50 and 0 < agree["agreement"] <= 1
    assert sum(agree["counts"].values()) == 50 and set(agree["counts"]) <= {str(s) for s in fire["promoted"]}
    assert fire["search_agreement"]["resamples"] == 50
    md = sweep_markdown(out)
    assert "explained val CFs" in md and "front (KID, FR_oracle)" in md
    assert f"{agree['agreement']:.2f} (#{fire['pick']})" in md
    again = run_tune(cfg, "synthfaces_smile", work_dir=tmp_path / "work", method_names=["fire"], log=None)
    assert again["settings"]["fire"] == out["settings"]["fire"]  # resumed from the SQLite study and row files
