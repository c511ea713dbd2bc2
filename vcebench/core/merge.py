"""``deep_merge``: the config's layering rule, below every module that reads the config."""

from __future__ import annotations

import copy


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` laid over ``base`` key by key (nested mappings merge, anything else replaces):
    presets over the default config, a variant's settings over its method's."""
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
