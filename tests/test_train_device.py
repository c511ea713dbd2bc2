"""`vcebench train` on the config's device, several processes under torchrun, and the img/s statistics.

No GPU is needed: CUDA is faked where a test checks what the command asks for, and the
several-process run uses the gloo backend on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.ddp_train import tiny_pmf
from vcebench.models.training.distributed import Shard, training_amp

ROOT = Path(__file__).resolve().parent.parent


def test_device_cuda_without_a_gpu_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from vcebench.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tmp_path / "cuda.yaml"
    cfg.write_text("device: cuda\n")
    rc = main(["train", "ddpm", "--task", "synthfaces_smile", "--out", str(tmp_path / "out"), "--networks", "none",
               "--config", str(ROOT / "config/config.yaml"), "--config", str(cfg)])  # the training path
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "device 'cuda'" in err and "no CUDA device" in err
    assert not (tmp_path / "out").exists()  # nothing trained on the CPU instead


def test_train_command_passes_the_config_device(tmp_path, monkeypatch, capsys):
    """`device: cuda` reaches setup_torch (TF32 / cuDNN) and the training shard; nothing forces the CPU."""
    import vcebench.core.runtime as runtime
    import vcebench.steps.train as train_step
    from vcebench.cli import main

    seen = {}

    def fake_setup_torch(threads, device, cuda=None):
        seen["setup"] = (device, cuda)
        return torch.device(device)

    monkeypatch.setattr(runtime, "setup_torch", fake_setup_torch)

    def fake_train_role(cfg, role, task, **kw):
        seen["shard"] = kw["shard"]
        return {"role": role, "training": {"images_per_second": 12.5}}

    monkeypatch.setattr(train_step, "train_role", fake_train_role)
    cfg = tmp_path / "cuda.yaml"
    cfg.write_text("device: cuda\n")
    rc = main(["train", "pmf", "--task", "synthfaces_smile", "--out", str(tmp_path / "out"), "--networks", "none",
               "--config", str(ROOT / "config/config.yaml"), "--config", str(cfg)])  # the training path
    assert rc == 0
    assert seen["setup"][0] == "cuda" and seen["setup"][1]["tf32"] is True
    assert seen["shard"].device == torch.device("cuda") and seen["shard"].world == 1 and seen["shard"].writer
    assert '"images_per_second": 12.5' in capsys.readouterr().out


def test_amp_is_none_on_the_cpu_and_bf16_by_default_on_cuda():
    assert training_amp("bf16", torch.device("cpu")) == "none"
    assert training_amp(None, torch.device("cuda")) == "bf16"
    assert training_amp("none", torch.device("cuda")) == "none"
    with pytest.raises(ValueError, match="amp"):
        training_amp("fp16", torch.device("cuda"))
    assert not Shard().active and Shard(world=2).active and Shard(device=torch.device("cuda")).active


def test_shard_rows_cover_the_global_batch():
    x = torch.arange(8)
    parts = [Shard(rank=r, world=4).take(x)[0] for r in range(4)]
    assert torch.equal(torch.cat(parts), x)
    with pytest.raises(ValueError, match="gpus_per_train"):
        Shard(rank=0, world=3).rows(8)


def test_generative_statistics_report_images_per_second(tmp_path):
    _, stats = tiny_pmf(tmp_path / "a")
    assert stats["images_per_second"] > 0 and stats["device"] == "cpu" and stats["processes"] == 1
    assert stats["amp"] == "none" and "peak_gpu_memory_mib" not in stats


def test_two_torchrun_processes_train_as_one(tmp_path):
    """torchrun --nproc_per_node 2 (gloo) with the same global batch gives the single-process losses and
    weights, rank 0 alone writes checkpoints, and a single-process checkpoint resumes under torchrun.

    Not bit-identical: each rank runs its convolutions on half the batch and DDP averages the two
    half-batch gradients, so sums run in another order (~1e-7 relative per step); Adam's normalised
    steps carry that into the weights (observed: < 3e-5 after 6 steps; asserted: 1e-4)."""
    ref, ref_stats = tiny_pmf(tmp_path / "single")
    with pytest.raises(KeyboardInterrupt):
        tiny_pmf(tmp_path / "resumed", stop_at=3)  # leaves the step-2 checkpoint
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "tests/ddp_train.py"), str(tmp_path / "ddp"), str(tmp_path / "resumed")]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for name, resumed_from in (("ddp", 0), ("resumed", 2)):
        out = torch.load(tmp_path / name / "result.pt", weights_only=True)
        stats = out["stats"]
        assert stats["processes"] == 2 and stats["resumed_from_step"] == resumed_from
        assert stats["loss_curve"] == pytest.approx(ref_stats["loss_curve"], rel=1e-4)
        for k, v in ref.items():
            torch.testing.assert_close(out["shadow"][k], v, rtol=1e-4, atol=1e-4)
        assert not (tmp_path / name / "writer1").exists()  # rank 1 never writes a checkpoint
    assert (tmp_path / "ddp" / "writer0").read_text().split() == ["2", "4"]


def test_dry_run_launches_torchrun_with_the_gpu_resource(tmp_path):
    """`device: cuda`, `gpus_per_train: 2`: the ddpm / pmf jobs run under torchrun and request 2 GPUs."""
    pre = tmp_path / "gpus.yaml"
    pre.write_text("device: cuda\ngpus_per_train: 2\n")
    exe = Path(sys.executable).parent / "snakemake"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([str(exe), "resources/models/synthfaces/pmf/metrics.json", "-n", "-p", "--forceall",
                        "--configfile", str(pre)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = [j for j in r.stdout.split("rule ") if j.startswith("train_model:")]  # not the settings' resolution
    pmf = next(j for j in jobs if "role=pmf" in j)
    assert "gpu=2" in pmf
    assert "torchrun --standalone --nproc_per_node 2 --no-python vcebench train pmf" in pmf
    classifier = next(j for j in jobs if "role=classifier" in j)
    assert "Shell command: vcebench train classifier" in classifier and "gpu=0" in classifier


def test_classifier_loop_reports_images_per_second(tmp_path):
    from vcebench.models.training.loops import train_loop

    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(16, 4)

    def step(_: int) -> torch.Tensor:
        return net(x[torch.randint(0, 16, (8,))]).pow(2).mean()

    hist = train_loop(net, opt, step, 5, tmp_path, 0, {"batch": 8}, "tiny", lr=0.1, progress=False)
    assert hist["images_per_second"] > 0 and len(hist["losses"]) == 5
