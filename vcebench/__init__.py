"""vcebench: a benchmark harness for visual counterfactual explanations.

The Python API (docs/python-api.md): ``vcebench.explain`` (counterfactuals for any classifier),
``vcebench.evaluate`` (a task's metrics with their intervals), ``vcebench.load_network`` (a network by role
from a folder or canonical weights) and ``vcebench.Counterfactuals`` (what ``explain`` returns). They are
imported on first use (PEP 562): ``import vcebench`` starts no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {"explain": "vcebench.steps.api", "evaluate": "vcebench.steps.api", "load_network": "vcebench.steps.api",
            "Counterfactuals": "methods.base"}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
