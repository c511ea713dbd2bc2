"""End to end on CelebA's released formats (tests/e2e_real.py): a fake CelebA in the official layout, DiME's
DenseNet-121, ACE's oracle, facenet, pytorch-fid's Inception, VGG19 and guided-diffusion's DDPM with random weights,
a PMF trained by vcebench, then `snakemake results/celeba_smile.csv` through FiRe, DiME, FastDiME-2 and -2+
(tests/e2e_real.py: METHODS) to the table."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e_real import run_task
from tests.fakes import make_celeba, make_released_weights


# ~17 jobs (69 s alone on 2 idle cores, AMD EPYC, 2026-12-04: every job pays a few seconds of imports, the
# configuration check and the full-size released networks); part of the CI suite.
def test_celeba_smile_runs_from_released_formats_to_the_table(tmp_path):
    data = make_celeba(tmp_path / "celeba", n=24)
    models = make_released_weights(tmp_path / "weights", "faces")
    assert set(models) == {"classifier", "oracle", "identity", "fid_features", "perceptual", "ddpm"}
    _, out = run_task(tmp_path, "celeba_smile", "celeba", {"root": str(data), "minival": 4}, models,
                      ("FID", "sFID", "FVA", "FS", "MNAC", "CD", "COUT"))
    names = json.loads((out / "dime" / "metrics.json").read_text())["models"]
    assert "guided-diffusion" in json.dumps(json.loads((out / "dime" / "profile.json").read_text()))
    assert "facenet" in names["identity"].lower() and "ace" in names["oracle"].lower()
    files = json.loads((out / "fire" / "metrics.json").read_text())["provenance"]["data_files"]  # the split files
    assert {Path(f).name: v["status"] for f, v in files.items()} == {"list_eval_partition.txt": "match",
                                                                      "list_attr_celeba.txt": "match"}
    assert "list_eval_partition.txt" in (out.parent / "celeba_smile.md").read_text().split("Provenance:")[1]
