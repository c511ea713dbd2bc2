"""The search-space rule's widening (vcebench/protocol/space.py, docs/protocol.md section 6 "The tuner"): a
space that contains its optimum, one rule for every method."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from vcebench.config.load import load_config, read_yaml
from vcebench.protocol.space import (
    WidenRule,
    edge_picks,
    final_space,
    hard_limit,
    near_edges,
    search_with_widening,
    widen_side,
)

SPACE = {"log_snr_offset": {"range": [-3.0, 3.0], "scale": "linear", "relative": False},
         "eta": {"range": [0.25, 4.0], "scale": "log", "relative": True}}
UNTUNED = {"eta": 0.02}
RULE = {"minimize": "KID", "require": {"FR": 95}}
WIDEN = WidenRule(edge=0.05, factor=2.0, extra_trials=10, max=2)


def _valley(offset: float, eta: float):
    """A fake objective: KID a bowl around (``offset``, ``eta``), every trial flips."""
    def evaluate(i, cand):
        o, e = cand.get("log_snr_offset", 0.0), cand.get("eta", 0.02)
        return {"KID": (o - offset) ** 2 + 4 * math.log(e / eta) ** 2, "FR": 100.0}
    return evaluate


def _search(tmp_path, evaluate, widen=WIDEN, db="s.db"):
    return search_with_widening(evaluate, SPACE, UNTUNED, n_trials=24, rule=RULE, widen=widen, method="fire",
                                seed=0, storage=f"sqlite:///{tmp_path / db}", settings_key="k")


def _best(rows):
    return min(rows, key=lambda r: r["metrics"]["KID"])


def test_an_optimum_outside_the_space_widens_it_and_the_search_ends_interior(tmp_path):
    # eta's optimum x10 the untuned 0.02 lies past the x4 bound: the search must widen that side, then find it
    rows, widenings = _search(tmp_path, _valley(0.5, 0.2))
    assert widenings, "the best trial sat at the x4 bound and nothing was widened"
    assert widenings[0]["sides"] == ["eta high"] and widenings[0]["space"]["eta"] == [0.25, 16.0]
    assert len(rows) == 24 + WIDEN.extra_trials * len(widenings)  # the same extra trials for every widening
    best = _best(rows)
    assert best["overrides"]["eta"] > 0.08 and 0.12 < best["overrides"]["eta"] < 0.32
    final = dict(SPACE, eta={**SPACE["eta"], "range": widenings[-1]["space"]["eta"]})
    assert near_edges(final, best["point"], WIDEN.edge) == []  # the pick ends interior
    # planted fault: without the rule (max 0) the pick stays on the bound it cannot pass
    plain, none = _search(tmp_path, _valley(0.5, 0.2), widen=WidenRule(max=0), db="plain.db")
    assert none == [] and near_edges(SPACE, _best(plain)["point"], WIDEN.edge) == [("eta", "high")]


def test_an_interior_optimum_widens_nothing(tmp_path):
    rows, widenings = _search(tmp_path, _valley(0.5, 0.03))
    assert widenings == [] and len(rows) == 24
    assert near_edges(SPACE, _best(rows)["point"], WIDEN.edge) == []


def test_the_edge_is_five_percent_of_the_range_in_the_specs_units():
    assert near_edges(SPACE, {"log_snr_offset": -2.75, "eta": 1.0}, 0.05) == [("log_snr_offset", "low")]
    assert near_edges(SPACE, {"log_snr_offset": -2.65, "eta": 1.0}, 0.05) == []  # 5.8 % of 6
    # log units: x3.5 is 4.8 % of ln 16 below x4, x3.3 is 6.9 %
    assert near_edges(SPACE, {"log_snr_offset": 0.0, "eta": 3.5}, 0.05) == [("eta", "high")]
    assert near_edges(SPACE, {"log_snr_offset": 0.0, "eta": 3.3}, 0.05) == []


def test_hard_limits_are_never_widened_and_a_widening_stops_at_them():
    shift = {"range": [-2, 2], "scale": "shift", "relative": True}
    frac = {"range": [0.25, 4.0], "scale": "log", "relative": True}
    # a radius 1 shifted by -2 is floored at 0: a hard limit; a radius 3 is not, and widens to 0 at most
    assert hard_limit(shift, "dilation", "low", {"dilation": 1}, "fire")
    assert not hard_limit(shift, "dilation", "low", {"dilation": 3}, "fire")
    assert widen_side(shift, "dilation", "low", 2.0, {"dilation": 3}, "fire")["range"] == [-3, 2]
    assert widen_side(shift, "dilation", "high", 2.0, {"dilation": 3}, "fire")["range"] == [-2, 4]
    # a fraction: rho 0.3 x4 passes 1 (hard), rho 0.05 x4 = 0.2 widens to x16 but k 0.1 stops at x10 (= 1)
    assert hard_limit(frac, "rho", "high", {"rho": 0.3}, "fire")
    assert widen_side(frac, "rho", "high", 2.0, {"rho": 0.05}, "fire")["range"] == [0.25, 16.0]
    assert widen_side(frac, "k", "high", 2.0, {"k": 0.1}, "maskdime")["range"] == [0.25, 10.0]
    # a strength or the offset has no hard limit
    assert not hard_limit(frac, "eta", "high", {"eta": 0.02}, "fire")
    assert widen_side(SPACE["log_snr_offset"], "log_snr_offset", "low", 2.0, {}, "fire")["range"] == [-6.0, 3.0]


@pytest.mark.parametrize("spec, bad", [({"factor": 1.0}, "factor"), ({"edge": 0.6}, "edge"), ({"x": 1}, "x")])
def test_the_widening_rule_is_read_from_the_config(spec, bad):
    from vcebench.config.load import ConfigError

    with pytest.raises(ConfigError, match="tune.widen"):
        WidenRule.from_config(spec)
    assert WidenRule.from_config(load_config()["tune"]["widen"]) == WidenRule()


def test_the_committed_picks_are_interior_and_a_pick_at_a_bound_is_listed():
    """The committed tuned files (made under the widening rule, issue #62): no pick within 5 % of a soft bound of the
    space its widenings left. Planted: a pick moved onto its final space's bound is listed."""
    cfg = load_config()
    root = Path(__file__).parents[1]
    files = {task: read_yaml(root / meta["file"]) for task, meta in cfg["tuned"].items()}
    found = [e for task, tuned in files.items() for e in edge_picks(cfg, task, tuned) if not e["hard"]]
    assert found == []
    tuned = copy.deepcopy(files["synthfaces_age"])
    lo = final_space(tuned, "fire")["log_snr_offset"]["range"][0]
    tuned["settings"]["fire"]["log_snr_offset"] = lo
    [e] = [e for e in edge_picks(cfg, "synthfaces_age", tuned) if not e["hard"]]
    assert (e["method"], e["param"], e["side"]) == ("fire", "log_snr_offset", "low")


def test_the_sweep_table_lists_the_widenings():
    from vcebench.protocol.tune import sweep_markdown

    tuned = read_yaml(Path(__file__).parents[1] / "config/tuned/synthxray_pacemaker.yaml")
    assert "Widened spaces" in sweep_markdown(tuned)  # the committed re-tune widened some spaces
    tuned = {**tuned, "methods": {m: {**r, "widenings": []} for m, r in tuned["methods"].items()}}
    assert "Widened spaces" not in sweep_markdown(tuned)
    ace = dict(tuned["methods"]["ace"], widenings=[{"after_trials": 32, "trial": 17, "sides": ["attack_step high"],
                                                    "space": {"attack_step": [0.25, 16.0]}}])
    md = sweep_markdown({**tuned, "methods": {**tuned["methods"], "ace": ace}})
    assert "| ace | 32 | 17 | attack_step high | attack_step [0.25, 16.0] |" in md


def test_a_pick_is_judged_against_the_space_its_widenings_left():
    """A pick at the config's bound that a widening moved away is interior; one at the widened bound is listed,
    with the number of widenings its method had. Planted: the same file without its widening record."""
    from vcebench.protocol.space import final_space

    cfg = load_config()
    space = {"scales": {"range": [0.25, 4.0], "scale": "log", "relative": True}}
    tuned = {"settings": {"dime": {"scales": [c * 4.0 for c in (8, 10, 15)]}}, "space": {"dime": space},
             "methods": {"dime": {"widenings": [{"after_trials": 32, "sides": ["scales high"],
                                                 "space": {"scales": [0.25, 16.0]}}]}}}
    assert final_space(tuned, "dime")["scales"]["range"] == [0.25, 16.0] and space["scales"]["range"] == [0.25, 4.0]
    assert edge_picks(cfg, "synthfaces_smile", tuned) == []
    at_widened = {**tuned, "settings": {"dime": {"scales": [c * 16.0 for c in (8, 10, 15)]}}}
    [e] = edge_picks(cfg, "synthfaces_smile", at_widened)
    assert (e["param"], e["side"], e["bound"], e["widenings"]) == ("scales", "high", 16.0, 1)
    planted = {**tuned, "methods": {"dime": {"widenings": []}}}
    assert [e["bound"] for e in edge_picks(cfg, "synthfaces_smile", planted)] == [4.0]


def test_a_trial_to_be_promoted_at_a_bound_widens_it_not_only_the_best(monkeypatch):
    """The pick is made among the promoted trials: one of them at a soft bound widens it, though the best search
    trial is interior. Planted: checking the best alone (promote 1) widens nothing."""
    import vcebench.protocol.space as space_mod

    def rows(n):
        edge = {"trial": 1, "point": {"log_snr_offset": 0.0, "eta": 3.9}, "metrics": {"KID": 0.2, "FR": 100.0}}
        best = {"trial": 0, "point": {"log_snr_offset": 0.0, "eta": 1.0}, "metrics": {"KID": 0.1, "FR": 100.0}}
        far = [{"trial": i, "point": {"log_snr_offset": 0.0, "eta": 1.2}, "metrics": {"KID": 1.0 + i, "FR": 100.0}}
               for i in range(2, n)]
        return [best, edge, *far]

    monkeypatch.setattr(space_mod, "sequential_search", lambda evaluate, space, untuned, n_trials, **kw: rows(n_trials))
    kw = dict(n_trials=6, rule=RULE, widen=WidenRule(edge=0.05, factor=2.0, extra_trials=2, max=1), method="fire")
    _, widened = search_with_widening(None, SPACE, UNTUNED, promote=4, **kw)
    assert [(w["trial"], w["sides"], w["space"]) for w in widened] == [(1, ["eta high"], {"eta": [0.25, 16.0]})]
    assert search_with_widening(None, SPACE, UNTUNED, promote=1, **kw)[1] == []


def test_a_resumed_search_widens_as_the_fresh_one_did(tmp_path):
    """The widenings follow from the trials the study keeps: a sweep resumed with a higher cap (or re-run) sees,
    at each check, only the trials that had run by then, so it replays the fresh run's widenings and adds its
    own after them (the first fair2 re-tune, re-run with `max: 4`, rewrote DiME's age history instead)."""
    far = _valley(0.5, 0.02 * 40)  # eta's optimum x40: past x4 and x16, so each check widens it again
    fresh_rows, fresh = _search(tmp_path, far, widen=WidenRule(edge=0.05, factor=2.0, extra_trials=10, max=1))
    assert len(fresh) == 1
    rows, widenings = _search(tmp_path, far, widen=WidenRule(edge=0.05, factor=2.0, extra_trials=10, max=2))
    assert widenings[:1] == fresh and len(widenings) == 2
    assert rows[:len(fresh_rows)] == fresh_rows and len(rows) == len(fresh_rows) + 10
