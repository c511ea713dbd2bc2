"""`vcebench import --layout peal`: the ``validation_tracked_values.npz`` that PEAL's CFKD adaptor writes (SCE, and
the ACE / DiME / FastDiME / TIME it bundles, run through ``run_cfkd.py``).

Followed: Explainable-AI-Berlin/pytorch_explain_and_adapt_library at commit 8307ec320ca0 (2026-04-14),
``peal/adaptors/counterfactual_knowledge_distillation.py``:

- line 1571: the file is ``<base_dir>/<finetune_iteration>/validation_tracked_values.npz`` (iteration ``0``
  before any finetuning); lines 1661-1684 write it only at ``tracking_level >= 3``, with ``np.savez`` of every
  tracked key whose values are tensors (``torch.stack(...).numpy()``) or Python numbers (``np.array``);
- lines 394-404: the tracked keys ``x_counterfactual_list``, ``y_source_list``, ``y_target_list``,
  ``y_target_end_confidence_list``, ``x_list``, ``y_list``, ``x_attribution_list``,
  ``y_target_start_confidence_list``, ``cluster_list`` (more at higher tracking levels; lists of strings such as
  ``collage_path_list`` are not saved).

``peal/training/training_utils.py`` lines 65-133 fill them from the validation loader in its order, full batches
only (line 71: a last, smaller batch is not explained), with ``y_source_list`` = the predictor's class and
``y_target_list`` = ``(y_source + 1) % output_size`` (line 104); ``x_list`` is the input as the loader gives it
(PEAL's "processed" format: [0, 1] as ``ToTensor`` makes it, unless the data config sets a ``normalization``).
``peal/explainers/counterfactual_explainer.py`` lines 1200-1206: with several attempts per input
(``num_attempts`` x ``parallel_attempts``, SCE's default is 2) every key is repeated so that row ``k`` of
``x_list`` is always the input of row ``k`` of ``x_counterfactual_list``. No row records the input's index in the
dataset, so a mapping CSV (``file`` = the row number) is required; its empty ``sample_id`` leaves a row out (the
other attempt of an input, say).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .import_layouts import Entry, ImportFolderError

FILE_NAME = "validation_tracked_values.npz"
IMAGE_KEYS = ("x_counterfactual_list", "x_list")  # required: the counterfactuals and their inputs
LABEL_KEYS = ("y_source_list", "y_target_list", "y_target_end_confidence_list")  # used where present
RANGE_SLACK = 1e-3


def peal_file(root: Path) -> Path:
    """``root`` itself (the npz) or the ``validation_tracked_values.npz`` in it."""
    if root.is_file():
        return root
    path = root / FILE_NAME
    if not path.is_file():
        iters = sorted(p.name for p in root.iterdir() if (p / FILE_NAME).is_file())
        hint = f" (its finetune iterations {iters} have one: pass {root / iters[0]})" if iters else ""
        raise ImportFolderError(f"{root}: no {FILE_NAME} (PEAL writes it at tracking_level >= 3 into "
                                f"<base_dir>/<finetune_iteration>/){hint}")
    return path


def _to_uint8(a: np.ndarray, key: str, path: Path) -> np.ndarray:
    """PEAL's float images in [0, 1] -> uint8 (round half to even, as ``np.round``)."""
    if not np.issubdtype(a.dtype, np.floating):
        raise ImportFolderError(f"{path}: `{key}` has dtype {a.dtype}; PEAL writes float32 images in [0, 1]")
    if not np.isfinite(a).all():
        raise ImportFolderError(f"{path}: `{key}` holds NaN or infinite values")
    lo, hi = float(a.min()), float(a.max())
    if lo < -RANGE_SLACK or hi > 1 + RANGE_SLACK:
        raise ImportFolderError(f"{path}: `{key}` values in [{lo:.4g}, {hi:.4g}], expected [0, 1] (PEAL's data "
                                "config without `normalization`; a normalized run's arrays are not images)")
    return np.round(np.clip(a, 0, 1) * 255).astype(np.uint8)


def read_arrays(path: Path, shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """The keys this layout uses, checked: images N x C x H x W of ``shape``, labels of length N."""
    try:
        with np.load(path, allow_pickle=False) as z:
            found = list(z.files)
            missing = [k for k in IMAGE_KEYS if k not in found]
            if missing:
                raise ImportFolderError(f"{path}: lacks {missing} (has {found}); not a PEAL tracked-values file")
            arrays = {k: z[k] for k in IMAGE_KEYS + LABEL_KEYS if k in found}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ImportFolderError(f"{path}: unreadable npz ({e})") from None
    n = len(arrays["x_counterfactual_list"])
    for k in IMAGE_KEYS:
        if arrays[k].shape != (n, *shape):
            raise ImportFolderError(f"{path}: `{k}` has shape {arrays[k].shape}, expected (N, C, H, W) = "
                                    f"({n}, {', '.join(map(str, shape))}) (the evaluation split's C x H x W)")
    for k in LABEL_KEYS:
        if k in arrays and arrays[k].shape != (n,):
            raise ImportFolderError(f"{path}: `{k}` has shape {arrays[k].shape}, expected ({n},) (one per row of "
                                    "`x_counterfactual_list`)")
    return arrays


def list_peal(root: Path, shape: tuple[int, int, int]) -> list[Entry]:
    """One entry per row of the npz (key: the row number), its counterfactual and input read; the target is
    ``y_target_list``, the other code base's prediction ``y_source_list``, and its prediction of the
    counterfactual the target where ``y_target_end_confidence_list`` (the softmax of the target) is at least 0.5,
    else the source."""
    path = peal_file(root)
    arrays = read_arrays(path, shape)
    cf = _to_uint8(arrays["x_counterfactual_list"], "x_counterfactual_list", path)
    x = _to_uint8(arrays["x_list"], "x_list", path)
    n = len(cf)
    minus = np.full(n, -1, np.int64)
    target = arrays.get("y_target_list", minus).astype(np.int64)
    source = arrays.get("y_source_list", minus).astype(np.int64)
    conf = arrays.get("y_target_end_confidence_list")
    cf_pred = minus if conf is None or (target < 0).any() else np.where(conf >= 0.5, target, source)
    return [Entry(path, target=int(target[k]), pred=int(source[k]), cf_pred=int(cf_pred[k]), key=str(k),
                  label=f"{path} row {k}", image=cf[k], source_input=x[k]) for k in range(n)]
