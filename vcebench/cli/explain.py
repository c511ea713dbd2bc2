"""`vcebench explain`: counterfactuals for one shard of a task's evaluation set, or merge the shards.

Examples::

    vcebench explain --task synthfaces_smile --method fire --shard 0 --n-shards 2
    vcebench explain --settings results/synthfaces_smile/fire/settings.json --shard 0 --n-shards 2
    vcebench explain --task synthfaces_smile --method fire_K5 --data resources/data/synthfaces \\
        --out results/synthfaces_smile/fire_K5/shards/shard-0-of-1.npz
    vcebench explain --merge results/synthfaces_smile/fire/shards/shard-*.npz \\
        --out results/synthfaces_smile/fire/counterfactuals.npz

Shard ``i`` of ``n`` takes ``sorted_ids[i::n]`` of the first ``n_eval`` sample ids of the
evaluation split; every sample draws its noise from its own stream (``vcebench.core.rng``), so the
result does not depend on the sharding or on ``batch_size``. The shard file holds the fields of
docs/internals.md "Counterfactual files"; ``timing-<i>-of-<n>.json`` beside it holds the shard's costs:
the seconds spent in generation only (no data loading or I/O), the peak memory during generation and
the FLOPs of one call of each network the method called. ``--merge ... --profile-out`` writes them,
merged over the shards, as the method's ``profile.json`` (``vcebench.costs.columns.explain_profile``).

``--settings FILE``: the job's resolved settings (task, method, hyperparameters, seed, ``n_eval``, runtime; the
workflow writes them, `vcebench settings show` prints them, :mod:`vcebench.protocol.resolve`) in place of
``--task``, ``--method`` and ``--config``: the job reads that file only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..steps.explain import (
    ShardError,
    builtin_method_names,
    explain_shard,
    merge_shards,
    merge_timings,
    shard_settings,
    timing_path,
)
from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="generate counterfactuals for one shard, or merge shards",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="the job's resolved settings file (in place of --task, --method and --config)")
    p.add_argument("--task", help="task name (config key `tasks`)")
    p.add_argument("--method", help=f"method name: {', '.join(builtin_method_names())}, a plug-in's "
                                    "(vcebench.registry), or <method>_<variant> (config key `variants`)")
    p.add_argument("--shard", type=int, default=0, help="shard index i (default 0)")
    p.add_argument("--n-shards", type=int, default=1, help="number of shards n (default 1)")
    p.add_argument("--data", default=None, help="rendered dataset folder (default: render / load from config)")
    p.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    p.add_argument("--out", default=None, help="output npz (default results/<task>/<method>/shards/"
                                               "shard-<i>-of-<n>.npz; with --merge: the merged file)")
    p.add_argument("--merge", nargs="+", default=None, metavar="NPZ", help="merge these shard files into --out")
    p.add_argument("--profile-out", default=None, metavar="JSON",
                   help="with --merge: also write the shards' costs (timing-*.json beside them: time, peak memory, "
                        "FLOPs per network call) as one profile.json")
    p.add_argument("--seed", type=int, default=None,
                   help="generation seed in place of config `seed` (the `seeds` target; networks unchanged)")
    p.add_argument("--n-eval", type=int, default=None, metavar="N",
                   help="the first N evaluation inputs in place of config `n_eval` (`pareto.n_eval`)")
    add_config_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.merge:
        if not args.out:
            raise ShardError("--merge needs --out (the merged counterfactuals.npz)")
        merge_shards([Path(p) for p in args.merge], Path(args.out))
        if args.profile_out:
            merge_timings([timing_path(Path(p)) for p in args.merge], Path(args.profile_out))
        return 0
    if args.settings and (args.task or args.method or args.config):
        raise ShardError("--settings holds the task, the method and their settings: give no --task, --method or "
                         "--config with it")
    if not args.settings and (not args.task or not args.method):
        raise ShardError("needs --settings, or --task and --method (or --merge)")
    if not 0 <= args.shard < args.n_shards:
        raise ShardError(f"--shard must be in [0, --n-shards={args.n_shards}), got {args.shard}")
    if args.settings:
        from ..steps.settings import explain_settings

        settings = explain_settings(args.settings, seed=args.seed, n_eval=args.n_eval, data_dir=args.data,
                                    model_dir=args.models)
    else:
        settings = shard_settings(args.config, args.task, args.method, seed=args.seed, n_eval=args.n_eval,
                                  data_dir=args.data, model_dir=args.models)
    name = f"results/{settings.task.name}/{settings.method}/shards/shard-{args.shard}-of-{args.n_shards}.npz"
    out = Path(args.out or name)
    explain_shard(settings, args.shard, args.n_shards, out, [args.settings] if args.settings else args.config)
    return 0

