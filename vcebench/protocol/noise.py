"""The comparison protocol: every method's starting noise as a log-SNR, under ONE noise rule.

FiRe noises its input to ``z_t = (1 - t) x + t eps`` (flow time ``t``): SNR = ((1 - t) / t)^2. The DDPM
baselines noise it to respaced step ``start_step`` of their own schedule: SNR = abar / (1 - abar). Both are
written as ``log_snr = ln SNR``.

Each method's config gives its paper noise level at the papers' resolution (``protocol.reference_resolution``,
128 px, CelebA): FiRe ``t`` (0.4), a DDPM baseline ``ref_start_step`` of ``ref_respacing`` (60 of 200) of the
DDPM's own ``alphas_cumprod``. ``protocol.noise`` says how a run's noise follows from it:

- ``paper``: the paper's log-SNR as given (FiRe t = 0.4; a DDPM the SNR of 60 of 200).
- ``snr_matched``: the log-SNR shift of *simple diffusion* (Hoogeboom et al. 2023) for the task's resolution,
  the same for every method: ``log_snr += 2 ln(reference_resolution / resolution)``. At 32 px that moves
  FiRe's t = 0.4 to t ~ 0.14 and the DDPM's 60 of 200 to about 9 of 100.

Both add the method's ``log_snr_offset`` (0 unless tuned). A DDPM baseline then starts at the respaced step
of ITS ``respacing`` whose SNR is closest to that target, so a variant that only changes ``respacing``
keeps the starting noise and changes only the number of guided steps. A method's ``protocol`` key
(e.g. ``protocol: {noise: paper, use_tuned: false}`` in a ``paper`` variant) overrides the rule for it.

:func:`resolve_method` turns the merged config of a method (``vcebench.config.tasks.method_params``) into the
method's own hyperparameters plus a record of how they were made (written to metrics.json).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..config.bounds import Bound
from ..config.load import ConfigError
from ..config.tasks import Task, get_task, method_layers, method_params, split_method
from ..registry import method_noise

NOISE_RULES = ("paper", "snr_matched")
# keys of a method's config consumed here (never passed to the method's dataclass), with their types (checked
# when the config is loaded: protocol.settings), and the method's own ``protocol`` mapping
PROTOCOL_SETTINGS = {"log_snr_offset": float, "ref_start_step": int, "ref_respacing": int, "warmup_fraction": float,
                     "guided_steps": int | None,  # null: the respacing sets the trajectory (paper_protocol.yaml)
                     "chain_steps": int | None}  # ACE: its filter's steps held, the respacing derived (null: fixed)
RETRY_RULES = ("per_attempt", "shared")  # protocol.retries (docs/protocol.md section 6, "One rule for retries")
# protocol.respacing (docs/protocol.md section 6): which respacing with the asked start step a derived trajectory
# takes, the one whose start lies closest to the target noise (the default) or the smallest (before issue #62)
RESPACING_RULES = ("smallest", "closest")
# their ranges (vcebench.config.bounds), checked in every config layer that sets them
PROTOCOL_BOUNDS = {"log_snr_offset": Bound(-20, 20), "ref_start_step": Bound(1, 10000),
                   "ref_respacing": Bound(1, 10000), "warmup_fraction": Bound(0, 1), "guided_steps": Bound(1, 10000),
                   "chain_steps": Bound(1, 10000)}
PROTOCOL_KEYS = ("protocol", *PROTOCOL_SETTINGS)
# the DDPM schedule assumed when a dataset's config names none (DiME's CelebA DDPM: guided-diffusion's
# linear betas scaled by 1000 / T, T = 500)
DEFAULT_DDPM_SCHEDULE = {"num_train_timesteps": 500, "beta_start": 2e-4, "beta_end": 0.04, "beta_schedule": "linear"}


def flow_log_snr(t: float) -> float:
    """log-SNR of FiRe's ``z_t = (1 - t) x + t eps``."""
    if not 0 < t < 1:
        raise ConfigError(f"FiRe's noise level t must be in (0, 1), got {t}")
    return 2.0 * math.log((1.0 - t) / t)


def flow_t(log_snr: float) -> float:
    """Inverse of :func:`flow_log_snr`: ``t = 1 / (1 + sqrt(SNR))``."""
    return 1.0 / (1.0 + math.exp(0.5 * log_snr))


def ddpm_log_snr(alphas_cumprod: np.ndarray) -> np.ndarray:
    a = np.asarray(alphas_cumprod, dtype=np.float64)
    return np.log(a) - np.log1p(-a)


def respaced_log_snr(alphas_cumprod: np.ndarray, respacing: int) -> tuple[np.ndarray, np.ndarray]:
    """(train timestep, log-SNR) of every respaced step of a ``respacing``-step trajectory."""
    ts = _respaced_timesteps(len(alphas_cumprod), int(respacing))
    return ts.copy(), ddpm_log_snr(np.asarray(alphas_cumprod)[ts])


@functools.cache
def _respaced_timesteps(num_train_timesteps: int, respacing: int) -> np.ndarray:
    """``vcebench.models.generative.schedule.space_timesteps`` as a read-only array, once per (T, respacing) in a
    process: the equal-compute search (:func:`respacing_for_steps`) asks for each respacing of the schedule in turn."""
    from ..models.generative.schedule import space_timesteps

    ts = np.asarray(space_timesteps(num_train_timesteps, respacing), dtype=np.int64)
    ts.flags.writeable = False
    return ts


# respacing_for_steps's answers by (schedule bytes, steps, target, rule): checking a config resolves every task x method
# and each search walks up to T respacings of the train schedule (seconds per `snakemake -n` uncached)
_RESPACINGS: dict[tuple[bytes, int, float, str], int] = {}


def respacing_for_steps(alphas_cumprod: np.ndarray, guided_steps: int, target_log_snr: float,
                        rule: str = "smallest") -> int:
    """The equal-compute rule's trajectory (docs/protocol.md): among the respacings whose start step at
    ``target_log_snr`` (:func:`nearest_start_step`) is ``guided_steps``, the smallest (``rule`` ``smallest``)
    or the one whose start lies closest to the target in log-SNR (``closest``; ties: fewer steps), so that a
    searched noise offset moves the start by what it says, not by the grid of the smallest such respacing.
    Where no respacing of the train schedule reaches ``guided_steps`` (little noise: fewer train timesteps below
    the target than guided steps), the one whose start step comes closest (ties: fewer steps). Computed once
    per schedule, steps, target and rule in a process."""
    g = int(guided_steps)
    if g < 1:
        raise ConfigError(f"guided_steps must be >= 1, got {guided_steps}")
    if rule not in RESPACING_RULES:
        raise ConfigError(f"protocol.respacing must be one of {list(RESPACING_RULES)}, got {rule!r}")
    abar = np.asarray(alphas_cumprod, dtype=np.float64)
    key = (abar.tobytes(), g, float(target_log_snr), rule)
    if key not in _RESPACINGS:
        _RESPACINGS[key] = _respacing_for_steps(abar, g, float(target_log_snr), rule == "closest")
    return _RESPACINGS[key]


def _respacing_for_steps(alphas_cumprod: np.ndarray, g: int, target_log_snr: float, closest: bool) -> int:
    T = len(alphas_cumprod)
    best, best_gap = 2, (math.inf, math.inf)
    for r in range(max(2, g + 1), T + 1):
        _, lam = respaced_log_snr(alphas_cumprod, r)
        start = _nearest_step(lam, target_log_snr)
        gap = (abs(start - g), abs(float(lam[start]) - target_log_snr) if closest else 0.0)
        if gap < best_gap:
            best, best_gap = r, gap
        if gap[0] == 0 and not closest:
            break
    return best


def nearest_start_step(alphas_cumprod: np.ndarray, respacing: int, target_log_snr: float) -> int:
    """The respaced step in [1, respacing) whose log-SNR is closest to ``target_log_snr`` (ties: fewer steps)."""
    if int(respacing) < 2:
        raise ConfigError(f"respacing must be >= 2 to start at a step >= 1, got {respacing}")
    return _nearest_step(respaced_log_snr(alphas_cumprod, respacing)[1], target_log_snr)


def _nearest_step(lam: np.ndarray, target_log_snr: float) -> int:
    """The step in [1, len(lam)) whose log-SNR ``lam`` is closest to the target (ties: fewer steps)."""
    return int(np.argmin(np.abs(lam[1:] - target_log_snr))) + 1  # argmin: the first (smallest step) of equal gaps


# ddpm_schedule's results by (dataset, DDPM settings): checking a config resolves every task x method, each
# DDPM method asks for its dataset's schedule, and the answer depends on those settings only
_SCHEDULES: dict[tuple[str, str], tuple[np.ndarray, str]] = {}


def ddpm_schedule(cfg: dict, dataset: str) -> tuple[np.ndarray, str]:
    """(alphas_cumprod float64, where it came from) of ``dataset``'s DDPM: the scheduler of canonical weights
    (``models.<dataset>.ddpm.weights``/scheduler/) when that folder exists, else the schedule its released
    format states, else the training settings of ``models.<dataset>.ddpm``, else
    :data:`DEFAULT_DDPM_SCHEDULE`. Computed once per dataset and settings in a process."""
    spec = dict(((cfg.get("models") or {}).get(dataset) or {}).get("ddpm") or {})
    key = (dataset, json.dumps(spec, sort_keys=True, default=str))
    if key not in _SCHEDULES:
        _SCHEDULES[key] = _ddpm_schedule(spec, dataset)
    abar, source = _SCHEDULES[key]
    return abar.copy(), source


def _ddpm_schedule(spec: dict, dataset: str) -> tuple[np.ndarray, str]:
    from ..models.generative.schedule import schedule_alphas_cumprod
    from ..models.released.schedule import released_schedule

    weights = spec.get("weights")
    if weights and (Path(weights) / "scheduler" / "scheduler_config.json").exists():
        return schedule_alphas_cumprod(scheduler_dir=Path(weights) / "scheduler"), f"{weights}/scheduler"
    released = released_schedule(spec, dataset) if weights else None
    if released is not None:
        return released
    if weights or not spec:
        return (schedule_alphas_cumprod(DEFAULT_DDPM_SCHEDULE),
                "assumed: linear betas 2e-4..0.04, T = 500 (DiME CelebA); no scheduler config found")
    return schedule_alphas_cumprod(spec), f"config models.{dataset}.ddpm"


def _protocol(cfg: dict, params: dict) -> dict:
    proto = {**cfg["protocol"], **(params.get("protocol") or {})}
    rule = proto["noise"]
    if rule not in NOISE_RULES:
        raise ConfigError(f"protocol.noise must be one of {list(NOISE_RULES)}, got {rule!r}")
    if proto["retries"] not in RETRY_RULES:
        raise ConfigError(f"protocol.retries must be one of {list(RETRY_RULES)}, got {proto['retries']!r}")
    if proto["respacing"] not in RESPACING_RULES:
        raise ConfigError(f"protocol.respacing must be one of {list(RESPACING_RULES)}, got {proto['respacing']!r}")
    return proto


def attempts(params: dict[str, Any]) -> int:
    """How many trajectories a method may run per input: one per retry scale of a DDPM baseline (DiME's
    ``main.py`` schedule: ``scales`` in turn until the input flips), else one (FiRe, ACE)."""
    scales = params.get("scales")
    return len(scales) if isinstance(scales, (list, tuple)) and scales else 1


def share_budget(params: dict[str, Any], base: str, record: dict[str, Any]) -> None:
    """``protocol.retries: shared`` (docs/protocol.md section 6): the retries count against the same budget,
    so a method with ``a`` attempts gets ``floor(budget / a)`` guided updates per attempt (at least 1); in place
    on ``params`` (its update key: :data:`vcebench.protocol.fair.UPDATE_KEY`), recorded in ``record``."""
    from .fair import UPDATE_KEY

    key, a = UPDATE_KEY.get(base), attempts(params)
    record.update(retries="shared", attempts=a)
    if key is None or params.get(key) is None:
        return
    budget = int(params[key])
    params[key] = max(1, budget // a)
    record.update(update_budget=budget, updates_per_attempt=params[key])


def _param(params: dict[str, Any], key: str, task: Task, method: str) -> Any:
    """A hyperparameter the noise rule reads (its value: config ``method_defaults`` and the layers over it)."""
    if key not in params:
        raise ConfigError(f"{task.name}/{method}: the noise protocol needs `{key}` (config key "
                          f"`method_defaults.{split_method(method)[0]}.{key}`)")
    return params[key]


def resolution_shift(cfg: dict, dataset: str, rule: str, reference_resolution: int) -> tuple[float, int]:
    """(log-SNR shift, the task's resolution): ``2 ln(reference / resolution)`` under ``snr_matched``, else 0."""
    res = ((cfg.get("datasets") or {}).get(dataset) or {}).get("resolution")
    if res is None:
        raise ConfigError(f"config key `datasets.{dataset}.resolution` is needed by the noise protocol")
    return (2.0 * math.log(reference_resolution / int(res)) if rule == "snr_matched" else 0.0), int(res)


def resolve_method(cfg: dict, task: Task | str, method: str,
                   candidate: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the method's hyperparameters, record): the merged config of ``method`` on ``task`` with the noise rule
    applied (FiRe's ``t``, a DDPM's ``start_step``, FastDiME's ``warmup_steps`` derived) and the protocol keys
    removed (``candidate``: a `vcebench tune` setting in place of the tuned one). The record (metrics.json
    ``protocol``) says how: rule, resolution shift, offset, reference and
    resulting log-SNR, the tuned file when used, the config layers merged, the final parameters."""
    task = get_task(cfg, task) if isinstance(task, str) else task
    base, variant = split_method(method)
    params = method_params(cfg, task, method, candidate)
    proto = _protocol(cfg, params)
    rule = proto["noise"]
    shared = proto["retries"] == "shared"
    ref_res = int(proto["reference_resolution"])
    shift, res = resolution_shift(cfg, task.dataset, rule, ref_res)
    noise = method_noise(base)  # registry.MethodSpec.noise: FiRe's flow time, a DDPM's start step, or none
    offset = float(_param(params, "log_snr_offset", task, method)) if noise else 0.0  # no noise, no offset
    layers = [name for name, _ in method_layers(cfg, task, method, candidate)]
    tuned = next((n.split(":", 1)[1] for n in layers if n.startswith("tuned:")), None)
    record: dict[str, Any] = {
        "method": method, "base_method": base, "variant": variant, "noise_rule": rule,
        "reference_resolution": ref_res, "resolution": res, "log_snr_shift": shift, "log_snr_offset": offset,
        "tuned": tuned is not None, "tuned_file": tuned,
        "tuned_date": ((cfg.get("tuned") or {}).get(task.name) or {}).get("date") if tuned else None,
        "layers": layers}
    if shared:
        params = dict(params)
        share_budget(params, base, record)
    out = {k: v for k, v in params.items() if k not in PROTOCOL_KEYS}
    if "start_step" in params and noise == "ddpm":
        raise ConfigError(f"{task.name}/{method}: `start_step` is derived from the noise protocol (config "
                          f"`protocol.noise`); set `log_snr_offset` to move it, `respacing` for the trajectory")
    if noise == "flow":
        t_ref = float(_param(params, "t", task, method))
        lam_ref = flow_log_snr(t_ref)
        lam = lam_ref + shift + offset
        out["t"] = flow_t(lam)
        record.update(log_snr_reference=lam_ref, log_snr_target=lam, log_snr=lam, t_reference=t_ref,
                      t=out["t"])
    elif noise == "ddpm":
        _apply_ddpm_rule(cfg, task, method, params, (shift, offset), proto["respacing"], out, record)
    if "log_snr" not in record:  # a method that adds no noise (the do-nothing `input` row)
        record.update(log_snr=None, snr=None)
    else:
        record["snr"] = math.exp(record["log_snr"])
    record["params"] = out
    return out, record


def _apply_ddpm_rule(cfg: dict, task: Task, method: str, params: dict[str, Any], shift_offset: tuple[float, float],
                     respacing_rule: str, out: dict[str, Any], record: dict[str, Any]) -> None:
    """A DDPM's ``start_step`` (and ``warmup_steps`` from ``warmup_fraction``) at the reference log-SNR moved
    by ``shift_offset`` (the resolution shift, the offset), into ``out``, a derived trajectory by
    ``respacing_rule`` (:func:`respacing_for_steps`); how, into ``record``."""
    shift, offset = shift_offset
    abar, source = ddpm_schedule(cfg, task.dataset)
    ref_r, ref_s = (int(_param(params, k, task, method)) for k in ("ref_respacing", "ref_start_step"))
    if not 1 <= ref_s < ref_r:
        raise ConfigError(f"{task.name}/{method}: ref_start_step must be in [1, ref_respacing), got "
                          f"{ref_s} of {ref_r}")
    _, lam_ref_all = respaced_log_snr(abar, ref_r)
    lam_ref = float(lam_ref_all[ref_s])
    target = lam_ref + shift + offset
    if params.get("guided_steps") is not None:  # the equal-compute rule: the trajectory follows the step count
        respacing = respacing_for_steps(abar, int(params["guided_steps"]), target, respacing_rule)
        out["respacing"] = respacing
        record["guided_steps"] = int(params["guided_steps"])
    elif params.get("chain_steps") is not None:  # ACE: its filter's length held, every start reachable
        respacing = respacing_for_steps(abar, int(params["chain_steps"]), target, respacing_rule)
        out["respacing"] = respacing
        record["chain_steps"] = int(params["chain_steps"])
    else:
        respacing = int(_param(params, "respacing", task, method))
    start = nearest_start_step(abar, respacing, target)
    ts, lam_all = respaced_log_snr(abar, respacing)
    out["start_step"] = start
    if "warmup_fraction" in params:
        if "warmup_steps" in params:
            raise ConfigError(f"{task.name}/{method}: set `warmup_fraction` (of the start step), not "
                              f"`warmup_steps`, under the noise protocol")
        out["warmup_steps"] = max(1, int(float(params["warmup_fraction"]) * start + 0.5))
    record.update(log_snr_reference=lam_ref, log_snr_target=target, log_snr=float(lam_all[start]),
                  reference_start=f"{ref_s} of {ref_r}", start_step=start, respacing=respacing,
                  train_timestep=int(ts[start]), schedule=source)


def build_method(cfg: dict, task: Task | str, method: str):
    """``methods.get_method`` with the resolved hyperparameters; returns (method, record)."""
    import methods

    task = get_task(cfg, task) if isinstance(task, str) else task
    params, record = resolve_method(cfg, task, method)
    return methods.get_method(method, params, task=task, config=cfg), record


def check_ddpm_schedule(cfg: dict, dataset: str, alphas_cumprod) -> None:
    """The loaded DDPM's schedule must be the one the start step was derived from."""
    expected, source = ddpm_schedule(cfg, dataset)
    got = np.asarray(alphas_cumprod, dtype=np.float64)
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-6, atol=1e-9):
        raise ConfigError(f"the {dataset} DDPM's alphas_cumprod differ from the schedule the noise protocol used "
                          f"({source}); set `models.{dataset}.ddpm` to the loaded network's schedule")
