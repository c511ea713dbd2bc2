"""The synthetic ``simsiam`` role (S^3 on synthetic x-rays).

A small SimSiam (Chen & He 2021, facebookresearch/simsiam): backbone + 3-layer projector +
2-layer predictor, symmetric negative-cosine loss with stop-gradient, on two augmented views
(random resized crop, brightness/contrast, blur, noise). The embedding used by S^3 is the
projector output without the predictor, as in ACE ``eval_utils/simsiam.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...core.io import from_uint8
from ..checkpoints import save_trained
from ..shipping.truth_checks import Counterfactuals, flipped_views, mix_views, truth_similarity
from ..training.loops import count_params, loss_summary, train_loop
from .augment import augment
from .nets import SimSiamNet


def random_resized_crop(x: Tensor, min_scale: float) -> Tensor:
    """Per-sample crop of area fraction U(min_scale, 1) at a random position, resized back (bilinear)."""
    n = x.shape[0]
    s = torch.sqrt(min_scale + (1 - min_scale) * torch.rand(n))
    t = (1 - s)[:, None] * (2 * torch.rand(n, 2) - 1)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 1, 1], theta[:, :, 2] = s, s, t
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def view(x: Tensor, st: dict) -> Tensor:
    x = random_resized_crop(x, st["min_scale"])
    n = x.shape[0]
    gain = 1 + st["jitter"] * (2 * torch.rand(n, 1, 1, 1) - 1)
    bias = st["jitter"] * (2 * torch.rand(n, 1, 1, 1) - 1)
    x = (x * gain + bias).clamp(-1, 1)
    return augment(x, st["noise"], st["blur"]).contiguous(memory_format=torch.channels_last)


@torch.no_grad()
def embed(net: SimSiamNet, images_uint8: Tensor, batch: int = 256) -> Tensor:
    net.eval()
    return torch.cat([net(from_uint8(images_uint8[i:i + batch])) for i in range(0, images_uint8.shape[0], batch)])


@torch.no_grad()
def knn_accuracy(train_e: Tensor, train_y: Tensor, test_e: Tensor, test_y: Tensor, k: int = 10) -> Tensor:
    """Cosine k-NN majority vote per attribute column (a standard SSL probe)."""
    a, b = F.normalize(train_e, dim=1), F.normalize(test_e, dim=1)
    nn_idx = (b @ a.T).topk(k, dim=1).indices
    vote = train_y[nn_idx].mean(dim=1) > 0.5
    return (vote.float() == test_y).float().mean(dim=0)


@torch.no_grad()
def invariance_check(net: SimSiamNet, images_uint8: Tensor, clean_e: Tensor, st: dict) -> dict[str, float]:
    """Embedding sanity numbers (eval mode, as used by S^3), comparing like with like.

    ``views_same`` vs ``views_different``: cosine of two augmented views of the same image vs of two
    different images (a trained SimSiam has same >> different); ``clean_different``: mean off-diagonal
    cosine of un-augmented test images (what S^3 compares; near 1 = collapsed); plus the
    per-dimension std x sqrt(dim) of the normalised embeddings (~1 healthy, ~0 collapsed;
    Chen & He 2021, Sec. 4.1).
    """
    net.eval()
    gen = torch.get_rng_state()
    torch.manual_seed(0)
    x = from_uint8(images_uint8)
    z1, z2 = F.normalize(net(view(x, st)), dim=1), F.normalize(net(view(x, st)), dim=1)
    torch.set_rng_state(gen)
    perm = torch.roll(torch.arange(x.shape[0]), 1)
    zn = F.normalize(clean_e, dim=1)
    n = zn.shape[0]
    off = ((zn @ zn.T).sum() - n) / max(n * (n - 1), 1)
    return {"test_cos_two_views_same_image": float((z1 * z2).sum(1).mean()),
            "test_cos_two_views_different_images": float((z1 * z2[perm]).sum(1).mean()),
            "test_cos_clean_different_images": float(off),
            "collapse_check_std_x_sqrt_dim": float(zn.std(dim=0).mean() * zn.shape[1] ** 0.5)}


def train_simsiam(settings: dict, splits: dict, out_dir: str | Path, *, dataset: str, progress: bool = True,
                  task_attributes: list[str] = (), counterfactuals: Counterfactuals | None = None,
                  **_: Any) -> dict[str, Any]:
    """SimSiam on two augmented views. ``cf_views`` > 0: that share of the second views starts from the same
    patient with a query attribute flipped (rendered by ``counterfactuals``): the same patient with or
    without the device is one instance, so S^3 scores the true counterfactual as close."""
    train = splits["train"]
    images, c = train.images, train.images.shape[1]
    torch.manual_seed(settings["seed"])
    net = SimSiamNet(settings["arch"], c, settings["width"], settings["blocks"], settings["dim"],
                     settings["pred_dim"]).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=settings["lr"], momentum=0.9, weight_decay=settings["weight_decay"])

    share = float(settings["cf_views"])
    views = flipped_views(counterfactuals, train, task_attributes) if share > 0 else None

    def step(_: int) -> Tensor:
        idx = torch.randint(0, images.shape[0], (settings["batch"],))
        x = from_uint8(images[idx])
        x2 = from_uint8(mix_views(images, idx, views, share)) if views is not None else x
        z1, z2 = net(view(x, settings)), net(view(x2, settings))
        p1, p2 = net.predictor(z1), net.predictor(z2)
        return -0.5 * (F.cosine_similarity(p1, z2.detach()).mean() + F.cosine_similarity(p2, z1.detach()).mean())

    hist = train_loop(net, opt, step, settings["steps"], out_dir, settings["seed"], settings,
                      desc=f"{dataset}/simsiam", lr=settings["lr"], warmup=20, progress=progress)
    test = splits["test"]
    n_tr = min(4000, images.shape[0])
    e_tr, e_te = embed(net, images[:n_tr]), embed(net, test.images)
    acc = knn_accuracy(e_tr, train.labels[:n_tr], e_te, test.labels)
    metrics = {
        "role": "simsiam", "dataset": dataset,
        "knn10_test_accuracy": {a: float(v) for a, v in zip(train.attribute_names, acc)},
        **invariance_check(net, test.images[:256], e_te, settings),
        "steps": settings["steps"], "batch_size": settings["batch"],
        "samples_seen": settings["steps"] * settings["batch"], "params": count_params(net),
        "train_seconds": round(hist["train_seconds"], 2),
        "images_per_second": hist["images_per_second"], "threads": torch.get_num_threads(),
        **loss_summary(hist["losses"]),
    }
    truth = truth_similarity(lambda u8: embed(net, u8), test, task_attributes, counterfactuals)
    if truth is not None:
        metrics["truth"] = truth
    name = f"{dataset}-simsiam-{settings['arch']}{settings['width']}-v1"
    metrics["name"] = name
    config = {"role": "simsiam", "dataset": dataset, "name": name,
              "net": {"kind": "SimSiamNet", "arch": settings["arch"], "in_channels": c, "width": settings["width"],
                      "blocks": settings["blocks"], "dim": settings["dim"], "pred_dim": settings["pred_dim"]},
              "resolution": int(images.shape[-1]), "train": settings}
    save_trained(out_dir, net, config, metrics)
    return metrics
