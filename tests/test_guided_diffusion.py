"""guided-diffusion UNet (DiME's released CelebA DDPM format): layout, flags, loader, learned variance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methods.ddpm import Schedule
from vcebench.config.load import ConfigError
from vcebench.config.tasks import Task
from vcebench.core.errors import CheckpointError
from vcebench.models.generative.ddpm import EpsDDPM
from vcebench.models.released.canonical import load_canonical
from vcebench.models.released.guided_flags import resolve_flags
from vcebench.models.released.guided_unet import AttentionBlock, GuidedUNet
from vcebench.models.released.schedule import alphas_cumprod_for, betas_for
from vcebench.models.released.unet_ddpm import UNetDDPM

FIXTURE = Path(__file__).parent / "fixtures" / "dime_celeba_ddpm_keys.json"
SMALL = {"image_size": 32, "num_channels": 32, "num_res_blocks": 1, "channel_mult": "1,2",
         "attention_resolutions": "16", "num_heads": 4}
TASK = Task(name="celeba_smile", dataset="celeba", attribute="Smiling")


def _random_(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():  # the zero-initialised output convs would hide most of the network
        p.data = torch.randn(p.shape, generator=g) * 0.05
    return module


def test_default_flags_give_the_released_dime_celeba_layout_exactly():
    ref = json.loads(FIXTURE.read_text())
    with torch.device("meta"):
        net = GuidedUNet()  # defaults = DiME's CelebA flags
    mine = {k: list(v.shape) for k, v in net.state_dict().items()}
    assert list(mine) == list(ref["keys"])
    assert mine == ref["keys"]
    assert sum(math.prod(s) for s in mine.values()) == ref["n_parameters"]
    f = resolve_flags({})
    assert f["channel_mult"] == (1, 1, 2, 3, 4) and f["attention_ds"] == (4, 8, 16)
    assert net.out_channels == 6


def test_state_dict_with_the_released_keys_loads_strictly_through_the_ddpm_format(tmp_path):
    ref = json.loads(FIXTURE.read_text())["keys"]
    # one stored element per tensor (expanded views): the file is tiny, the key set and shapes exact
    state = {k: torch.full((1,), 0.01).expand(s) for k, s in ref.items()}
    torch.save(state, tmp_path / "celeba-ddpm.pt")
    ddpm, name = load_canonical("ddpm", {"weights": str(tmp_path / "celeba-ddpm.pt"), "format": "guided_diffusion"},
                                TASK, "models.celeba.ddpm")
    assert isinstance(ddpm, UNetDDPM) and ddpm.learned_variance
    assert ddpm.num_train_timesteps == 500 and "T=500" in name
    assert float(ddpm.unet.out[2].weight.detach()[0, 0, 0, 0]) == pytest.approx(0.01)
    # a single missing or extra key is refused, naming it
    bad = dict(state)
    bad.pop("middle_block.1.qkv.weight")
    bad["label_emb.weight"] = torch.zeros(1000, 512)
    torch.save(bad, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="middle_block.1.qkv.weight|label_emb"):
        load_canonical("ddpm", {"weights": str(tmp_path / "bad.pt"), "format": "guided_diffusion"}, TASK, "k")


def test_heads_flag_is_honoured_num_heads_vs_num_head_channels():
    """``num_heads 4`` (DiME's test.sh) and ``num_head_channels 64`` (its training README) have the same
    parameters but different outputs."""
    flags = {**SMALL, "num_channels": 64}
    a = _random_(GuidedUNet(**flags))
    b = GuidedUNet(**{**flags, "num_head_channels": 64})
    b.load_state_dict(a.state_dict(), strict=True)
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([10, 300])
    with torch.no_grad():
        assert (a(x, t) - b(x, t)).abs().max() > 1e-3
    assert [m.heads for m in a.modules() if isinstance(m, AttentionBlock)] == [4, 4, 4, 4]
    assert [m.heads for m in b.modules() if isinstance(m, AttentionBlock)] == [2, 2, 2, 2]


@pytest.mark.parametrize("legacy", [True, False])
def test_attention_matches_an_explicit_per_head_softmax(legacy):
    torch.manual_seed(0)
    c, heads, d = 64, 4, 16
    att = _random_(AttentionBlock(c, heads, legacy_order=legacy))
    x = torch.randn(2, c, 4, 4)
    qkv = att.qkv(att.norm(x.reshape(2, c, 16)))  # (2, 3C, 16)
    if legacy:  # head h owns channels [3 d h, 3 d (h + 1)): its q, k, v in that order
        per_head = qkv.reshape(2, heads, 3, d, 16)
        q, k, v = per_head[:, :, 0], per_head[:, :, 1], per_head[:, :, 2]
    else:
        q, k, v = (u.reshape(2, heads, d, 16) for u in qkv.chunk(3, dim=1))
    o = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
    want = x + att.proj_out(o.transpose(-1, -2).reshape(2, c, 16)).reshape(x.shape)
    torch.testing.assert_close(att(x), want, atol=1e-5, rtol=1e-5)


def test_linear_betas_are_guided_diffusions_scaled_schedule():
    b = betas_for("linear", 500)
    assert b.dtype == np.float64 and len(b) == 500
    assert float(b[0]) == pytest.approx(2e-4) and float(b[-1]) == pytest.approx(0.04)
    c = betas_for("cosine", 1000)
    assert float(c.max()) <= 0.999 and float(c[0]) < float(c[500])


def test_fp16_option_keeps_the_output_close_and_float32():
    net = _random_(GuidedUNet(**SMALL))
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([5, 250])
    with torch.no_grad():
        full = net(x, t)
        half = net.convert_to_fp16()(x, t)
    assert half.dtype == torch.float32
    assert net.input_blocks[0][0].weight.dtype == torch.float16 and net.time_embed[0].weight.dtype == torch.float32
    assert 0 < (full - half).abs().max() < 2e-3 * full.abs().max()


class _ConstVar(EpsDDPM):
    """A ddpm whose variance value is a constant ``v`` (and eps = 0)."""

    learned_variance = True

    def __init__(self, v: float, T: int = 100):
        super().__init__()
        self.v, self.num_train_timesteps = v, T
        self.register_buffer("alphas_cumprod", torch.from_numpy(alphas_cumprod_for("linear", T)), persistent=False)

    def eps_var(self, z, t):
        return torch.zeros_like(z), torch.full_like(z, self.v)


def test_learned_variance_interpolates_between_posterior_and_beta_on_the_respaced_schedule():
    z = torch.randn(1, 3, 4, 4)
    for respacing in (10, 25):
        sched = Schedule.from_ddpm(_ConstVar(-1.0), respacing)
        for i in (0, 3, respacing - 1):
            _, var_lo, _ = sched.p_mean_variance(_ConstVar(-1.0), z, i)
            _, var_hi, _ = sched.p_mean_variance(_ConstVar(1.0), z, i)
            _, var_mid, _ = sched.p_mean_variance(_ConstVar(0.0), z, i)
            assert var_lo.shape == z.shape
            torch.testing.assert_close(var_lo, torch.full_like(z, float(sched.variance[i])))
            torch.testing.assert_close(var_hi, torch.full_like(z, float(sched.betas[i])))
            geo = math.sqrt(float(sched.variance[i]) * float(sched.betas[i]))  # halfway in log space
            torch.testing.assert_close(var_mid, torch.full_like(z, geo))


def test_guided_ddpm_eps_is_the_first_half_and_tweedie_inverts_the_forward_process():
    ddpm = UNetDDPM(_random_(GuidedUNet(**SMALL)).eval(), 500)
    z, t = torch.randn(2, 3, 32, 32), torch.tensor([7, 420])
    with torch.no_grad():
        out = ddpm.unet(z, t)
        eps, v = ddpm.eps_var(z, t)
        torch.testing.assert_close(eps, out[:, :3])
        torch.testing.assert_close(v, out[:, 3:])
        torch.testing.assert_close(ddpm.eps(z, t), eps)
        a = ddpm.alphas_cumprod[t].float().reshape(-1, 1, 1, 1)
        x0 = ddpm.tweedie(z, t)
        torch.testing.assert_close(a.sqrt() * x0 + (1 - a).sqrt() * eps, z, atol=1e-5, rtol=1e-5)


def test_bad_flags_and_wrong_format_are_clear_errors(tmp_path):
    torch.save(GuidedUNet(**SMALL).state_dict(), tmp_path / "small.pt")
    spec = {"weights": str(tmp_path / "small.pt"), "format": "guided_diffusion", **SMALL}
    ddpm, _ = load_canonical("ddpm", spec, TASK, "models.celeba.ddpm")
    assert ddpm.unet.flags["image_size"] == 32
    with pytest.raises(ConfigError, match="num_head"):
        load_canonical("ddpm", {**spec, "num_head": 4}, TASK, "models.celeba.ddpm")
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_canonical("ddpm", {**spec, "num_channels": 64}, TASK, "models.celeba.ddpm")
    with pytest.raises(CheckpointError, match="supported for this role: guided_diffusion"):
        load_canonical("ddpm", {**spec, "format": "dime_densenet121"}, TASK, "models.celeba.ddpm")


def test_diffusers_conversion_matches_on_random_weights_and_keeps_the_learned_variance():
    """Own module vs the diffusers UNet2DModel converter: same outputs, including fixed ``num_heads`` on levels
    of different widths (64 and 96 channels: head widths 16 and 24) and the learned-variance half."""
    flags = {**SMALL, "num_channels": 32, "channel_mult": "1,2,3", "attention_resolutions": "16,8"}
    ddpm = UNetDDPM(_random_(GuidedUNet(**flags)).eval(), 500)
    conv = ddpm.to_diffusers()
    assert conv.learned_variance
    torch.testing.assert_close(conv.alphas_cumprod, ddpm.alphas_cumprod, rtol=1e-12, atol=0)
    z, t = torch.randn(2, 3, 32, 32), torch.tensor([0, 333])
    with torch.no_grad():
        (e1, v1), (e2, v2) = ddpm.eps_var(z, t), conv.eps_var(z, t)
    assert e1.abs().mean() > 1e-2
    torch.testing.assert_close(e2, e1, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(v2, v1, atol=1e-5, rtol=1e-4)
    sched = Schedule.from_ddpm(ddpm, 10)
    m1, var1, _ = sched.p_mean_variance(ddpm, z, 4)
    m2, var2, _ = sched.p_mean_variance(conv, z, 4)
    torch.testing.assert_close(var2, var1, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(m2, m1, atol=1e-5, rtol=1e-4)
    for variant in ({"num_head_channels": 16}, {"use_new_attention_order": True},
                    {"resblock_updown": False, "use_scale_shift_norm": False, "learn_sigma": False}):
        net = _random_(GuidedUNet(**{**flags, **variant})).eval()
        d = UNetDDPM(net, 500).to_diffusers()
        with torch.no_grad():
            torch.testing.assert_close(d.unet(z, t).sample, net(z, t), atol=1e-5, rtol=1e-4)


# DiME's MODEL_FLAGS as its README ("Extracting Counterfactual Explanations") and test.sh print them; main.py gets
# the image size on its own (`--image_size $IMAGESIZE`, 128).
DIME_MODEL_FLAGS = ("--attention_resolutions 32,16,8 --class_cond False --diffusion_steps 500 --learn_sigma True "
                    "--noise_schedule linear --num_channels 128 --num_heads 4 --num_res_blocks 2 "
                    "--resblock_updown True --use_fp16 True --use_scale_shift_norm True")
SMALL_FLAGS = ("--image_size 32 --num_channels 32 --num_res_blocks 1 --channel_mult 1,2 --attention_resolutions 16 "
               "--num_heads 4 --class_cond False --learn_sigma True --diffusion_steps 500 --noise_schedule linear "
               "--resblock_updown True --use_scale_shift_norm True")


def _with_ddpm(cfg, **spec):
    import copy

    c = copy.deepcopy(cfg)
    c["models"]["celeba"]["ddpm"] = spec
    return c


def test_dime_model_flags_pasted_into_the_config_load_the_released_layout(cfg, tmp_path):
    from vcebench.models.task_models import load_role
    from vcebench.protocol.settings import check_settings

    ref = json.loads(FIXTURE.read_text())["keys"]
    torch.save({k: torch.full((1,), 0.01).expand(s) for k, s in ref.items()}, tmp_path / "ddpm-celeba.pt")
    c = _with_ddpm(cfg, weights=str(tmp_path / "ddpm-celeba.pt"), format="guided_diffusion",
                   model_flags=DIME_MODEL_FLAGS, image_size=128)
    check_settings(c)
    ddpm, name = load_role(c, TASK, "ddpm")
    assert isinstance(ddpm, UNetDDPM) and ddpm.learned_variance and ddpm.num_train_timesteps == 500
    assert "128 px" in name and "T=500 linear" in name and "fp16" in name  # --use_fp16 True, as DiME runs it
    f = ddpm.unet.flags
    assert f["num_heads"] == 4 and f["num_head_channels"] == -1 and f["attention_ds"] == (4, 8, 16)
    # the image size inside the string works as well
    ddpm2, _ = load_role(_with_ddpm(cfg, weights=str(tmp_path / "ddpm-celeba.pt"), format="guided_diffusion",
                                    model_flags=DIME_MODEL_FLAGS + " --image_size=128"), TASK, "ddpm")
    assert ddpm2.unet.flags == f


def test_model_flags_merge_over_guided_diffusions_defaults_and_match_the_keys(tmp_path):
    net = _random_(GuidedUNet(**SMALL, learn_sigma=True)).eval()
    torch.save(net.state_dict(), tmp_path / "small.pt")
    by_keys, _ = load_canonical("ddpm", {"weights": str(tmp_path / "small.pt"), "format": "guided_diffusion",
                                         **SMALL, "class_cond": False}, TASK, "models.celeba.ddpm")
    by_string, _ = load_canonical("ddpm", {"weights": str(tmp_path / "small.pt"), "format": "guided_diffusion",
                                           "model_flags": SMALL_FLAGS}, TASK, "models.celeba.ddpm")
    z, t = torch.randn(2, 3, 32, 32), torch.tensor([3, 400])
    with torch.no_grad():
        torch.testing.assert_close(by_string.eps_var(z, t)[0], by_keys.eps_var(z, t)[0], rtol=0, atol=0)
    # guided-diffusion's defaults lie under the string, not DiME's: without --learn_sigma it is False
    # (3 output channels, so the 6-channel checkpoint no longer fits)
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_canonical("ddpm", {"weights": str(tmp_path / "small.pt"), "format": "guided_diffusion",
                                "model_flags": SMALL_FLAGS.replace("--learn_sigma True ", "")}, TASK, "k")


@pytest.mark.parametrize("spec, message", [
    ({"class_cond": True}, r"`models\.celeba\.ddpm`: --class_cond True: class-conditional .* not supported"),
    ({"model_flags": SMALL_FLAGS.replace("--class_cond False", "--class_cond True")},
     r"`models\.celeba\.ddpm\.model_flags`: --class_cond True: class-conditional"),
    ({"model_flags": SMALL_FLAGS + " --num_head 4"}, r"`models\.celeba\.ddpm\.model_flags`: unknown flag --num_head "
                                                     r"\(did you mean --num_heads\?\)"),
    ({"model_flags": SMALL_FLAGS + " --learn_sigma maybe"}, r"--learn_sigma 'maybe': boolean value expected"),
    ({"model_flags": SMALL_FLAGS + " --num_channels"}, r"--num_channels has no value"),
    ({"model_flags": SMALL_FLAGS, "num_channels": 64}, r"`num_channels: 64` contradicts `model_flags`"),
    ({"model_flags": SMALL_FLAGS.replace("--image_size 32 ", "")}, r"no --image_size"),
    ({"model_flags": SMALL_FLAGS + " --timestep_respacing 200"}, r"method_defaults\.<method>\.respacing"),
    ({"model_flags": SMALL_FLAGS + " --predict_xstart True"}, r"epsilon-prediction"),
    ({"model_flags": ["--image_size", "32"]}, r"`models\.celeba\.ddpm\.model_flags` must be a string"),
])
def test_guided_diffusion_flag_errors_are_one_line_naming_the_key_at_config_check(cfg, tmp_path, spec, message):
    from vcebench.core.errors import UserError
    from vcebench.protocol.settings import check_settings

    c = _with_ddpm(cfg, weights=str(tmp_path / "absent.pt"), format="guided_diffusion", **spec)
    with pytest.raises(UserError, match=message) as e:
        check_settings(c)  # `snakemake -n` and every CLI verb: before any file is read
    assert "\n" not in str(e.value)


def test_training_only_flags_are_accepted(tmp_path):
    torch.save(GuidedUNet(**SMALL, learn_sigma=True).state_dict(), tmp_path / "small.pt")
    flags = SMALL_FLAGS + " --use_checkpoint True --use_kl False --rescale_learned_sigmas True --dropout 0.1"
    ddpm, _ = load_canonical("ddpm", {"weights": str(tmp_path / "small.pt"), "format": "guided_diffusion",
                                      "model_flags": flags}, TASK, "models.celeba.ddpm")
    assert ddpm.unet.flags["dropout"] == pytest.approx(0.1)


def test_the_noise_protocol_reads_the_schedule_from_the_pasted_flags(cfg, tmp_path):
    """The start step is derived from the schedule the flags state, and the loaded network must match it."""
    from vcebench.models.task_models import load_role
    from vcebench.protocol.noise import check_ddpm_schedule, ddpm_schedule

    torch.save(GuidedUNet(**SMALL, learn_sigma=True).state_dict(), tmp_path / "small.pt")
    flags = SMALL_FLAGS.replace("--diffusion_steps 500 --noise_schedule linear",
                                "--diffusion_steps 1000 --noise_schedule cosine")
    c = _with_ddpm(cfg, weights=str(tmp_path / "small.pt"), format="guided_diffusion", model_flags=flags)
    abar, source = ddpm_schedule(c, "celeba")
    assert len(abar) == 1000 and "cosine betas, T = 1000" in source
    ddpm, _ = load_role(c, TASK, "ddpm")
    check_ddpm_schedule(c, "celeba", ddpm.alphas_cumprod.numpy())  # what `vcebench explain` checks
    with pytest.raises(ConfigError, match="differ from the schedule"):
        check_ddpm_schedule(c, "celeba", alphas_cumprod_for("linear", 1000))
