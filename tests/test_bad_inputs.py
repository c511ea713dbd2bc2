"""Bad inputs and faults (issue 15), one test per item (over 400 lines: the items stay together, as the list):
each must be refused with a clear, one-line error naming what to fix, or fail only the sample it concerns, never
run silently on wrong data.

1. config values and paths reach rule shells quoted (a clone under a path with spaces and `$(...)`);
2. method and model settings are checked (keys, types, ranges; numeric strings coerced) when the config
   is loaded, by `snakemake -n` and by every CLI verb;
3. DDPM/PMF training never resumes a state written with other settings, and sets a corrupt one aside;
4. `vcebench evaluate` refuses CF rows paired with another input and reports rows missing vs n_eval;
5. smaller ones: unwritable outputs fail first; non-finite input logits, tiny and unreadable images
   fail their sample; one Fréchet distance on every SciPy; safetensors only; clean error texts.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import vcebench.data
import vcebench.models
from tests.toy import toy_images, toy_models
from vcebench.cli import main
from vcebench.config.load import ConfigError
from vcebench.core.io import load_npz, save_npz, to_uint8

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"
FIRE_TOY = {"rho": 0.05, "dilation": 1, "feather": 2, "K": 3, "smoothgrad_n": 4}


def _env(pythonpath: Path) -> dict:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHONPATH=str(pythonpath),
                OMP_NUM_THREADS="1")


# ----------------------------------------------------------------------------- 1. quoting

def test_rules_run_from_a_path_with_spaces_and_shell_characters(tmp_path):
    """A clone under `a b$(touch INJ)/` runs a rule, and a `$(...)` in a config value stays text."""
    parent = tmp_path / "a b$(touch INJ)"
    repo = parent / "repo"
    repo.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("Snakefile", "pyproject.toml", "config", "workflows", "profiles", "vcebench", "methods", "metrics"):
        src = ROOT / name
        (shutil.copytree(src, repo / name, ignore=skip) if src.is_dir() else shutil.copy2(src, repo / name))
    (repo / "tiny.yaml").write_text(yaml.safe_dump({"datasets": {"synthxray": {"resolution": 8, "n_patients": 40}}}))
    value = "reference_dir=results/reference/quick$(touch injected)"
    common = ["--cores", "1", "--configfile", "config/presets/quick.yaml", "tiny.yaml", "--config", value]
    r = subprocess.run([SNAKEMAKE, "resources/data/synthxray/test.npz", *common], cwd=repo, env=_env(repo),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (repo / "runs/quick/resources/data/synthxray/test.npz").is_file()
    # the regression rule's command line: every path and value one shell word, `$(...)` not run
    r = subprocess.run([SNAKEMAKE, "regression", "-n", "-p", *common], cwd=repo, env=_env(repo),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "vcebench report regression" in ln)
    cmd = line[line.index("vcebench"):]
    words = shlex.split(cmd)
    assert words[words.index("--reference") + 1] == str(repo / "results/reference/quick$(touch injected)")
    assert "--config" not in words  # the job reads the run's merged config, one shell word
    assert words[words.index("--resolved-config") + 1].endswith("config.resolved.json")
    subprocess.run(["bash", "-c", cmd], cwd=repo / "runs/quick", env=_env(repo), capture_output=True, timeout=300)
    created = [p for p in tmp_path.rglob("*") if p.name in ("INJ", "injected")]
    assert created == []


# ----------------------------------------------------------------------------- 2. settings

@pytest.mark.parametrize("override,key", [
    ({"method_defaults": {"fire": {"rhoo": 0.1}}}, "method_defaults.fire.rhoo"),
    ({"tasks": {"synthfaces_smile": {"params": {"fire": {"rhoo": 0.1}}}}}, "tasks.synthfaces_smile.params.fire.rhoo"),
    ({"variants": {"fire": {"K5": {"KK": 5}}}}, "variants.fire.K5.KK"),
    ({"variants": {"fire": {"K7": {"KK": 5}}}}, "variants.fire.K7.KK"),
    ({"tasks": {"synthfaces_age": {"params": {"fire_K55": {"K": 3}}}}}, "tasks.synthfaces_age.params.fire_K55"),
    ({"method_defaults": {"fire": {"K": "many"}}}, "method_defaults.fire.K"),
    ({"method_defaults": {"fire": {"early_stop": "yes"}}}, "method_defaults.fire.early_stop"),
    ({"method_defaults": {"fire": {"t": 1.5}}}, "method_defaults.fire.t"),
    ({"variants": {"fire": {"K5": {"K": 0}}}}, "variants.fire.K5.K"),
    ({"tasks": {"synthfaces_smile": {"params": {"dime": {"start_step": 40}}}}},
     "tasks.synthfaces_smile.params.dime.start_step"),
    ({"models": {"synthfaces": {"classifier": {"stepz": 10}}}}, "models.synthfaces.classifier.stepz"),
    ({"models": {"synthfaces": {"classifier": {"lr": "fast"}}}}, "models.synthfaces.classifier.lr"),
    ({"models": {"synthfaces": {"classifier": {"steps": 1.5}}}}, "models.synthfaces.classifier.steps"),
    ({"models": {"synthfaces": {"ddpm": {"steps": 0}}}}, "models.synthfaces.ddpm.steps"),
    ({"models": {"synthfaces": {"pmf": {"p_fm": 1.5}}}}, "models.synthfaces.pmf.p_fm"),
    ({"models": {"synthfaces": {"pmf": {"jvp": "exakt"}}}}, "models.synthfaces.pmf.jvp"),
    ({"models": {"synthfaces": {"ddpm": {"unet": {"layers_per_blok": 2}}}}},
     "models.synthfaces.ddpm.unet.layers_per_blok"),
    ({"models": {"synthxray": {"simsiam": {"lr": float("nan")}}}}, "models.synthxray.simsiam.lr"),
])
def test_bad_settings_are_named_when_the_config_is_loaded(override, key):
    from vcebench.protocol.settings import load_settings

    with pytest.raises(ConfigError) as e:
        load_settings(overrides=override)
    assert f"`{key}`" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("override,key", [
    ({"method_defaults": {"fire": {"rhoo": 0.1}}}, "method_defaults.fire.rhoo"),
    ({"tasks": {"synthfaces_smile": {"params": {"fire": {"rhoo": 0.1}}}}}, "tasks.synthfaces_smile.params.fire.rhoo"),
    ({"variants": {"fire": {"K5": {"KK": 5}}}}, "variants.fire.K5.KK"),
    ({"tasks": {"synthfaces_smile": {"params": {"fire_K5": {"K": "many"}}}}},
     "tasks.synthfaces_smile.params.fire_K5.K"),
    ({"variants": {"fire": {"K5": {"K": 0}}}}, "variants.fire.K5.K"),
    ({"models": {"synthfaces": {"classifier": {"stepz": 10}}}}, "models.synthfaces.classifier.stepz"),
])
def test_a_job_checks_the_settings_it_runs(override, key):
    """`only=(task, method)` (an explain / evaluate job; the Snakefile checked the whole config): a bad key,
    type or range of that method on that task is named as the full check names it; another method's is not
    this job's concern, and the job's own string numbers are coerced."""
    from vcebench.protocol.settings import load_settings

    with pytest.raises(ConfigError) as e:
        load_settings(overrides=override, only=("synthfaces_smile", "fire_K5"))
    assert f"`{key}`" in str(e.value) and "\n" not in str(e.value)
    other = {"method_defaults": {"dime": {"scalez": [8]}},
             "tasks": {"synthfaces_age": {"params": {"fire": {"rhoo": 1}}}}}
    cfg = load_settings(overrides={**other, "variants": {"fire": {"K5": {"K": "7"}}}},
                        only=("synthfaces_smile", "fire_K5"))
    assert cfg["variants"]["fire"]["K5"]["K"] == 7
    with pytest.raises(ConfigError, match="method_defaults.dime.scalez"):
        load_settings(overrides=other)
    load_settings(overrides=other, only=("synthfaces_smile", None))  # a network's job: model settings only


def test_numbers_written_as_strings_are_coerced():
    """`lr: 6e-3` is a string to YAML 1.1; `steps: "150"`: both become numbers for every consumer."""
    from vcebench.protocol.settings import load_settings

    assert yaml.safe_load("lr: 6e-3")["lr"] == "6e-3"
    cfg = load_settings(overrides={"models": {"synthfaces": {"classifier": {"lr": "6e-3", "steps": "150"},
                                                             "ddpm": {"lr": "1.5e-3"}}},
                                   "method_defaults": {"dime": {"scales": ["8", 10]}, "fire": {"K": "7"}}})
    c = cfg["models"]["synthfaces"]["classifier"]
    assert c["lr"] == 0.006 and isinstance(c["lr"], float) and c["steps"] == 150 and isinstance(c["steps"], int)
    assert cfg["models"]["synthfaces"]["ddpm"]["lr"] == 0.0015
    assert cfg["method_defaults"]["dime"]["scales"] == [8.0, 10] and cfg["method_defaults"]["fire"]["K"] == 7
    # a valid config is left exactly as written (the workflow's rerun triggers hash it)
    from vcebench.config.load import load_config

    assert load_settings() == load_config()


def test_snakemake_dry_run_fails_fast_naming_the_key(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("method_defaults:\n  fire: {rhoo: 0.1}\n")
    r = subprocess.run([SNAKEMAKE, "-n", "--configfile", str(bad)], cwd=ROOT, env=_env(ROOT),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "rhoo" in ln]
    assert len(lines) == 1 and "`method_defaults.fire.rhoo`" in lines[0] and "did you mean `rho`" in lines[0]
    assert "Traceback" not in r.stdout + r.stderr


def test_cli_verbs_name_the_key_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  synthfaces:\n    classifier: {lr: fast}\n")
    for argv in (["train", "classifier", "--task", "synthfaces_smile", "--out", str(tmp_path / "m")],
                 ["explain", "--task", "synthfaces_smile", "--method", "fire", "--out", str(tmp_path / "s.npz")],
                 ["evaluate", "--task", "synthfaces_smile", "--method", "fire", "--out", str(tmp_path / "m.json")]):
        assert main([*argv, "--config", "config/config.yaml", "--config", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "`models.synthfaces.classifier.lr`" in err, err


def test_remaining_type_and_value_errors_name_the_settings(monkeypatch, tmp_path, cfg):
    """What the typed check cannot see (a value the network or method constructor rejects) still ends in a
    ConfigError naming the settings, not a traceback."""
    import methods
    from vcebench.steps import train as trainers

    def bad_trainer(settings, splits, out, **kw):
        raise TypeError("unsupported operand type(s) for *: 'NoneType' and 'int'")

    monkeypatch.setitem(trainers.TRAINERS, "perceptual", (trainers.TRAINERS["perceptual"][0], bad_trainer))
    monkeypatch.setattr(vcebench.data, "load_split", lambda *a, **k: None, raising=False)
    with pytest.raises(ConfigError, match=r"`models\.synthfaces\.perceptual`: TypeError"):
        trainers.train_role(cfg, "perceptual", "synthfaces_smile", out_dir=tmp_path / "p")

    def bad_factory(name, params):
        raise ValueError("scales must be increasing")

    import dataclasses

    from vcebench import registry

    monkeypatch.setitem(registry._METHODS, "dime",
                        dataclasses.replace(registry.get_method_spec("dime"), factory=bad_factory))
    with pytest.raises(ConfigError, match=r"`method_defaults\.dime`.*ValueError: scales must be increasing"):
        methods.get_method("dime", {})


# ----------------------------------------------------------------------------- 3. resumable training

def _pmf_run(cfg_role: dict, out: Path, stop_at: int | None = None):
    from tests.test_models_generative import _images
    from vcebench.models.generative.meanflow import meanflow_loss
    from vcebench.models.generative.pmf import build_pmf
    from vcebench.models.training.generative import train_generative as train_loop

    torch.manual_seed(0)
    pmf = build_pmf(cfg_role, 3, 8)

    def loss_fn(m, x, g, s):
        if s == stop_at:
            raise KeyboardInterrupt
        return meanflow_loss(m, x, g, cfg_role, s < 1)[0]

    return train_loop(pmf, loss_fn, cfg_role, _images(24), out, 0, "pmf", progress=False)


def test_generative_training_does_not_resume_a_stale_state(tmp_path, capfd):
    from tests.test_models_generative import _pmf_cfg

    old, new = _pmf_cfg(steps=4, checkpoint_every=2), _pmf_cfg(steps=4, checkpoint_every=2, lr=1e-3)
    with pytest.raises(KeyboardInterrupt):
        _pmf_run(old, tmp_path / "c", stop_at=3)
    state = tmp_path / "c" / "checkpoint" / "state.pt"
    assert state.is_file()
    capfd.readouterr()
    shadow, stats = _pmf_run(new, tmp_path / "c")
    assert stats["resumed_from_step"] == 0
    assert "other settings" in capfd.readouterr().err and (state.parent / "state.pt.stale").is_file()
    fresh, _ = _pmf_run(new, tmp_path / "fresh")
    assert all(torch.equal(shadow[k], fresh[k]) for k in fresh)
    # the same settings do resume
    with pytest.raises(KeyboardInterrupt):
        _pmf_run(new, tmp_path / "d", stop_at=3)
    assert _pmf_run(new, tmp_path / "d")[1]["resumed_from_step"] == 2


def test_corrupt_training_state_is_set_aside(tmp_path, capfd):
    from tests.test_models_generative import _pmf_cfg

    state = tmp_path / "c" / "checkpoint" / "state.pt"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"PK\x03\x04 truncated")
    _, stats = _pmf_run(_pmf_cfg(steps=2, checkpoint_every=2), tmp_path / "c")
    assert stats["resumed_from_step"] == 0 and not state.exists()
    assert (state.parent / "state.pt.corrupt").read_bytes() == b"PK\x03\x04 truncated"
    assert "unreadable checkpoint" in capfd.readouterr().err
    # the classifier-family loop resumes through the same function
    from vcebench.models.checkpoints import load_resume_state

    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"garbage")
    assert load_resume_state(bad, "fp", "t") is None and (tmp_path / "checkpoint.pt.corrupt").is_file()


# ----------------------------------------------------------------------------- 4. evaluation checks rows

@pytest.fixture(scope="module")
def evalset(tmp_path_factory):
    """A small synthfaces config (n_eval 16), stand-in networks and a checked counterfactuals.npz."""
    from vcebench.config.load import load_config
    from vcebench.core.io import input_fingerprint
    from vcebench.costs.standins import fake_counterfactuals, standin_models
    from vcebench.data import load_split
    from vcebench.steps.explain import shard_ids

    d = tmp_path_factory.mktemp("evalset")
    (d / "small.yaml").write_text("threads: 1\nn_eval: 16\ndatasets:\n  synthfaces: {n_identities: 40, "
                                  "images_per_identity: 8}\n")
    config = ["--config", "config/config.yaml", "--config", str(d / "small.yaml")]
    cfg = load_config(config[1::2])
    split = load_split(cfg, "synthfaces", "test")
    ids = shard_ids(split.sample_ids, 16, 0, 1)
    x = split.float_images(split.index_of(ids))
    models = standin_models(split.attribute_names, 3, threshold=float(x.flatten(1).mean(1).median()))
    fake_counterfactuals(x, ids, models.classifier, d / "cf.npz")
    z = load_npz(d / "cf.npz")
    z["input_hash"] = input_fingerprint(to_uint8(x), z["cf"])  # as `vcebench explain` writes it
    save_npz(d / "cf.npz", **z)
    return d, config, models


def _evaluate(evalset, monkeypatch, z: dict, *extra) -> int:
    d, config, models = evalset
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda *a, **k: models, raising=False)
    save_npz(d / "t.npz", **z)
    return main(["evaluate", "--task", "synthfaces_smile", "--method", "fire", "--cfs", str(d / "t.npz"),
                 "--out", str(d / "m.json"), "--only", "FR", "--no-progress", *config, *extra])


@pytest.mark.parametrize("swap", ["cf", "sample_id"])
def test_evaluate_refuses_swapped_rows(evalset, monkeypatch, capsys, swap):
    good = load_npz(evalset[0] / "cf.npz")
    z = {k: v.copy() for k, v in good.items()}
    z[swap][[3, 7]] = z[swap][[7, 3]]
    if swap == "sample_id":  # keep the file sorted by id, as merged files are
        order = np.argsort(z["sample_id"])
        z = {k: v[order] for k, v in z.items()}
    assert _evaluate(evalset, monkeypatch, z, "--strict") == 2
    err = capsys.readouterr().err
    assert "not made from the dataset's image" in err and err.count("\n") == 1
    assert _evaluate(evalset, monkeypatch, good, "--strict") == 0
    assert json.loads((evalset[0] / "m.json").read_text())["inputs"]["input_hash_checked"]


def test_evaluate_reports_missing_rows_against_n_eval(evalset, monkeypatch, capsys):
    z = {k: v[3:] for k, v in load_npz(evalset[0] / "cf.npz").items()}
    assert _evaluate(evalset, monkeypatch, z) == 0
    assert "3 missing" in capsys.readouterr().err
    assert json.loads((evalset[0] / "m.json").read_text())["inputs"]["n_missing"] == 3
    assert _evaluate(evalset, monkeypatch, z, "--strict") == 2
    assert "3 missing" in capsys.readouterr().err


def test_old_counterfactual_files_still_evaluate_with_a_warning(evalset, monkeypatch, capsys):
    z = load_npz(evalset[0] / "cf.npz")
    z.pop("input_hash")
    assert _evaluate(evalset, monkeypatch, z) == 0
    assert "has no `input_hash`" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 5. smaller ones

def test_explain_into_an_unwritable_folder_fails_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["explain", "--task", "synthfaces_smile", "--method", "fire", "--out", str(blocker / "x/shard-0-of-1.npz")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vcebench explain: PermissionError: cannot write the counterfactuals into")
    assert "\n" not in err
    if os.geteuid() != 0:  # root writes into read-only folders
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        assert main(["explain", "--task", "synthfaces_smile", "--method", "fire",
                     "--out", str(ro / "shard-0-of-1.npz")]) == 2


class _NaNOnWhite(torch.nn.Module):
    """The toy classifier, with NaN logits for an all-white input."""

    def __init__(self):
        super().__init__()
        self.base = toy_models().classifier

    def forward(self, x):
        out = self.base(x)
        return torch.where((x.flatten(1) >= 1).all(1, keepdim=True), torch.full_like(out, float("nan")), out)


def test_nonfinite_input_logits_fail_that_sample_with_their_own_code(tmp_path, cfg):
    import methods
    from methods.base import FAIL_NONFINITE_INPUT_LOGITS
    from vcebench.protocol.run_settings import RunSettings
    from vcebench.steps.explain import generate

    x, _ = toy_images(5)
    x[2] = 1.0
    ids = torch.arange(10, 15)
    models = toy_models()
    models.classifier = _NaNOnWhite()
    c = {**cfg, "batch_size": 5, "seed": 0}
    method = methods.get_method("fire", FIRE_TOY)
    c = RunSettings.resolve(c, "synthfaces_smile", "fire")
    generate(method, lambda idx: x[idx], ids, models, c, tmp_path / "shard-0-of-1.npz")
    z = load_npz(tmp_path / "shard-0-of-1.npz")
    assert z["info_fail_reason"][2] == FAIL_NONFINITE_INPUT_LOGITS and z["failed"][2] and not z["flipped"][2]
    assert z["pred"][2] == -1 and np.array_equal(z["cf"][2], to_uint8(x[2:3])[0])
    keep = [0, 1, 3, 4]
    generate(method, lambda idx: x[keep][idx], ids[keep], models, c, tmp_path / "ok.npz")
    ok = load_npz(tmp_path / "ok.npz")
    assert np.array_equal(z["cf"][keep], ok["cf"]) and (z["info_fail_reason"][keep] == 0).all()


def _celeba_cfg(cfg, root, **kw):
    c = copy.deepcopy(cfg)
    c["datasets"]["celeba"].update(root=str(root), resolution=16, minival=6, **kw)
    return c


def test_tiny_images_warn_or_fail(tmp_path, cfg):
    from PIL import Image

    from tests.fakes import make_celeba
    from vcebench.data import DatasetError, load_split

    root = make_celeba(tmp_path / "celeba", n=12)
    Image.new("RGB", (1, 1)).save(root / "img_align_celeba" / "000001.jpg")
    Image.new("RGB", (6, 6)).save(root / "img_align_celeba" / "000002.jpg")
    split = load_split(_celeba_cfg(cfg, root, min_image_size=4), "celeba", "train")
    with pytest.raises(DatasetError, match="1x1 px, below the minimum of 4 px"):
        split.uint8_images([0])
    with pytest.warns(UserWarning, match="6x6 px, upscaled 2.7x to 16 px"):
        split.uint8_images([1])
    errors: dict = {}
    out = split.uint8_images([2, 0, 1], errors=errors)
    assert list(errors) == [1] and int(out[1].sum()) == 0 and int(out[0].sum()) > 0


def test_an_unreadable_image_fails_its_sample_not_the_shard(tmp_path, cfg, monkeypatch):
    from methods.base import FAIL_UNREADABLE_INPUT
    from tests.fakes import make_celeba
    from vcebench.data import load_split
    from vcebench.protocol.run_settings import RunSettings
    from vcebench.steps.explain import explain_shard

    root = make_celeba(tmp_path / "celeba", n=24)
    c = _celeba_cfg(cfg, root)
    c.update(n_eval=6, batch_size=4, threads=1)
    c["tasks"]["celeba_smile"]["params"] = {"fire": FIRE_TOY}
    bad_id = int(load_split(c, "celeba", "minival").sample_ids[1])
    (root / "img_align_celeba" / f"{bad_id:06d}.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    monkeypatch.setattr(vcebench.models, "load_task_models", lambda *a, **k: toy_models(), raising=False)
    out = tmp_path / "shard-0-of-1.npz"
    explain_shard(RunSettings.resolve(c, "celeba_smile", "fire"), 0, 1, out)
    z = load_npz(out)
    row = int(np.nonzero(z["sample_id"] == bad_id)[0][0])
    assert len(z["sample_id"]) == 6 and z["info_fail_reason"][row] == FAIL_UNREADABLE_INPUT and z["failed"][row]
    assert (np.delete(z["info_fail_reason"], row) != FAIL_UNREADABLE_INPUT).all()
    timing = json.loads((tmp_path / "timing-0-of-1.json").read_text())
    assert list(timing["unreadable"]) == [str(bad_id)] and "cannot read image" in timing["unreadable"][str(bad_id)]


def _diag_fd(mu1, s1, mu2, s2) -> float:
    return float(((mu1 - mu2) ** 2).sum() + (s1 + s2 - 2 * np.sqrt(s1 * s2)).sum())


def test_frechet_distance_on_old_and_new_scipy(monkeypatch):
    """SciPy >= 1.18 has no `disp`; older SciPy may return a complex root. Both give the known answer,
    and every module computes FID through vcebench.core.frechet."""
    import scipy.linalg

    from vcebench.core import frechet
    from vcebench.models.synthetic import fid_features as features

    real = scipy.linalg.sqrtm
    rng = np.random.default_rng(0)
    mu1, mu2, s1, s2 = rng.normal(size=4), rng.normal(size=4), rng.uniform(0.5, 2, 4), rng.uniform(0.5, 2, 4)
    want = _diag_fd(mu1, s1, mu2, s2)

    def new_api(a, **kw):  # SciPy 1.18: sqrtm(A) only
        if kw:
            raise TypeError(f"sqrtm() got an unexpected keyword argument {next(iter(kw))!r}")
        return np.real(real(a))

    def old_api(a, disp=True, blocksize=64):  # SciPy <= 1.15: a complex array with a zero imaginary part
        return real(a).astype(np.complex128) + 1e-12j

    for fake in (new_api, old_api):
        monkeypatch.setattr(scipy.linalg, "sqrtm", fake)
        assert frechet.frechet_distance(mu1, np.diag(s1), mu2, np.diag(s2)) == pytest.approx(want, rel=1e-9)
        f = torch.randn(300, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        got = features.frechet_distance(f, f * 2 + 1)
        a, b = f.numpy(), (f * 2 + 1).numpy()
        ref = frechet.frechet_distance(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False))
        assert got == pytest.approx(ref, rel=1e-9) and got > 1
    # one implementation: no other module takes a matrix square root
    sources = [p for d in ("vcebench", "metrics", "methods") for p in (ROOT / d).rglob("*.py")]
    takers = [p.relative_to(ROOT).as_posix() for p in sources if "sqrtm(" in p.read_text()]
    assert takers == ["vcebench/core/frechet.py"]


def test_scipy_range_is_pinned_and_installed():
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("scipy"))[len("scipy"):].split(";")[0].strip()
    assert "<" in spec and ">=" in spec
    assert version("scipy") in SpecifierSet(spec)


def test_diffusers_weights_load_as_safetensors_only(tmp_path, monkeypatch):
    import diffusers

    from tests.test_models_generative import _ddpm_cfg
    from vcebench.models.generative.ddpm import DiffusersDDPM, build_ddpm

    build_ddpm(_ddpm_cfg(), 3, 8).save_pretrained(tmp_path / "ddpm")
    assert DiffusersDDPM.from_pretrained_dir(tmp_path / "ddpm").num_train_timesteps == 50
    seen = {}
    orig = diffusers.UNet2DModel.from_pretrained

    def spy(*a, **kw):
        seen.update(kw)
        return orig(*a, **kw)

    monkeypatch.setattr(diffusers.UNet2DModel, "from_pretrained", spy)
    DiffusersDDPM.from_pretrained_dir(tmp_path / "ddpm")
    assert seen.get("use_safetensors") is True


def test_error_texts_show_plain_numbers_and_the_right_flag(tmp_path, cfg):
    from tests.fakes import make_celeba, make_chexpert
    from vcebench.data import DatasetError, load_split

    root, pm = make_chexpert(tmp_path, n_patients=6)
    pm.write_text(pm.read_text().replace(",0\n", ",2\n", 1))
    c = copy.deepcopy(cfg)
    c["datasets"]["chexpert"].update(root=str(root), pacemaker_csv=str(pm))
    with pytest.raises(DatasetError) as e:
        load_split(c, "chexpert", "train")
    assert "got 2" in str(e.value) and "np.int64" not in str(e.value)
    croot = make_celeba(tmp_path / "celeba", n=8)
    c["datasets"]["celebahq"].update(root=str(croot), celeba_root=None)
    with pytest.raises(DatasetError) as e:
        load_split(c, "celebahq", "test")
    assert "--celeba-root /path" in str(e.value) and "--root /path" not in str(e.value)
