"""`vcebench tune` as a library (its arguments and printing: :mod:`vcebench.cli.tune`):
pick every method's settings on the validation split, by the rule fixed in the config.

Writes the tuned file (default ``<protocol.tuned_dir>/<task>.yaml``, i.e. ``config/tuned/<task>.yaml``: the
picked settings, the rule, the validation split and n, the date, the whole sweep) and the sweep table as
Markdown (``--md``, default ``results/tune/<task>.md``). The default run reads the tuned file
(``protocol.use_tuned``); commit it. What is swept and how the pick is made: ``vcebench/protocol/tune.py``,
docs/protocol.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import ConfigError
from ..config.tasks import Task, get_task, method_params, split_method
from ..protocol.tune import FALLBACK, candidate_settings, round_value, select, tune_methods


@dataclass
class _Sweep:
    """What every setting of a sweep shares: the task, the validation inputs, the networks, the metrics."""

    cfg: dict
    task: Task
    split: Any
    split_name: str
    ids: Any
    rows_idx: Any
    models: Any
    roles: set[str]
    wanted: list[str]
    work: Path
    ref: Path
    data_dir: str | None
    model_dir: str
    device: Any
    weights: dict[str, str]  # role -> checkpoints.weights_fingerprint: a retrained network is a new sweep


def _wanted_metrics(tc: dict, rule: dict, known: dict) -> list[str]:
    """``tune.metrics`` plus the metrics the rule reads; a ConfigError names unknown ones."""
    wanted = list(tc.get("metrics") or [])
    for k in [rule["minimize"], *(rule.get("require") or {})]:
        if k not in wanted:
            wanted.append(k)
    unknown = [k for k in wanted if k not in known]
    if unknown:
        raise ConfigError(f"tune.metrics / tune.select: unknown metric(s) {unknown}; known: {', '.join(known)}")
    return wanted


def _sweep_row(sw: _Sweep, name: str, i: int, cand: dict[str, Any]) -> dict[str, Any]:
    """Run and score setting ``i`` (overrides ``cand``) of method ``name``; a finished setting of an interrupted
    sweep is reused when everything it depends on is the same."""
    from ..protocol.run_settings import EvalSettings, RunSettings
    from .evaluate import evaluate_task
    from .explain import generate

    cfg = sw.cfg
    settings = RunSettings.resolve(cfg, sw.task, name, candidate=cand, data_dir=sw.data_dir, model_dir=sw.model_dir,
                                   split=sw.split_name)
    params, rec = dict(settings.params), settings.protocol
    method = settings.build_method()
    npz = sw.work / name / f"setting-{i}.npz"
    npz.parent.mkdir(parents=True, exist_ok=True)
    key = json.dumps({"params": params, "ids": sw.ids.tolist(), "metrics": sw.wanted, "seed": cfg.get("seed"),
                      "models": {r: sw.models.names.get(r, r) for r in sorted(sw.roles)}, "weights": sw.weights,
                      "batch_size": cfg.get("batch_size")}, sort_keys=True, default=str)
    cached = npz.with_suffix(".row.json")
    if cached.exists() and json.loads(cached.read_text()).get("key") == key:
        return json.loads(cached.read_text())["row"]
    timing = generate(method, lambda idx: sw.split.float_images(sw.rows_idx[idx]), sw.ids, sw.models, settings, npz,
                      sw.device)
    # n_eval = the n tuning inputs: the coverage check expects exactly these ids
    scoring = EvalSettings.resolve({**cfg, "n_eval": len(sw.ids)}, sw.task, name, data_dir=sw.data_dir,
                                   model_dir=sw.model_dir, split=sw.split_name)
    res = evaluate_task(scoring, str(npz), fid_ref=str(sw.ref), device=sw.device, only=sw.wanted, models=sw.models)
    z = np.load(npz)
    row = {"method": name, "setting": i, "overrides": cand,
           "log_snr": round_value(rec["log_snr"]), "t": round_value(rec["t"]) if "t" in rec else None,
           "start_step": rec.get("start_step"), "respacing": rec.get("respacing"),
           "metrics": {k: (None if res["metrics"].get(k) is None else round_value(res["metrics"][k]))
                       for k in sw.wanted},
           "mean_steps": round_value(float(z["steps"].mean())), "sec_per_cf": round_value(timing["sec_per_cf"])}
    cached.write_text(json.dumps({"key": key, "row": row}))
    return row


def run_tune(cfg: dict, task: Task | str, *, data_dir: str | None = None, model_dir: str = "resources/models",
             work_dir: str | Path = "results/tune", method_names: list[str] | None = None,
             progress: bool = True, log=print) -> dict[str, Any]:
    """Sweep every method of ``task`` on the tuning split; returns the tuned-file content.

    Long because it reads as the procedure of docs/protocol.md: check the settings, load the split and the
    networks once, score every setting of every method (:func:`_sweep_row`), pick by the rule, record."""
    import torch

    import methods

    from .. import registry
    from ..core.runtime import setup_torch
    from ..data import eval_split_name, load_split, tune_split_name
    from ..models import load_task_models
    from ..models.checkpoints import weights_fingerprint
    from ..protocol.noise import check_ddpm_schedule, resolve_method
    from ..protocol.run_settings import EvalSettings
    from .evaluate import write_reference

    t_start = time.perf_counter()
    task = get_task(cfg, task) if isinstance(task, str) else task
    tc = dict(cfg.get("tune") or {})
    missing = [k for k in ("n", "n_settings", "seed", "select") if k not in tc]
    if missing:  # the defaults live in config/config.yaml, not here
        raise ConfigError(f"config key `tune.{missing[0]}` is not set (config/config.yaml sets every `tune` key)")
    n, n_settings, seed = int(tc["n"]), int(tc["n_settings"]), int(tc["seed"])
    rule = dict(tc["select"])
    known = registry.metrics()
    wanted = _wanted_metrics(tc, rule, known)
    device = setup_torch(cfg["threads"], cfg["device"], cfg["cuda"])
    split_name = tune_split_name(task.dataset)
    if split_name == eval_split_name(task.dataset):
        raise ConfigError(f"{task.name}: the tuning split must not be the evaluation split ({split_name})")
    split = load_split(cfg, task.dataset, split_name, data_dir=data_dir)
    ids = torch.sort(split.sample_ids).values[:n]
    names = method_names or tune_methods(cfg)
    roles = {"classifier"} | {r for k in wanted for r in known[k].roles}
    for name in names:
        if split_method(name)[1] is not None:
            raise ConfigError(f"vcebench tune tunes base methods, not the variant {name!r}")
        params, _ = resolve_method(cfg, task, name, candidate={})
        roles |= set(methods.get_method(name, params).roles)
    models = load_task_models(cfg, task, roles=tuple(sorted(roles)), device=str(device), model_dir=model_dir)
    if "ddpm" in roles:
        check_ddpm_schedule(cfg, task.dataset, models.ddpm.alphas_cumprod.cpu().numpy())
    work = Path(work_dir) / task.name
    work.mkdir(parents=True, exist_ok=True)
    ref = work / "fid_ref.npz"
    write_reference(EvalSettings.resolve(cfg, task, None, data_dir=data_dir, model_dir=model_dir, split=split_name),
                    str(ref), device, progress=False)
    weights = {r: weights_fingerprint(getattr(models, r)) for r in sorted(roles)
               if isinstance(getattr(models, r, None), torch.nn.Module)}
    sw = _Sweep(cfg, task, split, split_name, ids, split.index_of(ids), models, roles, wanted, work, ref,
                data_dir, model_dir, device, weights)
    space_all = (tc.get("space") or {})
    sweep, picked, settings = [], {}, {}
    for name in names:
        untuned = method_params(cfg, task, name, candidate={})
        rows = []
        for i, cand in enumerate(candidate_settings(space_all.get(name) or {}, untuned, n_settings, seed, name)):
            rows.append(_sweep_row(sw, name, i, cand))
            if log:
                log(f"{task.name} {name} setting {i}: {cand or 'untuned'} -> "
                    + ", ".join(f"{k}={v}" for k, v in rows[-1]["metrics"].items()))
        pick, how = select(rows, rule)
        for r in rows:
            r["picked"] = r["setting"] == pick
        settings[name] = dict(rows[pick]["overrides"])
        picked[name] = {"setting": pick, **how, "metrics": rows[pick]["metrics"], "log_snr": rows[pick]["log_snr"]}
        sweep += rows
    return {
        "task": task.name, "date": _dt.date.today().isoformat(),
        "rule": {**rule, "fallback": FALLBACK.format(minimize=rule["minimize"])},
        "validation": {"split": split_name, "n": int(len(ids)), "first_sample_id": int(ids[0]),
                       "last_sample_id": int(ids[-1]), "evaluation_split": eval_split_name(task.dataset)},
        "n_settings": n_settings, "seed": seed, "space": {k: space_all.get(k) or {} for k in names},
        "noise_rule": cfg["protocol"]["noise"],
        "models": {r: models.names.get(r, r) for r in sorted(roles)},
        "wall_seconds": round(time.perf_counter() - t_start, 1),
        "settings": settings, "picked": picked, "sweep": sweep,
    }

