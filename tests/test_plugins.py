"""The registry (vcebench/registry/) and plug-ins: a method and a metric of another installed package
(tests/plugins/vcebench_perturb, "installed" by putting its folder, which holds the package and its
``.dist-info`` with ``entry_points.txt``, on the path) are found through their entry points, validated
like the built-ins, run through the DAG and reach every table with their label and arrow."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from vcebench import registry
from vcebench.config.load import ConfigError
from vcebench.registry import specs

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "tests" / "plugins" / "vcebench_perturb"
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"


def _install(path: Path):
    sys.path.insert(0, str(path))
    importlib.invalidate_caches()
    registry.load_plugins(force=True)


def _uninstall(path: Path):
    sys.path.remove(str(path))
    importlib.invalidate_caches()
    registry.load_plugins(force=True)


@pytest.fixture
def plugin():
    _install(PLUGIN)
    yield
    _uninstall(PLUGIN)


def _dist(tmp_path: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """A one-module package ``name`` 'installed' under ``tmp_path`` (package + dist-info)."""
    site = tmp_path / f"site_{name}"
    (site / f"{name}-0.1.dist-info").mkdir(parents=True)
    (site / f"{name}-0.1.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (site / f"{name}-0.1.dist-info" / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for mod, src in modules.items():
        (site / f"{mod}.py").write_text(textwrap.dedent(src))
    return site


# ----------------------------------------------------------------------------- the registry itself

def test_registry_imports_no_torch_and_no_method_or_metric_module():
    code = ("import sys, vcebench.registry, vcebench.config.tasks, vcebench.workflow, vcebench.config.load\n"
            "from vcebench import registry\n"
            "registry.methods(); registry.table_columns('faces', True); registry.eval_roles('xray', True)\n"
            "bad = [m for m in ('torch', 'methods', 'metrics') if m in sys.modules]\n"
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr


def test_builtins_pass_the_plugin_checks_and_roles_are_the_models():
    from vcebench.models import ROLES, TaskModels
    from vcebench.models.recipes import TRAINERS
    from vcebench.registry.roles import GENERATIVE, TRAINING_ORDER
    from vcebench.registry.roles import ROLES as VOCABULARY

    assert registry.MODEL_ROLES is VOCABULARY and ROLES is VOCABULARY  # one home, imported
    assert sorted(TRAINING_ORDER) == sorted(VOCABULARY)
    assert set(TRAINERS) | set(GENERATIVE) == set(VOCABULARY)  # every role has a trainer
    assert [f for f in TaskModels.__dataclass_fields__ if f not in ("names", "gates")] == list(VOCABULARY)
    for s in registry.BUILTIN_METHODS:
        specs.check_method(s)
    for s in registry.BUILTIN_METRICS:
        specs.check_metric(s)
    assert registry.builtin_method_names() == ("fire", "dime", "fastdime", "fastdime2", "fastdime2plus",
                                                "maskdime", "ace", "pixel", "input", "truth")
    assert registry.baseline_methods() == ("input", "truth") and registry.truth_methods() == ("truth",)
    with pytest.raises(specs.RegistryError, match="a truth row is a reference row"):
        specs.method_spec("mytruth", roles=("classifier",), params="m:P", factory="m:F", truth=True)
    with pytest.raises(specs.RegistryError, match="an attack is a ranked method"):
        specs.method_spec("myattack", roles=("classifier",), params="m:P", factory="m:F", baseline=True, attack=True)
    assert registry.attack_methods() == ("pixel",)


def test_a_metric_declares_what_it_needs_and_evaluate_provides_it():
    """Evaluate names no metric: the FID reference, the training labels and the true counterfactuals are
    loaded because a metric declares them (MetricSpec.inputs)."""
    from vcebench.steps.evaluate import metric_inputs

    assert metric_inputs(["FID", "KID"]) == {"fid_reference"} and metric_inputs(["CD"]) == {"train_labels"}
    assert metric_inputs(["GT", "FR"]) == {"ground_truth"} and metric_inputs(["FR", "MNAC", "S3"]) == set()
    with pytest.raises(specs.RegistryError, match="inputs must be among fid_reference, train_labels"):
        specs.metric_spec("Mine", columns={"Mine": True}, factory="m:f", inputs=("test_labels",))
    assert specs.metric_spec("Mine", columns={"Mine": True}, factory="m:f", inputs=("fid_reference",)).inputs == (
        "fid_reference",)


def test_table_columns_and_eval_roles_of_each_task_kind():
    """The protocol's tables (docs/protocol.md): faces without L1, x-ray with it; synthetic tasks add the GT
    columns, their unranked floors last."""
    assert registry.table_columns("faces", False) == ["FID", "sFID", "KID", "FVA", "FS", "MNAC", "CD", "COUT", "FR"]
    assert registry.table_columns("xray", False) == ["FID", "KID", "L1", "MAD", "S3", "FR"]
    assert registry.table_columns("xray", True)[6:] == ["GT_L1", "GT_L1_region", "GT_precision", "GT_recall",
                                                        "FR_oracle", "GT_L1_input", "GT_L1_region_input"]
    assert registry.eval_roles("faces", False) == ("classifier", "fid_features", "identity", "oracle")
    assert registry.eval_roles("xray", True) == ("classifier", "fid_features", "simsiam", "oracle")
    assert registry.eval_roles("xray", False) == ("classifier", "fid_features", "simsiam")
    assert "L1" in registry.metric_names("faces", False)  # evaluated, not shown
    assert registry.unranked_columns() == ["GT_L1_input", "GT_L1_region_input"]


def test_schema_names_no_method_and_is_filled_from_the_registry(cfg):
    from vcebench.config.load import schema_path, validate

    raw = yaml.safe_load(schema_path().read_text())
    defs = raw["definitions"]
    assert "enum" not in defs["base_method"]
    for name in registry.builtin_method_names():
        assert name not in json.dumps(defs["base_method"]) + json.dumps(defs["method_name"])
    filled = registry.fill_schema(raw)["definitions"]
    assert filled["base_method"]["enum"] == list(registry.method_names())
    bad = {**cfg, "method_defaults": {**cfg["method_defaults"], "fier": {}}}
    with pytest.raises(ConfigError, match="method_defaults"):
        validate(bad)
    with pytest.raises(ConfigError, match="methods"):
        validate({**cfg, "methods": ["perturb"]})  # no such method until the plug-in is installed


# ----------------------------------------------------------------------------- plug-ins

def test_entry_points_register_the_plugin(plugin):
    import methods

    spec = registry.get_method_spec("perturb")
    assert spec.source == "vcebench-perturb" and spec.label == "Perturb (plug-in)" and spec.roles == ("classifier",)
    assert registry.method_names()[-1] == "perturb" and "perturb" not in registry.baseline_methods()
    from vcebench.config.tasks import split_method

    assert split_method("perturb_big") == ("perturb", "big")
    m = methods.get_method("perturb", {"eps": 0.1})
    assert m.params.eps == 0.1 and m.roles == ("classifier",)
    with pytest.raises(ConfigError, match=r"`perturb\.epss`"):
        methods.get_method("perturb", {"epss": 0.1})
    with pytest.raises(ConfigError, match="eps must be in"):
        methods.get_method("perturb", {"eps": 2.0})
    assert registry.get_metric_spec("Linf").source == "vcebench_perturb.linf"
    assert registry.metric_names("xray", True)[-1] == "Linf" and registry.column_directions()["Linf"] is False
    assert registry.table_columns("faces", False)[-1] == "Linf"


def test_plugin_config_is_checked_like_a_builtin(plugin, tmp_path):
    from vcebench.protocol.settings import load_settings

    cfg = load_settings(overrides={"methods": ["fire", "perturb", "perturb_big"],
                                   "method_defaults": {"perturb": {"eps": 0.05}},
                                   "variants": {"perturb": {"big": {"eps": 0.2}}}})
    from vcebench.protocol.noise import resolve_method

    assert resolve_method(cfg, "synthfaces_smile", "perturb_big")[0] == {"eps": 0.2}
    for over, key in [({"method_defaults": {"perturb": {"epss": 0.1}}}, "method_defaults.perturb.epss"),
                      ({"variants": {"perturb": {"big": {"eps": "large"}}}}, "variants.perturb.big.eps"),
                      ({"methods": ["perturbb"]}, "methods")]:
        with pytest.raises(ConfigError) as e:
            load_settings(overrides={"method_defaults": {"perturb": {}}, **over})
        assert key in str(e.value)
    with pytest.raises(ConfigError, match=r"no defaults; add `method_defaults\.perturb`"):
        load_settings(overrides={"methods": ["perturb"]})


@pytest.mark.parametrize("entry, modules, message", [
    ("[vcebench.methods]\nfire = clash:SPEC\n",
     {"clash": "from vcebench.registry import method_spec\n"
               "SPEC = method_spec('fire', roles=('classifier',), params='x:P', factory='x:F')\n"},
     "method 'fire' of clashy clashes with the built-in method 'fire'"),
    ("[vcebench.metrics]\nFID2 = clash:SPEC\n",
     {"clash": "from vcebench.registry import metric_spec\n"
               "SPEC = metric_spec('FID2', columns={'FID': False}, factory='x:f')\n"},
     "column(s) ['FID'] are already metric 'FID'"),
    ("[vcebench.methods]\nother = clash:SPEC\n",
     {"clash": "from vcebench.registry import method_spec\n"
               "SPEC = method_spec('mine', roles=('classifier',), params='x:P', factory='x:F')\n"},
     "registers no method named 'other'"),
    ("[vcebench.methods]\nbroken = clash:SPEC\n", {"clash": "import nonexistent_module_xyz\n"},
     "plug-in method 'broken' (entry point `clash:SPEC` of package clashy, group vcebench.methods) cannot be "
     "loaded: ModuleNotFoundError"),
    ("[vcebench.methods]\nbad_name = clash:SPEC\n",
     {"clash": "from vcebench.registry import method_spec\n"
               "SPEC = method_spec('bad_name', roles=('classifier',), params='x:P', factory='x:F')\n"},
     "a method name is lowercase letters and digits"),
])
def test_a_bad_plugin_is_one_clear_error(tmp_path, entry, modules, message):
    site = _dist(tmp_path, "clashy", entry, modules)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        with pytest.raises(registry.RegistryError) as e:
            registry.load_plugins(force=True)
        assert message in str(e.value) and "\n" not in str(e.value)
    finally:
        sys.modules.pop("clash", None)
        _uninstall(site)
    assert registry.get_method_spec("fire").source == "vcebench"  # the built-ins are untouched


def test_plugin_metric_column_reaches_every_table(plugin, tmp_path):
    from vcebench import report

    task, rows = "synthxray_pacemaker", {"fire": 0.2, "perturb": 0.025, "input": 0.0}
    for m, v in rows.items():
        d = tmp_path / task / m
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps({"metrics": {"FR": 50.0, "Linf": v},
                                                    "higher_is_better": {"FR": True, "Linf": False}}))
    df, higher = report.load_task_table(tmp_path, task, list(rows), "xray", synthetic=True)
    assert "Linf" in df.columns and higher["Linf"] is False
    assert list(df.columns).index("Linf") < list(df.columns).index("GT_L1_input")  # ranked before the floors
    report.write_task_tables(df, higher, tmp_path, task)
    csv = pd.read_csv(tmp_path / f"{task}.csv")
    assert csv.set_index("method")["Linf"].to_dict() == rows
    md = (tmp_path / f"{task}.md").read_text()
    assert "Linf (max change)↓" in md and "| Perturb (plug-in) |" in md
    # no per-input records here: no marks (they come from the paired tests, tests/test_pairs.py), the values as they are
    assert "| 0.025 |" in md and "| 0.200 |" in md and "**" not in md.split("\n\n")[1]
    tex = (tmp_path / f"{task}.tex").read_text()
    assert r"Linf (max change)$\downarrow$" in tex and r"Perturb (plug-in) & " in tex


# ----------------------------------------------------------------------------- through the workflow

TINY = {
    "threads": 1, "n_shards": 1, "batch_size": 8, "n_eval": 6, "run_tasks": ["synthxray_pacemaker"],
    "methods": ["perturb"], "method_defaults": {"perturb": {"eps": 0.05}},
    "datasets": {"synthxray": {"resolution": 16, "n_patients": 60}},
    "metrics": {"sfid_seeds": [0], "bootstrap": {"resamples": 20, "feature_resamples": 10},
                "kid": {"subsets": 5, "subset_size": 4}},
    "models": {"synthxray": {r: {"steps": 5, "width": 8, "batch": 16} for r in
                             ("classifier", "oracle", "simsiam", "fid_features")}},
}


def _smk(*args, env):
    # 11 jobs, 78 s CPU in all (measured): under a minute on 2 idle cores; the timeout is for a loaded machine
    return subprocess.run([SNAKEMAKE, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=3000)


def test_plugin_runs_through_the_workflow(tmp_path):
    """`snakemake` with the plug-in installed and no edit to vcebench: the plug-in's method is explained,
    evaluated (every metric of the task plus the plug-in's Linf), profiled and tabled; a typo in its
    settings stops the DAG before any job runs."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(PLUGIN)]), OMP_NUM_THREADS="1")
    tiny = {**TINY, "workdir": str(tmp_path / "w"), "protocol": {"tuned_dir": str(tmp_path / "tuned")}}
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({**tiny, "method_defaults": {"perturb": {"epss": 0.05}}}))
    r = _smk("-n", "--configfile", str(typo), env=env)
    assert r.returncode != 0 and "method_defaults.perturb.epss" in r.stdout + r.stderr, r.stdout + r.stderr
    pre = tmp_path / "tiny.yaml"
    pre.write_text(yaml.safe_dump(tiny))
    r = _smk("results/synthxray_pacemaker.csv", "--cores", "2", "--configfile", str(pre), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = tmp_path / "w" / "results"
    df = pd.read_csv(out / "synthxray_pacemaker.csv").set_index("method")
    assert list(df.index) == ["perturb"]
    # every pixel moved by eps = 0.05 in [-1, 1] units, i.e. 0.025 in [0, 1], up to the uint8 grid (and clipping)
    assert abs(df.loc["perturb", "Linf"] - 0.025) <= 1 / 255 + 1e-9
    assert 0 < df.loc["perturb", "L1"] <= df.loc["perturb", "Linf"] and df[["MAD", "FR"]].notna().all().all()
    assert {"FID", "KID", "S3", "GT_L1", "FR_oracle"} <= set(df.columns)  # the task's columns, then the plug-in's
    mj = json.loads((out / "synthxray_pacemaker" / "perturb" / "metrics.json").read_text())
    assert mj["protocol"]["params"] == {"eps": 0.05} and mj["higher_is_better"]["Linf"] is False
    assert (out / "synthxray_pacemaker" / "perturb" / "profile.json").is_file()
    md = (out / "synthxray_pacemaker.md").read_text()
    assert "Linf (max change)↓" in md and "| Perturb (plug-in) |" in md
    assert r"Linf (max change)$\downarrow$" in (out / "synthxray_pacemaker.tex").read_text()
