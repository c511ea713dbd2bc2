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
    add_config_arg(r, resolved=True)

    c = verbs.add_parser("check", help="validate a dataset folder; prints counts per split")
    c.add_argument("dataset", choices=ALL)
    c.add_argument("--root", default=None, help="dataset root (overrides config datasets.<dataset>.root)")
    c.add_argument("--celeba-root", default=None, help="celebahq: CelebA root with list_eval_partition")
    c.add_argument("--pacemaker-csv", default=None, help="chexpert: CSV with columns Path,Pacemaker")
    c.add_argument("--read-images", action="store_true", help="also decode every image (slow)")
    c.add_argument("--allow-modified-splits", action="store_true",
                   help="a split or label file whose sha256 differs from the expected or first-seen one is a "
                        "warning, not an error (your own split; config key `datasets.<dataset>.allow_modified_splits`)")
    c.add_argument("--fingerprints", default=None, metavar="JSON",
                   help="where first-seen sha256 of split files are recorded "
                        "(default resources/data/fingerprints.json)")
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
    from ..steps.data import settings

    return settings(args.config, getattr(args, "resolved_config", None))


def run(args: argparse.Namespace) -> int:
    return {"render": _render, "check": _check, "show": _show, "bench": _bench,
            "describe": _describe}[args.subverb](args)


def _render(args: argparse.Namespace) -> int:
    from ..steps.data import render

    out = Path(args.out)
    for name, split, seconds in render(_config(args), args.dataset, out, args.splits):
        print(f"{args.dataset}/{name}: {len(split)} images, {len(split.identity.unique())} identities, "
              f"{split.images.shape[-1]} px, {seconds:.1f} s")
    print(f"wrote {out}/{{{','.join(args.splits)}}}.npz and {out}/attributes.csv")
    return 0


def _check(args: argparse.Namespace) -> int:
    """Each split and label file's fingerprint (match / mismatch / unknown, first seen), then each split's
    counts; exit status 1 with one line on the first problem (a changed split file among them)."""
    from ..steps.data import DatasetError, check, eval_split_name, split_files

    cfg = _config(args)
    roots = {"root": args.root, "celeba_root": args.celeba_root, "pacemaker_csv": args.pacemaker_csv}
    try:
        for f in split_files(cfg, args.dataset, roots, args.allow_modified_splits or None, args.fingerprints):
            print(f"{args.dataset}: {f.line()}")
        for s in check(cfg, args.dataset, roots, args.read_images):
            extra = ", all images decoded" if s["decoded"] else ""
            print(f"{args.dataset}/{s['name']}: {s['n']} images, {s['identities']} identities, "
                  f"image {s['shape']}{extra}")
        print(f"ok; evaluation split: {eval_split_name(args.dataset)}")
    except DatasetError as e:
        print(f"vcebench data check: {e}", file=sys.stderr)
        return 1
    return 0


def _show(args: argparse.Namespace) -> int:
    from ..steps.data import show

    out = Path(args.out)
    n = show(_config(args), args.dataset, out, args.n, args.split, args.counterfactual, args.resolution, args.root,
             args.scale)
    print(f"wrote {out} ({n} tiles)")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ..steps.data import bench, torch_threads

    cfg = _config(args)
    print(f"torch threads: {torch_threads()}")
    for name, res, n, wall, cpu in bench(cfg, args.n, args.resolutions):
        print(f"{name:<11} {res:>4} px: {n / wall:8.0f} images/s wall, {n / cpu:8.0f} images/s per CPU-second")
    return 0


def _describe(args: argparse.Namespace) -> int:
    from ..steps.data import describe

    print(describe(_config(args), args.dataset))
    return 0
