"""The compute of every method at paper settings: per-call FLOPs of the paper-size networks
(``vcebench.costs.paper_nets``) times calls per counterfactual (``vcebench.paper.nfe``), and the report.

The FiRe paper (Fig. 2) reports 1.28 PFLOPs for 1,000 CelebA Smile counterfactuals and 8x fewer
FLOPs than MaskDiME. Without data or trained weights we can still count what the architectures
cost: per-network-call FLOPs are measured with FlopCounterMode on ``meta`` tensors (shapes only),
and multiplied by each algorithm's calls per counterfactual (NFE), derived from the reference code
and cross-checked against the methods' own ``info["nfe_*"]`` counters. One report per dataset of the
paper (CelebA 128 px, CelebA-HQ 256 px, CheXpert 512 px); the paper's figures are CelebA's.

Architectures:

- DDPM: DiME's guided-diffusion UNet (guillaumejs2403/DiME ``test.sh``: num_channels 128,
  num_res_blocks 2, attention at resolutions 32,16,8, num_heads 4, learn_sigma, resblock_updown,
  use_scale_shift_norm) with guided-diffusion's default channel_mult for the image size ((1,1,2,3,4) at
  128 px, (1,1,2,2,4,4) at 256, (0.5,1,1,2,2,4,4) at 512), expressed as a diffusers ``UNet2DModel`` of the
  same width, depth and attention placement. DiME's flags at 256 and 512 px are an assumption (the CelebA
  ones are DiME's own). Heads: diffusers takes a head *dimension* (64 here, so 4/6/8 heads instead of
  4/4/4); attention FLOPs do not depend on it.
- PMF: ``released``, FiRe's released backbone at the dataset's resolution (model card of
  ``DapaoZeng/FiRe``: DiT-B/8 at 128 px, DiT-B/16 at 256, DiT-B/32 at 512; 256 patch tokens each): a DiT-B
  (hidden 768, 12 adaLN-Zero blocks, 12 heads, MLP ratio 4) with pMF-style conditioning on t, h = t - r,
  the guidance scale omega and the class (2 + null), :class:`vcebench.costs.paper_nets.ReleasedDiT`.
  ``unet``: the DDPM's UNet with an extra h = t - r conditioning (``class_embed_type="timestep"``) and a
  3-channel x-prediction head (the architecture this benchmark's own PMFs have), as the alternative.
- Classifier: torchvision DenseNet-121 with 40 outputs (DiME ``core/classifier/densenet.py``),
  query logit 31 (Smiling) exposed as a binary head; CheXpert: one output (Pacemaker).
- Perceptual: VGG19 ``features[:18]`` (DiME ``PerceptualLoss``, layer 18) with ImageNet
  normalisation; one call = features of both images, gradient to the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..costs.flops import flops_from_nfe, per_call_flops, role_call
from ..costs.measure import FLOP_CONVENTION, FVCORE_CONVENTION, fvcore_forward_macs
from ..costs.paper_nets import PMF_KINDS, SETTINGS, PaperSetting, build_networks, dit_formula_flops, released_dit
from .nfe import NFE, ddpm_family_nfe, fire_nfe, fire_nfe_per_update

PAPER_TOTAL_PFLOPS_1000 = 1.28  # FiRe, 1,000 CelebA Smile CFs (paper Fig. 2)
PAPER_RATIO = 8.0  # MaskDiME / FiRe FLOPs (paper Fig. 2)
PAPER_MINUTES_1000 = 6.37  # FiRe wall time for 1,000 CFs at batch 5 (paper Fig. 2)


class _FvcoreWrapper(nn.Module):
    def __init__(self, name: str, net: nn.Module):
        super().__init__()
        self.name, self.net = name, net

    def forward(self, x: Tensor) -> Tensor:
        return role_call(self.name, self.net, x)


def fvcore_forward_table(nets: dict[str, nn.Module], resolution: int) -> dict[str, int | None]:
    """fvcore forward multiply-adds per role at batch 1 (real CPU tensors: fvcore cannot trace ``meta``).

    fvcore does not count ``scaled_dot_product_attention`` (traced as one op), so for the UNets it
    is below FlopCounterMode / 2 by the attention matmuls; it does count normalisation layers.
    """
    x = torch.zeros(1, 3, resolution, resolution)
    return {name: fvcore_forward_macs(_FvcoreWrapper(name, net), (x,)) for name, net in nets.items()}


# --------------------------------------------------------------------------- the report

DDPM_METHODS = ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime")


def paper_scale_report(dataset: str = "celeba", attempts: float = 1.0,
                       measured_fire_steps: dict[str, float] | None = None,
                       measured_nfe: dict[str, NFE] | None = None,
                       fvcore: bool = False,
                       build: Callable[..., dict[str, nn.Module]] = build_networks) -> dict[str, Any]:
    """Per-call FLOP table + FLOPs per CF of every method at paper settings (see module docstring).

    ``measured_fire_steps``: optional ``{label: mean updates}`` (e.g. from a vcebench FiRe run);
    ``measured_nfe``: optional NFE per CF read from the methods' counters, reported beside the
    analytic counts. The updates per CF the paper's figures imply are computed for CelebA only (the
    dataset of its Fig. 2).
    """
    if dataset not in SETTINGS:
        raise ValueError(f"vcebench profile paper-scale supports {', '.join(SETTINGS)}, got {dataset!r}")
    s = SETTINGS[dataset]
    calls_by_pmf = _calls_by_pmf(s, fvcore, build)

    calls = calls_by_pmf["unet"]
    methods: dict[str, Any] = {}
    for m in DDPM_METHODS:
        for label, att in (("", attempts), ("_all_scales", float(len(s.scales)))):
            nfe = ddpm_family_nfe(m, s.start_step, att)
            f = flops_from_nfe(nfe, calls)
            methods[m + label] = {"attempts": att, "nfe": nfe, "tflops_per_cf": f / 1e12,
                                  "pflops_per_1000": f * 1000 / 1e15}

    maskdime = methods["maskdime"]["tflops_per_cf"] * 1e12
    fire_rows, per_update, fixed, implied = _fire_flops(s, calls_by_pmf, maskdime, measured_fire_steps,
                                                        implied=dataset == "celeba")
    dit = s.pmf_dit or released_dit(s.resolution)
    return {
        "dataset": dataset,
        "resolution": s.resolution,
        "flop_convention": FLOP_CONVENTION,
        "fvcore_convention": FVCORE_CONVENTION,
        "batch": 1,
        "networks": {**calls, "pmf_released": calls_by_pmf["released"]["pmf"]},
        "released_pmf": {"name": dit.name, "patch": dit.patch, "tokens": dit.tokens, "hidden": dit.hidden,
                         "depth": dit.depth, "heads": dit.heads, "formula_fwd_flops": dit_formula_flops(dit)},
        "settings": {"respacing": s.respacing, "tau": s.start_step, "scales": list(s.scales),
                     "attempts_assumed": attempts, "fire_K": s.fire_K, "smoothgrad_n": s.smoothgrad_n},
        "methods": methods,
        "fire": {"tflops_per_update": {k: v / 1e12 for k, v in per_update.items()},
                 "tflops_fixed_per_cf": {k: v / 1e12 for k, v in fixed.items()},
                 "nfe_per_update": fire_nfe_per_update(s.smoothgrad_n), "nfe_fixed_per_cf": fire_nfe(0.0),
                 "profiles": fire_rows, "implied": implied},
        "measured_nfe": measured_nfe or {},
        "paper": {"fire_pflops_per_1000": PAPER_TOTAL_PFLOPS_1000, "maskdime_over_fire": PAPER_RATIO,
                  "fire_minutes_per_1000": PAPER_MINUTES_1000},
    }


def paper_scale_reports(datasets: tuple[str, ...] = tuple(SETTINGS), measured_nfe: dict[str, NFE] | None = None,
                        **kw: Any) -> dict[str, Any]:
    """:func:`paper_scale_report` of each dataset, and the summary of FiRe (released PMF) against MaskDiME."""
    unknown = [d for d in datasets if d not in SETTINGS]
    if unknown or not datasets:
        raise ValueError(f"vcebench profile paper-scale supports {', '.join(SETTINGS)}, got {list(datasets)}")
    reports = {d: paper_scale_report(d, measured_nfe=measured_nfe if d == "celeba" else None, **kw)
               for d in dict.fromkeys(datasets)}
    return {"datasets": reports, "summary": [summary_row(r) for r in reports.values()]}


def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    """One dataset's line of the summary: the released PMF, FiRe's FLOPs per CF in the two steps profiles and
    MaskDiME's (one scale, and all scales), their ratios, and the updates the paper's figures imply."""
    rel = {row["mean_updates"]: row for row in r["fire"]["profiles"] if row["pmf"] == "released"}
    upper, paper_profile = rel[float(r["settings"]["fire_K"])], rel[paper_profile_updates(r["settings"]["fire_K"])]
    md1, md_all = r["methods"]["maskdime"]["tflops_per_cf"], r["methods"]["maskdime_all_scales"]["tflops_per_cf"]
    implied = r["fire"]["implied"].get("released", {})
    return {"dataset": r["dataset"], "resolution": r["resolution"], "pmf": r["released_pmf"]["name"],
            "tokens": r["released_pmf"]["tokens"], "pmf_fwd_gflops": r["networks"]["pmf_released"]["fwd_flops"] / 1e9,
            "fire_tflops_per_update": r["fire"]["tflops_per_update"]["released"],
            "fire_tflops_K": upper["tflops_per_cf"], "fire_tflops_paper_profile": paper_profile["tflops_per_cf"],
            "maskdime_tflops": md1, "maskdime_all_scales_tflops": md_all,
            "ratio_K": md1 / upper["tflops_per_cf"], "ratio_paper_profile": md1 / paper_profile["tflops_per_cf"],
            "implied_updates_1.28_PFLOPs": implied.get("mean_updates_for_1.28_PFLOPs"),
            "implied_updates_8x": implied.get("mean_updates_for_8x_vs_maskdime")}


def paper_profile_updates(K: int) -> float:
    """The mean updates of the profile "over 99% of successful CFs stop within 10 updates" (the rest run K)."""
    return 0.99 * 10 + 0.01 * K


def _calls_by_pmf(s: PaperSetting, fvcore: bool, build: Callable[..., dict[str, nn.Module]]
                  ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per-call FLOPs of the four networks with each PMF (:data:`PMF_KINDS`; the UNet PMF's build counts the
    other three, the released one only its PMF), with fvcore's forward MACs beside them when ``fvcore``."""
    calls_by_pmf: dict[str, dict[str, dict[str, Any]]] = {}
    for pmf in ("unet", "released"):
        include = ("unet", "pmf", "classifier", "perceptual") if pmf == "unet" else ("pmf",)
        nets = build(s, device="meta", pmf=pmf, include=include)
        calls = per_call_flops(nets, s.resolution)
        if fvcore:
            cpu_nets = build(s, device="cpu", pmf=pmf, include=include)
            macs = fvcore_forward_table(cpu_nets, s.resolution)
            del cpu_nets
            for k, v in macs.items():
                calls[k]["fvcore_fwd_macs"] = v
        calls_by_pmf[pmf] = calls if pmf == "unet" else {**calls_by_pmf["unet"], **calls}
    return {k: calls_by_pmf[k] for k in PMF_KINDS}


def _fire_flops(s: PaperSetting, calls: dict[str, dict[str, dict[str, Any]]], maskdime: float,
                measured_fire_steps: dict[str, float] | None, implied: bool = True
                ) -> tuple[list[dict], dict, dict, dict]:
    """FiRe's FLOPs per CF by PMF: (rows per steps profile, per update, fixed per CF, the mean updates the
    paper's figures imply, if ``implied``)."""
    paper_fire = PAPER_TOTAL_PFLOPS_1000 * 1e15 / 1000
    profiles = {"K=15 updates for every CF (upper bound)": float(s.fire_K),
                "paper: >99% of successful CFs stop within 10 updates (mean <= ~10)": paper_profile_updates(s.fire_K)}
    profiles.update(measured_fire_steps or {})
    fire_rows, per_update, fixed, implied_updates = [], {}, {}, {}
    for pmf, c in calls.items():
        fixed[pmf] = flops_from_nfe(fire_nfe(0.0, s.smoothgrad_n), c)
        per_update[pmf] = flops_from_nfe(fire_nfe(1.0, s.smoothgrad_n), c) - fixed[pmf]
        if implied:
            implied_updates[pmf] = {
                "mean_updates_for_1.28_PFLOPs": (paper_fire - fixed[pmf]) / per_update[pmf],
                "mean_updates_for_8x_vs_maskdime": (maskdime / PAPER_RATIO - fixed[pmf]) / per_update[pmf]}
    for label, steps in profiles.items():
        for pmf in calls:
            f = fixed[pmf] + steps * per_update[pmf]
            fire_rows.append({"profile": label, "pmf": pmf, "mean_updates": steps, "tflops_per_cf": f / 1e12,
                              "pflops_per_1000": f * 1000 / 1e15, "maskdime_over_fire": maskdime / f})
    return fire_rows, per_update, fixed, implied_updates


DOCS_BEGIN = "<!-- paper-scale summary: written by `vcebench profile paper-scale --docs docs/profiling.md` -->"
DOCS_END = "<!-- end of paper-scale summary -->"


def summary_markdown(rs: dict[str, Any]) -> str:
    """The summary of :func:`paper_scale_reports`: per dataset, FiRe with its released PMF against MaskDiME,
    and the updates per CF the paper's CelebA figures imply (the block docs/profiling.md shows)."""
    lines = ["| dataset | FiRe PMF (released) | PMF GFLOPs / call | FiRe TFLOPs / update | FiRe TFLOPs / CF, "
             "15 updates | FiRe TFLOPs / CF, paper's profile (10.05) | MaskDiME TFLOPs / CF, 1 scale (all 3) | "
             "MaskDiME / FiRe, 15 updates | MaskDiME / FiRe, paper's profile |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rs["summary"]:
        lines.append(f"| {row['dataset']} {row['resolution']} px | {row['pmf']} ({row['tokens']} tokens) | "
                     f"{row['pmf_fwd_gflops']:.1f} | {row['fire_tflops_per_update']:.3f} | "
                     f"{row['fire_tflops_K']:.2f} | "
                     f"{row['fire_tflops_paper_profile']:.2f} | {row['maskdime_tflops']:.2f} "
                     f"({row['maskdime_all_scales_tflops']:.1f}) | {row['ratio_K']:.1f}x | "
                     f"{row['ratio_paper_profile']:.1f}x |")
    for row in rs["summary"]:
        if row["implied_updates_1.28_PFLOPs"] is not None:
            lines += ["", f"With the released {row['pmf']}, the paper's {PAPER_TOTAL_PFLOPS_1000} PFLOPs per "
                      f"1,000 {row['dataset']} CFs imply a mean of **{row['implied_updates_1.28_PFLOPs']:.2f} "
                      f"refinement updates per CF**, and its {PAPER_RATIO:g}x fewer FLOPs than MaskDiME (one scale) "
                      f"{row['implied_updates_8x']:.2f} updates."]
    return "\n".join(lines) + "\n"


def format_markdown(rs: dict[str, Any]) -> str:
    """:func:`paper_scale_reports` as Markdown (results/reference/paper_scale_flops.md): the summary, then each
    dataset's tables."""
    first = next(iter(rs["datasets"].values()))
    lines = ["# Paper-scale compute (random weights, no data)", "",
             "Produced by `vcebench profile paper-scale` (vcebench/paper/scale.py: the networks and their sources).",
             f"FLOP convention: {first['flop_convention']}.", "", "## Summary: FiRe (released PMF) and MaskDiME", "",
             summary_markdown(rs).rstrip("\n")]
    for r in rs["datasets"].values():
        lines += ["", format_dataset(r).rstrip("\n")]
    return "\n".join(lines) + "\n"


def format_dataset(r: dict[str, Any]) -> str:
    """One dataset's report (:func:`paper_scale_report`) as Markdown."""
    g = 1e9
    rel = r["released_pmf"]
    lines = [f"## {r['dataset']} {r['resolution']} px", "",
             "### FLOPs per network call (batch 1)", "",
             "| network | params (M) | forward GFLOPs | backward-to-input GFLOPs | fvcore forward GMACs |",
             "|---|---:|---:|---:|---:|"]
    for name, c in r["networks"].items():
        fv = c.get("fvcore_fwd_macs")
        fv_s = f"{fv / g:.2f}" if fv is not None else "n/a"
        lines.append(f"| {name} | {c['params'] / 1e6:.1f} | {c['fwd_flops'] / g:.2f} | {c['bwd_flops'] / g:.2f} | "
                     f"{fv_s} |")
    lines += ["", f"`pmf`: the UNet PMF; `pmf_released`: FiRe's released {rel['name']} (hidden {rel['hidden']}, "
              f"depth {rel['depth']}, {rel['heads']} heads, {rel['tokens']} patch tokens); the standard DiT count "
              f"gives {rel['formula_fwd_flops'] / g:.2f} GFLOPs forward. fvcore convention: {r['fvcore_convention']}; "
              "it does not count fused attention (scaled_dot_product_attention), hence UNet/DiT fvcore MACs < "
              "forward FLOPs / 2."]
    st = r["settings"]
    lines += ["", f"### DDPM-family methods ({st['tau']} of {st['respacing']} steps; "
              f"attempts = classifier scales tried per CF: {st['attempts_assumed']:g} assumed, "
              f"and all {len(st['scales'])} as the worst case)", "",
              "| method | attempts | NFE per CF (UNet / classifier f+b / perceptual f+b) | TFLOPs / CF | "
              "PFLOPs / 1000 CFs |", "|---|---:|---|---:|---:|"]
    for m, d in r["methods"].items():
        n = d["nfe"]
        lines.append(f"| {m} | {d['attempts']:g} | {n['unet']['fwd']:.0f} / {n['classifier']['fwd']:.0f}+"
                     f"{n['classifier']['bwd']:.0f} / {n['perceptual']['fwd']:.0f}+{n['perceptual']['bwd']:.0f} | "
                     f"{d['tflops_per_cf']:.2f} | {d['pflops_per_1000']:.2f} |")
    fire = r["fire"]
    nu = fire["nfe_per_update"]
    lines += ["", "### FiRe", "",
              f"Per refinement update: classifier {nu['classifier']['fwd']:.0f} fwd + "
              f"{nu['classifier']['bwd']:.0f} bwd (SmoothGrad N = {st['smoothgrad_n']}), "
              f"PMF {nu['pmf']['fwd']:.0f} fwd + {nu['pmf']['bwd']:.0f} bwd, "
              f"perceptual {nu['perceptual']['fwd']:.0f} + {nu['perceptual']['bwd']:.0f} "
              "(the PMF prediction of the updated state is reused, with its graph, for the next gradient; "
              "once per CF: the first PMF prediction and the final flip check): "
              f"{fire['tflops_per_update']['released']:.3f} TFLOPs with the released {rel['name']} PMF, "
              f"{fire['tflops_per_update']['unet']:.3f} TFLOPs with the UNet PMF.", "",
              "| steps profile | PMF | mean updates | TFLOPs / CF | PFLOPs / 1000 (paper, CelebA: "
              f"{r['paper']['fire_pflops_per_1000']}) | MaskDiME / FiRe "
              f"(paper, CelebA: {r['paper']['maskdime_over_fire']:g}x) |",
              "|---|---|---:|---:|---:|---:|"]
    for row in fire["profiles"]:
        lines.append(f"| {row['profile']} | {row['pmf']} | {row['mean_updates']:.2f} | {row['tflops_per_cf']:.3f} | "
                     f"{row['pflops_per_1000']:.2f} | {row['maskdime_over_fire']:.1f}x |")
    if fire["implied"]:
        lines += ["", "Mean updates per CF that the paper's figures imply under this counting:", ""]
        for pmf, d in fire["implied"].items():
            lines.append(f"- PMF {pmf}: {d['mean_updates_for_1.28_PFLOPs']:.2f} updates for 1.28 PFLOPs / 1000 CFs; "
                         f"{d['mean_updates_for_8x_vs_maskdime']:.2f} updates for 8x fewer FLOPs than MaskDiME")
    if r.get("measured_nfe"):
        lines += _cross_check_lines(r["measured_nfe"])
    return "\n".join(lines) + "\n"


def replace_docs_block(text: str, block: str) -> str:
    """``text`` with the part between :data:`DOCS_BEGIN` and :data:`DOCS_END` replaced by ``block``."""
    if text.count(DOCS_BEGIN) != 1 or text.count(DOCS_END) != 1 or text.index(DOCS_BEGIN) > text.index(DOCS_END):
        raise ValueError(f"the page must hold the two marker lines {DOCS_BEGIN!r} and {DOCS_END!r} once, in order")
    head, rest = text.split(DOCS_BEGIN)
    tail = rest.split(DOCS_END)[1]
    return f"{head}{DOCS_BEGIN}\n{block.rstrip()}\n{DOCS_END}{tail}"


def _cross_check_lines(measured_nfe: dict[str, Any]) -> list[str]:
    """The report's section comparing the methods' counted NFE with the analytic counts."""
    lines = ["", "### Cross-check: NFE per CF from the methods' own counters", "",
             "The real `methods/` code run with the paper hyperparameters on tiny random stand-in networks "
             "(their classifier never flips, so all 3 scales / all K updates run); the analytic counts above "
             "evaluated at the same attempts / updates.", "",
             "| method | mean steps | network | counted fwd | counted bwd | analytic fwd | analytic bwd | match |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for m, d in measured_nfe.items():
        for net, c in d["nfe"].items():
            a = d["analytic"].get(net, {"fwd": 0.0, "bwd": 0.0})
            lines.append(f"| {m} | {d['mean_steps']:.1f} | {net} | {c['fwd']:.0f} | {c['bwd']:.0f} | "
                         f"{a['fwd']:.0f} | {a['bwd']:.0f} | {'yes' if d['match'] else 'NO'} |")
    return lines
