# over 400 lines: left whole while #59 item 1 (settings resolution) rewrites it; split by duty after that
"""`vcebench tune`: the same tuning effort for every method, on validation inputs that are never evaluated.

For each method of the task, ``tune.n_settings`` settings run on the first ``tune.n`` inputs of the tuning
split (``vcebench.data.tune_split_name``: synthetic ``val``; never the evaluation split). Setting 0 is the
method's untuned configuration; the others are a seeded Latin hypercube over the method's ``tune.space``
(config): ``{param: {range: [low, high], scale: linear | log, relative: bool}}`` (``relative``: a factor on
the untuned value, element-wise for lists such as the DDPM guidance ``scales``). Every setting runs under the
noise protocol (``log_snr_offset`` moves the starting log-SNR of FiRe and of a DDPM alike) and the same
per-sample noise streams, and is scored on ``tune.metrics``.

``tune.sampler: tpe`` (config/config.yaml; docs/protocol.md "The fair protocol") replaces the hypercube with
:func:`sequential_search`: ``n_trials`` seeded, resumable TPE trials per method on the first ``n_search``
inputs over the spaces of the search-space rule (:func:`vcebench.protocol.space.rule_space`, widened where a pick
touches a soft bound: :func:`vcebench.protocol.space.search_with_widening`), the best ``promote`` explained again on
all ``n``, the pick made among those; :func:`pick_stability` measures an objective's stability.

The pick follows ``tune.select``, fixed in the config before the sweep: the lowest ``minimize`` metric among
the settings that meet every ``require`` bound (value >= bound). When none does, the fallback is stated in
the output: the setting with the smallest total shortfall below the bounds (in the metrics' units), then the
lowest ``minimize``. The result (``config/tuned/<task>.yaml``: the picked settings, the rule, the split, n,
the date, the whole sweep table) is what the default run reads (``protocol.use_tuned``).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from ..config.load import ConfigError
from ..config.tasks import split_method

FALLBACK = "no setting meets every bound: smallest total shortfall below the bounds, then lowest {minimize}"
# odd dilation kernels (2 r + 1) by method and param; FiRe's `dilation` is a radius r
ODD_KERNELS = frozenset({("fastdime", "mask_dilation"), ("fastdime2", "mask_dilation"),
                         ("fastdime2plus", "mask_dilation"), ("maskdime", "dilation"), ("ace", "dilation")})
FRACTIONS = frozenset({"rho", "k", "mask_threshold", "inpaint"})  # shares of the image or of a range: <= 1


def round_value(v: float | None) -> float | None:
    """``v`` to 4 significant digits (how the tuned file and the sweep table store numbers); None stays None (a
    row without a noise level, e.g. the pixel attack, has no log-SNR)."""
    return None if v is None else float(f"{v:.4g}")


def _scaled(u: float, lo: float, hi: float, scale: str) -> float:
    if scale == "log":
        if lo <= 0 or hi <= 0:
            raise ConfigError(f"tune.space: a log range must be positive, got [{lo}, {hi}]")
        return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return lo + u * (hi - lo)


def _value_at(spec: dict, name: str, u: float, untuned: dict[str, Any], method: str) -> Any:
    """The absolute value of ``name`` at ``u`` (a point of the spec's range: a factor, an absolute value, or an
    integer shift for ``scale: shift``)."""
    if spec["scale"] == "shift":
        if name not in untuned or isinstance(untuned[name], bool) or not isinstance(untuned[name], int):
            raise ConfigError(f"tune.space.{method}.{name}: scale shift needs an integer `{name}` of {method}")
        base, step = int(untuned[name]), int(round(u))
        if (method, name) in ODD_KERNELS:  # a kernel 2 r + 1 moves by its radius
            return 2 * max(0, (base - 1) // 2 + step) + 1
        return max(0, base + step)
    if not spec["relative"]:
        return round_value(u)
    if name not in untuned:
        raise ConfigError(f"tune.space.{method}.{name}: relative, but {method} has no `{name}`")
    base = untuned[name]
    if isinstance(base, (list, tuple)):
        return [round_value(float(b) * u) for b in base]
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise ConfigError(f"tune.space.{method}.{name}: relative needs a number, got {base!r}")
    v = int(round(base * u)) if isinstance(base, int) else round_value(base * u)
    return min(v, 1.0) if name in FRACTIONS else v


def setting_at(space: dict[str, dict], untuned: dict[str, Any], point: dict[str, float],
               method: str) -> dict[str, Any]:
    """The absolute parameter values of a point of ``space`` (``{param: u}``, u in the spec's range)."""
    return {name: _value_at(space[name], name, float(point[name]), untuned, method) for name in space}


def candidate_settings(space: dict[str, dict], untuned: dict[str, Any], n: int, seed: int,
                       method: str) -> list[dict[str, Any]]:
    """``n`` settings: ``{}`` (the untuned configuration) and ``n - 1`` points of a Latin hypercube over
    ``space`` (seeded by ``seed`` and the method name), as absolute parameter values (``sampler: lhs``)."""
    out: list[dict[str, Any]] = [{}]
    m = n - 1
    if m <= 0 or not space:
        return out[:max(1, n)]
    rng = np.random.default_rng([int(seed), zlib.crc32(method.encode())])
    names = list(space)
    u = np.stack([(rng.permutation(m) + rng.uniform(size=m)) / m for _ in names], axis=1)  # m x d strata
    for row in u:
        point = {}
        for name, ui in zip(names, row):
            lo, hi = (float(x) for x in space[name]["range"])
            point[name] = _scaled(float(ui), lo, hi, "linear" if space[name]["scale"] == "shift"
                                  else space[name]["scale"])
        out.append(setting_at(space, untuned, point, method))
    return out


def _value(metrics: dict, key: str) -> float | None:
    v = metrics.get(key)
    return float(v) if v is not None and math.isfinite(float(v)) else None


def select(rows: list[dict[str, Any]], rule: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Index of the picked row (each row has ``metrics``) and how it was picked, by ``rule``
    (``{minimize: M, require: {metric: lower bound}}``; ties: the earlier setting)."""
    if not rows:
        raise ValueError("no settings to select from")
    key, req = rule["minimize"], dict(rule.get("require") or {})

    def objective(i: int) -> float:
        v = _value(rows[i]["metrics"], key)
        return v if v is not None else math.inf

    def shortfall(i: int) -> float:
        total = 0.0
        for k, bound in req.items():
            v = _value(rows[i]["metrics"], k)
            total += float(bound) if v is None else max(0.0, float(bound) - v)
        return total

    qualified = [i for i in range(len(rows)) if shortfall(i) == 0.0]
    if qualified:
        pick = min(qualified, key=lambda i: (objective(i), i))
        return pick, {"qualified": True, "how": f"lowest {key} among the settings meeting every bound",
                      "n_qualified": len(qualified)}
    pick = min(range(len(rows)), key=lambda i: (shortfall(i), objective(i), i))
    return pick, {"qualified": False, "how": FALLBACK.format(minimize=key), "n_qualified": 0,
                  "shortfall": shortfall(pick)}


def tune_methods(cfg: dict) -> list[str]:
    """The base methods of config key ``methods`` (variants such as ``_paper`` rows, imported results and the
    reference rows such as ``input``, ``registry.MethodSpec.baseline``, are not tuned)."""
    from ..config.tasks import external_name, is_baseline

    out: list[str] = []
    for m in cfg["methods"]:
        if external_name(str(m)):
            continue
        base = split_method(m)[0]
        if base not in out and not is_baseline(base):
            out.append(base)
    return out


def merge_tuned(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` (some methods tuned again) with the other methods' settings, picks and sweep rows of ``old``;
    refuses to mix sweeps made under a different rule, split, n or number of settings."""
    for key in ("task", "rule", "validation", "n_settings", "seed", "noise_rule", "sampler", "widen"):
        if old.get(key) != new.get(key):
            raise ConfigError(f"cannot merge tune results: `{key}` differs ({old.get(key)!r} vs {new.get(key)!r}); "
                              f"tune every method again")
    methods_new = set(new["settings"])
    out = dict(new)
    out["settings"] = {**{m: v for m, v in old["settings"].items() if m not in methods_new}, **new["settings"]}
    out["picked"] = {**{m: v for m, v in old["picked"].items() if m not in methods_new}, **new["picked"]}
    out["space"] = {**old.get("space", {}), **new.get("space", {})}
    if "methods" in new:
        out["methods"] = {**{m: v for m, v in old.get("methods", {}).items() if m not in methods_new},
                          **new["methods"]}
    out["sweep"] = [r for r in old["sweep"] if r["method"] not in methods_new] + new["sweep"]
    out["wall_seconds"] = round(float(old.get("wall_seconds", 0)) + float(new["wall_seconds"]), 1)
    return out


def sweep_markdown(result: dict[str, Any]) -> str:
    """The sweep table of a tuned file as Markdown (picked rows in bold); a ``sampler: tpe`` file adds each
    method's trials, explained validation CFs, dead trials (FR < ``dead_fr``) and validation front."""
    keys = list(next(iter(result["sweep"]), {}).get("metrics", {}))
    tpe = result.get("sampler") == "tpe"
    head = ["method", *(["stage", "n"] if tpe else []), "setting", "overrides", "log-SNR", "t / start", *keys,
            "steps", "s/CF", "picked"]
    size = (f"{result['n_trials']} TPE trials per method on {result['validation']['n_search']} inputs, the best "
            f"{result['promote']} again on {result['validation']['n']}" if tpe
            else f"{result['n_settings']} settings per method")
    lines = [f"# `vcebench tune` on {result['task']} ({result['date']})", "",
             f"{result['validation']['n']} inputs of the `{result['validation']['split']}` split (evaluation: "
             f"`{result['validation']['evaluation_split']}`), {size}, noise "
             f"rule `{result['noise_rule']}`, {result['wall_seconds']:.0f} s.", "",
             f"Rule: lowest {result['rule']['minimize']} subject to "
             + (", ".join(f"{k} >= {v}" for k, v in (result['rule'].get('require') or {}).items()) or "nothing")
             + f"; else {result['rule']['fallback']}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["sweep"]:
        ov = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or "untuned"
        where = r["t"] if r["t"] is not None else f"{r['start_step']} of {r['respacing']}"
        cells = [r["method"], *([r["stage"], str(r["n"])] if tpe else []), str(r["setting"]), ov,
                 str(r["log_snr"]), str(where),
                 *("-" if r["metrics"][k] is None else str(r["metrics"][k]) for k in keys),
                 str(r["mean_steps"]), str(r["sec_per_cf"]), "**yes**" if r["picked"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| method | picked | qualified | how |", "|---|---|---|---|"]
    for m, p in result["picked"].items():
        lines.append(f"| {m} | {p['setting']} | {p['qualified']} | {p['how']} |")
    if tpe:
        q = result["rule"]["minimize"]
        lines += ["", f"## Per method: trials, explained validation CFs, dead trials (FR < {result['dead_fr']} %), "
                  f"validation front ({q} vs FR_oracle, trials at n = {result['validation']['n_search']})", "",
                  "Agreement: the share of bootstrap resamples of the validation inputs (the same draws for every "
                  "trial) whose pick is the pick, among the promoted trials (at n = "
                  f"{result['validation']['n']}) and among all search trials (at n = "
                  f"{result['validation']['n_search']}).", "",
                  "| method | trials | explained val CFs | dead trials | dead share | promoted | pick | fallback "
                  f"| agreement (promoted; search) | front ({q}, FR_oracle) |", "|" + "---|" * 10]
        for m, s in result["methods"].items():
            rows = {r["setting"]: r for r in result["sweep"] if r["method"] == m and r.get("stage") == "search"}
            pts = "; ".join(f"#{i} ({rows[i]['metrics'].get(q)}, {rows[i]['metrics'].get('FR_oracle')})"
                            for i in s["front"])
            agree = "; ".join("-" if not s.get(k) else f"{s[k]['agreement']:.2f} (#{s[k]['pick']})"
                              for k in ("pick_agreement", "search_agreement"))
            lines.append(f"| {m} | {s['trials']} | {s['explained_val_cfs']} | "
                         f"{', '.join(map(str, s['dead_trials'])) or '-'} | {s['dead_share']} | "
                         f"{', '.join(map(str, s['promoted']))} | {s['pick']} | {s['fallback']} | {agree} "
                         f"| {pts or '-'} |")
        wide = [(m, w) for m, s in result["methods"].items() for w in s.get("widenings") or []]
        if wide:  # the widening rule (vcebench/protocol/space.py): a best trial at a soft bound
            lines += ["", "## Widened spaces", "", "| method | after trials | best trial | sides | ranges |",
                      "|---|---|---|---|---|"]
            lines += [f"| {m} | {w['after_trials']} | {w['trial']} | {', '.join(w['sides'])} | "
                      + ", ".join(f"{p} {r}" for p, r in w["space"].items()) + " |" for m, w in wide]
    return "\n".join(lines) + "\n"


# --- the sequential search (sampler: tpe) ---------------------------------------------------------------
def ranked(rows: list[dict[str, Any]], rule: dict[str, Any]) -> list[int]:
    """Row indices best first by ``rule``: the qualified by the objective, then the rest by shortfall."""
    order, left = [], list(range(len(rows)))
    while left:
        i, _ = select([rows[j] for j in left], rule)
        order.append(left.pop(i))
    return order


def is_dead(row: dict[str, Any], dead_fr: float) -> bool:
    """A trial that flips fewer than ``dead_fr`` % of its inputs (or whose FR is missing)."""
    v = _value(row["metrics"], "FR")
    return v is None or v < dead_fr


def front(rows: list[dict[str, Any]], quality: str, fidelity: str = "FR_oracle") -> list[int]:
    """Indices of the validation front: the rows no other row beats on both lower ``quality`` and higher
    ``fidelity`` (rows missing either are left out); sorted by quality."""
    pts = [(i, _value(r["metrics"], quality), _value(r["metrics"], fidelity)) for i, r in enumerate(rows)]
    pts = [p for p in pts if p[1] is not None and p[2] is not None]
    keep = [p for p in pts if not any((q[1] <= p[1] and q[2] >= p[2]) and (q[1] < p[1] or q[2] > p[2])
                                      for q in pts)]
    return [p[0] for p in sorted(keep, key=lambda p: (p[1], -p[2], p[0]))]


def _objective_value(metrics: dict, key: str) -> float:
    v = _value(metrics, key)
    return 1e9 if v is None else v  # a trial without the objective (too few successful CFs) ranks last


def _constraints(metrics: dict, rule: dict) -> dict[str, float]:
    """Optuna's constraint values (<= 0 feasible): each bound less the metric (the bound when it is missing)."""
    out = {}
    for k, bound in (rule.get("require") or {}).items():
        v = _value(metrics, k)
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
    # trials an interruption left RUNNING are dropped: their number is run again above
    return [{"trial": t.user_attrs["number_done"], "overrides": t.user_attrs["overrides"],
             "metrics": t.user_attrs["metrics"], "point": dict(t.params)}
            for t in sorted(done(), key=lambda t: t.number)]


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
