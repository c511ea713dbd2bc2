"""Multi-attribute classifiers on synthetic data: the explained ``classifier`` (and the shared fitting code).

One network per dataset predicts several binary attributes (sigmoid logits, BCE);
:class:`~vcebench.models.base.BinaryHead` picks the task's query attribute at load time.
Trained with flip / shift / blur / noise augmentation (the guidance loops must not
flip a clean-trained CNN with colour blobs) on identity half A of the training split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config.load import ConfigError
from ...core.io import from_uint8
from ..checkpoints import save_trained
from ..shipping.truth_checks import Counterfactuals, truth_agreement
from ..training.loops import count_params, identity_halves, loss_summary, train_loop
from .augment import augment
from .nets import SyntheticNet
from .settings import DATA_HALVES, resolve_attributes

GATE_ACCURACY = 0.97


def select_rows(split: Any, half: str | None, seed: int = 0) -> Tensor:
    """Row indices of the training split used by a role: ``A``/``B`` identity half, or ``all``."""
    n = split.images.shape[0]
    if half in (None, "all"):
        return torch.arange(n)
    if half not in DATA_HALVES:
        raise ConfigError(f"`data_half` must be one of {list(DATA_HALVES)}, got {half!r}")
    a, b = identity_halves(split.identity, seed)
    return a if half == "A" else b


@torch.no_grad()
def predict_logits(net: nn.Module, images_uint8: Tensor, batch: int = 256) -> Tensor:
    net.eval()
    out = [net(from_uint8(images_uint8[i:i + batch]).contiguous(memory_format=torch.channels_last))
           for i in range(0, images_uint8.shape[0], batch)]
    return torch.cat(out)


def attribute_accuracy(net: nn.Module, split: Any, columns: list[int], names: list[str]) -> dict[str, float]:
    logits = predict_logits(net, split.images)
    labels = split.labels[:, columns]
    acc = ((logits > 0).float() == labels).float().mean(dim=0)
    return {n: float(a) for n, a in zip(names, acc)}


def fit_attributes(settings: dict, splits: dict, out_dir: str | Path, *, role: str, dataset: str,
                   task_attributes: list[str], progress: bool = True, extra_loss=None, extra_module=None,
                   key_prefix: str = "", embed_dim: int = 0) -> tuple[SyntheticNet, dict[str, Any], dict[str, Any]]:
    """Train a multi-attribute ``SyntheticNet`` with BCE (+ ``extra_loss(net, extra, x, y) -> Tensor``).

    ``settings``: the role's recipe, its defaults merged (``CLASSIFIER_DEFAULTS`` or a dict derived from it).
    ``embed_dim``: the width of a linear bottleneck before the head (0: none; not a setting of the
    classifier's or the oracle's recipe, fid_features passes its ``embed_dim``).

    ``extra_module(feature_dim) -> nn.Module``: training-only parameters (optimised and
    checkpointed with the net, not saved with it).

    Returns ``(net, config, metrics)``; the caller adds role-specific metrics and saves.
    """
    train = splits["train"]
    names = resolve_attributes(settings["attributes"], train.attribute_names, task_attributes,
                               f"{key_prefix}.attributes")
    cols = [train.attribute_names.index(a) for a in names]
    rows = select_rows(train, settings["data_half"])
    images, labels = train.images[rows], train.labels[rows][:, cols]
    c = images.shape[1]
    torch.manual_seed(settings["seed"])
    net = SyntheticNet(settings["arch"], c, settings["width"], settings["blocks"], out_dim=len(names),
                       embed_dim=embed_dim, pool=settings["pool"])
    net = net.to(memory_format=torch.channels_last)
    extra = extra_module(net.feature_dim) if extra_module is not None else nn.Identity()
    both = nn.ModuleDict({"net": net, "extra": extra})
    opt = torch.optim.AdamW(both.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"])
    # Balance each attribute's positives (synthetic attributes can be rare, e.g. Pacemaker).
    pos = labels.mean(dim=0).clamp(0.02, 0.98)
    pos_weight = ((1 - pos) / pos).sqrt()

    def step(_: int) -> Tensor:
        idx = torch.randint(0, images.shape[0], (settings["batch"],))
        x = augment(from_uint8(images[idx]), settings["noise"], settings["blur"], settings["shift"],
                    settings["flip"])
        x = x.contiguous(memory_format=torch.channels_last)
        y = labels[idx]
        loss = F.binary_cross_entropy_with_logits(net(x), y, pos_weight=pos_weight)
        if extra_loss is not None:
            loss = loss + extra_loss(net, extra, x, y)
        return loss

    hist = train_loop(both, opt, step, settings["steps"], out_dir, settings["seed"], settings,
                      desc=f"{dataset}/{role}", lr=settings["lr"], progress=progress)
    config = {
        "role": role, "dataset": dataset, "attribute_names": names,
        "net": {"kind": "SyntheticNet", "arch": settings["arch"], "in_channels": c, "width": settings["width"],
                "blocks": settings["blocks"], "out_dim": len(names), "embed_dim": embed_dim,
                "pool": settings["pool"]},
        "resolution": int(images.shape[-1]), "train": settings,
    }
    metrics: dict[str, Any] = {
        "role": role, "dataset": dataset, "attributes": names,
        "val_accuracy": attribute_accuracy(net, splits["val"], cols, names) if "val" in splits else None,
        "test_accuracy": attribute_accuracy(net, splits["test"], cols, names),
        "train_rows": int(images.shape[0]), "data_half": settings["data_half"] or "all",
        "steps": settings["steps"], "batch_size": settings["batch"],
        "samples_seen": settings["steps"] * settings["batch"], "params": count_params(net),
        "train_seconds": round(hist["train_seconds"], 2),
        "images_per_second": hist["images_per_second"], "threads": torch.get_num_threads(),
        **loss_summary(hist["losses"]),
    }
    return net, config, metrics


def train_classifier(settings: dict, splits: dict, out_dir: str | Path, *, dataset: str,
                     task_attributes: list[str], progress: bool = True,
                     counterfactuals: Counterfactuals | None = None, **_: Any) -> dict[str, Any]:
    """Train, gate (test accuracy >= 97% on every task attribute) and save the explained classifier."""
    net, config, metrics = fit_attributes(settings, splits, out_dir, role="classifier", dataset=dataset,
                                          task_attributes=task_attributes, progress=progress,
                                          key_prefix=f"models.{dataset}.classifier")
    config["name"] = f"{dataset}-classifier-{settings['arch']}{settings['width']}-v1"
    gated = {a: metrics["test_accuracy"][a] for a in task_attributes if a in metrics["test_accuracy"]}
    metrics["gates"] = {f"test_accuracy[{a}] >= {GATE_ACCURACY}": acc >= GATE_ACCURACY for a, acc in gated.items()}
    truth = truth_agreement(net, config["attribute_names"], splits["test"], task_attributes, counterfactuals)
    if truth is not None:  # informative: how often the classifier itself flips on the true edit (the truth's FR)
        metrics["truth"] = truth
    metrics["name"] = config["name"]
    save_trained(out_dir, net, config, metrics)
    return metrics
