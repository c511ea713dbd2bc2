"""`vcebench tune`: the same tuning effort for every method, on validation inputs that are never evaluated.

For each method of the task, ``tune.n_settings`` settings run on the first ``tune.n`` inputs of the tuning
split (``vcebench.data.tune_split_name``: synthetic ``val``; never the evaluation split). Setting 0 is the
method's untuned configuration; the others are a seeded Latin hypercube over the method's ``tune.space``
(config): ``{param: {range: [low, high], scale: linear | log, relative: bool}}`` (``relative``: a factor on
the untuned value, element-wise for lists such as the DDPM guidance ``scales``). Every setting runs under the
noise protocol (``log_snr_offset`` moves the starting log-SNR of FiRe and of a DDPM alike) and the same
per-sample noise streams, and is scored on ``tune.metrics``.

``tune.sampler: tpe`` (config/config.yaml; docs/protocol.md "The fair protocol") replaces the hypercube with
:func:`vcebench.protocol.search.sequential_search`: ``n_trials`` seeded, resumable TPE trials per method on the
first ``n_search`` inputs over the spaces of the search-space rule (:func:`vcebench.protocol.space.rule_space`,
widened where a pick touches a soft bound: :func:`vcebench.protocol.space.search_with_widening`), the best
``promote`` explained again on all ``n``, the pick made among those; :func:`vcebench.protocol.search.pick_stability`
measures an objective's stability.

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


def metric_value(metrics: dict, key: str) -> float | None:
    """``metrics[key]`` as a float, None when it is missing or not finite."""
    v = metrics.get(key)
    return float(v) if v is not None and math.isfinite(float(v)) else None


def select(rows: list[dict[str, Any]], rule: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Index of the picked row (each row has ``metrics``) and how it was picked, by ``rule``
    (``{minimize: M, require: {metric: lower bound}}``; ties: the earlier setting)."""
    if not rows:
        raise ValueError("no settings to select from")
    key, req = rule["minimize"], dict(rule.get("require") or {})

    def objective(i: int) -> float:
        v = metric_value(rows[i]["metrics"], key)
        return v if v is not None else math.inf

    def shortfall(i: int) -> float:
        total = 0.0
        for k, bound in req.items():
            v = metric_value(rows[i]["metrics"], k)
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
    out["models"] = {**old.get("models", {}), **new.get("models", {})}  # the networks every kept row ran on
    if "methods" in new:
        out["methods"] = {**{m: v for m, v in old.get("methods", {}).items() if m not in methods_new},
                          **new["methods"]}
    out["sweep"] = [r for r in old["sweep"] if r["method"] not in methods_new] + new["sweep"]
    out["wall_seconds"] = round(float(old.get("wall_seconds", 0)) + float(new["wall_seconds"]), 1)
    out.update(compute_seconds(out["sweep"]))
    return out


def compute_seconds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``compute_seconds``: the summed wall time of the settings of sweep ``rows`` (each timed when it ran,
    whichever invocation ran it, so a resumed or merged sweep still counts every trial; ``wall_seconds`` is
    the invocations' time only), and ``untimed_rows``: rows cached before the times were kept."""
    timed = [float(r["seconds"]) for r in rows if r.get("seconds") is not None]
    return {"compute_seconds": round(sum(timed), 1), "untimed_rows": len(rows) - len(timed)}


def _compute_note(result: dict[str, Any]) -> str:
    """The sweep's own compute beside the invocation's wall time (a resumed sweep's differ)."""
    if result.get("compute_seconds") is None:
        return ""
    untimed = int(result.get("untimed_rows") or 0)
    return (f" (this invocation; its settings took {result['compute_seconds']:.0f} s to run and score, whichever "
            f"run made them" + (f", {untimed} rows cached before times were kept not counted" if untimed else "")
            + ")")


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
             f"rule `{result['noise_rule']}`, {result['wall_seconds']:.0f} s" + _compute_note(result) + ".", "",
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
