"""The synthetic ``identity`` network (FVA / FS on synthetic faces).

A small embedding net trained with the CosFace large-margin cosine loss (Wang et al. 2018)
over the training identities; embeddings are L2-normalised. Quality: face verification
accuracy on held-out identities (pairs from the test split; threshold picked on val pairs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core.io import from_uint8
from ..checkpoints import save_trained
from ..shipping.truth_checks import Counterfactuals, flipped_views, mix_views, truth_similarity
from ..training.loops import count_params, loss_summary, train_loop
from .augment import augment
from .nets import SyntheticNet

GATE_VERIFICATION = 0.95
GATE_TRUTH_FVA = 0.95  # the true counterfactual of a query attribute is the same face (FVA threshold 0.5)


class CosFaceTrainer(nn.Module):
    """Embedding net + class prototypes; only ``net`` is saved."""

    def __init__(self, net: SyntheticNet, n_classes: int):
        super().__init__()
        self.net = net
        self.prototypes = nn.Parameter(torch.randn(n_classes, net.feature_dim) * 0.01)

    def loss(self, x: Tensor, y: Tensor, scale: float, margin: float) -> Tensor:
        cos = F.normalize(self.net.features(x), dim=1) @ F.normalize(self.prototypes, dim=1).T
        return F.cross_entropy(scale * (cos - margin * F.one_hot(y, cos.shape[1])), y)


def verification_pairs(identity: Tensor, n_pairs: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """Balanced (same, different)-identity index pairs, seeded; returns ``(i, j, same)``."""
    g = torch.Generator().manual_seed(seed)
    n = identity.shape[0]
    order = torch.argsort(identity, stable=True)
    ids, counts = torch.unique_consecutive(identity[order], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    multi = torch.nonzero(counts >= 2).flatten()
    k = n_pairs // 2
    pick = multi[torch.randint(0, len(multi), (k,), generator=g)]
    a = (torch.rand(k, generator=g) * counts[pick]).long()
    b = (a + 1 + (torch.rand(k, generator=g) * (counts[pick] - 1)).long()) % counts[pick]
    pi, pj = order[starts[pick] + a], order[starts[pick] + b]
    ni = torch.randint(0, n, (4 * k,), generator=g)
    nj = torch.randint(0, n, (4 * k,), generator=g)
    keep = torch.nonzero(identity[ni] != identity[nj]).flatten()[:k]
    ni, nj = ni[keep], nj[keep]
    same = torch.cat([torch.ones(len(pi)), torch.zeros(len(ni))]).bool()
    return torch.cat([pi, ni]), torch.cat([pj, nj]), same


@torch.no_grad()
def embed(net: SyntheticNet, images_uint8: Tensor, batch: int = 256) -> Tensor:
    net.eval()
    out = [F.normalize(net.features(from_uint8(images_uint8[i:i + batch])), dim=1)
           for i in range(0, images_uint8.shape[0], batch)]
    return torch.cat(out)


def verification_accuracy(net: SyntheticNet, val: Any, test: Any, n_pairs: int = 4000) -> dict[str, float]:
    """Threshold on cosine similarity chosen on val pairs (max accuracy), applied to test pairs."""
    def sims(split: Any, seed: int) -> tuple[Tensor, Tensor]:
        e = embed(net, split.images)
        i, j, same = verification_pairs(split.identity, n_pairs, seed)
        return (e[i] * e[j]).sum(1), same

    sv, yv = sims(val, 1)
    cands = torch.sort(sv).values
    accs = torch.stack([((sv > c) == yv).float().mean() for c in cands])
    thr = float(cands[int(torch.argmax(accs))])
    st, yt = sims(test, 2)
    return {"threshold": thr, "val_accuracy": float(accs.max()),
            "test_accuracy": float(((st > thr) == yt).float().mean()),
            "test_pairs": int(len(yt)), "test_mean_cos_same": float(st[yt].mean()),
            "test_mean_cos_diff": float(st[~yt].mean()),
            "test_fva_share_same_cos_gt_0.5": float((st[yt] > 0.5).float().mean())}


def train_identity(settings: dict, splits: dict, out_dir: str | Path, *, dataset: str, progress: bool = True,
                   task_attributes: list[str] = (), counterfactuals: Counterfactuals | None = None,
                   **_: Any) -> dict[str, Any]:
    """CosFace over the training identities. ``cf_views`` > 0: that share of each batch is replaced by the
    same faces with a query attribute flipped (rendered by ``counterfactuals``), same identity label: a face
    recogniser is the same across smiles and ages, so the true counterfactual must keep FVA."""
    train = splits["train"]
    ids, y_all = torch.unique(train.identity, return_inverse=True)
    images, c = train.images, train.images.shape[1]
    torch.manual_seed(settings["seed"])
    net = SyntheticNet(settings["arch"], c, settings["width"], settings["blocks"], embed_dim=settings["embed_dim"],
                       pool=settings["pool"]).to(memory_format=torch.channels_last)
    model = CosFaceTrainer(net, len(ids))
    opt = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"])
    share = float(settings["cf_views"])
    views = flipped_views(counterfactuals, train, task_attributes) if share > 0 else None

    def step(_: int) -> Tensor:
        idx = torch.randint(0, images.shape[0], (settings["batch"],))
        x = augment(from_uint8(mix_views(images, idx, views, share)), settings["noise"], settings["blur"],
                    settings["shift"], settings["flip"])
        return model.loss(x.contiguous(memory_format=torch.channels_last), y_all[idx], settings["scale"],
                          settings["margin"])

    hist = train_loop(model, opt, step, settings["steps"], out_dir, settings["seed"], settings,
                      desc=f"{dataset}/identity", lr=settings["lr"], progress=progress)
    val = splits.get("val", splits["test"])
    ver = verification_accuracy(net, val, splits["test"])
    truth = truth_similarity(lambda u8: embed(net, u8), splits["test"], task_attributes, counterfactuals, threshold=0.5)
    name = f"{dataset}-identity-{settings['arch']}{settings['width']}-cosface-v1"
    config = {"role": "identity", "dataset": dataset, "name": name,
              "net": {"kind": "SyntheticNet", "arch": settings["arch"], "in_channels": c, "width": settings["width"],
                      "blocks": settings["blocks"], "out_dim": 0, "embed_dim": settings["embed_dim"],
                      "pool": settings["pool"]},
              "resolution": int(images.shape[-1]), "train": settings}
    metrics = {"role": "identity", "dataset": dataset, "name": name, "verification": ver,
               "train_identities": int(len(ids)), "steps": settings["steps"], "batch_size": settings["batch"],
               "samples_seen": settings["steps"] * settings["batch"], "params": count_params(net),
               "train_seconds": round(hist["train_seconds"], 2),
               "images_per_second": hist["images_per_second"], "threads": torch.get_num_threads(),
               **loss_summary(hist["losses"]),
               "gates": {f"verification.test_accuracy >= {GATE_VERIFICATION}":
                         ver["test_accuracy"] >= GATE_VERIFICATION}}
    if truth is not None:
        metrics["truth"] = truth
        for a, r in truth.items():
            metrics["gates"][f"truth_fva[{a}] >= {GATE_TRUTH_FVA}"] = r["share_cos_truth_gt_0.5"] >= GATE_TRUTH_FVA
    save_trained(out_dir, net, config, metrics)
    return metrics
