"""Resolve every network a task needs, by role: trained synthetic models or canonical weights.

``models.<dataset>.<role>`` in config either holds training settings (the network lives in
``<model_dir>/<dataset>/<role>/``, written by ``vcebench train <role> --task <task>``) or
``weights: PATH`` + ``format`` (user-supplied canonical weights, :mod:`vcebench.models.released.canonical`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config.load import ConfigError, check_keys
from ..config.tasks import Task
from ..core.errors import CheckpointError, UserError
from .base import ROLES, BinaryHead, TaskModels, freeze
from .synthetic.load import load_trained_net
from .synthetic.nets import AttributeClassifier
from .synthetic.perceptual import FeatureDistance


class MissingModelError(UserError, FileNotFoundError):
    """A trained network that has not been produced yet; the message says which command makes it."""


class Embedding(nn.Module):
    """``f(x) -> (N, D)``: ``net.features`` (``use_features``) or ``net(x)``, optionally L2-normalised."""

    def __init__(self, net: nn.Module, dim: int, name: str = "", use_features: bool = True,
                 normalize: bool = False):
        super().__init__()
        self.net, self.dim, self.name = net, dim, name
        self.use_features, self.normalize = use_features, normalize

    def forward(self, x: Tensor) -> Tensor:
        f = self.net.features(x) if self.use_features else self.net(x)
        return F.normalize(f, dim=1) if self.normalize else f


def wrap_trained(role: str, net: nn.Module, config: dict, task: Task, path: Path) -> tuple[nn.Module, str]:
    """Put a trained network behind its role's call convention (models/base.py); return it and its name."""
    name = config.get("name", f"{config.get('dataset')}-{role}")
    if role == "classifier":
        names = config["attribute_names"]
        if task.attribute not in names:
            raise CheckpointError(f"role 'classifier': {path} predicts {names}, not the query attribute "
                                  f"{task.attribute!r} of task {task.name!r}; retrain it with "
                                  f"`vcebench train classifier --task {task.name}`")
        head = BinaryHead(net, "1logit", names.index(task.attribute))
        head.attribute_names, head.name = names, name
        return head, f"{name} (trained, query {task.attribute})"
    if role == "oracle":
        return AttributeClassifier(net, config["attribute_names"], name), \
            f"{name} (trained, {len(config['attribute_names'])} attributes)"
    if role in ("identity", "fid_features", "simsiam"):
        dim = int(net.feature_dim)
        emb = Embedding(net, dim, name, use_features=role != "simsiam", normalize=role == "identity")
        return emb, f"{name} (trained, {dim}-d)"
    if role == "perceptual":
        return FeatureDistance(net, name), f"{name} (trained, LPIPS-style)"
    raise ValueError(f"role {role!r} has no trained wrapper")


def train_command(role: str, task: Task, model_dir: str | Path) -> str:
    out = Path(model_dir) / task.dataset / role
    return (f"`vcebench train {role} --task {task.name} --out {out}` "
            f"(Snakemake target: {out}/metrics.json)")


def _load_generative(role: str, path: Path, canonical: bool) -> tuple[nn.Module, str]:
    """ddpm / pmf live in vcebench.models.generative.ddpm / .pmf (another module's loaders)."""
    try:
        if role == "ddpm":
            from .generative.ddpm import DiffusersDDPM
            model = DiffusersDDPM.from_pretrained_dir(path)
        else:
            from .generative.pmf import PixelMeanFlow
            model = PixelMeanFlow.load(path)
    except ImportError as e:
        raise CheckpointError(f"role {role!r}: cannot load {path}: vcebench.models.{role} is not available ({e})") \
            from e
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"role {role!r}: cannot load {path}: {e}") from e
    name = getattr(model, "name", None) or f"{path.name} ({'canonical' if canonical else 'trained'})"
    return model, name


def role_spec(cfg: dict, dataset: str, role: str) -> dict:
    return dict(((cfg.get("models") or {}).get(dataset) or {}).get(role) or {})


def load_role(cfg: dict, task: Task, role: str, model_dir: str | Path = "resources/models") -> tuple[nn.Module, str]:
    """One role of ``task``: (module following the role's call convention, human-readable name)."""
    if role not in ROLES:
        raise ConfigError(f"unknown model role {role!r}; known: {', '.join(ROLES)}")
    spec = role_spec(cfg, task.dataset, role)
    key = f"models.{task.dataset}.{role}"
    if "weights" in spec:
        w = spec.get("weights")
        if not w:
            raise ConfigError(f"task {task.name!r} needs role {role!r}: set config key `{key}.weights` to the "
                              f"canonical weights (format {spec.get('format')!r}; see docs/internals.md)")
        if not Path(w).exists():
            raise MissingModelError(f"role {role!r}: weights file {w} (config key `{key}.weights`) does not exist")
        from .released.canonical import load_canonical
        from .released.formats import is_canonical
        if not is_canonical(role, spec):
            return _load_generative(role, Path(w), canonical=True)
        return load_canonical(role, spec, task, key)
    if not task.synthetic and role not in ("ddpm", "pmf"):
        raise ConfigError(f"task {task.name!r} needs role {role!r}: set config key `{key}.weights` "
                          f"(real datasets use canonical weights)")
    path = Path(model_dir) / task.dataset / role
    sentinel = path / "metrics.json"
    if not sentinel.exists():
        raise MissingModelError(f"role {role!r} of task {task.name!r}: no trained model in {path} "
                                f"({sentinel} missing); produce it with {train_command(role, task, model_dir)}")
    if role in ("ddpm", "pmf"):
        return _load_generative(role, path, canonical=False)
    net, config = load_trained_net(role, path)
    if config.get("dataset") != task.dataset:
        raise CheckpointError(f"role {role!r}: {path} was trained on {config.get('dataset')!r}, "
                              f"task {task.name!r} uses {task.dataset!r}")
    return wrap_trained(role, net, config, task, path)


# The files that make a trained judge what it is (what :func:`load_trained_net` reads); its metrics.json is its
# training record, not the network.
TRAINED_FILES = ("config.json", "model.safetensors")


def judge_files(cfg: dict, task: Task, role: str, model_dir: str | Path = "resources/models") -> dict[str, str]:
    """``{file: sha256}`` of the network ``role`` of ``task`` resolves to, as :func:`load_role` resolves it:
    canonical weights (config ``models.<dataset>.<role>.weights``: the file, or every file of the folder) or the
    trained network's :data:`TRAINED_FILES` in ``<model_dir>/<dataset>/<role>/``. Two judges are the same
    network when these are equal (a results bundle records them, ``vcebench report verify`` compares them).
    A network that is not there: :class:`MissingModelError` naming the path."""
    from ..core.io import sha256

    spec = role_spec(cfg, task.dataset, role)
    if spec.get("weights"):
        root = Path(spec["weights"])
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        names = [p.relative_to(root).as_posix() if root.is_dir() else p.name for p in files]
    else:
        root = Path(model_dir) / task.dataset / role
        files = [root / f for f in TRAINED_FILES]
        names = list(TRAINED_FILES)
    missing = [str(p) for p in files if not p.is_file()]
    if not files or missing:
        raise MissingModelError(f"role {role!r} of task {task.name!r}: no network at {missing[0] if missing else root} "
                                f"(--models, or config key `models.{task.dataset}.{role}.weights`)")
    return {n: sha256(p) for n, p in zip(names, files)}


def load_task_models(cfg: dict, task: Task | str, roles: tuple[str, ...] | list[str] = ROLES,
                     device: str | torch.device = "cpu", model_dir: str | Path = "resources/models") -> TaskModels:
    """Every network ``task`` needs for ``roles``, frozen, in eval mode, on ``device`` (docs/internals.md)."""
    if isinstance(task, str):
        from ..config.tasks import get_task
        task = get_task(cfg, task)
    models = TaskModels()
    for role in roles:
        module, name = load_role(cfg, task, role, model_dir)
        if isinstance(module, nn.Module):
            freeze(module)
        setattr(models, role, module)
        models.names[role] = name
        gate = quality_gate_of(cfg, task, role, model_dir)
        if gate is not None:
            models.gates[role] = gate
    return models.to(device)


# the numbers of a quality gate a table's footer quotes (the pmf's one-step FID against the DDPM's Tweedie FID)
GATE_NUMBERS = ("fid_pmf", "fid_tweedie")


def training_steps(model_dir: str | Path, dataset: str, role: str) -> int | None:
    """The optimiser steps behind a trained (or installed) network, its start's included: the shipped card's
    budget in all where the network was installed from one, else its ``metrics.json`` training steps."""
    try:
        metrics = json.loads((Path(model_dir) / dataset / role / "metrics.json").read_text())
        card_path = (metrics.get("shipped") or {}).get("card")
        budget = json.loads(Path(card_path).read_text()).get("budget") if card_path else None
    except (OSError, ValueError):
        return None
    if budget:
        return int(budget.get("total", budget)["steps"])
    steps = (metrics.get("training") or {}).get("steps")
    return None if steps is None else int(steps)


def quality_gate_of(cfg: dict, task: Task, role: str, model_dir: str | Path = "resources/models") -> dict | None:
    """The quality gate a trained network's ``metrics.json`` records (``vcebench train pmf``, docs/protocol.md
    section 5) as ``{"passed", "failed"}`` with its :data:`GATE_NUMBERS`, and for the pmf ``steps`` / ``ddpm_steps``
    (:func:`training_steps`: whether the two generators had the same budget); None for canonical weights and
    networks without one."""
    if "weights" in role_spec(cfg, task.dataset, role):
        return None
    sentinel = Path(model_dir) / task.dataset / role / "metrics.json"
    try:
        gate = json.loads(sentinel.read_text()).get("quality_gate")
    except (OSError, ValueError):
        return None
    if not isinstance(gate, dict) or "passed" not in gate:
        return None
    out = {"passed": bool(gate["passed"]), "failed": list(gate.get("failed") or []),
           **{k: float(gate[k]) for k in GATE_NUMBERS if isinstance(gate.get(k), int | float)}}
    if role == "pmf":
        steps = {"steps": training_steps(model_dir, task.dataset, "pmf"),
                 "ddpm_steps": training_steps(model_dir, task.dataset, "ddpm")}
        out.update({k: v for k, v in steps.items() if v is not None})
    return out


def check_settings(role: str, dataset: str, spec: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Training settings = code defaults <- config ``models.<dataset>.<role>``; unknown keys are errors."""

    check_keys(f"models.{dataset}.{role}", spec, defaults)
    return {**defaults, **spec}
