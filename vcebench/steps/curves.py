"""Training curves of the generative roles: one long run with EMA snapshots, every snapshot scored alike.

A budget is chosen from measured quality, not from the default run's time: ``vcebench models curve``
trains the dataset's ``ddpm`` or ``pmf`` recipe for ``steps`` optimiser steps (resumable, as every
training), writes the EMA weights after each step count in ``at`` (``training.train_generative``
``snapshots=``), and scores each snapshot on the same validation images and the same noise:

- ``ddpm``: Tweedie FID at flow times ``t`` (the noise levels FiRe and the DDPM rows start from) and
  ``n_samples`` ancestral samples (``sample_steps`` respaced steps): FID and KID against the validation
  images, on the dataset's ``fid_features`` network;
- ``pmf``: the one-step prediction ``G(z_t, t)``'s FID at ``t``, the one-step samples ``G(eps, 1)``'s FID
  and KID, and its quality gate against the dataset's trained DDPM (when there is one).

KID is the sample-quality number to read: unbiased at any n, where FID on a few dozen samples is not
(64 samples rank colour noise above faces). Under a ``cosine`` learning-rate schedule the snapshots of one
run share its schedule, so an early snapshot saw a higher rate than a run of that budget would have ended
with (the curve overstates the steps a plateau needs). Under ``wsd`` (``training.lr_at``) each budget in
``at`` is its own run, trained in ascending order: each continues the previous one's stable trunk
(``train_generative``'s ``trunk_dir``, ``out_dir/trunk``) and ends with its own decay, so every point is what
a run of that budget gives, and a later, larger budget continues the trunk instead of starting over. The
plateau rule (:func:`plateau`) reads the curve as it is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import Tensor

from metrics.kid import kid

from ..core.errors import ConfigError
from ..core.frechet import feature_frechet_distance
from ..core.io import from_uint8, quantize, save_npz, write_json, write_text
from ..data import load_split
from ..models.checkpoints import fingerprint, weights_fingerprint
from ..models.generative.ddpm import sample_ddpm, train_ddpm, tweedie_at
from ..models.generative.pmf import build_pmf, evaluate_pmf, train_pmf
from ..models.generative.quality import batched, gate, generative_quality, with_fire_t
from ..models.task_models import role_spec
from ..models.training.generative import snapshot_path
from ..models.training.loops import to_float_images
from ..models.training.settings import TRAIN_DEFAULTS
from .train import generative_references, loss_networks

PRIMARY = {"ddpm": "tweedie_t0.4_fid", "pmf": "predict_clean_t0.4_fid"}
PLATEAU_GAIN = 0.10  # a doubling of the budget that improves the primary number by less than this: plateau
# The most steps a generator's budget gets, plateau or not: the project's compute (51,200 steps is about 11 h of
# one CPU core per faces generator and set, more than a GPU lease affords). Added after the faces DDPM's
# 12,800 -> 25,600 doubling still gained 15.9 %; the same cap for every generator (docs/networks.md).
BUDGET_CAP = 25_600


def plateau(rows: Sequence[dict], key: str, gain: float = PLATEAU_GAIN,
            cap: int = BUDGET_CAP) -> dict[str, Any]:
    """The smallest budget past which every doubling improves ``key`` (lower is better) by less than ``gain``.

    ``rows``: one per snapshot with ``step`` and ``key``. A doubling ``b -> 2 b`` is measured where both
    snapshots exist: ``(m(b) - m(2 b)) / m(b)``. The budget is the smallest ``b`` whose doubling and every
    later one gain less than ``gain`` (an early flat stretch followed by a drop is no plateau). Returns
    ``{"budget", "key", "gain", "pairs", "cap", "at_cap"}``; ``budget`` None when the last doubling still gains
    (train longer), ``at_cap`` True when it does so at the budget cap ``cap``: trained as far as it goes."""
    by_step = {int(r["step"]): float(r[key]) for r in rows if r.get(key) is not None}
    pairs = []
    for b in sorted(by_step):
        if 2 * b in by_step:
            rel = (by_step[b] - by_step[2 * b]) / max(abs(by_step[b]), 1e-12)
            pairs.append({"from": b, "to": 2 * b, "relative_gain": rel})
    chosen = None
    for p in reversed(pairs):
        if p["relative_gain"] >= gain:
            break
        chosen = p["from"]
    at_cap = chosen is None and bool(by_step) and max(by_step) >= cap
    return {"budget": chosen, "key": key, "gain": gain, "pairs": pairs, "cap": cap, "at_cap": at_cap}


def _features(feature_fn: Callable[[Tensor], Tensor], x: Tensor) -> np.ndarray:
    with torch.no_grad():
        return batched(feature_fn, x).double().numpy()


def sample_scores(samples: Tensor, val_features: np.ndarray, feature_fn: Callable[[Tensor], Tensor],
                  seed: int) -> dict[str, float]:
    """FID and KID (mean and std over subsets) of ``samples`` against validation features."""

    f = _features(feature_fn, samples)
    # subsets of half the smaller set (at most 1000): the spread over subsets is an estimate, not 0
    size = min(1000, min(len(f), len(val_features)) // 2)
    k, k_std = kid(f, val_features, subsets=50, subset_size=size, seed=seed)
    return {"fid": feature_frechet_distance(f, val_features), "kid": k, "kid_std": k_std, "n": int(len(f))}


def score_ddpm(ddpm, val: Tensor, feature_fn, t_flow: Sequence[float], n_samples: int, sample_steps: int,
               seed: int, cache: Path | None = None) -> dict[str, Any]:
    """One DDPM snapshot: Tweedie FID / MSE at each flow time, sample FID / KID. The samples are scored as
    uint8 images (as every image vcebench scores) and kept in ``cache`` (.npz): a rescoring with another
    feature network draws none again."""

    ddpm.eval()
    g = torch.Generator().manual_seed(seed)
    row: dict[str, Any] = {}
    for t in t_flow:
        x0, _ = tweedie_at(ddpm, val, t, g)
        q = generative_quality(x0.clamp(-1, 1), val, feature_fn)
        row[f"tweedie_t{t:g}_fid"], row[f"tweedie_t{t:g}_mse"] = q["fid"], float(((x0 - val) ** 2).mean())
    samples = _cached_samples(cache, n_samples, lambda: sample_ddpm(ddpm, n_samples, tuple(val.shape[1:]),
                                                                     sample_steps, g))
    s = sample_scores(samples, _features(feature_fn, val), feature_fn, seed)
    row.update({f"sample_{k}": v for k, v in s.items()})
    return row


def _cached_samples(cache: Path | None, n: int, draw: Callable[[], Tensor]) -> Tensor:
    """``draw()``'s samples as uint8 images read back to [-1, 1], from ``cache`` when it holds ``n``."""

    if cache is not None and cache.is_file():
        u8 = torch.from_numpy(np.load(cache)["samples"])
        if len(u8) == n:
            return from_uint8(u8)
    u8 = quantize(draw())
    if cache is not None:
        save_npz(cache, samples=u8.numpy())
    return from_uint8(u8)


def score_pmf(pmf, val: Tensor, feature_fn, t_flow: Sequence[float], n_samples: int, seed: int,
              reference_ddpm=None, classifiers=None, fire_t: dict[str, float] | None = None) -> dict[str, Any]:
    """One PMF snapshot: one-step prediction FID at each flow time, one-step sample FID / KID, and with
    ``reference_ddpm`` the quality gate as training measures it (``models.generative.quality.gate``; its label
    check at each task's ``fire_t`` with ``classifiers``): ``gate_passed`` and the checks in ``gate_failed``."""

    pmf.eval()
    t_eval = with_fire_t(t_flow, fire_t)
    ev, _ = evaluate_pmf(pmf, val, seed, n_samples=2, feature_fn=feature_fn, ddpm=reference_ddpm,
                         t_flow=t_eval, classifiers=classifiers)
    row: dict[str, Any] = {}
    for t in t_eval:  # the curve's levels and each task's FiRe level (the gate's)
        e = ev["predict_clean"][f"t{t:g}"]
        row[f"predict_clean_t{t:g}_fid"], row[f"predict_clean_t{t:g}_mse"] = e.get("fid"), e["mse"]
        if "ddpm_tweedie" in e:
            row[f"ddpm_tweedie_t{t:g}_fid"] = e["ddpm_tweedie"].get("fid")
        if "label_kept" in e:
            row[f"label_kept_t{t:g}"] = e["label_kept"]
    if reference_ddpm is not None:
        g = gate(ev, fire_t=fire_t)
        row["gate_passed"], row["gate_failed"] = bool(g.get("passed")), g.get("failed", [])
        row["gate_mse_ratio_vs_tweedie"] = g.get("mse_ratio_vs_tweedie")
        if "label_kept_at_fire_t" in g:
            row["gate_label_kept_at_fire_t"] = g["label_kept_at_fire_t"]
    g = torch.Generator().manual_seed(seed)
    eps = torch.randn((n_samples, *val.shape[1:]), generator=g)
    with torch.no_grad():
        samples = batched(lambda z: pmf.predict_clean(z, 1.0), eps).clamp(-1, 1)
    s = sample_scores(samples, _features(feature_fn, val), feature_fn, seed)
    row.update({f"sample_{k}": v for k, v in s.items()})
    return row


def load_snapshot(role: str, spec: dict, image_shape: Sequence[int], path: Path):
    """The network of ``role`` built from recipe ``spec`` with the snapshot's weights."""

    channels, res = int(image_shape[0]), int(image_shape[-1])
    weights = load_file(str(path))
    if role == "ddpm":
        from ..models.generative.ddpm import build_ddpm

        net = build_ddpm(spec, channels, res)
        net.unet.load_state_dict(weights)
        net.unet.eval()
        return net

    net = build_pmf(spec, channels, res)
    net.load_state_dict(weights)
    return net.eval()


def training_curve(cfg: dict, task, role: str, steps: int, at: Sequence[int], out_dir: str | Path,
                   data_dir: str | Path | None = None, model_dir: str | Path = "resources/models",
                   n_val: int = 1000, n_samples: int = 1000, sample_steps: int = 50,
                   t_flow: Sequence[float] = (0.2, 0.4), seed: int = 0, progress: bool = True,
                   score: bool = True, shard=None, train: bool = True) -> dict[str, Any]:
    """Train ``role`` of ``task``'s dataset for ``steps`` steps with snapshots ``at`` into ``out_dir/train``
    (resumes), score every snapshot (cached in ``out_dir/curve.json`` under a fingerprint of the recipe and
    the scoring settings: a rerun scores only new snapshots) and return the curve with its plateau.

    ``score=False`` only trains (on ``shard``'s device, e.g. a GPU machine without the judges): the same
    call with ``score=True`` later finds the run and its snapshots and scores them on the CPU.
    ``train=False`` trains nothing: it scores the budgets already trained (e.g. while a background run trains
    the larger ones); the others are listed under ``pending`` and the curve is not finished until none is."""

    if role not in PRIMARY:
        raise ConfigError(f"training curves are for the generative roles {', '.join(PRIMARY)}; got {role!r}")
    at = sorted({int(a) for a in at if 0 < int(a) <= steps} | {int(steps)})
    ds = task.dataset
    spec = {**role_spec(cfg, ds, role), "steps": int(steps)}
    out_dir = Path(out_dir)
    refs = generative_references(cfg, task, role, Path(model_dir)) if score else {}
    if score and "feature_fn" not in refs:
        raise ConfigError(f"training curve of {ds}/{role}: the dataset's fid_features network is not in "
                          f"{model_dir}/{ds}/fid_features (train it first: vcebench train fid_features "
                          f"--task {task.name})")
    train_split = load_split(cfg, ds, "train", data_dir)
    val_u8 = load_split(cfg, ds, "val", data_dir).images[:n_val]
    # cosine: one run, its EMA snapshots; wsd: one run per budget, ascending, each continuing the shared trunk
    wsd = str({**TRAIN_DEFAULTS, **spec}["lr_schedule"]) == "wsd"
    runs = {a: out_dir / (f"train-{a:06d}" if wsd else "train") for a in at}
    fn = train_ddpm if role == "ddpm" else train_pmf
    kw = {k: v for k, v in refs.items() if role == "pmf" or k in ("feature_fn", "feature_name")}
    kw |= {"shard": shard} if shard is not None else {}
    if role == "pmf" and train:  # the networks its recipe's losses train against (none by default), scored or not
        kw["loss_networks"] = loss_networks(cfg, task, role, Path(model_dir))
    seed_ = int(spec.get("seed", cfg["seed"]))

    def trained(a: int) -> bool:
        return (runs[a] / "metrics.json").exists() and snapshot_path(runs[a], a).exists()

    pending = [] if train else [a for a in at if not trained(a)]
    if len(pending) == len(at):
        raise ConfigError(f"training curve of {ds}/{role}: no budget of {at} is trained in {out_dir} yet "
                          f"(train them first: the same command with --train-only)")
    for a in (at if wsd else at[-1:]) if train else ():
        if not all(trained(b) for b in at if runs[b] == runs[a]):
            fn({**spec, "steps": a}, train_split.images, runs[a], seed_, val_images_uint8=val_u8,
               progress=progress, snapshots=(a,) if wsd else tuple(at), **kw,
               **({"trunk_dir": out_dir / "trunk"} if wsd else {}))
    if not score:
        return {"dataset": ds, "role": role, "recipe": spec, "trained": str(runs[at[-1]] / "metrics.json"),
                "snapshots": at}
    val = to_float_images(val_u8, f"training curve {ds}/{role}: validation images")

    scoring = {"n_val": int(val.shape[0]), "n_samples": n_samples, "sample_steps": sample_steps,
               "t_flow": list(t_flow), "seed": seed, "feature": refs.get("feature_name"),
               "feature_weights": weights_fingerprint(refs["feature_fn"])}
    if role == "pmf":  # the gate's definition (models.generative.quality.gate): rows scored under another are redone
        scoring["gate"] = "mse_within_2x+label_kept_vs_tweedie@fire_t+fid_lower"
    # wsd: a budget's run does not depend on the largest budget, so extending the curve keeps its scored rows
    key = fingerprint({"role": role, "recipe": {k: v for k, v in spec.items() if not (wsd and k == "steps")},
                       "scoring": scoring})
    cache_path = out_dir / "curve.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    rows = {int(r["step"]): r for r in cache.get("rows", [])} if cache.get("fingerprint") == key else {}
    for a in at:
        if a in rows or a in pending:
            continue
        t0 = time.perf_counter()
        net = load_snapshot(role, spec, val.shape[1:], snapshot_path(runs[a], a))
        if role == "ddpm":
            row = score_ddpm(net, val, refs["feature_fn"], t_flow, n_samples, sample_steps, seed,
                             out_dir / "samples" / f"step-{a:06d}.npz")
        else:
            row = score_pmf(net, val, refs["feature_fn"], t_flow, n_samples, seed,
                            refs.get("reference_ddpm"), refs.get("classifiers"), refs.get("fire_t"))
        rows[a] = {"step": a, "images_seen": a * int(spec["batch_size"]), **row,
                   "score_seconds": round(time.perf_counter() - t0, 1)}
        if progress:
            print(f"[curve {ds}/{role}] step {a}: " + ", ".join(
                f"{k} {v:.4g}" for k, v in rows[a].items() if isinstance(v, float)), flush=True)
        write_json(cache_path, {"fingerprint": key, "rows": [rows[s] for s in sorted(rows)]})
    ordered = [rows[s] for s in sorted(rows)]
    result = {"dataset": ds, "role": role, "recipe": spec, "scoring": scoring, "fingerprint": key,
              "pending": pending, "rows": ordered, "plateau": plateau(ordered, PRIMARY[role]),
              "plateau_samples_kid": plateau(ordered, "sample_kid")}
    write_json(cache_path, result)
    return result


def to_markdown(curve: dict[str, Any]) -> str:
    """The curve as a table, the plateau under it."""
    rows = curve["rows"]
    cols = [c for c in rows[0] if c not in ("step", "score_seconds", "sample_n")] if rows else []
    head = "| step | " + " | ".join(cols) + " |\n|---:|" + "---:|" * len(cols) + "\n"

    def fmt(v):  # numbers to 4 digits, also inside the per-attribute columns (labels kept, the gate's)
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, dict):
            return ", ".join(f"{k} ({fmt(x)})" if isinstance(x, dict) else f"{k} {fmt(x)}" for k, x in v.items())
        if isinstance(v, list):
            return ", ".join(map(str, v)) or "-"
        return str(v)

    body = "".join(f"| {r['step']} | " + " | ".join(fmt(r.get(c)) for c in cols) + " |\n" for r in rows)
    lines = [f"Training curve of {curve['dataset']} {curve['role']} (recipe steps {curve['recipe']['steps']}, "
             f"batch {curve['recipe']['batch_size']}; scored on {curve['scoring']['n_val']} validation images, "
             f"{curve['scoring']['n_samples']} samples)", "", head + body]
    for name in ("plateau", "plateau_samples_kid"):
        p = curve[name]
        pairs = ", ".join(f"{q['from']}->{q['to']}: {100 * q['relative_gain']:.1f} %" for q in p["pairs"])
        verdict = (f"plateau at {p['budget']} steps" if p["budget"] is not None
                   else f"no plateau up to the budget cap ({p['cap']} steps): trained to the cap" if p["at_cap"]
                   else "no plateau in the curve (train longer)")
        lines.append(f"- {p['key']}: {verdict} (a doubling that improves it by < {100 * p['gain']:.0f} %; "
                     f"doublings: {pairs or 'none measured'})")
    if curve.get("pending"):
        lines.append(f"- not trained yet: budgets {', '.join(map(str, curve['pending']))} (the curve is unfinished)")
    return "\n".join(lines) + "\n"


def curve_job(cfg: dict, task_name: str, role: str, steps: int | None, at: Sequence[int], out_dir: str | Path,
              data_dir: str | None, model_dir: str, *, train_only: bool = False, score_only: bool = False,
              **kw: Any) -> dict[str, Any]:
    """`models curve`: :func:`training_curve` of ``role`` on ``task_name``'s dataset up to ``steps`` (default
    the recipe's ``steps``). ``train_only``: trained on the config's device (its launch's processes), nothing
    scored; returns what was trained. Else on the CPU, trained first unless ``score_only``; writes
    ``<out_dir>/curve.md`` beside curve.json and returns the curve. ``kw``: n_val, n_samples, sample_steps."""
    from ..config.load import train_threads
    from ..config.tasks import get_task
    from ..core.runtime import setup_torch
    from ..models.training.distributed import training_processes
    from ..models.training.settings import require

    task = get_task(cfg, task_name)
    steps = steps or int(require(role_spec(cfg, task.dataset, role), "steps", role))
    device = setup_torch(train_threads(cfg), cfg["device"] if train_only else "cpu", cfg["cuda"])
    if train_only:
        with training_processes(device, cfg["cuda"]["train_graphs"]) as shard:
            return training_curve(cfg, task, role, steps, at, out_dir, data_dir, model_dir, score=False,
                                  shard=shard, **kw)
    curve = training_curve(cfg, task, role, steps, at, out_dir, data_dir, model_dir, train=not score_only, **kw)
    write_text(Path(out_dir, "curve.md"), to_markdown(curve))
    return curve

