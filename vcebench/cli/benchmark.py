"""`vcebench benchmark`: time `vcebench evaluate` on N stand-in counterfactuals (a benchmark, not a test).

Examples::

    vcebench benchmark --task synthfaces_smile --n 1000            # random networks, the zoo's architectures
    vcebench benchmark --task synthfaces_smile --n 1000 --tiny     # tiny random networks
    vcebench benchmark --task synthfaces_smile --n 1000 --trained  # resources/models (trained zoo)

Counterfactuals are stand-ins too: each original with a random 8 x 8 patch brightened, so
the timing covers every metric of the task on realistic shapes. Rendering the splits is
done (and timed) separately, as the workflow reads them from the rendered cache.
"""

from __future__ import annotations

import argparse
import json

from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("benchmark", help="time `vcebench evaluate` on stand-in counterfactuals",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="synthfaces_smile")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--trained", action="store_true", help="use the trained networks in --models")
    p.add_argument("--tiny", action="store_true", help="tiny random networks instead of random networks with "
                                                        "the synthetic zoo's architectures")
    p.add_argument("--models", default="resources/models")
    p.add_argument("--data", default=None, help="rendered dataset cache (default: render in memory)")
    add_config_arg(p)
    p.add_argument("--out", default=None, help="write the metrics.json here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..steps.benchmark import benchmark

    result = benchmark(args.config, args.task, args.n, trained=args.trained, tiny=args.tiny, model_dir=args.models,
                       data_dir=args.data)
    if args.out:
        from ..core.io import write_json

        write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("metrics", "n", "seconds", "benchmark")}, indent=1))
    return 0
