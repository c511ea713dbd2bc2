"""Config errors name their file and key in one line (issue 25, item 4): YAML syntax errors, a top level that is
no mapping and a key written twice; and what a dry run used to accept and a run failed on later (a task's
attribute its dataset lacks, a resolution the networks cannot take) fails at `snakemake -n`. More shards than
inputs is a warning there. Issue 52: every value of every section is checked there, whether or not the run uses
it, and the files as the jobs merge them (`vcebench.workflow.check_config`): a wrong-type value in any leaf of
config/config.yaml is one line naming the key."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.common.configfile import load_configfile
from snakemake.utils import update_config

from vcebench import workflow as wf
from vcebench.cli import main
from vcebench.config.load import ConfigError, read_yaml
from vcebench.core.errors import UserError
from vcebench.protocol.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "config" / "config.yaml"
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
    # issue 52: the jobs' merge of the files (Snakemake's keeps the list), and a dataset the run does not use
    ("method_defaults:\n  dime: {scales: {}}\n", "config key `method_defaults.dime.scales` must be a non-empty list"),
    ("models:\n  celebahq:\n    classifier: {head: definitely-not-a-choice}\n",
     "config key `models.celebahq.classifier.head` must be one of"),
])
def test_the_dry_run_fails_in_one_line(tmp_path, text, named):
    r = _dry_run(tmp_path, text)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    errors = [ln for ln in out.splitlines() if ln.startswith("vcebench config error")]
    assert len(errors) == 1 and named in errors[0], out
    assert "Traceback" not in out


def test_the_legal_values_pass_the_dry_run(tmp_path):
    r = _dry_run(tmp_path, "method_defaults:\n  fastdime: {log_snr_offset: -1.0}\n"
                           "models:\n  synthxray:\n    pmf: {fm_warmup_steps: null}\n"
                           "tune:\n  select:\n    require: {FR_oracle: -7}\n")
    assert r.returncode == 0, r.stdout + r.stderr


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
    # in a workdir of its own: the checkout's own run state (its resources/, results/ and .snakemake/) must not
    # decide which jobs the dry run lists
    r = subprocess.run([SNAKEMAKE, "-n", "results/synthfaces_big_smile.csv", "--quiet", "rules", "--configfile",
                        str(tmp_path / "mine.yaml"), "--config", f"workdir={tmp_path / 'run'}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
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


# --- issue 52: every value checked when the DAG is built ---------------------------------------------------------

@functools.cache
def _default_doc() -> dict:
    return load_configfile(str(DEFAULT))


def _dag_check(tmp_path: Path, override: dict | str) -> dict:
    """What the Snakefile runs when it builds the DAG (`vcebench.workflow.check_config`) with ``override`` given
    as `--configfile`, on the config as Snakemake merges it (its own reader and merge: the command line's files
    first, the Snakefile's `configfile:` over them, the command line's again on top)."""
    pre = tmp_path / "mine.yaml"
    pre.write_text(override if isinstance(override, str) else yaml.safe_dump(override))
    given: dict = {}
    update_config(given, load_configfile(str(pre)))
    cfg = copy.deepcopy(given)
    update_config(cfg, copy.deepcopy(_default_doc()))
    update_config(cfg, given)
    return wf.check_config(cfg, [str(pre), str(DEFAULT)], ROOT)


def _one_line_error(tmp_path: Path, override: dict | str) -> str:
    with pytest.raises(UserError) as e:  # what the Snakefile's fail_fast prints as one line
        _dag_check(tmp_path, override)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# The values issue 52 found passing `snakemake -n` and failing a job later (the first six), and two more the walk
# below found (a trained role's data_half, a variant's protocol mapping: read with bool(), so any string was true).
WRONG = [
    ("method_defaults: {dime: {scales: {}}}",
     "config key `method_defaults.dime.scales` must be a non-empty list, got {}"),
    ("models: {synthfaces: {oracle: {attributes: [a]}}}",
     "config key `models.synthfaces.oracle.attributes`: unknown attribute(s) ['a'] (dataset has ['Bangs'"),
    ("models: {synthxray: {oracle: {pool: null}}}",
     "config key `models.synthxray.oracle.pool` must be one of ['avg', 'avgmax'], got None"),
    ("models: {celeba: {classifier: {weights: -1}}}", "config key `models.celeba.classifier.weights` must be a string"),
    ("models: {chexpert: {classifier: {weights: -1}}}",
     "config key `models.chexpert.classifier.weights` must be a string"),
    ("models: {celebahq: {classifier: {head: definitely-not-a-choice}}}",
     "config key `models.celebahq.classifier.head` must be one of ['1logit', '2logit']"),
    ("models: {synthfaces: {classifier: {data_half: C}}}",
     "config key `models.synthfaces.classifier.data_half` must be one of ['A', 'B', 'all', None]"),
    ("variants: {fire: {paper: {protocol: {use_tuned: maybe}}}}",
     "config key `variants.fire.paper.protocol.use_tuned` must be true or false"),
]
LEGAL = ["method_defaults: {fastdime: {log_snr_offset: -1.0}}", "models: {synthxray: {pmf: {fm_warmup_steps: null}}}",
         "tune: {select: {require: {FR_oracle: -7}}}"]


@pytest.mark.parametrize("text,msg", WRONG)
def test_a_wrong_value_fails_the_dag_build_naming_its_key(tmp_path, text, msg):
    err = _one_line_error(tmp_path, text)
    assert err.startswith(msg), err


@pytest.mark.parametrize("text", LEGAL)
def test_legal_values_pass_the_dag_build(tmp_path, text):
    _dag_check(tmp_path, text)


def test_the_jobs_merge_is_checked_where_snakemake_merges_otherwise(tmp_path):
    """Snakemake keeps a list under a preset's empty mapping, the jobs (`vcebench <verb> --config`) take the
    mapping: the DAG build checks both, so the explain job's error comes at `snakemake -n`."""
    given: dict = {}
    update_config(given, {"method_defaults": {"dime": {"scales": {}}}})
    cfg = copy.deepcopy(_default_doc())
    update_config(cfg, given)
    assert cfg["method_defaults"]["dime"]["scales"] == [8, 10, 15]  # Snakemake's merge: nothing to find there
    (tmp_path / "jobs.yaml").write_text("method_defaults: {dime: {scales: {}}}\n")
    with pytest.raises(ConfigError, match=r"method_defaults\.dime\.scales` must be a non-empty list, got \{\}"):
        load_settings([DEFAULT, tmp_path / "jobs.yaml"])  # what the explain job reads


def _wrong_type(value):
    """A value of another type than ``value``'s that no key taking ``value`` accepts."""
    if isinstance(value, bool):
        return "not-a-bool"
    if isinstance(value, (int, float)):
        return "not-a-number"
    if isinstance(value, list):
        return "not-a-list"
    return 7  # a string, null (a path or a choice not set) or an empty mapping


def _leaves(node, path=()):
    """(dotted key, the override that puts a wrong-type value there) for every leaf of ``node``: every value that is
    no non-empty mapping, and every item of a list."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
        return
    yield ".".join(path), _wrong_type(node)
    for i, item in enumerate(node if isinstance(node, list) else []):
        yield f"{'.'.join(path)}[{i}]", [*node[:i], _wrong_type(item), *node[i + 1:]]


def _nest(path: str, value):
    for k in reversed(path.split("[")[0].split(".")):
        value = {k: value}
    return value


def test_a_wrong_type_in_any_leaf_of_the_config_is_one_line_naming_it(tmp_path):
    """Every leaf of config/config.yaml (682 values and 168 list items), one at a time, given a value of another type
    in a `--configfile`: the DAG build stops with one line naming the key (a list item: its list), never a
    traceback and never a pass."""
    leaves = list(_leaves(read_yaml(DEFAULT)))
    assert len(leaves) > 800
    bad = []
    for where, value in leaves:
        key = where.split("[")[0]
        try:
            _dag_check(tmp_path, _nest(where, value))
            bad.append(f"{where} = {value!r}: passed")
        except UserError as e:
            if "\n" in str(e) or f"`{key}" not in str(e):
                bad.append(f"{where} = {value!r}: {e}")
        except Exception as e:  # noqa: BLE001 (a traceback in the Snakefile)
            bad.append(f"{where} = {value!r}: {type(e).__name__}: {e}")
    assert not bad, f"{len(bad)} of {len(leaves)} leaves:\n" + "\n".join(bad[:40])


# Every preset the docs and scripts run passes the DAG's check as a `--configfile`: #52's check landed after #47's
# fair preset (now folded into config.yaml), whose `guided_steps` it refused (`snakemake tune` failed).
PRESETS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "config" / "presets").rglob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_passes_the_dag_check(tmp_path, preset):
    assert PRESETS and "config/presets/quick.yaml" in PRESETS
    _dag_check(tmp_path, (ROOT / preset).read_text())


def test_the_preset_check_fails_on_an_unknown_protocol_key(tmp_path):
    """The check above can fail: a key the noise protocol does not consume is refused, as guided_steps was."""
    msg = _one_line_error(tmp_path, "tasks: {synthfaces_smile: {params: {dime: {guided_stepz: 15}}}}")
    assert "guided_stepz" in msg and "guided_steps" in msg
