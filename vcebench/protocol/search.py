"""The sequential search of `vcebench tune` (``tune.sampler: tpe``, docs/protocol.md "The fair protocol") and the
stability of its pick: seeded, resumable TPE trials (:func:`sequential_search`), the rows ranked by the tuning rule
(:func:`ranked`), dead trials (:func:`is_dead`), the validation front (:func:`front`), and how often a bootstrap of
the inputs picks the same trial (:func:`pick_agreement`, :func:`pick_stability`). The rule itself (``select``) and
the candidate settings are :mod:`vcebench.protocol.tune`'s.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from ..config.load import ConfigError
from .tune import metric_value, select, setting_at


def ranked(rows: list[dict[str, Any]], rule: dict[str, Any]) -> list[int]:
    """Row indices best first by ``rule``: the qualified by the objective, then the rest by shortfall."""
    order, left = [], list(range(len(rows)))
    while left:
        i, _ = select([rows[j] for j in left], rule)
        order.append(left.pop(i))
    return order


def is_dead(row: dict[str, Any], dead_fr: float) -> bool:
    """A trial that flips fewer than ``dead_fr`` % of its inputs (or whose FR is missing)."""
    v = metric_value(row["metrics"], "FR")
    return v is None or v < dead_fr


def front(rows: list[dict[str, Any]], quality: str, fidelity: str = "FR_oracle") -> list[int]:
    """Indices of the validation front: the rows no other row beats on both lower ``quality`` and higher
    ``fidelity`` (rows missing either are left out); sorted by quality."""
    pts = [(i, metric_value(r["metrics"], quality), metric_value(r["metrics"], fidelity)) for i, r in enumerate(rows)]
    pts = [p for p in pts if p[1] is not None and p[2] is not None]
    keep = [p for p in pts if not any((q[1] <= p[1] and q[2] >= p[2]) and (q[1] < p[1] or q[2] > p[2])
                                      for q in pts)]
    return [p[0] for p in sorted(keep, key=lambda p: (p[1], -p[2], p[0]))]


def _objective_value(metrics: dict, key: str) -> float:
    v = metric_value(metrics, key)
    return 1e9 if v is None else v  # a trial without the objective (too few successful CFs) ranks last


def _constraints(metrics: dict, rule: dict) -> dict[str, float]:
    """Optuna's constraint values (<= 0 feasible): each bound less the metric (the bound when it is missing)."""
    out = {}
    for k, bound in (rule.get("require") or {}).items():
        v = metric_value(metrics, k)
        out[k] = float(bound) if v is None else float(bound) - v
    return out


def sequential_search(evaluate, space: dict[str, dict], untuned: dict[str, Any], *, n_trials: int, seed: int,
                      method: str, rule: dict[str, Any], storage: str, settings_key: str,
                      n_startup: int = 8, log=None) -> list[dict[str, Any]]:
    """``n_trials`` trials of a seeded TPE search (Optuna's ``TPESampler``, constrained by ``rule``'s bounds)
    over ``space``; trial 0 is the untuned setting. ``evaluate(i, overrides) -> metrics`` scores trial ``i``.

    Resumable: the trials live in the SQLite file ``storage`` (one study per method); a study made under other
    settings (``settings_key``: everything a trial depends on) is refused, and a trial an interruption left
    running is run again. The sampler is re-seeded from (seed, method, trial number) before every trial, so a
    resumed search draws the same trials as an uninterrupted one. Returns one row per trial
    (``{trial, overrides, metrics, point}``, ``point`` on the space's ranges), in trial order."""
    if not space:  # nothing to tune (the pixel attack: its budget is the row's definition)
        return [{"trial": 0, "overrides": {}, "metrics": evaluate(0, {}), "point": {}}]
    try:
        import optuna
    except ImportError as e:  # pragma: no cover - optuna is a dependency (pyproject.toml)
        raise ConfigError("tune.sampler tpe needs the `optuna` package (pip install optuna)") from e
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from optuna.trial import TrialState

    def sampler(number: int):
        return optuna.samplers.TPESampler(
            seed=int(zlib.crc32(f"{seed}/{method}/{number}".encode())), n_startup_trials=n_startup,
            multivariate=True, constant_liar=False)

    study = optuna.create_study(study_name=method, storage=storage, direction="minimize", load_if_exists=True,
                                sampler=sampler(0))
    have = study.user_attrs.get("settings_key")
    if have is None:
        study.set_user_attr("settings_key", settings_key)
    elif have != settings_key:
        raise ConfigError(f"tune: {storage} holds a {method} search made under other settings; delete it or "
                          f"restore the settings it was made with")
    names = list(space)
    dists = {}
    for p in names:
        lo, hi = (float(x) for x in space[p]["range"])
        if space[p]["scale"] == "shift":
            dists[p] = optuna.distributions.IntDistribution(int(lo), int(hi))
        else:
            dists[p] = optuna.distributions.FloatDistribution(lo, hi, log=space[p]["scale"] == "log")
    untuned_point = {p: (0 if space[p]["scale"] == "shift" else 1.0 if space[p]["relative"] else 0.0) for p in names}

    def done():
        return [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        if t.state == TrialState.RUNNING:  # left by an interruption: failed, its number run again
            study.tell(t.number, state=TrialState.FAIL)

    while len(done()) < n_trials:
        number = len(done())
        study.sampler = sampler(number)
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if number == 0 and not waiting:  # the untuned setting first
            study.enqueue_trial(untuned_point, skip_if_exists=False)
        trial = study.ask(dists)
        point = {p: trial.params[p] for p in names}
        cand = {} if number == 0 else setting_at(space, untuned, point, method)
        metrics = evaluate(number, cand)
        for k, c in _constraints(metrics, rule).items():
            trial.set_constraint(k, c)
        trial.set_user_attr("overrides", cand)
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("number_done", number)
        study.tell(trial, _objective_value(metrics, rule["minimize"]))
        if log:
            log(f"{method} trial {number}: {cand or 'untuned'} -> "
                + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    # trials an interruption left RUNNING are dropped: their number is run again above. A study holding more
    # trials than asked (a resumed widening search: its later phases ran before) answers with the first
    # `n_trials` only, so each widening check sees what the fresh run saw (space.search_with_widening)
    return [{"trial": t.user_attrs["number_done"], "overrides": t.user_attrs["overrides"],
             "metrics": t.user_attrs["metrics"], "point": dict(t.params)}
            for t in sorted(done(), key=lambda t: t.number) if t.user_attrs["number_done"] < n_trials]


def pick_agreement(full: list[dict[str, Any]], draws: list[list[dict[str, Any]]], rule: dict[str, Any]) -> dict:
    """How often the pick changes under resampling: ``full`` holds each trial's metrics on all the inputs,
    ``draws`` for each resample each trial's metrics on it (the same resample for every trial: paired). Returns
    the pick on all inputs, the share of the resamples that pick the same trial (``agreement``) and how often
    each trial is picked. An objective whose ``agreement`` is low at the tuning n picks noise."""
    pick, _ = select([{"metrics": m} for m in full], rule)
    counts = np.zeros(len(full), dtype=int)
    for ms in draws:
        counts[select([{"metrics": m} for m in ms], rule)[0]] += 1
    return {"pick": int(pick), "agreement": float(counts[pick] / max(1, len(draws))), "resamples": len(draws),
            "counts": counts.tolist()}


def resampled_draws(resampled: list[dict[str, list]]) -> list[list[dict[str, Any]]]:
    """Per resample, each trial's metrics, from each trial's bootstrap values (``{metric: [value per resample]}``,
    as ``metrics.evaluation.run_metrics(keep_resamples=True)`` returns them: one seeded count matrix over the
    same inputs, so resample b is the same draw for every trial); the shortest metric's resamples are used."""
    b = min((len(v) for r in resampled for v in r.values()), default=0)
    return [[{k: v[j] for k, v in r.items()} for r in resampled] for j in range(b)]


def pick_stability(score, n_trials: int, n_inputs: int, rule: dict[str, Any], *, resamples: int = 200,
                   seed: int = 0) -> dict[str, Any]:
    """:func:`pick_agreement` with ``score(trial, idx) -> metrics`` scoring trial ``trial`` on the inputs ``idx``
    (an int array, with repeats): ``resamples`` bootstrap draws of the ``n_inputs`` inputs."""
    rng = np.random.default_rng(seed)
    full = np.arange(n_inputs)
    draws = [rng.integers(0, n_inputs, n_inputs) for _ in range(resamples)]
    return pick_agreement([score(i, full) for i in range(n_trials)],
                          [[score(i, idx) for i in range(n_trials)] for idx in draws], rule)
