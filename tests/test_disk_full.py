"""A full disk is one clear error: every writer turns "no space left on device" (an OSError with errno ENOSPC, or
safetensors' SafetensorError quoting it) into one DiskFullError naming the file, and the CLI prints it as one line."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import SafetensorError

from vcebench.core import io
from vcebench.core.errors import DiskFullError, UserError

SAFETENSORS_FULL = ('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left '
                    'on device" })')


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _safetensors_full(*args, **kwargs):
    raise SafetensorError(SAFETENSORS_FULL)


def _tiny_ddpm():
    from tests.test_models_generative import _ddpm_cfg
    from vcebench.models.generative.ddpm import build_ddpm

    torch.manual_seed(0)
    return build_ddpm(_ddpm_cfg(), 3, 16)


def test_disk_space_names_the_path_and_the_space_needed(tmp_path):
    target = tmp_path / "out" / "model.safetensors"
    with pytest.raises(DiskFullError) as e:
        with io.disk_space(target, needed=12_300_000):
            _enospc()
    msg = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in msg
    assert str(target) in msg and "needs about 12.3 MB" in msg and "left" in msg
    with pytest.raises(DiskFullError, match="model.safetensors"):
        with io.disk_space(target):
            _safetensors_full()


def test_disk_space_lets_other_errors_through(tmp_path):
    with pytest.raises(PermissionError):
        with io.disk_space(tmp_path / "x"):
            raise PermissionError(errno.EACCES, "Permission denied")
    with pytest.raises(ValueError, match="a bug"):
        with io.disk_space(tmp_path / "x"):
            raise ValueError("a bug")
    with pytest.raises(SafetensorError, match="header too large"):
        with io.disk_space(tmp_path / "x"):
            raise SafetensorError("header too large")


def test_torch_saves_opaque_write_failure_counts_only_on_a_full_file_system(tmp_path, monkeypatch):
    failed = RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                          "data/0: file write failed")
    with pytest.raises(RuntimeError, match="file write failed"):  # room left: not a full disk
        with io.disk_space(tmp_path / "state.pt", needed=10):
            raise failed
    monkeypatch.setattr(io, "free_bytes", lambda path: 100)
    with pytest.raises(DiskFullError, match="state.pt"):
        with io.disk_space(tmp_path / "state.pt", needed=1000):
            raise failed


def test_the_atomic_writers_name_their_file_and_leave_no_temp_file(tmp_path, monkeypatch):
    monkeypatch.setattr(Path, "write_text", _enospc)
    with pytest.raises(DiskFullError, match=r"metrics\.json"):
        io.write_json(tmp_path / "metrics.json", {"a": 1})
    with pytest.raises(DiskFullError, match=r"table\.md .*needs about 5 B"):
        io.write_text(tmp_path / "table.md", "hello")
    monkeypatch.undo()
    monkeypatch.setattr(np, "savez_compressed", _enospc)
    with pytest.raises(DiskFullError, match=r"shard\.npz \(needs about 4.0 kB"):
        io.save_npz(tmp_path / "shard.npz", cf=np.zeros(4000, np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_saving_trained_weights(tmp_path, monkeypatch):
    from torch import nn

    from vcebench.models import checkpoints

    monkeypatch.setattr(checkpoints, "save_file", _safetensors_full)
    with pytest.raises(DiskFullError, match=r"model\.safetensors \(needs about 1.1 kB"):
        checkpoints.save_trained(tmp_path, nn.Linear(16, 16), {"role": "x"}, {})
    monkeypatch.setattr(checkpoints.torch, "save", _enospc)
    with pytest.raises(DiskFullError, match=r"checkpoint\.pt \(needs about 4.0 kB"):
        checkpoints.save_resume_state(tmp_path / "checkpoint.pt", {"w": torch.zeros(1000)})
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_full_disk_while_saving_the_ddpm_removes_the_partial_folder(tmp_path, monkeypatch):
    from diffusers import UNet2DModel

    ddpm = _tiny_ddpm()
    monkeypatch.setattr(UNet2DModel, "save_pretrained", _safetensors_full)
    with pytest.raises(DiskFullError) as e:
        ddpm.save_pretrained(tmp_path / "ddpm")
    assert f"writing {tmp_path / 'ddpm' / 'unet'} (needs about" in str(e.value)
    assert list((tmp_path / "ddpm").iterdir()) == []  # no half-written .unet.* folder left taking space


def test_the_cli_prints_a_full_disk_as_one_line(tmp_path, monkeypatch, capsys):
    """`vcebench train ddpm` whose save runs out of space (safetensors' error, as on a real full disk): exit 2,
    one line naming the folder, no traceback."""
    from diffusers import UNet2DModel

    from tests.test_errors import _set_every_func
    from vcebench import cli

    ddpm = _tiny_ddpm()
    monkeypatch.setattr(UNet2DModel, "save_pretrained", _safetensors_full)
    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    _set_every_func(parser, lambda args: ddpm.save_pretrained(tmp_path / "ddpm"))
    assert cli.main(["train", "ddpm", "--task", "synthfaces_smile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"vcebench train: DiskFullError: no space left on the device writing {tmp_path / 'ddpm'}")


def test_the_tune_and_report_writers_are_atomic_on_a_full_disk(tmp_path, monkeypatch):
    """`vcebench tune`'s tuned file and sweep table, `report excerpt --write`'s documents: a full disk is the
    one-line DiskFullError naming the file, and neither the file nor a temporary one is left behind."""
    from vcebench.steps.report import sync_excerpts
    from vcebench.steps.tune import write_tuned

    result = {"task": "t", "date": "2026-01-01", "validation": {"n": 2, "split": "val", "evaluation_split": "test"},
              "rule": {"minimize": "KID", "fallback": "-"}, "n_settings": 1, "noise_rule": "x", "wall_seconds": 1.0,
              "sweep": [], "picked": {}, "settings": {}}
    monkeypatch.setattr(Path, "write_text", _enospc)
    with pytest.raises(DiskFullError, match=r"writing .*tuned\.yaml \(needs about"):
        write_tuned("t", result, tmp_path / "tuned.yaml", tmp_path / "sweep.md", merge=False)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- begin:excerpt synthfaces_smile rows=fire cols=FR -->\nstale\n<!-- end:excerpt -->\n")
    monkeypatch.setattr(Path, "write_text", _enospc)
    snapshot = Path(__file__).resolve().parents[1] / "results/reference/default"
    with pytest.raises(DiskFullError, match=r"doc\.md"):
        sync_excerpts([doc], snapshot, write=True)
    assert [p.name for p in tmp_path.iterdir()] == ["doc.md"] and "stale" in doc.read_text()
