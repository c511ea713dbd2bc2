"""`vcebench evaluate` end to end on a small synthetic split with tiny stand-in networks."""

import json

import numpy as np
import pytest
import torch

import vcebench.models
from vcebench.cli import main
from vcebench.core.io import load_npz, save_npz
from vcebench.costs.standins import fake_counterfactuals, standin_models

TASK = "synthfaces_smile"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small synthfaces config, its test split and a counterfactuals.npz for 64 test samples."""
    from vcebench.config.load import load_config
    from vcebench.data import load_split

    d = tmp_path_factory.mktemp("evaluate")
    cfg_path = d / "small.yaml"
    cfg_path.write_text("threads: 1\ndatasets:\n  synthfaces: {n_identities: 40, images_per_identity: 8}\n"
                        "metrics:\n  sfid_seeds: [0, 1]\n  batch_size: 24\n")
    config = ["--config", "config/config.yaml", "--config", str(cfg_path)]
    cfg = load_config(config[1::2])
    split = load_split(cfg, "synthfaces", "test")
    x = split.float_images(slice(0, 64))
    models = standin_models(split.attribute_names, 3, threshold=float(x.flatten(1).mean(1).median()))
    fake_counterfactuals(x, split.sample_ids[:64], models.classifier, d / "counterfactuals.npz")
    return d, config, models


@pytest.fixture
def patched(small, monkeypatch):
    d, config, models = small
    calls = []

    def fake_load(cfg, task, roles=(), device="cpu", model_dir="resources/models"):
        calls.append(tuple(roles))
        return models

    monkeypatch.setattr(vcebench.models, "load_task_models", fake_load, raising=False)
    return d, config, calls


def test_reference_then_evaluate(patched):
    d, config, calls = patched
    ref, out = d / "fid_ref.npz", d / "metrics.json"
    assert main(["evaluate", "--task", TASK, "--reference", "--out", str(ref), "--no-progress", *config]) == 0
    assert calls[-1] == ("fid_features",)
    z = load_npz(ref)
    assert z["features"].shape[1] == 64 and int(z["n"]) == len(z["sample_id"])
    assert main(["evaluate", "--task", TASK, "--method", "fire", "--cfs", str(d / "counterfactuals.npz"),
                 "--fid-ref", str(ref), "--out", str(out), "--no-progress", *config]) == 0
    assert set(calls[-1]) == {"classifier", "fid_features", "identity", "oracle"}
    res = json.loads(out.read_text())
    m = res["metrics"]
    for k in ("FID", "sFID", "sFID_std", "FVA", "FS", "MNAC", "CD", "COUT", "FR", "L1", "GT_L1", "GT_L1_region",
              "GT_L1_input", "GT_precision", "GT_recall", "FR_oracle"):
        assert m[k] is not None and np.isfinite(m[k]), k
    cfz = load_npz(d / "counterfactuals.npz")
    n_ok = int(cfz["flipped"].sum())
    assert 2 <= n_ok < 64
    assert res["n"]["FR"] == 64 and res["n"]["FID"] == n_ok and res["n"]["FVA"] == n_ok
    assert m["FR"] == pytest.approx(100 * n_ok / 64)
    assert res["subsets"]["COUT"] == "correct" and res["subsets"]["FID"] == "successful"
    assert res["models"]["fid_features"].startswith("standin-fid_features")
    assert res["seeds"] == [0, 1] and res["checks"]["flipped_disagreements"] == 0
    assert res["higher_is_better"]["FID"] is False and res["higher_is_better"]["COUT"] is True
    _check_samples(d / "samples.npz", res, cfz, n_ok)
    prov = res["provenance"]  # vcebench.core.provenance: the code, the inputs and the machine of this row
    assert list(prov["configs"]) == config[1::2] and len(prov["settings_hash"]) == 64
    assert prov["git"]["commit"] or prov["git"]["reason"]
    assert prov["torch"] == torch.__version__ and prov["kernels"]["cpu"] and prov["data_files"] == {}
    # The same FID without the reference (originals' features computed on the fly).
    out2 = d / "metrics_noref.json"
    assert main(["evaluate", "--task", TASK, "--method", "fire", "--cfs", str(d / "counterfactuals.npz"),
                 "--out", str(out2), "--only", "FID", "--no-progress", *config]) == 0
    assert json.loads(out2.read_text())["metrics"]["FID"] == pytest.approx(m["FID"], rel=1e-4)


def _check_samples(path, res, cfz, n_ok):
    """samples.npz beside metrics.json: each mean column is the mean of its q/ (FR: 100 x), the replicates' rows
    share the count matrix of the run's bootstrap settings, FID's feature rows are the successful CFs'."""
    from metrics.bootstrap import Resamples
    from metrics.records import counts_sha256, read_samples

    rec = read_samples(path)
    ids = np.sort(cfz["sample_id"]).astype(np.int64)
    assert (rec.ids == ids).all()
    for col in ("FR", "FR_oracle", "FVA", "L1", "MNAC", "COUT", "GT_L1", "GT_L1_region", "GT_recall"):
        scale = 100.0 if col in ("FR", "FR_oracle", "FVA") else 1.0
        assert scale * np.nanmean(rec.q[col]) == pytest.approx(res["metrics"][col], rel=1e-6), col
        assert rec.in_subset(col).sum() == res["n"][col], col
    assert set(rec.q["FR"][np.isfinite(rec.q["FR"])]) <= {0.0, 1.0} and rec.subset["FVA"].sum() == n_ok
    assert "FID" not in rec.q and "CD" not in rec.q  # not means over inputs: replicates only
    for col in ("FID", "sFID", "KID", "CD", "FR", "FVA"):
        assert len(rec.boot[col]) == (res["bootstrap"]["feature_resamples"] if col in ("FID", "sFID", "KID")
                                      else res["bootstrap"]["resamples"]), col
    lo, hi = res["intervals"]["FR"]
    assert np.quantile(rec.boot["FR"], 0.025) == pytest.approx(lo)
    (feats,) = rec.features.values()
    assert feats.shape == (64, 64) and np.isfinite(feats).all(1).sum() == n_ok
    b = res["bootstrap"]
    draws = Resamples.draw(ids, max(b["resamples"], b["feature_resamples"]), b["seed"])
    assert rec.boot_counts_sha256 == counts_sha256(draws)


def test_evaluate_rejects_foreign_sample_ids(patched, capsys):
    d, config, _ = patched
    z = load_npz(d / "counterfactuals.npz")
    z["sample_id"] = z["sample_id"].copy()
    z["sample_id"][0] = 10**9  # not in the evaluation split
    bad = d / "bad.npz"
    save_npz(bad, **z)
    assert main(["evaluate", "--task", TASK, "--method", "fire", "--cfs", str(bad), "--out", str(d / "x.json"),
                 "--only", "FR", "--no-progress", *config]) == 2
    assert "1000000000" in capsys.readouterr().err


def test_evaluate_reference_missing_ids(patched, capsys):
    d, config, _ = patched
    z = load_npz(d / "counterfactuals.npz")
    ref = d / "small_ref.npz"
    from metrics.fid import FIDReference

    FIDReference(z["sample_id"][:10], np.zeros((10, 64), np.float32), "standin-fid_features-seed0").save(ref)
    assert main(["evaluate", "--task", TASK, "--method", "fire", "--cfs", str(d / "counterfactuals.npz"),
                 "--fid-ref", str(ref), "--out", str(d / "y.json"), "--only", "FID", "--no-progress",
                 *config]) == 2
    assert "lacks 54 of the explained sample ids" in capsys.readouterr().err


def test_counterfactual_file_checks(tmp_path):
    from metrics import MetricError
    from metrics.evaluation import load_counterfactuals

    save_npz(tmp_path / "a.npz", sample_id=np.array([1, 1]), cf=np.zeros((2, 3, 4, 4), np.uint8),
             target=np.array([0, 1]))
    with pytest.raises(MetricError, match="duplicate sample ids"):
        load_counterfactuals(tmp_path / "a.npz")
    save_npz(tmp_path / "b.npz", sample_id=np.array([1, 2]), cf=torch.zeros(2, 3, 4, 4), target=np.array([0, 1]))
    with pytest.raises(MetricError, match="must be uint8"):
        load_counterfactuals(tmp_path / "b.npz")


def test_do_nothing_row_metrics(patched, small):
    """The `input` method (the input as its CF) through explain's batch loop and evaluate: FR = 0, L1 = 0,
    FR_oracle = the share of inputs whose oracle query bit disagrees with the classifier's prediction."""
    from pathlib import Path

    import methods
    from vcebench.config.load import load_config
    from vcebench.data import load_split
    from vcebench.protocol.run_settings import RunSettings
    from vcebench.steps.explain import generate

    d, config, _ = patched
    _, _, models = small
    cfg = load_config(config[1::2])
    split = load_split(cfg, "synthfaces", "test")
    ids = split.sample_ids[:40]
    generate(methods.get_method("input", {}), lambda idx: split.float_images(idx), ids, models,
             RunSettings.resolve({**cfg, "batch_size": 16}, TASK, "input"), Path(d / "input.npz"))
    z = load_npz(d / "input.npz")
    assert not z["flipped"].any() and (z["info_nfe_classifier_fwd"] == 1).all()
    out = d / "input_metrics.json"
    assert main(["evaluate", "--task", TASK, "--method", "input", "--cfs", str(d / "input.npz"), "--out", str(out),
                 "--no-progress", *config]) == 0
    res = json.loads(out.read_text())
    m = res["metrics"]
    assert m["FR"] == 0.0 and m["L1"] == 0.0 and m["FID"] is None and "FID" in res["skipped"]
    x = split.float_images(slice(0, 40))
    with torch.no_grad():
        pred = models.classifier(x).argmax(1)
        q = list(models.oracle.attribute_names).index("Smiling")
        oracle_bit = (models.oracle(x)[:, q] > 0).long()
    assert m["FR_oracle"] == pytest.approx(100 * float((oracle_bit != pred).float().mean()))
    assert res["intervals"]["L1"] == [0.0, 0.0] and res["guidance"] is None
