"""Networks by role (docs/architecture.md): load them for a task, or train the synthetic ones.

``load_task_models(cfg, task, roles)`` is the entry point (docs/internals.md, "Models");
``train_role(cfg, role, task, ...)`` is what ``vcebench train`` runs.
"""

from .base import ROLES, BinaryHead, TaskModels, freeze
from .checkpoints import CheckpointError
from .zoo import MissingModelError, load_role, load_task_models, load_trained_net

__all__ = ["ROLES", "BinaryHead", "CheckpointError", "MissingModelError", "TaskModels", "freeze", "load_role",
           "load_task_models", "load_trained_net", "train_role"]


def train_role(*args, **kwargs):
    """Train one role of a dataset (see :func:`vcebench.steps.train.train_role`)."""
    from .recipes import train_role as _train_role

    return _train_role(*args, **kwargs)
