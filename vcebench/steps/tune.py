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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import ConfigError
from ..config.tasks import Task, get_task, method_params, split_method
from ..core.io import write_text
from ..protocol.search import front, is_dead, pick_agreement, ranked, resampled_draws
from ..protocol.space import WidenRule, search_with_widening
from ..protocol.tune import FALLBACK, candidate_settings, compute_seconds, round_value, select, tune_methods


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
    method_roles: dict[str, set[str]]  # method -> the roles it runs with (the metrics' and the classifier besides)


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


def _shared_key(sw: _Sweep, name: str) -> dict[str, Any]:
    """What every trial of method ``name`` depends on besides its own params and inputs (a resumed sweep must
    match): the networks are those it and the metrics run, so retraining another method's network (e.g. the
    pmf, which only FiRe runs) leaves this method's finished trials valid."""
    roles = sorted(sw.method_roles.get(name, sw.roles))
    return {"metrics": sw.wanted, "seed": sw.cfg.get("seed"), "batch_size": sw.cfg.get("batch_size"),
            "models": {r: sw.models.names.get(r, r) for r in roles},
            "weights": {r: w for r, w in sw.weights.items() if r in roles}}


def _sweep_row(sw: _Sweep, name: str, i: int, cand: dict[str, Any], tag: str = "setting") -> dict[str, Any]:
    """Run and score setting ``i`` (overrides ``cand``) of method ``name``; a finished setting of an interrupted
    sweep is reused when everything it depends on is the same (``tag``: the file name's stage)."""
    from ..protocol.run_settings import EvalSettings, RunSettings
    from .evaluate import evaluate_task
    from .explain import generate

    cfg = sw.cfg
    settings = RunSettings.resolve(cfg, sw.task, name, candidate=cand, data_dir=sw.data_dir, model_dir=sw.model_dir,
                                   split=sw.split_name)
    params, rec = dict(settings.params), settings.protocol
    method = settings.build_method()
    npz = _cfs_path(sw, name, tag, i)
    npz.parent.mkdir(parents=True, exist_ok=True)
    key = json.dumps({"params": params, "ids": sw.ids.tolist(), **_shared_key(sw, name)}, sort_keys=True,
                     default=str)
    cached = npz.with_suffix(".row.json")
    if cached.exists() and json.loads(cached.read_text()).get("key") == key:
        return json.loads(cached.read_text())["row"]
    t0 = time.perf_counter()
    timing = generate(method, lambda idx: sw.split.float_images(sw.rows_idx[idx]), sw.ids, sw.models, settings, npz,
                      sw.device)
    # n_eval = the n tuning inputs: the coverage check expects exactly these ids
    scoring = EvalSettings.resolve({**cfg, "n_eval": len(sw.ids)}, sw.task, name, data_dir=sw.data_dir,
                                   model_dir=sw.model_dir, split=sw.split_name)
    res = evaluate_task(scoring, str(npz), fid_ref=str(sw.ref), device=sw.device, only=sw.wanted, models=sw.models,
                        resampled=True)
    # each metric in every bootstrap resample (one seeded draw of these ids for every setting): the pick's stability
    if res.get("resampled") is not None:  # (a scorer with no bootstrap, e.g. a test's stand-in: no stability)
        write_text(resampled_path(npz), json.dumps({k: v for k, v in res["resampled"].items() if k in sw.wanted}))
    z = np.load(npz)
    row = {"method": name, "setting": i, "overrides": cand,
           "log_snr": round_value(rec["log_snr"]), "t": round_value(rec["t"]) if "t" in rec else None,
           "start_step": rec.get("start_step"), "respacing": rec.get("respacing"),
           "metrics": {k: (None if res["metrics"].get(k) is None else round_value(res["metrics"][k]))
                       for k in sw.wanted},
           "mean_steps": round_value(float(z["steps"].mean())), "sec_per_cf": round_value(timing["sec_per_cf"]),
           # the setting's own wall time, generation and scoring (kept with the cached row: a resumed sweep's
           # `compute_seconds` still counts the trials an earlier run made)
           "seconds": round(time.perf_counter() - t0, 2)}
    write_text(cached, json.dumps({"key": key, "row": row}))
    return row


def _cfs_path(sw: _Sweep, name: str, tag: str, i: int) -> Path:
    """Where setting ``i`` of method ``name``'s sweep stage ``tag`` keeps its counterfactuals."""
    return sw.work / name / f"{tag}-{i}.npz"


def resampled_path(npz: Path) -> Path:
    """Where :func:`_sweep_row` keeps a setting's bootstrap values (beside its counterfactuals ``npz``)."""
    return npz.with_suffix(".resampled.json")


def _stability(sw: _Sweep, name: str, rows: list[dict[str, Any]], rule: dict, tag: str) -> dict[str, Any] | None:
    """:func:`vcebench.protocol.search.pick_agreement` of ``rows`` (one stage of method ``name``'s sweep) from their
    bootstrap values; None where a row has none (a row cached before they were kept)."""
    paths = [resampled_path(_cfs_path(sw, name, tag, r["setting"])) for r in rows]
    if not rows or not all(p.is_file() for p in paths):
        return None
    draws = resampled_draws([json.loads(p.read_text()) for p in paths])
    out = pick_agreement([r["metrics"] for r in rows], draws, rule)
    out["pick"] = rows[out["pick"]]["setting"]
    out["counts"] = {str(r["setting"]): c for r, c in zip(rows, out["counts"]) if c}
    return out


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
    scoring_roles = {"classifier"} | {r for k in wanted for r in known[k].roles}
    method_roles: dict[str, set[str]] = {}
    for name in names:
        if split_method(name)[1] is not None:
            raise ConfigError(f"vcebench tune tunes base methods, not the variant {name!r}")
        params, _ = resolve_method(cfg, task, name, candidate={})
        method_roles[name] = scoring_roles | set(methods.get_method(name, params).roles)
    roles = set().union(scoring_roles, *method_roles.values())
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
                data_dir, model_dir, device, weights, method_roles)
    space_all = (tc.get("space") or {})
    if tc["sampler"] == "tpe":
        return _run_tpe(sw, tc, rule, names, space_all, t_start, log)
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
        "wall_seconds": round(time.perf_counter() - t_start, 1), **compute_seconds(sweep),
        "settings": settings, "picked": picked, "sweep": sweep,
    }


def _run_tpe(sw: _Sweep, tc: dict, rule: dict, names: list[str], space_all: dict, t_start: float,
             log) -> dict[str, Any]:
    """``sampler: tpe`` (docs/protocol.md, "The fair protocol"): per method ``n_trials`` seeded TPE trials on
    the first ``n_search`` validation inputs (more where the space is widened: ``tune.widen``), the best
    ``promote`` by the rule run again on all ``n``, the pick
    made among those; every method explains the same number of validation CFs."""
    from dataclasses import replace

    missing = [k for k in ("n_trials", "n_search", "promote", "dead_fr") if k not in tc]
    if missing:
        raise ConfigError(f"tune.sampler tpe needs config key `tune.{missing[0]}` (config/config.yaml)")
    n_trials, n_search, promote = int(tc["n_trials"]), int(tc["n_search"]), int(tc["promote"])
    dead_fr, seed = float(tc["dead_fr"]), int(tc["seed"])
    if n_search > len(sw.ids):
        raise ConfigError(f"tune.n_search ({n_search}) exceeds tune.n ({len(sw.ids)})")
    small = replace(sw, ids=sw.ids[:n_search], rows_idx=sw.rows_idx[:n_search])
    widen = WidenRule.from_config(tc.get("widen"))
    sweep, picked, settings, summary = [], {}, {}, {}
    for name in names:
        untuned = method_params(sw.cfg, sw.task, name, candidate={})
        space = space_all.get(name) or {}
        key = json.dumps({"task": sw.task.name, "ids": small.ids.tolist(), "space": space, "rule": rule,
                          "untuned": untuned, "seed": seed, **_shared_key(sw, name)}, sort_keys=True, default=str)
        (sw.work / name).mkdir(parents=True, exist_ok=True)
        rows_by_trial: dict[int, dict] = {}

        def evaluate(i, cand, name=name, rows_by_trial=rows_by_trial):
            rows_by_trial[i] = _sweep_row(small, name, i, cand, tag="trial")
            return rows_by_trial[i]["metrics"]

        trials, widenings = search_with_widening(
            evaluate, space, untuned, n_trials=n_trials if space else 1, rule=rule, widen=widen, method=name,
            promote=promote, seed=seed, storage=f"sqlite:///{sw.work / name / 'search.db'}", settings_key=key, log=log)
        rows = []
        for t in trials:  # a resumed trial's row comes from its cached file
            r = rows_by_trial.get(t["trial"]) or _sweep_row(small, name, t["trial"], t["overrides"], tag="trial")
            rows.append({**r, "stage": "search", "n": n_search})
        top = ranked(rows, rule)[:promote]
        full = [{**_sweep_row(sw, name, rows[j]["setting"], rows[j]["overrides"], tag="promoted"),
                 "stage": "promoted", "n": len(sw.ids)} for j in top]
        pick, how = select(full, rule)
        for r in rows + full:
            r["picked"] = r["stage"] == "promoted" and r["setting"] == full[pick]["setting"]
        settings[name] = dict(full[pick]["overrides"])
        dead = [r["setting"] for r in rows if is_dead(r, dead_fr)]
        picked[name] = {"setting": full[pick]["setting"], **how, "metrics": full[pick]["metrics"],
                        "log_snr": full[pick]["log_snr"]}
        summary[name] = {"trials": len(rows), "explained_val_cfs": len(rows) * n_search + len(full) * len(sw.ids),
                         "dead_trials": dead, "dead_share": round_value(len(dead) / max(1, len(rows))),
                         "promoted": [r["setting"] for r in full], "pick": full[pick]["setting"],
                         "fallback": not how["qualified"],
                         # how often a bootstrap of the inputs picks the same: among the promoted at n, and the
                         # best search trial at n_search (the objective's stability at each stage's n)
                         "pick_agreement": _stability(sw, name, full, rule, "promoted"),
                         "search_agreement": _stability(sw, name, rows, rule, "trial"),
                         "front": [rows[i]["setting"] for i in front(rows, rule["minimize"])],
                         "widenings": widenings, **compute_seconds(rows + full)}
        sweep += rows + full
    return {
        "task": sw.task.name, "date": _dt.date.today().isoformat(), "sampler": "tpe",
        "rule": {**rule, "fallback": FALLBACK.format(minimize=rule["minimize"])},
        "validation": {"split": sw.split_name, "n": int(len(sw.ids)), "n_search": n_search,
                       "first_sample_id": int(sw.ids[0]), "last_sample_id": int(sw.ids[-1]),
                       "evaluation_split": _eval_split(sw)},
        "n_settings": n_trials, "n_trials": n_trials, "widen": asdict(widen), "promote": promote,
        "dead_fr": dead_fr, "seed": seed,
        "space": {k: space_all.get(k) or {} for k in names}, "noise_rule": sw.cfg["protocol"]["noise"],
        "models": {r: sw.models.names.get(r, r) for r in sorted(sw.roles)},
        "wall_seconds": round(time.perf_counter() - t_start, 1), **compute_seconds(sweep),
        "settings": settings, "picked": picked, "methods": summary, "sweep": sweep,
    }


def _eval_split(sw: _Sweep) -> str:
    from ..data import eval_split_name

    return eval_split_name(sw.task.dataset)


def write_tuned(task: str, result: dict[str, Any], out: Path, md: Path, merge: bool) -> dict[str, Any]:
    """Writes the tuned file ``out`` (a header saying how it was made, then ``result`` as YAML; ``merge``:
    the other methods' rows of an existing ``out`` kept) and the sweep table ``md``; returns what ``out``
    holds."""
    import yaml

    from ..config.load import read_yaml
    from ..protocol.tune import merge_tuned, sweep_markdown

    if merge and out.exists():  # tune some methods again: keep the others' rows of the existing file
        result = merge_tuned(read_yaml(out), result)
    header = (f"# Written by `vcebench tune --task {task}` ({result['date']}): the settings the default run "
              f"reads (protocol.use_tuned).\n# Picked on {result['validation']['n']} inputs of the "
              f"`{result['validation']['split']}` split, never evaluated; rule and sweep below.\n")
    plain = json.loads(json.dumps(result))  # no YAML anchors for the shared config mappings
    for path, text in ((out, header + yaml.safe_dump(plain, sort_keys=False, width=110)),
                       (md, sweep_markdown(result))):
        write_text(path, text)
    return result
