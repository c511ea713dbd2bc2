"""`vcebench models fetch` and `hf://` weights on a fake Hugging Face Hub cache built here in the cache's own layout
(models--owner--repo/{blobs, snapshots/<commit>, refs/main}), offline: never the network."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.fakes import TINY_GUIDED_FLAGS, make_celeba
from tests.user_nets import TinyDiT
from vcebench.core.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
DIT = {"input_size": 32, "patch_size": 8, "hidden_size": 32, "depth": 2, "num_heads": 2, "num_classes": 2}
FILES = ("pmf-celeba128-smile.pt", "pmf-celeba128-age.pt")


def hub_cache(cache: Path, repo: str, files: dict[str, bytes], commit: str = COMMIT) -> Path:
    """The Hub cache's layout of ``repo`` at ``commit`` (main): blobs named by their sha256, snapshot links."""
    d = cache / f"models--{repo.replace('/', '--')}"
    (d / "refs").mkdir(parents=True, exist_ok=True)
    (d / "refs" / "main").write_text(commit)
    for name, data in files.items():
        blob = d / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = d / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return d


def dit_bytes(tmp: Path, seed: int) -> bytes:
    torch.manual_seed(seed)
    torch.save({"ema": TinyDiT(**DIT).state_dict(), "epoch": 1}, tmp / "f.pt")
    return (tmp / "f.pt").read_bytes()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A fake cache holding FiRe's two CelebA backbones, HF_HUB_CACHE pointing at it, offline; a copy of the
    project's pins to record into."""
    cache = tmp_path / "hf"
    data = {name: dit_bytes(tmp_path, i) for i, name in enumerate(FILES)}
    repo_dir = hub_cache(cache, "DapaoZeng/FiRe", data)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pins = tmp_path / "hub.yaml"
    shutil.copy(ROOT / "config" / "hub.yaml", pins)
    return {"cache": cache, "repo": repo_dir, "data": data, "pins": pins, "tmp": tmp_path}


@pytest.fixture(scope="module")
def cfg():
    from vcebench.config.load import load_config

    return load_config([ROOT / "config" / "config.yaml"])


def test_dry_run_lists_every_role_with_its_source_revision_and_hash_state(cfg, hub):
    from vcebench.steps.fetch import fetch

    lines: list[str] = []
    assert fetch(cfg, "celeba", pins=hub["pins"], out_dir=hub["tmp"] / "o", dry_run=True, log=lines.append) == {}
    text = "\n".join(lines)
    for role in ("classifier", "ddpm", "oracle", "identity", "perceptual", "fid_features"):
        assert f"  {role}: no Hub file recorded -- get it from " in text and f"`models.celeba.{role}.weights`" in text
    assert ("pmf (celeba_smile): hf://DapaoZeng/FiRe/pmf-celeba128-smile.pt -- revision unpinned (main), sha256 "
            "unverified") in text
    assert "models.celeba.pmf.class" in text and not (hub["tmp"] / "o").exists()
    assert hub["pins"].read_text() == (ROOT / "config" / "hub.yaml").read_text()  # a dry run records nothing


def test_fetch_records_the_first_download_verifies_the_next_and_rejects_a_tampered_file(cfg, hub):
    from vcebench.steps.fetch import fetch, read_pins

    lines: list[str] = []
    out = fetch(cfg, "celeba", pins=hub["pins"], out_dir=hub["tmp"] / "o", log=lines.append)
    assert any(s.startswith("offline (HF_HUB_OFFLINE=1): reading the local Hub cache") for s in lines)
    pinned = {e.file: e for e in read_pins(hub["pins"])["celeba"] if e.on_hub}
    for name in FILES:
        assert pinned[name].revision == COMMIT
        assert pinned[name].sha256 == hashlib.sha256(hub["data"][name]).hexdigest()
    assert "# The real benchmarks' released networks" in hub["pins"].read_text()  # the header and anchors stay
    smile = yaml.safe_load(out["celeba_smile"].read_text())["models"]["celeba"]["pmf"]
    assert smile["weights"] == str(hub["repo"] / "snapshots" / COMMIT / FILES[0])
    assert smile["format"] == "torch_module" and smile["const"] == {"omega": 1.0, "t_min": 0.0, "t_max": 1.0}
    age = yaml.safe_load(out["celeba_age"].read_text())["models"]["celeba"]["pmf"]
    assert age["weights"].endswith(FILES[1])

    lines.clear()
    fetch(cfg, "celeba", pins=hub["pins"], out_dir=hub["tmp"] / "o", log=lines.append)
    assert sum("verified: sha256" in s for s in lines) == 2

    blob = hub["repo"] / "blobs" / hashlib.sha256(hub["data"][FILES[0]]).hexdigest()
    good = hub["data"][FILES[0]]
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit changed
    with pytest.raises(UserError, match=r"^pmf-celeba128-smile\.pt: sha256 [0-9a-f]{16}\.\.\. does not match the "
                                        r"pinned") as e:
        fetch(cfg, "celeba", pins=hub["pins"], out_dir=hub["tmp"] / "o", log=lines.append)
    assert "\n" not in str(e.value)


def test_a_file_missing_from_the_cache_offline_is_a_one_line_error(cfg, hub):
    from vcebench.steps.fetch import fetch

    (hub["repo"] / "snapshots" / COMMIT / FILES[1]).unlink()
    with pytest.raises(UserError, match=r"hf://DapaoZeng/FiRe/pmf-celeba128-age\.pt is not in the local Hub cache "
                                        r".*HF_HUB_OFFLINE=1") as e:
        fetch(cfg, "celeba", pins=hub["pins"], out_dir=hub["tmp"] / "o", log=lambda s: None)
    assert "\n" not in str(e.value)


def test_a_bad_pin_is_refused(hub):
    from vcebench.steps.fetch import read_pins

    hub["pins"].write_text("celeba:\n- {role: pmf, repo: a/b, file: x.pt, sha256: abc}\n")
    with pytest.raises(UserError, match=r"celeba\[0\]: `sha256` must be 64 hex digits"):
        read_pins(hub["pins"])


def test_hf_weights_in_a_config_resolve_to_the_cached_file(hub, tmp_path):
    from vcebench.config.load import load_config

    preset = tmp_path / "p.yaml"
    preset.write_text(f"models:\n  celeba:\n    perceptual: {{weights: 'hf://DapaoZeng/FiRe/{FILES[0]}@{COMMIT}'}}\n")
    cfg = load_config([ROOT / "config" / "config.yaml", preset])
    assert cfg["models"]["celeba"]["perceptual"]["weights"] == str(hub["repo"] / "snapshots" / COMMIT / FILES[0])
    preset.write_text("models:\n  celeba:\n    perceptual: {weights: 'hf://DapaoZeng/FiRe/none.pt@main'}\n")
    with pytest.raises(UserError, match=r"`models\.celeba\.perceptual\.weights`: hf://DapaoZeng/FiRe/none\.pt@main "
                                        r"is not in the local Hub cache"):
        load_config([ROOT / "config" / "config.yaml", preset])
    preset.write_text("models:\n  celeba:\n    perceptual: {weights: 'hf://nofile'}\n")
    with pytest.raises(UserError, match=r"is not a Hub path hf://owner/repo/path/to/file\[@revision\]"):
        load_config([ROOT / "config" / "config.yaml", preset])


def test_snakemake_dry_run_of_celeba_smile_on_the_overlay(cfg, hub, tmp_path):
    """The overlay with the roles still by hand (the DiT's class, from the authors' code: a fake here) and the
    roles without a Hub home (files that exist: a dry run reads none) builds the DAG of results/celeba_smile.csv."""
    from vcebench.steps.fetch import fetch

    out = fetch(cfg, "celeba", pins=hub["pins"], out_dir=tmp_path / "o", log=lambda s: None)
    w = tmp_path / "weights"
    w.mkdir()
    for f in ("classifier.pth", "oracle.pth", "vggface2.pt", "vgg19.pth", "inception.pth", "ddpm.pt"):
        (w / f).write_bytes(b"not read by a dry run")
    data = make_celeba(tmp_path / "celeba", n=8)
    user = {"workdir": str(tmp_path / "run"), "run_tasks": ["celeba_smile"], "methods": ["fire", "dime", "maskdime"],
            "datasets": {"celeba": {"root": str(data)}},
            "models": {"celeba": {
                "classifier": {"weights": str(w / "classifier.pth")}, "oracle": {"weights": str(w / "oracle.pth")},
                "identity": {"weights": str(w / "vggface2.pt")}, "perceptual": {"weights": str(w / "vgg19.pth")},
                "fid_features": {"weights": str(w / "inception.pth")},
                "ddpm": {"weights": str(w / "ddpm.pt"), "format": "guided_diffusion", **TINY_GUIDED_FLAGS},
                "pmf": {"class": "tests.user_nets:TinyDiT", "kwargs": DIT, "state_dict": "ema"}}}}
    (tmp_path / "user.yaml").write_text(yaml.safe_dump(user))
    snakemake = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    args = [snakemake, "-n", "results/celeba_smile.csv", "--cores", "1", "--configfile", str(tmp_path / "user.yaml"),
            str(out["celeba_smile"])]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "explain" in r.stdout and "celeba_smile" in r.stdout
    # without the overlay the pmf has no weights: the same dry run fails, naming the key
    r = subprocess.run(args[:-1], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode != 0 and "models.celeba.pmf" in r.stderr + r.stdout


def test_load_network_reads_a_hub_path(hub):
    import vcebench

    pmf = vcebench.load_network("pmf", f"hf://DapaoZeng/FiRe/{FILES[0]}@{COMMIT}", format="torch_module",
                                **{"class": "tests.user_nets:TinyDiT"}, kwargs=DIT, state_dict="ema", output="x",
                                inputs=["z", "t", "h", "y"], class_label=2)
    ref = TinyDiT(**DIT)
    ref.load_state_dict(torch.load(hub["repo"] / "snapshots" / COMMIT / FILES[0], weights_only=True)["ema"])
    z, t = torch.randn(1, 3, 32, 32), torch.full((1,), 0.5)
    with torch.no_grad():
        torch.testing.assert_close(pmf.predict_clean(z, t), ref.eval()(z, t, t, torch.full((1,), 2)))
