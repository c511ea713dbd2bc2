"""Load, merge and validate the workflow config (config/config.yaml + presets).

The same files drive Snakemake (``configfile:`` + ``validate``) and the CLI
(``vcebench <verb> --config config/config.yaml --config config/presets/quick.yaml``):
later files are deep-merged over earlier ones, then validated against
``config/schema.yaml``. A typo in a key is an error that names it.
"""

from __future__ import annotations

import functools
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from ..core.errors import ConfigError, settings_errors  # noqa: F401 (the config's errors, imported from here too)
from ..core.merge import copy_tree, deep_merge

DEFAULT_CONFIG = Path("config/config.yaml")
# libyaml's parser where PyYAML was built with it (the same safe tags and resolvers, ~10x faster): every job
# reads the config, the schema and the tuned files
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    """``yaml.safe_load`` of a file (libyaml's parser when available), refusing a key written twice in one
    mapping (YAML forbids it; PyYAML would keep the last one silently). A syntax error or a repeated key is a
    one-line :class:`ConfigError` naming the file, the line and (repeated) the key. A text read before is not
    parsed again (the DAG build reads the config, the schema and the tuned files more than once); the caller gets
    its own copy."""
    path = Path(path)
    return copy_tree(_parse_yaml(str(path), path.read_text()))


@functools.lru_cache(maxsize=32)
def _parse_yaml(name: str, text: str) -> Any:
    """:func:`read_yaml` of the text ``text`` of file ``name`` (errors are not cached)."""
    path = Path(name)
    loader = _YAML_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_unique_keys(path, node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        context = f" ({e.context})" if e.context else ""
        raise ConfigError(f"{path}{where}: {e.problem}{context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: {' '.join(str(e).split())}") from None
    finally:
        loader.dispose()


def _check_unique_keys(path: Path, root: yaml.Node) -> None:
    """Every mapping of the node tree holds each key once (a merge key ``<<`` may override, as YAML allows)."""
    todo, seen_nodes = [(root, "")], set()
    while todo:
        node, where = todo.pop()
        if id(node) in seen_nodes:  # an alias: checked where its anchor is
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo += [(item, f"{where}[{i}]") for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                name = f"{where}.{key.value}" if where else key.value
                if (key.tag, key.value) in first:
                    raise ConfigError(f"{path}, line {key.start_mark.line + 1}: key `{name}` is given twice (first "
                                      f"on line {first[key.tag, key.value] + 1}); remove one")
                first[key.tag, key.value] = key.start_mark.line
                todo.append((value, name))


def default_config_paths() -> list[Path]:
    """The default config files: ``config/config.yaml`` of the working directory, else the repository's that
    this package sits in (a clone or an editable install, run from elsewhere), else the copy a wheel installs
    under ``<prefix>/share/vcebench/`` (pyproject.toml ``data-files``)."""
    if DEFAULT_CONFIG.exists():
        return [DEFAULT_CONFIG]
    for root in (Path(__file__).resolve().parents[2], Path(sys.prefix) / "share" / "vcebench"):
        if (root / DEFAULT_CONFIG).exists():  # the repository's (vcebench/config/load.py), or a wheel's copy
            return [root / DEFAULT_CONFIG]
    raise ConfigError(f"no {DEFAULT_CONFIG} in {Path.cwd()}, beside the vcebench package or under "
                      f"{Path(sys.prefix) / 'share' / 'vcebench'}: run from the repository root or pass the config")


def schema_path(config_path: Path | None = None) -> Path:
    here = Path(config_path).parent if config_path else DEFAULT_CONFIG.parent
    for cand in (here / "schema.yaml", here.parent / "schema.yaml", DEFAULT_CONFIG.parent / "schema.yaml"):
        if cand.exists():
            return cand
    return Path(__file__).resolve().parents[2] / "config" / "schema.yaml"  # the repository's (vcebench/config/load.py)


def validate(cfg: dict, schema_file: Path | None = None) -> dict:
    """Validate against the JSON schema (method names filled in from ``vcebench.registry``); raise
    :class:`ConfigError` naming the bad key, in one line (the first three errors when there are more)."""
    import jsonschema

    from ..registry import fill_schema

    schema = fill_schema(read_yaml(schema_file or schema_path()))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        shown = [f"config key `{'.'.join(str(p) for p in e.absolute_path) or '<top level>'}`: "
                 f"{' '.join(e.message.split())}" for e in errors[:3]]
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise ConfigError("; ".join(shown) + more)
    return cfg


def load_config(paths: list[str | Path] | None = None, overrides: dict | None = None) -> dict:
    """Deep-merge the YAML files in order (default: config/config.yaml) and validate."""
    paths = [Path(p) for p in (paths or default_config_paths())]
    cfg: dict[str, Any] = {}
    for p in paths:
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist (run from the repository root or pass --config)")
        data = read_yaml(p) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p} must hold a mapping (`key: value` lines) at the top level, "
                              f"not a {type(data).__name__}")
        cfg = deep_merge(cfg, data)
    if overrides:
        cfg = deep_merge(cfg, overrides)
    validate(cfg, schema_path(paths[0]))
    resolve_hub_weights(cfg)
    from .tasks import check_method_names

    check_method_names(cfg)
    attach_tuned(cfg, repo_root(paths[0]))
    return cfg


def resolve_hub_weights(cfg: dict) -> dict:
    """Every ``models.<dataset>.<role>.weights`` written ``hf://owner/repo/file@revision`` replaced, in place, by
    the file in the local Hub cache (fetched into it unless offline; :mod:`vcebench.core.hub`)."""
    from ..core import hub

    for dataset, roles in (cfg.get("models") or {}).items():
        for role, spec in (roles or {}).items():
            if isinstance(spec, dict) and hub.is_hub_url(spec.get("weights")):
                key = f"models.{dataset}.{role}.weights"
                spec["weights"] = str(hub.local_path(hub.parse(spec["weights"], key), key))
    return cfg


def train_threads(cfg: dict) -> int:
    """Torch threads of a training job: config ``train_threads``, else ``threads``."""
    return int(cfg.get("train_threads") or cfg["threads"])


def repo_root(config_path: str | Path) -> Path:
    """The repository a config file belongs to: the parent of its ``config/`` folder."""
    p = Path(config_path).resolve()
    for d in p.parents:
        if (d / "config" / "config.yaml").exists():
            return d
    return Path.cwd()


def attach_tuned(cfg: dict, root: str | Path) -> dict:
    """Read ``<root>/<protocol.tuned_dir>/<task>.yaml`` (written by `vcebench tune`) of every configured task
    into ``cfg["tuned"][task]`` (``settings``, ``file``, ``date``); tasks without a file get none."""
    tuned_dir = Path(root) / cfg["protocol"]["tuned_dir"]
    out = {}
    for task in cfg.get("tasks") or {}:
        f = tuned_dir / f"{task}.yaml"
        if f.exists():
            data = read_yaml(f) or {}
            if not isinstance(data.get("settings"), dict):
                raise ConfigError(f"{f}: no `settings` mapping (write it with `vcebench tune`)")
            out[task] = {"settings": data["settings"], "file": str(Path(cfg["protocol"]["tuned_dir"]) / f.name),
                         "date": data.get("date")}
    cfg["tuned"] = out
    return cfg


def check_keys(section: str, given: dict, allowed: set[str] | dict) -> None:
    """Reject unknown keys in a free-form section (e.g. method hyperparameters)."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        import difflib

        hints = []
        for u in unknown:
            close = difflib.get_close_matches(u, list(allowed), n=1)
            hints.append(f"`{section}.{u}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
        raise ConfigError(f"unknown config key(s): {', '.join(hints)}; allowed: {', '.join(sorted(allowed))}")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a settings dataclass, computed once per class (the config checks ask for
    the same classes hundreds of times: every task x method)."""
    return typing.get_type_hints(cls)


def coerce_value(v: Any, tp: Any, where: str) -> Any:
    """``v`` as the type ``tp`` of a typed setting, or a :class:`ConfigError` naming config key ``where``.

    ``tp``: ``int``, ``float``, ``bool``, ``str``, ``Literal[...]``, ``tuple[T, ...]`` / ``list[T]``,
    ``T | None``; anything else is returned unchanged. Numbers written as strings are accepted (YAML 1.1
    reads ``6e-3`` as a string; ``steps: "150"``), non-finite numbers and booleans for numbers are not.
    """
    origin = get_origin(tp)
    if origin is Literal:
        if v not in get_args(tp):
            raise ConfigError(f"config key `{where}` must be one of {list(get_args(tp))}, got {v!r}")
        return v
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if v is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)][:1] or (Any,)
        return coerce_value(v, inner, where)
    if origin in (tuple, list) or tp in (tuple, list):
        if not isinstance(v, (list, tuple)) or not v:
            raise ConfigError(f"config key `{where}` must be a non-empty list, got {v!r}")
        (item,) = get_args(tp)[:1] or (Any,)
        return tuple(coerce_value(i, item, where) for i in v)
    if tp is bool:
        if not isinstance(v, bool):
            raise ConfigError(f"config key `{where}` must be true or false, got {v!r}")
        return v
    if tp is int:
        if isinstance(v, str):
            x = _number(v, where, "an integer")
            if x != int(x):
                raise ConfigError(f"config key `{where}` must be an integer, got {v!r}")
            return int(x)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"config key `{where}` must be an integer, got {v!r}")
        return v
    if tp is float:
        if isinstance(v, str):
            return _number(v, where, "a number")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"config key `{where}` must be a number, got {v!r}")
        if not math.isfinite(v):
            raise ConfigError(f"config key `{where}` must be a finite number, got {v!r}")
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            raise ConfigError(f"config key `{where}` must be a string, got {v!r}")
        return v
    if tp is dict:
        if not isinstance(v, dict):
            raise ConfigError(f"config key `{where}` must be a mapping, got {v!r}")
        return v
    return v


def _number(v: str, where: str, what: str) -> float:
    try:
        x = float(v.strip())
    except ValueError:
        raise ConfigError(f"config key `{where}` must be {what}, got the string {v!r}") from None
    if not math.isfinite(x):
        raise ConfigError(f"config key `{where}` must be a finite number, got {v!r}")
    return x
