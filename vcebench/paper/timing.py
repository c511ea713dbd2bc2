"""Wall time of FiRe and MaskDiME at paper scale (random weights, no data), for a GPU.

The FiRe paper reports 1,000 CelebA Smile counterfactuals in 6.37 min at batch 5 (0.38 s per CF).
Without CelebA or trained weights, the compute of a counterfactual is still fixed by the networks'
sizes and the algorithm's calls, so this module runs the real ``methods/`` code on the paper-size
networks of :mod:`vcebench.paper.scale` (random weights) and times it, in several precision and
runtime settings ("variants"), batch sizes and (optionally) ``torch.compile``.

What random weights change: the classifier's decisions. A random DenseNet is easily pushed to the
other class, so FiRe may stop early; the report therefore gives every run's mean updates per CF,
the time per update, and a run with early stopping off (all K = 15 updates, the upper bound).
MaskDiME's number of classifier scales tried is reported the same way.

Precision variants (each a context around the method call, the weights stay float32):

- ``fp32``: TF32 off for matmuls and cuDNN convolutions (the reference);
- ``tf32``: TF32 on (``torch.backends.{cuda.matmul,cudnn}.allow_tf32``);
- ``bf16``: ``torch.autocast(bfloat16)`` (TF32 on for what autocast leaves in float32);
- ``mixed``: TF32, with bf16 autocast in the two UNets (PMF and DDPM) only (``cuda.bf16_generative``,
  :func:`vcebench.models.accelerate.accelerate`): they hold ~80% of
  the FLOPs, while the classifier gradients that steer the edits and build the masks stay TF32;
- ``+cl``: networks and inputs in ``channels_last``;
- ``+gpunoise``: the per-sample noise generators live on the GPU (``SampleGenerators(device=...)``)
  instead of drawing on the CPU and copying;
- ``+bench``: ``torch.backends.cudnn.benchmark`` (cuDNN picks its convolution algorithms by timing);
- ``+compile``: every network call compiled (``torch.compile``, mode ``--compile-mode``, default
  ``reduce-overhead``) through :func:`vcebench.models.accelerate.accelerate`, the path the workflow's
  ``cuda.compile`` takes, for FiRe and MaskDiME alike (compile time is in the warm-up column).

Each row is timed ``--repeats`` times (default 3) after one warm-up batch: the median and the
spread (min, max) are reported, with the device, torch, CUDA and cuDNN versions.

Each variant's error is measured against ``fp32``: the relative L2 error of every network's
output (PMF clean prediction, UNet eps, classifier logits and input gradient, perceptual loss) on
one random batch, and the relative difference of FiRe's edits ``x_cf - x`` on the first batch.

Run: ``vcebench profile gpu --out results/reference`` (on a GPU machine);
``--tiny`` builds small networks so the code path runs on a CPU in seconds (tests).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from methods import get_method
from methods.fire import FireParams

from ..config.load import load_config
from ..config.tasks import get_task, split_method
from ..core.rng import SampleGenerators
from ..costs.flops import flops_from_nfe, per_call_flops
from ..costs.measure import cat_info, device_name, nfe_by_network, run_batches, timed
from ..costs.paper_nets import CELEBA, PMF_KINDS, DiTSize, PaperSetting, build_networks
from ..models.accelerate import accelerate
from ..models.base import TaskModels
from ..models.generative.levels import REFERENCE_T_FLOW
from ..protocol.noise import resolve_method
from .timing_report import PAPER_SEC_PER_CF, row_line, write_report

# Small networks with the same structure, for running the code path on a CPU (tests); its DiT PMF has the
# released backbones' 256 patch tokens.
TINY = replace(CELEBA, resolution=32, unet_channels=(32, 32, 64, 64, 64), head_dim=32,
               pmf_dit=DiTSize(32, 2, hidden=64, depth=2, heads=2))

# Dense peak TFLOP/s of the GPUs this project is lent (NVIDIA's H100 / H200 SXM data sheets, without
# sparsity) by the precision a variant computes its matmuls in; a row's share of peak is its achieved
# TFLOP/s over the peak of its variant's precision (``mixed`` / ``bf16``: the bf16 peak, an upper bound).
PEAK_TFLOPS = {"H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},
               "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}}
_PEAK_KIND = {"fp32": "fp32", "tf32": "tf32", "mixed": "bf16", "bf16": "bf16"}


def peak_tflops(device: str, precision_mode: str) -> float | None:
    """The dense peak of ``device`` (a :func:`~vcebench.costs.measure.device_name`) for ``precision_mode``;
    None for a device not in :data:`PEAK_TFLOPS` (a CPU)."""
    for gpu, peaks in PEAK_TFLOPS.items():
        if device.startswith("cuda") and gpu in device:
            return peaks[_PEAK_KIND[precision_mode]]
    return None


def timing_models(s: PaperSetting, device: torch.device | str, seed: int = 0, pmf: str = "released") -> TaskModels:
    """classifier / ddpm / pmf / perceptual at ``s``'s size with random weights (seeded), on ``device``; the PMF
    FiRe's released DiT (``released``) or the UNet (``unet``)."""
    torch.manual_seed(seed)
    nets = build_networks(s, device=device, pmf=pmf)
    return TaskModels(classifier=nets["classifier"], ddpm=nets["unet"], pmf=nets["pmf"],
                      perceptual=nets["perceptual"],
                      names={r: f"paper-size random weights ({s.dataset} {s.resolution} px)"
                             for r in ("classifier", "ddpm", "pmf", "perceptual")})


def parse_variant(name: str) -> dict[str, Any]:
    """``bf16+cl+gpunoise+compile`` -> {"precision": "bf16", "channels_last": True, ...}."""
    parts = name.split("+")
    if parts[0] not in ("fp32", "tf32", "bf16", "mixed"):
        raise ValueError(f"variant {name!r} must start with fp32, tf32, bf16 or mixed")
    flags = set(parts[1:])
    unknown = flags - {"cl", "gpunoise", "compile", "bench"}
    if unknown:
        raise ValueError(f"variant {name!r}: unknown flags {sorted(unknown)} (known: cl, gpunoise, bench, compile)")
    return {"precision": parts[0], "channels_last": "cl" in flags, "gpu_noise": "gpunoise" in flags,
            "compile": "compile" in flags, "cudnn_benchmark": "bench" in flags}


@contextlib.contextmanager
def precision(mode: str, device: torch.device, cudnn_benchmark: bool = False) -> Iterator[None]:
    """TF32 flags, cuDNN autotuning and autocast for one variant; restores the flags afterwards."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    tf32 = mode in ("tf32", "bf16", "mixed")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cudnn_benchmark
    try:
        if mode == "bf16":
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = old


def prepare_models(base: TaskModels, v: dict[str, Any], compile_mode: str = "reduce-overhead",
                   compile_backend: str = "inductor") -> TaskModels:
    """A view of ``base`` for variant ``v``: channels_last, then :func:`vcebench.models.accelerate.accelerate` (the
    path ``cuda.compile`` / ``cuda.bf16_generative`` take in the workflow): bf16 UNets for ``mixed``,
    every network call compiled for ``+compile``; FiRe and MaskDiME get the same networks."""

    fmt = torch.channels_last if v["channels_last"] else torch.contiguous_format
    for role in ("classifier", "ddpm", "pmf", "perceptual"):
        getattr(base, role).to(memory_format=fmt)
    return accelerate(base, compile=v["compile"], mode=compile_mode, backend=compile_backend,
                      bf16_generative=v.get("precision") == "mixed")


def _inputs(s: PaperSetting, n: int, device: torch.device, seed: int = 1) -> Tensor:
    """Smooth random images in [-1, 1] (low-frequency noise upsampled): face-sized structure, no data."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, s.resolution // 8, s.resolution // 8, generator=g) * 2 - 1
    x = torch.nn.functional.interpolate(low, size=(s.resolution, s.resolution), mode="bilinear",
                                        align_corners=False)
    return x.clamp(-1, 1).to(device)


def network_errors(models: TaskModels, ref: TaskModels, x: Tensor, mode: str, device: torch.device) -> dict[str, float]:
    """Relative L2 error of each network's output under ``mode`` against fp32 (``ref`` = the fp32 models)."""
    t = torch.full((len(x),), 100, dtype=torch.long, device=x.device)

    def outputs(m: TaskModels) -> dict[str, Tensor]:
        xg = x.detach().clone().requires_grad_(True)
        logits = m.classifier(xg)
        grad = torch.autograd.grad(logits[:, 1].float().sum(), xg)[0]
        with torch.no_grad():
            return {"pmf_clean": m.pmf.predict_clean(x, REFERENCE_T_FLOW).float(), "unet_eps": m.ddpm.eps(x, t).float(),
                    "classifier_logits": logits.detach().float(), "classifier_input_grad": grad.float(),
                    "perceptual": m.perceptual(x, x.flip(0)).float()}

    with precision("fp32", device):
        want = outputs(ref)
    with precision(mode, device):
        got = outputs(models)
    return {k: float((got[k] - want[k]).norm() / want[k].norm().clamp_min(1e-30)) for k in want}


def time_method(method_name: str, params: dict[str, Any], models: TaskModels, x: Tensor, target: Tensor,
                batch: int, v: dict[str, Any], device: torch.device, seed: int,
                calls: dict[str, dict[str, Any]], repeats: int = 3) -> tuple[dict[str, Any], Tensor]:
    """Warm-up batch, then ``repeats`` timed passes over ``x`` in batches of ``batch``; the row reports the
    median and the spread (min, max) of the passes. Returns (row, first batch's CFs)."""

    method = get_method(method_name, params)
    gen_dev = device if v["gpu_noise"] else torch.device("cpu")
    fmt = torch.channels_last if v["channels_last"] else torch.contiguous_format
    x = x.contiguous(memory_format=fmt)
    n, ids = len(x), list(range(len(x)))

    def call(xb: Tensor, tb: Tensor, idb: list[int]):
        with precision(v["precision"], device, v["cudnn_benchmark"]):
            return method(xb, tb, models, SampleGenerators(seed, idb, device=gen_dev))

    with timed(device) as warm:  # warm-up (and compilation)
        call(x[:batch], target[:batch], ids[:batch])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    runs = []
    for _ in range(max(1, repeats)):
        with timed(device) as clock:
            outs = run_batches(call, x, target, ids, batch)
        runs.append(clock["seconds"])
    seconds, warm_s = statistics.median(runs), warm["seconds"]
    info, steps = cat_info(outs)
    steps = steps.float()
    flipped = torch.cat([o.flipped.float() for o in outs])
    nfe = {k: d for k, d in nfe_by_network(info).items() if d["fwd"] or d["bwd"]}
    flops = flops_from_nfe(nfe, calls)
    row = {
        "method": method_name, "batch": batch, "n": n,
        "variant": v["name"] + ("+graphs" if params.get("cuda_graphs") else ""),  # the captured-step arm (#64)
        "sec_per_cf": seconds / n, "seconds": seconds, "warmup_seconds": warm_s, "repeats": len(runs),
        "sec_per_cf_runs": [r / n for r in runs], "sec_per_cf_min": min(runs) / n, "sec_per_cf_max": max(runs) / n,
        "mean_steps": float(steps.mean()), "flip_rate": float(flipped.mean()),
        "tflops_per_cf": flops / 1e12, "achieved_tflops_per_s": flops / 1e12 / (seconds / n),
        "peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "early_stop": params.get("early_stop", True), "nfe": nfe,
        "K": params.get("K"),
    }
    if split_method(method_name)[0] == "fire":
        row["sec_per_update"] = seconds / max(1e-9, float(steps.sum()))
    else:
        row["mean_attempts"] = float(torch.cat([torch.as_tensor(o.info["attempts"]).float() for o in outs]).mean()) \
            if "attempts" in outs[0].info else None
    return row, outs[0].images.float().cpu()


def _report_head(device: str, repeats: int, compile_mode: str, s: PaperSetting,
                 calls: dict[str, dict[str, Any]], pmf: str) -> dict[str, Any]:
    """The report before its first row: the machine, the setting, the PMF, the per-call GFLOPs."""
    return {
        "device": device, "repeats": repeats, "compile_mode": compile_mode, "pmf": pmf,
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "setting": s.dataset, "resolution": s.resolution,
        "paper_sec_per_cf": PAPER_SEC_PER_CF, "rows": [], "errors": {}, "skipped": [],
        "per_call_gflops": {k: {"fwd": c["fwd_flops"] / 1e9, "bwd": c["bwd_flops"] / 1e9} for k, c in calls.items()},
    }


def _compare_to_fp32(row: dict[str, Any], ref_cf: dict[tuple, Tensor], key: tuple, variant: str, first: Tensor,
                     b0: Tensor) -> None:
    """Keep fp32's edits of ``key``; another variant's row gets its edits' relative difference from them."""
    if variant == "fp32" and key not in ref_cf:
        ref_cf[key] = first
    if variant != "fp32" and key in ref_cf and len(ref_cf[key]) == len(first):
        d_ref, d = ref_cf[key] - b0[: len(first)], first - b0[: len(first)]
        row["edit_rel_diff_vs_fp32"] = float((d - d_ref).norm() / d_ref.norm().clamp_min(1e-30))


def run(out: Path, s: PaperSetting = CELEBA, device: str = "cuda", plan: list[dict[str, Any]] | None = None,
        seed: int = 0, time_limit: float = float("inf"), log=print, name: str = "gpu_profile", repeats: int = 3,
        compile_mode: str = "reduce-overhead", compile_backend: str = "inductor", pmf: str = "released"
        ) -> dict[str, Any]:
    """Run ``plan`` (a list of {method, variant, batch, n, early_stop}); write JSON + Markdown to ``out``
    after every row, so an interrupted run keeps what it measured. ``pmf``: :data:`PMF_KINDS`."""
    if pmf not in PMF_KINDS:
        raise ValueError(f"pmf must be one of {', '.join(PMF_KINDS)}, got {pmf!r}")

    start = time.perf_counter()
    dev = torch.device(device)
    cfg = load_config()
    task = get_task(cfg, "celeba_smile")
    base = timing_models(s, dev, seed, pmf)
    calls = per_call_flops(build_networks(s, device="meta", pmf=pmf), s.resolution)
    plan = plan if plan is not None else default_plan()
    n_max = max(p["n"] for p in plan)
    x_all = _inputs(s, n_max, dev)
    with torch.no_grad(), precision("fp32", dev):
        target_all = 1 - base.classifier(x_all).argmax(1)
    report = _report_head(device_name(dev), repeats, compile_mode, s, calls, pmf)
    ref_cf: dict[tuple[str, bool, bool], Tensor] = {}  # fp32 edits by (method, early stop, GPU noise)
    out.mkdir(parents=True, exist_ok=True)
    for i, p in enumerate(plan):
        elapsed = time.perf_counter() - start
        if elapsed > time_limit:
            report["skipped"].append({**p, "why": f"time limit {time_limit:.0f} s reached at {elapsed:.0f} s"})
            continue
        try:
            v = {**parse_variant(p["variant"]), "name": p["variant"]}
            models = prepare_models(base, v, compile_mode, compile_backend)
            if v["name"] not in report["errors"] and not v["compile"]:
                report["errors"][v["name"]] = network_errors(models, base, x_all[:4], v["precision"], dev)
            params = resolve_method(cfg, task, p["method"])[0]
            params.update(p.get("params", {}))
            if "early_stop" in p:
                params["early_stop"] = p["early_stop"]
            x, target = x_all[: p["n"]], target_all[: p["n"]]
            row, first = time_method(p["method"], params, models, x, target, p["batch"], v, dev, seed, calls,
                                     repeats=int(p.get("repeats", repeats)))
            key = (p["method"], bool(params.get("early_stop", True)), v["gpu_noise"])
            _compare_to_fp32(row, ref_cf, key, v["name"], first, x[: p["batch"]].float().cpu())
            peak = peak_tflops(report["device"], v["precision"])
            row.update(peak_tflops=peak, share_of_peak=row["achieved_tflops_per_s"] / peak if peak else None)
        except Exception as e:  # one failed configuration must not lose the others
            row = {**p, "error": f"{type(e).__name__}: {e}"}
        finally:
            prepare_models(base, {"channels_last": False, "compile": False})
            torch.compiler.reset()  # each compiled variant starts from its own graphs
        report["rows"].append(row)
        log(row_line(i, len(plan), row, time.perf_counter() - start))
        write_report(out, report, name)
    report["total_seconds"] = time.perf_counter() - start
    write_report(out, report, name)
    return report


def default_plan() -> list[dict[str, Any]]:
    """The GPU plan: FiRe at batch 5 in each variant, FiRe's batch sweep, MaskDiME, then compile."""
    plan: list[dict[str, Any]] = []
    for var in ("fp32", "tf32", "mixed", "bf16", "fp32+gpunoise", "tf32+gpunoise", "mixed+cl+gpunoise",
                "bf16+cl+gpunoise"):
        plan.append({"method": "fire", "variant": var, "batch": 5, "n": 20, "early_stop": False})
    for var in ("fp32", "mixed+cl+gpunoise"):
        plan.append({"method": "fire", "variant": var, "batch": 5, "n": 20, "early_stop": True})
    for b in (16, 32, 64):
        plan.append({"method": "fire", "variant": "mixed+cl+gpunoise", "batch": b, "n": 2 * b, "early_stop": False})
    for var in ("fp32", "tf32", "mixed+cl+gpunoise"):
        plan.append({"method": "maskdime", "variant": var, "batch": 5, "n": 10, "params": {"scales": [8.0]}})
    plan.append({"method": "maskdime", "variant": "mixed+cl+gpunoise", "batch": 32, "n": 32,
                 "params": {"scales": [8.0]}})
    plan.append({"method": "fire", "variant": "mixed+cl+gpunoise+compile", "batch": 5, "n": 20, "early_stop": False})
    return plan


def shrink(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``plan`` at smoke-test size (``--tiny --plan``): batch 2 (3 where the plan's batch is larger than 5) and
    as many inputs, FiRe's K / 5 updates (at least 1; K: FiRe's default where not given) of 2 SmoothGrad copies, 2 of 10
    DDPM steps; variants, methods and repetitions unchanged, so the rows keep their distinct updates and
    batches."""
    out = []
    for p in plan:
        params = dict(p.get("params", {}))
        if p["method"] == "fire":
            params.update(K=max(1, int(params.get("K", FireParams.K)) // 5), smoothgrad_n=2)
        elif p["method"] == "maskdime":
            params.update(start_step=2, respacing=10)
        batch = 2 if p["batch"] <= 5 else 3
        out.append({**p, "batch": batch, "n": batch, "params": params})
    return out


def load_plan(path: str | None, tiny: bool = False) -> list[dict[str, Any]] | None:
    """The plan of `vcebench profile gpu`: the JSON list at ``path`` (shrunk with ``tiny``), else the tiny
    smoke plan with ``tiny``, else None (:func:`default_plan`)."""
    if path:
        plan = json.loads(Path(path).read_text())
        return shrink(plan) if tiny else plan
    if tiny:
        return [{"method": "fire", "variant": "fp32", "batch": 2, "n": 2, "early_stop": False,
                 "params": {"K": 2, "smoothgrad_n": 2}},
                {"method": "maskdime", "variant": "fp32", "batch": 2, "n": 2,
                 "params": {"scales": [8.0], "start_step": 2, "respacing": 10}}]
    return None
