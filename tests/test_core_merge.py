"""The config's layering rule (vcebench/core/merge.py): later layers win key by key, nested mappings merge, and
nothing the caller passed in is changed or shared with the result."""

from __future__ import annotations

import copy

import yaml

from vcebench.core.merge import deep_merge, merge_into


def test_nested_mappings_merge_and_the_inputs_stay_as_they_were():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 2}
    over = {"a": {"y": [3]}, "c": {"z": 1}}
    before = copy.deepcopy((base, over))
    out = deep_merge(base, over)
    assert out == {"a": {"x": 1, "y": [3]}, "b": 2, "c": {"z": 1}}
    assert (base, over) == before
    out["a"]["y"].append(4)
    out["c"]["z"] = 9
    assert (base, over) == before  # nothing of the result is shared with an input


def test_a_yaml_anchor_shared_by_two_keys_changes_under_the_named_key_only():
    """`variants.ace.snr_p2` and `variants.fire.snr_p2` are one mapping in config.yaml (an anchor): a preset that
    sets ace's changes ace's, never fire's."""
    base = yaml.safe_load("variants:\n  ace: {snr_p2: &p {rule: snr, offset: 0.0}}\n  fire: {snr_p2: *p}\n")
    assert base["variants"]["ace"]["snr_p2"] is base["variants"]["fire"]["snr_p2"]
    out = deep_merge(base, {"variants": {"ace": {"snr_p2": {"offset": 1.5}}}})
    assert out["variants"]["ace"]["snr_p2"] == {"rule": "snr", "offset": 1.5}
    assert out["variants"]["fire"]["snr_p2"] == {"rule": "snr", "offset": 0.0}
    layered: dict = {}
    for layer in (base["variants"]["ace"], {"snr_p2": {"offset": 2.0}}):
        merge_into(layered, layer)
    assert layered == {"snr_p2": {"rule": "snr", "offset": 2.0}} and base["variants"]["ace"]["snr_p2"]["offset"] == 0
