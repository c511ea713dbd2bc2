"""`vcebench explain`: shards, file contents, merge checks (toy models; data / model loaders faked)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import vcebench.data
import vcebench.models
from tests.toy import toy_images, toy_models
from vcebench.cli import main
from vcebench.core.io import load_npz
from vcebench.protocol.run_settings import RunSettings
from vcebench.steps.explain import ShardError, explain_shard, merge_shards, shard_ids

FIRE_TOY = {"rho": 0.05, "dilation": 1, "feather": 2, "K": 3, "smoothgrad_n": 4}


class FakeSplit:
    def __init__(self, n: int):
        x, _ = toy_images(n)
        self.images = ((x + 1) * 127.5).round().to(torch.uint8)
        self.sample_ids = torch.arange(100, 100 + 3 * n, 3)  # sorted, unique, not 0..n-1

    def index_of(self, ids):
        return torch.tensor([int((self.sample_ids == i).nonzero()) for i in ids])

    def float_images(self, idx, errors=None):
        return self.images[idx].float() / 127.5 - 1


@pytest.fixture
def fake_world(monkeypatch, cfg):
    split = FakeSplit(10)
    monkeypatch.setattr(vcebench.data, "load_split", lambda cfg, dataset, name, data_dir=None: split, raising=False)
    monkeypatch.setattr(vcebench.data, "eval_split_name", lambda dataset: "test", raising=False)
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda cfg, task, roles, device, model_dir: toy_models(),
                        raising=False)
    task = {**cfg["tasks"]["synthfaces_smile"], "params": {"fire": FIRE_TOY}}
    c = {**cfg, "n_eval": 7, "batch_size": 3, "threads": 1, "tasks": {**cfg["tasks"], "synthfaces_smile": task}}
    return c, split


def test_shard_ids_partition_first_n_eval():
    ids = torch.tensor([9, 3, 7, 1, 5, 11])
    parts = [shard_ids(ids, 5, i, 2) for i in range(2)]
    assert sorted(torch.cat(parts).tolist()) == [1, 3, 5, 7, 9]
    assert parts[0].tolist() == [1, 5, 9]


def test_explain_shards_merge_equal_one_shot(fake_world, tmp_path):
    cfg, split = fake_world
    outs = [tmp_path / f"shards/shard-{i}-of-2.npz" for i in range(2)]
    for i, out in enumerate(outs):
        explain_shard(RunSettings.resolve(cfg, "synthfaces_smile", "fire"), i, 2, out)
    one = tmp_path / "one/shard-0-of-1.npz"
    explain_shard(RunSettings.resolve({**cfg, "batch_size": 7}, "synthfaces_smile", "fire"), 0, 1, one)
    merged = tmp_path / "counterfactuals.npz"
    assert main(["explain", "--merge", *map(str, outs[::-1]), "--out", str(merged)]) == 0
    a, b = load_npz(merged), load_npz(one)
    assert a["sample_id"].tolist() == split.sample_ids[:7].tolist()
    for k in ("sample_id", "cf", "target", "pred", "flipped", "steps", "failed"):
        assert k in a
        np.testing.assert_array_equal(a[k], b[k])  # sharding and batch size do not change any CF
    assert a["cf"].dtype == np.uint8 and a["cf"].shape == (7, 3, 16, 16)
    assert (a["target"] == 1 - a["pred"]).all()
    assert "info_nfe_pmf_fwd" in a and "info_mask_hard" in a
    timing = json.loads((tmp_path / "shards/timing-0-of-2.json").read_text())
    assert timing["n"] == 4 and timing["batch_size"] == 3 and timing["seconds"] > 0
    assert timing["peak_mem_mb"] >= 0 and timing["peak_mem_kind"] == "cpu_peak_rss_increase"
    shard0 = load_npz(outs[0])
    called = {k[len("info_nfe_"):].rpartition("_")[0] for k in shard0 if k.startswith("info_nfe_") and shard0[k].any()}
    assert {"classifier", "pmf"} <= called and set(timing["flops_per_call"]) == called  # every network FiRe called
    assert timing["flops_per_call"]["pmf"]["fwd_flops"] > 0  # the toy's other networks have no matmul / conv


def test_merge_writes_the_explain_runs_costs_as_the_profile(fake_world, tmp_path):
    """`--merge --profile-out`: time per CF over all shards (their seconds summed over their n), the largest
    peak, the per-call FLOPs, which the cost columns multiply with the NFE of every CF."""
    from vcebench.costs.columns import cost_columns

    cfg, _ = fake_world
    outs = [tmp_path / f"shard-{i}-of-2.npz" for i in range(2)]
    for i, out in enumerate(outs):
        explain_shard(RunSettings.resolve(cfg, "synthfaces_smile", "fire"), i, 2, out)
    t = [json.loads((tmp_path / f"timing-{i}-of-2.json").read_text()) for i in range(2)]
    merged, prof = tmp_path / "counterfactuals.npz", tmp_path / "profile.json"
    assert main(["explain", "--merge", *map(str, outs), "--out", str(merged), "--profile-out", str(prof)]) == 0
    p = json.loads(prof.read_text())
    assert p["n"] == 7 and p["method"] == "fire"
    assert p["sec_per_cf"] == pytest.approx((t[0]["seconds"] + t[1]["seconds"]) / 7)
    assert p["peak_mem_mb"] == max(t[0]["peak_mem_mb"], t[1]["peak_mem_mb"])
    assert p["flops_per_call"] == t[0]["flops_per_call"]
    # each shard's provenance record (vcebench.core.provenance) and the first shard's in the profile
    hashes = {r["provenance"]["settings_hash"] for r in (*t, p)}
    assert len(hashes) == 1 and len(next(iter(hashes))) == 64
    assert p["provenance"]["configs"] and p["provenance"]["torch_threads"] >= 1
    costs = cost_columns(merged, p)
    z = load_npz(merged)
    calls = p["flops_per_call"]
    expect = sum(z[f"info_nfe_{net}_fwd"] * calls[net]["fwd_flops"] + z[f"info_nfe_{net}_bwd"] * calls[net]["bwd_flops"]
                 for net in calls).mean() / 1e12
    assert costs["tflops_per_cf"] == pytest.approx(expect) and costs["sec_per_cf"] == p["sec_per_cf"]
    assert "explain" in costs["cost_sources"]["sec_per_cf"] and "explain" in costs["cost_sources"]["peak_mem_mb"]
    # a shard's record that disagrees on a network's FLOPs is not merged silently
    bad = dict(t[1], flops_per_call={"pmf": {"fwd_flops": 1, "bwd_flops": 1, "params": 1}})
    (tmp_path / "timing-1-of-2.json").write_text(json.dumps(bad))
    assert main(["explain", "--merge", *map(str, outs), "--out", str(merged), "--profile-out", str(prof)]) == 2


def test_merge_rejects_missing_and_duplicate(tmp_path):
    def shard(i, n, ids):
        from vcebench.core.io import save_npz

        p = tmp_path / f"d{i}{ids[0]}/shard-{i}-of-{n}.npz"
        save_npz(p, sample_id=np.array(ids, np.int64), cf=np.zeros((len(ids), 1, 2, 2), np.uint8),
                 target=np.zeros(len(ids), np.int64), pred=np.ones(len(ids), np.int64),
                 flipped=np.ones(len(ids), bool), steps=np.ones(len(ids), np.int64), failed=np.zeros(len(ids), bool))
        return p

    with pytest.raises(ShardError, match="missing shard"):
        merge_shards([shard(0, 3, [1, 2])], tmp_path / "m.npz")
    with pytest.raises(ShardError, match="more than one shard"):
        merge_shards([shard(0, 2, [1, 2]), shard(1, 2, [2, 3])], tmp_path / "m.npz")
    assert main(["explain", "--merge", str(shard(0, 2, [5])), "--out", str(tmp_path / "m.npz")]) == 2


def test_explain_config_errors(fake_world, tmp_path):
    cfg, _ = fake_world
    from vcebench.config.load import ConfigError

    with pytest.raises(ConfigError, match="unknown method"):
        RunSettings.resolve(cfg, "synthfaces_smile", "fires")
    bad = {**cfg, "tasks": {**cfg["tasks"], "synthfaces_smile": {**cfg["tasks"]["synthfaces_smile"],
                                                                  "params": {"fire": {"rhoo": 0.1}}}}}
    with pytest.raises(ConfigError, match="rhoo"):
        RunSettings.resolve(bad, "synthfaces_smile", "fire")
    assert main(["explain", "--task", "synthfaces_smile", "--method", "fire", "--shard", "2", "--n-shards", "2"]) == 2


def test_a_flop_counting_failure_keeps_the_counterfactuals(fake_world, tmp_path, monkeypatch, capsys):
    """FLOPs per call are counted after generation: when counting fails (e.g. a network the counter cannot
    trace), the shard and its timing are still written, the error recorded, and the merge gives no FLOPs."""
    import vcebench.costs.columns

    def broken(*a, **k):
        raise RuntimeError("cannot trace this network")

    monkeypatch.setattr(vcebench.costs.columns, "network_call_flops", broken)
    cfg, _ = fake_world
    out = tmp_path / "shard-0-of-1.npz"
    explain_shard(RunSettings.resolve(cfg, "synthfaces_smile", "fire"), 0, 1, out)
    t = json.loads((tmp_path / "timing-0-of-1.json").read_text())
    assert len(load_npz(out)["sample_id"]) == 7 and t["seconds"] > 0
    assert t["flops_per_call"] == {} and "cannot trace" in t["flops_error"]
    assert "FLOPs per network call not counted" in capsys.readouterr().err


def _counting_builds(calls: list):
    """``counting(fail_at)``: a ``RunSettings.build_method`` whose method appends to ``calls`` once per batch it
    generates and raises at call ``fail_at`` (a job killed mid-shard)."""
    real = RunSettings.build_method

    def counting(fail_at=None):
        def build(self):
            method = real(self)

            class Counted:
                name, roles = method.name, method.roles

                def __call__(self, *a, **k):
                    calls.append(1)
                    if fail_at is not None and len(calls) == fail_at:
                        raise RuntimeError("killed")
                    return method(*a, **k)
            return Counted()
        return build
    return counting


def test_an_interrupted_shard_resumes_at_its_last_finished_batch(fake_world, tmp_path, monkeypatch):
    """Each finished batch is saved beside the shard: after a failure in the third batch, the same job generates
    only that batch and writes the counterfactuals an uninterrupted run writes; the saved batches go once the
    shard is written. A batch saved under other settings is generated again. Planted: without the store every
    batch is generated again."""
    cfg, _ = fake_world
    calls = []
    counting = _counting_builds(calls)

    settings = RunSettings.resolve(cfg, "synthfaces_smile", "fire")
    plain = tmp_path / "plain/shard-0-of-1.npz"
    explain_shard(settings, 0, 1, plain)
    out = tmp_path / "run/shard-0-of-1.npz"
    monkeypatch.setattr(RunSettings, "build_method", counting(fail_at=3))
    with pytest.raises(RuntimeError, match="killed"):
        explain_shard(settings, 0, 1, out)
    assert len(list(out.with_suffix(".batches").glob("batch-*.pt"))) == 2 and not out.exists()
    calls.clear()
    monkeypatch.setattr(RunSettings, "build_method", counting())
    explain_shard(settings, 0, 1, out)
    assert len(calls) == 1  # the third batch only
    a, b = load_npz(out), load_npz(plain)
    for k in ("sample_id", "cf", "target", "pred", "flipped", "steps", "failed", "input_hash"):
        np.testing.assert_array_equal(a[k], b[k])
    assert not out.with_suffix(".batches").exists()
    assert json.loads((tmp_path / "run/timing-0-of-1.json").read_text())["resumed_batches"] == 2
    # saved under other settings (another seed): every batch again
    calls.clear()
    monkeypatch.setattr(RunSettings, "build_method", counting(fail_at=3))
    with pytest.raises(RuntimeError):
        explain_shard(settings, 0, 1, out)
    calls.clear()
    monkeypatch.setattr(RunSettings, "build_method", counting())
    explain_shard(RunSettings.resolve({**cfg, "seed": 1}, "synthfaces_smile", "fire"), 0, 1, out)
    assert len(calls) == 3


def test_a_saved_batch_from_other_inputs_or_another_machine_is_made_again(fake_world, tmp_path, monkeypatch):
    """The saved batches are taken only for the inputs they were made from (a re-rendered or edited split differs
    in its bytes: that batch is made again) and on the kind of machine that made them (the key holds the CPU
    kind: every batch again elsewhere). Planted: a saved batch whose inputs differ by one pixel value."""
    import torch

    import vcebench.config.kernels

    cfg, _ = fake_world
    calls = []
    counting = _counting_builds(calls)

    settings = RunSettings.resolve(cfg, "synthfaces_smile", "fire")
    out = tmp_path / "run/shard-0-of-1.npz"

    def interrupted():
        calls.clear()
        monkeypatch.setattr(RunSettings, "build_method", counting(fail_at=3))
        with pytest.raises(RuntimeError, match="killed"):
            explain_shard(settings, 0, 1, out)
        calls.clear()
        monkeypatch.setattr(RunSettings, "build_method", counting())

    interrupted()
    first = out.with_suffix(".batches") / "batch-0000000.pt"
    saved = torch.load(first, weights_only=True)
    saved["inputs_u8"][0, 0, 0, 0] ^= 1  # the split's bytes changed by one value
    torch.save(saved, first)
    explain_shard(settings, 0, 1, out)
    assert len(calls) == 2  # the edited batch and the unfinished one
    out.unlink()
    interrupted()
    monkeypatch.setattr(vcebench.config.kernels, "cpu_kind", lambda: "OtherVendor Other CPU")
    explain_shard(settings, 0, 1, out)
    assert len(calls) == 3


def test_the_batch_key_reads_every_weight_of_every_network():
    """The key of a shard's saved batches hashes every network's weights, 0-dim buffers (BatchNorm's batch counter)
    and any dtype included: a changed weight changes it."""
    from types import SimpleNamespace

    from vcebench.steps.batches import batch_key

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    models = SimpleNamespace(names={"classifier": "c"}, classifier=net)
    settings = SimpleNamespace(settings_sha256="s", seed=0, batch_size=4)
    a = batch_key(settings, models)
    assert a == batch_key(settings, models)
    with torch.no_grad():
        net[0].weight[0, 0, 0, 0] += 1
    assert batch_key(settings, models) != a
    models.classifier = net.to(torch.bfloat16)
    assert len(batch_key(settings, models)) == 64
