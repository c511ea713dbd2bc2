"""Generative parity at the methods' operating noise: both networks' one-step denoising, and the pmf label gate.

For every starting log-SNR a configured method runs at on a dataset (``vcebench.protocol.noise.resolve_method``:
FiRe's t, each DDPM baseline's start step; calibrated and paper rows), the PMF's one-step prediction
G(z_t, t) and the DDPM's Tweedie estimate are computed from the SAME noise on validation images:
``z_flow = (1 - t) x + t eps`` and ``z_ddpm = sqrt(abar) x + sqrt(1 - abar) eps`` at the train timestep
whose log-SNR is nearest. Reported per log-SNR: MSE, FID (the dataset's fid_features) and the share of
each task's classifier labels kept, for both. The pmf label gate is judged at each task's FiRe
operating noise: the PMF keeps at least the Tweedie rate less 2 points (``pmf.LABEL_MARGIN``). Nothing is
retrained.

    vcebench models parity --dataset synthfaces --data resources/data/synthfaces \\
        --out resources/models/synthfaces/parity.json
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..config.tasks import get_task
from ..data import load_split
from ..models.generative.quality import LABEL_MARGIN, batched, generative_quality, label_kept, predicted_labels
from ..models.task_models import load_role
from .noise import ddpm_log_snr, flow_t, resolve_method


def operating_points(cfg: dict, dataset: str) -> list[dict[str, Any]]:
    """(task, method, log-SNR, tuned) of every configured method on ``dataset``'s tasks in ``run_tasks``."""

    out = []
    for name in cfg.get("run_tasks") or []:
        task = get_task(cfg, name)
        if task.dataset != dataset:
            continue
        for m in cfg["methods"]:
            _, rec = resolve_method(cfg, task, m)
            if rec["log_snr"] is None:  # adds no noise (the do-nothing `input` row)
                continue
            out.append({"task": name, "attribute": task.attribute, "method": m, "log_snr": rec["log_snr"],
                        "tuned": rec["tuned"], "noise_rule": rec["noise_rule"]})
    return out


@torch.no_grad()
def measure(cfg: dict, dataset: str, model_dir: str = "resources/models", data_dir: str | None = None,
            n: int = 256, seed: int = 0) -> dict[str, Any]:
    points = operating_points(cfg, dataset)
    if not points:
        raise ValueError(f"no task of `run_tasks` uses dataset {dataset!r}")
    task0 = get_task(cfg, points[0]["task"])
    pmf, pmf_name = load_role(cfg, task0, "pmf", model_dir)
    ddpm, ddpm_name = load_role(cfg, task0, "ddpm", model_dir)
    fid_fn, fid_name = load_role(cfg, task0, "fid_features", model_dir)
    classifiers = {}
    for p in points:
        if p["attribute"] not in classifiers:
            classifiers[p["attribute"]] = load_role(cfg, get_task(cfg, p["task"]), "classifier", model_dir)[0].eval()
    val = load_split(cfg, dataset, "val", data_dir)
    x = val.float_images(torch.arange(min(n, len(val))))
    ref_labels = predicted_labels(classifiers, x)
    lam_train = ddpm_log_snr(ddpm.alphas_cumprod.cpu().numpy())
    rows = []
    for lam in sorted({round(p["log_snr"], 6) for p in points}):
        t = flow_t(lam)
        ts = int(np.argmin(np.abs(lam_train - lam)))
        a = float(ddpm.alphas_cumprod[ts])
        eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        g = batched(lambda z, t=t: pmf.predict_clean(z, t), (1 - t) * x + t * eps)
        tw = batched(lambda z, ts=ts: ddpm.tweedie(z, torch.full((z.shape[0],), ts)),
                     math.sqrt(a) * x + math.sqrt(1 - a) * eps)
        row = {"log_snr": lam, "t": t, "ddpm_timestep": ts, "ddpm_log_snr": float(lam_train[ts]),
               "methods": sorted({f"{p['task']}/{p['method']}" for p in points if round(p["log_snr"], 6) == lam})}
        for key, pred in (("pmf", g), ("ddpm_tweedie", tw)):
            q = generative_quality(pred.clamp(-1, 1), x, fid_fn, fid_name)
            row[key] = {"mse": float(F.mse_loss(pred, x)), "fid": q.get("fid"),
                        "label_kept": label_kept(classifiers, pred.clamp(-1, 1), ref_labels)}
        rows.append(row)
    gate = {}
    for p in points:
        if not p["method"].startswith("fire"):
            continue
        r = next(r for r in rows if r["log_snr"] == round(p["log_snr"], 6))
        pk, tk = r["pmf"]["label_kept"][p["attribute"]], r["ddpm_tweedie"]["label_kept"][p["attribute"]]
        gate[f"{p['task']}/{p['method']}"] = {"log_snr": r["log_snr"], "t": r["t"], "pmf": pk, "tweedie": tk,
                                              "passed": pk >= tk - LABEL_MARGIN - 1e-12}
    return {"dataset": dataset, "n_images": int(x.shape[0]), "split": "val", "seed": seed,
            "models": {"pmf": pmf_name, "ddpm": ddpm_name, "fid_features": fid_name},
            "label_margin": LABEL_MARGIN, "points": points, "rows": rows, "label_gate": gate,
            "label_gate_passed": all(v["passed"] for v in gate.values())}


def to_markdown(res: dict[str, Any]) -> str:
    attrs = list(res["rows"][0]["pmf"]["label_kept"]) if res["rows"] else []
    head = ["log-SNR", "t", "DDPM step", "MSE PMF", "MSE Tweedie", "FID PMF", "FID Tweedie",
            *[f"{a} kept PMF / Tweedie" for a in attrs], "methods here"]
    lines = [f"{res['dataset']}: {res['n_images']} `{res['split']}` images, same noise for both networks", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        fid = [("-" if r[k]["fid"] is None else f"{r[k]['fid']:.2f}") for k in ("pmf", "ddpm_tweedie")]
        kept = [f"{100 * r['pmf']['label_kept'][a]:.1f} / {100 * r['ddpm_tweedie']['label_kept'][a]:.1f}"
                for a in attrs]
        lines.append("| " + " | ".join([f"{r['log_snr']:.2f}", f"{r['t']:.3f}", str(r["ddpm_timestep"]),
                                        f"{r['pmf']['mse']:.4f}", f"{r['ddpm_tweedie']['mse']:.4f}", *fid, *kept,
                                        ", ".join(r["methods"])]) + " |")
    lines += ["", "| FiRe row | log-SNR | PMF kept | Tweedie kept | gate (PMF >= Tweedie - 2 pt) |",
              "|---|---|---|---|---|"]
    for k, v in res["label_gate"].items():
        lines.append(f"| {k} | {v['log_snr']:.2f} | {100 * v['pmf']:.1f} | {100 * v['tweedie']:.1f} | "
                     f"{'pass' if v['passed'] else 'FAIL'} |")
    return "\n".join(lines) + "\n"
