"""The training loop of the two generative roles (``ddpm``, ``pmf``): :func:`train_generative`.

A :class:`GenerativeLoss` on batches drawn with ``rng.step_generator(seed, step)``, AdamW with linear warm-up and
cosine or ``wsd`` decay, EMA weights, gradient clipping, channels-last; on a GPU optionally replayed as CUDA graphs
(``vcebench.models.training.step_graphs``). It resumes from an atomic checkpoint
(``vcebench.models.checkpoints``) only when it was written with the same settings, so a run interrupted at step k
and resumed takes exactly the same batches and updates as an uninterrupted one (on the CPU, at a fixed thread
count). The small networks' loop: ``vcebench.models.training.loops``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ...core.io import from_uint8, sha256
from ...core.rng import step_generator
from ..checkpoints import (
    data_fingerprint,
    fingerprint,
    load_resume_state,
    save_resume_state,
    save_snapshot,
)
from .distributed import Shard, args_of
from .loops import throughput
from .settings import TRAIN_DEFAULTS, RoleConfigError, require


def initial_weights(settings: dict, role: str) -> dict[str, Tensor] | None:
    """The weights a run of ``role`` starts from: None (the seed's initialisation) unless ``init_from`` is set,
    then that safetensors file, read only after its sha256 equals ``init_sha256`` (required: the recipe names
    the exact weights it continues, so a file changed since, e.g. a network shipped over it, is refused)."""
    path, want = settings.get("init_from"), settings.get("init_sha256")
    if path is None:
        if want is not None:
            raise RoleConfigError(f"`models.<dataset>.{role}.init_sha256` is set without `init_from`")
        return None
    from safetensors.torch import load_file

    p = Path(str(path))
    if not p.is_file():
        raise RoleConfigError(f"`models.<dataset>.{role}.init_from`: no file {p}")
    if want is None:
        raise RoleConfigError(f"`models.<dataset>.{role}.init_from` needs `init_sha256` (the weights' sha256, "
                              f"`sha256sum {p}`)")
    got = sha256(p)
    if got != str(want).lower():
        raise RoleConfigError(f"`models.<dataset>.{role}.init_from`: {p} has sha256 {got}, the recipe continues "
                              f"{want} (a file written over since? `git log -- {p}` finds the one it names)")
    return load_file(str(p))


def batch_at(images: Tensor, batch_size: int, g: torch.Generator, hflip: bool) -> Tensor:
    idx = torch.randint(0, images.shape[0], (batch_size,), generator=g)
    x = from_uint8(images[idx])
    if hflip:
        flip = torch.rand(batch_size, generator=g) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return x


class EMA:
    """Exponential moving average of parameters with the usual ``(1 + n) / (10 + n)`` warm-up."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = float(decay)
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def decay_at(self, step: int) -> float:
        """The decay of the update after optimiser step ``step`` (0-based)."""
        return min(self.decay, (1 + step) / (10 + step))

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        d = self.decay_at(step)
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].mul_(d).add_(v.detach(), alpha=1 - d)
            else:
                self.shadow[k].copy_(v)

    @torch.no_grad()
    def update_with(self, model: nn.Module, decay: Tensor, keep: Tensor) -> None:
        """The same update with the decay and ``keep = 1 - decay`` as device tensors (a captured CUDA graph
        reads them at each replay; ``step_graphs``)."""
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].mul_(decay).add_(v.detach() * keep)
            else:
                self.shadow[k].copy_(v)


@dataclasses.dataclass(frozen=True)
class GenerativeLoss:
    """A generative objective, split where a CUDA graph needs it (``step_graphs``):

    - ``draw(x, g, step)``: the step's randomness for the whole CPU batch ``x`` from the step's generator
      ``g``, on the CPU (the same numbers on any device, any number of processes): a tuple of tensors whose
      first dimension is the batch, ``x`` (or what is computed from it) among them;
    - ``compute(model, drawn, mode)``: the loss on the device, or (that loss, the number to log), e.g. when an
      adaptive weight makes the minimised loss uninformative;
    - ``mode(step)``: steps whose computation differs (the pmf's flow-matching warm start, then MeanFlow)
      have different modes; one mode, one captured graph;
    - ``mode_names``: what each mode is, for a reader (a training budget's FLOPs per step of each mode).
    """

    draw: Callable[[Tensor, torch.Generator, int], tuple[Tensor, ...]]
    compute: Callable[[nn.Module, tuple[Tensor, ...], Hashable], Tensor | tuple[Tensor, Tensor]]
    mode: Callable[[int], Hashable] = lambda step: 0
    mode_names: Mapping[Hashable, str] = dataclasses.field(default_factory=dict)

    def __call__(self, model: nn.Module, x: Tensor, g: torch.Generator, step: int,
                 shard: Shard | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """The loss of one step, eagerly: draw, move ``shard``'s rows to its device (when given), compute."""
        drawn = self.draw(x, g, step)
        if shard is not None:
            drawn = shard.take(*drawn)
        return self.compute(model, drawn, self.mode(step))


def decay_start(total: int, decay_fraction: float) -> int:
    """The first step of a ``wsd`` schedule's decay: the last ``decay_fraction`` of ``total`` steps decay."""
    return int(total) - int(round(float(decay_fraction) * int(total)))


def lr_at(step: int, base: float, warmup: int, total: int, schedule: str = "cosine",
          decay_fraction: float = 0.2) -> float:
    """The learning rate of optimiser step ``step`` (0-based) of a ``total``-step run: linear warm-up over
    ``warmup`` steps, then to 10 % of ``base`` at the end,

    - ``cosine``: a cosine decay over the whole run after the warm-up;
    - ``wsd`` (warm-up, stable, decay; Hägele et al. 2024, "Scaling laws and compute-optimal training beyond
      fixed training durations"): ``base`` until :func:`decay_start`, then linear over the last
      ``decay_fraction`` of the steps. Up to the decay the rate does not depend on ``total``, so the runs
      of several budgets share one trunk and each budget is a run that ended with its own decay.
    """
    if step < warmup:
        return base * (step + 1) / warmup
    if schedule == "wsd":
        start = decay_start(total, decay_fraction)
        if step < start:
            return base
        return base * (1.0 - 0.9 * (step - start + 1) / max(1, total - start))
    if schedule != "cosine":
        raise RoleConfigError(f"config key `models.<dataset>.<role>.lr_schedule` must be 'cosine' or 'wsd', "
                              f"got {schedule!r}")
    p = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def _resume(model: nn.Module, opt: torch.optim.Optimizer, ema: EMA, state: dict[str, Any] | None,
            shard: Shard) -> tuple[int, list[float]]:
    """Load a resume ``state`` (if any) into model, optimiser and EMA (the EMA onto ``shard``'s device);
    (its step, its losses), else (0, [])."""
    if state is None:
        return 0, []
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    ema.shadow = {k: v.to(shard.device) for k, v in state["ema"].items()} if shard.active else state["ema"]
    return int(state["step"]), state["losses"].tolist()


def _optimiser_step(model: nn.Module, opt: torch.optim.Optimizer, ema: EMA, loss: Tensor, grad_clip: Any,
                    step: int) -> None:
    """Backward, clip the gradient norm to ``grad_clip`` (when set), step, update the EMA."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(grad_clip))
    opt.step()
    ema.update(model, step)


def train_generative(model: nn.Module, loss_fn: GenerativeLoss, cfg: dict, images: Tensor, out_dir: Path,
                     seed: int, role: str, progress: bool = True,
                     shard: Shard | None = None,
                     snapshots: tuple[int, ...] = (),
                     trunk_dir: Path | None = None) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Run ``cfg['steps']`` optimiser steps of ``loss_fn`` (a :class:`GenerativeLoss`) on uint8 ``images``;
    a training key ``cfg`` leaves out takes its value in :data:`TRAIN_DEFAULTS`.

    Resumes from ``out_dir/checkpoint/state.pt`` (written atomically every ``checkpoint_every``
    steps) only if it was written with the same settings, seed, role and training images (a settings
    fingerprint, ``checkpoints.load_resume_state``: a stale or corrupt state is set aside
    and reported). Returns the EMA state dict (on the CPU) and training statistics (budget, wall time,
    images per second, loss curve; on CUDA the peak GPU memory).

    ``shard`` (``vcebench.models.training.distributed``): the device, the rank and the number of processes. On
    a GPU or with several processes, the loss's noise is drawn for the whole batch ``x`` (on the CPU), then
    ``shard.take(...)`` keeps this rank's rows on its device; the forward and loss run under the recipe's
    ``amp`` (bf16 autocast by default on CUDA); the optimiser, EMA and gradient clipping stay fp32. Without
    one (or on the CPU in one process) nothing differs from a plain run. ``shard.cuda_graphs``: each step
    is replayed as a CUDA graph (``step_graphs.GraphedSteps``; one process, the same draws).

    ``snapshots``: after each of these steps the EMA weights are also written to
    ``out_dir/snapshots/step-NNNNNN.safetensors`` (the points of one run's training curve); they change
    nothing in the run.

    ``trunk_dir`` (with ``lr_schedule: wsd`` only): the runs of several budgets of one recipe share their
    stable trunk. The run writes its state at its :func:`decay_start` to ``trunk_dir/step-NNNNNN.pt``
    (fingerprinted without ``steps``), and a run with nothing of its own to resume starts from the latest
    such state at or before its own decay start: the same weights as training the trunk from step 0.
    """
    steps, bs = int(require(cfg, "steps", role)), int(require(cfg, "batch_size", role))
    base_lr = float(require(cfg, "lr", role))
    settings = {**TRAIN_DEFAULTS, **cfg}
    warmup = int(min(100, steps // 10) if settings["warmup_steps"] is None else settings["warmup_steps"])
    every = int(settings["checkpoint_every"])
    hflip = bool(settings["hflip"])
    ckpt = Path(out_dir) / "checkpoint" / "state.pt"
    shard = (shard or Shard()).with_amp(settings["amp"])
    # channels_last by default on a GPU only: on the CPU the GroupNorm UNets train about 1.5x slower in it
    # (docs/internals.md "Training on the CPU"), and a memory format changes the trained weights' last bits
    channels_last = settings["channels_last"]
    channels_last = bool(shard.device.type == "cuda" if channels_last is None else channels_last)

    torch.manual_seed(seed)
    init = initial_weights(settings, role)
    if init is not None:  # before the EMA copies the model: the run and its average start from these weights
        model.load_state_dict(init)
    model = _place(model, channels_last, shard)
    opt = torch.optim.AdamW(model.parameters(), lr=base_lr, betas=(0.9, 0.99),
                            weight_decay=float(settings["weight_decay"]))
    ema = EMA(model, float(settings["ema_decay"]))
    # the role's block as given, not the merged settings: resume states written before TRAIN_DEFAULTS still match
    fp = fingerprint({"role": role, "seed": int(seed), "settings": cfg, "images": data_fingerprint(images)})
    schedule, fraction = str(settings["lr_schedule"]), float(settings["decay_fraction"])
    trunk_end, trunk_fp = None, None
    if trunk_dir is not None:
        if schedule != "wsd":
            raise RoleConfigError(f"a shared trunk needs `models.<dataset>.{role}.lr_schedule: wsd` (got "
                                  f"{schedule!r}): under a cosine schedule every step depends on the budget")
        trunk_end = decay_start(steps, fraction)
        if settings["warmup_steps"] is None:
            raise RoleConfigError(f"a shared trunk needs `models.<dataset>.{role}.warmup_steps`: unset, the "
                                  f"warm-up is a share of the budget and differs between the budgets")
        trunk_fp = fingerprint({"role": role, "seed": int(seed), "images": data_fingerprint(images),
                                "settings": {k: v for k, v in cfg.items() if k != "steps"}})

    def resume_state() -> dict | None:
        own = load_resume_state(ckpt, fp, f"train {role}")
        return own if own is not None or trunk_dir is None else trunk_state(trunk_dir, trunk_fp, trunk_end)

    start, losses = _resume(model, opt, ema, shard.rank0_first(resume_state), shard)
    net = shard.wrap(model)
    model.train()
    graphs = None
    if shard.cuda_graphs:
        from .step_graphs import GraphedSteps

        graphs = GraphedSteps(model, opt, ema, loss_fn.compute, settings["grad_clip"], shard.device,
                              lambda: shard.autocast(cache=False))
    pending: list[Tensor] = []  # logged numbers not read yet: read every 20 steps, not one host sync per step

    def read_losses() -> list[float]:
        if pending:
            losses.extend(torch.stack(pending).tolist())
            pending.clear()
        return losses

    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), initial=start, total=steps, desc=f"train {role}",
               disable=not (progress and shard.writer), mininterval=2.0)
    for step in bar:
        lr = lr_at(step, base_lr, warmup, steps, schedule, fraction)
        g = step_generator(seed, step)
        x = batch_at(images, bs, g, hflip)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if graphs is not None:
            pending.append(graphs.step(loss_fn.mode(step), loss_fn.draw(x, g, step), lr, ema.decay_at(step)))
        else:
            for group in opt.param_groups:
                group["lr"] = lr
            with shard.autocast():
                loss = loss_fn(net, x, g, step, **args_of(shard))
            loss, logged = loss if isinstance(loss, tuple) else (loss, loss)
            _optimiser_step(model, opt, ema, loss, settings["grad_clip"], step)
            pending.append(shard.mean(logged.detach()))
        if step + 1 in snapshots and shard.writer:
            save_snapshot(snapshot_path(out_dir, step + 1), ema.shadow, step + 1)
        if step % 20 == 0:
            recent = read_losses()[-20:]
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.4f}",
                            img_s=f"{(step + 1 - start) * bs / max(time.perf_counter() - t0, 1e-9):.0f}")
        if (step + 1) % every == 0 and step + 1 < steps and shard.writer:
            _save(ckpt, model, opt, ema, step + 1, read_losses(), fp)
        if step + 1 == trunk_end and shard.writer:
            _save(trunk_path(trunk_dir, trunk_fp, trunk_end), model, opt, ema, trunk_end, read_losses(), trunk_fp)
    read_losses()
    shard.synchronize()
    seconds = time.perf_counter() - t0
    stats = {"steps": steps, "batch_size": bs, "images_seen": steps * bs, "train_seconds": seconds,
             "resumed_from_step": start, "threads": torch.get_num_threads(),
             **({"init_from": str(settings["init_from"]), "init_sha256": str(settings["init_sha256"])}
                if init is not None else {}),
             **throughput(steps - start, bs, seconds, shard), **_loss_stats(losses, steps)}
    if graphs is not None:
        stats["cuda_graphs"] = graphs.captured
    return _ema_on_cpu(model, ema, shard), stats


def snapshot_path(out_dir: str | Path, step: int) -> Path:
    """Where ``train_generative(..., snapshots=...)`` writes the EMA weights after ``step`` steps."""
    return Path(out_dir) / "snapshots" / f"step-{int(step):06d}.safetensors"


def trunk_path(trunk_dir: str | Path, fp: str, step: int) -> Path:
    """Where a ``wsd`` run with ``trunk_dir`` and trunk fingerprint ``fp`` writes its state at its decay start
    ``step`` (one folder per recipe: another recipe's trunk in the same ``trunk_dir`` is never overwritten)."""
    return Path(trunk_dir) / fp / f"step-{int(step):06d}.pt"


def trunk_state(trunk_dir: str | Path, fp: str, until: int) -> dict | None:
    """The latest shared-trunk state of trunk fingerprint ``fp`` in ``trunk_dir`` written at or before step
    ``until`` (read by ``checkpoints.load_resume_state``: an unreadable one is set aside), or None."""
    found = (p.stem.split("-", 1)[1] for p in Path(trunk_dir, fp).glob("step-*.pt"))
    for step in sorted((int(s) for s in found if s.isdigit() and int(s) <= until), reverse=True):
        state = load_resume_state(trunk_path(trunk_dir, fp, step), fp, "trunk")
        if state is not None and int(state["step"]) == step:
            tqdm.write(f"[trunk] continuing the shared trunk from {trunk_path(trunk_dir, fp, step)}", file=sys.stderr)
            return state
    return None


def _place(model: nn.Module, channels_last: bool, shard: Shard) -> nn.Module:
    """The model in channels_last memory format (when set) and on ``shard``'s device (when not the CPU)."""
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    if shard.active:
        model = model.to(shard.device)
    return model


def _save(ckpt: Path, model: nn.Module, opt: torch.optim.Optimizer, ema: EMA, step: int, losses: list[float],
          fp: str) -> None:
    """Write the resume state after ``step`` steps (atomically; ``checkpoints.save_resume_state``). The
    optimiser's groups as an eager run has them (a float rate, not capturable): a state written by a run
    replayed as CUDA graphs resumes anywhere."""
    opt_state = opt.state_dict()
    opt_state["param_groups"] = [{**group, "lr": float(group["lr"]), "capturable": False}
                                 for group in opt_state["param_groups"]]
    save_resume_state(ckpt, {"model": model.state_dict(), "ema": ema.shadow, "opt": opt_state,
                             "step": torch.tensor(step), "losses": torch.tensor(losses, dtype=torch.float64),
                             "fingerprint": fp})


def _ema_on_cpu(model: nn.Module, ema: EMA, shard: Shard) -> dict[str, Tensor]:
    """The EMA weights, contiguous and on the CPU (the caller evaluates and saves there)."""
    shadow = {k: v.contiguous() for k, v in ema.shadow.items()}
    if shard.active:
        model.to("cpu")
        shadow = {k: v.cpu().contiguous() for k, v in shadow.items()}
    return shadow


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else float("nan")


def _loss_stats(losses: list[float], steps: int) -> dict[str, Any]:
    """Mean loss of the first and last window and a 20-point loss curve (the generative roles' metrics.json)."""
    win = max(1, min(50, steps // 4))
    every = max(1, steps // 20)
    return {"loss_first": _mean(losses[:win]), "loss_last": _mean(losses[-win:]), "loss_window": win,
            "loss_curve": [_mean(losses[i:i + every]) for i in range(0, steps, every)]}
