"""`vcebench <verb>`: every step a workflow rule runs is one verb.

Examples::

    vcebench data render synthfaces --split test --n 64 --out resources/data/synthfaces
    vcebench data show synthfaces --n 64 --out grid.png
    vcebench data check celeba --root /data/celeba
    vcebench train classifier --task synthfaces_smile
    vcebench explain --task synthfaces_smile --method fire --shard 0 --n-shards 2
    vcebench evaluate --task synthfaces_smile --method fire
    vcebench profile --task synthfaces_smile --method fire
    vcebench profile --paper-scale celeba
    vcebench report --task synthfaces_smile
    vcebench import --task synthfaces_smile --layout generic --path my_cfs/ --out cfs.npz
    vcebench tune --task synthfaces_smile --data resources/data/synthfaces
    vcebench benchmark --task synthfaces_smile --n 1000
"""

from __future__ import annotations

import argparse
import importlib
import sys

VERBS = ("data", "train", "explain", "import", "evaluate", "profile", "report", "tune", "benchmark")
MODULES = {"import": "import_cf"}  # `import` is a Python keyword


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcebench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    for verb in VERBS:
        module = importlib.import_module(f"vcebench.commands.{MODULES.get(verb, verb)}")
        module.register(sub)
    return parser


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=None, metavar="YAML",
                   help="config file(s), later ones deep-merged over earlier (default: config/config.yaml)")


def main(argv: list[str] | None = None) -> int:
    """Run one verb; user errors (config, data, checkpoints, metrics) print one clear line, exit 2."""
    from .errors import UserError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, FileNotFoundError, PermissionError) as e:
        print(f"vcebench {args.verb}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
