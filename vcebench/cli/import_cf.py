"""`vcebench import`: counterfactuals written by another code base -> the ``counterfactuals.npz``
that `vcebench evaluate` scores (docs/internals.md, "Counterfactual files").

Examples::

    vcebench import --task celeba_smile --layout dime --path /runs/dime/Results/smile \\
        --mapping dime_ids.csv --out results/celeba_smile/external_dime/counterfactuals.npz
    vcebench import --task synthfaces_smile --layout generic --path my_cfs/ \\
        --out results/synthfaces_smile/external_mine/counterfactuals.npz
    vcebench import --task celeba_smile --layout peal --path $PEAL_RUNS/celeba/Smiling/sce_cfkd/0 \\
        --mapping peal_rows.csv --out results/celeba_smile/external_sce/counterfactuals.npz
    vcebench import --task celeba_smile --layout rcsb --path outputs/<date>/<time>/wandb/run-<stamp>-<id> \\
        --mapping rcsb_index.csv --out results/celeba_smile/external_rcsb/counterfactuals.npz

Layouts:

``dime``   the folders DiME's and ACE's ``main.py`` write (their ``ImageSaver``): ``--path`` is the
           experiment folder ``<output_path>/Results/<exp_name>`` (ACE: ``.../<exp_name>/explanation``)
           holding ``{CC,IC}/{CCF,ICF}/CF/<id>.{png,jpg}`` and ``{CC,IC}/{CCF,ICF}/Info/<id>.txt``
           (``label``, ``pred``, ``target``, ``cf pred``). ``<id>`` is the zero-padded index of the image
           in *their* data loader; ``--mapping`` translates it to the dataset's sample ids.
``generic`` ``<image_id>.png`` (or ``.jpg``, or ``.npy``: uint8, or float in [-1, 1]; C x H x W or
           H x W x C) directly under ``--path``.
``peal``   the ``validation_tracked_values.npz`` of PEAL's CFKD adaptor (SCE, and the ACE / DiME / FastDiME
           it bundles): ``--path`` is that file or ``<base_dir>/<finetune_iteration>``. Row ``k`` of
           ``x_counterfactual_list`` (float32 N x C x H x W in [0, 1]) is the counterfactual of row ``k``
           of ``x_list``; ``y_target_list`` is its target. Rows record no id: ``--mapping`` is required,
           its ``file`` column the row number.
``rcsb``   the Weights & Biases run folder of RCSB's ``src/main.py`` (it saves its images nowhere
           else): ``--path`` is ``.../wandb/[offline-]run-<stamp>-<id>`` or its ``files``. The k-th
           ``media/images/inpaints_<step>_<hash>.png`` by step (one counterfactual per input:
           exp.n_inpaints=1, exp.batch_multip=1) is the counterfactual of the k-th
           ``images_<step>_<hash>.png``, RCSB's dataset index ``n_skip + k`` (``config.yaml``);
           that index is the record's key for ``--mapping``.

``--mapping`` is a CSV with columns ``file`` (a file name, with or without extension; the row number for
peal, the dataset index for rcsb) and ``sample_id``, and optionally ``target`` (the class the
counterfactual aims at). An empty ``sample_id`` leaves that record out (listed in ``import.json``).
Without a mapping, a file's name (zero padding allowed) or rcsb's index is its sample id.

The folder must hold exactly the task's evaluation ids (the first ``n_eval`` sorted ids of the
evaluation split, what `vcebench explain` explains), at the split's image size, 8-bit grey for x-ray
and 8-bit RGB for faces. Every problem (missing or unknown ids, duplicates, wrong size or mode,
unreadable files) is reported in one error naming the files. The target is the mapping's ``target``
column, else the Info file's (dime) or ``y_target_list`` (peal), else ``1 - f(x)`` with the task's
classifier (as `vcebench explain`); ``pred`` and ``flipped`` are recomputed with the task's classifier,
and the other code base's own predictions are kept as ``info_external_*`` (``-1`` where unknown). JPEG
files are lossy copies: the scores are those of what the folder holds (rcsb's PNGs are 8-bit copies
that wandb stretched to their own [min, max]). Where the other code base kept its copy of the input
(peal's ``x_list``, rcsb's ``images``), it must be close to the mapped sample's image (the error names
the records and the distance), else the mapping, the images or their preprocessing differ.
"""

from __future__ import annotations

import argparse

from ..steps.import_cf import LAYOUTS, import_job
from . import add_config_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="turn counterfactuals of another code base (DiME/ACE, PEAL/SCE, RCSB or a "
                                      "generic folder) into counterfactuals.npz", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task name (config key `tasks`)")
    p.add_argument("--layout", required=True, choices=LAYOUTS, help="folder layout")
    p.add_argument("--path", required=True, help="the folder (dime: Results/<exp_name>; peal: the npz or its "
                                                 "folder; rcsb: the wandb run folder)")
    p.add_argument("--mapping", default=None, help="CSV file,sample_id[,target] (default: file name = sample id; "
                                                   "required for peal)")
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

