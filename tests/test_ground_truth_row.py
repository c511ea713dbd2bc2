"""The `truth` row (methods/ground_truth.py): the renderer's true counterfactual through the method interface,
and where it exists (synthetic tasks only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import methods
from metrics.base import EvalBatch
from metrics.ground_truth import GroundTruth as GroundTruthMetric
from vcebench.config.load import ConfigError, load_config
from vcebench.config.tasks import check_method_names, get_task, task_methods
from vcebench.core.io import from_uint8, to_uint8
from vcebench.core.rng import SampleGenerators
from vcebench.data import get_synthetic
from vcebench.models.base import TaskModels
from vcebench.protocol.run_settings import RunSettings

ATTR = "Smiling"
DATA = load_config()
DATA["datasets"]["synthfaces"].update(n_identities=12, images_per_identity=2)  # a small renderer (below the schema's)


class LookupClassifier(nn.Module):
    """A classifier that knows these images: the label of the nearest image of its bank (2 logits)."""

    def __init__(self, bank: torch.Tensor, labels: torch.Tensor):
        super().__init__()
        self.bank, self.labels = bank.flatten(1), labels.long()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nearest = torch.cdist(x.flatten(1), self.bank).argmin(1)
        return nn.functional.one_hot(self.labels[nearest], 2).float() * 10


@pytest.fixture(scope="module")
def world():
    ds = get_synthetic(DATA, "synthfaces")
    ids = torch.arange(10)
    x = from_uint8(to_uint8(ds.render(ids)))  # what the split holds
    gt = from_uint8(to_uint8(ds.gt_counterfactuals(ids, ATTR)))
    y = ds.labels(ids)[:, ds.attribute_names.index(ATTR)].long()
    return ds, ids, x, gt, y


def _run(ids, x, clf, batch_size):
    models = TaskModels(classifier=clf)
    method = methods.get_method("truth", {}, task=get_task(load_config(), "synthfaces_smile"), config=DATA)
    with torch.no_grad():
        target = 1 - clf(x).argmax(1)
    parts = [method(x[s:s + batch_size], target[s:s + batch_size], models,
                    SampleGenerators(0, ids[s:s + batch_size])) for s in range(0, len(x), batch_size)]
    return target, torch.cat([p.images for p in parts]), torch.cat([p.flipped for p in parts])


def test_truth_row_is_the_renderers_counterfactual(world):
    ds, ids, x, gt, y = world
    clf = LookupClassifier(torch.cat([x, gt]), torch.cat([y, 1 - y]))  # right on every input and every truth
    target, cf, flipped = _run(ids, x, clf, batch_size=4)
    assert torch.equal(target, 1 - y)
    assert np.array_equal(to_uint8(cf), to_uint8(gt))
    assert flipped.all()  # FR 100
    metric = GroundTruthMetric()
    metric.update(EvalBatch(x=x, cf=from_uint8(to_uint8(cf)), sample_id=ids, target=target, flipped=flipped,
                            label=y, gt_cf=gt, pred=1 - target))
    out = metric.compute()
    assert out["GT_L1"] == 0 and out["GT_L1_region"] == 0 and out["GT_L1_input"] > 0


def test_truth_row_keeps_an_input_the_classifier_gets_wrong(world):
    """On a misclassified input the target (1 - f(x)) is the true label: the input already shows it, and the
    row returns it unedited (not flipped: the classifier's mistake stays)."""
    ds, ids, x, gt, y = world
    wrong = y.clone()
    wrong[3] = 1 - wrong[3]
    clf = LookupClassifier(torch.cat([x, gt]), torch.cat([wrong, 1 - y]))
    target, cf, flipped = _run(ids, x, clf, batch_size=10)
    assert target[3] == y[3]
    assert np.array_equal(to_uint8(cf[3]), to_uint8(x[3]))
    assert not flipped[3] and flipped[[i for i in range(10) if i != 3]].all()


def test_truth_row_does_not_depend_on_the_batch_size(world):
    ds, ids, x, gt, y = world
    clf = LookupClassifier(torch.cat([x, gt]), torch.cat([y, 1 - y]))
    _, one, _ = _run(ids, x, clf, batch_size=1)
    _, many, _ = _run(ids, x, clf, batch_size=7)
    assert torch.equal(one, many)


def test_truth_row_exists_on_synthetic_tasks_only():
    cfg = load_config()
    assert "truth" in cfg["methods"]
    assert "truth" not in task_methods(cfg, "celeba_smile", cfg["methods"])
    assert "truth" in task_methods(cfg, "synthxray_pacemaker", cfg["methods"])
    with pytest.raises(ConfigError, match=r"task 'celeba_smile' is on 'celeba'") as e:
        RunSettings.resolve(cfg, "celeba_smile", "truth")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"config keys `methods` and `run_tasks`.*celeba_smile"):
        check_method_names({**cfg, "run_tasks": ["synthfaces_smile", "celeba_smile"]})
    with pytest.raises(ConfigError, match="renders a synthetic task's true counterfactuals"):
        methods.get_method("truth", {})
