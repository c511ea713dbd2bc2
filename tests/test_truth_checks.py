"""Judges against the renderer's true counterfactuals (vcebench/models/shipping/truth_checks.py)."""

from __future__ import annotations

import dataclasses

import torch

from vcebench.models.shipping.truth_checks import mix_views, truth_agreement, truth_similarity


@dataclasses.dataclass
class _Split:
    sample_ids: torch.Tensor
    labels: torch.Tensor
    identity: torch.Tensor
    attribute_names: list
    _images: torch.Tensor
    _reader: object = None
    paths: list | None = None

    @property
    def images(self):
        return self._images


def _split(n=8):
    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (n, 1, 2, 2), generator=g, dtype=torch.uint8)
    labels = torch.tensor([[float(i % 2)] for i in range(n)])
    return _Split(torch.arange(n), labels, torch.arange(n), ["A"], imgs)


def _flip(split, attribute):
    """A toy renderer: the counterfactual is the inverted image."""
    return 255 - split.images


def test_mix_views_replaces_the_asked_share_with_the_same_rows_counterfactual():
    x = _split().images
    views = torch.stack([255 - x])
    idx = torch.tensor([3, 1, 3])
    assert torch.equal(mix_views(x, idx, views, 0.0), x[idx])
    assert torch.equal(mix_views(x, idx, views, 1.0), (255 - x)[idx])
    torch.manual_seed(0)
    out = mix_views(x, torch.arange(8).repeat(50), views, 0.5)
    share = (out != x[torch.arange(8).repeat(50)]).flatten(1).any(1).float().mean()
    assert 0.35 < share < 0.65


def test_truth_agreement_reads_the_counterfactual_as_the_other_class():
    # a "net" whose logit is positive for bright images; label 1 = bright
    s = _split()
    s.labels = (s.images.float().mean(dim=(1, 2, 3)) > 127.5).float()[:, None]
    class Bright(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=(1, 2, 3))[:, None]

    net = Bright()
    r = truth_agreement(net, ["A"], s, ["A"], _flip)["A"]
    assert r["n"] == 8 and r["input_accuracy"] == 1.0 and r["truth_agreement"] == 1.0
    assert truth_agreement(net, ["A"], s, ["A"], None) is None


def test_truth_similarity_is_one_for_an_embedding_blind_to_the_edit():
    s = _split()
    blind = lambda u8: torch.ones(len(u8), 4) + 0 * u8.float().flatten(1)[:, :4]  # noqa: E731
    r = truth_similarity(blind, s, ["A"], _flip, threshold=0.5)["A"]
    assert abs(r["mean_cos_truth"] - 1) < 1e-6 and r["share_cos_truth_gt_0.5"] == 1.0
    pixel = lambda u8: u8.float().flatten(1) - 127.5  # noqa: E731
    r = truth_similarity(pixel, s, ["A"], _flip)["A"]
    assert r["mean_cos_truth"] < -0.99  # the inverted image points the other way
