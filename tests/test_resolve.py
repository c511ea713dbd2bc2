"""vcebench.protocol.resolve: one resolution per job, written as a canonical settings file that the jobs read
(and nothing else), overrides that reach it, and a range for every setting that fails the DAG build."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import methods
from tests.test_methods_explain import fake_world  # noqa: F401 (the fixture: toy networks, a fake split)
from vcebench import workflow as wf
from vcebench.cli import main
from vcebench.config.load import ConfigError, read_yaml
from vcebench.core.merge import deep_merge
from vcebench.protocol.resolve import job_n_eval, read_eval_settings, read_run_settings, resolve_job, settings_json
from vcebench.protocol.run_settings import EvalSettings, RunSettings

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def _smk(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([SNAKEMAKE, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_the_record_is_canonical_and_reads_back_the_same(cfg):
    """to_json: sorted keys, the same text after from_json; the hyperparameters, the protocol record and the
    job fields read back unchanged; the SHA-256 follows a hyperparameter and nothing the job does not read."""
    s = resolve_job(cfg, "synthfaces_smile", "maskdime")
    text = s.to_json()
    rec = json.loads(text)
    assert text == json.dumps(rec, sort_keys=True, indent=1) + "\n"
    back = RunSettings.from_json(text)
    assert back.to_json() == text and back.settings_sha256 == s.settings_sha256
    assert dict(back.params) == dict(s.params) and dict(back.protocol) == dict(s.protocol)
    assert back.parsed == s.parsed
    for k in ("seed", "n_eval", "batch_size", "split", "runtime"):
        assert getattr(back, k) == getattr(s, k), k
    assert "params" not in rec["protocol"] and "seed" not in rec["config"]  # one copy of each value
    assert set(rec["config"]["tasks"]) == {t for t, v in cfg["tasks"].items() if v["dataset"] == "synthfaces"}
    new = copy.deepcopy(cfg)
    new["tuned"]["synthfaces_smile"]["settings"]["maskdime"]["grad_scale"] = 9.0  # the tuned file's value
    assert resolve_job(new, "synthfaces_smile", "maskdime").settings_sha256 != s.settings_sha256
    new = copy.deepcopy(cfg)
    new["tasks"]["synthxray_pacemaker"]["params"]["fire"] = {"smoothgrad_n": 3}
    new["report"] = {"anything": 1}
    assert resolve_job(new, "synthfaces_smile", "maskdime").settings_sha256 == s.settings_sha256


def test_an_evaluation_reads_the_methods_record(cfg):
    """`vcebench evaluate --settings`: the run record of the method that made the counterfactuals gives the same
    EvalSettings as resolving them from the config; imported counterfactuals get an eval record (no params)."""
    text = settings_json(cfg, "synthfaces_smile", "fire")
    e, ref = EvalSettings.from_json(text), EvalSettings.resolve(cfg, "synthfaces_smile", "fire")
    assert dict(e.protocol) == dict(ref.protocol) and (e.n_eval, e.seed, e.split) == (ref.n_eval, ref.seed, ref.split)
    with pytest.raises(ConfigError, match="kind 'eval'"):
        RunSettings.from_json(EvalSettings.resolve(cfg, "synthfaces_smile", "external_x").to_json())


def test_pareto_only_methods_get_their_own_n_eval(cfg):
    """`pareto.n_eval` is resolved into the record of a method that only the `pareto` target runs."""
    c = deep_merge(cfg, {"pareto": {"n_eval": 5}})
    only = [m for m, _, _ in wf.pareto_methods(c) if m not in c["methods"] + c.get("paper_methods", [])]
    assert only and job_n_eval(c, only[0]) == 5 and job_n_eval(c, "fire") == c["n_eval"]


def test_explain_runs_the_settings_file_not_the_config(fake_world, tmp_path, monkeypatch):  # noqa: F811
    """A planted re-derivation fails here: the settings file says K = 1 and smoothgrad_n = 2 where the config
    files say otherwise; the explain job must build FiRe with the file's values (and its seed and n_eval)."""
    cfg, _ = fake_world
    s = RunSettings.resolve(cfg, "synthfaces_smile", "fire").with_params(K=1, smoothgrad_n=2)
    s = s.overridden(seed=7, n_eval=4)
    path = tmp_path / "settings.json"
    path.write_text(s.to_json())
    built = []
    real = methods.get_method
    monkeypatch.setattr(methods, "get_method", lambda name, params, **kw: built.append(params) or real(name, params,
                                                                                                        **kw))
    out = tmp_path / "shard-0-of-1.npz"
    assert main(["explain", "--settings", str(path), "--out", str(out)]) == 0
    assert [(p.K, p.smoothgrad_n) for p in built] == [(1, 2)]
    timing = json.loads(out.with_name("timing-0-of-1.json").read_text())
    assert timing["n"] == 4
    assert read_run_settings(path).seed == 7 and read_eval_settings(path).n_eval == 4
    assert main(["explain", "--settings", str(path), "--task", "synthfaces_smile", "--out", str(out)]) == 2


def test_settings_show_prints_the_record_with_set_values(capsys):
    assert main(["settings", "show", "synthfaces_smile", "fire", "--set", "seed=3", "--set",
                 "method_defaults.fire.smoothgrad_n=7", "--set", "device=cuda"]) == 0
    out, err = capsys.readouterr()
    rec = json.loads(out)
    assert (rec["seed"], rec["params"]["smoothgrad_n"], rec["runtime"]["device"]) == (3, 7, "cuda")
    assert "settings_sha256 " + RunSettings.from_json(out).settings_sha256 in err
    assert main(["settings", "show", "synthfaces_smile", "fire", "--set", "noequals"]) == 2


BAD = [("method_defaults: {maskdime: {k: 1e12}}", "method_defaults.maskdime.k"),
       ("method_defaults: {fire: {K: 1e9}}", "method_defaults.fire.K"),
       ("method_defaults: {fire: {dilation: 1e9}}", "method_defaults.fire.dilation"),
       ("variants: {ace: {snr_p2: {log_snr_offset: 1e12}}}", "variants.ace.snr_p2.log_snr_offset")]


@pytest.mark.parametrize("text,key", BAD)
def test_an_insane_value_fails_the_workflow_load_naming_the_key(tmp_path, text, key):
    """Each value passed `snakemake -n` before (a tuned layer merged over it hid it, or no bound held it): the
    Snakefile's check (wf.check_config) fails with one line naming the key."""
    preset = tmp_path / "bad.yaml"
    preset.write_text(text)
    cfg = deep_merge(read_yaml(ROOT / "config/config.yaml"), read_yaml(preset))
    with pytest.raises(ConfigError) as e:
        wf.check_config(cfg, [str(preset)], ROOT)
    assert f"`{key}`" in str(e.value) and "\n" not in str(e.value)


def test_a_pixel_length_is_held_to_the_tasks_images(cfg):
    """A resolved length in pixels beyond twice the task's 32 px images fails (the config layers allow up to 1024);
    at twice the side it passes."""
    c = copy.deepcopy(cfg)
    c["tasks"]["synthfaces_smile"]["params"]["fire_K5"] = {"dilation": 100}  # the last layer (over the tuned)
    with pytest.raises(ConfigError, match=r"dilation must be in \[0, 64\]"):
        RunSettings.resolve(c, "synthfaces_smile", "fire_K5")
    c["tasks"]["synthfaces_smile"]["params"]["fire_K5"] = {"dilation": 64}
    assert RunSettings.resolve(c, "synthfaces_smile", "fire_K5").params["dilation"] == 64


def test_config_overrides_reach_the_jobs_settings_file(tmp_path):
    """`snakemake -n` fails on an insane value with one line naming the key; `snakemake --config key=value`
    reaches the jobs: the one job resolve_settings writes the overridden device, seed and batch size into the file that
    explain and evaluate read."""
    preset = tmp_path / "one.yaml"
    preset.write_text(yaml.safe_dump({"run_tasks": ["synthfaces_smile"], "methods": ["fire"],
                                      "workdir": str(tmp_path / "work")}))
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD[0][0])
    r = _smk("-n", "--quiet", "--configfile", str(preset), str(bad))
    errors = [line for line in r.stderr.splitlines() if "vcebench config error" in line]
    assert r.returncode != 0 and len(errors) == 1 and f"`{BAD[0][1]}`" in errors[0], r.stderr
    target = "results/synthfaces_smile/fire/settings.json"
    r = _smk("--cores", "1", "--configfile", str(preset), "--config", "device=cuda", "seed=5", "batch_size=3",
             "--", target)
    assert r.returncode == 0, r.stdout + r.stderr
    path = tmp_path / "work" / target
    s = read_run_settings(path)
    assert (s.runtime.device, s.seed, s.batch_size, s.config["seed"]) == ("cuda", 5, 3, 5)
