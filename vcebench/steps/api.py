"""The Python API (``vcebench.explain``, ``vcebench.evaluate``, ``vcebench.load_network``): counterfactuals for
any classifier and scores for any images, from a notebook, through the code `vcebench explain` and `vcebench
evaluate` run (:func:`vcebench.steps.explain.run_batches`, :func:`vcebench.steps.evaluate.score`).

``explain`` without ``task`` builds the method with the papers' defaults and the given hyperparameters (no
configuration is read); with ``task`` (a configured task name) it resolves the method as a benchmark job
does (:class:`~vcebench.protocol.run_settings.RunSettings`: the noise rule, the task's and the tuned
settings), the given hyperparameters on top. With the task's networks and the dataset's sample ids it makes
the counterfactuals `vcebench explain` makes (tests/test_api.py checks it). Guide: docs/python-api.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from methods.base import Counterfactuals

GENERATIVE_ROLES = ("pmf", "ddpm")


class APIError(UserError, ValueError):
    """A bad argument of the Python API; the message names it."""


def _images(images: Any, name: str) -> torch.Tensor:
    """N x C x H x W float32 in [-1, 1] from a float tensor / array in [-1, 1] or a uint8 one."""
    import torch

    from ..core.io import from_uint8

    if hasattr(images, "images") and not isinstance(images, (np.ndarray, torch.Tensor)):  # Counterfactuals
        images = images.images
    t = torch.as_tensor(np.asarray(images)) if not isinstance(images, torch.Tensor) else images
    if t.ndim != 4:
        raise APIError(f"`{name}` must be N x C x H x W images, got shape {tuple(t.shape)}")
    if t.dtype == torch.uint8:
        return from_uint8(t)
    t = t.detach().float().cpu()
    if not bool(torch.isfinite(t).all()) or float(t.min()) < -1.0001 or float(t.max()) > 1.0001:
        raise APIError(f"`{name}`: float images must be finite and in [-1, 1] (x / 127.5 - 1 of uint8 pixels), "
                       f"got values in [{float(t.nan_to_num().min()):.3g}, {float(t.nan_to_num().max()):.3g}]")
    return t.clamp(-1, 1)


def _config(config: Any, task: str, method: str | None) -> dict:
    """The configuration: a loaded dict as given, else the file(s) ``config`` names (default: the
    repository's config/config.yaml), checked as a CLI verb checks it for (task, method)."""
    from ..config.load import default_config_paths
    from ..protocol.settings import load_settings

    if isinstance(config, Mapping):
        return dict(config)
    paths = [config] if isinstance(config, (str, Path)) else config
    return load_settings(list(paths) if paths else default_config_paths(), only=(task, method))


def load_network(role: str, weights: str | Path, *, task: str | None = None, config: Any = None,
                 **spec: Any) -> nn.Module:
    """The network of ``role`` in ``weights`` behind its role's contract (``vcebench/models/base.py``), frozen:
    a folder written by `vcebench train` / shipped in networks/ (pmf; a diffusers ddpm folder), or canonical
    weights with ``format`` and that format's keys (docs/internals.md), as the config block
    ``models.<dataset>.<role>`` would give them (``hf://owner/repo/file@revision`` too). ``task``: the
    configured task whose query attribute a classifier head reads (default: none)."""
    from ..config.tasks import Task, get_task
    from ..models import freeze, load_role

    t = get_task(_config(config, task, None), task) if task else Task(name="python", dataset="python",
                                                                   attribute=str(spec.pop("attribute", "")))
    from ..config.load import resolve_hub_weights

    cfg = resolve_hub_weights({"models": {t.dataset: {role: {"weights": str(weights), **spec}}}})
    module, _ = load_role(cfg, t, role)
    return freeze(module)


def _task_models(classifier, generator, roles: Sequence[str], models: Mapping[str, Any] | None):
    """TaskModels of the given networks: ``generator`` as the generative role among ``roles``."""
    from ..models import ROLES, TaskModels

    tm = TaskModels(classifier=classifier)
    for role, net in dict(models or {}).items():
        if role not in ROLES:
            raise APIError(f"`models` has role {role!r}; the roles: {', '.join(ROLES)}")
        setattr(tm, role, net)
    gen_roles = [r for r in roles if r in GENERATIVE_ROLES]
    if generator is not None:
        if not gen_roles:
            raise APIError("`generator` given, but the method uses no generative network (roles: "
                           f"{', '.join(roles)})")
        net = load_network(gen_roles[0], generator) if isinstance(generator, (str, Path)) else generator
        setattr(tm, gen_roles[0], net)
    for role in ROLES:
        net = getattr(tm, role)
        if net is not None:
            tm.names.setdefault(role, getattr(net, "name", None) or type(net).__name__)
    return tm


def _check_classifier(classifier, x: torch.Tensor) -> None:
    import torch

    if classifier is None or not callable(classifier):
        raise APIError("`classifier` must be a torch.nn.Module returning (N, 2) logits")
    with torch.no_grad():
        out = classifier(x[:2])
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(x[:2]), 2):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise APIError(f"`classifier` must return (N, 2) logits of the binary query, got {shape} for "
                       f"{len(x[:2])} images; wrap a sigmoid-logit network as "
                       f"vcebench.models.BinaryHead(net, '1logit', index)")


def _per_sample(values: Any, n: int, name: str) -> torch.Tensor | None:
    import torch

    if values is None:
        return None
    t = torch.as_tensor(values, dtype=torch.int64)
    t = t.expand(n).clone() if t.ndim == 0 else t
    if tuple(t.shape) != (n,):
        raise APIError(f"`{name}` must be one value or one per image ({n}), got shape {tuple(t.shape)}")
    return t


def explain(images: Any, classifier: nn.Module, method: str = "fire", generator: Any = None, target: Any = None,
            *, models: Mapping[str, nn.Module] | None = None, task: str | None = None, config: Any = None,
            sample_ids: Any = None, seed: int = 0, batch_size: int = 32, device: str = "cpu",
            progress: bool = False, **params: Any) -> Counterfactuals:
    """Counterfactuals of ``images`` (N x C x H x W in [-1, 1], or uint8) for ``classifier`` (any
    ``nn.Module`` returning (N, 2) logits) by ``method`` (a method or variant name, e.g. fire, dime,
    fastdime, maskdime, ace) with ``generator`` (its pmf / ddpm network, or a path :func:`load_network`
    reads). ``target``: the class to reach, one for all or one per image (default 1 - the prediction).
    ``models``: further roles by name (e.g. ``{"perceptual": net}``); ``params``: hyperparameters over
    the method's (module docstring); ``sample_ids``: the ids that seed each image's noise stream (default
    0..N-1). Returns ``methods.base.Counterfactuals`` (images, flipped, steps, info) with ``info["pred"]``
    and ``info["target"]``."""
    import torch

    import methods
    from methods.base import cat_counterfactuals

    x = _images(images, "images")
    gen_device = "cpu"  # each image's noise stream: drawn on the CPU, or where a task's config says (`cuda`)
    if task is None:
        m = methods.get_method(method, dict(params))
    else:
        from ..core.runtime import noise_device
        from ..protocol.run_settings import RunSettings

        rs = RunSettings.resolve(_config(config, task, method), task, method)
        m = (rs.with_params(**params) if params else rs).build_method()
        gen_device = noise_device(rs.runtime.cuda, device)
    tm = _task_models(classifier, generator, m.roles, models)
    missing = [r for r in m.roles if getattr(tm, r) is None]
    if missing:
        raise APIError(f"method {method!r} needs the {', '.join(missing)} network(s): pass them as "
                       f"generator= (pmf / ddpm) or models={{role: net}}" +
                       ("; or lambda_perc=0.0 / the method's perceptual weight 0" if "perceptual" in missing else ""))
    tm = tm.to(device)
    for role in m.roles:
        getattr(tm, role).eval()
    _check_classifier(tm.classifier, x.to(device))
    n = len(x)
    ids = _per_sample(np.arange(n) if sample_ids is None else sample_ids, n, "sample_ids")
    from .explain import run_batches

    parts, preds, targets, *_ = run_batches(m, lambda idx: x[idx], ids, tm, batch_size=int(batch_size),
                                            seed=int(seed), stream=method, device=device, gen_device=gen_device,
                                            desc=method, target=_per_sample(target, n, "target"),
                                            progress=progress)
    cf = cat_counterfactuals(parts)
    cf.info["pred"], cf.info["target"] = torch.cat(preds), torch.cat(targets)
    return cf


def evaluate(originals: Any, counterfactuals: Any, task: str, *, classifier: nn.Module | None = None,
             models: Mapping[str, nn.Module] | None = None, target: Any = None, labels: Any = None,
             sample_ids: Any = None, metrics: Sequence[str] | None = None, config: Any = None,
             model_dir: str | Path = "resources/models", device: str = "cpu", strict: bool = False,
             progress: bool = False) -> dict:
    """The metrics of ``task`` (a configured task name: its kind's metric families, the config's metric
    settings) on ``counterfactuals`` (a :func:`explain` result, or N x C x H x W images) of ``originals``,
    each with its bootstrap interval, scored as `vcebench evaluate` scores (the CFs quantised to uint8 as a
    counterfactuals file holds them). Networks: ``classifier`` and ``models`` by role, the others loaded
    from the config (``model_dir``: the trained ones). ``target``: default the result's ``info["target"]``,
    else 1 - the prediction; ``labels``: the query attribute's true labels (default unknown: the ``correct``
    subsets are left out); ``sample_ids`` of a synthetic dataset add the ground-truth columns; ``metrics``:
    the families (default the task's). Returns ``metrics``, ``intervals`` ([lo, hi] per column), ``n``,
    ``higher_is_better``, ``subsets``, ``skipped``, ``bootstrap``, ``models``."""
    import torch

    from metrics import metric_names, required_roles

    from ..config.tasks import get_task
    from ..core.io import to_uint8
    from ..models import load_task_models
    from ..protocol.run_settings import EvalSettings
    from .evaluate import build_task_metrics, gt_counterfactuals, metric_inputs, roles_of, score

    cfg = _config(config, task, None)
    settings = EvalSettings.resolve(cfg, task, None, model_dir=str(model_dir))
    t = get_task(cfg, task)
    x, cf = _images(originals, "originals"), _images(counterfactuals, "counterfactuals")
    if x.shape != cf.shape:
        raise APIError(f"`originals` {tuple(x.shape)} and `counterfactuals` {tuple(cf.shape)} differ in shape")
    n = len(x)
    ids = _per_sample(np.arange(n) if sample_ids is None else sample_ids, n, "sample_ids").numpy()
    names = list(metrics) if metrics else [m for m in metric_names(t)
                                           if sample_ids is not None or "ground_truth" not in metric_inputs([m])]
    if "ground_truth" in metric_inputs(names) and (sample_ids is None or not t.synthetic):
        raise APIError(f"the ground-truth columns need `sample_ids` of the synthetic dataset (task {task!r})")
    tm = _task_models(classifier, None, (), models)
    need = [r for r in required_roles(t) if r == "classifier" or any(r in roles_of(m) for m in names)]
    absent = tuple(r for r in need if getattr(tm, r) is None)
    if absent:
        loaded = load_task_models(cfg, t, roles=absent, device=device, model_dir=model_dir)
        for r in absent:
            setattr(tm, r, getattr(loaded, r))
            tm.names[r] = loaded.names[r]
    tm = tm.to(device)
    _check_classifier(tm.classifier, x.to(device))
    info = getattr(counterfactuals, "info", None) or {}
    tgt = _per_sample(target if target is not None else info.get("target"), n, "target")
    if tgt is None:
        with torch.no_grad():
            tgt = 1 - torch.cat([tm.classifier(x[s:s + 64].to(device)).argmax(1).cpu() for s in range(0, n, 64)])
    label = _per_sample(labels, n, "labels")
    label = np.full(n, -1, np.int64) if label is None else label.numpy()
    built = build_task_metrics(settings, names, metric_inputs(names), tm, ids, None)
    unlabelled = {m.name: m.subset for m in built if labels is None and str(m.subset).startswith("correct")}
    if metrics and unlabelled:
        raise APIError(f"metric(s) {', '.join(unlabelled)} are scored on the {', '.join(set(unlabelled.values()))} "
                       f"subset, which needs `labels` (the query attribute's true labels)")
    built = [m for m in built if m.name not in unlabelled]
    names = [m.name for m in built]
    gt_of = gt_counterfactuals(cfg, t, ids) if "ground_truth" in metric_inputs(names) else None
    core, _, _ = score(settings, names, tm, lambda r: x[r], to_uint8(cf), ids, tgt.numpy(), label, gt_of=gt_of,
                       device=device, progress=progress, strict=strict, built=built)
    core["skipped"].update({k: f"scored on the {v} subset: pass labels= (the query attribute's true labels)"
                            for k, v in unlabelled.items()})
    keys = ("metrics", "intervals", "n", "higher_is_better", "subsets", "skipped", "bootstrap")
    return {"task": task, **{k: core.get(k, {} if k == "intervals" else None) for k in keys},
            "models": dict(tm.names)}
