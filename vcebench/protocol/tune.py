"""`vcebench tune`: the same tuning effort for every method, on validation inputs that are never evaluated.

For each method of the task, ``tune.n_settings`` settings run on the first ``tune.n`` inputs of the tuning
split (``vcebench.data.tune_split_name``: synthetic ``val``; never the evaluation split). Setting 0 is the
method's untuned configuration; the others are a seeded Latin hypercube over the method's ``tune.space``
(config): ``{param: {range: [low, high], scale: linear | log, relative: bool}}`` (``relative``: a factor on
the untuned value, element-wise for lists such as the DDPM guidance ``scales``). Every setting runs under the
noise protocol (``log_snr_offset`` moves the starting log-SNR of FiRe and of a DDPM alike) and the same
per-sample noise streams, and is scored on ``tune.metrics``.

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


def candidate_settings(space: dict[str, dict], untuned: dict[str, Any], n: int, seed: int,
                       method: str) -> list[dict[str, Any]]:
    """``n`` settings: ``{}`` (the untuned configuration) and ``n - 1`` points of a Latin hypercube over
    ``space`` (seeded by ``seed`` and the method name), as absolute parameter values."""
    out: list[dict[str, Any]] = [{}]
    m = n - 1
    if m <= 0 or not space:
        return out[:max(1, n)]
    rng = np.random.default_rng([int(seed), zlib.crc32(method.encode())])
    names = list(space)
    u = np.stack([(rng.permutation(m) + rng.uniform(size=m)) / m for _ in names], axis=1)  # m x d strata
    for row in u:
        setting: dict[str, Any] = {}
        for name, ui in zip(names, row):
            spec = space[name]
            lo, hi = (float(x) for x in spec["range"])
            v = _scaled(float(ui), lo, hi, spec["scale"])
            if spec["relative"]:
                if name not in untuned:
                    raise ConfigError(f"tune.space.{method}.{name}: relative, but {method} has no `{name}`")
                base = untuned[name]
                if isinstance(base, (list, tuple)):
                    setting[name] = [round_value(float(b) * v) for b in base]
                elif isinstance(base, bool) or not isinstance(base, (int, float)):
                    raise ConfigError(f"tune.space.{method}.{name}: relative needs a number, got {base!r}")
                else:
                    setting[name] = int(round(base * v)) if isinstance(base, int) else round_value(base * v)
            else:
                setting[name] = round_value(v)
        out.append(setting)
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
    for key in ("task", "rule", "validation", "n_settings", "seed", "noise_rule"):
        if old.get(key) != new.get(key):
            raise ConfigError(f"cannot merge tune results: `{key}` differs ({old.get(key)!r} vs {new.get(key)!r}); "
                              f"tune every method again")
    methods_new = set(new["settings"])
    out = dict(new)
    out["settings"] = {**{m: v for m, v in old["settings"].items() if m not in methods_new}, **new["settings"]}
    out["picked"] = {**{m: v for m, v in old["picked"].items() if m not in methods_new}, **new["picked"]}
    out["space"] = {**old.get("space", {}), **new.get("space", {})}
    out["sweep"] = [r for r in old["sweep"] if r["method"] not in methods_new] + new["sweep"]
    out["wall_seconds"] = round(float(old.get("wall_seconds", 0)) + float(new["wall_seconds"]), 1)
    return out


def sweep_markdown(result: dict[str, Any]) -> str:
    """The sweep table of a tuned file as Markdown (picked rows in bold)."""
    keys = list(next(iter(result["sweep"]), {}).get("metrics", {}))
    head = ["method", "setting", "overrides", "log-SNR", "t / start", *keys, "steps", "s/CF", "picked"]
    lines = [f"# `vcebench tune` on {result['task']} ({result['date']})", "",
             f"{result['validation']['n']} inputs of the `{result['validation']['split']}` split (evaluation: "
             f"`{result['validation']['evaluation_split']}`), {result['n_settings']} settings per method, noise "
             f"rule `{result['noise_rule']}`, {result['wall_seconds']:.0f} s.", "",
             f"Rule: lowest {result['rule']['minimize']} subject to "
             + (", ".join(f"{k} >= {v}" for k, v in (result['rule'].get('require') or {}).items()) or "nothing")
             + f"; else {result['rule']['fallback']}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["sweep"]:
        ov = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or "untuned"
        where = r["t"] if r["t"] is not None else f"{r['start_step']} of {r['respacing']}"
        cells = [r["method"], str(r["setting"]), ov, str(r["log_snr"]), str(where),
                 *("-" if r["metrics"][k] is None else str(r["metrics"][k]) for k in keys),
                 str(r["mean_steps"]), str(r["sec_per_cf"]), "**yes**" if r["picked"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| method | picked | qualified | how |", "|---|---|---|---|"]
    for m, p in result["picked"].items():
        lines.append(f"| {m} | {p['setting']} | {p['qualified']} | {p['how']} |")
    return "\n".join(lines) + "\n"
