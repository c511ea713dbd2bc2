"""End to end on the real formats: a fake CelebA / CheXpert in the official layout, random-weight
checkpoints in every released format the task loads, a PMF trained by vcebench, then
`snakemake results/<task>.csv` through every method to the table."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.fakes import make_celeba, make_chexpert, make_released_weights

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
METHODS = ["fire", "dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime"]
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


def _run_task(tmp_path: Path, task: str, dataset: str, data: dict, models: dict,
              columns: tuple[str, ...]) -> tuple[list[dict], Path]:
    """`snakemake results/<task>.csv` on ``data`` (``datasets.<dataset>``) and ``models`` (``models.<dataset>``,
    the pmf given as training settings: the workflow trains it); returns the table's rows and results dir."""
    base = {
        "threads": 1, "n_shards": 1, "batch_size": 4, "n_eval": 3, "workdir": str(tmp_path / "run"),
        "reference_dir": str(tmp_path / "reference"), "run_tasks": [task], "methods": METHODS,
        "datasets": {dataset: {**data, "resolution": 32}},
        "metrics": {"sfid_seeds": [0]},
        "tasks": {task: {"params": {"fire": FIRE_PARAMS, **{m: dict(DDPM_PARAMS) for m in METHODS if m != "fire"}}}},
    }
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({**base, "models": {dataset: {**models, "pmf": PMF_TRAIN}}}))
    snakemake = shutil.which("snakemake", path=str(BIN)) or "snakemake"
    _run([snakemake, f"results/{task}.csv", "--cores", "2", "--configfile", str(run)])
    assert (tmp_path / "run" / "resources" / "models" / dataset / "pmf" / "model.safetensors").is_file()
    out = tmp_path / "run" / "results"
    with open(out / f"{task}.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == METHODS
    for r in rows:
        assert int(r["n"]) == 3
        assert set(columns + ("FR", "sec_per_cf", "tflops_per_cf")) <= set(r), sorted(r)
    return rows, out / task


# Each test runs ~21 jobs (about 2 minutes on 2 idle cores: every job pays a few seconds of imports, the
# configuration check and the full-size released networks); part of the CI suite.
def test_celeba_smile_runs_from_released_formats_to_the_table(tmp_path):
    data = make_celeba(tmp_path / "celeba", n=24)
    models = make_released_weights(tmp_path / "weights", "faces")
    assert set(models) == {"classifier", "oracle", "identity", "fid_features", "perceptual", "ddpm"}
    _, out = _run_task(tmp_path, "celeba_smile", "celeba", {"root": str(data), "minival": 4}, models,
                        ("FID", "sFID", "FVA", "FS", "MNAC", "CD", "COUT"))
    names = json.loads((out / "dime" / "metrics.json").read_text())["models"]
    assert "guided-diffusion" in json.dumps(json.loads((out / "dime" / "profile.json").read_text()))
    assert "facenet" in names["identity"].lower() and "ace" in names["oracle"].lower()
    files = json.loads((out / "fire" / "metrics.json").read_text())["provenance"]["data_files"]  # the split files
    assert {Path(f).name: v["status"] for f, v in files.items()} == {"list_eval_partition.txt": "match",
                                                                      "list_attr_celeba.txt": "match"}
    assert "list_eval_partition.txt" in (out.parent / "celeba_smile.md").read_text().split("Provenance:")[1]


def test_chexpert_pacemaker_runs_from_released_formats_to_the_table(tmp_path):
    root, pacemaker = make_chexpert(tmp_path / "chexpert", n_patients=30)
    models = make_released_weights(tmp_path / "weights", "xray")
    assert set(models) == {"classifier", "oracle", "simsiam", "fid_features", "perceptual", "ddpm"}
    assert models["ddpm"]["format"] == "fastdime_chexpert"
    _, out = _run_task(tmp_path, "chexpert_pacemaker", "chexpert",
                       {"root": str(root), "pacemaker_csv": str(pacemaker)}, models,
                       ("FID", "KID", "L1", "MAD", "S3"))  # S3: SimSiam similarity, no face metrics
    names = json.loads((out / "dime" / "metrics.json").read_text())["models"]
    assert "FastDiME medical UNet" in json.dumps(json.loads((out / "dime" / "profile.json").read_text()))
    assert "simsiam-resnet50" in names["simsiam"] and "densenet121" in names["classifier"]
    assert "pytorch-fid" in names["fid_features"] and "identity" not in names
