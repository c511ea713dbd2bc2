"""`vcebench <verb> [<subverb>]`: every step a workflow rule runs is one command.

Examples::

    vcebench data render synthfaces --splits train test --out resources/data/synthfaces
    vcebench data show synthfaces --n 64 --out grid.png
    vcebench data check celeba --root /data/celeba
    vcebench train classifier --task synthfaces_smile
    vcebench models parity --dataset synthfaces --data resources/data/synthfaces --out parity.json
    vcebench models curve --task synthfaces_smile --role ddpm --steps 6400 --at 200 400 800 1600 3200 --out c/
    vcebench models check --models resources/models
    vcebench models ship --models resources/models --set local --out networks/local --where "my laptop"
    vcebench explain --task synthfaces_smile --method fire --shard 0 --n-shards 2
    vcebench evaluate --task synthfaces_smile --method fire
    vcebench profile task --task synthfaces_smile --method fire
    vcebench profile compaction --task synthfaces_smile --method fire
    vcebench profile paper-scale celeba
    vcebench profile gpu --out results/reference
    vcebench report task --task synthfaces_smile
    vcebench report gallery --task synthfaces_smile --methods fire dime
    vcebench report paper --out-dir results/paper
    vcebench report regression --reference results/reference/regression --strict
    vcebench report accept --reference results/reference/regression
    vcebench report seeds --task synthfaces_smile
    vcebench report pareto --task synthfaces_smile
    vcebench report pairs --task synthfaces_smile
    vcebench report sets --task synthfaces_smile --a results --b runs/ref2/results --out sets.md
    vcebench report tolerances --reference results/reference/regression
    vcebench report excerpt --check README.md
    vcebench report provenance results
    vcebench report bundle --results results --task synthfaces_smile --out smile.tar
    vcebench report verify smile.tar
    vcebench import --task synthfaces_smile --layout generic --path my_cfs/ --out cfs.npz
    vcebench tune --task synthfaces_smile --data resources/data/synthfaces
    vcebench benchmark --task synthfaces_smile --n 1000
    vcebench settings show synthfaces_smile fire --set method_defaults.fire.K=5

`vcebench <verb> --help` lists a verb's subverbs, `vcebench <verb> <subverb> --help` their arguments.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable

VERBS = ("data", "train", "models", "explain", "import", "evaluate", "profile", "report", "tune", "benchmark",
         "settings")
MODULES = {"import": "import_cf"}  # `import` is a Python keyword


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcebench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    for verb in VERBS:
        module = importlib.import_module(f"vcebench.cli.{MODULES.get(verb, verb)}")
        module.register(sub)
    return parser


def add_config_arg(p: argparse.ArgumentParser, resolved: bool = False) -> None:
    """``--config`` (and with ``resolved``, ``--resolved-config``: the workflow's merged config of the run)."""
    p.add_argument("--config", action="append", default=None, metavar="YAML",
                   help="config file(s), later ones deep-merged over earlier (default: config/config.yaml)")
    if resolved:
        p.add_argument("--resolved-config", default=None, metavar="JSON",
                       help="the run's merged config as the workflow wrote it (results/config.resolved.json: the "
                            "config files and `snakemake --config` overrides) in place of --config")


def add_subverbs(p: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The subverbs of verb parser ``p`` (`vcebench <verb> <subverb>`)."""
    return p.add_subparsers(dest="subverb", required=True, title="subverbs")


def add_subverb(subs: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], int],
                help: str) -> argparse.ArgumentParser:
    """Subverb ``name`` running ``func``; its ``--help`` shows ``help`` and ``func``'s docstring. Options are
    never abbreviated: another subverb's ``--out`` must fail, not be read as this one's ``--out-dir``."""
    doc = inspect.cleandoc(func.__doc__ or "")
    s = subs.add_parser(name, help=help, description=f"{help}.\n\n{doc}".rstrip(), allow_abbrev=False,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.set_defaults(func=func)
    subs.metavar = "{" + ",".join(subs.choices) + "}"  # a missing subverb's error lists them
    return s


def main(argv: list[str] | None = None) -> int:
    """Run one command; user errors (config, data, checkpoints, metrics) print one clear line, exit 2."""
    from ..config.kernels import pin_for_argv
    from ..core.errors import UserError

    pin_for_argv(sys.argv[1:] if argv is None else list(argv))  # before any command module imports torch
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, FileNotFoundError, PermissionError) as e:
        command = " ".join(filter(None, (args.verb, getattr(args, "subverb", None))))
        print(f"vcebench {command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
