"""`vcebench data`: render the synthetic datasets, check real ones, look at any of them.

Examples::

    vcebench data render synthfaces --out resources/data/synthfaces
    vcebench data check celeba --root /data/celeba
    vcebench data show synthfaces --n 64 --out grid.png --counterfactual Smiling
    vcebench data bench
    vcebench data describe synthfaces
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..config.tasks import REAL_DATASETS, SYNTHETIC_DATASETS
from . import add_config_arg

ALL = SYNTHETIC_DATASETS + REAL_DATASETS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="render / check / show datasets", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="subverb", required=True)

    r = verbs.add_parser("render", help="render a synthetic dataset to <out>/{train,val,test}.npz + attributes.csv")
    r.add_argument("dataset", choices=SYNTHETIC_DATASETS)
    r.add_argument("--out", required=True, help="output folder, e.g. resources/data/synthfaces")
    r.add_argument("--splits", nargs="+", default=["train", "val", "test"])
    add_config_arg(r)

    c = verbs.add_parser("check", help="validate a dataset folder; prints counts per split")
    c.add_argument("dataset", choices=ALL)
    c.add_argument("--root", default=None, help="dataset root (overrides config datasets.<dataset>.root)")
    c.add_argument("--celeba-root", default=None, help="celebahq: CelebA root with list_eval_partition")
    c.add_argument("--pacemaker-csv", default=None, help="chexpert: CSV with columns Path,Pacemaker")
    c.add_argument("--read-images", action="store_true", help="also decode every image (slow)")
    add_config_arg(c)

    s = verbs.add_parser("show", help="write a grid of images (and ground-truth counterfactuals)")
    s.add_argument("dataset", choices=ALL)
    s.add_argument("--n", type=int, default=64)
    s.add_argument("--out", required=True)
    s.add_argument("--split", default=None, help="default: the evaluation split")
    s.add_argument("--counterfactual", nargs="+", default=None, metavar="ATTR",
                   help="synthetic only: tiles of image, then ground-truth counterfactual and |difference| "
                        "for each ATTR")
    s.add_argument("--resolution", type=int, default=None, help="synthetic only: override the resolution")
    s.add_argument("--root", default=None)
    s.add_argument("--scale", type=int, default=1, help="nearest-neighbour upscaling of the grid")
    add_config_arg(s)

    b = verbs.add_parser("bench", help="rendering speed of the synthetic datasets (images/s)")
    b.add_argument("--n", type=int, default=2048)
    b.add_argument("--resolutions", type=int, nargs="+", default=[32, 64])
    add_config_arg(b)

    d = verbs.add_parser("describe", help="attribute prevalences and correlation matrix of a synthetic dataset")
    d.add_argument("dataset", choices=SYNTHETIC_DATASETS)
    add_config_arg(d)
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> dict:
    from ..core.runtime import setup_torch
    from ..protocol.settings import load_settings

    cfg = load_settings(args.config)
    setup_torch(cfg["threads"], "cpu")
    return cfg


def run(args: argparse.Namespace) -> int:
    return {"render": _render, "check": _check, "show": _show, "bench": _bench,
            "describe": _describe}[args.subverb](args)


def _render(args: argparse.Namespace) -> int:
    from ..data.base import save_split, write_attribute_table
    from ..data.registry import _synthetic_meta, get_synthetic

    cfg = _config(args)
    ds = get_synthetic(cfg, args.dataset)
    out = Path(args.out)
    splits = []
    for name in args.splits:
        t = time.perf_counter()
        split = ds.split(name)
        save_split(split, out, _synthetic_meta(ds))
        splits.append(split)
        print(f"{args.dataset}/{name}: {len(split)} images, {len(split.identity.unique())} identities, "
              f"{split.images.shape[-1]} px, {time.perf_counter() - t:.1f} s")
    write_attribute_table(out / "attributes.csv", splits)
    print(f"wrote {out}/{{{','.join(args.splits)}}}.npz and {out}/attributes.csv")
    return 0


def _check(args: argparse.Namespace) -> int:
    from ..data import DatasetError, load_split
    from ..data.registry import eval_split_name

    cfg = _config(args)
    dc = cfg["datasets"].setdefault(args.dataset, {})
    for key, val in (("root", args.root), ("celeba_root", args.celeba_root), ("pacemaker_csv", args.pacemaker_csv)):
        if val is not None:
            dc[key] = val
    splits = ["train", "val", "test"] + [s for s in (eval_split_name(args.dataset),) if s not in ("val", "test")]
    try:
        for name in splits:
            s = load_split(cfg, args.dataset, name)
            extra = ""
            if args.read_images and len(s):
                for start in range(0, len(s), 256):
                    s.uint8_images(slice(start, start + 256))
                extra = ", all images decoded"
            shape = tuple(s.uint8_images([0]).shape[1:]) if len(s) else ()
            print(f"{args.dataset}/{name}: {len(s)} images, {len(s.identity.unique())} identities, "
                  f"image {shape}{extra}")
        print(f"ok; evaluation split: {eval_split_name(args.dataset)}")
    except DatasetError as e:
        print(f"vcebench data check: {e}", file=sys.stderr)
        return 1
    return 0


def _show(args: argparse.Namespace) -> int:
    import torch
    from torchvision.utils import save_image

    from ..data import DatasetError, get_synthetic, load_split
    from ..data.registry import eval_split_name

    cfg = _config(args)
    if args.resolution and args.dataset in SYNTHETIC_DATASETS:
        cfg["datasets"][args.dataset]["resolution"] = args.resolution
    if args.root:
        cfg["datasets"][args.dataset]["root"] = args.root
    split_name = args.split or eval_split_name(args.dataset)
    if args.dataset in SYNTHETIC_DATASETS:
        ds = get_synthetic(cfg, args.dataset)
        ids = ds.split_sample_ids(split_name)
        ids = ids[torch.linspace(0, len(ids) - 1, min(args.n, len(ids))).round().long()]  # spread over people
        x = ds.render(ids)
        if args.counterfactual:
            tiles = [x]
            for attr in args.counterfactual:
                cf = ds.gt_counterfactuals(ids, attr)
                tiles += [cf, ((cf - x).abs().amax(1, keepdim=True) * 2 - 1).expand_as(x)]
            k = len(tiles)
            grid = torch.stack(tiles, 1).reshape(-1, *x.shape[1:])
            nrow = k * max(1, int(round((len(ids) / k) ** 0.5)))
        else:
            grid, nrow = x, max(1, int(round(len(ids) ** 0.5)))
    else:
        if args.counterfactual:
            raise DatasetError("--counterfactual needs a synthetic dataset (real data has no ground truth)")
        split = load_split(cfg, args.dataset, split_name)
        grid = split.float_images(slice(0, args.n))
        nrow = max(1, int(round(len(grid) ** 0.5)))
    if args.scale > 1:
        grid = torch.nn.functional.interpolate(grid, scale_factor=args.scale, mode="nearest")
    from ..core.io import atomic_path

    out = Path(args.out)
    with atomic_path(out) as tmp:
        save_image((grid + 1) / 2, tmp, format=out.suffix.lstrip(".") or "png", nrow=nrow, padding=1,
                   pad_value=1.0)
    print(f"wrote {out} ({len(grid)} tiles)")
    return 0


def _bench(args: argparse.Namespace) -> int:
    import torch

    from ..data import get_synthetic

    cfg = _config(args)
    print(f"torch threads: {torch.get_num_threads()}")
    for name in SYNTHETIC_DATASETS:
        for res in args.resolutions:
            cfg["datasets"][name]["resolution"] = res
            ds = get_synthetic(cfg, name)
            ids = torch.arange(min(args.n, ds.n_samples))
            ds.render(ids[:64])
            t, c = time.perf_counter(), time.process_time()
            ds.render(ids)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            print(f"{name:<11} {res:>4} px: {len(ids) / wall:8.0f} images/s wall, "
                  f"{len(ids) / cpu:8.0f} images/s per CPU-second")
    return 0


def _describe(args: argparse.Namespace) -> int:
    from ..data import get_synthetic

    cfg = _config(args)
    print(get_synthetic(cfg, args.dataset).describe())
    return 0

