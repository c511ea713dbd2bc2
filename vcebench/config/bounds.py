"""Sane ranges of numeric settings, one :class:`Bound` per setting, checked wherever the setting is written.

A method's hyperparameter has its bound in its dataclass's ``BOUNDS`` (e.g. ``methods.fire.FireParams.BOUNDS``), a
noise-protocol key in :data:`vcebench.protocol.noise.PROTOCOL_BOUNDS`: the config check tests every config layer
that sets the key (``method_defaults``, ``variants``, a task's ``params``: a tuned layer merged over it must not
hide a value the run would never use) and the resolved value (the job's settings, :mod:`vcebench.protocol.resolve`).
A value outside its bound is a one-line :class:`~vcebench.config.load.ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError

# the largest image side a setting in pixels may take before the task is known (a config layer such as
# `method_defaults`); a resolved setting is held to twice its task's resolution (:meth:`Bound.check` ``image_size``):
# a radius or a kernel width beyond twice the image side reaches past the whole image from any pixel, so it can
# only be a mistake (a paper's value at its own resolution, 57 px at CheXpert's 512, stays legal on a 32 px copy)
MAX_IMAGE_SIZE = 1024


@dataclass(frozen=True)
class Bound:
    """``lo <= value <= hi`` (``lo_open`` / ``hi_open``: strict); None: unbounded on that side. ``pixels``: a
    length in pixels, at most twice the image size (:data:`MAX_IMAGE_SIZE` while the image size is unknown)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    pixels: bool = False

    def upper(self, image_size: int | None) -> float | None:
        """The upper limit, twice the image size for a length in pixels."""
        if not self.pixels:
            return self.hi
        size = MAX_IMAGE_SIZE if image_size is None else 2 * int(image_size)
        return size if self.hi is None else min(self.hi, size)

    def describe(self, image_size: int | None = None) -> str:
        """The range as an interval, e.g. ``(0, 1]`` or ``[1, 1000]``."""
        hi = self.upper(image_size)
        lo_s = "-inf" if self.lo is None else f"{self.lo:g}"
        hi_s = "inf" if hi is None else f"{hi:g}"
        left = "(" if self.lo_open or self.lo is None else "["
        right = ")" if self.hi_open or hi is None else "]"
        return f"{left}{lo_s}, {hi_s}{right}" + (" (twice the image size)" if self.pixels else "")

    def contains(self, value: float, image_size: int | None = None) -> bool:
        """Whether ``value`` is in range."""
        hi = self.upper(image_size)
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return hi is None or (value < hi if self.hi_open else value <= hi)

    def check(self, key: str, value: Any, image_size: int | None = None) -> None:
        """A :class:`ConfigError` naming config key ``key`` unless ``value`` (a number, or None: unset) is in
        range; every item of a list of numbers is checked."""
        items = value if isinstance(value, (list, tuple)) else [value]
        for v in items:
            if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if not self.contains(v, image_size):
                raise ConfigError(f"config key `{key}` must be in {self.describe(image_size)}, got {v!r}")


def check_bounds(section: str, values: Mapping[str, Any], bounds: Mapping[str, Bound],
                 image_size: int | None = None) -> None:
    """Every key of ``values`` that has a bound checked (:meth:`Bound.check`); ``section``: the config key above
    them (``method_defaults.fire``)."""
    for key, value in values.items():
        if key in bounds:
            bounds[key].check(f"{section}.{key}", value, image_size)
