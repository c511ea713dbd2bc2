"""The Snakemake DAG: lint/format clean, dry-runs, real tasks fail early with the config key to set."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vcebench import workflow as wf
from vcebench.config.load import ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"


def _smk(*args, cwd=ROOT):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def test_lint_clean():
    r = _smk("--lint")
    assert r.returncode == 0 and "good condition" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_snakefmt_clean():
    exe = shutil.which("snakefmt", path=str(Path(sys.executable).parent))
    r = subprocess.run([exe, "--check", "Snakefile", "workflows/"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("preset", [None, "config/presets/quick.yaml"])
def test_dry_run_builds_whole_dag(preset):
    args = ["-n", "--forceall", "--quiet", "rules"] + (["--configfile", preset] if preset else [])
    r = _smk(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    for rule in ("render_data", "train_model", "explain_shard", "merge_counterfactuals", "fid_reference",
                 "evaluate", "report_task", "pairs", "summary_pairs"):
        assert rule in r.stdout, rule


def test_dry_run_builds_paper_target():
    """`snakemake paper` needs every FiRe ablation of `paper_methods` (fire_K5 ... fire_t08): each name must
    match the method wildcard (an uppercase K once made the DAG fail with missing inputs)."""
    r = _smk("paper", "-n", "--forceall", "--quiet", "rules")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "paper_tables" in r.stdout and "explain_shard" in r.stdout


def test_shards_follow_config(tmp_path):
    pre = tmp_path / "p.yaml"
    pre.write_text(yaml.safe_dump({"n_shards": 3, "run_tasks": ["synthfaces_smile"], "methods": ["fire"]}))
    r = _smk("-n", "--forceall", "--configfile", str(pre))
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert all(f"shard-{i}-of-3.npz" in out for i in range(3))


def test_real_task_without_data_fails_at_dag_construction():
    r = _smk("-n", "results/celeba_smile.csv")
    assert r.returncode != 0
    msg = r.stdout + r.stderr
    assert "datasets.celeba.root" in msg and "img_align_celeba" in msg


def test_real_task_with_paths_needs_no_other_change(tmp_path):
    root = tmp_path / "celeba"
    root.mkdir()
    models = {}
    for role in ("classifier", "ddpm", "pmf", "perceptual", "oracle", "identity", "fid_features"):
        p = tmp_path / f"{role}.pth"
        p.write_bytes(b"x")
        models[role] = {"weights": str(p)}
    pre = tmp_path / "real.yaml"
    pre.write_text(yaml.safe_dump({"datasets": {"celeba": {"root": str(root)}}, "models": {"celeba": models}}))
    r = _smk("-n", "results/celeba_smile.csv", "--configfile", str(pre))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "explain_shard" in r.stdout


def test_truth_row_is_a_row_of_the_synthetic_tasks_only(tmp_path):
    """The default `methods` list the truth row: a synthetic table has it, a real one does not (the celeba table
    above needs no other change); a config that asks for it on a real task fails at `snakemake -n`, one line."""
    r = _smk("-n", "--forceall", "results/synthfaces_smile.csv")
    assert r.returncode == 0 and "results/synthfaces_smile/truth/metrics.json" in r.stdout, r.stdout + r.stderr
    for over in ({"run_tasks": ["synthfaces_smile", "celeba_smile"]},
                 {"tasks": {"celeba_smile": {"params": {"truth": {}}}}}):
        pre = tmp_path / "real.yaml"
        pre.write_text(yaml.safe_dump(over))
        r = _smk("-n", "--configfile", str(pre))
        err = [line for line in r.stderr.splitlines() if "config error" in line]
        assert r.returncode != 0 and len(err) == 1, r.stdout + r.stderr
        assert "method 'truth' returns the renderer's true counterfactual" in err[0] and "celeba_smile" in err[0]


def test_missing_weight_names_key(tmp_path):
    cfg = load_config(overrides={"datasets": {"celeba": {"root": str(tmp_path)}}})
    with pytest.raises(ConfigError, match=r"models\.celeba\.classifier\.weights"):
        wf.check_real_task(cfg, "celeba_smile", ("classifier",))


def test_config_paths_default_first():
    paths = wf.config_paths([str(ROOT / "config/presets/quick.yaml"), "config/config.yaml"], ROOT)
    assert [Path(p).name for p in paths] == ["config.yaml", "quick.yaml"]


def test_config_typo_is_named():
    with pytest.raises(ConfigError, match="n_evall"):
        load_config(overrides={"n_evall": 3})
    with pytest.raises(ConfigError, match="resolutoin"):
        load_config(overrides={"datasets": {"synthfaces": {"resolutoin": 32}}})
    with pytest.raises(ConfigError, match="noise_on_devise"):
        load_config(overrides={"cuda": {"noise_on_devise": False}})


def test_cuda_settings_apply_only_on_cuda():
    """The `cuda` section: noise generators on the GPU only for a CUDA device; on the CPU the flags stay."""
    import torch

    from vcebench.core.runtime import noise_device, setup_torch

    cfg = load_config()
    assert cfg["cuda"]["noise_on_device"] is True
    assert noise_device(cfg["cuda"], "cpu") == torch.device("cpu")
    assert noise_device(cfg["cuda"], torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert noise_device({"noise_on_device": False}, "cuda") == torch.device("cpu")
    before = torch.backends.cudnn.benchmark
    setup_torch(torch.get_num_threads(), "cpu", {"cudnn_benchmark": not before})
    assert torch.backends.cudnn.benchmark == before


def test_settings_key_changes_only_with_the_settings_a_job_uses(cfg):
    """Snakemake reruns a job when its settings change: a FiRe hyperparameter of one task changes that task's
    fire settings file only (rule resolve_settings' params, vcebench.protocol.resolve); a model spec changes that
    role's key only. (The hyperparameter is one `tune` does not set: a tuned file's `rho` or `dilation` is merged
    after the task's and would hide it.)"""
    import copy

    from vcebench import workflow as wf

    new = copy.deepcopy(cfg)
    new["tasks"]["synthfaces_smile"]["params"]["fire"]["smoothgrad_n"] = 10
    rec = wf.settings_json
    assert rec(cfg, "synthfaces_smile", "fire") != rec(new, "synthfaces_smile", "fire")
    assert rec(cfg, "synthfaces_age", "fire") == rec(new, "synthfaces_age", "fire")
    assert rec(cfg, "synthfaces_smile", "maskdime") == rec(new, "synthfaces_smile", "maskdime")
    key = wf.settings_key
    new["models"]["synthfaces"]["pmf"]["steps"] = 7
    assert key(cfg, "model", "synthfaces", "pmf") != key(new, "model", "synthfaces", "pmf")
    assert key(cfg, "model", "synthfaces", "ddpm") == key(new, "model", "synthfaces", "ddpm")


def test_fire_variant_applies_on_top_of_the_task_setting(cfg):
    """An ablation changes one thing of the task's FiRe: fire_t06 runs t = 0.6 even where the task sets t,
    and keeps the task's mask settings; fire_K5 keeps the task's t."""
    from vcebench.config.tasks import get_task, method_params

    task = get_task(cfg, "synthfaces_smile")
    base = method_params(cfg, task, "fire")
    t06 = method_params(cfg, task, "fire_t06")
    assert t06["t"] == 0.6 and base["t"] != 0.6
    assert all(t06[k] == base[k] for k in ("rho", "dilation", "feather"))
    k5 = method_params(cfg, task, "fire_K5")
    assert k5["K"] == 5 and k5["t"] == base["t"]


def test_dry_run_builds_tune_target():
    """`snakemake tune` writes config/tuned/<task>.yaml for every run task; it is not part of `all`."""
    r = _smk("tune", "-n", "--forceall", "--quiet", "rules")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tune_task" in r.stdout
    r = _smk("-n", "--forceall", "--quiet", "rules")
    assert r.returncode == 0 and "tune_task" not in r.stdout


def test_the_regression_preset_builds_its_dag_on_the_shipped_networks():
    """CI's regression (docs/ci.md): the shipped ref1 networks, no training past their recipes; `make reference`'s
    target runs every seed of `seeds.seeds` beside the main tables."""
    preset = "config/presets/regression.yaml"
    r = _smk("seeds_reference", "-n", "--forceall", "--quiet", "rules", "--configfile", preset)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "explain_seed" in r.stdout and "report_task" in r.stdout and "seeds_task" in r.stdout
    cfg = yaml.safe_load((ROOT / preset).read_text())
    assert cfg["n_eval"] >= 48 and "networks" not in cfg  # the default's networks/ref1, installed
    assert {"fire", "dime", "maskdime", "ace", "pixel_attack", "input", "truth"} <= set(cfg["methods"])
