"""`vcebench data render|check|show|bench` end to end on tiny configs."""

import csv

import numpy as np
import yaml
from fakes import make_celeba
from PIL import Image

from vcebench.cli import main


def tiny_config(tmp_path):
    cfg = {"threads": 1, "datasets": {"synthfaces": {"n_identities": 10, "images_per_identity": 8},
                        "synthxray": {"n_patients": 20}}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return ["--config", "config/config.yaml", "--config", str(path)]


def test_render_writes_splits_and_attribute_table(tmp_path, capsys):
    out = tmp_path / "faces"
    assert main(["data", "render", "synthfaces", "--out", str(out), *tiny_config(tmp_path)]) == 0
    for s in ("train", "val", "test"):
        z = np.load(out / f"{s}.npz")
        assert z["images"].dtype == np.uint8 and z["images"].shape[1:] == (3, 32, 32)
        assert set(z.files) >= {"images", "sample_ids", "labels", "identity", "attribute_names"}
    rows = list(csv.DictReader(open(out / "attributes.csv")))
    assert len(rows) == 80 and list(rows[0])[:3] == ["sample_id", "split", "identity"]
    assert "Smiling" in rows[0] and {r["split"] for r in rows} == {"train", "val", "test"}
    assert not list(out.glob(".*tmp"))


def test_show_writes_grid_with_counterfactuals(tmp_path):
    out = tmp_path / "grid.png"
    assert main(["data", "show", "synthxray", "--n", "4", "--out", str(out), "--counterfactual", "Pacemaker",
                 *tiny_config(tmp_path)]) == 0
    im = Image.open(out)
    assert im.size[0] > 3 * 32 and im.size[1] >= 32


def test_check_celeba_ok_and_error_exit_codes(tmp_path, capsys):
    root = make_celeba(tmp_path / "celeba", n=8, fmt="csv")
    one = tiny_config(tmp_path)
    assert main(["data", "check", "celeba", "--root", str(root), *one]) == 0
    out = capsys.readouterr().out
    assert "celeba/train: 4 images" in out and "celeba/val: 2 images" in out and "celeba/test: 2 images" in out
    assert main(["data", "check", "celeba", "--root", str(tmp_path / "missing"), *one]) != 0
    err = capsys.readouterr().err
    assert "datasets.celeba.root" in err and "does not exist" in err and "Traceback" not in err
    (root / "img_align_celeba" / "000002.jpg").write_bytes(b"broken")
    assert main(["data", "check", "celeba", "--root", str(root), "--read-images", *one]) != 0
    assert "sample 2" in capsys.readouterr().err


def test_bench_prints_rates(tmp_path, capsys):
    assert main(["data", "bench", "--n", "32", "--resolutions", "32", *tiny_config(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "synthfaces" in out and "synthxray" in out and "images/s" in out
