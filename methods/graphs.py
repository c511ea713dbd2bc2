"""A method's update step captured once per shape as a CUDA graph and replayed (``cuda_graphs: true``).

The sync-free loops (FiRe's ``fire_refine_masked``, MaskDiME's masked guided steps) write each update as a
function of tensors only: no host read, no shape change, the step's index a device tensor and its
randomness drawn before it (:class:`Drawn`). :class:`StepGraphs` runs such a function eagerly, or, on a
CUDA device, captures it with ``torch.cuda.CUDAGraph`` the first time a key (the shapes and the constant
arguments) is met and replays it afterwards, as PyTorch's "whole-network capture" does
(https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs; the pattern of
vcebench/models/training/step_graphs.py): inputs are copied into static buffers, the first call of a key
runs eagerly on a side stream (warm-up) and is the step's result, the capture follows. Network calls made
while capturing are not counted; each replay adds the counts of the warm-up call instead (:class:`NFE`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .base import NFE

StepFn = Callable[..., dict[str, Tensor]]


def at_step(v: Tensor, i: int | Tensor) -> Tensor:
    """``v[i]`` as a 0-dim tensor; a tensor ``i`` is read on the device (``index_select``: indexing with a 0-dim
    tensor would read it on the host)."""
    return v.index_select(0, i.view(1).to(v.device)).squeeze(0) if torch.is_tensor(i) else v[i]


class Drawn:
    """Noise drawn before a step, handed to code that asks a generator for it (``randn`` of that shape)."""

    def __init__(self, noise: Tensor):
        self.noise = noise

    def randn(self, *shape: int, device: torch.device | str | None = None, dtype: Any = None) -> Tensor:
        if tuple(self.noise.shape[1:]) != tuple(shape):
            raise ValueError(f"drawn noise is {tuple(self.noise.shape)}, asked for (N, {', '.join(map(str, shape))})")
        return self.noise


@dataclass
class _Captured:
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    graph: Any  # torch.cuda.CUDAGraph
    nfe_delta: dict[str, Tensor]


class StepGraphs:
    """``fn(*constants, **tensors) -> dict of tensors``, replayed as one CUDA graph per ``key`` when ``capture``
    (a CUDA device); otherwise called as is (the sync-free eager path, e.g. on a CPU)."""

    def __init__(self, fn: StepFn, capture: bool, nfe: NFE | None = None):
        self.fn, self.capture, self.nfe = fn, capture, nfe
        self.graphs: dict[Hashable, _Captured] = {}

    def __call__(self, key: Hashable, *constants: Any, **inputs: Tensor) -> dict[str, Tensor]:
        if not self.capture:
            return self.fn(*constants, **inputs)
        key = (key, constants, tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(inputs.items())))
        entry = self.graphs.get(key)
        if entry is None:
            return self._capture(key, constants, inputs)
        for k, v in inputs.items():
            entry.inputs[k].copy_(v)
        entry.graph.replay()
        self._add(entry.nfe_delta)
        return {k: v.clone() for k, v in entry.outputs.items()}

    def _counts(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self.nfe.counts.items()} if self.nfe is not None else {}

    def _add(self, delta: dict[str, Tensor]) -> None:
        for k, d in delta.items():
            self.nfe.counts[k] += d

    def _capture(self, key: Hashable, constants: tuple, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Warm up (the step's real, counted result) on a side stream, then capture into static buffers."""
        static = {k: v.clone() for k, v in inputs.items()}
        before = self._counts()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            result = self.fn(*constants, **static)
        torch.cuda.current_stream().wait_stream(side)
        after = self._counts()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = self.fn(*constants, **static)
        if self.nfe is not None:  # the capture ran no network: its counts are undone
            self.nfe.counts.update(after)
        self.graphs[key] = _Captured(static, outputs, graph, {k: after[k] - before[k] for k in after})
        return {k: v.clone() for k, v in result.items()}
