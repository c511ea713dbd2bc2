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
    """:func:`deep_merge` into ``out``, which the caller owns: ``override`` (copied, never shared) laid over it;
    returns ``out``. A nested mapping on the way is replaced by a shallow copy before it changes (copy on write):
    YAML anchors make one mapping appear under several keys (``variants.ace.snr_p2`` and ``variants.fire.snr_p2``),
    and only the key the override names may change. One copy per changed mapping instead of a deep copy of the
    whole base per nesting level."""
    for k, v in (override or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_into(dict(out[k]), v)
        else:
            out[k] = copy.deepcopy(v)
    return out
