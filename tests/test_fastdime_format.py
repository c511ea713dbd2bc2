"""FastDiME's medical DDPM folder (ckpt.tar + config.pickle): strict loading and a pickle that runs nothing."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from vcebench.config.tasks import Task
from vcebench.core.errors import CheckpointError
from vcebench.models.released.canonical import load_canonical
from vcebench.models.released.fastdime_unet import FastDiMEUNet, UnsafePickleError, read_plain_pickle
from vcebench.models.released.unet_ddpm import UNetDDPM

TASK = Task(name="chexpert_pacemaker", dataset="chexpert", attribute="Pacemaker")
KEY = "models.chexpert.ddpm"
# the released layout, shrunk: FastDiME_Med train/config.py saves asdict() of three dataclasses
CONFIG = {"BaseConfig": {"DEVICE": "cuda", "ds_name": "CHEXPERT_CardioPM", "DATASET": "CHEXPERT_CardioPM-train"},
          "ModelConfig": {"BASE_CH": 16, "BASE_CH_MULT": (1, 2), "APPLY_ATTENTION": (False, True),
                          "ATTENTION_TYPE": "ori_att", "DROPOUT_RATE": 0.1, "TIME_EMB_MULT": 4},
          "TrainingConfig": {"TIMESTEPS": 1000, "IMG_SHAPE": (1, 32, 32), "BATCH_SIZE": 16, "LR": 2e-4}}


def _release(folder, config=CONFIG, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    net = FastDiMEUNet.from_config(config)
    torch.save({"model": net.state_dict(), "epoch": 3}, folder / "ckpt.tar")
    with open(folder / "config.pickle", "wb") as f:
        pickle.dump(config, f)
    return net


def test_released_folder_loads_strictly_and_predicts_eps(tmp_path):
    net = _release(tmp_path / "ddpm").eval()
    ddpm, name = load_canonical("ddpm", {"weights": str(tmp_path / "ddpm"), "format": "fastdime_chexpert"}, TASK, KEY)
    assert isinstance(ddpm, UNetDDPM) and not ddpm.learned_variance and ddpm.num_train_timesteps == 1000
    assert "T=1000" in name
    z, t = torch.randn(2, 1, 32, 32), torch.tensor([0, 999])
    with torch.no_grad():
        torch.testing.assert_close(ddpm.eps(z, t), net(z, t))
    # guided-diffusion's linear schedule at T = 1000: betas 1e-4 .. 0.02
    betas = 1 - ddpm.alphas_cumprod[1:] / ddpm.alphas_cumprod[:-1]
    assert float(betas[-1]) == pytest.approx(0.02)
    # the bottleneck always attends; the config's APPLY_ATTENTION adds it on level 1 (4 heads)
    assert net.bottleneck_blocks[0].attention.mhsa.num_heads == 4
    assert isinstance(net.encoder_blocks[0].attention, torch.nn.Identity)


def test_wrong_config_or_weights_are_clear_errors(tmp_path):
    _release(tmp_path / "a")
    other = {**CONFIG, "ModelConfig": {**CONFIG["ModelConfig"], "BASE_CH": 24}}
    with open(tmp_path / "a" / "config.pickle", "wb") as f:
        pickle.dump(other, f)
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_canonical("ddpm", {"weights": str(tmp_path / "a"), "format": "fastdime_chexpert"}, TASK, KEY)
    (tmp_path / "b").mkdir()
    with pytest.raises(CheckpointError, match="ckpt.tar and config.pickle"):
        load_canonical("ddpm", {"weights": str(tmp_path / "b"), "format": "fastdime_chexpert"}, TASK, KEY)
    with open(tmp_path / "a" / "config.pickle", "wb") as f:
        pickle.dump({"ModelConfig": {}}, f)
    with pytest.raises(CheckpointError, match="TrainingConfig|BASE_CH"):
        load_canonical("ddpm", {"weights": str(tmp_path / "a"), "format": "fastdime_chexpert"}, TASK, KEY)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


class _Marker:
    pass


def test_malicious_config_pickle_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _release(tmp_path / "ddpm")
    with open(tmp_path / "ddpm" / "config.pickle", "wb") as f:
        pickle.dump({**CONFIG, "BaseConfig": {"DEVICE": _Exploit()}}, f)
    with pytest.raises(CheckpointError, match="refusing to load (posix|os|nt).system"):
        load_canonical("ddpm", {"weights": str(tmp_path / "ddpm"), "format": "fastdime_chexpert"}, TASK, KEY)
    assert not (tmp_path / "pwned").exists()
    # any class instance is refused, not only callables; so are sets and bytes (not plain values here)
    for bad, what in ((_Marker(), "_Marker"), ({1, 2}, "set"), (b"x", "bytes")):
        (tmp_path / "p.pickle").write_bytes(pickle.dumps({"a": [bad]}))
        with pytest.raises(UnsafePickleError, match=what):
            read_plain_pickle(tmp_path / "p.pickle")
    (tmp_path / "p.pickle").write_bytes(pickle.dumps(CONFIG))
    assert read_plain_pickle(tmp_path / "p.pickle") == CONFIG
    (tmp_path / "p.pickle").write_bytes(b"not a pickle")
    with pytest.raises(UnsafePickleError, match="not a readable pickle"):
        read_plain_pickle(tmp_path / "p.pickle")


def test_noise_protocol_uses_the_released_schedule(tmp_path):
    """The start step is derived from the schedule the released format states (FastDiME_Med: T = 1000
    linear; guided-diffusion: its diffusion_steps / noise_schedule flags), the one explain checks it against."""
    import numpy as np

    from vcebench.protocol.noise import check_ddpm_schedule, ddpm_schedule

    _release(tmp_path / "ddpm")
    spec = {"weights": str(tmp_path / "ddpm"), "format": "fastdime_chexpert"}
    cfg = {"models": {"chexpert": {"ddpm": spec}}}
    ddpm, _ = load_canonical("ddpm", spec, TASK, KEY)
    abar, source = ddpm_schedule(cfg, "chexpert")
    assert len(abar) == 1000 and "T = 1000" in source
    np.testing.assert_allclose(abar, ddpm.alphas_cumprod.numpy(), rtol=1e-12)
    check_ddpm_schedule(cfg, "chexpert", ddpm.alphas_cumprod.numpy())
    guided = {"models": {"celeba": {"ddpm": {"weights": "x.pt", "format": "guided_diffusion",
                                             "diffusion_steps": 100, "noise_schedule": "cosine"}}}}
    abar, source = ddpm_schedule(guided, "celeba")
    assert len(abar) == 100 and "cosine" in source
