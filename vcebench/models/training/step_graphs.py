"""A generative training step captured once as a CUDA graph and replayed (config key ``cuda.train_graphs``).

The synthetic benchmark's UNets (0.6 M parameters, 32 x 32 images, batch 128) are launch-bound on a GPU:
a training step is about a thousand small kernels (forward, backward, clipping, AdamW, EMA) whose launches
cost more than their work, so one GPU trains them at a few dozen steps per second, and several processes on
one GPU share that rate. :class:`GraphedSteps` records the whole step once per mode (PyTorch's
"whole-network capture": ``torch.cuda.CUDAGraph``) and replays it, so a step costs one launch.

What a graph needs, and how the step provides it:

- **static inputs**: the step's randomness is drawn on the CPU by the loss's ``draw`` (the same numbers an
  eager step draws) and copied into the mode's input buffers before each replay; ``compute`` runs on them;
- **changing scalars as tensors**: the learning rate (AdamW with ``capturable=True`` and a tensor ``lr``)
  and the EMA decay are device tensors, filled before each replay;
- **warm-up**: the first :data:`WARMUP` steps of each mode run eagerly on a side stream (real training
  steps, not extra ones), then the next one is captured and every later one replayed;
- **one mode, one graph**: a loss whose computation changes with the step (the pmf's flow-matching warm
  start, then MeanFlow) names its ``mode``; each mode is captured once.

A replayed step does the same arithmetic as an eager one on the same device, up to the order of a few
floating-point reductions (the EMA's update is written with tensors); the resume states it writes are the
eager ones (``training._save``). One process per GPU (``gpus_per_train: 1``), checked when the run starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor, nn

WARMUP = 3  # eager steps of each mode before its capture (cuDNN's autotuning, AdamW's state, grad buffers)


class _Mode:
    """One mode's input buffers, warm-up count and (once captured) graph and logged output."""

    def __init__(self, drawn: tuple[Tensor, ...], device: torch.device):
        self.inputs = tuple(torch.empty_like(t, device=device) for t in drawn)
        self.warm = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logged: Tensor | None = None


class GraphedSteps:
    """The training step ``compute -> backward -> clip -> AdamW -> EMA`` of one model, replayed as CUDA graphs.

    ``compute(model, inputs, mode)`` returns the loss, or (loss, the number to log); ``optimiser`` is made
    capturable here (its state's step counters moved to the device), ``ema`` is a ``training.EMA``.
    :meth:`step` takes the CPU tensors that the loss's ``draw`` returned and the step's rate and EMA decay,
    and returns the logged number as a device tensor (no host synchronisation)."""

    def __init__(self, model: nn.Module, optimiser: torch.optim.Optimizer, ema: Any,
                 compute: Callable[[nn.Module, tuple[Tensor, ...], Hashable], Tensor | tuple[Tensor, Tensor]],
                 grad_clip: float | None, device: torch.device,
                 autocast: Callable[[], contextlib.AbstractContextManager]):
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.model, self.opt, self.ema, self.compute = model, optimiser, ema, compute
        self.grad_clip = float(grad_clip) if grad_clip else None
        self.device = device
        self.autocast = autocast
        self.lr = torch.zeros((), device=device)
        self.decay = torch.zeros((), device=device)
        self.keep = torch.zeros((), device=device)  # 1 - decay
        for group in optimiser.param_groups:
            group["capturable"] = True
            group["lr"] = self.lr
        for state in optimiser.state.values():  # a resumed optimiser: its step counters live on the device
            if "step" in state:
                state["step"] = state["step"].to(device=device, dtype=torch.float32)
        self.modes: dict[Hashable, _Mode] = {}
        self.captured = 0

    def _body(self, mode: Hashable, inputs: tuple[Tensor, ...]) -> Tensor:
        with self.autocast():
            out = self.compute(self.model, inputs, mode)
        loss, logged = out if isinstance(out, tuple) else (out, out)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.opt.step()
        self.ema.update_with(self.model, self.decay, self.keep)
        return logged.detach()

    def step(self, mode: Hashable, drawn: tuple[Tensor, ...], lr: float, decay: float) -> Tensor:
        """One training step of ``mode`` on the CPU tensors ``drawn``, at rate ``lr`` and EMA ``decay``."""
        self.lr.fill_(lr)
        self.decay.fill_(decay)
        self.keep.fill_(1.0 - decay)
        m = self.modes.get(mode)
        if m is None:
            m = self.modes[mode] = _Mode(drawn, self.device)
        for buf, t in zip(m.inputs, drawn):
            buf.copy_(t, non_blocking=True)
        if m.graph is None and m.warm < WARMUP:
            m.warm += 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                logged = self._body(mode, m.inputs)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return logged
        if m.graph is None:
            m.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(m.graph):
                m.logged = self._body(mode, m.inputs)
            self.captured += 1
        m.graph.replay()
        return m.logged.clone()
