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
from vcebench.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _smk(*args):
    exe = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)

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
    cfg = {"external": {"a": {"path": "x y/{task}", "mapping": "m.csv"}}}
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
