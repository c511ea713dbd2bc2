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
    vcebench tune --task synthfaces_smile --data resources/data/synthfaces
"""

from __future__ import annotations

import argparse
import importlib
import sys

VERBS = ("data", "train", "explain", "evaluate", "profile", "report", "tune")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcebench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    for verb in VERBS:
        module = importlib.import_module(f"vcebench.commands.{verb}")
        module.register(sub)
    return parser


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=None, metavar="YAML",
                   help="config file(s), later ones deep-merged over earlier (default: config/config.yaml)")


USER_ERRORS = ("ConfigError", "DatasetError", "CheckpointError", "RoleConfigError", "MissingModelError",
               "ShardError", "MetricError", "InsufficientSamples")


def main(argv: list[str] | None = None) -> int:
    """Run one verb; user errors (config, data, checkpoints, metrics) print one clear line, exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        if isinstance(e, FileNotFoundError) or any(c.__name__ in USER_ERRORS for c in type(e).__mro__):
            print(f"vcebench {args.verb}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
