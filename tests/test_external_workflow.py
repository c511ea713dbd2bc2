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

TRICKY = "/data/my runs; echo pwned/{task}/Results/exp"


def _preset(tmp_path, **extra):
    pre = tmp_path / "p.yaml"
    pre.write_text(yaml.safe_dump({"run_tasks": ["synthxray_pacemaker"], "methods": ["fire", "external_mine"],
                                   "external": {"mine": {"path": TRICKY, "layout": "dime",
                                                         "mapping": "maps/{task}.csv"}},
                                   "workdir": str(tmp_path / "w"), **extra}))
    return pre


def test_external_method_is_imported_not_explained(tmp_path):
    r = _smk("-n", "--forceall", "-p", "--configfile", str(_preset(tmp_path)))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "rule import_external" in out and "results/synthxray_pacemaker/external_mine/counterfactuals.npz" in out
    assert "external_mine/shards" not in out and "explain --task synthxray_pacemaker --method external_mine" not in out
    profile = [ln for ln in out.splitlines() if "vcebench profile" in ln]
    assert len(profile) == 1 and "--method fire" in profile[0] and "external_mine" not in profile[0]
    assert "results/synthxray_pacemaker/external_mine/metrics.json" in out  # evaluated like the others
    # the config's path reaches the shell as one quoted word, {task} filled in
    quoted = shlex.quote(TRICKY.replace("{task}", "synthxray_pacemaker"))
    assert f"--layout dime --path {quoted}" in out


def test_unknown_external_name_fails_at_dag_construction(tmp_path):
    pre = _preset(tmp_path, methods=["fire", "external_other"])
    r = _smk("-n", "--forceall", "--configfile", str(pre))
    assert r.returncode != 0 and "external.other" in r.stdout + r.stderr


def test_import_args_and_roles(tmp_path):
    cfg = {"external": {"a": {"path": "x y/{task}", "mapping": "m.csv"}}}
    args = shlex.split(wf.import_args(cfg, "synthfaces_smile", "external_a", basedir="/repo"))
    assert args == ["--layout", "generic", "--path", "/repo/x y/synthfaces_smile", "--mapping", "/repo/m.csv"]
    assert wf.method_roles("external_a") == ("classifier",)
    assert wf.generated_methods(["fire", "external_a", "dime"]) == ["fire", "dime"]
    assert wf.external_name("fire_K5") is None
    with pytest.raises(ConfigError, match="external.b"):
        wf.import_args(cfg, "synthfaces_smile", "external_b")
