"""`vcebench import --layout rcsb`: a run of RCSB's ``src/main.py`` (region-constrained counterfactual Schrödinger
bridge, ICLR 2025). RCSB saves no counterfactual files of its own: every image goes to Weights & Biases, whose
run folder (online or ``WANDB_MODE=offline``) keeps them as PNG files. That folder is the layout.

Followed: clguo/rcsb at commit 1ebd7b2fa068 (2025-09-05; sobieskibj/rcsb's code), and wandb 0.15.4, the version
its ``environment.yml`` pins (line 374):

- ``src/utils/misc.py`` lines 19-41: ``wandb.init(dir=<cwd>/outputs/<date>/<time>, config=<the whole resolved
  Hydra config>)``; wandb writes ``wandb/[offline-]run-<stamp>-<id>/files/config.yaml`` (``wandb/sdk/internal/
  sender.py`` 871-873; ``wandb/sdk/lib/config_util.py`` 52-56 and 81-95: ``wandb_version: 1``, then each top-level
  key as ``{desc: null, value: ...}``);
- ``src/experiment/cava.py`` lines 83-135: per batch of the (unshuffled) loader, ``log_imgs(batch_idx,
  batch_imgs, "images")`` (line 93) and, after inpainting, ``log_imgs(batch_idx, batch_inps, "inpaints")``
  (line 135); ``src/utils/logs.py`` lines 22-28: one ``wandb.log({tag: wandb.Image(make_grid(...))})`` per input,
  the grid holding its ``exp.n_inpaints`` x ``exp.batch_multip`` counterfactuals (one: the image itself);
- wandb: each ``wandb.log`` call is one step (``wandb/sdk/wandb_run.py`` 1547-1551) and an image logged at a step
  is the file ``files/media/images/<key>_<step>_<sha256 of the PNG, 20 hex>.png`` (``data_types/base_types/
  media.py`` 28-31 and 91-140, ``data_types/image.py`` 347-348). So the k-th ``inpaints`` file by step number is
  the k-th input's counterfactual, and the k-th ``images`` file its input;
- ``src/dataset/celeba.py`` / ``celebahq.py`` lines 70-101: the k-th input is dataset index ``k + n_skip``
  (config ``dataset.dataset.n_skip``; ``imgs/<index>/img.png``), read as ``read_image(...) / 255``;
  ``src/inpainters/cddb.py`` lines 180-182: counterfactuals clamped to [0, 1];
- ``wandb/sdk/data_types/image.py`` lines 285-293: a tensor becomes ``torchvision.utils.make_grid(t,
  normalize=True)`` (stretched to its own [min, max]; one channel becomes three) and then
  ``mul(255).clamp(0, 255).byte()`` (truncated, not rounded). The PNG is therefore an 8-bit copy, exact up to that
  truncation for an image spanning [0, 1] and contrast-stretched otherwise: the scores are those of the PNGs;
- ``src/evaluation/cf_loss.py`` lines 109-145 (the ``CFLoss`` metric of the shipped evaluation configs) leave
  ``files/artifacts/prob_lpips_vals_idx-<index>.pt`` per input: where present, their indices must be exactly
  ``n_skip + k``.

The record's key (a mapping CSV's ``file`` column) is that dataset index; without a mapping it is the sample id.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from .import_layouts import Entry, ImportFolderError, load_image, need_folder, problems_error

LOGGED = re.compile(r"^(?P<key>images|inpaints)_(?P<step>\d+)_[0-9a-f]{20}\.png$")
ARTIFACT = re.compile(r"^prob_lpips_vals_idx-(?P<index>\d+)\.pt$")


def files_folder(root: Path) -> Path:
    """The wandb run's ``files`` folder: ``root`` itself or ``root/files``."""
    need_folder(root, "rcsb")
    for d in (root, root / "files"):
        if (d / "config.yaml").is_file():
            return d
    raise ImportFolderError(f"{root}: no config.yaml here or in files/: not a wandb run folder of RCSB's "
                            "src/main.py (pass outputs/<date>/<time>/wandb/[offline-]run-<stamp>-<id>)")


def run_settings(path: Path) -> dict[str, int]:
    """``n_inpaints``, ``batch_multip`` and ``n_skip`` from wandb's ``config.yaml`` of the run."""
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ImportFolderError(f"{path}: not YAML ({e})") from None
    wanted = {"n_inpaints": ("exp", "n_inpaints"), "batch_multip": ("exp", "batch_multip"),
              "n_skip": ("dataset", "dataset", "n_skip")}
    out, missing = {}, []
    for name, (top, *rest) in wanted.items():
        node = (cfg or {}).get(top, {}) if isinstance(cfg, dict) else {}
        node = node.get("value", {}) if isinstance(node, dict) else {}
        for k in rest:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, bool) or not isinstance(node, int):
            missing.append(".".join((top, *rest)))
        else:
            out[name] = node
    if missing:
        raise ImportFolderError(f"{path}: no integer {missing} (wandb's config.yaml of an RCSB run holds "
                                "`exp: {value: {n_inpaints: ...}}` and `dataset: {value: {dataset: {n_skip: ...}}}`)")
    return out


def logged(media: Path, key: str) -> list[tuple[int, Path]]:
    """(step, file) of every image logged under ``key``, by step."""
    found = [(int(m["step"]), p) for p in media.iterdir() if (m := LOGGED.match(p.name)) and m["key"] == key]
    return sorted(found)


def wandb_view(a: np.ndarray) -> np.ndarray:
    """A uint8 C x H x W image as wandb stores the [0, 1] tensor of it (``data_types/image.py`` 291-293):
    stretched to its own [min, max] as ``torchvision.utils.make_grid(normalize=True)`` does, times 255, truncated."""
    t = a.astype(np.float32) / 255
    lo, hi = t.min(), t.max()
    return np.clip((t - lo) / max(hi - lo, 1e-5) * 255, 0, 255).astype(np.uint8)


def read_png(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    """A logged PNG as uint8 C x H x W: wandb writes RGB; a grey task's image must have three equal channels."""
    a = load_image(path, (3, *shape[1:]))
    if shape[0] == 1:
        if not ((a[0] == a[1]) & (a[1] == a[2])).all():
            raise ImportFolderError(f"{path}: channels differ; this task's images are grey (RCSB/wandb repeat a "
                                    "grey image over three channels)")
        return a[:1]
    return a


def list_rcsb(root: Path, shape: tuple[int, int, int]) -> list[Entry]:
    """One entry per ``inpaints`` image (key: its dataset index), with the ``images`` input logged before it."""
    files = files_folder(root)
    run = run_settings(files / "config.yaml")
    per_input = run["n_inpaints"] * run["batch_multip"]
    if per_input != 1:
        raise ImportFolderError(f"{files}: each `inpaints` image is a grid of {per_input} counterfactuals "
                                f"(exp.n_inpaints={run['n_inpaints']} x exp.batch_multip={run['batch_multip']}); "
                                "import a run with exp.n_inpaints=1 exp.batch_multip=1 (one per input)")
    media = files / "media" / "images"
    if not media.is_dir():
        raise ImportFolderError(f"{files}: no media/images/ (no image was logged)")
    cfs, inputs = logged(media, "inpaints"), logged(media, "images")
    if not cfs:
        return []
    if len(inputs) != len(cfs):
        raise ImportFolderError(f"{media}: {len(cfs)} inpaints_*.png but {len(inputs)} images_*.png (one of each per "
                                "input): an incomplete run folder, the positions would not line up")
    late = [f"{c.name} (step {sc}) is not after {i.name} (step {si})"
            for (si, i), (sc, c) in zip(inputs, cfs) if sc <= si]
    if late:
        raise problems_error(media, late, "counterfactuals out of step with their inputs")
    index = [run["n_skip"] + k for k in range(len(cfs))]
    arts = {int(m["index"]) for p in (files / "artifacts").glob("*.pt") if (m := ARTIFACT.match(p.name))}
    if arts and arts != set(index):
        extra, lacking = sorted(arts - set(index))[:10], sorted(set(index) - arts)[:10]
        raise ImportFolderError(f"{files / 'artifacts'}: the CFLoss records name dataset indices {extra} not "
                                f"logged, and miss {lacking} (expected n_skip + k: {index[0]}..{index[-1]})")
    entries, bad = [], []
    for i, (_, c), (_, x) in zip(index, cfs, inputs):
        try:
            entries.append(Entry(c, key=str(i), label=f"{c} (index {i})", image=read_png(c, shape),
                                 source_input=read_png(x, shape), input_view=wandb_view))
        except ImportFolderError as err:
            bad.append(str(err))
    if bad:
        raise problems_error(media, bad, f"{len(bad)} bad image file(s)")
    return entries
