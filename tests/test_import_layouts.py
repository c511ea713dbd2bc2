"""`vcebench import --layout peal|rcsb` on fakes of what PEAL's CFKD adaptor and RCSB's wandb run leave behind
(tests/fakes.py): a good file reads back exactly, and each malformed one is one error naming the fault. No
config or network: `read_folder` is handed the split's shape and ids (the round trip through the task's
classifier is tests/test_import.py's)."""

import shutil

import numpy as np
import pytest
import yaml

from tests.fakes import write_peal, write_rcsb
from vcebench.steps.import_cf import LAYOUTS, ImportFolderError, read_folder
from vcebench.steps.import_rcsb import wandb_view

N, SHAPE = 8, (3, 6, 5)
IDS = np.arange(20, 20 + N)
SPLIT = np.arange(100)


@pytest.fixture
def known():
    rng = np.random.default_rng(0)
    x = rng.integers(30, 220, (N, *SHAPE), dtype=np.uint8)
    cf = rng.integers(0, 256, (N, *SHAPE), dtype=np.uint8)
    pred = rng.integers(0, 2, N)
    z = {"sample_id": IDS, "cf": cf, "pred": pred, "target": 1 - pred, "flipped": np.arange(N) % 3 > 0}
    return z, x


def _read(path, layout, mapping=None, shape=SHAPE):
    return read_folder(path, layout, shape, IDS, SPLIT, mapping)


# --- peal ------------------------------------------------------------------------------------------

@pytest.fixture
def peal(known, tmp_path):
    z, x = known
    npz, mapping = tmp_path / "sce_cfkd" / "0" / "validation_tracked_values.npz", tmp_path / "rows.csv"
    write_peal(z, x, z["pred"], npz, mapping, batch=4)
    return npz, mapping, z, x


def _resave(npz, **change):
    with np.load(npz) as f:
        arrays = {k: f[k] for k in f.files}
    arrays.update(change)
    for k in [k for k, v in change.items() if v is None]:
        del arrays[k]
    with open(npz, "wb") as f:
        np.savez(f, **arrays)


def test_peal_reads_back(peal):
    npz, mapping, z, x = peal
    entries, images, left_out = _read(npz.parent, "peal", mapping)
    assert [e.sample_id for e in entries] == IDS.tolist() and left_out == []
    np.testing.assert_array_equal(images, z["cf"])
    np.testing.assert_array_equal(np.stack([e.source_input for e in entries]), x)
    assert [e.target for e in entries] == z["target"].tolist()
    assert [e.pred for e in entries] == z["pred"].tolist()
    assert [e.cf_pred for e in entries] == np.where(z["flipped"], z["target"], z["pred"]).tolist()
    assert {e.key for e in entries} == {str(r) for r in range(N)}  # the rows (the loader's order reversed)
    assert _read(npz, "peal", mapping)[0][0].where == f"{npz} row {N - 1}"  # the file itself works too


@pytest.mark.parametrize("fault, message", [
    ({"x_list": None}, r"lacks \['x_list'\]"),
    ({"x_counterfactual_list": None}, r"lacks \['x_counterfactual_list'\]"),
    ({"x_counterfactual_list": lambda a: a[:, :, :-1]}, r"`x_counterfactual_list` has shape \(8, 3, 5, 5\), "
                                                        r"expected \(N, C, H, W\) = \(8, 3, 6, 5\)"),
    ({"x_list": lambda a: a.transpose(0, 2, 3, 1)}, r"`x_list` has shape \(8, 6, 5, 3\)"),
    ({"x_counterfactual_list": lambda a: a * 2 - 1}, r"values in \[-1, 1\], expected \[0, 1\]"),
    ({"x_counterfactual_list": lambda a: (a * 255).astype(np.uint8)}, r"dtype uint8; PEAL writes float32"),
    ({"x_list": lambda a: np.where(a > 0.5, np.nan, a)}, r"`x_list` holds NaN"),
    ({"y_target_list": lambda a: a[:-1]}, r"`y_target_list` has shape \(7,\), expected \(8,\)"),
])
def test_peal_malformed_file(peal, fault, message):
    npz, mapping, *_ = peal
    with np.load(npz) as f:
        change = {k: (v(f[k]) if callable(v) else v) for k, v in fault.items()}
    _resave(npz, **change)
    with pytest.raises(ImportFolderError, match=message):
        _read(npz.parent, "peal", mapping)


def test_peal_mapping_must_match_the_rows(peal):
    npz, mapping, *_ = peal
    with pytest.raises(ImportFolderError, match=r"layout peal records no sample ids: give --mapping"):
        _read(npz.parent, "peal")
    lines = mapping.read_text().splitlines()
    mapping.write_text("\n".join(lines[:-1]) + "\n")  # the last row unmapped
    with pytest.raises(ImportFolderError, match=rf"row {N - 1}: not in the mapping CSV \(key '{N - 1}'\)"):
        _read(npz.parent, "peal", mapping)
    mapping.write_text("\n".join(lines + [f"{N},99"]) + "\n")  # a row the file does not hold
    with pytest.raises(ImportFolderError, match=rf"the mapping names '{N}', which is not among the {N} records"):
        _read(npz.parent, "peal", mapping)


def test_peal_attempts_need_a_choice(known, tmp_path):
    """SCE's two attempts per input: every row mapped to its sample is two records per id; the mapping's empty
    sample ids leave the first attempts out, listed."""
    z, x = known
    npz, mapping = tmp_path / "0" / "validation_tracked_values.npz", tmp_path / "rows.csv"
    write_peal(z, x, z["pred"], npz, mapping, batch=4, attempts=2)
    entries, images, left_out = _read(npz, "peal", mapping)
    np.testing.assert_array_equal(images, z["cf"])  # the second attempts
    assert sorted(int(e.key) for e in left_out) == [0, 1, 2, 3, 8, 9, 10, 11]
    # both attempts mapped: row r is batch r // 8 (of 4 inputs), attempt (r // 4) % 2, input r % 4 of the batch
    mapping.write_text("file,sample_id\n" + "".join(f"{r},{IDS[N - 1 - (r // 8 * 4 + r % 4)]}\n" for r in range(2 * N)))
    with pytest.raises(ImportFolderError, match=rf"sample id {IDS[-1]} given by 2 records: .*row 0, .*row 4"):
        _read(npz, "peal", mapping)


def test_peal_file_not_found(peal, tmp_path):
    npz, mapping, *_ = peal
    with pytest.raises(ImportFolderError, match=r"no validation_tracked_values.npz .* finetune iterations \['0'\] "
                                                r"have one: pass .*sce_cfkd/0"):
        _read(npz.parent.parent, "peal", mapping)
    npz.write_bytes(b"not a zip")
    with pytest.raises(ImportFolderError, match=r"unreadable npz"):
        _read(npz, "peal", mapping)


# --- rcsb ------------------------------------------------------------------------------------------

@pytest.fixture
def rcsb(known, tmp_path):
    z, x = known
    run, mapping = tmp_path / "wandb" / "run-20250528_130525-abc123", tmp_path / "index.csv"
    write_rcsb(z, x, run, mapping, n_skip=3)
    return run, mapping, z, x


def _config(run, edit):
    path = run / "files" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    edit(cfg)
    path.write_text("wandb_version: 1\n\n" + yaml.safe_dump(cfg))


def _media(run, key):
    return sorted((run / "files" / "media" / "images").glob(f"{key}_*.png"), key=lambda p: int(p.name.split("_")[1]))


def test_rcsb_reads_back(rcsb):
    run, mapping, z, x = rcsb
    for path in (run, run / "files"):
        entries, images, _ = _read(path, "rcsb", mapping)
        assert [e.sample_id for e in entries] == IDS.tolist()
        np.testing.assert_array_equal(images, np.stack([wandb_view(c) for c in z["cf"]]))
        np.testing.assert_array_equal(np.stack([e.source_input for e in entries]),
                                      np.stack([wandb_view(a) for a in x]))
        assert sorted(int(e.key) for e in entries) == list(range(3, 3 + N))  # n_skip + k
    # without a mapping the dataset index is the sample id
    shifted = read_folder(run, "rcsb", SHAPE, np.arange(3, 3 + N), SPLIT)[0]
    assert [int(e.key) for e in shifted] == [e.sample_id for e in shifted]


def test_rcsb_grey_task(known, tmp_path):
    """wandb repeats a grey image over three channels; a grey task reads one back, and refuses a colour PNG."""
    z, x = known
    z = dict(z, cf=z["cf"][:, :1])
    write_rcsb(z, x[:, :1], tmp_path / "run", tmp_path / "index.csv")
    _, images, _ = _read(tmp_path / "run", "rcsb", tmp_path / "index.csv", shape=(1, *SHAPE[1:]))
    np.testing.assert_array_equal(images, np.stack([wandb_view(c) for c in z["cf"]]))
    shutil.rmtree(tmp_path / "run")
    write_rcsb(known[0], known[1], tmp_path / "run", tmp_path / "index.csv")
    with pytest.raises(ImportFolderError, match=r"inpaints_.*channels differ; this task's images are grey"):
        _read(tmp_path / "run", "rcsb", tmp_path / "index.csv", shape=(1, *SHAPE[1:]))


def test_rcsb_not_a_run(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ImportFolderError, match=r"no config.yaml here or in files/: not a wandb run folder"):
        _read(tmp_path / "run", "rcsb")
    (tmp_path / "f.npz").write_bytes(b"")
    with pytest.raises(ImportFolderError, match=r"not a folder \(layout rcsb reads a folder\)"):
        _read(tmp_path / "f.npz", "rcsb")


def test_rcsb_several_inpaints_per_input(known, tmp_path):
    z, x = known
    write_rcsb(z, x, tmp_path / "run", tmp_path / "index.csv", n_inpaints=2)
    with pytest.raises(ImportFolderError, match=r"a grid of 2 counterfactuals \(exp.n_inpaints=2 x "
                                                r"exp.batch_multip=1\); import a run with exp.n_inpaints=1"):
        _read(tmp_path / "run", "rcsb", tmp_path / "index.csv")


def test_rcsb_config_without_n_skip(rcsb):
    run, mapping, *_ = rcsb
    _config(run, lambda c: c["dataset"]["value"]["dataset"].pop("n_skip"))
    with pytest.raises(ImportFolderError, match=r"config.yaml: no integer \['dataset.dataset.n_skip'\]"):
        _read(run, "rcsb", mapping)


def test_rcsb_missing_image_is_a_count_mismatch(rcsb):
    run, mapping, *_ = rcsb
    _media(run, "inpaints")[2].unlink()
    with pytest.raises(ImportFolderError, match=rf"{N - 1} inpaints_\*.png but {N} images_\*.png"):
        _read(run, "rcsb", mapping)
    _media(run, "images")[5].unlink()  # both files of an input gone: the CFLoss records still name it
    with pytest.raises(ImportFolderError, match=r"artifacts: the CFLoss records name dataset indices \[10\] not "
                                                r"logged"):
        _read(run, "rcsb", mapping)


def test_rcsb_n_skip_disagrees_with_the_records(rcsb):
    run, mapping, *_ = rcsb
    _config(run, lambda c: c["dataset"]["value"]["dataset"].update(n_skip=0))
    with pytest.raises(ImportFolderError, match=r"name dataset indices \[8, 9, 10\] not logged, and miss \[0, 1, 2\]"):
        _read(run, "rcsb", mapping)


def test_rcsb_wrong_size_and_mapping(rcsb):
    run, mapping, *_ = rcsb
    with pytest.raises(ImportFolderError, match=r"the mapping names '99', which is not among the 8 records"):
        mapping.write_text(mapping.read_text() + "99,5\n")
        _read(run, "rcsb", mapping)
    with pytest.raises(ImportFolderError, match=r"8 bad image file\(s\): .*inpaints_.*5x6 pixels, expected 6x5"):
        _read(run, "rcsb", None, shape=(3, 5, 6))


def test_schema_knows_every_layout():
    from pathlib import Path

    schema = yaml.safe_load((Path(__file__).resolve().parent.parent / "config" / "schema.yaml").read_text())
    assert tuple(schema["properties"]["external"]["additionalProperties"]["properties"]["layout"]["enum"]) == LAYOUTS
