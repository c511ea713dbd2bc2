"""Networks by role (docs/architecture.md): load them for a task, or train the synthetic ones.

``load_task_models(cfg, task, roles)`` is the entry point (docs/internals.md, "Models"); training a role
is :func:`vcebench.steps.train.train_role` (``vcebench train``).
"""

from .base import ROLES, BinaryHead, TaskModels, freeze
from .checkpoints import CheckpointError
from .zoo import MissingModelError, load_role, load_task_models, load_trained_net

__all__ = ["ROLES", "BinaryHead", "CheckpointError", "MissingModelError", "TaskModels", "freeze", "load_role",
           "load_task_models", "load_trained_net"]

