"""Networks by role (docs/architecture.md): load them for a task, or train the synthetic ones.

``load_task_models(cfg, task, roles)`` is the entry point (docs/internals.md, "Models"); training a role
is :func:`vcebench.steps.train.train_role` (``vcebench train``).

The names below are imported on first use (PEP 562), so that the torch-free modules of this package
(``shipped``, ``recipes``' settings checks) do not start torch: installing a shipped network is a file copy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"ROLES": "base", "BinaryHead": "base", "TaskModels": "base", "freeze": "base",
            "CheckpointError": "checkpoints", "MissingModelError": "task_models", "load_role": "task_models",
            "load_task_models": "task_models", "judge_files": "task_models", "load_trained_net": "synthetic.load"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
