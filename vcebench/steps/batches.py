"""The finished batches of one counterfactual job (``vcebench explain``), saved as each ends, so that an
interrupted job resumes at its last finished batch (:class:`BatchStore`, :func:`batch_key`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import RunSettings


class SavedBatch(NamedTuple):
    """One finished batch: (its Counterfactuals, predictions, targets, uint8 inputs) as ``run_batches`` collects
    them, its generation seconds, its unreadable images by sample id."""

    batch: tuple
    seconds: float
    unreadable: dict[int, str]


class BatchStore:
    """The finished batches of one shard job, each saved as it ends beside the shard
    (``<shard>.batches/batch-<first position>.pt``, atomic), under a key of what decides its counterfactuals
    (:func:`batch_key` and the batch's sample ids) and with the batch's inputs as read: the same job run again
    takes a saved batch instead of generating it, so an interrupted long job (a paper row at its paper's budget:
    hours) resumes at its last finished batch, with the same counterfactuals (each sample's noise is its own
    stream). A batch saved under another key, or from other input bytes (a re-rendered or edited split), is
    generated again; the folder is removed once the shard is written."""

    def __init__(self, out: Path, key: str):
        self.dir, self.key = Path(out).with_suffix(".batches"), key
        self.resumed = 0

    def _path(self, start: int) -> Path:
        return self.dir / f"batch-{start:07d}.pt"

    def _key(self, ids: torch.Tensor) -> str:
        import hashlib

        return hashlib.sha256(self.key.encode() + np.asarray(ids, np.int64).tobytes()).hexdigest()

    def load(self, start: int, ids: torch.Tensor, inputs_u8: np.ndarray) -> SavedBatch | None:
        """The saved batch at ``start`` with these ``ids`` under this key and made from these ``inputs_u8`` (the
        batch as read now, uint8), else None (nothing, or stale)."""
        import torch

        p = self._path(start)
        if not p.is_file():
            return None
        try:
            saved = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 (a damaged file is generated again, never trusted)
            print(f"vcebench explain: {p} unreadable ({type(e).__name__}): generating that batch again",
                  file=sys.stderr)
            return None
        if saved.get("key") != self._key(ids) or not np.array_equal(saved["inputs_u8"].numpy(), inputs_u8):
            return None
        self.resumed += 1
        from methods.base import Counterfactuals

        cf = Counterfactuals(images=saved["images"], flipped=saved["flipped"], steps=saved["steps"],
                             info=saved["info"])
        return SavedBatch((cf, saved["pred"], saved["target"], saved["inputs_u8"].numpy()), float(saved["seconds"]),
                          {int(k): v for k, v in saved["unreadable"].items()})

    def save(self, start: int, ids: torch.Tensor, batch: SavedBatch) -> None:
        import torch

        from ..core.io import atomic_path

        cf, pred, target, inputs_u8 = batch.batch
        record = {"images": cf.images, "flipped": cf.flipped, "steps": cf.steps, "info": cf.info, "pred": pred,
                  "target": target, "inputs_u8": torch.from_numpy(inputs_u8), "seconds": batch.seconds,
                  "unreadable": {str(k): v for k, v in batch.unreadable.items()}, "key": self._key(ids)}
        self.dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(self._path(start)) as tmp:
            torch.save(record, tmp)

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


def batch_key(settings: RunSettings, models) -> str:
    """What decides a shard's counterfactuals besides its sample ids and inputs: the job's resolved settings (their
    sha256: the method, its params, the seed, the batch size), the weights of every network it loaded
    (``checkpoints.weights_fingerprint``), torch's version and the machine's kind (the CPU, ``kernels.cpu_kind``,
    and a GPU's name: kernels round differently between kinds, so a batch made on another one is made again)."""
    import hashlib
    import json

    import torch

    from ..config.kernels import cpu_kind
    from ..models.checkpoints import weights_fingerprint

    weights = {r: weights_fingerprint(getattr(models, r)) for r in sorted(getattr(models, "names", {}) or {})
               if isinstance(getattr(models, r, None), torch.nn.Module)}
    record = {"settings": settings.settings_sha256, "seed": settings.seed, "batch_size": settings.batch_size,
              "torch": torch.__version__, "weights": weights, "cpu": cpu_kind(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
