"""End to end on the real formats (tests/test_e2e_real_celeba.py, tests/test_e2e_real_chexpert.py): a fake CelebA /
CheXpert in the official layout, random-weight checkpoints in every released format the task loads, a PMF trained
by vcebench, then `snakemake results/<task>.csv` through FiRe and the DiME family (:data:`METHODS`) to the
table. One test file per task, so that `make test`'s workers (`--dist loadfile`: a file whole in one worker) run
the two pipelines side by side."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# Every method runs from the released formats on one task at least, FiRe and DiME on both (the families' two code
# paths on each dataset's loaders); the other four are split between the tasks (each method-run is ~22 s of CPU:
# explain and evaluate jobs that load the full-size released networks)
METHODS = {"celeba_smile": ["fire", "dime", "fastdime2", "fastdime2plus"],
           "chexpert_pacemaker": ["fire", "dime", "fastdime", "maskdime"]}
DDPM_PARAMS = {"respacing": 6}
FIRE_PARAMS = {"K": 2, "smoothgrad_n": 2}
PMF_TRAIN = {"unet": {"block_out_channels": [16, 32], "layers_per_block": 1, "norm_num_groups": 8},
             "steps": 4, "batch_size": 4, "lr": 0.0015, "warmup_steps": 1, "ema_decay": 0.9, "grad_clip": 1.0,
             "seed": 81, "jvp": "fd", "precond": "edm", "n_samples": 4, "eval_images": 4}


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", OMP_NUM_THREADS="1")


def _run(args: list[str], timeout: int = 1800) -> subprocess.CompletedProcess:
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=timeout)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    return r


def run_task(tmp_path: Path, task: str, dataset: str, data: dict, models: dict,
             columns: tuple[str, ...]) -> tuple[list[dict], Path]:
    """`snakemake results/<task>.csv` on ``data`` (``datasets.<dataset>``) and ``models`` (``models.<dataset>``,
    the pmf given as training settings: the workflow trains it), the methods ``METHODS[task]``; returns the table's
    rows and results dir."""
    methods = METHODS[task]
    base = {
        "threads": 1, "n_shards": 1, "batch_size": 4, "n_eval": 3, "workdir": str(tmp_path / "run"),
        "reference_dir": str(tmp_path / "reference"), "run_tasks": [task], "methods": methods,
        "datasets": {dataset: {**data, "resolution": 32}},
        "metrics": {"sfid_seeds": [0]},
        "tasks": {task: {"params": {"fire": FIRE_PARAMS, **{m: dict(DDPM_PARAMS) for m in methods if m != "fire"}}}},
    }
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({**base, "models": {dataset: {**models, "pmf": PMF_TRAIN}}}))
    snakemake = shutil.which("snakemake", path=str(BIN)) or "snakemake"
    _run([snakemake, f"results/{task}.csv", "--cores", "2", "--configfile", str(run)])
    assert (tmp_path / "run" / "resources" / "models" / dataset / "pmf" / "model.safetensors").is_file()
    out = tmp_path / "run" / "results"
    with open(out / f"{task}.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == methods
    for r in rows:
        assert int(r["n"]) == 3
        assert set(columns + ("FR", "sec_per_cf", "tflops_per_cf")) <= set(r), sorted(r)
    return rows, out / task

