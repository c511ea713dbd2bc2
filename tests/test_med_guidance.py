"""The x-ray baselines as FastDiME_Med's code (``guidance_form: med``, config/config.yaml; vcebench/protocol/fair.py
PAPER ``chexpert_med``): the guidance gradient on a small fake at Med's 224 px against a transcription of Med's
formula (nina-weng/FastDiME_Med@c0494c3 models/diffusion.py:313-325, 601-612, 614-677, 756-761)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.ddpm import GuidedDDPMParams, l1_terms
from methods.guidance import guidance_grads
from vcebench.models.base import BinaryHead, TaskModels
from vcebench.protocol.fair import PAPER, paper_value, rule_params

SCALE, L1 = 100.0, 200.0  # Med's classifier scale and Denoised_L1 weight (CFgenerating/config_cf.py:75-82)


class OneLogit(nn.Module):
    """A small fake 1-logit classifier (Med's heads are 1-logit sigmoid)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 4, 5, stride=4)
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(torch.tanh(self.conv(x)).mean((2, 3)))


def med_gradient(net: nn.Module, x_t_0: torch.Tensor, x_0: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Transcribed from Med: ``get_classifier_loss`` (sigmoid, BCE), ``get_l1_loss`` (L1Loss none, mean(1)),
    ``get_guided_gradient`` (weights [1, 200], ``loss.mean().backward()``), the step's ``grad * scale``."""
    x = x_t_0.clone().requires_grad_(True)
    class_loss = F.binary_cross_entropy(torch.sigmoid(net(x)), y, reduction="none")
    l1 = nn.L1Loss(reduction="none")(x, x_0)
    l1 = l1.view(l1.size(0), -1).mean(1).view(-1, 1)
    (1.0 * class_loss + L1 * l1).mean().backward()
    return x.grad.detach() * SCALE


@pytest.fixture(scope="module")
def fake():
    net = OneLogit()
    g = torch.Generator().manual_seed(1)
    x0 = torch.rand(2, 1, 224, 224, generator=g) * 2 - 1
    x_t_0 = (x0 + 0.3 * torch.randn(2, 1, 224, 224, generator=g)).clamp(-1, 1)
    return net, x0, x_t_0, torch.tensor([1, 0])


def _ours(net, x0, x_t_0, target, form: str) -> torch.Tensor:
    p = GuidedDDPMParams(scales=(SCALE,), l1=L1, perc=0.0, l1_on="clean", guidance_form=form)
    models = TaskModels(classifier=BinaryHead(net))
    g_cls, _ = guidance_grads(models, x_t_0, x0, target, SCALE, 0.0, p.cls_loss)
    l1_clean, l1_noisy = l1_terms(p, x_t_0, x_t_0, x0, SCALE)
    return g_cls + l1_clean + l1_noisy


def test_med_form_is_meds_gradient_per_sample(fake):
    net, x0, x_t_0, target = fake
    want = med_gradient(net, x_t_0, x0, target.float().view(-1, 1))
    got = _ours(net, x0, x_t_0, target, "med")
    # Med's loss.mean() divides by its batch; here each sample's gradient is its own (as ACE's, methods/ace.py)
    torch.testing.assert_close(got, want * len(x0), rtol=1e-4, atol=1e-7)
    # planted fault: the DiME form used before (logit loss, 200 sign(x_t - x) unscaled) is not Med's
    assert not torch.allclose(_ours(net, x0, x_t_0, target, "dime"), want * len(x0), rtol=1e-2)


def test_med_form_needs_its_l1_on_the_clean_image():
    with pytest.raises(Exception, match="l1_on: clean"):
        GuidedDDPMParams(l1_on="noisy", guidance_form="med").validate("dime")


def test_med_code_facts_name_file_and_line():
    for key, pv in PAPER.items():
        if key[0] == "chexpert_med":
            assert "FastDiME_Med@c0494c3" in pv.source and ".py:" in pv.source, key
    assert paper_value("chexpert_med", "fastdime", "mask_dilation").resolution == 224
    assert paper_value("chexpert_med", "dime", "l1").value == 50.0
    assert paper_value("chexpert_med", "fastdime", "l1").value == 200.0
    med = rule_params("synthxray", "Pacemaker", 32, med_code=True)
    assert med["dime"]["l1"] == 50.0 and med["fastdime"]["guidance_form"] == "med"
    assert med["fastdime"]["mask_from_t"] is None and med["fastdime"]["warmup_fraction"] == 0.5
    # the kernel 21 at 224 px: 3 at 32 px, 47 at CheXpert's 512 (21 at 512 was chexpert_pacemaker's before issue #62)
    assert rule_params("synthxray", "Pacemaker", 512, med_code=True)["fastdime"]["mask_dilation"] == 47
