"""`vcebench train <role> --task <task>`: train one network of a dataset (models are per dataset).

Examples::

    vcebench train classifier --task synthfaces_smile --data resources/data/synthfaces
    vcebench train classifier --settings resources/settings/synthfaces/classifier.json   # the workflow's job
    vcebench train oracle --task synthfaces_smile        # after the classifier (measures transfer)
    vcebench train simsiam --task synthxray_pacemaker --out /tmp/simsiam
    torchrun --standalone --nproc_per_node 4 --no-python vcebench train pmf --task synthfaces_smile

The config's ``device`` applies (``cuda`` without a visible GPU is an error, never a silent CPU run).
Under torchrun (ddpm / pmf) each process trains on its share of every batch; rank 0 writes.
"""

from __future__ import annotations

import argparse
import json

from ..registry.roles import TRAINING_ORDER
from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train one network role on a task's dataset",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=TRAINING_ORDER)
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="the job's resolved settings file (the workflow's resources/settings/<dataset>/<role>.json) "
                        "in place of --task, --config and --networks")
    p.add_argument("--task", default=None, help="any task on the dataset, e.g. synthfaces_smile")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="rendered synthetic split cache (resources/data/<dataset>); default: render in memory")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output folder (default: <model-dir>/<dataset>/<role>)")
    p.add_argument("--model-dir", default="resources/models", metavar="DIR")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    p.add_argument("--networks", default=None, metavar="DIR",
                   help="shipped networks (default: config key `networks`, relative to the current folder); "
                        "'none' trains even where a shipped network has the config's recipe")
    add_config_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..steps.networks import install
    from ..steps.settings import train_inputs

    cfg, task, networks, fire_t = train_inputs(args.role, args.settings, args.config, args.task, args.networks)
    # the shipped network installed without starting torch, when its card has the config's recipe
    installed = install(cfg, args.role, task, out_dir=args.out, model_dir=args.model_dir, networks=networks,
                        progress=not args.no_progress)
    if installed is not None:
        print(json.dumps({k: installed[k] for k in ("name", "gates") if k in installed}, indent=1, default=str))
        return 0
    from ..steps.train import train_job

    metrics, writer = train_job(cfg, args.role, task, data_dir=args.data, out_dir=args.out, model_dir=args.model_dir,
                                progress=not args.no_progress, networks=networks, fire_t=fire_t)
    if not writer:
        return 0
    summary = {k: v for k, v in metrics.items() if k in ("name", "gates", "train_seconds", "test_accuracy",
                                                            "verification", "fooling", "knn10_test_accuracy",
                                                            "fid_train_vs_test", "distance_sanity")}
    stats = metrics.get("training", metrics)
    summary.update({k: stats[k] for k in ("images_per_second", "peak_gpu_memory_mib") if k in stats})
    print(json.dumps(summary, indent=1, default=str))
    return 0
