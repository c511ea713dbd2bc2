"""Training curves (vcebench/steps/curves.py): snapshots of one run, and the plateau rule."""

from __future__ import annotations

import torch
from safetensors.torch import load_file
from torch import nn

from vcebench.models.training import snapshot_path, train_generative
from vcebench.steps.curves import plateau


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
                                                              "pairs": []}


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
