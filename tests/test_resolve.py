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
from vcebench.protocol.resolve import (
    config_snapshot,
    job_n_eval,
    read_config_snapshot,
    read_eval_settings,
    read_run_settings,
    reference_json,
    resolve_job,
    settings_json,
)
from vcebench.protocol.run_settings import EvalSettings, RunSettings
from vcebench.protocol.step_settings import TrainSettings, TuneSettings
from vcebench.protocol.tune import tune_methods

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


def test_an_insane_value_fails_the_dry_run_in_one_line(tmp_path):
    """`snakemake -n` fails on an insane value with one line naming the key (the overrides that reach the jobs:
    :func:`test_overrides_reach_every_job_kind_and_no_job_reads_the_config_files`)."""
    preset = tmp_path / "one.yaml"
    preset.write_text(yaml.safe_dump({"run_tasks": ["synthfaces_smile"], "methods": ["fire"],
                                      "workdir": str(tmp_path / "work")}))
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD[0][0])
    r = _smk("-n", "--quiet", "--configfile", str(preset), str(bad))
    errors = [line for line in r.stderr.splitlines() if "vcebench config error" in line]
    assert r.returncode != 0 and len(errors) == 1 and f"`{BAD[0][1]}`" in errors[0], r.stderr


# --- the jobs that run no method: train, tune, the FID reference; the run's merged config for the tables ----------

def test_train_and_tune_records_read_back_and_follow_only_what_the_job_reads(cfg):
    """A training / tuning record reads back to the same text; its SHA-256 follows the role's recipe (the tune
    space) and nothing the job does not read; the dataset's tasks keep the config's order (the classifier's
    attributes follow it)."""
    tr = TrainSettings.resolve(cfg, "synthfaces", "classifier", "none")
    assert TrainSettings.from_json(tr.to_json()).to_json() == tr.to_json()
    assert list(tr.job_config()["tasks"]) == [t for t, v in cfg["tasks"].items() if v["dataset"] == "synthfaces"]
    assert tr.task == "synthfaces_smile" and tr.fire_t is None and "params" not in tr.job_config()["tasks"][tr.task]
    other = deep_merge(cfg, {"method_defaults": {"fire": {"K": 7}}, "models": {"synthxray": {"ddpm": {"steps": 9}}},
                             "report": {"anything": 1}})
    assert TrainSettings.resolve(other, "synthfaces", "classifier", "none").settings_sha256 == tr.settings_sha256
    recipe = deep_merge(cfg, {"models": {"synthfaces": {"classifier": {"steps": 3}}}})
    assert TrainSettings.resolve(recipe, "synthfaces", "classifier", "none").settings_sha256 != tr.settings_sha256
    pmf = TrainSettings.resolve(cfg, "synthfaces", "pmf", "none")  # the label check's FiRe noise level, resolved
    assert set(pmf.fire_t) == {"Smiling", "Young"} and all(0 < t < 1 for t in pmf.fire_t.values())
    tu = TuneSettings.resolve(cfg, "synthfaces_smile")
    assert TuneSettings.from_json(tu.to_json()).to_json() == tu.to_json()
    assert tu.methods == tune_methods(cfg) and set(tu.job_config()["method_defaults"]) == set(tu.methods)
    assert TuneSettings.resolve(other | {"report": {}}, "synthfaces_smile").settings_sha256 != tu.settings_sha256 \
        and TuneSettings.resolve(deep_merge(cfg, {"models": {"synthxray": {"ddpm": {"steps": 9}}}}),
                                 "synthfaces_smile").settings_sha256 == tu.settings_sha256
    assert TuneSettings.resolve(deep_merge(cfg, {"tune": {"n": 5}}), "synthfaces_smile").settings_sha256 \
        != tu.settings_sha256
    with pytest.raises(ConfigError, match="kind 'train', expected 'tune'"):
        TuneSettings.from_json(tr.to_json())


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_train_runs_the_settings_file_not_the_config(cfg, tmp_path, monkeypatch):
    """A planted re-derivation fails here: the file's recipe (classifier steps 3), seed and shipped-networks
    folder differ from the config files'; `vcebench train --settings` must train with the file's, and take no
    --task / --config / --networks beside it."""
    import vcebench.steps.networks as networks
    import vcebench.steps.train as train

    changed = deep_merge(cfg, {"seed": 11, "models": {"synthfaces": {"classifier": {"steps": 3}}}})
    path = _write(tmp_path / "classifier.json",
                  TrainSettings.resolve(changed, "synthfaces", "classifier", str(tmp_path / "nets")).to_json())
    seen = {}
    monkeypatch.setattr(networks, "install", lambda c, role, task, **kw: seen.update(install=kw["networks"]))
    monkeypatch.setattr(train, "train_role", lambda c, role, task, **kw: seen.update(
        cfg=c, role=role, task=task, networks=kw["networks"]) or {})
    out = str(tmp_path / "out")
    assert main(["train", "classifier", "--settings", path, "--out", out, "--no-progress"]) == 0
    assert (seen["role"], seen["task"], seen["cfg"]["seed"]) == ("classifier", "synthfaces_smile", 11)
    assert seen["cfg"]["models"]["synthfaces"]["classifier"]["steps"] == 3
    assert seen["install"] == seen["networks"] == str(tmp_path / "nets")
    for extra in (["--task", "synthfaces_smile"], ["--config", str(ROOT / "config/config.yaml")],
                  ["--networks", "none"]):
        assert main(["train", "classifier", "--settings", path, "--out", out, *extra]) == 2
    assert main(["train", "oracle", "--settings", path, "--out", out]) == 2  # another role's file


def test_tune_runs_the_settings_file_not_the_config(cfg, tmp_path, monkeypatch):
    """The same for `vcebench tune --settings`: the file's search budget and methods, nothing of the config."""
    import vcebench.cli.tune as cli_tune
    import vcebench.steps.tune as steps_tune

    changed = deep_merge(cfg, {"tune": {"n": 3}, "methods": ["maskdime", "pixel"]})
    path = _write(tmp_path / "tune.json", TuneSettings.resolve(changed, "synthfaces_smile").to_json())
    seen = {}
    result = {"wall_seconds": 0.0, "picked": {}, "settings": {}}
    monkeypatch.setattr(cli_tune, "run_tune", lambda c, task, **kw: seen.update(cfg=c, task=task, **kw) or result)
    monkeypatch.setattr(steps_tune, "write_tuned", lambda task, res, out, md, merge: seen.update(out=out) or res)
    out = tmp_path / "tuned.yaml"
    assert main(["tune", "--settings", path, "--out", str(out), "--md", str(tmp_path / "t.md")]) == 0
    assert (seen["task"], seen["method_names"], seen["cfg"]["tune"]["n"]) == ("synthfaces_smile",
                                                                               ["maskdime", "pixel"], 3)
    assert seen["out"] == out and "methods" not in seen["cfg"]
    assert main(["tune", "--settings", path]) == 2  # no tuned file named
    assert main(["tune", "--settings", path, "--out", str(out), "--task", "synthfaces_smile"]) == 2


def test_a_tuning_on_the_pruned_record_is_the_tuning_on_the_whole_config(cfg, tmp_path, monkeypatch):
    """run_tune on the record's config (what the job reads) makes the same sweep as on the whole config: the
    record holds every section the tuning reads (toy networks, a fake validation split, a stand-in scorer)."""
    import numpy as np
    import torch

    import vcebench.data as data
    import vcebench.models as vmodels
    from tests.test_methods_explain import FakeSplit
    from tests.toy import toy_models
    from vcebench.steps import evaluate as ev_cmd
    from vcebench.steps.tune import run_tune

    split = FakeSplit(10)
    monkeypatch.setattr(data, "load_split", lambda c, dataset, name, data_dir=None: split)
    monkeypatch.setattr(vmodels, "load_task_models", lambda *a, **k: toy_models())
    monkeypatch.setattr(ev_cmd, "write_reference", lambda *a, **k: None)

    def score(settings, npz, **kw):
        z = np.load(npz)
        return {"metrics": {"KID": float(np.abs(z["cf"].astype(float)).mean()), "FR": float(z["flipped"].mean())}}

    monkeypatch.setattr(ev_cmd, "evaluate_task", score)
    c = deep_merge(cfg, {"batch_size": 4, "threads": 1, "tune": {
        "sampler": "lhs", "n": 4, "n_settings": 2, "metrics": ["KID", "FR"],
        "select": {"minimize": "KID", "require": {"FR": 0}},
        "space": {"fire": {"eta": {"range": [0.5, 2.0], "scale": "log", "relative": True}}}}})
    c["method_defaults"]["fire"].update(K=2, smoothgrad_n=1)
    s = TuneSettings.resolve(c, "synthfaces_smile", ["fire"])
    torch.manual_seed(0)
    whole = run_tune(c, "synthfaces_smile", work_dir=tmp_path / "a", method_names=["fire"], log=None)
    torch.manual_seed(0)
    record = run_tune(s.job_config(), s.task, work_dir=tmp_path / "b", method_names=s.methods, log=None)
    for r in (whole, record):  # the times, measured
        r.pop("wall_seconds"), r.pop("compute_seconds")
        for row in r["sweep"]:
            row.pop("sec_per_cf"), row.pop("seconds")
    assert record == whole and len(whole["sweep"]) == 2


def test_the_fid_reference_runs_its_settings_file(cfg, tmp_path, monkeypatch):
    """`vcebench evaluate --settings FILE --reference`: the reference's record (no method) alone: its metrics
    batch size, not the config files'."""
    import vcebench.cli.evaluate as cli_evaluate

    changed = deep_merge(cfg, {"metrics": {"batch_size": 5}})
    path = _write(tmp_path / "fid_ref.settings.json", reference_json(changed, "synthfaces_smile"))
    seen = {}
    monkeypatch.setattr(cli_evaluate, "write_reference", lambda s, out, device, progress: seen.update(s=s, out=out))
    out = str(tmp_path / "fid_ref.npz")
    assert main(["evaluate", "--settings", path, "--reference", "--out", out]) == 0
    assert seen["s"].method is None and seen["s"].metrics["batch_size"] == 5 and seen["out"] == out
    assert main(["evaluate", "--settings", path, "--reference", "--task", "synthfaces_smile", "--out", out]) == 2


def test_the_tables_read_the_runs_merged_config(cfg, tmp_path, monkeypatch):
    """`vcebench report task --resolved-config FILE`: the run's merged config as the workflow wrote it (its rows
    here differ from the config files'), read as it is; not with --config beside it."""
    import vcebench.cli.report as cli_report

    changed = deep_merge(cfg, {"methods": ["maskdime", "input"], "seed": 9})
    path = _write(tmp_path / "config.resolved.json", config_snapshot(changed))
    assert read_config_snapshot(path) == json.loads(json.dumps(changed))
    seen = {}
    monkeypatch.setattr(cli_report, "task_report", lambda c, task, methods, *a: seen.update(cfg=c, methods=methods))
    assert main(["report", "task", "--task", "synthfaces_smile", "--resolved-config", path]) == 0
    assert seen["methods"] == ["maskdime", "input"] and seen["cfg"]["seed"] == 9
    assert main(["report", "task", "--task", "synthfaces_smile", "--resolved-config", path,
                 "--config", str(ROOT / "config/config.yaml")]) == 2
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["report", "task", "--task", "synthfaces_smile", "--resolved-config", str(tmp_path / "bad.json")]) == 2


def test_overrides_reach_every_job_kind_and_no_job_reads_the_config_files(tmp_path):
    """`snakemake --config key=value`: the resolution jobs (real, local) write the overridden values into the
    file of each job kind; and in the dry run of the default target no job's command names a config file (each
    reads its settings file or the run's merged config)."""
    preset = tmp_path / "one.yaml"
    preset.write_text(yaml.safe_dump({"run_tasks": ["synthfaces_smile"], "methods": ["fire"],
                                      "workdir": str(tmp_path / "work")}))
    files = {"run": "results/synthfaces_smile/fire/settings.json",
             "reference": "results/synthfaces_smile/fid_ref.settings.json",
             "train": "resources/settings/synthfaces/classifier.json",
             "tune": "results/tune/synthfaces_smile.settings.json",
             "config": "results/config.resolved.json"}
    over = ["device=cuda", "seed=5", "batch_size=3", "networks=null"]
    r = _smk("--cores", "1", "--configfile", str(preset), "--config", *over, "--", *files.values())
    assert r.returncode == 0, r.stdout + r.stderr
    work = tmp_path / "work"
    recs = {k: json.loads((work / f).read_text()) for k, f in files.items()}
    s = read_run_settings(work / files["run"])
    assert (s.runtime.device, s.seed, s.batch_size, s.config["seed"]) == ("cuda", 5, 3, 5)
    assert recs["reference"]["runtime"]["device"] == recs["train"]["config"]["device"] == "cuda"
    assert recs["run"]["seed"] == recs["reference"]["seed"] == recs["config"]["seed"] == 5
    assert recs["train"]["config"]["seed"] == recs["tune"]["config"]["seed"] == 5
    assert recs["train"]["networks"] == "none" and recs["config"]["networks"] is None
    assert recs["reference"]["batch_size"] == recs["tune"]["config"]["batch_size"] == recs["config"]["batch_size"] == 3
    r = _smk("-n", "-p", "--cores", "1", "--configfile", str(preset), "--config", *over)
    commands = [line.split("Shell command: ", 1)[1] for line in (r.stdout + r.stderr).splitlines()
                if line.startswith("Shell command: ") and not line.endswith("None")]
    assert r.returncode == 0 and len(commands) >= 10, r.stdout + r.stderr
    assert not [c for c in commands if "--config " in c], commands
    for verb in ("train", "evaluate", "report task", "data render"):
        assert any(c.startswith(f"vcebench {verb}") for c in commands), verb
