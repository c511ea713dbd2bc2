"""The ``ddpm`` role: DiME / FastDiME / MaskDiME backbone (diffusers ``UNet2DModel`` + ``DDPMScheduler``).

Epsilon prediction, linear betas, T train steps (500 in DiME's CelebA protocol, Jeanneret et al.
2022; DiME used guided-diffusion's linear schedule scaled by 1000/T, i.e. betas 2e-4..0.04 for
T = 500). Saved and loaded as a diffusers folder (``unet/`` + ``scheduler/``), so a user can plug
any local diffusers DDPM (e.g. a CelebA-HQ ``DDPMPipeline`` folder) with ``models.<dataset>.ddpm.weights``.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core.io import disk_space, tensor_bytes, write_json
from ..checkpoints import remove_checkpoint, replace_dir
from ..training.distributed import Shard
from ..training.generative import GenerativeLoss, train_generative
from ..training.loops import to_float_images
from ..training.settings import check_role_keys, require
from .levels import EVAL_T_FLOW
from .quality import batched, generative_quality, save_grid
from .schedule import ddpm_scheduler, scheduler_alphas_cumprod
from .settings import DDPM_DEFAULTS, DDPM_KEYS, DIFFUSERS_FORMAT
from .unet import build_unet, unet_kwargs


class EpsDDPM(nn.Module):
    """The ``ddpm`` role contract shared by every DDPM backbone (``vcebench/models/base.py``).

    Subclasses set ``num_train_timesteps`` and the float64 buffer ``alphas_cumprod`` and implement
    ``eps_var(z, t) -> (eps, v)``: the epsilon prediction at integer train timesteps ``t`` and, for a
    model with a learned variance (``learned_variance``), guided-diffusion's interpolation value
    ``v`` in [-1, 1] between the clipped posterior log-variance (v = -1) and ``log beta_t`` (v = 1)
    of the sampling schedule (``methods/ddpm.py`` applies it); ``v`` is None otherwise.
    """

    learned_variance = False

    def eps_var(self, z: Tensor, t: Tensor) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError

    def eps(self, z: Tensor, t: Tensor | int) -> Tensor:
        """Epsilon prediction at integer train timesteps ``t`` (scalar or (N,) int64)."""
        return self.eps_var(z, _timesteps(z, t))[0]

    def tweedie(self, z: Tensor, t: Tensor | int) -> Tensor:
        """One-step posterior-mean estimate ``x0hat = (z - sqrt(1-abar) eps) / sqrt(abar)``."""
        t = _timesteps(z, t)
        a = self.alphas_cumprod.to(z.device)[t].to(z.dtype).reshape(-1, 1, 1, 1)
        return (z - (1 - a).sqrt() * self.eps(z, t)) / a.sqrt()


def _timesteps(z: Tensor, t: Tensor | int) -> Tensor:
    t = torch.as_tensor(t, device=z.device)
    return t.expand(z.shape[0]) if t.ndim == 0 else t


class DiffusersDDPM(EpsDDPM):
    """A diffusers UNet + scheduler behind the ``ddpm`` contract of ``vcebench/models/base.py``.

    ``alphas_cumprod`` is float64 (T,), recomputed in float64 from the scheduler's betas
    (diffusers stores them in float32; guided-diffusion, DiME's code base, uses float64).
    Models trained with ``sample`` or ``v_prediction`` targets are converted to epsilon; a
    learned-variance UNet (2C output channels) contributes its first C channels, and its last C
    as the variance value when the scheduler's ``variance_type`` is ``learned_range``.
    """

    def __init__(self, unet: nn.Module, scheduler: Any):
        super().__init__()
        self.unet = unet
        self.scheduler = scheduler
        self.num_train_timesteps = int(scheduler.config.num_train_timesteps)
        self.prediction_type = str(scheduler.config.prediction_type)
        if self.prediction_type not in ("epsilon", "sample", "v_prediction"):
            raise ValueError(f"ddpm: unsupported scheduler prediction_type {self.prediction_type!r}")
        self.learned_variance = (scheduler.config.get("variance_type") == "learned_range"
                                 and self.prediction_type == "epsilon")
        self.register_buffer("alphas_cumprod", torch.from_numpy(scheduler_alphas_cumprod(scheduler)),
                             persistent=False)

    def eps_var(self, z: Tensor, t: Tensor) -> tuple[Tensor, Tensor | None]:
        out = self.unet(z, t).sample
        c = z.shape[1]
        var = None
        if out.shape[1] == 2 * c:
            out, var = out[:, :c], out[:, c:]
        if self.prediction_type == "epsilon":
            return out, var if self.learned_variance else None
        a = self.alphas_cumprod.to(z.device)[t].to(z.dtype).reshape(-1, 1, 1, 1)
        if self.prediction_type == "sample":
            return (z - a.sqrt() * out) / (1 - a).sqrt(), None
        return a.sqrt() * out + (1 - a).sqrt() * z, None  # v = sqrt(a) eps - sqrt(1-a) x

    def save_pretrained(self, path: str | Path) -> None:
        """Write ``path/unet`` and ``path/scheduler`` (diffusers format), each moved into place whole; a full
        disk is one ``DiskFullError`` naming the folder and the weights' size (a partial folder is removed)."""
        path = Path(path)
        for name, obj in (("unet", self.unet), ("scheduler", self.scheduler)):
            needed = tensor_bytes(obj.state_dict()) if isinstance(obj, nn.Module) else None
            with disk_space(path / name, needed):
                path.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(dir=path, prefix=f".{name}."))
                try:
                    obj.save_pretrained(tmp)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                replace_dir(tmp, path / name)

    @classmethod
    def from_pretrained_dir(cls, path: str | Path) -> DiffusersDDPM:
        """Load a local diffusers folder with ``unet/`` and ``scheduler/`` (never the hub)."""
        from diffusers import DDPMScheduler, UNet2DModel

        path = Path(path)
        need = [path / "unet" / "config.json", path / "scheduler" / "scheduler_config.json"]
        missing = [str(p) for p in need if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"ddpm: {path} is not a diffusers DDPM folder: missing {', '.join(missing)}. Expected "
                f"`unet/` (config.json + diffusion_pytorch_model.safetensors) and `scheduler/` "
                f"(scheduler_config.json), as written by `save_pretrained`; set "
                f"`models.<dataset>.ddpm.weights` to such a folder or train one with `vcebench train ddpm`.")
        try:
            unet = UNet2DModel.from_pretrained(path / "unet", local_files_only=True, low_cpu_mem_usage=False,
                                              use_safetensors=True)
            scheduler = DDPMScheduler.from_pretrained(path / "scheduler", local_files_only=True)
        except (OSError, ValueError, RuntimeError, json.JSONDecodeError) as e:
            raise FileNotFoundError(f"ddpm: could not load the diffusers DDPM in {path}: {e}") from e
        return cls(unet, scheduler).eval()


def build_ddpm(cfg: dict, channels: int, resolution: int) -> DiffusersDDPM:
    """A fresh (untrained) DDPM from a ``models.<dataset>.ddpm`` config block."""
    check_role_keys(cfg, "ddpm", DDPM_KEYS)
    unet = build_unet(unet_kwargs(require(cfg, "unet", "ddpm"), channels, resolution, False, "ddpm"))
    return DiffusersDDPM(unet, ddpm_scheduler(cfg))


def matched_timestep(alphas_cumprod: Tensor, t_flow: float) -> int:
    """The DDPM timestep whose SNR matches the flow path ``z = (1-t) x + t eps`` at ``t_flow``:
    ``abar / (1 - abar) = ((1 - t) / t)^2``. Then ``z_flow = sqrt((1-t)^2 + t^2) * z_ddpm``."""
    target = (1 - t_flow) ** 2 / ((1 - t_flow) ** 2 + t_flow**2)
    return int((alphas_cumprod - target).abs().argmin())


@torch.no_grad()
def sample_ddpm(ddpm: DiffusersDDPM, n: int, shape: tuple[int, int, int], steps: int,
                generator: torch.Generator, batch_size: int = 64) -> Tensor:
    """Ancestral sampling on ``steps`` evenly respaced timesteps (DDPM, Ho et al. 2020, Alg. 2;
    respacing as in improved-diffusion), posterior variance ``beta~``; x0 clipped to [-1, 1]."""
    abar = ddpm.alphas_cumprod
    ts = torch.linspace(ddpm.num_train_timesteps - 1, 0, steps, dtype=torch.float64).round().long().unique_consecutive()
    z_all = torch.randn((n, *shape), generator=generator)
    noise_all = torch.randn((len(ts), n, *shape), generator=generator)
    out = []
    for b in range(0, n, batch_size):
        z = z_all[b:b + batch_size]
        for i, t in enumerate(ts.tolist()):
            a_t = float(abar[t])
            a_prev = float(abar[ts[i + 1]]) if i + 1 < len(ts) else 1.0
            beta = 1 - a_t / a_prev
            x0 = ((z - math.sqrt(1 - a_t) * ddpm.eps(z, torch.full((z.shape[0],), t))) / math.sqrt(a_t)).clamp(-1, 1)
            mean = (math.sqrt(a_prev) * beta / (1 - a_t)) * x0 + (math.sqrt(1 - beta) * (1 - a_prev) / (1 - a_t)) * z
            z = mean
            if i + 1 < len(ts):
                z = z + math.sqrt(beta * (1 - a_prev) / (1 - a_t)) * noise_all[i, b:b + batch_size]
        out.append(z.clamp(-1, 1))
    return torch.cat(out)


@torch.no_grad()
def tweedie_at(ddpm: DiffusersDDPM, x: Tensor, t_flow: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Tweedie estimates at the SNR of flow time ``t_flow``; returns (x0hat, eps) (eps reusable by the PMF)."""
    t = matched_timestep(ddpm.alphas_cumprod, t_flow)
    eps = torch.randn(x.shape, generator=generator)
    a = float(ddpm.alphas_cumprod[t])
    z = math.sqrt(a) * x + math.sqrt(1 - a) * eps
    return batched(lambda zz: ddpm.tweedie(zz, torch.full((zz.shape[0],), t)), z), eps


def evaluate_ddpm(ddpm: DiffusersDDPM, val: Tensor, seed: int, n_samples: int = DDPM_DEFAULTS["n_samples"],
                  sample_steps: int = DDPM_DEFAULTS["sample_steps"],
                  feature_fn: Callable[[Tensor], Tensor] | None = None, feature_name: str | None = None,
                  t_flow: tuple[float, ...] = EVAL_T_FLOW) -> tuple[dict[str, Any], Tensor]:
    """Quality numbers of a DDPM on float validation images ``val`` in [-1, 1]; returns (metrics, samples).

    Tweedie MSE and sharpness at the SNRs of flow times ``t_flow`` (for the PMF comparison), and
    ``n_samples`` ancestral samples (``sample_steps`` respaced steps) with their sharpness / FID.
    """
    ddpm.eval()
    g = torch.Generator().manual_seed(seed)
    m: dict[str, Any] = {"tweedie": {}}
    for tf in t_flow:
        x0, _ = tweedie_at(ddpm, val, tf, g)
        m["tweedie"][f"t{tf:g}"] = {"timestep": matched_timestep(ddpm.alphas_cumprod, tf),
                                    "mse": float(F.mse_loss(x0, val)),
                                    **generative_quality(x0.clamp(-1, 1), val, feature_fn, feature_name)}
    samples = sample_ddpm(ddpm, n_samples, tuple(val.shape[1:]), sample_steps, g)
    m["samples"] = {"n": n_samples, "sample_steps": sample_steps,
                    **generative_quality(samples, val[:max(n_samples, 256)], feature_fn, feature_name)}
    return m, samples


def ddpm_objective(ddpm: DiffusersDDPM) -> GenerativeLoss:
    """The epsilon loss (Ho et al. 2020, Eq. 14) of ``ddpm.unet``: a uniform train timestep and a Gaussian noise
    per image, the noised image ``sqrt(abar) x + sqrt(1 - abar) eps``, the squared error of the predicted noise."""
    abar = ddpm.alphas_cumprod.float()
    T = ddpm.num_train_timesteps

    def draw(x: Tensor, g: torch.Generator, step: int) -> tuple[Tensor, ...]:
        t = torch.randint(0, T, (x.shape[0],), generator=g)
        eps = torch.randn(x.shape, generator=g)
        return x, t, eps, abar[t].reshape(-1, 1, 1, 1)

    def compute(unet: nn.Module, drawn: tuple[Tensor, ...], mode: object) -> Tensor:
        x, t, eps, a = drawn
        z = a.sqrt() * x + (1 - a).sqrt() * eps
        return F.mse_loss(unet(z, t).sample.float(), eps)

    return GenerativeLoss(draw, compute, mode_names={0: "epsilon loss"})


def train_ddpm(cfg_role: dict, train_images_uint8: Tensor, out_dir: Path, seed: int,
               val_images_uint8: Tensor | None = None, progress: bool = True,
               feature_fn: Callable[[Tensor], Tensor] | None = None, feature_name: str | None = None,
               shard: Shard | None = None, snapshots: tuple[int, ...] = (), trunk_dir: Path | None = None) -> dict:
    """Train the ``ddpm`` role (epsilon loss, Ho et al. 2020, Eq. 14) and write ``out_dir``:
    ``unet/``, ``scheduler/`` (diffusers), ``config.json`` (training config), ``samples.png`` and
    ``metrics.json`` (written last). Resumes from ``out_dir/checkpoint`` if interrupted (``trunk_dir``:
    ``training.train_generative``'s shared ``wsd`` trunk).
    ``shard``: device and process of the run (``train_generative``); ranks other than 0 return
    their training statistics only."""
    out_dir = Path(out_dir)
    settings = {**DDPM_DEFAULTS, **cfg_role}  # read here; cfg_role as given is what config.json records
    x_check = to_float_images(train_images_uint8[:1], "train_ddpm: train_images_uint8")
    channels, res = x_check.shape[1], x_check.shape[-1]
    torch.manual_seed(seed)
    ddpm = build_ddpm(cfg_role, channels, res)
    T = ddpm.num_train_timesteps
    shadow, stats = train_generative(ddpm.unet, ddpm_objective(ddpm), cfg_role, train_images_uint8,
                                     out_dir, seed, "ddpm", progress,
                                     shard=shard, snapshots=snapshots, trunk_dir=trunk_dir)
    if shard is not None and not shard.writer:
        return {"role": "ddpm", "training": stats}
    ddpm.unet.load_state_dict(shadow)
    ddpm.unet = ddpm.unet.to(memory_format=torch.contiguous_format).eval()

    metrics: dict[str, Any] = {"role": "ddpm", "architecture": "diffusers UNet2DModel + DDPMScheduler",
                               "num_train_timesteps": T, "parameters": sum(p.numel() for p in ddpm.unet.parameters()),
                               "training": stats, "ema": True}
    val_u8 = val_images_uint8 if val_images_uint8 is not None else train_images_uint8
    val = to_float_images(val_u8[: int(settings["eval_images"])], "train_ddpm: val_images_uint8")
    ev, samples = evaluate_ddpm(ddpm, val, seed + 1, int(settings["n_samples"]), int(settings["sample_steps"]),
                                feature_fn, feature_name)
    metrics["eval"] = {"split": "val" if val_images_uint8 is not None else "train", "n_images": val.shape[0], **ev}
    if feature_fn is None:
        metrics["fid_note"] = ("FID needs the dataset's fid_features network (trained before the ddpm by the "
                               "workflow); call "
                               "vcebench.models.generative.ddpm.evaluate_ddpm(..., feature_fn=...) to add it")
    ddpm.save_pretrained(out_dir)
    save_grid(samples, out_dir / "samples.png")
    write_json(out_dir / "config.json", {"role": "ddpm", "format": DIFFUSERS_FORMAT, "seed": seed, "config": cfg_role,
                                         "image_shape": list(x_check.shape[1:])})
    write_json(out_dir / "metrics.json", metrics)
    remove_checkpoint(out_dir)
    return metrics
