"""`vcebench tune`: pick every method's settings on the validation split, by the rule fixed in the config.

Examples::

    vcebench tune --task synthfaces_smile --data resources/data/synthfaces
    vcebench tune --task synthfaces_smile --method fire --method maskdime --out /tmp/smile.yaml
    vcebench tune --settings results/tune/synthfaces_smile.settings.json --out config/tuned/synthfaces_smile.yaml

Writes the tuned file (default ``<protocol.tuned_dir>/<task>.yaml``, i.e. ``config/tuned/<task>.yaml``: the
picked settings, the rule, the validation split and n, the date, the whole sweep) and the sweep table as
Markdown (``--md``, default ``results/tune/<task>.md``). The default run reads the tuned file
(``protocol.use_tuned``); commit it. What is swept and how the pick is made: ``vcebench/protocol/tune.py``,
docs/protocol.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..steps.tune import run_tune
from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune every method on the validation split (same number of settings each)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="the job's resolved settings file (the workflow's results/tune/<task>.settings.json: the "
                        "task, the methods, the search space, budget, noise rule and networks) in place of --task, "
                        "--method and --config; needs --out")
    p.add_argument("--task", default=None, help="task name (config key `tasks`)")
    p.add_argument("--method", action="append", default=None,
                   help="base method to tune (repeatable; default: the base methods of config key `methods`)")
    p.add_argument("--data", default=None, help="rendered dataset folder (synthetic; default: render in memory)")
    p.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    p.add_argument("--out", default=None, help="tuned file (default <protocol.tuned_dir>/<task>.yaml)")
    p.add_argument("--md", default=None, help="sweep table (default results/tune/<task>.md)")
    p.add_argument("--work-dir", default="results/tune", help="counterfactuals of the sweep (default results/tune)")
    add_config_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..steps.settings import tune_inputs
    from ..steps.tune import write_tuned

    cfg, task, names, out = tune_inputs(args.settings, args.config, args.task, args.method, args.out)
    md = Path(args.md or f"results/tune/{task}.md")
    result = run_tune(cfg, task, data_dir=args.data, model_dir=args.models, work_dir=args.work_dir,
                      method_names=names)
    result = write_tuned(task, result, out, md, merge=bool(args.method))
    print(f"{task}: tuned settings -> {out}, sweep -> {md} ({result['wall_seconds']:.0f} s)")
    for m, p in result["picked"].items():
        print(f"  {m}: setting {p['setting']} ({'rule' if p['qualified'] else 'fallback'}) "
              f"{result['settings'][m] or 'untuned'} {p['metrics']}")
    return 0
