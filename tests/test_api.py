"""The Python API (vcebench.explain / evaluate / load_network): the README's lines and docs/python-api.md run as
written, and the API's counterfactuals and scores are those of `vcebench explain` / `vcebench evaluate` (the same
code, not a second implementation)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
TASK = "synthfaces_smile"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def run_block(code: str, monkeypatch, capsys) -> str:
    monkeypatch.chdir(ROOT)
    exec(compile(code, "<doc>", "exec"), {"__name__": "__doc__"})
    return capsys.readouterr().out


def test_the_readme_python_example_runs_as_written(monkeypatch, capsys):
    """The README's example (the shipped classifier and pMF on rendered faces) flips counterfactuals."""
    (block,) = [b for b in python_blocks(ROOT / "README.md") if "vcebench.explain" in b]
    out = run_block(block, monkeypatch, capsys)
    fr, l1 = (re.search(rf"^{name} ([-\d.e]+) \[", out, flags=re.M) for name in ("FR", "L1"))
    assert fr and l1, out
    assert float(fr.group(1)) > 0 and float(l1.group(1)) > 0, out


def test_the_python_api_guide_runs_as_written(monkeypatch, capsys):
    blocks = python_blocks(ROOT / "docs" / "python-api.md")
    assert len(blocks) == 1
    out = run_block(blocks[0], monkeypatch, capsys)
    assert "FR_oracle" in out and "GT_L1" in out


def test_import_vcebench_starts_no_torch():
    code = ("import sys, vcebench; print('torch' in sys.modules, callable(vcebench.explain), 'torch' in sys.modules); "
            "vcebench.Counterfactuals; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False", "True"]  # the API's module too; torch starts with the first call


# What the Snakefile runs when it builds the DAG (every `snakemake` call, `-n` too): the config files merged, then
# vcebench.workflow.check_config; prints whether torch was imported, and the source of the DDPM schedule of the
# dataset (argv[2]) the noise rule used. argv[1]: the repository, argv[3:]: the config files.
CHECK_CONFIG = """
import sys
from vcebench import workflow as wf
from vcebench.config.load import read_yaml
from vcebench.core.merge import deep_merge
from vcebench.protocol.noise import ddpm_schedule

files = sys.argv[3:]
cfg = {}
for f in files:
    cfg = deep_merge(cfg, read_yaml(f) or {})
wf.check_config(cfg, files, sys.argv[1])
print("torch" in sys.modules, ddpm_schedule(cfg, sys.argv[2])[1])
"""


def _real_overlay(tmp_path: Path) -> Path:
    """A CelebA overlay with released weights in every role (the test_hub.py dry run's): files a check reads none
    of, a guided-diffusion DDPM (its schedule stated by its flags) and a torch_module pmf."""
    from tests.fakes import TINY_GUIDED_FLAGS

    w = tmp_path / "weights"
    w.mkdir()
    for f in ("classifier.pth", "oracle.pth", "vggface2.pt", "vgg19.pth", "inception.pth", "ddpm.pt", "pmf.pt"):
        (w / f).write_bytes(b"not read by the config check")
    overlay = {"run_tasks": ["celeba_smile"], "methods": ["fire", "dime", "maskdime"],
               "datasets": {"celeba": {"root": str(tmp_path / "celeba")}},
               "models": {"celeba": {
                   "classifier": {"weights": str(w / "classifier.pth")}, "oracle": {"weights": str(w / "oracle.pth")},
                   "identity": {"weights": str(w / "vggface2.pt")}, "perceptual": {"weights": str(w / "vgg19.pth")},
                   "fid_features": {"weights": str(w / "inception.pth")},
                   "ddpm": {"weights": str(w / "ddpm.pt"), "format": "guided_diffusion", **TINY_GUIDED_FLAGS},
                   "pmf": {"weights": str(w / "pmf.pt"), "format": "torch_module", "class": "tests.user_nets:TinyDiT",
                           "kwargs": {"input_size": 32}, "state_dict": "ema", "output": "x",
                           "inputs": ["z", "t", "h", "omega", "t_min", "t_max", "y"],
                           "const": {"omega": 1.0, "t_min": 0.0, "t_max": 1.0}, "class_label": 2}}}}
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return path


@pytest.mark.parametrize("preset", [None, "quick", "regression", "real_overlay"])
def test_the_workflows_config_check_starts_no_torch(preset, tmp_path):
    """The config check of every `snakemake` call (the model settings, the released formats, every method resolved
    by the noise rule on its DDPM's schedule) imports no torch (seconds of CPU per call): on the default config,
    the quick and regression presets, and a real-data overlay with released weights."""
    files = [str(ROOT / "config" / "config.yaml")]
    if preset == "real_overlay":
        files.append(str(_real_overlay(tmp_path)))
    elif preset is not None:
        files.append(str(ROOT / "config" / "presets" / f"{preset}.yaml"))
    dataset = "celeba" if preset == "real_overlay" else "synthfaces"
    r = subprocess.run([sys.executable, "-c", CHECK_CONFIG, str(ROOT), dataset, *files], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded, source = r.stdout.strip().split(" ", 1)
    assert loaded == "False", f"the config check imported torch ({preset or 'default'} config)"
    if preset == "real_overlay":  # the released DDPM's own schedule, from its guided-diffusion flags
        assert source.startswith("models.celeba.ddpm (guided_diffusion") and "linear betas, T = 500" in source


def test_a_dry_run_of_the_whole_dag_starts_no_torch(tmp_path):
    """`snakemake -n` builds the regression preset's whole DAG (every job's settings resolved for its rule's params,
    the noise rule on the DDPM's schedule, the evaluation splits) and never imports torch: the DAG build of every
    `snakemake` call, a user's or a test's, costs no torch start (about 2.5 s of CPU)."""
    import shutil

    snakemake = shutil.which("snakemake", path=str(Path(sys.executable).parent))
    r = subprocess.run([sys.executable, "-X", "importtime", snakemake, "-n", "--cores", "1", "--configfile",
                        str(ROOT / "config" / "presets" / "regression.yaml"), "--config",
                        f"workdir={tmp_path / 'w'}"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "regression" in r.stdout  # the DAG was built
    torch_lines = [ln for ln in r.stderr.splitlines() if ln.startswith("import time:") and ln.endswith("| torch")]
    assert not torch_lines, "the DAG build imported torch"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A small synthfaces config, 12 test inputs, the shipped networks of FiRe, and `vcebench explain`'s
    shard of those inputs (generate(), as explain_shard runs it) with K = 4."""
    from vcebench.data import load_split
    from vcebench.models import load_task_models
    from vcebench.protocol.run_settings import RunSettings
    from vcebench.protocol.settings import load_settings
    from vcebench.steps.explain import generate

    d = tmp_path_factory.mktemp("api")
    small = d / "small.yaml"
    small.write_text("threads: 1\ndatasets:\n  synthfaces: {n_identities: 40, images_per_identity: 8}\n"
                     "metrics:\n  sfid_seeds: [0, 1]\n  batch_size: 8\n  bootstrap: {resamples: 50, "
                     "feature_resamples: 10}\n")
    cfg = load_settings([ROOT / "config" / "config.yaml", small], only=(TASK, "fire"))
    split = load_split(cfg, "synthfaces", "test")
    ids = torch.sort(split.sample_ids).values[:12]
    x = split.float_images(split.index_of(ids))
    settings = RunSettings.resolve({**cfg, "batch_size": 5}, TASK, "fire").with_params(K=4)
    models = load_task_models(cfg, TASK, roles=("classifier", "pmf", "perceptual", "oracle", "fid_features"),
                              model_dir=ROOT / "networks" / "ref1")
    generate(settings.build_method(), lambda idx: x[idx], ids, models, settings, d / "shard-0-of-1.npz")
    return {"cfg": cfg, "x": x, "ids": ids, "models": models, "npz": d / "shard-0-of-1.npz", "split": split,
            "settings": settings}


def test_explain_with_a_task_makes_the_counterfactuals_vcebench_explain_makes(bench):
    import vcebench
    from vcebench.core.io import load_npz, to_uint8

    m = bench["models"]
    cfs = vcebench.explain(bench["x"], m.classifier, "fire", m.pmf, models={"perceptual": m.perceptual},
                           task=TASK, config=bench["cfg"], sample_ids=bench["ids"], batch_size=7, K=4)
    z = load_npz(bench["npz"])
    assert np.array_equal(to_uint8(cfs.images), z["cf"])  # another batch size, the same images
    assert np.array_equal(cfs.flipped.numpy(), z["flipped"]) and np.array_equal(cfs.steps.numpy(), z["steps"])
    assert np.array_equal(cfs.info["target"].numpy(), z["target"]) and z["flipped"].any()
    # another seed, other noise: the comparison above can fail
    other = vcebench.explain(bench["x"], m.classifier, "fire", m.pmf, models={"perceptual": m.perceptual},
                             task=TASK, config=bench["cfg"], sample_ids=bench["ids"], seed=1, K=4)
    assert not np.array_equal(to_uint8(other.images), z["cf"])


def test_evaluate_gives_the_scores_of_vcebench_evaluate(bench):
    import vcebench
    from vcebench.core.errors import UserError
    from vcebench.core.io import from_uint8, load_npz
    from vcebench.protocol.run_settings import EvalSettings
    from vcebench.steps.evaluate import evaluate_task

    m, cfg = bench["models"], bench["cfg"]
    names = ["FR", "L1", "FID", "FR_oracle", "GT"]
    settings = EvalSettings.resolve({**cfg, "n_eval": 12}, TASK, "fire")
    ref = evaluate_task(settings, str(bench["npz"]), only=names, models=m)
    z = load_npz(bench["npz"])
    split = bench["split"]
    label = split.attribute("Smiling")[split.index_of(bench["ids"])].long()
    got = vcebench.evaluate(bench["x"], from_uint8(z["cf"]), TASK, classifier=m.classifier, config=cfg,
                            models={"oracle": m.oracle, "fid_features": m.fid_features}, target=z["target"],
                            labels=label, sample_ids=bench["ids"], metrics=names)
    assert got["metrics"] == ref["metrics"] and got["intervals"] == ref["intervals"]
    assert got["n"] == ref["n"] and got["skipped"] == ref["skipped"]
    assert got["metrics"]["GT_L1"] is not None and got["intervals"]["FR"][0] <= got["metrics"]["FR"]
    # no labels: the metrics of the correct subsets are left out by default and refused when asked for
    blind = vcebench.evaluate(bench["x"], from_uint8(z["cf"]), TASK, classifier=m.classifier, config=cfg,
                              models={"oracle": m.oracle, "fid_features": m.fid_features}, target=z["target"],
                              sample_ids=bench["ids"], model_dir=ROOT / "networks" / "ref1")
    assert blind["metrics"]["FR"] == ref["metrics"]["FR"] and "GT_L1" not in blind["metrics"]
    assert "pass labels=" in blind["skipped"]["GT"] and "COUT" in blind["skipped"] and "FVA" in blind["metrics"]
    with pytest.raises(UserError, match=r"GT are scored on the correct_successful subset, which needs `labels`"):
        vcebench.evaluate(bench["x"], from_uint8(z["cf"]), TASK, classifier=m.classifier, config=cfg,
                          sample_ids=bench["ids"], metrics=["FR", "GT"])


@pytest.mark.parametrize("call, message", [
    (lambda v, c, x: v.explain(x, torch.nn.Flatten(), "fire", lambda_perc=0.0),
     r"needs the pmf network\(s\): pass them as generator="),
    (lambda v, c, x: v.explain(x, c, "fire", generator=torch.nn.Identity()), r"needs the perceptual network"),
    (lambda v, c, x: v.explain(x * 3, c, "input"), r"`images`: float images must be finite and in \[-1, 1\]"),
    (lambda v, c, x: v.explain(x, torch.nn.Flatten(), "input"), r"`classifier` must return \(N, 2\) logits"),
    (lambda v, c, x: v.explain(x, c, "fire", generator=torch.nn.Identity(), lambda_perc=0.0, KK=3),
     r"KK"),
    (lambda v, c, x: v.explain(x, c, "input", target=[0, 1]), r"`target` must be one value or one per image"),
])
def test_bad_arguments_are_one_line_errors(call, message):
    import vcebench
    from vcebench.core.errors import UserError

    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
    x = torch.rand(3, 3, 8, 8) * 2 - 1
    with pytest.raises(UserError, match=message) as e:
        call(vcebench, clf, x)
    assert "\n" not in str(e.value)


def test_explain_reaches_a_given_target_and_records_it():
    import vcebench

    clf = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
    x = torch.rand(3, 3, 8, 8) * 2 - 1
    pred = clf(x).argmax(1)
    cfs = vcebench.explain(x, clf, "input", target=pred)  # the do-nothing row: its target is reached
    assert cfs.flipped.all() and torch.equal(cfs.info["target"], pred) and torch.equal(cfs.info["pred"], pred)
    assert torch.equal(cfs.images, torch.from_numpy(np.asarray(x)).clamp(-1, 1))
