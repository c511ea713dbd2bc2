"""Atomic writes, image quantisation and shard files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


def _is_tensor(o: Any) -> bool:
    """``torch.is_tensor`` without importing torch (the merge and report verbs run without it): where
    torch was never imported, nothing is a tensor."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.is_tensor(o)


def sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (hex), read in 1 MiB blocks: shipped cards, Hub pins, pinned weights."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path next to ``path``; rename it over ``path`` on success only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file normal permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if _is_tensor(o):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")


def quantize(x: torch.Tensor) -> torch.Tensor:
    """[-1, 1] float -> uint8 tensor (same device) with ``round((x + 1) * 127.5)``, values clamped first.

    The DiME/ACE reference code truncates (``(x + 1) * 127.5`` cast to uint8); we round.
    """
    import torch

    return ((x.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """:func:`quantize` as a numpy array (on the host)."""
    return quantize(x.cpu()).numpy()


def from_uint8(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 -> [-1, 1] float32: ``a / 127.5 - 1`` (the inverse of :func:`quantize` up to rounding)."""
    import torch

    t = a if torch.is_tensor(a) else torch.as_tensor(np.asarray(a))
    return t.float() / 127.5 - 1.0


def input_fingerprint(inputs_uint8: np.ndarray | torch.Tensor, cf_uint8: np.ndarray | torch.Tensor) -> np.ndarray:
    """int64 per row: 8 bytes of the BLAKE2b hash of the row's uint8 input and its uint8 counterfactual.

    ``vcebench explain`` stores it as ``input_hash``; ``vcebench evaluate`` recomputes it from the
    dataset's image of the row's sample id and the stored CF, so that a CF paired with another input than
    the one it was made from (swapped ids or CF rows, stale or foreign rows) is refused, not evaluated.
    """
    import hashlib

    def arr(a):
        return np.ascontiguousarray(np.asarray(a.cpu() if _is_tensor(a) else a))

    x, cf = arr(inputs_uint8), arr(cf_uint8)
    if x.dtype != np.uint8 or cf.dtype != np.uint8 or len(x) != len(cf):
        raise ValueError(f"input_fingerprint needs uint8 inputs and CFs with one row each, got {x.dtype} "
                         f"{x.shape} and {cf.dtype} {cf.shape}")
    out = np.empty(len(x), np.int64)
    for i in range(len(x)):
        h = hashlib.blake2b(digest_size=8, person=b"vcebench-input")
        for part in (x[i], cf[i]):
            h.update(str(part.shape).encode())
            h.update(part.tobytes())
        out[i] = np.frombuffer(h.digest(), dtype="<i8")[0]
    return out


def check_writable(folder: str | os.PathLike, what: str) -> None:
    """Fail before any work when ``folder`` (created if missing) cannot take a new file: a
    PermissionError naming it (the CLI prints it as one line)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".write-test.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise PermissionError(f"cannot write {what} into {folder}: {e.strerror or e}") from None


def save_npz(path: str | os.PathLike, **arrays: Any) -> None:
    """Atomic ``np.savez_compressed``."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **{k: (v.cpu().numpy() if _is_tensor(v) else np.asarray(v))
                                       for k, v in arrays.items()})


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
