"""Datasets: the embedded synthetic benchmark and the real-dataset loaders (docs/internals.md, "Data").

The names below are imported on first use (PEP 562): the split names and labels (``specs.py``) are read when the
workflow builds its DAG, without starting torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"DatasetError": "..core.errors", "Split": ".base", "attribute_names": ".specs",
            "eval_split_name": ".specs", "tune_split_name": ".specs", "get_synthetic": ".registry",
            "load_split": ".registry"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
