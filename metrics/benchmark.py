"""Time `vcebench evaluate` on N synthetic counterfactuals (a benchmark, not a test).

    python -m metrics.benchmark --task synthfaces_smile --n 1000            # tiny random stand-in networks
    python -m metrics.benchmark --task synthfaces_smile --n 1000 --trained  # resources/models (trained zoo)

Counterfactuals are stand-ins too: each original with a random 8 x 8 patch brightened, so
the timing covers every metric of the task on realistic shapes. Rendering the splits is
done (and timed) separately, as the workflow reads them from the rendered cache.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn


class _TinyNet(nn.Module):
    """Two strided convolutions + global pooling + linear head (random weights, seeded)."""

    def __init__(self, channels: int, out: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.body = nn.Sequential(nn.Conv2d(channels, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, out))
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _BrightnessClassifier(nn.Module):
    """Stand-in classifier: logit of class 1 = ``gain * (mean(x) - threshold)`` (plus a small random CNN term)."""

    def __init__(self, channels: int, seed: int, threshold: float = 0.0, gain: float = 40.0):
        super().__init__()
        self.cnn, self.threshold, self.gain = _TinyNet(channels, 1, seed), threshold, gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logit = self.gain * (x.flatten(1).mean(1) - self.threshold) + 0.1 * self.cnn(x)[:, 0]
        return torch.stack([torch.zeros_like(logit), logit], 1)


class _WithLogit(nn.Module):
    """Adds a brightness logit to a random network of the trained classifier's architecture (timing
    stand-in: the network runs at full cost, the brightness term makes flips possible)."""

    def __init__(self, net: nn.Module, threshold: float, gain: float = 40.0):
        super().__init__()
        self.net, self.threshold, self.gain = net, threshold, gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logit = self.gain * (x.flatten(1).mean(1) - self.threshold) + 1e-3 * self.net(x)[:, 0]
        return torch.stack([torch.zeros_like(logit), logit], 1)


class _Features(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.features(x)


class _Oracle(_TinyNet):
    def __init__(self, channels: int, attribute_names: Sequence[str], seed: int):
        super().__init__(channels, len(attribute_names), seed)
        self.attribute_names = list(attribute_names)


def standin_models(attribute_names: Sequence[str], channels: int = 3, seed: int = 0, threshold: float = 0.0):
    """TaskModels with tiny random networks for every evaluation role (tests, benchmark).

    The classifier thresholds mean brightness at ``threshold`` (pass the median of the data).
    """
    from vcebench.models.base import TaskModels, freeze

    nets = {"classifier": _BrightnessClassifier(channels, seed, threshold),
            "oracle": _Oracle(channels, attribute_names, seed + 1),
            "identity": _TinyNet(channels, 32, seed + 2), "simsiam": _TinyNet(channels, 32, seed + 3),
            "fid_features": _TinyNet(channels, 64, seed + 4)}
    return TaskModels(**{k: freeze(v) for k, v in nets.items()},
                      names={k: f"standin-{k}-seed{seed}" for k in nets})


def arch_standin_models(attribute_names: Sequence[str], channels: int = 3, threshold: float = 0.0):
    """Random-weight networks with the synthetic zoo's default architectures (vcebench/models): the
    timing of every network pass is that of the trained models."""
    from vcebench.models.base import TaskModels, freeze
    from vcebench.models.nets import SimSiamNet, SyntheticNet

    a = len(attribute_names)
    torch.manual_seed(0)
    oracle = SyntheticNet("vgg", channels, 16, 1, out_dim=a)
    oracle.attribute_names = list(attribute_names)
    nets = {"classifier": _WithLogit(SyntheticNet("resnet", channels, 16, 1, out_dim=a), threshold),
            "oracle": oracle, "identity": SyntheticNet("resnet", channels, 16, 1, embed_dim=64),
            "simsiam": SimSiamNet("resnet", channels, 16, 1),
            "fid_features": _Features(SyntheticNet("resnet", channels, 24, 1, embed_dim=128))}
    return TaskModels(**{k: freeze(v) for k, v in nets.items()}, names={k: f"arch-standin-{k}" for k in nets})


def fake_counterfactuals(x: torch.Tensor, sample_ids: torch.Tensor, classifier: nn.Module, path: str | Path,
                         seed: int = 0) -> None:
    """Write a counterfactuals.npz (docs/internals.md): a random square patch of each input is
    brightened (target 1) or darkened (target 0), growing 4, 8, 12, 16 px until the classifier flips."""
    from vcebench.io import save_npz, to_uint8

    g = torch.Generator().manual_seed(seed)
    n, _, h, w = x.shape
    with torch.no_grad():
        pred = torch.cat([classifier(x[s:s + 256]).argmax(1) for s in range(0, n, 256)])
    sign = (1 - 2 * pred).float().view(n, 1, 1)  # + brightens towards class 1
    cf, todo = x.clone(), torch.ones(n, dtype=torch.bool)
    corner = torch.randint(0, max(1, h - 16), (n, 2), generator=g)
    for size in (4, 8, 12, 16):
        for i in torch.nonzero(todo).view(-1).tolist():
            r, c = corner[i].tolist()
            cf[i, :, r:r + size, c:c + size] = (x[i, :, r:r + size, c:c + size] + sign[i]).clamp(-1, 1)
        with torch.no_grad():
            todo = classifier(cf).argmax(1) == pred
    flipped = ~todo
    save_npz(path, sample_id=sample_ids, cf=to_uint8(cf), target=1 - pred, pred=pred, flipped=flipped,
             steps=torch.ones(n, dtype=torch.long), failed=torch.zeros(n, dtype=torch.bool))


def main(argv: list[str] | None = None) -> int:
    from vcebench.commands.evaluate import evaluate_task
    from vcebench.config import load_config
    from vcebench.data import eval_split_name, load_split
    from vcebench.runtime import setup_torch
    from vcebench.tasks import get_task

    from .fid import compute_reference

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="synthfaces_smile")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--trained", action="store_true", help="use the trained networks in --models")
    p.add_argument("--tiny", action="store_true", help="tiny random networks instead of random networks with "
                                                        "the synthetic zoo's architectures")
    p.add_argument("--models", default="resources/models")
    p.add_argument("--data", default=None, help="rendered dataset cache (default: render in memory)")
    p.add_argument("--config", action="append", default=None)
    p.add_argument("--out", default=None, help="write the metrics.json here")
    args = p.parse_args(argv)

    cfg = load_config(args.config)
    setup_torch(cfg.get("threads"))
    task = get_task(cfg, args.task)
    t0 = time.perf_counter()
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), args.data)
    load_split(cfg, task.dataset, "train", args.data)  # memoised for CD
    t_data = time.perf_counter() - t0
    if len(split) < args.n:
        raise SystemExit(f"evaluation split has {len(split)} images < --n {args.n}")
    if args.trained:
        from metrics import required_roles
        from vcebench.models import load_task_models

        models = load_task_models(cfg, task, roles=required_roles(task), model_dir=args.models)
    x = split.float_images(slice(0, args.n))
    if not args.trained:
        build = standin_models if args.tiny else arch_standin_models
        models = build(split.attribute_names, split.images.shape[1], threshold=float(x.flatten(1).mean(1).median()))
    with tempfile.TemporaryDirectory() as tmp:
        cfs, ref = Path(tmp) / "counterfactuals.npz", Path(tmp) / "fid_ref.npz"
        fake_counterfactuals(x, split.sample_ids[:args.n], models.classifier, cfs)
        t1 = time.perf_counter()
        bs = int(cfg["metrics"]["batch_size"])
        compute_reference((split.float_images(slice(s, s + bs)) for s in range(0, len(split), bs)),
                          split.sample_ids, models.fid_features, models.names["fid_features"]).save(ref)
        t_ref = time.perf_counter() - t1
        t2, c2 = time.perf_counter(), time.process_time()
        result = evaluate_task(cfg, task, "benchmark", str(cfs), fid_ref=str(ref), data_dir=args.data,
                               models=models)
        t_eval, c_eval = time.perf_counter() - t2, time.process_time() - c2
    result["benchmark"] = {"n": args.n, "seconds_data": t_data, "seconds_reference": t_ref,
                           "n_reference": len(split), "seconds_evaluate": t_eval,
                           "cpu_seconds_evaluate": c_eval, "threads": torch.get_num_threads(),
                           "models": "trained" if args.trained else ("tiny" if args.tiny else "arch") + " stand-ins"}
    if args.out:
        from vcebench.io import write_json

        write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("metrics", "n", "seconds", "benchmark")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
