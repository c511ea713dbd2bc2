"""Sweep a method's hyperparameters on one task with the trained default models; print the semantic
metrics per setting (docs/results.md). Each setting runs the whole evaluation set (n_eval) in one shard.

    python scripts/fire_sweep.py synthfaces_smile "" "t=0.2" "t=0.2,rho=0.02,dilation=0,feather=1"
    python scripts/fire_sweep.py synthfaces_smile --method maskdime --untuned "log_snr_offset=0.5"

A setting is comma-separated key=value pairs (JSON values) merged over tasks.<task>.params.<method>
(the tuned settings of config/tuned/<task>.yaml come after those: `--untuned` leaves them out);
"" is the configured setting. Needs `make benchmark` (or its models and data) first.
This runs on the EVALUATION split: a diagnostic, not a way to pick settings (that is `vcebench tune`,
on the validation split, docs/protocol.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path

KEYS = ("FR", "FR_oracle", "GT_precision", "GT_recall", "GT_L1_region", "GT_L1_region_input", "FID", "FVA", "MNAC",
        "L1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task")
    ap.add_argument("settings", nargs="+")
    ap.add_argument("--method", default="fire")
    ap.add_argument("--config", action="append", default=None)
    ap.add_argument("--untuned", action="store_true", help="ignore config/tuned/<task>.yaml")
    args = ap.parse_args()

    import numpy as np

    from metrics import metric_names
    from vcebench.commands.evaluate import evaluate_task
    from vcebench.commands.explain import explain_shard
    from vcebench.config import load_config
    from vcebench.runtime import setup_torch
    from vcebench.tasks import get_task

    base = load_config(args.config)
    if args.untuned:
        base.setdefault("protocol", {})["use_tuned"] = False
    setup_torch(base["threads"], base["device"])
    task = get_task(base, args.task)
    data = f"resources/data/{task.dataset}"
    print("| setting | s/CF | steps | " + " | ".join(KEYS) + " |")
    print("|---" * (len(KEYS) + 3) + "|")
    for spec in args.settings:
        cfg = copy.deepcopy(base)
        over = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in spec.split(",") if kv)}
        cfg["tasks"][args.task].setdefault("params", {}).setdefault(args.method, {}).update(over)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "shard-0-of-1.npz"
            rec = explain_shard(cfg, args.task, args.method, 0, 1, out, data_dir=data)
            m = evaluate_task(cfg, get_task(cfg, args.task), args.method, str(out), data_dir=data,
                              fid_ref=f"results/{args.task}/fid_ref.npz",
                              only=[k for k in ("FR", "FR_oracle", "GT", "FID", "FVA", "MNAC", "L1")
                                    if k in metric_names(task)])["metrics"]
            steps = float(np.load(out)["steps"].mean())
        print(f"| {spec or '(config)'} | {rec['sec_per_cf']:.3f} | {steps:.2f} | "
              + " | ".join(f"{m[k]:.3g}" if k in m else "-" for k in KEYS) + " |", flush=True)


if __name__ == "__main__":
    main()
