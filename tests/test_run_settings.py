"""vcebench.protocol.run_settings: a job's settings resolved once from the config into a frozen object."""

from __future__ import annotations

import dataclasses

import pytest

from vcebench.config.load import ConfigError
from vcebench.protocol.run_settings import RunSettings, RuntimeOptions


def test_resolved_once_from_the_config(cfg):
    from vcebench.data import eval_split_name
    from vcebench.protocol.noise import resolve_method

    c = {**cfg, "seed": 3, "n_eval": 9, "batch_size": 4, "threads": 2}
    s = RunSettings.resolve(c, "synthfaces_smile", "fire", data_dir="d", model_dir="m")
    params, record = resolve_method(cfg, "synthfaces_smile", "fire")
    assert (s.task.name, s.task.dataset, s.method) == ("synthfaces_smile", "synthfaces", "fire")
    assert dict(s.params) == params and dict(s.protocol) == record
    assert (s.seed, s.n_eval, s.batch_size, s.data_dir, s.model_dir) == (3, 9, 4, "d", "m")
    assert s.runtime == RuntimeOptions(threads=2, device=cfg["device"], cuda=s.runtime.cuda)
    assert dict(s.runtime.cuda) == cfg["cuda"] and s.split == eval_split_name("synthfaces")
    assert s.build_method().name == "fire"
    c["seed"] = 4  # a private copy: later changes to the dict do not reach the settings
    assert s.seed == 3 and s.config["seed"] == 3


def test_frozen(cfg):
    s = RunSettings.resolve(cfg, "synthfaces_smile", "fire")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.runtime.device = "cuda"  # type: ignore[misc]
    for view in (s.config, s.params, s.protocol, s.runtime.cuda):
        with pytest.raises(TypeError):
            view["seed"] = 1  # type: ignore[index]


def test_unknown_task_or_method_is_a_one_line_config_error(cfg):
    for task, method, match in (("nope", "fire", "unknown task"), ("synthfaces_smile", "fires", "unknown method")):
        with pytest.raises(ConfigError, match=match) as e:
            RunSettings.resolve(cfg, task, method)
        assert "\n" not in str(e.value)


def test_a_bad_hyperparameter_fails_when_resolved(cfg):
    task = {**cfg["tasks"]["synthfaces_smile"], "params": {"fire": {"rhoo": 0.1}}}
    with pytest.raises(ConfigError, match="rhoo") as e:
        RunSettings.resolve({**cfg, "tasks": {**cfg["tasks"], "synthfaces_smile": task}}, "synthfaces_smile", "fire")
    assert "\n" not in str(e.value)


def test_a_tune_setting_resolves_its_candidate_on_its_split(cfg):
    from vcebench.protocol.noise import resolve_method

    cand = {"rho": 0.07}
    s = RunSettings.resolve(cfg, "synthfaces_smile", "fire", candidate=cand, split="val")
    assert dict(s.params) == resolve_method(cfg, "synthfaces_smile", "fire", candidate=cand)[0]
    assert s.params["rho"] == 0.07 and s.split == "val"


def test_with_params_is_a_changed_copy(cfg):
    s = RunSettings.resolve(cfg, "synthfaces_smile", "fire")
    t = s.with_params(compaction=not s.params["compaction"])
    assert t.params["compaction"] is not s.params["compaction"] and list(t.params) == list(s.params)
    assert (t.protocol, t.seed, t.config) == (s.protocol, s.seed, s.config)
    with pytest.raises(TypeError):
        t.params["rho"] = 1  # type: ignore[index]


def test_eval_settings_keep_an_unconfigured_method_without_a_record(cfg):
    from vcebench.protocol.noise import resolve_method
    from vcebench.protocol.run_settings import EvalSettings

    s = EvalSettings.resolve(cfg, "synthfaces_smile", "fire", split="val")
    assert dict(s.protocol) == resolve_method(cfg, "synthfaces_smile", "fire")[1] and s.split == "val"
    imported = EvalSettings.resolve(cfg, "synthfaces_smile", "my_cfs")  # a `vcebench import` folder's name
    assert imported.method == "my_cfs" and imported.protocol is None and imported.seed == int(cfg["seed"])
    assert EvalSettings.resolve(cfg, "synthfaces_smile", None).protocol is None  # the FID reference
    with pytest.raises(ConfigError, match="unknown task"):
        EvalSettings.resolve(cfg, "nope", "fire")


def test_params_parsed_once_per_job(cfg, monkeypatch):
    """resolve() parses the hyperparameters into the method's dataclass; build_method() reuses that object
    (a second parse of the same mapping was the old route); with_params() parses the changed mapping."""
    import methods
    import methods.params

    calls = []
    real = methods.params.parse_params

    def counting(cls, params, section, **kw):
        calls.append(section)
        return real(cls, params, section, **kw)

    monkeypatch.setattr(methods.params, "parse_params", counting)
    monkeypatch.setattr(methods, "parse_params", counting)
    s = RunSettings.resolve(cfg, "synthfaces_smile", "fire")
    m = s.build_method()
    assert calls == ["fire"] and m.params is s.parsed and s.parsed.K == s.params["K"]
    s2 = s.with_params(K=3)
    assert calls == ["fire", "fire"] and s2.parsed.K == 3 and s2.build_method().params.K == 3
