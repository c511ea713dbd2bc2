"""Shipped reference networks (vcebench/models/shipping/cards.py, steps/networks.py): a card per network, installed
instead of trained when the config's recipe is the card's, checked against its sha256."""

from __future__ import annotations

import json

import pytest

from vcebench.config.load import ConfigError
from vcebench.core.merge import deep_merge
from vcebench.models.shipping.cards import ShippedNetworkError, read_card
from vcebench.steps.networks import ship
from vcebench.steps.train import train_role

TINY = {"datasets": {"synthxray": {"n_patients": 240}},
        "models": {"synthxray": {"perceptual": {"steps": 3, "width": 4, "batch": 8}}}}


@pytest.fixture(scope="module")
def shipped(cfg, tmp_path_factory):
    """A tiny perceptual network trained, then shipped as set `t`."""
    c = deep_merge(cfg, TINY)
    root = tmp_path_factory.mktemp("ship")
    train_role(c, "perceptual", "synthxray_pacemaker", model_dir=root / "models", progress=False)
    cards = ship(c, root / "models", root / "networks", "t", "a test machine")
    return c, root, cards


def test_ship_writes_a_card_with_the_recipe_and_every_file_hashed(shipped):
    c, root, cards = shipped
    assert [(k["dataset"], k["role"]) for k in cards] == [("synthxray", "perceptual")]
    card = read_card(root / "networks", "synthxray", "perceptual")
    assert card["recipe"]["settings"] == json.loads(json.dumps(c["models"]["synthxray"]["perceptual"]))
    assert card["recipe"]["data"]["n_patients"] == 240
    assert {"model.safetensors", "config.json", "metrics.json"} <= set(card["files"])
    assert all(len(h) == 64 for h in card["files"].values())
    assert card["trained"]["where"] == "a test machine"
    assert "sha256" in (root / "networks/synthxray/perceptual/card.md").read_text()


def test_a_matching_recipe_installs_the_shipped_network_and_trains_nothing(shipped, tmp_path):
    c, root, _ = shipped
    m = train_role(c, "perceptual", "synthxray_pacemaker", out_dir=tmp_path / "p", progress=False,
                   networks=root / "networks")
    assert m["shipped"]["set"] == "t"
    src = root / "networks/synthxray/perceptual/model.safetensors"
    assert (tmp_path / "p/model.safetensors").read_bytes() == src.read_bytes()
    assert not (tmp_path / "p/card.json").exists()


def test_a_changed_recipe_trains_as_before(shipped, tmp_path, capsys):
    c, root, _ = shipped
    c2 = deep_merge(c, {"models": {"synthxray": {"perceptual": {"steps": 2}}}})
    m = train_role(c2, "perceptual", "synthxray_pacemaker", out_dir=tmp_path / "p", networks=root / "networks")
    assert "shipped" not in m and m["steps"] == 2
    assert "settings.steps: config 2, shipped 3" in capsys.readouterr().err


def test_a_corrupted_file_is_a_one_line_error_naming_it_and_the_restore_command(shipped, tmp_path):
    c, root, _ = shipped
    bad = root / "bad"
    import shutil

    shutil.copytree(root / "networks", bad)
    w = bad / "synthxray/perceptual/model.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 1
    w.write_bytes(bytes(data))
    with pytest.raises(ShippedNetworkError) as e:
        train_role(c, "perceptual", "synthxray_pacemaker", out_dir=tmp_path / "p", progress=False, networks=bad)
    msg = str(e.value)
    assert "\n" not in msg and str(w) in msg and "does not match its sha256" in msg and "git checkout" in msg
    assert not (tmp_path / "p/metrics.json").exists()


def test_ship_refuses_a_folder_trained_with_another_recipe(shipped, tmp_path):
    c, root, _ = shipped
    c2 = deep_merge(c, {"models": {"synthxray": {"perceptual": {"width": 6}}}})
    with pytest.raises(ConfigError, match=r"not trained with the config's recipe.*width: config 6, trained 4"):
        ship(c2, root / "models", tmp_path / "n", "t", "x")


def test_the_workflow_passes_the_shipped_folder_and_lists_every_network(cfg, tmp_path):
    from vcebench import workflow as wf

    assert wf.networks_dir(deep_merge(cfg, {"networks": None})) == "none"
    assert wf.networks_dir(cfg, tmp_path) == str((tmp_path / cfg["networks"]).resolve())
    nets = wf.trained_networks(cfg)
    assert "resources/models/synthfaces/ddpm/metrics.json" in nets
    assert "resources/models/synthxray/simsiam/metrics.json" in nets
    assert not any("celeba" in n for n in nets)
    (tmp_path / "n/synthxray/ddpm").mkdir(parents=True)
    (tmp_path / "n/synthxray/ddpm/card.json").write_text("{}")
    c = deep_merge(cfg, {"networks": "n"})
    assert wf.shipped_card(c, tmp_path, "synthxray", "ddpm") == [str(tmp_path / "n/synthxray/ddpm/card.json")]
    assert wf.shipped_card(c, tmp_path, "synthxray", "pmf") == []


def test_vcebench_train_installs_a_shipped_network_without_starting_torch(shipped, tmp_path):
    """The default run installs 14 networks: each `vcebench train` is a checked file copy, not a 3-s torch start."""
    import subprocess
    import sys

    import yaml

    c, root, _ = shipped
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(TINY))
    code = ("import sys; from vcebench.cli import main; rc = main(sys.argv[1:]); "
            "print('torch started' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
    from vcebench.config.load import DEFAULT_CONFIG

    out = subprocess.run([sys.executable, "-c", code, "train", "perceptual", "--task", "synthxray_pacemaker",
                          "--out", str(tmp_path / "p"), "--networks", str(root / "networks"), "--no-progress",
                          "--config", str(DEFAULT_CONFIG), "--config", str(tmp_path / "c.yaml")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("no torch"), out.stdout + out.stderr
    src = root / "networks/synthxray/perceptual/model.safetensors"
    assert (tmp_path / "p/model.safetensors").read_bytes() == src.read_bytes()


def test_ship_skips_a_curve_still_being_scored_and_swaps_the_folder_whole(shipped, tmp_path, capsys):
    """A curve.json without its plateau (scoring in progress) gives no card curve, with a note; the shipped
    folder is built aside and swapped, so the old one stays whole until the new one is complete."""
    c, root, _ = shipped
    curves = tmp_path / "curves" / "synthxray" / "perceptual"
    curves.mkdir(parents=True)
    (curves / "curve.json").write_text(json.dumps({"fingerprint": "x", "rows": [{"step": 1}]}))
    out = tmp_path / "networks"
    cards = ship(c, root / "models", out, "t2", "here", curves=tmp_path / "curves")
    assert cards[0]["curve"] is None and "still being scored" in capsys.readouterr().err
    assert read_card(out, "synthxray", "perceptual")["set"] == "t2"
    assert not any(p.name.endswith(".shipping") for p in (out / "synthxray").iterdir())


def test_a_shipped_curve_gets_its_verdict_by_todays_rule(shipped, tmp_path):
    """A curve.json scored before the budget cap existed (its plateau without ``at_cap``) ships with the verdict
    recomputed from its rows: still falling at the cap reads as trained to the cap, not as 'train longer'."""
    c, root, _ = shipped
    curves = tmp_path / "curves" / "synthxray" / "perceptual"
    curves.mkdir(parents=True)
    rows = [{"step": 12800, "f": 3.97, "k": 0.046}, {"step": 25600, "f": 3.34, "k": 0.050}]
    old = {"budget": None, "gain": 0.1, "pairs": []}
    (curves / "curve.json").write_text(json.dumps({
        "dataset": "synthxray", "role": "perceptual", "recipe": {"steps": 25600, "batch_size": 128},
        "scoring": {"n_val": 16, "n_samples": 8}, "rows": rows,
        "plateau": {**old, "key": "f"}, "plateau_samples_kid": {**old, "key": "k"}}))
    cards = ship(c, root / "models", tmp_path / "networks", "t2", "here", curves=tmp_path / "curves")
    curve = cards[0]["curve"]
    assert curve["plateau"]["at_cap"] and curve["plateau"]["budget"] is None
    assert curve["plateau_samples_kid"]["budget"] == 12800  # -8.7 %: flat
    assert "f: no plateau up to the budget cap (25600 steps): trained to the cap" in curve["markdown"]


def test_reshipping_a_set_without_where_keeps_each_cards_own(shipped, tmp_path):
    """A shipped set re-measured and shipped again (a generator replaced, the judges' metrics.json updated)
    keeps where each judge was trained; a folder without a card needs --where."""
    c, root, _ = shipped
    out = tmp_path / "networks"
    assert ship(c, root / "networks", out, "t", None, roles=["synthfaces/perceptual"]) == []
    ship(c, root / "networks", out, "t", None, roles=["synthxray/perceptual"])
    assert read_card(out, "synthxray", "perceptual")["trained"]["where"] == "a test machine"
    with pytest.raises(ConfigError, match="--where"):
        ship(c, root / "models", tmp_path / "other", "t", None)


def test_a_recipe_names_the_weights_it_continues_by_content_not_by_path(tmp_path):
    """``init_from`` is where a checkout keeps the start, ``init_sha256`` what it is: the run's folder and the
    shipped card may name two places for one file (the same recipe), never two files."""
    from vcebench.models.shipping.cards import recipe_differences
    from vcebench.steps.networks import check_recipe

    trained = {"steps": 3, "init_from": "networks/t/ds/pmf/model.safetensors", "init_sha256": "ab" * 32}
    moved = {**trained, "init_from": "networks/t/ds/pmf/init.safetensors"}
    card = {"recipe": {"settings": trained, "data": None}}
    assert recipe_differences(card, {"models": {"ds": {"pmf": moved}}}, "ds", "pmf") == []
    other = {**moved, "init_sha256": "cd" * 32}
    assert recipe_differences(card, {"models": {"ds": {"pmf": other}}}, "ds", "pmf") == [
        f"settings.init_sha256: config {'cd' * 32!r}, shipped {'ab' * 32!r}"]
    (tmp_path / "config.json").write_text(json.dumps({"config": trained}))
    check_recipe({"models": {"ds": {"pmf": moved}}}, "ds", "pmf", tmp_path)
    with pytest.raises(ConfigError, match="init_sha256"):
        check_recipe({"models": {"ds": {"pmf": other}}}, "ds", "pmf", tmp_path)


TINY_PMF = {"unet": {"block_out_channels": [8, 8], "layers_per_block": 1, "norm_num_groups": 4}, "steps": 3,
            "batch_size": 2, "fm_warmup_steps": 1, "lr_schedule": "cosine", "perceptual_weight": 0.0,
            "init_from": None, "init_sha256": None}  # from scratch, whatever the config's faces recipe continues


def _trained_folder(folder, spec, weights: bytes):
    """A stand-in for a trained pmf folder: what ship reads (config.json's recipe, metrics.json) and opaque weights."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"config": spec}))
    (folder / "metrics.json").write_text(json.dumps({"training": {"steps": spec["steps"]}}))
    (folder / "model.safetensors").write_bytes(weights)


def test_a_continued_recipe_ships_its_start_its_history_and_its_budget_in_all(cfg, tmp_path):
    """Shipping a run that continued the set's network (init_from / init_sha256): the start's weights ship beside
    it (start.safetensors, hashed by the card), the card's history names the network it replaced (its card's and
    weights' sha256, its budget), and the budget adds the start's steps, images and FLOPs to its own. A config
    that names the start where it now is installs the new network; a start found nowhere is an error."""
    from vcebench.core.io import sha256
    from vcebench.models.shipping.cards import START, install_shipped

    nets = tmp_path / "networks"
    c1 = deep_merge(cfg, {"models": {"synthfaces": {"pmf": TINY_PMF}}})
    _trained_folder(tmp_path / "m1/synthfaces/pmf", c1["models"]["synthfaces"]["pmf"], b"weights A")
    first = ship(c1, tmp_path / "m1", nets, "t", "machine A", roles=["synthfaces/pmf"])[0]
    assert "history" not in first and first["budget"]["steps"] == 3 and "start" not in first["budget"]
    assert [m["steps"] for m in first["budget"]["flops_per_step"]] == [1, 2]  # flow matching, then MeanFlow
    old_card, sha_a = sha256(nets / "synthfaces/pmf/card.json"), sha256(nets / "synthfaces/pmf/model.safetensors")

    cont = {"init_from": str(nets / "synthfaces/pmf/model.safetensors"), "init_sha256": sha_a, "steps": 2,
            "fm_warmup_steps": 0}
    c2 = deep_merge(c1, {"models": {"synthfaces": {"pmf": cont}}})
    _trained_folder(tmp_path / "m2/synthfaces/pmf", c2["models"]["synthfaces"]["pmf"], b"weights B")
    card = ship(c2, tmp_path / "m2", nets, "t", "machine B", roles=["synthfaces/pmf"])[0]
    assert card["files"][START] == sha_a and (nets / "synthfaces/pmf" / START).read_bytes() == b"weights A"
    [h] = card["history"]
    assert h["card_sha256"] == old_card and h["files"]["model.safetensors"] == sha_a and h["where"] == "machine A"
    b = card["budget"]
    assert b["start"] == first["budget"] and b["total"]["steps"] == 5
    assert b["total"]["images"] == 10 and b["total"]["flops"] == first["budget"]["flops"] + b["flops"]
    md = (nets / "synthfaces/pmf/card.md").read_text()
    assert "in all: **5 steps" in md and old_card in md

    # re-measured and shipped again (same weights): the history does not grow
    again = ship(c2, nets, tmp_path / "again", "t", None, roles=["synthfaces/pmf"])
    assert len(again[0]["history"]) == 1
    # the config names the start where it now lives: the same recipe, installed
    moved = deep_merge(c2, {"models": {"synthfaces": {"pmf": {"init_from": str(nets / "synthfaces/pmf" / START)}}}})
    assert install_shipped(moved, "synthfaces", "pmf", nets, tmp_path / "inst", progress=False) is not None
    # a start whose weights are nowhere: refused before anything is written
    lost = deep_merge(c2, {"models": {"synthfaces": {"pmf": {"init_sha256": "ef" * 32}}}})
    _trained_folder(tmp_path / "m3/synthfaces/pmf", lost["models"]["synthfaces"]["pmf"], b"weights C")
    with pytest.raises(ConfigError, match="none of"):
        ship(lost, tmp_path / "m3", nets, "t", "machine C", roles=["synthfaces/pmf"])
    assert read_card(nets, "synthfaces", "pmf") == card
