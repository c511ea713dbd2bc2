"""`vcebench models <subverb>`: checks of the trained networks of a dataset, and the generative roles'
training curves.

Examples::

    vcebench models parity --dataset synthfaces --data resources/data/synthfaces \\
        --out resources/models/synthfaces/parity.json
    vcebench models fetch celeba --dry-run
    vcebench models curve --task synthfaces_smile --role ddpm --steps 9600 --at 300 600 1200 2400 4800 \\
        --data resources/data/synthfaces --out resources/curves/synthfaces/ddpm
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import add_config_arg, add_subverb, add_subverbs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="checks of a dataset's trained networks (parity)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = add_subverbs(p)
    s = add_subverb(subs, "parity", run_parity, "PMF one-step denoising vs the DDPM's Tweedie estimate at every "
                    "configured method's operating noise, and the pmf label gate")
    s.add_argument("--dataset", required=True, help="dataset whose networks are compared, e.g. synthfaces")
    s.add_argument("--data", default=None, help="rendered synthetic data folder (default: render in memory)")
    s.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    s.add_argument("--n", type=int, default=256, help="validation images (default 256)")
    s.add_argument("--out", required=True, help="JSON; a .md beside it holds the table")
    add_config_arg(s)
    s = add_subverb(subs, "curve", run_curve, "train a ddpm / pmf recipe once with EMA snapshots and score each "
                    "(FID / KID of samples, Tweedie or one-step FID): where the budget plateaus")
    s.add_argument("--task", required=True, help="a task of the dataset, e.g. synthfaces_smile")
    s.add_argument("--role", required=True, choices=["ddpm", "pmf"])
    s.add_argument("--steps", type=int, default=None, help="the largest budget (default: the recipe's `steps`)")
    s.add_argument("--at", type=int, nargs="+", default=[], help="the smaller budgets (doublings: the plateau rule "
                   "compares b with 2 b): snapshots of the one run (cosine recipe) or runs of their own on a "
                   "shared trunk (wsd recipe); --steps is always one")
    s.add_argument("--data", default=None, help="rendered synthetic data folder (default: render in memory)")
    s.add_argument("--models", default="resources/models", help="the dataset's trained networks "
                   "(fid_features; for a pmf also ddpm and classifier) (default resources/models)")
    s.add_argument("--n-val", type=int, default=1000, help="validation images scored against (default 1000)")
    s.add_argument("--samples", type=int, default=1000, help="samples per snapshot (default 1000)")
    s.add_argument("--sample-steps", type=int, default=50, help="DDPM ancestral steps per sample (default 50)")
    s.add_argument("--out", required=True, help="folder: train/ (the run, its snapshots), curve.json, curve.md")
    s.add_argument("--train-only", action="store_true", help="train (on the config's device) and write the "
                   "snapshots, score nothing: the same command without it scores them later, e.g. on a CPU")
    s.add_argument("--score-only", action="store_true", help="train nothing: score the budgets already trained "
                   "(e.g. while --train-only trains the larger ones in the background)")
    add_config_arg(s)
    s = add_subverb(subs, "fetch", run_fetch, "fetch a real dataset's released networks from the Hugging Face Hub "
                    "at their pinned revisions, check their sha256, and write a config overlay per task")
    s.add_argument("dataset", help="a real dataset with configured tasks, e.g. celeba, celebahq, chexpert")
    s.add_argument("--dry-run", action="store_true", help="list every role, its source, revision and hash state; "
                   "fetch and write nothing")
    s.add_argument("--pins", default="config/hub.yaml", help="the project's Hub pins (default config/hub.yaml; "
                   "the first download of a file records its commit and sha256 there)")
    s.add_argument("--out", default="resources/hub", help="folder of the overlays <task>.yaml (default "
                   "resources/hub)")
    add_config_arg(s)
    s = add_subverb(subs, "check", run_check, "re-measure a trained network set with all of it present: the "
                    "generators' FID and the pmf gate, the embedding judge's truth vs regenerate levels")
    s.add_argument("--models", required=True, help="trained networks: <models>/<dataset>/<role>/")
    s.add_argument("--data-root", default="resources/data", help="rendered data: <data-root>/<dataset>/")
    s.add_argument("--n", type=int, default=100, help="test inputs per task for the truth levels (default 100)")
    add_config_arg(s)
    s = add_subverb(subs, "ship", run_ship, "copy a trained network set into networks/<set>/ with a card per "
                    "network (recipe, sha256, training, quality, curve)")
    s.add_argument("--models", required=True, help="trained networks: <models>/<dataset>/<role>/")
    s.add_argument("--set", required=True, dest="set_name", help="the set's name, e.g. ref1")
    s.add_argument("--out", required=True, help="destination, e.g. networks/ref1")
    s.add_argument("--where", default=None, help="where it was trained, for the cards (machine, date); "
                   "omitted: each folder's own card says (a shipped set re-measured, not retrained)")
    s.add_argument("--curves", default=None, help="training curves: <curves>/<dataset>/<role>/curve.json")
    s.add_argument("--roles", nargs="+", default=None,
                   help="only these roles (ROLE of every dataset, or DATASET/ROLE)")
    add_config_arg(s)
    s = add_subverb(subs, "budget", run_budget, "count the training budget (steps x batch, FLOPs) of a shipped "
                    "set's generators and write it into their cards")
    s.add_argument("--models", required=True, help="a shipped set, e.g. networks/ref1 (<models>/<dataset>/<role>/)")
    add_config_arg(s)


def run_check(args: argparse.Namespace) -> int:
    """Re-measure a trained set with all its networks present (generators' FID and the pmf gate; the
    embedding judge's truth vs regenerate levels), written into each network's metrics.json."""
    from ..config.load import load_config
    from ..core.runtime import setup_torch
    from ..steps.networks import check_networks

    cfg = load_config(args.config)
    setup_torch(cfg["threads"], "cpu")
    print(json.dumps(check_networks(cfg, args.models, args.data_root, args.n), indent=1, default=str))
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    """Offline (HF_HUB_OFFLINE=1) the local Hub cache is read and nothing is fetched. A file whose sha256
    differs from its pin is refused (one line naming it). Roles without a Hub file are printed with where to
    get them and the config key to set; so are the keys still to set by hand (docs/real-data.md)."""
    from ..config.load import load_config
    from ..steps.fetch import fetch

    fetch(load_config(args.config), args.dataset, pins=args.pins, out_dir=args.out, dry_run=args.dry_run)
    return 0


def run_ship(args: argparse.Namespace) -> int:
    """Copy every trained role folder of --models into --out/<dataset>/<role>/ (weights, config.json,
    metrics.json) and write its card.json / card.md: the config's recipe (refused if the folder was
    trained with another), the sha256 of each file, where and how it trained, its quality numbers."""
    from ..config.load import load_config
    from ..steps.networks import ship

    cfg = load_config(args.config)
    cards = ship(cfg, args.models, args.out, args.set_name, args.where, args.curves, args.roles)
    for c in cards:
        print(f"{args.out}/{c['dataset']}/{c['role']}: {len(c['files'])} files, {c['size_bytes'] / 1e6:.2f} MB")
    print(f"{len(cards)} networks, {sum(c['size_bytes'] for c in cards) / 1e6:.1f} MB")
    return 0


def run_budget(args: argparse.Namespace) -> int:
    """Each generator's budget: steps x batch, and FLOPs from one counted step of each mode of its objective
    (forward and backward, ``vcebench.models.training.budget``), its start's added for a continued recipe."""
    from ..config.load import load_config
    from ..core.runtime import setup_torch
    from ..steps.networks import budgets_text, count_budgets

    cfg = load_config(args.config)
    setup_torch(cfg["threads"], "cpu")
    print(budgets_text(count_budgets(cfg, args.models)), end="")
    return 0


def run_curve(args: argparse.Namespace) -> int:
    """Train --role of --task's dataset for --steps steps with the config's recipe (resumable: rerun the same
    command after an interruption), write the EMA weights at each --at step, score every snapshot on the same
    validation images and noise (vcebench.steps.curves) and write --out/curve.json and curve.md with the
    budget past which doubling improves the primary number by less than 10 %."""
    from ..config.load import load_config
    from ..steps.curves import curve_job, to_markdown

    kw = dict(n_val=args.n_val, n_samples=args.samples, sample_steps=args.sample_steps)
    done = curve_job(load_config(args.config), args.task, args.role, args.steps, args.at, args.out, args.data,
                     args.models, train_only=args.train_only, score_only=args.score_only, **kw)
    print(json.dumps(done, indent=1, default=str) if args.train_only else to_markdown(done))
    return 0


def run_parity(args: argparse.Namespace) -> int:
    """For every starting log-SNR a configured method runs at on --dataset, compares the PMF's one-step
    prediction with the DDPM's Tweedie estimate from the same noise on validation images (MSE, FID, share
    of each task's classifier labels kept) and judges the pmf label gate at each task's FiRe operating
    noise (vcebench.protocol.parity). Writes --out (JSON) and the table beside it (.md)."""
    from ..config.load import load_config
    from ..steps.networks import parity

    print(parity(load_config(args.config), args.dataset, args.models, args.data, args.n, Path(args.out)))
    return 0
