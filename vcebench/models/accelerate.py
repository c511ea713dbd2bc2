"""The optional speed-ups applied to a task's networks (:func:`accelerate`: ``torch.compile``, bf16 generative
networks), for every method alike."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..registry.roles import GENERATIVE  # the roles bf16 applies to: the classifier's input gradient stays fp32
from .base import TaskModels

# --- speed-ups at the network boundary -------------------------------------------------------
# The call each role's users make; wrapping it changes every method's use of the network alike.
ROLE_CALLS = {"classifier": "__call__", "ddpm": "eps", "pmf": "predict_clean", "perceptual": "__call__"}


def accelerate(models: TaskModels, *, compile: bool = False, mode: str = "default", bf16_generative: bool = False,
               cache_dir: str | None = None, dynamic: bool | None = False, backend: str = "inductor") -> TaskModels:
    """``models`` with the classifier / ddpm / pmf / perceptual calls optionally compiled and the generative
    networks under bf16 autocast. Every method sees the same networks, so a speed-up given to one method is
    given to all (FiRe's SmoothGrad pass, PMF forward / backward and perceptual loss; the baselines' UNet,
    classifier and perceptual calls). Nothing changes when both options are off (the same objects back).

    ``compile``: ``torch.compile(call, mode=mode, dynamic=dynamic, backend=backend)`` per role (forward and, through
    AOTAutograd, backward); ``mode`` e.g. ``"reduce-overhead"`` (CUDA graphs) on a GPU, ``"default"`` on a CPU;
    ``dynamic=False`` compiles one graph per batch shape (fixed-shape loops: FiRe without early stopping,
    a DDPM trajectory; with batch compaction every batch size met is a graph, up to torch's recompile limit).
    ``cache_dir``: a persistent inductor cache (``TORCHINDUCTOR_CACHE_DIR``), so compiled kernels are reused
    by later processes on the machine. ``bf16_generative``: the ddpm and pmf calls run under
    ``torch.autocast(bfloat16)`` and return float32.
    """
    if not compile and not bf16_generative:
        return models
    if compile and cache_dir:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache_dir).resolve())
    roles = {}
    for role, call in ROLE_CALLS.items():
        net = getattr(models, role)
        if net is None:
            continue
        fn = orig = getattr(net, call)
        if bf16_generative and role in GENERATIVE:
            fn = _bf16(fn)
        if compile:
            options = {"mode": mode} if backend == "inductor" else {}  # a mode is inductor's
            fn = torch.compile(fn, backend=backend, dynamic=dynamic, **options)
        if fn is not orig:
            roles[role] = _Replaced(net, call, fn)
    return dataclasses.replace(models, **roles)


def accelerate_from_config(models: TaskModels, cuda: Mapping[str, Any] | None,
                           device: torch.device | str) -> TaskModels:
    """:func:`accelerate` with the config's ``cuda`` section (``cuda``: ``compile``, ``compile_mode``,
    ``compile_cache_dir``, ``bf16_generative``; each set in config/config.yaml); used only when ``device`` is
    CUDA. ``cuda`` None or empty: no CUDA options, the networks as they are."""
    if torch.device(device).type != "cuda" or not cuda:
        return models
    return accelerate(models, compile=bool(cuda["compile"]), mode=cuda["compile_mode"],
                      bf16_generative=bool(cuda["bf16_generative"]), cache_dir=cuda["compile_cache_dir"])


def _bf16(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def call(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = fn(x, *args, **kwargs)
        return out.float()
    return call


class _Replaced:
    """A network whose method ``call`` is ``fn``; every other attribute is the network's."""

    def __init__(self, inner: Any, call: str, fn: Callable[..., Any]):
        self.inner, self._call, self._fn = inner, call, fn

    def __getattr__(self, name: str) -> Any:
        return self._fn if name == self._call else getattr(self.inner, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__getattr__("__call__")(*args, **kwargs)
