"""Every number traceable: the provenance record (vcebench.core.provenance), its footer line, `vcebench report
provenance`, and the fingerprints of real-data split files (vcebench.data.fingerprints, `vcebench data check`)."""

import json
import shutil
import subprocess

import pandas as pd
import pytest
from fakes import make_celeba, make_chexpert

from vcebench.cli import main
from vcebench.config.kernels import record
from vcebench.core import provenance
from vcebench.core.io import sha256
from vcebench.data.fingerprints import ModifiedSplitError, check_split_files, fingerprints

FIELDS = {"version", "git", "packages", "configs", "settings_hash", "data_files", "python", "implementation",
          "platform", "torch", "cuda", "cudnn", "kernels", "gpu", "torch_threads", "torch_interop_threads",
          "hostname", "argv"}


def test_record_has_every_field(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text("seed: 3\n")
    rec = provenance.build_record(config_paths=[cfg], settings={"seed": 3, "task": {"name": "t"}},
                                  data_files={"x.txt": {"sha256": "ab" * 32}}, kernels=record())
    assert set(rec) == FIELDS
    assert rec["configs"] == {str(cfg): sha256(cfg)}
    assert len(rec["settings_hash"]) == 64 and rec["data_files"]["x.txt"]["sha256"] == "ab" * 32
    assert rec["packages"]["torch"] and {"vcebench", "torchvision", "scipy", "snakemake"} <= set(rec["packages"])
    assert rec["torch"].startswith(rec["packages"]["torch"].split("+")[0])
    assert rec["kernels"]["cpu"] and rec["torch_threads"] >= 1 and rec["python"].count(".") == 2
    assert set(rec["git"]) == {"commit", "dirty", "reason"}
    json.dumps(rec)  # plain JSON


def test_settings_hash_is_canonical_and_sensitive():
    a = provenance.settings_hash({"seed": 0, "params": {"K": 5, "lr": 0.1}})
    assert a == provenance.settings_hash({"params": {"lr": 0.1, "K": 5}, "seed": 0})  # key order
    assert a != provenance.settings_hash({"seed": 0, "params": {"K": 6, "lr": 0.1}})


def test_resolved_settings_of_a_job(cfg):
    from vcebench.protocol.run_settings import RunSettings

    s = RunSettings.resolve(cfg, "synthfaces_smile", "fire")
    plain = provenance.resolved_settings(s)
    assert plain["method"] == "fire" and plain["task"]["name"] == "synthfaces_smile" and "parsed" not in plain
    other = RunSettings.resolve({**cfg, "seed": cfg["seed"] + 1}, "synthfaces_smile", "fire")
    assert provenance.settings_hash(plain) != provenance.settings_hash(provenance.resolved_settings(other))


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_dirty_flag_flips_on_an_uncommitted_change(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    git("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-q", "-m", "one")
    clean = provenance.git_state(repo)
    assert clean["dirty"] is False and len(clean["commit"]) == 40 and clean["reason"] is None
    (repo / "code.py").write_text("x = 2\n")  # the planted uncommitted change
    dirty = provenance.git_state(repo)
    assert dirty["dirty"] is True and dirty["commit"] == clean["commit"]
    plain = tmp_path / "site-packages"  # an installed copy: no checkout
    plain.mkdir()
    none = provenance.git_state(plain)
    assert none["commit"] is None and none["dirty"] is None and none["reason"]


def _rec(commit: str, dirty: bool, settings: str = "1" * 64) -> dict:
    return {"git": {"commit": commit, "dirty": dirty, "reason": None}, "torch": "2.14.1", "cuda": None,
            "kernels": {"cpu": "AuthenticAMD AMD EPYC"}, "torch_threads": 1, "settings_hash": settings,
            "packages": {"vcebench": "0.1.0"}}


def test_footer_line_summarises_the_rows():
    from vcebench.report.footer import task_footer

    df = pd.DataFrame({"method": ["fire", "dime"], "FR": [90.0, 80.0]})
    lines = task_footer(df, {"fire": {"provenance": _rec("a" * 40, False)},
                             "dime": {"provenance": _rec("a" * 40, False)}})
    line = next(x for x in lines if x.startswith("Provenance:"))
    assert "vcebench aaaaaaaa," in line and "+dirty" not in line and "torch 2.14.1" in line
    assert "AMD EPYC" in line and "1 thread" in line and "settings 11111111" in line
    lines = task_footer(df, {"fire": {"provenance": _rec("a" * 40, False)},
                             "dime": {"provenance": _rec("b" * 40, True, "2" * 64)}})
    line = next(x for x in lines if x.startswith("Provenance:"))
    assert "aaaaaaaa, bbbbbbbb+dirty (rows differ)" in line and "settings hashes 11111111, 22222222" in line
    many = {m: {"provenance": _rec("a" * 40, False, str(i) * 64)} for i, m in enumerate("abcd")}
    assert "4 settings hashes" in provenance.summary({m: v["provenance"] for m, v in many.items()})
    assert not [x for x in task_footer(df, {"fire": {}, "dime": {}}) if x.startswith("Provenance:")]


def test_report_provenance_prints_each_row(tmp_path, capsys):
    for m, rec in (("fire", _rec("c" * 40, True)), ("dime", None)):
        (tmp_path / "t" / m).mkdir(parents=True)
        body = {"task": "t", "method": m, "metrics": {}, **({"provenance": rec} if rec else {})}
        (tmp_path / "t" / m / "metrics.json").write_text(json.dumps(body))
    assert main(["report", "provenance", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(x.startswith("t/fire: vcebench cccccccc+dirty") for x in out)
    assert any(x.startswith("t/dime: no provenance record") for x in out)
    assert main(["report", "provenance", str(tmp_path / "t" / "fire" / "metrics.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["t/fire"]["git"]["commit"] == "c" * 40
    assert main(["report", "provenance", str(tmp_path / "empty")]) == 1


def test_split_files_match_mismatch_and_allowed(tmp_path, capsys):
    root = make_celeba(tmp_path / "celeba", n=8)
    record = tmp_path / "fp.json"
    first = check_split_files("celeba", {"root": str(root)}, record=record)
    assert {c.path.split("/")[-1]: c.status for c in first} == {"list_eval_partition.txt": "first-seen",
                                                                "list_attr_celeba.txt": "first-seen"}
    again = check_split_files("celeba", {"root": str(root)}, record=record)
    assert {c.status for c in again} == {"match"} and {c.source for c in again} == {"recorded"}
    part = root / "list_eval_partition.txt"
    part.write_text(part.read_text().replace(" 0\n", " 2\n", 1))  # the planted edit of the official split
    with pytest.raises(ModifiedSplitError, match="list_eval_partition.txt") as e:
        check_split_files("celeba", {"root": str(root)}, record=record)
    assert "\n" not in str(e.value) and "allow_modified_splits" in str(e.value)
    allowed = check_split_files("celeba", {"root": str(root), "allow_modified_splits": True}, record=record)
    assert {c.path.split("/")[-1]: c.status for c in allowed}["list_eval_partition.txt"] == "mismatch"
    assert "warning" in capsys.readouterr().err


def test_published_hash_is_checked(tmp_path, monkeypatch):
    import dataclasses

    from vcebench import registry

    root, _ = make_chexpert(tmp_path / "cx", n_patients=4)
    spec = registry.get_dataset_spec("chexpert")
    good = dataclasses.replace(spec, split_files=(("root", "train.csv", sha256(root / "train.csv")),))
    monkeypatch.setattr(registry, "get_dataset_spec", lambda name: good)
    ok = check_split_files("chexpert", {"root": str(root)}, record=tmp_path / "fp.json")
    assert [(c.status, c.source) for c in ok] == [("match", "published")]
    bad = dataclasses.replace(spec, split_files=(("root", "train.csv", "0" * 64),))
    monkeypatch.setattr(registry, "get_dataset_spec", lambda name: bad)
    with pytest.raises(ModifiedSplitError, match="train.csv"):
        check_split_files("chexpert", {"root": str(root)}, record=tmp_path / "fp.json")


def test_data_check_cli_statuses(tmp_path, capsys):
    root = make_celeba(tmp_path / "celeba", n=8)
    fp = ["--fingerprints", str(tmp_path / "fp.json"), "--config", "config/config.yaml"]
    assert main(["data", "check", "celeba", "--root", str(root), *fp]) == 0
    assert "list_attr_celeba.txt: unknown, first seen" in capsys.readouterr().out
    assert main(["data", "check", "celeba", "--root", str(root), *fp]) == 0
    assert "list_attr_celeba.txt: match" in capsys.readouterr().out
    attr = root / "list_attr_celeba.txt"
    attr.write_text(attr.read_text() + "\n")
    assert main(["data", "check", "celeba", "--root", str(root), *fp]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "list_attr_celeba.txt" in err[0] and "differs" in err[0]
    assert main(["data", "check", "celeba", "--root", str(root), "--allow-modified-splits", *fp]) == 0
    cap = capsys.readouterr()
    assert "list_attr_celeba.txt: mismatch" in cap.out and "warning" in cap.err


def test_provenance_carries_the_data_files(cfg, tmp_path):
    root = make_celeba(tmp_path / "celeba", n=8, fmt="csv")
    c = {**cfg, "datasets": {**cfg["datasets"], "celeba": {**cfg["datasets"]["celeba"], "root": str(root)}}}
    files = fingerprints(c, "celeba", record=tmp_path / "fp.json")
    assert {f.split("/")[-1] for f in files} == {"list_eval_partition.csv", "list_attr_celeba.csv"}
    assert all(v["sha256"] == sha256(f) for f, v in files.items())
    assert fingerprints(cfg, "synthfaces") == {}
