"""Config errors name their file and key in one line (issue 25, item 4): YAML syntax errors, a top level that is
no mapping and a key written twice; and what a dry run used to accept and a run failed on later (a task's
attribute its dataset lacks, a resolution the networks cannot take) fails at `snakemake -n`. More shards than
inputs is a warning there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vcebench.cli import main
from vcebench.config.load import ConfigError, read_yaml
from vcebench.protocol.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"

DUPLICATE = "n_eval: 8\ntasks:\n  synthfaces_smile:\n    attribute: Smiling\n    attribute: Young\n"


def _cli_error(capsys, path: Path) -> str:
    """`vcebench evaluate` with the config file ``path``: exit 2 and its one-line message."""
    assert main(["evaluate", "--task", "synthfaces_smile", "--reference", "--out", str(path.parent / "r.npz"),
                 "--config", "config/config.yaml", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


@pytest.mark.parametrize("text,where,problem", [
    ("n_eval: 8\nmethods: {fire: [1, 2}\n", "line 2, column 22", "did not find expected ',' or ']'"),
    ("n_eval: 8\n  methods: [fire]\n", "line 2, column 10", "mapping values are not allowed"),
    ("n_eval: 8\nmethods: [fire\n", "line 3, column 1", "did not find expected ',' or ']'"),
])
def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys, text, where, problem):
    bad = tmp_path / "mine.yaml"
    bad.write_text(text)
    err = _cli_error(capsys, bad)
    assert f"{bad}, {where}: {problem}" in err and "<unicode string>" not in err


def test_a_top_level_that_is_no_mapping_names_the_file(tmp_path, capsys):
    bad = tmp_path / "list.yaml"
    bad.write_text("- n_eval: 8\n- threads: 1\n")
    assert f"config file {bad} must hold a mapping (`key: value` lines) at the top level, not a list" in \
        _cli_error(capsys, bad)


def test_a_key_written_twice_is_named_with_its_lines(tmp_path, capsys):
    bad = tmp_path / "twice.yaml"
    bad.write_text(DUPLICATE)
    err = _cli_error(capsys, bad)
    assert f"{bad}, line 5: key `tasks.synthfaces_smile.attribute` is given twice (first on line 4)" in err
    top = tmp_path / "top.yaml"
    top.write_text("threads: 1\nn_eval: 8\nthreads: 2\n")
    with pytest.raises(ConfigError, match=r"line 3: key `threads` is given twice \(first on line 1\)"):
        read_yaml(top)
    listed = tmp_path / "listed.yaml"
    listed.write_text("tune:\n  bounds:\n    - {FR: 1, FR: 2}\n")
    with pytest.raises(ConfigError, match=r"key `tune.bounds\[0\].FR` is given twice"):
        read_yaml(listed)


def test_anchors_aliases_and_merge_keys_are_no_duplicates(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("a: &x {b: 1, c: 2}\nd: *x\ne:\n  <<: *x\n  b: 3\nf: [*x, *x]\n'1': one\n1: int\n")
    assert read_yaml(ok) == {"a": {"b": 1, "c": 2}, "d": {"b": 1, "c": 2}, "e": {"b": 3, "c": 2},
                             "f": [{"b": 1, "c": 2}] * 2, "1": "one", 1: "int"}


def test_the_repository_config_files_have_no_key_twice():
    files = [ROOT / "config" / "config.yaml", ROOT / "config" / "schema.yaml",
             *sorted((ROOT / "config" / "presets").glob("*.yaml")), *sorted((ROOT / "config" / "tuned").glob("*.yaml"))]
    for f in files:
        assert read_yaml(f) is not None, f


def test_a_task_attribute_its_dataset_lacks_is_named():
    bad = {"tasks": {"synthfaces_smile": {"attribute": "Smilling"}}}
    with pytest.raises(ConfigError) as e:
        load_settings(overrides=bad)
    msg = str(e.value)
    assert msg.startswith("config key `tasks.synthfaces_smile.attribute`: dataset 'synthfaces' has no attribute "
                          "'Smilling' (did you mean 'Smiling'?)") and "\n" not in msg
    with pytest.raises(ConfigError, match="tasks.synthfaces_smile.attribute"):  # a job of that task
        load_settings(overrides=bad, only=("synthfaces_smile", "fire"))
    load_settings(overrides=bad, only=("synthfaces_age", None))  # another task's job is not concerned
    load_settings(overrides={"tasks": {"synthxray_pacemaker": {"attribute": "Male"}}})  # any label of the dataset


@pytest.mark.parametrize("override,msg", [
    ({"datasets": {"synthfaces": {"resolution": 31}}},
     "config key `datasets.synthfaces.resolution` (31) must be a multiple of 4"),
    ({"datasets": {"synthxray": {"resolution": 36}},
      "models": {"synthxray": {"pmf": {"unet": {"block_out_channels": [16, 32, 64, 64]}}}}},
     "config key `datasets.synthxray.resolution` (36) must be a multiple of 8: "
     "`models.synthxray.pmf.unet.block_out_channels` has 4 levels (e.g. 40)"),
])
def test_a_resolution_the_networks_cannot_take_is_named(override, msg):
    with pytest.raises(ConfigError) as e:
        load_settings(overrides=override)
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


@pytest.mark.parametrize("recipe,msg", [
    ({"lr_schedule": "linear"}, "config key `models.synthfaces.ddpm.lr_schedule` must be one of ['cosine', 'wsd']"),
    ({"decay_fraction": 1.5}, "config key `models.synthfaces.ddpm.decay_fraction` must be in [0, 1]"),
])
def test_a_learning_rate_schedule_typo_is_named_before_training(recipe, msg):
    with pytest.raises(ConfigError) as e:
        load_settings(overrides={"models": {"synthfaces": {"ddpm": recipe}}})
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_a_pmf_warm_start_longer_than_its_run_is_named_at_load():
    """A preset that lowers the pmf's steps below an inherited fm_warmup_steps would train flow matching only."""
    with pytest.raises(ConfigError) as e:
        load_settings(overrides={"models": {"synthfaces": {"pmf": {"steps": 24, "fm_warmup_steps": 800}}}})
    assert str(e.value).startswith("config key `models.synthfaces.pmf`: `models.<dataset>.pmf.fm_warmup_steps` "
                                   "leaves no MeanFlow step: 800 flow-matching steps of 24")
    assert "\n" not in str(e.value)
    load_settings(overrides={"models": {"synthfaces": {"pmf": {"steps": 24, "fm_warmup_steps": 6}}}})


def test_resolutions_the_networks_take_pass():
    load_settings(overrides={"datasets": {"synthfaces": {"resolution": 36}}})  # 3-level UNets, autoencoder: 4
    load_settings(overrides={"datasets": {"synthxray": {"resolution": 40}},
                             "models": {"synthxray": {"pmf": {"unet": {"block_out_channels": [16, 32, 64, 64]}}}}})


def _dry_run(tmp_path, text: str) -> subprocess.CompletedProcess:
    pre = tmp_path / "mine.yaml"
    pre.write_text(text)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([SNAKEMAKE, "-n", "--quiet", "rules", "--configfile", str(pre)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("text,named", [
    (DUPLICATE, "mine.yaml, line 5: key `tasks.synthfaces_smile.attribute` is given twice"),
    ("tasks:\n  synthfaces_smile: {attribute: Nope}\n", "config key `tasks.synthfaces_smile.attribute`"),
    ("datasets:\n  synthfaces: {resolution: 31}\n", "config key `datasets.synthfaces.resolution` (31)"),
])
def test_the_dry_run_fails_in_one_line(tmp_path, text, named):
    r = _dry_run(tmp_path, text)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    errors = [ln for ln in out.splitlines() if ln.startswith("vcebench config error")]
    assert len(errors) == 1 and named in errors[0], out
    assert "Traceback" not in out


def test_more_shards_than_inputs_is_a_warning_at_the_dry_run(tmp_path):
    r = _dry_run(tmp_path, "n_shards: 1000\nrun_tasks: [synthfaces_smile]\nmethods: [fire]\n")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert ("vcebench config warning: n_shards is 1000 but n_eval is 100: 900 shard(s) of each method get no "
            "input (empty jobs); set n_shards to at most 100") in out
    r = _dry_run(tmp_path, "n_shards: 100\nrun_tasks: [synthfaces_smile]\nmethods: [fire]\n")
    assert r.returncode == 0 and "vcebench config warning" not in r.stdout + r.stderr


def test_a_task_is_any_identifier_and_runs_in_the_dag(tmp_path):
    """`synthfaces_big_smile` (two underscores) is a task like any other: the schema and the workflow's wildcard
    take the configured names, not a `<dataset>_<attribute>` pattern."""
    r = _dry_run(tmp_path, "tasks:\n  synthfaces_big_smile: {dataset: synthfaces, attribute: Smiling}\n"
                           "run_tasks: [synthfaces_big_smile]\nmethods: [fire, input]\n")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    r = subprocess.run([SNAKEMAKE, "-n", "results/synthfaces_big_smile.csv", "--quiet", "rules", "--configfile",
                        str(tmp_path / "mine.yaml")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"))
    assert r.returncode == 0 and "report_task" in r.stdout + r.stderr, r.stdout + r.stderr


def test_the_schema_takes_datasets_and_their_keys_from_their_declarations():
    from vcebench import registry
    from vcebench.config.load import schema_path, validate

    schema = registry.fill_schema(read_yaml(schema_path()))
    sections = schema["properties"]["datasets"]["properties"]
    assert set(sections) == set(registry.DATASET_SPECS) == set(schema["definitions"]["dataset_name"]["enum"])
    assert sections["synthxray"]["properties"]["n_patients"]["minimum"] == 20
    cfg = load_settings()
    with pytest.raises(ConfigError, match="datasets.synthxray"):
        validate({**cfg, "datasets": {**cfg["datasets"], "synthxray": {"n_patient": 10}}})
    with pytest.raises(ConfigError, match="tasks.x.dataset"):
        validate({**cfg, "tasks": {**cfg["tasks"], "x": {"dataset": "mnist", "attribute": "a"}}})
