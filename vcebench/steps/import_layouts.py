"""What `vcebench import` reads: one :class:`Entry` per counterfactual a layout holds, the folder layouts
``dime`` and ``generic`` (the array and run layouts ``peal`` and ``rcsb`` have a module each, on this one),
and the image checks they share. The layouts are described once, in :mod:`vcebench.cli.import_cf`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import UserError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


DIME_GROUPS = [(cc, ccf) for cc in ("CC", "IC") for ccf in ("CCF", "ICF")]


MAX_LISTED = 8


class ImportFolderError(UserError, ValueError):
    """A counterfactual folder that cannot be imported; the message names the files at fault."""


@dataclass
class Entry:
    """One counterfactual and what its source says about it (``-1``: not stated).

    ``key``: what a mapping CSV's ``file`` column names it by when not its file's name (a row of a PEAL npz, an
    RCSB dataset index); ``image`` / ``source_input``: the counterfactual and the other code base's copy of its
    input as uint8 C x H x W, where the layout has read them (else the image is read from ``file``);
    ``input_view``: what that copy went through on its way to the file (our input is passed through it before
    the two are compared; None: nothing)."""

    file: Path
    sample_id: int = -1
    target: int = -1
    pred: int = -1
    cf_pred: int = -1
    key: str = ""
    label: str = ""
    image: np.ndarray | None = None
    source_input: np.ndarray | None = None
    input_view: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def where(self) -> str:
        """How messages and ``import.json`` name it."""
        return self.label or str(self.file)


def problems_error(path, problems: list[str], what: str) -> ImportFolderError:
    """One error for a list of problems (the first :data:`MAX_LISTED` shown)."""
    shown = "; ".join(problems[:MAX_LISTED])
    more = f"; ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return ImportFolderError(f"{path}: {what}: {shown}{more}")


def need_folder(root: Path, layout: str) -> None:
    if not root.is_dir():
        raise ImportFolderError(f"{root}: not a folder (layout {layout} reads a folder)")


def _image_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def read_info(path: Path) -> dict[str, int]:
    """A DiME / ACE ``Info/<id>.txt``: ``key: value`` lines (label, pred, target, cf pred, ...)."""
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            try:
                out[key.strip()] = int(float(value))
            except ValueError:
                continue
    missing = [k for k in ("pred", "target", "cf pred") if k not in out]
    if missing:
        raise ImportFolderError(f"{path}: Info file lacks {missing} (expected DiME/ACE lines `pred: 0`, "
                                "`target: 1`, `cf pred: 1`)")
    return out


def list_dime(root: Path) -> list[Entry]:
    """Entries of a DiME / ACE experiment folder ``{CC,IC}/{CCF,ICF}/{CF,Info}/``."""
    need_folder(root, "dime")
    groups = [root / cc / ccf for cc, ccf in DIME_GROUPS if (root / cc / ccf / "CF").is_dir()]
    if not groups:
        hint = ""
        if (root / "Results").is_dir():
            exps = sorted(p.name for p in (root / "Results").iterdir() if p.is_dir())
            hint = f" (it has Results/; pass one of {[str(root / 'Results' / e) for e in exps]})"
        raise ImportFolderError(f"{root}: not a DiME/ACE experiment folder: no CC/CCF/CF, CC/ICF/CF, IC/CCF/CF "
                                f"or IC/ICF/CF subfolder{hint}")
    entries, missing_info = [], []
    for g in groups:
        for f in _image_files(g / "CF", IMAGE_SUFFIXES):
            info_path = g / "Info" / f"{f.stem}.txt"
            if not info_path.is_file():
                missing_info.append(str(info_path))
                continue
            info = read_info(info_path)
            entries.append(Entry(f, target=info["target"], pred=info["pred"], cf_pred=info["cf pred"]))
    if missing_info:
        raise problems_error(root, missing_info, f"{len(missing_info)} counterfactual(s) without their Info file")
    return entries


def list_generic(root: Path) -> list[Entry]:
    need_folder(root, "generic")
    return [Entry(f) for f in _image_files(root, IMAGE_SUFFIXES + (".npy",))]


def load_image(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    """One counterfactual as uint8 C x H x W of ``shape``; ImportFolderError (naming the file) otherwise."""
    c, h, w = shape
    if path.suffix.lower() == ".npy":
        try:
            a = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ImportFolderError(f"{path}: unreadable .npy ({e})") from None
        if a.ndim == 3 and a.shape[-1] == c and a.shape[0] != c:
            a = np.transpose(a, (2, 0, 1))
        if a.ndim == 2 and c == 1:
            a = a[None]
        if a.shape != shape:
            raise ImportFolderError(f"{path}: array of shape {a.shape}, expected {shape} (C x H x W)")
        if a.dtype == np.uint8:
            return a
        if not np.issubdtype(a.dtype, np.floating):
            raise ImportFolderError(f"{path}: dtype {a.dtype}; expected uint8, or float in [-1, 1]")
        lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
        if not np.isfinite(a).all() or lo < -1.001 or hi > 1.001:
            raise ImportFolderError(f"{path}: float values in [{lo:.4g}, {hi:.4g}]; expected finite values in "
                                    "[-1, 1] (or uint8)")
        return np.round((np.clip(a, -1, 1) + 1) * 127.5).astype(np.uint8)
    from PIL import Image, UnidentifiedImageError

    want = "L" if c == 1 else "RGB"
    try:
        with Image.open(path) as im:
            im.load()
            mode, size = im.mode, im.size
            a = np.asarray(im)
    except (OSError, SyntaxError, ValueError, UnidentifiedImageError) as e:
        raise ImportFolderError(f"{path}: corrupt or unreadable image ({e})") from None
    if mode != want:
        extra = {"P": "a palette image", "I;16": "a 16-bit image", "I": "a 32-bit integer image",
                 "F": "a float image", "RGBA": "has an alpha channel", "LA": "has an alpha channel",
                 "1": "a 1-bit image"}.get(mode, f"mode {mode}")
        raise ImportFolderError(f"{path}: {extra} (PIL mode {mode!r}); expected 8-bit "
                                f"{'grey (mode L)' if c == 1 else 'RGB'} for this task")
    if size != (w, h):
        raise ImportFolderError(f"{path}: {size[0]}x{size[1]} pixels, expected {w}x{h} (the evaluation split's "
                                "size)")
    return a[None] if a.ndim == 2 else np.ascontiguousarray(np.transpose(a, (2, 0, 1)))
