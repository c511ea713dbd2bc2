"""Shipping a trained network set (``vcebench models ship``): copy each trained role folder of a model
directory into ``networks/<set>/<dataset>/<role>/`` with its card (``vcebench.models.shipped``).

The card's recipe is the config's; a folder whose recorded training settings disagree with it is refused
(the card would lie). Quality numbers are the ones its trainer measured (gates, accuracy, agreement with
the true counterfactuals, FID of the generators once re-evaluated), and for the generators the training
curve of ``vcebench models curve`` when ``curves`` holds one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..config.load import ConfigError
from ..models.shipped import write_card

SKIP_PARTS = ("checkpoint", "snapshots")
QUALITY_KEYS = ("gates", "test_accuracy", "test_mean_accuracy", "truth", "verification", "fooling",
                "knn10_test_accuracy", "fid_train_vs_test", "distance_sanity", "eval", "eval_fid", "quality_gate",
                "test_cos_two_views_same_image", "test_cos_two_views_different_images",
                "test_cos_clean_different_images", "collapse_check_std_x_sqrt_dim")


def recorded_settings(folder: Path) -> dict[str, Any]:
    """The training settings a trained folder's ``config.json`` recorded (``config`` for ddpm / pmf,
    ``train`` for the small roles)."""
    c = json.loads((folder / "config.json").read_text())
    return c.get("config") or c.get("train") or {}


def check_recipe(cfg: dict, dataset: str, role: str, folder: Path) -> None:
    """Every key of the config's recipe for ``dataset``/``role`` equals what ``folder`` was trained with."""
    spec = ((cfg.get("models") or {}).get(dataset) or {}).get(role) or {}
    have = json.loads(json.dumps(recorded_settings(folder), default=str))
    want = json.loads(json.dumps(spec, default=str))
    bad = [f"{k}: config {want[k]!r}, trained {have.get(k)!r}" for k in sorted(want) if have.get(k) != want[k]]
    if bad:
        raise ConfigError(f"{folder} was not trained with the config's recipe `models.{dataset}.{role}` "
                          f"({'; '.join(bad[:4])}); ship it with the config it was trained with")


def trained_info(metrics: dict[str, Any], where: str) -> dict[str, Any]:
    t = metrics.get("training", metrics)
    keys = ("steps", "batch_size", "train_seconds", "images_per_second", "device", "threads", "amp",
            "peak_gpu_memory_mib", "loss_last")
    return {"where": where, **{k: t[k] for k in keys if t.get(k) is not None}}


def ship(cfg: dict, models: str | Path, out: str | Path, set_name: str, where: str,
         curves: str | Path | None = None, roles: list[str] | None = None) -> list[dict[str, Any]]:
    """Copy every trained ``models/<dataset>/<role>`` (of the config's synthetic datasets) into
    ``out/<dataset>/<role>`` with a card; returns the cards."""
    from ..config.tasks import SYNTHETIC_DATASETS

    cards = []
    for ds in SYNTHETIC_DATASETS:
        for folder in sorted(Path(models, ds).glob("*/metrics.json")):
            src, role = folder.parent, folder.parent.name
            if roles and role not in roles:
                continue
            check_recipe(cfg, ds, role, src)
            dst = Path(out) / ds / role
            if dst.exists():
                shutil.rmtree(dst)
            for f in sorted(src.rglob("*")):
                if f.is_file() and not any(p in SKIP_PARTS for p in f.relative_to(src).parts):
                    (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, dst / f.relative_to(src))
            metrics = json.loads(folder.read_text())
            quality = {k: metrics[k] for k in QUALITY_KEYS if k in metrics}
            curve = None
            cpath = Path(curves, ds, role, "curve.json") if curves else None
            if cpath is not None and cpath.is_file():
                from .curves import to_markdown

                c = json.loads(cpath.read_text())
                curve = {"rows": c["rows"], "plateau": c["plateau"], "plateau_samples_kid": c["plateau_samples_kid"],
                         "scoring": c["scoring"], "markdown": to_markdown(c)}
            cards.append(write_card(dst, cfg, ds, role, set_name, trained_info(metrics, where), quality, curve))
    return cards
