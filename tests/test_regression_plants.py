"""Issue #60's three plants end to end on a tiny run (vcebench/report/plants.py; scripts/plant_regression.py does
the same on a real regression run): a row's counterfactuals file is degraded, `vcebench evaluate` scores it
again (stand-in networks: a brightness classifier and an oracle that reads the top half of the image only), and
the paired check against the row's accepted record must fail naming the planted cell; the untouched file,
evaluated again, must pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import vcebench.models
from vcebench import registry
from vcebench.cli import main
from vcebench.core.io import input_fingerprint, save_npz, to_uint8
from vcebench.costs.standins import standin_models
from vcebench.report import paired, plants
from vcebench.report.regression import CPU_DRIFT, PAIRED_MAX_LOST

TASK = "synthfaces_smile"
N = 64


class TopHalfOracle(nn.Module):
    """The query attribute's logit from the mean of the image's top half; every other attribute's 0."""

    def __init__(self, names: list[str], query: str, threshold: float):
        super().__init__()
        self.attribute_names, self.q, self.threshold = list(names), list(names).index(query), threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(x), len(self.attribute_names))
        out[:, self.q] = 40.0 * (x[:, :, : x.shape[2] // 2].flatten(1).mean(1) - self.threshold)
        return out


class EdgeFeatures(nn.Module):
    """16 FID features: the mean absolute response of 4 fixed random 3 x 3 filters per image quadrant (few
    dimensions, so that FID on 64 inputs is well conditioned; pixel noise raises them)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)
        self.conv.weight.data = torch.randn(self.conv.weight.shape, generator=torch.Generator().manual_seed(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.adaptive_avg_pool2d(self.conv(x).abs(), 2).flatten(1)


def _row(x: torch.Tensor, cf: torch.Tensor, ids: torch.Tensor, classifier: nn.Module) -> dict[str, np.ndarray]:
    """A counterfactuals file (docs/internals.md) of the CFs ``cf`` of the inputs ``x``."""
    xq, cq = to_uint8(x), to_uint8(cf)
    with torch.no_grad():
        pred = classifier(torch.from_numpy(xq).float() / 127.5 - 1).argmax(1)
        now = classifier(torch.from_numpy(cq).float() / 127.5 - 1).argmax(1)
    return {"sample_id": ids.numpy(), "cf": cq, "target": (1 - pred).numpy(), "pred": pred.numpy(),
            "flipped": (now != pred).numpy(), "steps": np.ones(len(x), np.int64), "failed": np.zeros(len(x), bool),
            "input_hash": input_fingerprint(xq, cq)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(folder, evaluate(name, file) -> its record, the rows' files): the rows ``fire`` (whole image brightened
    or darkened), ``pixel_attack`` (the bottom half only: the classifier flips, the oracle not) and ``input``."""
    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.data import load_split

    d = tmp_path_factory.mktemp("plants")
    (d / "small.yaml").write_text("threads: 1\ndatasets:\n  synthfaces: {n_identities: 40, images_per_identity: 8}\n"
                                  "metrics:\n  sfid_seeds: [0, 1]\n  batch_size: 32\n")
    config = ["--config", "config/config.yaml", "--config", str(d / "small.yaml")]
    cfg = load_config(config[1::2])
    split = load_split(cfg, "synthfaces", "test")
    x, ids = split.float_images(slice(0, N)), split.sample_ids[:N]
    models = standin_models(split.attribute_names, 3, threshold=float(x.flatten(1).mean(1).median()))
    top = float(x[:, :, :16].flatten(1).mean(1).median())
    models.oracle = TopHalfOracle(split.attribute_names, get_task(cfg, TASK).attribute, top).eval()
    models.fid_features = EdgeFeatures().eval()
    with torch.no_grad():
        sign = (1 - 2 * models.classifier(x).argmax(1)).float().view(N, 1, 1, 1)
    half = torch.zeros_like(x)
    half[:, :, 16:] = 1.0
    rows = {"fire": _row(x, (x + 0.6 * sign).clamp(-1, 1), ids, models.classifier),
            "pixel_attack": _row(x, (x + 1.6 * sign * half).clamp(-1, 1), ids, models.classifier),
            "input": _row(x, x, ids, models.classifier)}
    mp = pytest.MonkeyPatch()
    mp.setattr(vcebench.models, "load_task_models", lambda *a, **k: models, raising=False)
    assert main(["evaluate", "--task", TASK, "--reference", "--out", str(d / "fid_ref.npz"), "--no-progress",
                 *config]) == 0

    def evaluate(name: str, row: dict, only: tuple[str, ...] = ()) -> dict:
        save_npz(d / name / "counterfactuals.npz", **row)
        out = d / name / "metrics.json"
        assert main(["evaluate", "--task", TASK, "--method", "fire", "--cfs", str(d / name / "counterfactuals.npz"),
                     "--fid-ref", str(d / "fid_ref.npz"), "--out", str(out), "--no-progress",
                     *[a for o in only for a in ("--only", o)], *config]) == 0
        return paired.read_records(d / name / paired.SAMPLES_FILE) if not only else out

    yield d, evaluate, rows
    mp.undo()


@pytest.fixture(scope="module")
def accepted(tiny):
    """The fire row's record as `vcebench report accept` keeps it, and the originals' feature rows."""
    d, evaluate, rows = tiny
    return paired.trim_records(evaluate("reference", rows["fire"])), paired.read_originals(d / "fid_ref.npz")


def check(accepted, cur: dict) -> list[tuple[str, str]]:
    ref, orig = accepted
    fails = paired.paired_check(TASK, {"fire": ref}, {"fire": cur}, (orig, orig), registry.column_directions(),
                                {"fire": list(paired.FEATURE_METRICS)}, CPU_DRIFT["rel"], PAIRED_MAX_LOST,
                                [0, 1])[1]
    return sorted((f["method"], f["metric"]) for f in fails)


def test_the_untouched_file_evaluated_again_passes(tiny, accepted):
    _, evaluate, rows = tiny
    assert check(accepted, evaluate("control", rows["fire"])) == []


def test_unedited_inputs_in_place_of_a_tenth_of_the_flips_fail_fr(tiny, accepted):
    _, evaluate, rows = tiny
    planted, ids = plants.unedited(rows["fire"], rows["input"])
    flipped = int(rows["fire"]["flipped"].sum())
    assert len(ids) == int(np.ceil(0.1 * flipped)) >= 2
    assert not planted["flipped"][np.isin(planted["sample_id"], ids)].any()
    fails = check(accepted, evaluate("unedited", planted))
    assert ("fire", "FR") in fails and ("fire", "FR_oracle") in fails


def test_the_pixel_attacks_cfs_in_place_of_a_tenth_of_the_flips_fail_fr_oracle_not_fr(tiny, accepted):
    """The adversarial drift: the classifier still flips every planted input (FR unchanged), the oracle does not."""
    _, evaluate, rows = tiny
    planted, ids = plants.attack(rows["fire"], rows["pixel_attack"])
    assert len(ids) >= 2 and planted["flipped"].sum() == rows["fire"]["flipped"].sum()
    cur = evaluate("attack", planted)
    assert np.nansum(cur["q/FR"]) == np.nansum(accepted[0]["q/FR"])
    fails = check(accepted, cur)
    assert ("fire", "FR_oracle") in fails and ("fire", "FR") not in fails


def test_noise_that_raises_fid_by_thirty_percent_fails_fid(tiny, accepted):
    """The realism plant: its strength set by the rule on the planted file (FID by `vcebench evaluate --only
    FID`), then the whole row evaluated again; FID fails, naming the row."""
    import json

    _, evaluate, rows = tiny

    def fid(sigma: float) -> float:
        out = evaluate("trial", plants.noised(rows["fire"], rows["input"], sigma) if sigma else rows["fire"],
                       only=("FID",))
        return json.loads(out.read_text())["metrics"]["FID"]

    sigma, before, after = plants.strength(fid, 1.3, steps=4)
    assert after >= 1.3 * before and sigma > 0
    fails = check(accepted, evaluate("realism", plants.noised(rows["fire"], rows["input"], sigma)))
    assert ("fire", "FID") in fails


def test_the_strength_rule_finds_the_smallest_sigma_reaching_the_factor():
    sigma, base, v = plants.strength(lambda s: 1.0 + s * s, 1.3, steps=12)
    assert base == 1.0 and v >= 1.3 and sigma == pytest.approx(np.sqrt(0.3), abs=1e-3)
    with pytest.raises(ValueError, match="does not raise"):
        plants.strength(lambda s: 1.0, 1.3)


def test_a_plant_keeps_the_file_one_evaluate_accepts(tiny):
    """Donor rows give image, flags and input fingerprint; a donor without the row's inputs is refused."""
    _, _, rows = tiny
    planted, ids = plants.unedited(rows["fire"], rows["input"])
    at = np.isin(planted["sample_id"], ids)
    assert (planted["cf"][at] == rows["input"]["cf"][at]).all()
    assert (planted["cf"][~at] == rows["fire"]["cf"][~at]).all()
    assert (planted["input_hash"] == input_fingerprint(rows["input"]["cf"], planted["cf"])).all()
    noisy = plants.noised(rows["fire"], rows["input"], 4.0)
    assert (noisy["input_hash"] == input_fingerprint(rows["input"]["cf"], noisy["cf"])).all()
    short = {k: v[1:] for k, v in rows["input"].items()}
    with pytest.raises(ValueError, match="lacks 1 of the planted row's inputs"):
        plants.unedited(rows["fire"], short)
