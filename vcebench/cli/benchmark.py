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
import tempfile
import time
from pathlib import Path

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
    import torch

    from metrics.fid import compute_reference

    from ..config.load import ConfigError, load_config
    from ..config.tasks import get_task
    from ..core.runtime import setup_torch
    from ..costs.standins import arch_standin_models, fake_counterfactuals, standin_models
    from ..data import eval_split_name, load_split
    from ..protocol.run_settings import EvalSettings
    from ..steps.evaluate import evaluate_task

    cfg = load_config(args.config)
    setup_torch(cfg.get("threads"))
    task = get_task(cfg, args.task)
    t0 = time.perf_counter()
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), args.data)
    load_split(cfg, task.dataset, "train", args.data)  # memoised for CD
    t_data = time.perf_counter() - t0
    if len(split) < args.n:
        raise ConfigError(f"--n {args.n}: the evaluation split has only {len(split)} images")
    if args.trained:
        from metrics import required_roles

        from ..models import load_task_models

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
        result = evaluate_task(EvalSettings.resolve(cfg, task, "benchmark", data_dir=args.data), str(cfs),
                               fid_ref=str(ref), models=models)
        t_eval, c_eval = time.perf_counter() - t2, time.process_time() - c2
    result["benchmark"] = {"n": args.n, "seconds_data": t_data, "seconds_reference": t_ref,
                           "n_reference": len(split), "seconds_evaluate": t_eval,
                           "cpu_seconds_evaluate": c_eval, "threads": torch.get_num_threads(),
                           "models": "trained" if args.trained else ("tiny" if args.tiny else "arch") + " stand-ins"}
    if args.out:
        from ..core.io import write_json

        write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("metrics", "n", "seconds", "benchmark")}, indent=1))
    return 0

