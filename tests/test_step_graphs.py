"""Generative training steps replayed as CUDA graphs (vcebench.models.training.step_graphs): the same training as eager
steps on the same GPU, up to floating-point order; one graph per loss mode. The GPU tests run where a GPU is
(scripts/gpu_networks.py runs them before it trains); the CPU ones everywhere."""

import contextlib

import pytest
import torch

from vcebench.core.errors import ConfigError
from vcebench.models.generative.ddpm import train_ddpm
from vcebench.models.generative.pmf import train_pmf
from vcebench.models.training import distributed
from vcebench.models.training.distributed import Shard, start_processes
from vcebench.models.training.generative import EMA
from vcebench.models.training.step_graphs import GraphedSteps

UNET = {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4}
DDPM = {"unet": UNET, "num_train_timesteps": 50, "steps": 24, "batch_size": 8, "lr": 0.002, "warmup_steps": 5,
        "grad_clip": 1.0, "seed": 1, "sample_steps": 5, "n_samples": 4, "eval_images": 8, "checkpoint_every": 10,
        "lr_schedule": "wsd", "decay_fraction": 0.25, "amp": "none"}
PMF = {"unet": UNET, "steps": 24, "batch_size": 8, "lr": 0.002, "warmup_steps": 5, "grad_clip": 1.0, "seed": 2,
       "jvp": "fd", "precond": "edm", "fm_warmup_steps": 10, "n_samples": 4, "eval_images": 8,
       "checkpoint_every": 10, "amp": "none"}
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def _images():
    g = torch.Generator().manual_seed(0)
    return (torch.rand(64, 3, 16, 16, generator=g) * 255).to(torch.uint8)


def _rel(a: dict, b: dict) -> float:
    num = sum(float((a[k].float() - b[k].float()).pow(2).sum()) for k in a)
    den = sum(float(a[k].float().pow(2).sum()) for k in a)
    return (num / den) ** 0.5


def test_graphs_are_for_one_process_on_a_gpu(monkeypatch):
    assert start_processes("cpu", cuda_graphs=True).cuda_graphs is False  # a CPU run has nothing to capture
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    with pytest.raises(ConfigError, match="gpus_per_train: 1"):
        start_processes("cuda", cuda_graphs=True)
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedSteps(torch.nn.Linear(2, 2), torch.optim.AdamW(torch.nn.Linear(2, 2).parameters()), None,
                     lambda m, d, k: d[0].sum(), None, torch.device("cpu"), contextlib.nullcontext)


def test_ema_update_with_tensors_is_the_update():
    model = torch.nn.Linear(3, 2)
    a, b = EMA(model, 0.99), EMA(model, 0.99)
    with torch.no_grad():
        model.weight.add_(1.0)
    a.update(model, 5)
    d = a.decay_at(5)
    b.update_with(model, torch.tensor(d), torch.tensor(1 - d))
    assert d == pytest.approx(6 / 15)
    for k in a.shadow:
        torch.testing.assert_close(a.shadow[k], b.shadow[k], rtol=1e-6, atol=1e-7)


@gpu
@pytest.mark.parametrize("role", ["ddpm", "pmf"])
def test_graphed_training_is_eager_training(tmp_path, role):
    """The same recipe, seed and batches, eager and replayed, on one GPU: the same losses and EMA weights up to
    floating-point order; the pmf captures two graphs (flow matching, then MeanFlow)."""
    train, cfg = (train_ddpm, DDPM) if role == "ddpm" else (train_pmf, PMF)
    dev = torch.device("cuda")
    runs = {}
    for name, graphs in (("eager", False), ("graphs", True)):
        out = tmp_path / name
        m = train(cfg, _images(), out, 3, progress=False, shard=Shard(device=dev, cuda_graphs=graphs))
        runs[name] = (m["training"], out)
    eager, graphed = runs["eager"][0], runs["graphs"][0]
    assert graphed["cuda_graphs"] == (1 if role == "ddpm" else 2) and "cuda_graphs" not in eager
    torch.testing.assert_close(torch.tensor(graphed["loss_curve"]), torch.tensor(eager["loss_curve"]),
                               rtol=2e-3, atol=1e-4)
    from safetensors.torch import load_file

    weights = "unet/diffusion_pytorch_model.safetensors" if role == "ddpm" else "model.safetensors"
    a, b = (load_file(str(runs[n][1] / weights)) for n in ("eager", "graphs"))
    assert _rel(a, b) < 1e-3


@gpu
def test_a_graphed_runs_trunk_goes_on_on_the_cpu(tmp_path):
    """A state written while replaying graphs holds an eager optimiser state (a float rate, not capturable):
    the GPU run's shared wsd trunk is continued by a longer budget on the CPU."""
    cfg = {**DDPM, "steps": 12}  # decay from step 9: the trunk state at step 9
    train_ddpm(cfg, _images(), tmp_path / "gpu", 3, progress=False, trunk_dir=tmp_path / "trunk",
               shard=Shard(device=torch.device("cuda"), cuda_graphs=True))
    (state_path,) = (tmp_path / "trunk").glob("*/step-000009.pt")
    state = torch.load(state_path, map_location="cpu", weights_only=True)
    assert all(g["capturable"] is False and isinstance(g["lr"], float) for g in state["opt"]["param_groups"])
    m = train_ddpm({**cfg, "steps": 16}, _images(), tmp_path / "cpu", 3, progress=False,
                   trunk_dir=tmp_path / "trunk")
    assert m["training"]["resumed_from_step"] == 9
