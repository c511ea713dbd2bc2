"""`vcebench train <role> --task <task>`: train one network of a dataset (models are per dataset).

Examples::

    vcebench train classifier --task synthfaces_smile --data resources/data/synthfaces
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
    p.add_argument("--task", required=True, help="any task on the dataset, e.g. synthfaces_smile")
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


def networks_arg(value: str | None, cfg: dict) -> str | None:
    """``--networks``: a folder, 'none' (train), or the config's ``networks`` when not given."""
    if value is None:
        value = cfg.get("networks")
    return None if value in (None, "", "none") else value


def run(args: argparse.Namespace) -> int:
    from ..config.load import load_config

    if _install(args, load_config(args.config)):
        return 0
    from ..core.runtime import setup_torch
    from ..models.training.distributed import training_processes
    from ..protocol.settings import load_settings
    from ..steps.train import train_role
    from ..workflow import train_threads

    cfg = load_settings(args.config, only=(args.task, None))  # a network: its model settings
    device = setup_torch(train_threads(cfg), cfg["device"], cfg["cuda"])  # cuda without a GPU: ConfigError
    with training_processes(device, cfg["cuda"]["train_graphs"]) as shard:
        metrics = train_role(cfg, args.role, args.task, data_dir=args.data, out_dir=args.out,
                             model_dir=args.model_dir, progress=not args.no_progress, shard=shard,
                             networks=networks_arg(args.networks, cfg))
    if not shard.writer:
        return 0
    summary = {k: v for k, v in metrics.items() if k in ("name", "gates", "train_seconds", "test_accuracy",
                                                            "verification", "fooling", "knn10_test_accuracy",
                                                            "fid_train_vs_test", "distance_sanity")}
    stats = metrics.get("training", metrics)
    summary.update({k: stats[k] for k in ("images_per_second", "peak_gpu_memory_mib") if k in stats})
    print(json.dumps(summary, indent=1, default=str))
    return 0


def _install(args: argparse.Namespace, cfg: dict) -> bool:
    """The shipped network installed without starting torch (a file copy; ``train_role`` does the same when
    called as a library) when its card has the config's recipe (``cfg``: validated against the schema; the
    role's settings are the card's, checked when it was trained). Not under torchrun: there every process
    takes the training path, and only its writer copies."""
    import os
    from pathlib import Path

    from ..config.tasks import get_task
    from ..models.shipping.cards import install_shipped

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return False
    ds = get_task(cfg, args.task).dataset
    out = Path(args.out) if args.out else Path(args.model_dir) / ds / args.role
    # say_why=False: the training path checks the settings first, then says why it trains
    metrics = install_shipped(cfg, ds, args.role, networks_arg(args.networks, cfg), out,
                              progress=not args.no_progress, say_why=False)
    if metrics is None:
        return False
    print(json.dumps({k: metrics[k] for k in ("name", "gates") if k in metrics}, indent=1, default=str))
    return True
