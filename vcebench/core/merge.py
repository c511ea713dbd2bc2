"""``deep_merge``: the config's layering rule, below every module that reads the config."""

from __future__ import annotations

import copy


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` laid over ``base`` key by key (nested mappings merge, anything else replaces):
    presets over the default config, a variant's settings over its method's. Neither is changed."""
    out = copy.deepcopy(base)
    merge_into(out, override)
    return out


def merge_into(out: dict, override: dict) -> dict:
    """:func:`deep_merge` in place: ``override`` (copied, never shared) laid over ``out``, which the caller owns;
    returns ``out``. One copy of each value instead of a copy of the whole base per nesting level."""
    for k, v in (override or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            merge_into(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
