"""Method variants: `<method>_<variant>` for every method, parsed in one place (vcebench.config.tasks.split_method)."""

from __future__ import annotations

import copy

import pytest

import methods
from vcebench import registry
from vcebench.config.load import ConfigError, load_config, validate
from vcebench.config.tasks import all_methods, get_task, method_params, split_method


def test_every_registered_method_builds_with_its_dataclass():
    """Each built-in's lazy dataclass and factory import, and the instance uses only registered roles (a truth
    row is built with a synthetic task's renderer)."""
    cfg = load_config()
    for name in registry.builtin_method_names():
        truth = registry.get_method_spec(name).truth
        task = {"task": get_task(cfg, "synthfaces_smile"), "config": cfg} if truth else {}
        m = methods.get_method(name, {}, **task)
        assert m.name == name and set(m.roles) <= set(registry.get_method_spec(name).roles)
        assert methods.params_class(name) is registry.get_method_spec(name).params_class()


@pytest.mark.parametrize("name, expected", [
    ("fastdime2plus", ("fastdime2plus", None)),
    ("fastdime2plus_paper", ("fastdime2plus", "paper")),
    ("fastdime2_paper", ("fastdime2", "paper")),
    ("fastdime_paper", ("fastdime", "paper")),
    ("fastdime_2plus", ("fastdime", "2plus")),
    ("fire_fixed_fire_mask", ("fire", "fixed_fire_mask")),
    ("maskdime_K5", ("maskdime", "K5")),
    ("dime", ("dime", None)),
])
def test_split_method_takes_the_longest_base_name(name, expected):
    assert split_method(name) == expected
    assert methods.base_method(name) == expected[0]


@pytest.mark.parametrize("name", ["dimee", "fire_", "firefly", "", "_fire"])
def test_split_method_rejects_unknown_names(name):
    with pytest.raises(ConfigError, match="unknown method"):
        split_method(name)


def test_variants_of_every_method(cfg):
    """A variant of a DDPM baseline applies on top of the task's setting of that method, like FiRe's."""
    new = copy.deepcopy(cfg)
    new["variants"] = {**new.get("variants", {}), "fastdime2": {"s20": {"scales": [20.0]}},
                       "fastdime2plus": {"s30": {"scales": [30.0]}}}
    task = get_task(new, "synthfaces_smile")
    base = method_params(new, task, "fastdime2")
    v = method_params(new, task, "fastdime2_s20")
    assert v["scales"] == [20.0] and base["scales"] != [20.0]
    assert {k: x for k, x in v.items() if k != "scales"} == {k: x for k, x in base.items() if k != "scales"}
    assert method_params(new, task, "fastdime2plus_s30")["scales"] == [30.0]
    assert {"fastdime2_s20", "fastdime2plus_s30"} <= set(all_methods(new))
    with pytest.raises(ConfigError, match="variants.fastdime.s20"):
        method_params(new, task, "fastdime_s20")  # a variant belongs to one method only
    from vcebench.protocol.noise import resolve_method

    m = methods.get_method("fastdime2_s20", resolve_method(new, task, "fastdime2_s20")[0])
    assert m.name == "fastdime2_s20" and "ddpm" in m.roles


def test_task_override_of_a_variant(cfg):
    new = copy.deepcopy(cfg)
    new["variants"] = {"maskdime": {"big": {"k": 0.2}}}
    new["tasks"]["synthfaces_age"]["params"]["maskdime_big"] = {"grad_scale": 3.0}
    p = method_params(new, get_task(new, "synthfaces_age"), "maskdime_big")
    assert p["k"] == 0.2 and p["grad_scale"] == 3.0


def test_the_retired_fire_variants_key_is_an_error(cfg):
    """``fire_variants`` (the older name of ``variants.fire``) is no longer read: a config that still has it
    stops with the key named instead of running without its variants."""
    new = copy.deepcopy(cfg)
    new["fire_variants"] = {"K7": {"K": 7}}
    with pytest.raises(ConfigError, match="fire_variants"):
        validate(new)


def test_schema_checks_variants(cfg):
    bad = copy.deepcopy(cfg)
    bad["variants"] = {"dimee": {"x": {}}}
    with pytest.raises(ConfigError, match="variants"):
        validate(bad)
    bad["variants"] = {"dime": {"x": 3}}
    with pytest.raises(ConfigError, match="variants.dime.x"):
        validate(bad)


def test_unknown_variant_in_methods_is_a_config_error(tmp_path):
    from vcebench.config.load import DEFAULT_CONFIG, load_config

    p = tmp_path / "p.yaml"
    p.write_text("methods: [fire, dime_nonesuch]\n")
    with pytest.raises(ConfigError, match="dime_nonesuch"):
        load_config([DEFAULT_CONFIG, p])
