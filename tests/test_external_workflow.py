"""`external_<name>` methods in the workflow: their explain step is `vcebench import`, nothing else runs them."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vcebench import workflow as wf
from vcebench.config.load import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _smk(*args, timeout=120):
    exe = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)

def _preset(tmp_path, make=True, **extra):
    """`external.mine`: a folder whose name holds a space and a shell command, per task."""
    tricky = str(tmp_path / "my runs; echo pwned" / "{task}" / "Results" / "exp")
    mapping = str(tmp_path / "{task}.csv")
    if make:
        Path(tricky.replace("{task}", "synthxray_pacemaker")).mkdir(parents=True)
        Path(mapping.replace("{task}", "synthxray_pacemaker")).write_text("file,sample_id\n")
    pre = tmp_path / "p.yaml"
    pre.write_text(yaml.safe_dump({"run_tasks": ["synthxray_pacemaker"], "methods": ["fire", "external_mine"],
                                   "external": {"mine": {"path": tricky, "layout": "dime", "mapping": mapping}},
                                   "workdir": str(tmp_path / "w"), **extra}))
    return pre, tricky


def test_external_method_is_imported_not_explained(tmp_path):
    pre, tricky = _preset(tmp_path)
    r = _smk("-n", "--forceall", "-p", "--configfile", str(pre))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "rule import_external" in out and "results/synthxray_pacemaker/external_mine/counterfactuals.npz" in out
    assert "external_mine/shards" not in out and "explain --task synthxray_pacemaker --method external_mine" not in out
    costs = [ln for ln in out.splitlines() if "--profile-out" in ln]  # costs come with the explain run's merge
    assert len(costs) == 1 and "fire/profile.json" in costs[0] and "external_mine" not in costs[0]
    assert "results/synthxray_pacemaker/external_mine/metrics.json" in out  # evaluated like the others
    # the config's path reaches the shell as one quoted word, {task} filled in
    quoted = shlex.quote(tricky.replace("{task}", "synthxray_pacemaker"))
    assert f"--layout dime --path {quoted}" in out


def test_seed_reruns_leave_imported_methods_out(tmp_path):
    """`snakemake seeds` reruns what vcebench generated; an imported method has no seed (its DAG once failed
    with 'unknown method external_mine' resolving an explain_seed job for it)."""
    pre, _ = _preset(tmp_path)
    r = _smk("seeds", "-n", "--forceall", "-p", "--configfile", str(pre))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "fire/settings.json --seed" in out and "seeds/1/external_mine" not in out
    assert "report seeds --task synthxray_pacemaker --methods fire " in out


def test_unknown_external_name_fails_at_dag_construction(tmp_path):
    pre, _ = _preset(tmp_path, methods=["fire", "external_other"])
    r = _smk("-n", "--forceall", "--configfile", str(pre))
    assert r.returncode != 0 and "external.other" in r.stdout + r.stderr


def test_missing_external_folder_is_named(tmp_path):
    pre, tricky = _preset(tmp_path, make=False)
    r = _smk("-n", "--forceall", "--configfile", str(pre))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "external.mine.path" in out
    assert f"{tricky.replace('{task}', 'synthxray_pacemaker')!r}, which does not exist" in out


def test_import_args_and_roles(tmp_path):
    cfg = {"external": {"a": {"path": "x y/{task}", "layout": "generic", "mapping": "m.csv"}}}
    (tmp_path / "x y" / "synthfaces_smile").mkdir(parents=True)
    (tmp_path / "m.csv").write_text("file,sample_id\n")
    args = shlex.split(wf.import_args(cfg, "synthfaces_smile", "external_a", basedir=tmp_path))
    assert args == ["--layout", "generic", "--path", f"{tmp_path}/x y/synthfaces_smile", "--mapping",
                    f"{tmp_path}/m.csv"]
    with pytest.raises(ConfigError, match=r"`external.a.path` points at .*x y/synthxray_pacemaker"):
        wf.external_inputs(cfg, "synthxray_pacemaker", "external_a", tmp_path)
    assert wf.method_roles("external_a") == ("classifier",)
    assert wf.generated_methods(["fire", "external_a", "dime"]) == ["fire", "dime"]
    assert wf.external_name("fire_K5") is None
    with pytest.raises(ConfigError, match="external.b"):
        wf.import_args(cfg, "synthfaces_smile", "external_b")


# --- a run: `methods: [fire, external_gt, external_dime, external_sce, external_rcsb]` to the table and the report

TASK = "synthfaces_smile"
N_EVAL = 6
TINY_MODELS = {  # the smallest networks that train in seconds (the table's numbers are not the point here)
    "classifier": {"steps": 20, "width": 8, "batch": 16},
    "oracle": {"steps": 5, "width": 8, "batch": 16, "fool_n": 8, "fool_steps": 1},
    "identity": {"steps": 5, "width": 8, "batch": 16},
    "perceptual": {"steps": 5, "width": 8, "batch": 16},
    "fid_features": {"steps": 5, "width": 8, "embed_dim": 8, "batch": 16},
    "ddpm": {"steps": 2, "batch_size": 8, "warmup_steps": 1, "n_samples": 4, "sample_steps": 2, "eval_images": 4},
    # from scratch (the default faces recipe continues the shipped start), without a flow-matching warm start
    "pmf": {"steps": 2, "batch_size": 8, "warmup_steps": 1, "n_samples": 4, "eval_images": 4, "fm_warmup_steps": None,
            "init_from": None, "init_sha256": None},
}


EXTERNAL = ["external_gt", "external_dime", "external_sce", "external_rcsb"]


def _imported_folders(tmp_path, cfg: dict) -> dict:
    """The task's ground-truth counterfactuals as four other code bases would leave them: a generic folder
    (`<sample id>.png`), a DiME experiment folder (Info targets 1 - label), PEAL/SCE's tracked-values npz (two
    attempts per input) and an RCSB wandb run folder, each of the last three with its mapping."""
    import torch

    from tests.fakes import write_dime, write_generic, write_peal, write_rcsb
    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.core.io import to_uint8
    from vcebench.data import eval_split_name, get_synthetic, load_split

    full = load_config([ROOT / "config" / "config.yaml"], cfg)
    task = get_task(full, TASK)
    split = load_split(full, task.dataset, eval_split_name(task.dataset))
    ids = torch.sort(split.sample_ids).values[:N_EVAL]
    label = split.attribute(task.attribute)[split.index_of(ids)].long().numpy()
    gt = to_uint8(get_synthetic(full, task.dataset).gt_counterfactuals(ids, task.attribute))
    z = {"sample_id": ids.numpy(), "cf": gt, "pred": label, "target": 1 - label, "flipped": label == label}
    write_generic(z, tmp_path / "gt")
    write_dime(z, label, tmp_path / "dime" / "Results" / "exp", tmp_path / "dime" / "ids.csv")
    x = to_uint8(split.float_images(split.index_of(ids)))
    write_peal(z, x, label, tmp_path / "sce" / "0" / "validation_tracked_values.npz", tmp_path / "sce" / "rows.csv",
               batch=3, attempts=2)
    run = tmp_path / "rcsb" / "outputs" / "2025-05-28" / "13-05-25" / "wandb" / "offline-run-20250528_130525-x1"
    write_rcsb(z, x, run, tmp_path / "rcsb" / "index.csv")
    return {"gt": {"path": str(tmp_path / "gt"), "layout": "generic"},
            "dime": {"path": str(tmp_path / "dime" / "Results" / "exp"), "layout": "dime",
                     "mapping": str(tmp_path / "dime" / "ids.csv")},
            "sce": {"path": str(tmp_path / "sce" / "0"), "layout": "peal",
                    "mapping": str(tmp_path / "sce" / "rows.csv")},
            "rcsb": {"path": str(run), "layout": "rcsb", "mapping": str(tmp_path / "rcsb" / "index.csv")},
            "label": label}


def test_imported_methods_run_to_the_table_and_report(tmp_path):
    """Four imported sources (generic, DiME, PEAL/SCE, RCSB layouts) beside FiRe: imported, evaluated, in the csv /
    md, drawn in a gallery and in `snakemake --report` (about 2 minutes on 2 cores: seven tiny networks train)."""
    import csv
    import json

    import numpy as np

    from vcebench.core.io import load_npz

    cfg = {"threads": 1, "train_threads": 1, "n_shards": 1, "batch_size": 8, "n_eval": N_EVAL, "run_tasks": [TASK],
           "methods": ["fire", *EXTERNAL], "workdir": str(tmp_path / "w"),
           "datasets": {"synthfaces": {"n_identities": 40, "images_per_identity": 8}},
           "metrics": {"sfid_seeds": [0]}, "tasks": {TASK: {"params": {"fire": {"K": 2, "smoothgrad_n": 2}}}},
           "models": {"synthfaces": TINY_MODELS}}
    folders = _imported_folders(tmp_path, cfg)
    label = folders.pop("label")
    pre = tmp_path / "p.yaml"
    pre.write_text(yaml.safe_dump({**cfg, "external": folders}))
    r = _smk("--cores", "2", "--configfile", str(pre), timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    results = tmp_path / "w" / "results"
    with open(results / f"{TASK}.csv") as f:
        rows = {row["method"]: row for row in csv.DictReader(f)}
    assert list(rows) == cfg["methods"]
    for m in EXTERNAL:
        z = load_npz(results / TASK / m / "counterfactuals.npz")
        assert int(rows[m]["n"]) == N_EVAL
        # scored from what was imported (the csv keeps 6 significant digits)
        assert float(rows[m]["FR"]) == pytest.approx(100 * z["flipped"].mean(), rel=1e-5)
        assert rows[m]["nfe_per_cf"] == rows[m]["sec_per_cf"] == rows[m]["tflops_per_cf"] == ""
        assert (results / TASK / m / "gallery.png").stat().st_size > 0
    assert rows["fire"]["nfe_per_cf"] != ""
    for m, layout in (("external_dime", "dime"), ("external_sce", "peal")):  # the Info files', y_target_list's
        np.testing.assert_array_equal(load_npz(results / TASK / m / "counterfactuals.npz")["target"], 1 - label)
        assert json.loads((results / TASK / m / "import.json").read_text())["layout"] == layout
    rcsb = json.loads((results / TASK / "external_rcsb" / "import.json").read_text())
    assert rcsb["layout"] == "rcsb" and rcsb["input_distance"] == 0  # its logged inputs are the split's
    np.testing.assert_array_equal(load_npz(results / TASK / "external_sce" / "counterfactuals.npz")["cf"],
                                  load_npz(results / TASK / "external_gt" / "counterfactuals.npz")["cf"])
    md = (results / f"{TASK}.md").read_text()
    assert all(f"| {m} |" in md for m in EXTERNAL)
    assert f"{', '.join(EXTERNAL)}: counterfactuals of another code base" in md

    html = tmp_path / "report.html"
    r = _smk("--report", str(html), "--configfile", str(pre))
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    text = html.read_text()
    for m in EXTERNAL:
        assert f"results/{TASK}/{m}/gallery.png" in text
    assert f"results/{TASK}.csv" in text
