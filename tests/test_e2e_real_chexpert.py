"""End to end on CheXpert's released formats (tests/e2e_real.py): a fake CheXpert in the official layout, DiME's
one-output DenseNet-121 classifier and oracle, SimSiam, pytorch-fid's Inception, VGG19 and FastDiME_Med's DDPM
folder with random weights, a PMF trained by vcebench, then `snakemake results/chexpert_pacemaker.csv` through FiRe,
DiME, FastDiME and MaskDiME (tests/e2e_real.py: METHODS) to the table."""

from __future__ import annotations

import json

from tests.e2e_real import run_task
from tests.fakes import make_chexpert, make_released_weights


# ~17 jobs (91 s alone on 2 idle cores, AMD EPYC, 2026-12-04); part of the CI suite.
def test_chexpert_pacemaker_runs_from_released_formats_to_the_table(tmp_path):
    root, pacemaker = make_chexpert(tmp_path / "chexpert", n_patients=30)
    models = make_released_weights(tmp_path / "weights", "xray")
    assert set(models) == {"classifier", "oracle", "simsiam", "fid_features", "perceptual", "ddpm"}
    assert models["ddpm"]["format"] == "fastdime_chexpert"
    _, out = run_task(tmp_path, "chexpert_pacemaker", "chexpert",
                      {"root": str(root), "pacemaker_csv": str(pacemaker)}, models,
                      ("FID", "KID", "L1", "MAD", "S3"))  # S3: SimSiam similarity, no face metrics
    names = json.loads((out / "dime" / "metrics.json").read_text())["models"]
    assert "FastDiME medical UNet" in json.dumps(json.loads((out / "dime" / "profile.json").read_text()))
    assert "simsiam-resnet50" in names["simsiam"] and "densenet121" in names["classifier"]
    assert "pytorch-fid" in names["fid_features"] and "identity" not in names
