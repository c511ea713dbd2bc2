"""The search-space rule of the tuner (docs/protocol.md section 6, "The search-space rule" and "The tuner").

:func:`rule_space` gives every method its space (checked by :func:`space_violations`). A space contains its
optimum by one widening rule for every method (config ``tune.widen``): when the best search trial by the pick rule
sits within ``edge`` (5 %) of a bound of a parameter's range, measured in log units for a log-scaled parameter and
as a share of the range for a linear or shift one, and that bound is not a hard limit, that side of the range is
widened by ``factor`` (its distance from the untuned point multiplied: x4 -> x16 at factor 2, an offset +3 -> +6,
a radius shift +2 -> +4) and the search goes on with ``extra_trials`` more trials, the same number for every
method, up to ``max`` widenings.
Each widening is recorded (the tuned file's ``methods.<m>.widenings``).

Hard limits (:func:`hard_limit`), never widened: a radius or kernel radius at 0 (``radius >= 0``), a fraction
whose range reaches 1 (``rho``, ``k``, thresholds ``<= 1``). Guidance strengths (log scale, never 0) and the
noise offset (log-SNR) have none.

:func:`edge_picks` applies the same 5 % test to committed tuned files (``python -m vcebench.protocol.space``
prints the list).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from ..config.load import ConfigError
from .search import ranked, sequential_search
from .tune import FRACTIONS, ODD_KERNELS

STRENGTH_FACTORS = (0.25, 4.0)  # every guidance strength: log range x1/4 to x4 around its paper value
OFFSET_RANGE = (-3.0, 3.0)  # the starting-noise offset (log-SNR), the same for every method
SHIFT_RANGE = (-2, 2)  # a pixel radius (or a kernel's radius): +-2 px around the rule's value, floored at 0
STRENGTHS = {"fire": ("eta",), "dime": ("scales",), "fastdime": ("scales",), "fastdime2": ("scales",),
             "fastdime2plus": ("scales",), "maskdime": ("scales", "grad_scale"),
             "ace": ("attack_step", "dist_weight")}
# mask parameters: fractions on the strengths' log range, radii and kernels by the shift
MASK_PARAMS = {"fire": ("rho", "dilation", "feather"), "fastdime": ("mask_threshold", "mask_dilation"),
               "fastdime2": ("mask_threshold", "mask_dilation"), "fastdime2plus": ("mask_threshold", "mask_dilation"),
               "maskdime": ("k", "dilation"), "ace": ("inpaint", "dilation")}
RADII = frozenset({("fire", "dilation"), ("fire", "feather")}) | ODD_KERNELS


# the l1 weights, searched like every strength (issue #62; ACE's dist_weight, its l1 weight, always was);
# `l1=False` gives the space before that change
L1_WEIGHTS = {m: ("l1",) for m in ("dime", "fastdime", "fastdime2", "fastdime2plus", "maskdime")}


def rule_space(method: str, l1: bool = True) -> dict[str, dict]:
    """The search space the rule gives ``method``: the offset, its strengths (``l1``: its l1 weight among them),
    its mask parameters."""
    if method not in STRENGTHS:
        return {}
    log = {"range": list(STRENGTH_FACTORS), "scale": "log", "relative": True}
    out: dict[str, dict] = {"log_snr_offset": {"range": list(OFFSET_RANGE), "scale": "linear", "relative": False}}
    for p in (*STRENGTHS[method], *(L1_WEIGHTS.get(method, ()) if l1 else ()), *MASK_PARAMS.get(method, ())):
        out[p] = ({"range": list(SHIFT_RANGE), "scale": "shift", "relative": True} if (method, p) in RADII
                  else dict(log))
    return out


def space_violations(space: dict[str, dict], l1: bool = True) -> list[str]:
    """Where ``space`` (config ``tune.space``) breaks the rule: a method's space that is not :func:`rule_space`
    (one-sided, narrower, wider or missing a parameter). Empty: every space follows it."""
    bad = []
    for method, spec in space.items():
        want = rule_space(method, l1)
        for p in sorted(set(want) | set(spec or {})):
            got = (spec or {}).get(p)
            if got is None or want.get(p) is None or [float(x) for x in got["range"]] != want[p]["range"] \
                    or got["scale"] != want[p]["scale"] or bool(got["relative"]) != want[p]["relative"]:
                bad.append(f"{method}.{p}: {got} (rule: {want.get(p)})")
    return bad


# --- the widening rule --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WidenRule:
    """Config ``tune.widen``: the edge share, the widening factor, the extra trials per widening, the maximum."""

    edge: float = 0.05
    factor: float = 2.0
    extra_trials: int = 8
    max: int = 4

    @classmethod
    def from_config(cls, spec: dict | None) -> WidenRule:
        """The rule of config ``tune.widen`` (``None``: no widening, ``max`` 0)."""
        if not spec:
            return cls(max=0)
        unknown = set(spec) - {"edge", "factor", "extra_trials", "max"}
        if unknown:
            raise ConfigError(f"tune.widen: unknown key(s) {sorted(unknown)}")
        rule = cls(**{k: type(getattr(cls(), k))(v) for k, v in spec.items()})
        if not (0 < rule.edge < 0.5 and rule.factor > 1 and rule.extra_trials >= 1 and rule.max >= 0):
            raise ConfigError(f"tune.widen needs 0 < edge < 0.5, factor > 1, extra_trials >= 1, max >= 0: {spec}")
        return rule


def _axis(v: float, spec: dict) -> float:
    """A point of a range on the axis the 5 % is measured on: log units for ``scale: log``."""
    return math.log(v) if spec["scale"] == "log" else float(v)


def centre(spec: dict) -> float:
    """The untuned point of a range (the point ``sequential_search`` enqueues as trial 0)."""
    if spec["scale"] == "shift":
        return 0.0
    return 1.0 if spec["relative"] else 0.0


def near_edges(space: dict[str, dict], point: dict[str, float], edge: float) -> list[tuple[str, str]]:
    """``(param, "low" | "high")`` for every parameter of ``point`` (values on the spec's range) within
    ``edge`` of the range's width from a bound."""
    out = []
    for name, spec in space.items():
        lo, hi = (_axis(float(b), spec) for b in spec["range"])
        u = _axis(float(point[name]), spec)
        if u - lo <= edge * (hi - lo):
            out.append((name, "low"))
        if hi - u <= edge * (hi - lo):
            out.append((name, "high"))
    return out


def _radius(name: str, value: int, method: str) -> int:
    return (int(value) - 1) // 2 if (method, name) in ODD_KERNELS else int(value)


def hard_limit(spec: dict, name: str, side: str, untuned: dict[str, Any], method: str) -> bool:
    """Whether ``side`` of ``name``'s range is a hard limit: a radius shifted to 0, a fraction reaching 1."""
    lo, hi = (float(b) for b in spec["range"])
    if spec["scale"] == "shift" and side == "low":
        return _radius(name, untuned[name], method) + lo <= 0
    if name in FRACTIONS and spec["relative"] and side == "high":
        return float(untuned[name]) * hi >= 1.0
    return False


def widen_side(spec: dict, name: str, side: str, factor: float, untuned: dict[str, Any], method: str) -> dict:
    """``spec`` with ``side`` moved ``factor`` times as far from the untuned point (clipped at a hard limit)."""
    lo, hi = (float(b) for b in spec["range"])
    b = lo if side == "low" else hi
    c = centre(spec)
    if spec["scale"] == "log":
        new = math.exp(math.log(c) + factor * (math.log(b) - math.log(c)))
    else:
        new = c + factor * (b - c)
    if spec["scale"] == "shift":
        new = float(math.floor(new) if side == "low" else math.ceil(new))
        if side == "low":
            new = max(new, -float(_radius(name, untuned[name], method)))
    if name in FRACTIONS and spec["relative"] and side == "high":
        new = min(new, 1.0 / float(untuned[name]))
    rng = [new, hi] if side == "low" else [lo, new]
    if spec["scale"] == "shift":
        rng = [int(v) for v in rng]
    else:
        rng = [float(f"{v:.6g}") for v in rng]
    return {**spec, "range": rng}


def search_with_widening(evaluate, space: dict[str, dict], untuned: dict[str, Any], *, n_trials: int,
                         rule: dict[str, Any], widen: WidenRule, method: str, promote: int = 1,
                         **search) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`vcebench.protocol.search.sequential_search` under the widening rule: after the trials, the best
    ``promote`` by ``rule`` (the trials the pick is made among) are checked against the space's bounds; a soft
    bound one of them is near is widened and ``extra_trials`` more run in the same study, at most ``widen.max``
    times. Returns (rows, widenings), each widening ``{after_trials, trial, sides, space}`` (the first trial that
    touched the bounds, the sides moved, the ranges after). Resumable like the search: the widenings follow from
    the trials, which the study keeps."""
    total, widenings = n_trials, []
    while True:
        rows = sequential_search(evaluate, space, untuned, n_trials=total, rule=rule, method=method, **search)
        if not space or len(widenings) >= widen.max:
            return rows, widenings
        sides, first = [], None
        for i in ranked(rows, rule)[:max(1, promote)]:
            near = [(p, s) for p, s in near_edges(space, rows[i]["point"], widen.edge)
                    if not hard_limit(space[p], p, s, untuned, method) and (p, s) not in sides]
            if near and first is None:
                first = rows[i]["trial"]
            sides += near
        if not sides:
            return rows, widenings
        space = dict(space)
        for p, s in sides:
            space[p] = widen_side(space[p], p, s, widen.factor, untuned, method)
        widenings.append({"after_trials": total, "trial": first, "sides": [f"{p} {s}" for p, s in sides],
                          "space": {p: list(space[p]["range"]) for p, _ in sides}})
        total += widen.extra_trials


def point_of(spec: dict, name: str, value: Any, untuned: dict[str, Any], method: str) -> float:
    """The point of ``spec``'s range that gives the absolute ``value`` (the inverse of ``tune.setting_at``; a
    list, e.g. the DDPM scales, by its first element)."""
    if spec["scale"] == "shift":
        return float(_radius(name, value, method) - _radius(name, untuned[name], method))
    if not spec["relative"]:
        return float(value)
    v = value[0] if isinstance(value, (list, tuple)) else value
    b = untuned[name][0] if isinstance(untuned[name], (list, tuple)) else untuned[name]
    return float(v) / float(b)


def final_space(tuned: dict[str, Any], method: str) -> dict[str, dict]:
    """The space ``method`` was searched in at the end of its sweep: the tuned file's ``space`` with the ranges of
    its last widening of each parameter (``methods.<method>.widenings``)."""
    space = {p: dict(spec) for p, spec in (tuned["space"].get(method) or {}).items()}
    for w in ((tuned.get("methods") or {}).get(method) or {}).get("widenings") or []:
        for p, rng in (w.get("space") or {}).items():
            if p in space:
                space[p]["range"] = list(rng)
    return space


def edge_picks(cfg: dict, task: str, tuned: dict[str, Any], edge: float = 0.05) -> list[dict[str, Any]]:
    """Every committed pick of ``tuned`` (a tuned file) within ``edge`` of a bound of the space it was searched in
    at the end (:func:`final_space`: its widenings applied), soft or hard: ``{task, method, param, side, value,
    bound, hard, widenings}`` (``value`` / ``bound`` on the spec's axis; ``widenings``: how many its method had)."""
    from ..config.tasks import get_task, method_params

    out = []
    for method, settings in tuned["settings"].items():
        space = final_space(tuned, method)
        if not settings or not space:
            continue
        untuned = method_params(cfg, get_task(cfg, task), method, candidate={})
        point = {p: point_of(space[p], p, settings[p], untuned, method) for p in space if p in settings}
        sub = {p: space[p] for p in point}
        n = len(((tuned.get("methods") or {}).get(method) or {}).get("widenings") or [])
        for p, side in near_edges(sub, point, edge):
            bound = float(sub[p]["range"][0 if side == "low" else 1])
            out.append({"task": task, "method": method, "param": p, "side": side, "value": round(point[p], 4),
                        "bound": bound, "hard": hard_limit(sub[p], p, side, untuned, method), "widenings": n})
    return out


def main(argv: list[str] | None = None) -> int:
    """Prints the committed picks within 5 % of a bound of the space they were searched in (every tuned task of the
    config)."""
    from ..config.load import DEFAULT_CONFIG, load_config, read_yaml, repo_root

    cfg = load_config(argv or None)
    root = repo_root((argv or [DEFAULT_CONFIG])[0])
    for task, meta in sorted((cfg.get("tuned") or {}).items()):
        for e in edge_picks(cfg, task, read_yaml(root / meta["file"])):
            kind = ("hard limit" if e["hard"] else f"soft bound, after {e['widenings']} widening(s)"
                    + (": the rule's last" if e["widenings"] >= int(cfg["tune"]["widen"]["max"]) else
                       ": the rule would widen it"))
            print(f"{e['task']} {e['method']} {e['param']}: {e['value']} vs {e['side']} bound {e['bound']} ({kind})")
    return 0


if __name__ == "__main__":  # pragma: no cover - the command line
    sys.exit(main(sys.argv[1:]))
