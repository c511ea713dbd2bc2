"""Where trained weights and resumable training states are stored, and how they are read back.

A trained synthetic role is a folder: ``model.safetensors`` + ``config.json`` (format
``vcebench-synthetic-v1``), then ``metrics.json`` (written last: the workflow's sentinel). A training
run in progress keeps a resumable state, reused only when the settings fingerprint matches.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..core.errors import CheckpointError
from ..core.io import atomic_path, tensor_bytes, write_json

CHECKPOINT = "checkpoint.pt"


FORMAT = "vcebench-synthetic-v1"


def fingerprint(settings: dict) -> str:
    """A short hash of the settings a resumable training state depends on (JSON, sorted keys)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_fingerprint(images: Tensor, n: int = 256) -> dict[str, Any]:
    """Shape and a hash of ``n`` evenly spaced rows of a training tensor (part of a resume fingerprint:
    a re-rendered or different dataset must not resume an old state)."""
    step = max(1, images.shape[0] // n)
    raw = images[::step].contiguous().cpu().numpy().tobytes()
    return {"shape": list(images.shape), "dtype": str(images.dtype), "sha256": hashlib.sha256(raw).hexdigest()[:16]}


def weights_fingerprint(module: nn.Module) -> str:
    """A short hash of every tensor of ``module``'s state dict (names, dtypes, shapes, values): two networks
    with the same name but other weights (retrained with other settings) get different fingerprints."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def set_aside(path: Path, why: str) -> Path:
    """Rename ``path`` to ``<path>.<why>`` (replacing an older one) so that it is never resumed."""
    dest = path.with_name(f"{path.name}.{why}")
    os.replace(path, dest)
    return dest


def save_resume_state(path: Path, state: dict[str, Any]) -> None:
    """Write a resumable training state (with its ``fingerprint``) atomically."""
    with atomic_path(path, needed=tensor_bytes(state)) as tmp:
        torch.save(state, tmp)


def load_resume_state(path: str | Path, fp: str, desc: str) -> dict | None:
    """The resumable training state at ``path`` if it was written with settings fingerprint ``fp``.

    A state written with other settings (or without a fingerprint) is renamed ``<path>.stale`` and an
    unreadable one ``<path>.corrupt``; both are reported on stderr and training starts from step 0.
    Both training loops (``vcebench.models.training.loops``, ``.generative``) resume through this function.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"holds a {type(state).__name__}, not a training state")
    except Exception as e:  # a truncated / corrupt / foreign file: never a traceback, never resumed
        dest = set_aside(path, "corrupt")
        tqdm.write(f"[{desc}] unreadable checkpoint {path} ({type(e).__name__}: {str(e)[:200]}); "
                   f"set aside as {dest.name}; training starts from step 0", file=sys.stderr)
        return None
    if state.get("fingerprint") != fp:
        dest = set_aside(path, "stale")
        tqdm.write(f"[{desc}] checkpoint {path} was written with other settings (fingerprint "
                   f"{state.get('fingerprint')!r}, now {fp!r}); set aside as {dest.name}; training starts "
                   f"from step 0", file=sys.stderr)
        return None
    return state


def save_snapshot(path: str | Path, weights: dict[str, Tensor], step: int) -> None:
    """Write one training snapshot's (EMA) weights as safetensors, atomically (``training.train_generative``
    ``snapshots=``: the points of a training curve, ``vcebench.steps.curves``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in weights.items()}
    with atomic_path(path, needed=tensor_bytes(state)) as tmp:
        save_file(state, str(tmp), metadata={"format": FORMAT, "step": str(int(step))})


def save_trained(out_dir: str | Path, model: nn.Module, config: dict, metrics: dict) -> None:
    """Write ``model.safetensors`` + ``config.json``, then ``metrics.json`` (the workflow's sentinel).

    Removes the resume checkpoint afterwards.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(out_dir / "model.safetensors", needed=tensor_bytes(state)) as tmp:
        save_file(state, str(tmp), metadata={"format": FORMAT, "role": config.get("role", "")})
    write_json(out_dir / "config.json", {"format": FORMAT, **config})
    write_json(out_dir / "metrics.json", metrics)
    (out_dir / CHECKPOINT).unlink(missing_ok=True)


def read_trained(role: str, path: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """Read ``config.json`` + ``model.safetensors`` of a trained role; CheckpointError on any problem."""
    path = Path(path)
    cfg_path, w_path = path / "config.json", path / "model.safetensors"
    for p in (cfg_path, w_path):
        if not p.exists():
            raise CheckpointError(f"role {role!r}: {p} is missing (an incomplete training run?)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"role {role!r}: {cfg_path} is not valid JSON ({e})") from e
    if cfg.get("format") != FORMAT:
        raise CheckpointError(f"role {role!r}: {cfg_path} has format {cfg.get('format')!r}, expected {FORMAT!r}")
    if cfg.get("role") != role:
        raise CheckpointError(f"role {role!r}: {path} holds a {cfg.get('role')!r} network, not a {role!r} one")
    try:
        state = load_file(str(w_path))
    except Exception as e:
        raise CheckpointError(f"role {role!r}: cannot read {w_path} (corrupt or not safetensors): {e}") from e
    return cfg, state


def uninitialised(factory: Callable[[], nn.Module]) -> nn.Module:
    """``factory()`` with its parameters and buffers allocated but not initialised (built on the meta device,
    then given CPU storage): for a network that a strict state-dict load overwrites entirely next, so that a
    released network's random initialisation (seconds for ~20 M parameters) is not computed for nothing.
    A network with non-persistent buffers (which no state dict restores) is built normally."""
    with torch.device("meta"):
        net = factory()
    if set(dict(net.named_buffers())) - set(net.state_dict()):
        return factory()
    return net.to_empty(device="cpu")


def load_state_strict(role: str, path: str | Path, model: nn.Module, state: dict[str, Tensor]) -> None:
    """``load_state_dict(strict=True)`` with a message naming the role, the path and the mismatch."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key(s), e.g. {missing[:3]}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s), e.g. {unexpected[:3]}")
        if shapes:
            parts.append(f"shape mismatch: {'; '.join(shapes[:3])}")
        raise CheckpointError(f"role {role!r}: weights in {path} do not fit the expected architecture "
                              f"({type(model).__name__}): " + "; ".join(parts))
    model.load_state_dict(state, strict=True)


def remove_checkpoint(out_dir: Path) -> None:
    """Remove the resumable state after a finished training (keeps set-aside ``*.stale`` / ``*.corrupt``
    files, which were reported, and then the folder only if it is empty)."""
    d = Path(out_dir) / "checkpoint"
    if not d.is_dir():
        return
    for f in d.iterdir():
        if not f.name.endswith((".stale", ".corrupt")):
            shutil.rmtree(f) if f.is_dir() else f.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        d.rmdir()


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a fully written folder into place (removing an old one first)."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
