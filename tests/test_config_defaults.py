"""Each config default in one place: a key that `config/config.yaml` sets is not given a second default in code.

`cfg["metrics"].get("batch_size", 100)` beside `metrics: {batch_size: 100}` is two places for one fact, and
they drift (tune `n` was 48 in code and 100 in the config). The checker finds every `.get(<key>, <literal>)` /
`.setdefault(<key>, <literal>)` in `vcebench/`, `methods/` and `metrics/` whose key is a key of the config
files; the few that read something else under the same name (an old checkpoint's own fields, a FiRe-only
parameter in a timing record) are listed below with the reason.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vcebench", "methods", "metrics")

# (file, key): why this `.get(key, literal)` is not a config default
NOT_CONFIG: dict[tuple[str, str], str] = {
    ("vcebench/paper/timing.py", "early_stop"): "a timing row of any method: only FiRe's params have it",
    ("vcebench/models/training/loops.py", "batch"): "train_loop's throughput line for any settings mapping",
    ("vcebench/steps/evaluate.py", "fid_features"): "TaskModels.names (role -> network name), not the config",
    ("metrics/builders.py", "fid_features"): "TaskModels.names (role -> network name), not the config",
    ("vcebench/steps/profile.py", "n"): "a profile.json's own fields, printed in a message",
    ("vcebench/paper/timing_report.py", "pmf"): "a timing report's own field (older reports lack it: the UNet PMF)",
}


def config_keys() -> set[str]:
    keys: set[str] = set()

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                keys.add(str(k))
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for f in [ROOT / "config" / "config.yaml", *sorted((ROOT / "config" / "presets").glob("*.yaml"))]:
        walk(yaml.safe_load(f.read_text()))
    return keys


def _is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return bool(node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys)
    return False


def second_defaults(source: str, keys: set[str]) -> list[tuple[str, int, str]]:
    """(key, line, code) of each `.get(key, literal)` / `.setdefault(key, literal)` with ``key`` in ``keys``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault") and len(node.args) == 2):
            key, default = node.args
            if isinstance(key, ast.Constant) and key.value in keys and _is_literal(default):
                out.append((key.value, node.lineno, ast.unparse(node)))
    return out


def test_no_config_key_has_a_second_default_in_code():
    keys = config_keys()
    found: dict[tuple[str, str], list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for key, line, code in second_defaults(path.read_text(), keys):
                found.setdefault((rel, key), []).append(f"{rel}:{line}: {code}")
    unexplained = [s for k, sites in found.items() if k not in NOT_CONFIG for s in sites]
    assert not unexplained, ("a config key with a default in code (index the config, or move the default to "
                             "the params dataclass / the role's defaults):\n" + "\n".join(unexplained))
    stale = sorted(set(NOT_CONFIG) - set(found))
    assert not stale, f"NOT_CONFIG lists sites that are gone: {stale}"


def test_checker_sees_a_second_default():
    src = 'def f(cfg):\n    a = cfg["metrics"].get("batch_size", 100)\n    b = cfg.get("batch_size")\n' \
          '    c = cfg.get("other", 1)\n    return cfg.setdefault("seeds", [0, 1])\n'
    assert second_defaults(src, {"batch_size", "seeds"}) == [
        ("batch_size", 2, "cfg['metrics'].get('batch_size', 100)"), ("seeds", 5, "cfg.setdefault('seeds', [0, 1])")]


def _params_defaults(spec) -> dict:
    """A method's params dataclass defaults (fields with a default), by field name."""
    import dataclasses
    import importlib

    cls = spec.params
    if isinstance(cls, str):
        module, _, name = cls.partition(":")
        cls = getattr(importlib.import_module(module), name)
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):  # 8/255 is written 0.0313725 in the config
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-5)
    return a == b


def method_default_drift(cfg: dict) -> list[str]:
    from vcebench import registry

    drift = []
    for spec in registry.BUILTIN_METHODS:
        section = (cfg.get("method_defaults") or {}).get(spec.name) or {}
        for key, code in _params_defaults(spec).items():
            if key in section and not _same(section[key], code):
                drift.append(f"method_defaults.{spec.name}.{key}: config {section[key]!r}, dataclass {code!r}")
    return drift


def test_method_defaults_agree_with_the_params_dataclasses():
    """`method_defaults.<method>` in config.yaml writes out the params dataclass's defaults (FiRe's 18, the
    DDPMs', ACE's) for the reader; a test keeps the two copies of each fact equal."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    from vcebench import registry

    fire = next(s for s in registry.BUILTIN_METHODS if s.name == "fire")
    assert len(set(_params_defaults(fire)) & set(cfg["method_defaults"]["fire"])) >= 18  # all 18 written out
    drift = method_default_drift(cfg)
    assert not drift, "\n".join(drift)


def test_method_default_drift_is_seen():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["method_defaults"]["fire"]["eta"] = 0.03
    assert method_default_drift(cfg) == ["method_defaults.fire.eta: config 0.03, dataclass 0.02"]
