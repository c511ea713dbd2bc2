"""Networks defined by their own code (``format: torch_module``): a class from the user's environment,
its state dict, and the call convention the config declares for the role.

The FiRe authors release their pixel-MeanFlow backbones as PyTorch checkpoints of a DiT whose code lives
in their repository, and a CheXpert DenseNet-121 classifier; no format description could rebuild them.
This loader builds ``class`` (``"package.module:Name"``, importable where vcebench runs) with ``kwargs``,
loads the state dict under checkpoint key ``state_dict`` (``ema``, ``model``, ... ; null: the file is the
state dict) strictly, with ``torch.load(weights_only=True)`` (or safetensors), and puts the network behind
its role's contract (``vcebench/models/base.py``) as ``output`` and ``inputs`` declare:

- classifier, ``output: logits``: ``net(x)``, x in [-1, 1]; ``head: 2logit`` (N, 2 logits) or ``1logit``
  (a sigmoid logit in column ``index`` of (N, K), or (N,)).
- pmf, ``output: x`` (the clean-image prediction, pMF's x-prediction) or ``u`` (MeanFlow's average
  velocity ``u(z, r, t)``), on the flow path ``z_t = (1 - t) x + t eps`` (noise at t = 1, vcebench's and
  MeanFlow's convention). ``inputs``: the forward's positional arguments in order, from ``z``, ``t``, ``r``,
  ``h`` (= t - r) and ``y`` (the class label ``class_label`` for every row, e.g. the null class of a
  class-conditional model used unconditionally); ``time_scale`` multiplies t, r and h. ``const``: further
  arguments held constant, ``{name: number}`` (pMF's released ``forward(x, t, h, omega, t_min, t_max, y)``:
  ``const: {omega: 1.0, t_min: 0.0, t_max: 1.0}``), each passed as a per-row tensor (a float, or an integer
  for an integer value; ``time_scale`` does not apply): at its place when ``inputs`` names it, by keyword
  otherwise. FiRe's
  ``predict_clean(z, t)`` is ``x(z, r = 0, t)`` or ``z - t u(z, 0, t)`` (one call either way).
- ddpm, ``output: eps``: ``inputs`` from ``z``, ``t`` (integer train timestep) and ``y``; the schedule is
  ``diffusion_steps`` betas of ``noise_schedule`` (guided-diffusion's names); ``learn_sigma``: the output
  holds eps and guided-diffusion's variance value (2C channels).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...config.load import ConfigError
from ...core.errors import CheckpointError
from ..base import BinaryHead
from ..checkpoints import load_state_strict
from ..generative.ddpm import EpsDDPM
from ..generative.pmf import per_sample_times
from .formats import TORCH_MODULE_DEFAULTS
from .schedule import alphas_cumprod_for

T_CLIP = 0.05  # pMF: u = (z - x) / max(t, 0.05)


def import_class(spec: dict, key: str) -> type:
    """The class ``spec['class']`` names (``"package.module:Name"``; ``Name`` may be dotted)."""
    module_name, _, attr = spec["class"].partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"config key `{key}.class`: cannot import {module_name!r} ({e}); install the package "
                          f"that defines the network in this environment") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"config key `{key}.class`: {module_name!r} has no {attr!r}") from None
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise ConfigError(f"config key `{key}.class`: {spec['class']} is not a torch.nn.Module class")
    return obj


def read_state(role: str, path: Path, which: str | None, key: str) -> dict[str, Tensor]:
    """The state dict in ``path`` (safetensors, or ``torch.load(weights_only=True)``, which also admits an
    ``argparse.Namespace``), under checkpoint key ``which`` (None: the file itself), without a
    DistributedDataParallel ``module.`` prefix."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        ck: Any = load_file(str(path))
    else:
        try:  # DiT's train.py stores its argparse.Namespace next to the weights: plain values, allowed
            with torch.serialization.safe_globals([argparse.Namespace]):
                ck = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CheckpointError(f"role {role!r}: config key `{key}.weights`: {path} cannot be read with "
                                  f"torch.load(weights_only=True) (pickled objects, or a corrupt file; save the "
                                  f"state dict itself): {type(e).__name__}: {first}") from None
    if which is not None:
        if not isinstance(ck, dict) or which not in ck:
            have = sorted(map(str, ck))[:8] if isinstance(ck, dict) else type(ck).__name__
            raise CheckpointError(f"role {role!r}: config key `{key}.state_dict` is {which!r}, but {path} holds "
                                  f"no such key (found {have})")
        ck = ck[which]
    if not isinstance(ck, dict) or not all(isinstance(v, Tensor) for v in ck.values()):
        found = sorted(map(str, ck))[:8] if isinstance(ck, dict) else type(ck).__name__
        raise CheckpointError(f"role {role!r}: config key `{key}.state_dict`: {path}"
                              f"{f'[{which!r}]' if which else ''} is not a state dict of tensors (found {found}); "
                              f"name the key that holds it (e.g. ema, model, state_dict)")
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in ck.items()}


def _check_inputs(net: nn.Module, names: list[str], key: str, const: dict | None = None) -> None:
    """The declared ``inputs`` (and the ``const`` arguments they do not name, by keyword) bind to the
    forward's signature (a wrong call convention fails here, not in the middle of a method)."""
    try:
        sig = inspect.signature(net.forward)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*names, **{k: k for k in (const or {}) if k not in names})
    except TypeError as e:
        extra = [k for k in (const or {}) if k not in names]
        by_kw = f" with `{key}.const` {extra} by keyword" if extra else ""
        raise ConfigError(f"config key `{key}.inputs` {names}{by_kw} does not fit {type(net).__name__}.forward"
                          f"{sig}: {e}") from None


class DeclaredCall(nn.Module):
    """``net`` called with the declared positional ``inputs`` built from (z, t, r), and the ``const`` arguments
    (at their place in ``inputs``, else by keyword)."""

    def __init__(self, net: nn.Module, inputs: list[str], class_label: int | None, time_scale: float, key: str,
                 const: dict | None = None):
        super().__init__()
        self.net, self.inputs, self.class_label, self.time_scale, self.key = net, list(inputs), class_label, \
            float(time_scale), key
        self.const = dict(const or {})

    def _const(self, name: str, z: Tensor) -> Tensor:
        value = self.const[name]
        dtype = torch.long if isinstance(value, int) else z.dtype
        return torch.full((z.shape[0],), value, dtype=dtype, device=z.device)

    def call(self, z: Tensor, t: Tensor, r: Tensor | None = None) -> Tensor:
        values = {"z": z, "t": t, "r": r, "h": None if r is None else t - r}
        args = []
        for name in self.inputs:
            if name == "y":
                args.append(torch.full((z.shape[0],), int(self.class_label), dtype=torch.long, device=z.device))
            elif name in self.const:
                args.append(self._const(name, z))
            elif name == "z" or not torch.is_floating_point(values[name]):
                args.append(values[name])
            else:
                args.append(values[name] * self.time_scale)
        out = self.net(*args, **{k: self._const(k, z) for k in self.const if k not in self.inputs})
        if not isinstance(out, Tensor):
            raise CheckpointError(f"config key `{self.key}.output`: {type(self.net).__name__} returned "
                                  f"{type(out).__name__}, not a tensor")
        return out


class ModulePMF(nn.Module):
    """The pmf role (``predict_clean``, ``u``) of a network that returns ``x`` or ``u`` (module docstring)."""

    def __init__(self, call: DeclaredCall, output: str, name: str = ""):
        super().__init__()
        self.call, self.output, self.name = call, output, name
        self.takes_r = bool({"r", "h"} & set(call.inputs))

    def _net(self, z: Tensor, r: Tensor, t: Tensor) -> Tensor:
        if not self.takes_r and bool((r != 0).any()):
            raise ValueError(f"config key `{self.call.key}.inputs` has neither r nor h: the network gives "
                             f"u(z, 0, t) only")
        out = self.call.call(z, t, r)
        if out.shape != z.shape:
            raise CheckpointError(f"config key `{self.call.key}.output`: the network returned "
                                  f"{tuple(out.shape)} for z of {tuple(z.shape)} (output {self.output!r} "
                                  f"has z's shape)")
        return out

    def u(self, z: Tensor, r: Tensor | float, t: Tensor | float) -> Tensor:
        """Average velocity over [r, t] (x-prediction: ``(z - x) / max(t, 0.05)``, as pMF)."""
        t, r = per_sample_times(t, z), per_sample_times(r, z)
        out = self._net(z, r, t)
        if self.output == "u":
            return out
        return (z - out) / t.clamp_min(T_CLIP).reshape(-1, 1, 1, 1)

    def predict_clean(self, z: Tensor, t: Tensor | float) -> Tensor:
        """FiRe's ``G(z, t) = z - t u(z, 0, t)``: the network's x at r = 0, or computed from its u."""
        t = per_sample_times(t, z)
        out = self._net(z, torch.zeros_like(t), t)
        return out if self.output == "x" else z - t.reshape(-1, 1, 1, 1) * out


class ModuleDDPM(EpsDDPM):
    """The ddpm role of a network that returns eps (and guided-diffusion's variance value: ``learn_sigma``)."""

    def __init__(self, call: DeclaredCall, steps: int, schedule: str, learn_sigma: bool, name: str = ""):
        super().__init__()
        self.call, self.name = call, name
        self.num_train_timesteps, self.learned_variance = int(steps), bool(learn_sigma)
        self.register_buffer("alphas_cumprod", torch.from_numpy(alphas_cumprod_for(schedule, int(steps))),
                             persistent=False)

    def eps_var(self, z: Tensor, t: Tensor) -> tuple[Tensor, Tensor | None]:
        out = self.call.call(z, t)
        c = z.shape[1]
        want = (z.shape[0], 2 * c if self.learned_variance else c, *z.shape[2:])
        if tuple(out.shape) != want:
            what = "eps and the variance value" if self.learned_variance else "eps"
            raise CheckpointError(f"config key `{self.call.key}.output`: the network returned {tuple(out.shape)} "
                                  f"for z of {tuple(z.shape)}; {what} has {want} (`learn_sigma`)")
        return (out[:, :c], out[:, c:]) if self.learned_variance else (out, None)


class CheckedLogits(nn.Module):
    """The classifier network, its output checked against the declared ``head`` (and ``index``)."""

    def __init__(self, net: nn.Module, kind: str, index: int, key: str):
        super().__init__()
        self.net, self.kind, self.index, self.key = net, kind, index, key

    def forward(self, x: Tensor) -> Tensor:
        out = self.net(x)
        shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        if self.kind == "2logit":
            fits = isinstance(out, Tensor) and out.shape == (x.shape[0], 2)
        else:
            fits = isinstance(out, Tensor) and (out.shape == (x.shape[0],) or (
                out.ndim == 2 and out.shape[0] == x.shape[0] and self.index < out.shape[1]))
        if not fits:
            raise CheckpointError(f"config key `{self.key}.head`: {self.kind} does not fit the network's output "
                                  f"{shape} for {x.shape[0]} images (2logit: (N, 2); 1logit: (N,) or (N, K) with "
                                  f"column `{self.key}.index` = {self.index})")
        return out


def load_torch_module(role: str, spec: dict, path: Path, key: str, name: str | None) -> tuple[nn.Module, str]:
    """The ``torch_module`` network of ``role`` behind the role's contract; returns (module, name)."""
    cls = import_class(spec, key)
    try:
        net = cls(**(spec.get("kwargs") or {}))
    except Exception as e:
        raise ConfigError(f"config key `{key}.kwargs`: {spec['class']}(**kwargs) failed: "
                          f"{type(e).__name__}: {e}") from None
    load_state_strict(role, path, net, read_state(role, path, spec.get("state_dict"), key))
    net.eval()
    spec = {**TORCH_MODULE_DEFAULTS, **spec}  # after check_torch_module, which sees the keys as given
    label = f"{name or spec['class']} (torch_module, {path.name})"
    if role == "classifier":
        kind, index = spec["head"], int(spec["index"])
        head = BinaryHead(CheckedLogits(net, kind, index, key), kind, index)
        head.name = label
        return head, label
    _check_inputs(net, spec["inputs"], key, spec.get("const"))
    call = DeclaredCall(net, spec["inputs"], spec.get("class_label"), float(spec["time_scale"]), key,
                        spec.get("const"))
    if role == "pmf":
        return ModulePMF(call, spec["output"], label), label
    return ModuleDDPM(call, spec["diffusion_steps"], str(spec["noise_schedule"]), bool(spec["learn_sigma"]),
                      label), label
