"""`format: torch_module`: networks defined by their own code (a DiT-style pMF as the FiRe authors release
theirs, a user classifier), loaded by class path with their declared call convention, and run to a table."""

from __future__ import annotations

import copy
import csv
import json

import pytest
import torch

from tests.user_nets import TinyDiT, UserClassifier
from vcebench.config.tasks import Task
from vcebench.core.errors import UserError
from vcebench.models.released.canonical import load_canonical

TASK = Task(name="synthfaces_smile", dataset="synthfaces", attribute="Smiling")
DIT = {"input_size": 32, "patch_size": 8, "hidden_size": 32, "depth": 2, "num_heads": 2, "num_classes": 2}
KEY = "models.synthfaces.pmf"


def _random(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.data = torch.randn(p.shape, generator=g) * 0.1
    return module.eval()


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """The files as the release lays them out: a dict with `ema` (used) and `model` (not) weights of a DiT with
    2 (+1 null) classes, and a classifier under `state_dict`."""
    d = tmp_path_factory.mktemp("released")
    ema, raw = _random(TinyDiT(**DIT), 0), _random(TinyDiT(**DIT), 1)
    torch.save({"ema": ema.state_dict(), "model": raw.state_dict(), "epoch": 40, "note": "2 (+1 null) classes"},
               d / "pmf-synthfaces32-smile.pt")
    clf = _random(UserClassifier(), 2)
    torch.save({"state_dict": clf.state_dict()}, d / "classifier.pt")
    return {"dir": d, "ema": ema, "raw": raw, "clf": clf}


def pmf_spec(released, **over) -> dict:
    return {"weights": str(released["dir"] / "pmf-synthfaces32-smile.pt"), "format": "torch_module",
            "class": "tests.user_nets:TinyDiT", "kwargs": DIT, "state_dict": "ema", "output": "x",
            "inputs": ["z", "t", "h", "y"], "class_label": 2, **over}


def clf_spec(released, **over) -> dict:
    return {"weights": str(released["dir"] / "classifier.pt"), "format": "torch_module",
            "class": "tests.user_nets:UserClassifier", "state_dict": "state_dict", "output": "logits",
            "head": "2logit", **over}


def test_pmf_x_prediction_calls_the_ema_network_with_h_equal_t_and_the_null_class(released):
    pmf, name = load_canonical("pmf", pmf_spec(released), TASK, KEY)
    assert "TinyDiT" in name and "torch_module" in name
    z, t = torch.randn(3, 3, 32, 32), torch.tensor([0.2, 0.5, 0.9])
    null = torch.full((3,), 2)
    with torch.no_grad():
        x = pmf.predict_clean(z, t)
        torch.testing.assert_close(x, released["ema"](z, t, t, null), rtol=0, atol=0)
        assert (x - released["raw"](z, t, t, null)).abs().max() > 1e-3  # `ema`, not `model`
        assert (x - released["ema"](z, t, t, torch.zeros(3, dtype=torch.long))).abs().max() > 1e-4  # y is used
        # the role contract: predict_clean = z - t u(z, 0, t)
        torch.testing.assert_close(z - t.reshape(-1, 1, 1, 1) * pmf.u(z, 0.0, t), x, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pmf.predict_clean(z, 0.5), released["ema"](z, torch.full((3,), 0.5),
                                                                              torch.full((3,), 0.5), null))


class VelocityNet(TinyDiT):
    """A MeanFlow network returning the average velocity u(z, r, t), r before t, times scaled by 1000."""

    def forward(self, z, r, t, y):  # type: ignore[override]
        return super().forward(z, t, t - r, y) - z


def test_pmf_average_velocity_convention_gives_z_minus_t_u(released, tmp_path):
    net = _random(VelocityNet(**DIT), 3)
    torch.save(net.state_dict(), tmp_path / "u.pt")
    spec = pmf_spec(released, weights=str(tmp_path / "u.pt"), **{"class": "tests.test_torch_module:VelocityNet"},
                    state_dict=None, output="u", inputs=["z", "r", "t", "y"], time_scale=1000.0)
    pmf, _ = load_canonical("pmf", spec, TASK, KEY)
    z, t = torch.randn(2, 3, 32, 32), torch.tensor([0.3, 0.7])
    with torch.no_grad():
        u = net(z, torch.zeros(2), 1000 * t, torch.full((2,), 2))
        torch.testing.assert_close(pmf.predict_clean(z, t), z - t.reshape(-1, 1, 1, 1) * u, rtol=0, atol=0)
        torch.testing.assert_close(pmf.u(z, torch.full((2,), 0.1), t),
                                   net(z, torch.full((2,), 100.0), 1000 * t, torch.full((2,), 2)))


class ReleasedPMF(TinyDiT):
    """pMF's released forward ``forward(x, t, h, omega, t_min, t_max, y)``: the guidance scale omega applied
    inside the interval [t_min, t_max]; it records the constants it was called with."""

    seen: dict = {}

    def forward(self, x, t, h, omega, t_min, t_max, y):  # type: ignore[override]
        ReleasedPMF.seen = {"omega": omega, "t_min": t_min, "t_max": t_max}
        inside = (t >= t_min) & (t <= t_max)
        return super().forward(x, t, h, y) * torch.where(inside, omega, torch.ones_like(omega)).reshape(-1, 1, 1, 1)


RELEASED = {"class": "tests.test_torch_module:ReleasedPMF", "inputs": ["z", "t", "h", "omega", "t_min", "t_max", "y"],
            "const": {"omega": 1.0, "t_min": 0.0, "t_max": 1.0}}


def test_constant_inputs_reach_pmfs_released_forward_at_their_places(released):
    pmf, _ = load_canonical("pmf", pmf_spec(released, **RELEASED), TASK, KEY)
    z, t, null = torch.randn(2, 3, 32, 32), torch.tensor([0.3, 0.8]), torch.full((2,), 2)
    with torch.no_grad():  # omega 1 over the whole interval: the DiT's own x-prediction
        torch.testing.assert_close(pmf.predict_clean(z, t), released["ema"](z, t, t, null), rtol=0, atol=0)
        seen = type(pmf.call.net).seen  # the class as the loader imported it (tests.test_torch_module)
        assert all(v.shape == (2,) and v.dtype == torch.float32 for v in seen.values())
        assert seen["omega"].tolist() == [1.0, 1.0] and seen["t_max"].tolist() == [1.0, 1.0]
        spec = pmf_spec(released, **{**RELEASED, "const": {"omega": 3.0, "t_min": 0.5, "t_max": 1.0}})
        scaled, _ = load_canonical("pmf", spec, TASK, KEY)
        out = scaled.predict_clean(z, t)  # omega 3 inside [0.5, 1]: row 1 (t = 0.8) only
        torch.testing.assert_close(out[0], released["ema"](z, t, t, null)[0], rtol=0, atol=0)
        torch.testing.assert_close(out[1], 3 * released["ema"](z, t, t, null)[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("over, message", [
    ({"const": [1.0]}, r"`models\.synthfaces\.pmf\.const` must be a mapping"),
    ({"const": {"omega": True, "t_min": 0.0, "t_max": 1.0}}, r"`models\.synthfaces\.pmf\.const\.omega` must be a "
                                                             r"number"),
    ({"const": {"t": 0.5, "omega": 1.0, "t_min": 0.0, "t_max": 1.0}}, r"`models\.synthfaces\.pmf\.const` names 't'"),
    ({"const": {"omega": 1.0, "t_min": 0.0}}, r"`models\.synthfaces\.pmf\.inputs` lists the forward's positional"),
    ({"inputs": ["z", "t", "h", "y"]}, r"`models\.synthfaces\.pmf\.inputs` \['z', 't', 'h', 'y'\] with "
                                       r"`models\.synthfaces\.pmf\.const` \['omega', 't_min', 't_max'\] by keyword "
                                       r"does not fit ReleasedPMF\.forward"),
])
def test_bad_constant_inputs_are_one_line_errors(released, over, message):
    with pytest.raises(UserError, match=message) as e:
        load_canonical("pmf", pmf_spec(released, **{**RELEASED, **over}), TASK, KEY)
    assert "\n" not in str(e.value)


def test_classifier_logits_and_a_1logit_column(released):
    head, _ = load_canonical("classifier", clf_spec(released), TASK, "models.synthfaces.classifier")
    x = torch.rand(4, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(head(x), released["clf"](x))
        one, _ = load_canonical("classifier", clf_spec(released, head="1logit", index=1), TASK, "k")
        torch.testing.assert_close(one(x)[:, 1], released["clf"](x)[:, 1])
        assert bool((one(x)[:, 0] == 0).all())


class Pickled:  # an object a weights_only load must refuse
    def __init__(self):
        self.w = torch.zeros(2)


@pytest.mark.parametrize("role, over, message", [
    ("pmf", {"class": "tests.user_nets.TinyDiT"}, r"`models\.synthfaces\.pmf\.class` must be \"package\.module:Name\""),
    ("pmf", {"class": "fire_authors_repo.models:DiT_B_8"}, r"`models\.synthfaces\.pmf\.class`: cannot import "
                                                          r"'fire_authors_repo\.models'"),
    ("pmf", {"class": "tests.user_nets:DiT_B_8"}, r"`models\.synthfaces\.pmf\.class`: 'tests\.user_nets' has no"),
    ("pmf", {"class": "tests.user_nets:NotAModule"}, r"`models\.synthfaces\.pmf\.class`: .* not a torch\.nn\.Module"),
    ("pmf", {"kwargs": {**DIT, "depht": 3}}, r"`models\.synthfaces\.pmf\.kwargs`: .*depht"),
    ("pmf", {"state_dict": "ema_model"}, r"`models\.synthfaces\.pmf\.state_dict` is 'ema_model', but .* holds no "
                                         r"such key \(found \['ema', 'epoch', 'model', 'note'\]\)"),
    ("pmf", {"state_dict": None}, r"`models\.synthfaces\.pmf\.state_dict`: .* is not a state dict of tensors"),
    ("pmf", {"output": "v"}, r"`models\.synthfaces\.pmf\.output` declares what the pmf network returns: one of x, u"),
    ("pmf", {"inputs": ["z", "t", "y"]}, r"`models\.synthfaces\.pmf\.inputs` \['z', 't', 'y'\] does not fit "
                                         r"TinyDiT\.forward"),
    ("pmf", {"inputs": ["t", "z", "h", "y"]}, r"`models\.synthfaces\.pmf\.inputs` lists the forward's positional"),
    ("pmf", {"class_label": None, "inputs": ["z", "t", "h", "y"]}, r"`models\.synthfaces\.pmf\.class_label`"),
    ("pmf", {"head": "2logit"}, r"`models\.synthfaces\.pmf\.head` does not apply to a torch_module pmf"),
    ("pmf", {"kwargs": {**DIT, "hidden_size": 16}}, r"shape mismatch"),
])
def test_bad_blocks_are_one_line_errors_naming_the_config_key(released, role, over, message):
    spec = {k: v for k, v in pmf_spec(released, **over).items() if v is not None or k == "state_dict"}
    with pytest.raises(UserError, match=message) as e:
        load_canonical(role, spec, TASK, KEY)
    assert "\n" not in str(e.value)


def test_a_pickled_payload_is_refused_by_weights_only(released, tmp_path):
    torch.save({"ema": released["ema"].state_dict(), "extra": Pickled()}, tmp_path / "pickled.pt")
    with pytest.raises(UserError, match=r"`models\.synthfaces\.pmf\.weights`: .*weights_only=True") as e:
        load_canonical("pmf", pmf_spec(released, weights=str(tmp_path / "pickled.pt")), TASK, KEY)
    assert "\n" not in str(e.value)
    assert not hasattr(Pickled, "loaded")  # nothing was built from it


def test_dits_training_layout_with_its_argparse_namespace_loads(released, tmp_path):
    import argparse

    torch.save({"model": released["raw"].state_dict(), "ema": released["ema"].state_dict(), "opt": {},
                "args": argparse.Namespace(model="DiT-B/8", image_size=32, num_classes=2)}, tmp_path / "0040000.pt")
    pmf, _ = load_canonical("pmf", pmf_spec(released, weights=str(tmp_path / "0040000.pt")), TASK, KEY)
    z, t = torch.randn(1, 3, 32, 32), torch.full((1,), 0.4)
    with torch.no_grad():
        torch.testing.assert_close(pmf.predict_clean(z, 0.4), released["ema"](z, t, t, torch.full((1,), 2)))


def test_a_wrong_classifier_head_is_named_at_the_first_call(released):
    head, _ = load_canonical("classifier", clf_spec(released, head="1logit", index=5), TASK,
                             "models.synthfaces.classifier")
    with pytest.raises(UserError, match=r"`models\.synthfaces\.classifier\.head`: 1logit does not fit the "
                                        r"network's output \(4, 2\)"):
        head(torch.zeros(4, 3, 32, 32))


def test_the_block_is_checked_when_the_config_is_loaded(cfg, released):
    from vcebench.protocol.settings import check_settings

    c = copy.deepcopy(cfg)
    c["models"]["synthfaces"]["pmf"] = pmf_spec(released)
    c["models"]["synthfaces"]["classifier"] = clf_spec(released)
    check_settings(c)
    c["models"]["synthfaces"]["pmf"] = pmf_spec(released, output="eps")
    with pytest.raises(UserError, match=r"`models\.synthfaces\.pmf\.output`"):
        check_settings(c)


# ----------------------------------------------------------------------------- to the table

def test_torch_module_pmf_and_classifier_run_fire_to_the_table(released, tmp_path, monkeypatch):
    """`vcebench explain` (FiRe on the DiT pMF and the user classifier, both loaded by class path),
    `vcebench evaluate` (the classifier again; the metric roles from stand-ins) and `vcebench report task`."""
    import yaml

    import vcebench.models
    from vcebench.cli import main
    from vcebench.costs.standins import standin_models

    real_load = vcebench.models.load_task_models
    own = {"classifier", "pmf"}
    loaded = []

    def load(cfg, task, roles=(), device="cpu", model_dir="resources/models"):
        models = real_load(cfg, task, roles=tuple(r for r in roles if r in own), device=device, model_dir=model_dir)
        stand = standin_models(["Smiling", "Young"], 3)
        for role in roles:
            if role not in own:
                setattr(models, role, getattr(stand, role))
                models.names[role] = stand.names[role]
        loaded.append(dict(models.names))
        return models

    monkeypatch.setattr(vcebench.models, "load_task_models", load, raising=False)
    # one whole config file: a preset's `models` block would merge into the default training settings
    run = yaml.safe_load(open("config/config.yaml"))
    run.update({"threads": 1, "n_eval": 6, "batch_size": 3, "methods": ["fire"],
                "metrics": {**run["metrics"], "sfid_seeds": [0], "batch_size": 6}})
    run["datasets"]["synthfaces"].update({"n_identities": 40, "images_per_identity": 8})
    run["tasks"]["synthfaces_smile"]["params"]["fire"].update({"K": 2, "smoothgrad_n": 2, "lambda_perc": 0.0})
    run["models"]["synthfaces"].update({"pmf": pmf_spec(released), "classifier": clf_spec(released)})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    config = ["--config", str(tmp_path / "run.yaml")]
    res = tmp_path / "results" / "synthfaces_smile"
    shard = res / "fire" / "shards" / "shard-0-of-1.npz"
    assert main(["explain", "--task", "synthfaces_smile", "--method", "fire", "--out", str(shard), *config]) == 0
    assert "TinyDiT" in loaded[-1]["pmf"] and "UserClassifier" in loaded[-1]["classifier"]
    assert main(["explain", "--merge", str(shard), "--out", str(res / "fire" / "counterfactuals.npz"),
                 "--profile-out", str(res / "fire" / "profile.json")]) == 0
    assert main(["evaluate", "--task", "synthfaces_smile", "--reference", "--out", str(res / "fid_ref.npz"),
                 "--no-progress", *config]) == 0
    assert main(["evaluate", "--task", "synthfaces_smile", "--method", "fire",
                 "--cfs", str(res / "fire" / "counterfactuals.npz"), "--fid-ref", str(res / "fid_ref.npz"),
                 "--out", str(res / "fire" / "metrics.json"), "--no-progress", *config]) == 0
    metrics = json.loads((res / "fire" / "metrics.json").read_text())
    assert "UserClassifier" in metrics["models"]["classifier"]
    assert metrics["metrics"]["L1"] > 0  # the pmf's predictions changed the inputs
    assert main(["report", "task", "--task", "synthfaces_smile", "--methods", "fire",
                 "--results", str(tmp_path / "results"), "--out-dir", str(tmp_path / "results"), *config]) == 0
    with open(tmp_path / "results" / "synthfaces_smile.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == ["fire"] and int(rows[0]["n"]) == 6
    assert float(rows[0]["FR"]) == pytest.approx(metrics["metrics"]["FR"]) and rows[0]["COUT"] != ""
    assert "FiRe" in (tmp_path / "results" / "synthfaces_smile.md").read_text()


def test_ddpm_eps_convention_and_its_schedule(cfg, tmp_path):
    from tests.user_nets import EpsNet
    from vcebench.models.task_models import load_role
    from vcebench.protocol.noise import check_ddpm_schedule, ddpm_schedule

    net = _random(EpsNet(), 4)
    torch.save({"model": net.state_dict()}, tmp_path / "eps.pt")
    c = copy.deepcopy(cfg)
    c["models"]["celeba"]["ddpm"] = {"weights": str(tmp_path / "eps.pt"), "format": "torch_module",
                                     "class": "tests.user_nets:EpsNet", "state_dict": "model", "output": "eps",
                                     "inputs": ["z", "t"], "diffusion_steps": 1000, "noise_schedule": "linear"}
    task = Task(name="celeba_smile", dataset="celeba", attribute="Smiling")
    ddpm, _ = load_role(c, task, "ddpm")
    z, t = torch.randn(2, 3, 8, 8), torch.tensor([5, 900])
    with torch.no_grad():
        torch.testing.assert_close(ddpm.eps(z, t), net(z, t))
    assert ddpm.num_train_timesteps == 1000 and len(ddpm_schedule(c, "celeba")[0]) == 1000
    check_ddpm_schedule(c, "celeba", ddpm.alphas_cumprod.numpy())
    c["models"]["celeba"]["ddpm"]["learn_sigma"] = True  # declared 2C channels, the network gives C
    ddpm, _ = load_role(c, task, "ddpm")
    with pytest.raises(UserError, match=r"`models\.celeba\.ddpm\.output`: the network returned \(2, 3, 8, 8\)"):
        ddpm.eps(z, t)
