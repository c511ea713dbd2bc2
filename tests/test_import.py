"""`vcebench import`: DiME/ACE, PEAL/SCE, RCSB and generic outputs round-trip to the npz that `vcebench evaluate`
scores, and bad folders get one error naming the file (each layout's own faults: tests/test_import_layouts.py)."""

import csv
import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import vcebench.models
from tests.fakes import save_image, write_dime, write_generic, write_peal, write_rcsb
from vcebench.cli import main
from vcebench.core.io import from_uint8, load_npz, save_npz
from vcebench.costs.standins import fake_counterfactuals, standin_models
from vcebench.steps.import_cf import ImportFolderError, import_folder
from vcebench.steps.import_layouts import DIME_GROUPS
from vcebench.steps.import_rcsb import wandb_view

N_EVAL = 24


@pytest.fixture(scope="module", params=["synthfaces_smile", "synthxray_pacemaker"])
def setup(request, tmp_path_factory):
    """A small config, the task's first N_EVAL evaluation inputs, stand-in networks and a known npz."""
    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.data import eval_split_name, load_split

    task_name = request.param
    d = tmp_path_factory.mktemp(task_name)
    cfg_path = d / "small.yaml"
    cfg_path.write_text(f"threads: 1\nn_eval: {N_EVAL}\nbatch_size: 10\n"
                        "datasets:\n  synthfaces: {n_identities: 40, images_per_identity: 8}\n"
                        "  synthxray: {n_patients: 200}\nmetrics:\n  batch_size: 7\n")
    config = ["--config", "config/config.yaml", "--config", str(cfg_path)]
    cfg = load_config(config[1::2])
    task = get_task(cfg, task_name)
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset))
    ids = torch.sort(split.sample_ids).values[:N_EVAL]
    x = split.float_images(split.index_of(ids))
    models = standin_models(split.attribute_names, x.shape[1], threshold=float(x.flatten(1).mean(1).median()))
    fake_counterfactuals(x, ids, models.classifier, d / "known.npz")
    z = load_npz(d / "known.npz")
    z["cf"][:4] = to_u8(x[:4])  # a few unchanged inputs: not flipped
    with torch.no_grad():
        z["flipped"] = (models.classifier(from_uint8(z["cf"])).argmax(1).numpy() == z["target"])
    save_npz(d / "known.npz", **z)
    assert 0 < z["flipped"].sum() < N_EVAL  # both kinds present: the FR check can fail
    return {"d": d, "config": config, "cfg": cfg, "task": task, "x": x, "z": z, "models": models,
            "label": split.attribute(task.attribute)[split.index_of(ids)].long().numpy()}


def _evaluate(s, cfs):
    from vcebench.protocol.run_settings import EvalSettings
    from vcebench.steps.evaluate import evaluate_task

    settings = EvalSettings.resolve(s["cfg"], s["task"], "m")  # "m": no configured method, no protocol record
    assert settings.protocol is None
    return evaluate_task(settings, str(cfs), only=["L1", "FR"], models=s["models"])["metrics"]


def write_layout(s, layout: str, folder: Path, mapping: Path) -> tuple[Path, Path | None]:
    """The setup's known counterfactuals as ``layout``'s code base leaves them; (the --path, the --mapping)."""
    z, x = s["z"], to_u8(s["x"])
    if layout == "generic":
        write_generic(z, folder, zero_pad=True)
        return folder, None
    if layout == "dime":
        write_dime(z, s["label"], folder, mapping)
    elif layout == "peal":  # SCE's two attempts per input; the mapping takes the second
        write_peal(z, x, s["label"], folder / "0" / "validation_tracked_values.npz", mapping, batch=4, attempts=2)
        return folder / "0", mapping
    else:
        write_rcsb(z, x, folder / "wandb" / "offline-run-20250528_130525-abc123", mapping)
        return folder / "wandb" / "offline-run-20250528_130525-abc123", mapping
    return folder, mapping


@pytest.mark.parametrize("layout", ["generic", "dime", "peal", "rcsb"])
def test_round_trip(setup, layout, tmp_path):
    s, z = setup, setup["z"]
    folder, mapping = write_layout(s, layout, tmp_path / "cfs", tmp_path / "map.csv")
    out = tmp_path / "imported" / "counterfactuals.npz"
    summary = import_folder(s["cfg"], s["task"], folder, layout, out, mapping=mapping, models=s["models"])
    got = load_npz(out)
    want = dict(z)
    if layout == "rcsb":  # the PNGs wandb wrote: 8-bit copies stretched to their own range, scored as they are
        want["cf"] = np.stack([wandb_view(c) for c in z["cf"]])
        with torch.no_grad():
            want["flipped"] = s["models"].classifier(from_uint8(want["cf"])).argmax(1).numpy() == z["target"]
    for k in ("sample_id", "cf", "target", "pred", "flipped"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert summary["n"] == N_EVAL and summary["disagreements"] == {"pred": 0, "cf_pred": 0}
    assert json.loads((out.parent / "import.json").read_text())["layout"] == layout
    if layout in ("dime", "peal"):
        np.testing.assert_array_equal(got["info_external_target"], z["target"])
    if layout in ("peal", "rcsb"):  # their copies of the inputs are the split's (rcsb: as wandb stretched them)
        assert summary["input_distance"] == 0
    assert len(summary["left_out"]) == (N_EVAL if layout == "peal" else 0)  # the first attempts
    # evaluate scores it like the original npz, and the numbers are the known ones
    m, m0 = _evaluate(s, out), _evaluate(s, s["d"] / "known.npz")
    assert m == m0 or layout == "rcsb"
    l1 = (np.abs(want["cf"].astype(np.float64) - to_u8(s["x"]).astype(np.float64)) / 255).reshape(N_EVAL, -1).mean(1)
    assert m["L1"] == pytest.approx(l1.mean(), rel=1e-6)
    assert m["FR"] == pytest.approx(100 * want["flipped"].mean())


@pytest.mark.parametrize("layout", ["peal", "rcsb"])
def test_wrong_mapping_is_refused_by_the_inputs(setup, layout, tmp_path):
    """Two records' sample ids swapped in the mapping: their own copies of the inputs give it away."""
    s = setup
    folder, mapping = write_layout(s, layout, tmp_path / "cfs", tmp_path / "map.csv")
    lines = mapping.read_text().splitlines()
    rows = [i for i, ln in enumerate(lines) if i and not ln.endswith(",")]
    a, b = rows[0], rows[1]
    (ka, sa), (kb, sb) = lines[a].split(","), lines[b].split(",")
    lines[a], lines[b] = f"{ka},{sb}", f"{kb},{sa}"
    mapping.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportFolderError, match=r"2 record\(s\) whose own copy of the input is not the mapped"):
        _import(s, folder, layout, mapping)


def to_u8(x):
    from vcebench.core.io import to_uint8

    return to_uint8(x)


def test_cli_generic_target_from_classifier(setup, tmp_path, monkeypatch, capsys):
    """Without targets in the folder, the target is 1 - f(x) (what `vcebench explain` uses)."""
    s, z = setup, setup["z"]
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda *a, **k: s["models"], raising=False)
    write_generic(z, tmp_path / "cfs")
    out = tmp_path / "out.npz"
    assert main(["import", "--task", s["task"].name, "--layout", "generic", "--path", str(tmp_path / "cfs"),
                 "--out", str(out), *s["config"]]) == 0
    got = load_npz(out)
    np.testing.assert_array_equal(got["target"], 1 - z["pred"])
    assert (got["info_external_target"] == -1).all()
    assert f"imported {N_EVAL} counterfactuals" in capsys.readouterr().out


# --- bad folders -----------------------------------------------------------------------------------

def _import(s, folder, layout="generic", mapping=None, tmp=None):
    return import_folder(s["cfg"], s["task"], folder, layout, folder.parent / "o.npz", mapping=mapping,
                         models=s["models"])


@pytest.fixture
def generic(setup, tmp_path):
    folder = tmp_path / "cfs"
    write_generic(setup["z"], folder)
    return setup, folder, setup["z"]


def test_missing_id(generic):
    s, folder, z = generic
    sid = int(z["sample_id"][3])
    (folder / f"{sid}.png").unlink()
    with pytest.raises(ImportFolderError, match=rf"1 evaluation id\(s\) have no counterfactual \(first: \[{sid}\]\)"):
        _import(s, folder)


def test_unknown_id(generic):
    s, folder, z = generic
    save_image(z["cf"][0], folder / "99999999.png")
    with pytest.raises(ImportFolderError, match=r"99999999\.png: sample id 99999999 is not in the task's evaluation"):
        _import(s, folder)


def test_id_beyond_n_eval(generic):
    s, folder, z = generic
    from vcebench.data import eval_split_name, load_split

    split = load_split(s["cfg"], s["task"].dataset, eval_split_name(s["task"].dataset))
    extra = int(torch.sort(split.sample_ids).values[N_EVAL])
    save_image(z["cf"][0], folder / f"{extra}.png")
    with pytest.raises(ImportFolderError, match=rf"{extra}\.png: sample id {extra} is not among the {N_EVAL}"):
        _import(s, folder)


def test_duplicate_id(generic):
    s, folder, z = generic
    sid = int(z["sample_id"][0])
    save_image(z["cf"][0], folder / f"{sid:05d}.png")
    with pytest.raises(ImportFolderError, match=rf"sample id {sid} given by 2 records: .*{sid:05d}\.png.*{sid}\.png"):
        _import(s, folder)


def test_wrong_size(generic):
    s, folder, z = generic
    sid = int(z["sample_id"][5])
    h = z["cf"].shape[2]
    save_image(np.zeros((z["cf"].shape[1], h + 2, h + 2), np.uint8), folder / f"{sid}.png")
    with pytest.raises(ImportFolderError, match=rf"{sid}\.png: {h + 2}x{h + 2} pixels, expected {h}x{h}"):
        _import(s, folder)


@pytest.mark.parametrize("kind", ["16bit", "palette", "rgba", "channels"])
def test_wrong_mode(generic, kind):
    s, folder, z = generic
    sid = int(z["sample_id"][2])
    c, h, w = z["cf"].shape[1:]
    path = folder / f"{sid}.png"
    if kind == "16bit":
        Image.fromarray(np.full((h, w), 40000, np.uint16)).save(path)
        msg = "16-bit image"
    elif kind == "palette":
        Image.fromarray(np.zeros((h, w, 3), np.uint8)).convert("P").save(path)
        msg = "palette image"
    elif kind == "rgba":
        Image.fromarray(np.zeros((h, w, 4), np.uint8)).save(path)
        msg = "alpha channel"
    else:  # grey for faces, RGB for x-ray
        Image.fromarray(np.zeros((h, w, 3), np.uint8) if c == 1 else np.zeros((h, w), np.uint8)).save(path)
        msg = "expected 8-bit"
    with pytest.raises(ImportFolderError, match=rf"{sid}\.png: .*{msg}"):
        _import(s, folder)


def test_float_out_of_range(generic):
    s, folder, z = generic
    sid = int(z["sample_id"][1])
    (folder / f"{sid}.png").unlink()
    np.save(folder / f"{sid}.npy", z["cf"][1].astype(np.float32))  # 0..255 floats, not [-1, 1]
    with pytest.raises(ImportFolderError, match=rf"{sid}\.npy: float values in \[.*\]; expected finite values"):
        _import(s, folder)
    np.save(folder / f"{sid}.npy", z["cf"][1].astype(np.float32) / 127.5 - 1)  # the right range imports
    got = load_npz(_import_path(s, folder))
    np.testing.assert_array_equal(got["cf"], z["cf"])


def _import_path(s, folder):
    _import(s, folder)
    return folder.parent / "o.npz"


def test_corrupt_png(generic):
    s, folder, z = generic
    sid = int(z["sample_id"][7])
    data = (folder / f"{sid}.png").read_bytes()
    (folder / f"{sid}.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImportFolderError, match=rf"{sid}\.png: corrupt or unreadable image"):
        _import(s, folder)


def test_name_without_mapping(generic):
    s, folder, z = generic
    (folder / f"{int(z['sample_id'][0])}.png").rename(folder / "face.png")
    with pytest.raises(ImportFolderError, match=r"face\.png: file name is not a sample id \(give --mapping\)"):
        _import(s, folder)


def test_several_problems_one_error(generic, capsys, monkeypatch):
    """Two bad files: one error (exit 2, one line) naming both."""
    s, folder, z = generic
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda *a, **k: s["models"], raising=False)
    a, b = int(z["sample_id"][0]), int(z["sample_id"][1])
    (folder / f"{a}.png").write_bytes(b"not a png")
    (folder / f"{b}.png").write_bytes(b"")
    assert main(["import", "--task", s["task"].name, "--layout", "generic", "--path", str(folder),
                 "--out", str(folder.parent / "o.npz"), *s["config"]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2 bad image file(s)" in err
    assert f"{a}.png" in err and f"{b}.png" in err


def test_dime_missing_info_and_wrong_folder(setup, tmp_path):
    s, z = setup, setup["z"]
    folder, mapping = tmp_path / "exp", tmp_path / "map.csv"
    write_dime(z, s["label"], folder, mapping)
    info = next((folder / g[0] / g[1] / "Info").glob("*.txt") for g in DIME_GROUPS
                if (folder / g[0] / g[1] / "Info").is_dir())
    info = next(info)
    info.unlink()
    with pytest.raises(ImportFolderError, match=rf"without their Info file: .*{info.name}"):
        _import(s, folder, "dime", mapping)
    (tmp_path / "out" / "Results" / "exp1").mkdir(parents=True)
    with pytest.raises(ImportFolderError, match=r"not a DiME/ACE experiment folder.*Results/exp1"):
        _import(s, tmp_path / "out", "dime", mapping)


def test_dime_unmapped_file(setup, tmp_path):
    s, z = setup, setup["z"]
    folder, mapping = tmp_path / "exp", tmp_path / "map.csv"
    write_dime(z, s["label"], folder, mapping)
    lines = mapping.read_text().splitlines()
    dropped = lines[1].split(",")[0]
    mapping.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    with pytest.raises(ImportFolderError, match=rf"{dropped}: not in the mapping CSV"):
        _import(s, folder, "dime", mapping)


# --- the README's commands ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def readme_commands(first: str, page: str = "docs/import.md") -> list[list[str]]:
    """The commands of the ``bash`` block of ``page`` (linked from the README) that holds ``first``, split like a
    shell would (continuation lines joined, comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / page).read_text(), re.S)
    block = next(b for b in blocks if first in b)
    return [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_readme_import_then_evaluate(tmp_path, monkeypatch, capsys):
    """docs/import.md (linked from the README): its commands, as printed, in a checkout whose
    config points at a fake CelebA; the DiME folder they name is written where they look (the only change:
    their `/runs/...` placeholder lies under tmp_path). The imported method is scored and tabled."""
    from tests.fakes import make_celeba
    from vcebench.config.load import load_config, read_yaml
    from vcebench.config.tasks import get_task
    from vcebench.core.merge import deep_merge
    from vcebench.data import eval_split_name, load_split

    commands = readme_commands("vcebench import --task celeba_smile")
    assert [c[:2] for c in commands] == [["vcebench", "import"], ["vcebench", "evaluate"], ["vcebench", "evaluate"],
                                         ["vcebench", "report"]]
    checkout = tmp_path / "checkout"
    (checkout / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "schema.yaml", checkout / "config" / "schema.yaml")
    n = 8
    mine = {"threads": 1, "n_eval": n, "batch_size": 4, "metrics": {"batch_size": 4, "sfid_seeds": [0]},
            "datasets": {"celeba": {"root": str(make_celeba(tmp_path / "celeba", n=48)), "resolution": 32,
                                    "minival": n}}}
    (checkout / "config" / "config.yaml").write_text(
        yaml.safe_dump(deep_merge(read_yaml(ROOT / "config" / "config.yaml"), mine)))
    cfg = load_config([checkout / "config" / "config.yaml"])
    task = get_task(cfg, "celeba_smile")
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset))
    ids = torch.sort(split.sample_ids).values[:n]
    x = split.float_images(split.index_of(ids))
    models = standin_models(split.attribute_names, 3, threshold=float(x.flatten(1).mean(1).median()))
    fake_counterfactuals(x, ids, models.classifier, tmp_path / "known.npz")
    z = load_npz(tmp_path / "known.npz")
    z["cf"][:2] = to_u8(x[:2])  # two unchanged inputs: not flipped
    with torch.no_grad():
        z["flipped"] = models.classifier(from_uint8(z["cf"])).argmax(1).numpy() == z["target"]
    assert 2 <= z["flipped"].sum() < n
    label = split.attribute(task.attribute)[split.index_of(ids)].long().numpy()
    write_dime(z, label, tmp_path / "runs" / "dime" / "Results" / "smile", checkout / "dime_ids.csv")
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda *a, **k: models, raising=False)
    monkeypatch.chdir(checkout)

    for command in commands:
        args = [a.replace("/runs/", f"{tmp_path}/runs/") for a in command[1:]]
        assert main(args) == 0, capsys.readouterr().err

    out = checkout / "results" / "celeba_smile"
    res = json.loads((out / "external_dime" / "metrics.json").read_text())
    assert res["metrics"]["FR"] == pytest.approx(100 * z["flipped"].mean())
    assert res["n"]["FID"] == int(z["flipped"].sum()) and res["metrics"]["FID"] is not None
    with open(checkout / "results" / "celeba_smile.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["method"] == "external_dime" and int(row["n"]) == n
    assert float(row["FR"]) == pytest.approx(100 * z["flipped"].mean())
    assert row["nfe_per_cf"] == row["mean_steps"] == row["sec_per_cf"] == ""  # vcebench did not run it
    md = (checkout / "results" / "celeba_smile.md").read_text()
    assert "| external_dime |" in md and "counterfactuals of another code base" in md
