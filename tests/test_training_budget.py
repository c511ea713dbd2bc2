"""A training run's budget (vcebench/models/training/budget.py): steps x batch and counted FLOPs."""

from __future__ import annotations

import torch
from torch import nn

from vcebench.costs.budget import run_budget, total_budget
from vcebench.models.training.generative import GenerativeLoss


def test_a_runs_flops_are_each_modes_counted_step_times_its_steps():
    """A linear layer d_in -> d_out on a batch of B: the forward is 2 B d_in d_out FLOPs, its backward to the
    weights as many again (no gradient to the input, which needs none); a mode that adds one more forward
    (as the pmf's finite-difference du/dt does) costs 6 B d_in d_out. 3 steps of the first mode, 5 of the other."""
    d_in, d_out, B = 12, 5, 4
    model = nn.Linear(d_in, d_out, bias=False)

    def compute(net, drawn, extra_forward):
        (x,) = drawn
        loss = net(x).square().mean()
        if extra_forward:
            with torch.no_grad():
                extra = net(x).sum()
            loss = loss + 0 * extra
        return loss

    loss_fn = GenerativeLoss(lambda x, g, step: (x,), compute, mode=lambda step: step >= 3,
                             mode_names={False: "plain", True: "with a forward more"})
    w = model.weight.detach().clone()
    b = run_budget(model, loss_fn, 8, torch.randn(B, d_in))
    unit = 2 * B * d_in * d_out
    assert b["flops_per_step"] == [{"mode": "plain", "steps": 3, "flops": 2 * unit},
                                   {"mode": "with a forward more", "steps": 5, "flops": 3 * unit}]
    assert b["flops"] == 3 * 2 * unit + 5 * 3 * unit and b["images"] == 8 * B and b["batch_size"] == B
    assert torch.equal(model.weight, w) and model.weight.grad is None  # counted on a copy


def test_a_continued_runs_budget_adds_its_starts_in_all():
    own = {"steps": 2, "images": 8, "flops": 10}
    start = {"steps": 3, "images": 12, "flops": 7}
    assert total_budget(own, None) == own
    assert total_budget(own, start)["total"] == {"steps": 5, "images": 20, "flops": 17}
    # a start that itself continued another: its total is what it adds
    assert total_budget(own, {**start, "total": {"steps": 6, "images": 24, "flops": 9}})["total"] == {
        "steps": 8, "images": 32, "flops": 19}
