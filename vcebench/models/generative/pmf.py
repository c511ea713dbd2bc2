"""The ``pmf`` role: pixel MeanFlow, FiRe's one-step clean-image predictor.

MeanFlow (Geng et al. 2025, "Mean Flows for One-step Generative Modeling") learns the average
velocity ``u(z, r, t) = 1/(t - r) int_r^t v(z_s, s) ds`` of the flow path ``z_t = (1 - t) x + t eps``
(``v = eps - x``) from the MeanFlow identity ``u = v - (t - r) du/dt``. Pixel MeanFlow (pMF,
Lyy-iiis/pMF ``pmf.py``) predicts in x-space: the network outputs ``x_u`` and
``u = (z - x_u) / max(t, 0.05)``; it is conditioned on ``t`` and ``h = t - r``.
FiRe uses ``G(z, t) = z - t u(z, 0, t)`` (one network call), see ``PixelMeanFlow.predict_clean``.

Differences from pMF's ImageNet recipe, for a small unconditional CPU model: no CFG / class labels,
no auxiliary v-head; pMF's perceptual losses on the one-step prediction are switches, off by default
(``perceptual_weight``, ``features_weight``, see ``meanflow.ImageLoss``); the JVP tangent is the true ``v``
(MeanFlow) rather than pMF's predicted v; the network is conditioned on t as well as h (pMF: h only); EDM-style
preconditioning of the x-prediction (``precond: edm``, see ``PixelMeanFlow.x_pred``; ``none`` = pMF);
a flow-matching warm start (``r = t`` only) precedes MeanFlow training, with the h embedding's last
layer zero-initialised; the (t, r) sampler puts most MeanFlow samples at ``r = 0``, FiRe's use.
du/dt is the exact ``torch.func.jvp`` (``jvp: exact``, GroupNorm swapped for an explicit mean/var
version, see ``unet.ExplicitGroupNorm``) or a forward finite difference (``jvp: fd``, one extra
no-grad forward of the batch), validated against each other in the tests; ``exact`` on a backend or
module without a forward-mode derivative falls back to the finite difference (once, with a note).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ...core.io import atomic_path, tensor_bytes, write_json
from ..checkpoints import remove_checkpoint
from ..training.distributed import Shard
from ..training.generative import GenerativeLoss, train_generative
from ..training.loops import to_float_images
from ..training.settings import RoleConfigError, check_role_keys, require
from .ddpm import matched_timestep
from .levels import EVAL_T_FLOW
from .meanflow import image_loss, jvp_used, meanflow_compute, meanflow_draw
from .quality import (
    batched,
    gate,
    generative_quality,
    label_kept,
    predicted_labels,
    sharpness_ratio,
    with_fire_t,
    write_pmf_grids,
)
from .settings import PMF_DEFAULTS, PMF_KEYS, flow_matching_steps
from .unet import build_unet, unet_kwargs, use_explicit_groupnorm

# A saved pmf folder's ``config.json`` ``architecture`` without these keys (written before they were recorded) was
# trained with these values: the folder format's defaults, not the recipe's (no preconditioning then: "none").
SAVED_ARCHITECTURE_DEFAULTS: dict[str, Any] = {"t_clip": 0.05, "time_scale": 50.0, "precond": "none",
                                               "sigma_data": 0.5}


class PixelMeanFlow(nn.Module):
    """x-prediction MeanFlow network: ``x_u = net(z, t, h = t - r)``, ``u = (z - x_u) / max(t, t_clip)``.

    t and h enter diffusers' sinusoidal embeddings as ``time_scale * t`` (max frequency ``time_scale``
    rad per unit t; 50 keeps du/dt smooth enough for finite differences, MeanFlow's EDM-style
    UNet uses 1)."""

    def __init__(self, unet_config: dict, t_clip: float = PMF_DEFAULTS["t_clip"],
                 time_scale: float = PMF_DEFAULTS["time_scale"], precond: str = PMF_DEFAULTS["precond"],
                 sigma_data: float = PMF_DEFAULTS["sigma_data"]):
        super().__init__()
        if precond not in ("edm", "none"):
            raise RoleConfigError(f"config key `models.<dataset>.pmf.precond` must be 'edm' or 'none', got {precond!r}")
        self.unet_config = dict(unet_config)
        self.t_clip = float(t_clip)
        self.time_scale = float(time_scale)
        self.precond, self.sigma_data = precond, float(sigma_data)
        self.net = build_unet(self.unet_config)

    def x_pred(self, z: Tensor, t: Tensor, h: Tensor) -> Tensor:
        """Clean-image prediction ``x_u`` for (N,) times ``t`` and interval lengths ``h``.

        ``precond="edm"``: EDM's preconditioning (Karras et al. 2022, Table 1) written for the flow path
        ``z = (1-t) x + t eps``: ``x_u = c_skip z + c_out F(c_in z)`` with ``s^2 = (1-t)^2 sd^2 + t^2``,
        ``c_in = 1/s``, ``c_skip = (1-t) sd^2 / s^2``, ``c_out = t sd / s``. Still x-prediction (x_u is the
        output), but low noise levels start from the identity; ``"none"``: ``x_u = F(z)`` as in pMF.
        """
        if self.precond == "none":
            return self.net(z, t * self.time_scale, class_labels=h * self.time_scale).sample
        tt = t.reshape(-1, 1, 1, 1)
        s2 = ((1 - tt) * self.sigma_data) ** 2 + tt**2
        c_in = s2.rsqrt()
        c_skip = (1 - tt) * self.sigma_data**2 / s2
        c_out = tt * self.sigma_data * c_in
        return c_skip * z + c_out * self.net(c_in * z, t * self.time_scale, class_labels=h * self.time_scale).sample

    def forward(self, z: Tensor, t: Tensor, h: Tensor) -> Tensor:
        """:meth:`x_pred` (the call DistributedDataParallel wraps in training)."""
        return self.x_pred(z, t, h)

    def u(self, z: Tensor, r: Tensor | float, t: Tensor | float) -> Tensor:
        """Average velocity over [r, t] (pMF: ``u = (z - x_u) / max(t, 0.05)``)."""
        t, r = per_sample_times(t, z), per_sample_times(r, z)
        return (z - self.x_pred(z, t, t - r)) / t.clamp_min(self.t_clip).reshape(-1, 1, 1, 1)

    def predict_clean(self, z: Tensor, t: Tensor | float) -> Tensor:
        """FiRe's ``G(z, t) = z - t * u(z, 0, t)``: the one-step clean-image prediction."""
        t = per_sample_times(t, z)
        return z - t.reshape(-1, 1, 1, 1) * self.u(z, torch.zeros_like(t), t)

    def config_dict(self) -> dict:
        return {"unet": _jsonable(self.unet_config), "t_clip": self.t_clip, "time_scale": self.time_scale,
                "precond": self.precond, "sigma_data": self.sigma_data}

    def save(self, out_dir: str | Path) -> None:
        """``out_dir/model.safetensors`` + ``out_dir/config.json`` (architecture), atomically."""

        out_dir = Path(out_dir)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        with atomic_path(out_dir / "model.safetensors", needed=tensor_bytes(state)) as tmp:
            save_file(state, str(tmp), metadata={"format": "pt", "role": "pmf"})
        cfg_path = out_dir / "config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        write_json(cfg_path, {**cfg, "role": "pmf", "architecture": self.config_dict()})

    @classmethod
    def load(cls, dir: str | Path) -> PixelMeanFlow:
        """Load ``model.safetensors`` + ``config.json`` written by :meth:`save` / ``train_pmf``."""

        d = Path(dir)
        wpath, cpath = d / "model.safetensors", d / "config.json"
        for p in (wpath, cpath):
            if not p.is_file():
                raise FileNotFoundError(f"pmf: {p} does not exist; expected a folder with model.safetensors and "
                                        f"config.json written by `vcebench train pmf` (resources/models/<dataset>/pmf)")
        try:
            arch = {**SAVED_ARCHITECTURE_DEFAULTS, **json.loads(cpath.read_text())["architecture"]}
            unet = dict(arch["unet"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"pmf: {cpath} is not a PMF config (needs an `architecture.unet` entry): {e}") from e
        for k in ("block_out_channels", "down_block_types", "up_block_types"):
            if k in unet:
                unet[k] = tuple(unet[k])
        model = cls(unet, float(arch["t_clip"]), float(arch["time_scale"]), str(arch["precond"]),
                    float(arch["sigma_data"]))
        try:
            state = load_file(str(wpath))
        except Exception as e:  # safetensors raises its own error types for corrupt files
            raise ValueError(f"pmf: cannot read weights {wpath}: {e}") from e
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise ValueError(f"pmf: weights {wpath} do not match the architecture in {cpath}: {e}") from e
        return model.eval()


def per_sample_times(t: Tensor | float, z: Tensor) -> Tensor:
    """A flow time (a number or one per sample) as one value per sample of ``z``, in its dtype and device."""
    t = torch.as_tensor(t, dtype=z.dtype, device=z.device)
    return t.expand(z.shape[0]) if t.ndim == 0 else t.reshape(z.shape[0])


def _jsonable(d: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def build_pmf(cfg: dict, channels: int, resolution: int) -> PixelMeanFlow:
    check_role_keys(cfg, "pmf", PMF_KEYS)
    kwargs = unet_kwargs(require(cfg, "unet", "pmf"), channels, resolution, True, "pmf")
    cfg = {**PMF_DEFAULTS, **cfg}
    pmf = PixelMeanFlow(kwargs, float(cfg["t_clip"]), float(cfg["time_scale"]), str(cfg["precond"]),
                        float(cfg["sigma_data"]))
    # h starts with no effect (zero-initialised last layer of its embedding, as adaLN-zero in DiT):
    # after the flow-matching warm start, x_u(h > 0) starts from the posterior mean x_u(h = 0).
    nn.init.zeros_(pmf.net.class_embedding.linear_2.weight)
    nn.init.zeros_(pmf.net.class_embedding.linear_2.bias)
    return pmf


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate_pmf(pmf: PixelMeanFlow, val: Tensor, seed: int, n_samples: int = PMF_DEFAULTS["n_samples"],
                 feature_fn: Callable[[Tensor], Tensor] | None = None, feature_name: str | None = None,
                 ddpm: Any = None, t_flow: tuple[float, ...] = EVAL_T_FLOW,
                 classifiers: dict[str, Callable[[Tensor], Tensor]] | None = None) -> tuple[dict[str, Any], dict]:
    """Quality of a PMF on float validation images in [-1, 1]; returns (metrics, images for grids).

    At each ``t``: MSE and realism of G(z_t, t) (= x_u at h = t) and of the PMF's own posterior
    mean (h = 0, flow matching). With ``ddpm`` (a :class:`DiffusersDDPM`), also its Tweedie
    estimate at the SNR-matched timestep from the *same* noise (``z_flow = s * z_ddpm``,
    ``s = sqrt((1-t)^2 + t^2)``), and the quality-gate ratios. With ``classifiers``
    ({attribute: 2-logit classifier}), the share of images whose predicted label G(z_t, t) keeps.
    1-step samples: G(eps, 1). Every level noises the images with the same draw, so a level's numbers do not
    depend on which other levels are scored (a task's FiRe level added to ``t_flow`` leaves t 0.2 and 0.4 as
    they were).
    """
    pmf.eval()
    g = torch.Generator().manual_seed(seed)
    m: dict[str, Any] = {"predict_clean": {}}
    grids: dict[str, Tensor] = {}
    val_labels = predicted_labels(classifiers, val) if classifiers else {}
    eps = torch.randn(val.shape, generator=g)
    for tf in t_flow:
        z = (1 - tf) * val + tf * eps
        pred = batched(lambda zz, tf=tf: pmf.predict_clean(zz, tf), z)
        mmse = batched(lambda zz, tf=tf: pmf.x_pred(zz, per_sample_times(tf, zz), per_sample_times(0.0, zz)), z)
        row = {"mse": float(F.mse_loss(pred, val)),
               **generative_quality(pred.clamp(-1, 1), val, feature_fn, feature_name),
               "h0_mse": float(F.mse_loss(mmse, val)), "h0_sharpness_ratio": sharpness_ratio(mmse, val)}
        if classifiers:
            row["label_kept"] = label_kept(classifiers, pred.clamp(-1, 1), val_labels)
        if ddpm is not None:
            ts = matched_timestep(ddpm.alphas_cumprod, tf)
            a = float(ddpm.alphas_cumprod[ts])
            z_ddpm = math.sqrt(a) * val + math.sqrt(1 - a) * eps
            tw = batched(lambda zz, ts=ts: ddpm.tweedie(zz, torch.full((zz.shape[0],), ts)), z_ddpm)
            tw_q = generative_quality(tw.clamp(-1, 1), val, feature_fn, feature_name)
            row["ddpm_tweedie"] = {"timestep": ts, "abar": a, "mse": float(F.mse_loss(tw, val)), **tw_q}
            if classifiers:  # the MMSE estimate's rate: what the noise itself leaves of the label
                row["ddpm_tweedie"]["label_kept"] = label_kept(classifiers, tw.clamp(-1, 1), val_labels)
            row["mse_ratio_vs_tweedie"] = row["mse"] / max(row["ddpm_tweedie"]["mse"], 1e-12)
            if "fid" in row:
                row["fid_lower_than_tweedie"] = row["fid"] < tw_q["fid"]
            grids[f"t{tf:g}_tweedie"] = tw[:16]
        m["predict_clean"][f"t{tf:g}"] = row
        grids[f"t{tf:g}_noisy"], grids[f"t{tf:g}_pred"], grids[f"t{tf:g}_h0"] = z[:16], pred[:16], mmse[:16]
    noise = torch.randn((n_samples, *val.shape[1:]), generator=g)
    samples = batched(lambda zz: pmf.predict_clean(zz, 1.0), noise).clamp(-1, 1)
    m["samples_1step"] = {"n": n_samples, **generative_quality(samples, val[:max(n_samples, 256)],
                                                                 feature_fn, feature_name)}
    grids["samples"] = samples
    grids["real"] = val[:16]
    return m, grids


def pmf_objective(settings: dict, warm: int, images_loss: nn.Module | None) -> GenerativeLoss:
    """The MeanFlow loss of a pmf recipe (``settings``: the role's block over ``PMF_DEFAULTS``): flow matching
    only (r = t) for the first ``warm`` steps, then MeanFlow; pMF's losses on the one-step prediction when
    ``images_loss`` is given (:func:`meanflow.image_loss`). Its mode is True during the warm start."""

    def draw(x: Tensor, g: torch.Generator, step: int) -> tuple[Tensor, ...]:
        return meanflow_draw(x, g, settings, flow_matching_only=step < warm)

    def compute(model: nn.Module, drawn: tuple[Tensor, ...], flow_matching_only: bool) -> tuple[Tensor, Tensor]:
        loss, per_sample = meanflow_compute(model, drawn, settings, flow_matching_only, images_loss)
        return loss, per_sample.mean() / drawn[0][0].numel()  # logged: unweighted squared error of u per pixel

    return GenerativeLoss(draw, compute, mode=lambda step: step < warm,
                          mode_names={True: "flow matching (r = t)", False: "MeanFlow"})


def pmf_training(cfg_role: dict, channels: int, resolution: int, loss_networks: dict[str, nn.Module] | None,
                 device: Any = None) -> tuple[PixelMeanFlow, GenerativeLoss, nn.Module | None, int]:
    """What a pmf recipe trains: (the fresh network, its objective, pMF's image losses or None, the flow-matching
    warm-start steps), the network with the explicit GroupNorm ``jvp: exact`` needs, the losses on ``device``
    (``train_pmf``; ``vcebench.steps.networks.generative_budget`` counts the same objective)."""
    settings = {**PMF_DEFAULTS, **cfg_role}
    pmf = build_pmf(cfg_role, channels, resolution)
    if str(settings["jvp"]) == "exact":
        use_explicit_groupnorm(pmf.net)
    images_loss = image_loss(cfg_role, loss_networks)
    if images_loss is not None and device is not None:
        images_loss = images_loss.to(device)
    warm = flow_matching_steps(settings, int(require(cfg_role, "steps", "pmf")))
    return pmf, pmf_objective(settings, warm, images_loss), images_loss, warm


def train_pmf(cfg_role: dict, train_images_uint8: Tensor, out_dir: Path, seed: int,
              val_images_uint8: Tensor | None = None, progress: bool = True, reference_ddpm: Any = None,
              feature_fn: Callable[[Tensor], Tensor] | None = None, feature_name: str | None = None,
              classifiers: dict[str, Callable[[Tensor], Tensor]] | None = None,
              fire_t: dict[str, float] | None = None, shard: Shard | None = None,
              snapshots: tuple[int, ...] = (),
              trunk_dir: Path | None = None, loss_networks: dict[str, nn.Module] | None = None) -> dict:
    """Train the ``pmf`` role and write ``out_dir``: ``model.safetensors`` (EMA weights), ``config.json``,
    ``samples.png``, ``predict_t0.4.png`` and ``metrics.json`` (written last). The first ``fm_warmup``
    share of the steps (or the first ``fm_warmup_steps``, when set) is flow matching only (r = t). Resumes
    from ``out_dir/checkpoint`` (``trunk_dir``: ``training.train_generative``'s shared ``wsd`` trunk).
    ``reference_ddpm`` (optional, same dataset): adds the Tweedie comparison / quality gate;
    ``feature_fn`` adds FIDs on that extractor, ``classifiers`` the label-kept rates (``fire_t``: also at
    each task's FiRe noise level). ``shard``: device and process of the run (``train_generative``);
    ranks other than 0 return their training statistics only. ``loss_networks`` ({role: network}): the trained
    networks pMF's losses on the one-step prediction use when the recipe turns them on (:func:`image_loss`)."""
    out_dir = Path(out_dir)
    settings = {**PMF_DEFAULTS, **cfg_role}  # read here; cfg_role as given is what config.json records
    x_check = to_float_images(train_images_uint8[:1], "train_pmf: train_images_uint8")
    channels, res = x_check.shape[1], x_check.shape[-1]
    if trunk_dir is not None and settings["fm_warmup_steps"] is None:
        raise RoleConfigError("a pmf trained on a shared trunk needs `models.<dataset>.pmf.fm_warmup_steps`: "
                              "`fm_warmup`, a share of the budget, differs between the budgets")
    torch.manual_seed(seed)
    pmf, loss_fn, images_loss, warm = pmf_training(cfg_role, channels, res, loss_networks,
                                                   None if shard is None else shard.device)
    jvp_mode = str(settings["jvp"])
    shadow, stats = train_generative(pmf, loss_fn, cfg_role, train_images_uint8, out_dir, seed, "pmf", progress,
                                     shard=shard, snapshots=snapshots, trunk_dir=trunk_dir)
    if shard is not None and not shard.writer:
        return {"role": "pmf", "training": stats}
    jvp_ran = jvp_used(pmf, jvp_mode)
    pmf = build_pmf(cfg_role, channels, res)  # plain GroupNorm, contiguous weights
    pmf.load_state_dict(shadow)
    pmf.eval()
    stats["fm_warmup_steps"] = warm
    metrics: dict[str, Any] = {"role": "pmf", "architecture": "pixel MeanFlow, diffusers UNet2DModel "
                               "(class_embed_type=timestep for h)",
                               "parameters": sum(p.numel() for p in pmf.parameters()),
                               "jvp": jvp_ran, "training": stats, "ema": True}
    if images_loss is not None:  # what the losses on the one-step prediction trained against
        metrics["image_loss"] = {
            "max_t": images_loss.max_t,
            **({"perceptual": {"weight": images_loss.perceptual_weight,
                               "network": getattr(images_loss.perceptual, "name", "perceptual")}}
               if images_loss.perceptual is not None else {}),
            **({"features": {"weight": images_loss.features_weight,
                             "network": getattr(images_loss.features, "name", "fid_features")}}
               if images_loss.features is not None else {})}
    val_u8 = val_images_uint8 if val_images_uint8 is not None else train_images_uint8
    val = to_float_images(val_u8[: int(settings["eval_images"])], "train_pmf: val_images_uint8")
    t_flow = with_fire_t(EVAL_T_FLOW, fire_t)
    ev, grids = evaluate_pmf(pmf, val, seed + 1, int(settings["n_samples"]), feature_fn, feature_name,
                             ddpm=reference_ddpm, t_flow=t_flow, classifiers=classifiers)
    metrics["eval"] = {"split": "val" if val_images_uint8 is not None else "train", "n_images": val.shape[0], **ev}
    metrics["quality_gate"] = gate(ev, fire_t=fire_t)
    write_json(out_dir / "config.json", {"role": "pmf", "seed": seed, "config": cfg_role,
                                         "image_shape": list(x_check.shape[1:])})
    pmf.save(out_dir)
    write_pmf_grids(grids, out_dir)
    write_json(out_dir / "metrics.json", metrics)
    remove_checkpoint(out_dir)
    return metrics
