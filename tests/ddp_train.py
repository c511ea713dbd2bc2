"""A tiny pixel-MeanFlow training run, in one process or as one rank of ``torchrun`` (gloo, CPU).

``python -m torch.distributed.run --standalone --nproc_per_node 2 tests/ddp_train.py OUT...``
trains the network of :func:`tiny_pmf` for ``CFG['steps']`` steps in each folder ``OUT`` in turn
(resuming a checkpoint found there); rank 0 saves the EMA weights and statistics to
``OUT/result.pt``. Every checkpoint write appends its step to ``OUT/writer<rank>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tests.test_models_generative import UNET, _images
from vcebench.models.generative.meanflow import meanflow_loss
from vcebench.models.generative.pmf import build_pmf
from vcebench.models.training import generative as training
from vcebench.models.training.distributed import Shard, training_processes

CFG = {"unet": UNET, "jvp": "fd", "steps": 6, "batch_size": 8, "lr": 2e-3, "warmup_steps": 1, "ema_decay": 0.9,
       "grad_clip": 1.0, "checkpoint_every": 2}


def tiny_pmf(out: Path, shard: Shard | None = None, stop_at: int | None = None) -> tuple[dict, dict]:
    """Train the tiny pmf into ``out``; returns (EMA weights, statistics with the per-step losses)."""
    torch.manual_seed(0)
    pmf = build_pmf(CFG, 3, 8)
    rank = shard.rank if shard else 0
    save = training.save_resume_state

    def logged_save(path, state):
        with open(Path(out) / f"writer{rank}", "a") as f:
            f.write(f"{int(state['step'])}\n")
        save(path, state)

    def loss_fn(m, x, g, step, shard=None):
        if step == stop_at:
            raise KeyboardInterrupt
        loss, per_sample = meanflow_loss(m, x, g, CFG, step < 2, shard=shard)
        return loss, per_sample.mean()

    Path(out).mkdir(parents=True, exist_ok=True)
    training.save_resume_state = logged_save
    try:
        shadow, stats = training.train_generative(pmf, loss_fn, CFG, _images(24), Path(out), 0, "pmf",
                                                  progress=False, shard=shard)
    finally:
        training.save_resume_state = save
    return shadow, stats


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    with training_processes("cpu") as shard:
        for out in map(Path, sys.argv[1:]):
            shadow, stats = tiny_pmf(out, shard)
            if shard.writer:
                torch.save({"shadow": shadow, "stats": stats}, out / "result.pt")
