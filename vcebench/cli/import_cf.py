"""`vcebench import`: counterfactual images written by another code base -> the ``counterfactuals.npz``
that `vcebench evaluate` scores (docs/internals.md, "Counterfactual files").

Examples::

    vcebench import --task celeba_smile --layout dime --path /runs/dime/Results/smile \\
        --mapping dime_ids.csv --out results/celeba_smile/external_dime/counterfactuals.npz
    vcebench import --task synthfaces_smile --layout generic --path my_cfs/ \\
        --out results/synthfaces_smile/external_mine/counterfactuals.npz

Layouts:

``dime``   the folders DiME's and ACE's ``main.py`` write (their ``ImageSaver``): ``--path`` is the
           experiment folder ``<output_path>/Results/<exp_name>`` (ACE: ``.../<exp_name>/explanation``)
           holding ``{CC,IC}/{CCF,ICF}/CF/<id>.{png,jpg}`` and ``{CC,IC}/{CCF,ICF}/Info/<id>.txt``
           (``label``, ``pred``, ``target``, ``cf pred``). ``<id>`` is the zero-padded index of the image
           in *their* data loader; ``--mapping`` translates it to the dataset's sample ids.
``generic`` ``<image_id>.png`` (or ``.jpg``, or ``.npy``: uint8, or float in [-1, 1]; C x H x W or
           H x W x C) directly under ``--path``.

``--mapping`` is a CSV with columns ``file`` (a file name, with or without extension) and
``sample_id``, and optionally ``target`` (the class the counterfactual aims at). Without it, a file's
name (zero padding allowed) is its sample id.

The folder must hold exactly the task's evaluation ids (the first ``n_eval`` sorted ids of the
evaluation split, what `vcebench explain` explains), at the split's image size, 8-bit grey for x-ray
and 8-bit RGB for faces. Every problem (missing or unknown ids, duplicates, wrong size or mode,
unreadable files) is reported in one error naming the files. The target is the Info file's (dime),
the mapping's ``target`` column, or else ``1 - f(x)`` with the task's classifier (as `vcebench explain`);
``pred`` and ``flipped`` are recomputed with the task's classifier, and the other code base's own
predictions are kept as ``info_external_*`` (``-1`` where unknown). JPEG files are lossy copies: the
scores are those of what the folder holds.
"""

from __future__ import annotations

import argparse

from ..steps.import_cf import LAYOUTS, import_job
from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="turn a folder of counterfactual images (DiME/ACE or generic) into "
                                      "counterfactuals.npz", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task name (config key `tasks`)")
    p.add_argument("--layout", required=True, choices=LAYOUTS, help="folder layout")
    p.add_argument("--path", required=True, help="the folder (dime: Results/<exp_name>)")
    p.add_argument("--mapping", default=None, help="CSV file,sample_id[,target] (default: file name = sample id)")
    p.add_argument("--out", required=True, help="output counterfactuals.npz")
    p.add_argument("--data", default=None, help="rendered dataset folder (synthetic datasets)")
    p.add_argument("--models", default="resources/models", help="model folder (default resources/models)")
    add_config_arg(p, resolved=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``vcebench import``; an :class:`ImportFolderError` is a user error (one line, exit 2, in cli.main)."""
    summary = import_job(args.config, args.task, args.path, args.layout, args.out, mapping=args.mapping,
                         data_dir=args.data, model_dir=args.models, resolved=args.resolved_config)
    print(f"{summary['task']}: imported {summary['n']} counterfactuals ({args.layout} layout, {args.path}); "
          f"flipped by the task's classifier: {summary['flipped']}/{summary['n']}; "
          f"disagreements with the folder's own predictions: {summary['disagreements']} -> {args.out}")
    return 0

