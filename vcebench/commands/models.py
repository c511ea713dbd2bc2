"""`vcebench models <subverb>`: checks of the trained networks of a dataset (nothing is retrained).

Examples::

    vcebench models parity --dataset synthfaces --data resources/data/synthfaces \\
        --out resources/models/synthfaces/parity.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli import add_config_arg, add_subverb, add_subverbs


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


def run_parity(args: argparse.Namespace) -> int:
    """For every starting log-SNR a configured method runs at on --dataset, compares the PMF's one-step
    prediction with the DDPM's Tweedie estimate from the same noise on validation images (MSE, FID, share
    of each task's classifier labels kept) and judges the pmf label gate at each task's FiRe operating
    noise (vcebench.models.parity). Writes --out (JSON) and the table beside it (.md)."""
    from ..config import load_config
    from ..io import write_json
    from ..models.parity import measure, to_markdown
    from ..runtime import setup_torch

    cfg = load_config(args.config)
    setup_torch(cfg["threads"], "cpu")
    res = measure(cfg, args.dataset, args.models, args.data, args.n)
    write_json(Path(args.out), res)
    md = to_markdown(res)
    Path(args.out).with_suffix(".md").write_text(md)
    print(md)
    return 0
