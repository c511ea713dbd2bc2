"""Atomic writes (a full disk is one clear error: :func:`disk_space`), image quantisation and shard files."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import DiskFullError

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


# What a write that ran out of space says when it is not an OSError with its errno: safetensors' SafetensorError
# and other wrappers quote the OS error's text.
NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded")
# torch.save's stream writer reports a failed write without the OS error ("file write failed", "unexpected pos"):
# taken for a full disk only when the file system has less than the space needed (or 1 MiB) left.
TORCH_WRITE_FAILED = ("file write failed", "unexpected pos")


def free_bytes(path: str | os.PathLike) -> int | None:
    """The bytes free on the file system of ``path`` (its nearest existing folder), or None when unknown."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def tensor_bytes(state: Mapping[str, Any]) -> int:
    """The bytes of the tensors of a state dict (nested dicts and lists included): what writing it needs, about."""
    total = 0
    for v in state.values():
        if _is_tensor(v):
            total += v.numel() * v.element_size()
        elif isinstance(v, Mapping):
            total += tensor_bytes(v)
        elif isinstance(v, (list, tuple)):
            total += tensor_bytes(dict(enumerate(v)))
        elif isinstance(v, np.ndarray):
            total += v.nbytes
    return total


def _size(n: int) -> str:
    """Bytes for a person: ``12.3 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def is_disk_full(e: BaseException, path: str | os.PathLike | None = None, needed: int | None = None) -> bool:
    """Whether ``e`` says the disk (or the quota) is full: an OSError with errno ENOSPC / EDQUOT, an error whose
    text quotes it (safetensors), or torch's stream writer failing on a file system with less than ``needed``
    bytes (or 1 MiB) left."""
    if isinstance(e, DiskFullError):
        return False  # already the one-line error
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(e)
    if any(s in text for s in NO_SPACE_TEXT):
        return True
    if path is not None and isinstance(e, RuntimeError) and any(s in text for s in TORCH_WRITE_FAILED):
        free = free_bytes(path)
        return free is not None and free < max(needed or 0, 1 << 20)
    return False


@contextlib.contextmanager
def disk_space(path: str | os.PathLike, needed: int | None = None) -> Iterator[None]:
    """Turn a write to ``path`` that runs out of space (:func:`is_disk_full`) into one :class:`DiskFullError`
    naming ``path``, the space the write needed (``needed`` bytes, when known) and the space left; every other
    error passes unchanged. Every writer of the harness writes inside it (:func:`atomic_path` does)."""
    try:
        yield
    except Exception as e:
        if not is_disk_full(e, path, needed):
            raise
        free = free_bytes(path)
        need = f"needs about {_size(needed)}, " if needed else ""
        left = f"{_size(free)} left" if free is not None else "space left unknown"
        raise DiskFullError(f"no space left on the device writing {path} ({need}{left}): free some space or "
                            f"write elsewhere") from e


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, needed: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` on success only. A full disk is one
    :class:`DiskFullError` naming ``path`` (:func:`disk_space`; ``needed``: the bytes the write takes, when
    known)."""
    path = Path(path)
    with disk_space(path, needed):
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
    """Write ``obj`` as indented JSON to ``path``, atomically (numpy and torch numbers and arrays as plain JSON)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path``, atomically (a full disk: one :class:`DiskFullError` naming ``path``)."""
    with atomic_path(path, needed=len(text.encode())) as tmp:
        tmp.write_text(text)


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy the file ``src`` to ``dst``, atomically (a full disk: one :class:`DiskFullError` naming ``dst`` and
    the size of ``src``)."""
    with atomic_path(dst, needed=os.path.getsize(src)) as tmp:
        shutil.copyfile(src, tmp)


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
    """Atomic ``np.savez_compressed`` (a full disk: one :class:`DiskFullError` naming ``path``)."""
    arrs = {k: (v.cpu().numpy() if _is_tensor(v) else np.asarray(v)) for k, v in arrays.items()}
    with atomic_path(path, needed=sum(a.nbytes for a in arrs.values())) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrs)


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
