"""``Linf``: the largest change of any pixel, per sample in [0, 1] units, averaged over all inputs."""

from __future__ import annotations

from metrics.base import SubsetMean
from vcebench.registry import metric


class Linf(SubsetMean):
    name = "Linf"
    higher_is_better = {"Linf": False}
    roles = ()

    def values(self, batch, keep):
        return (batch.x - batch.cf)[keep].abs().flatten(1).amax(1).double() / 2


@metric("Linf", columns={"Linf": False}, labels={"Linf": "Linf (max change)"})
def build(ctx):
    return Linf("all")
