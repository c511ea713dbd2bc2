"""Train one network role of a dataset (``vcebench train``): ``train_role`` writes it into
``resources/models/<dataset>/<role>/``.

Models are per dataset (one multi-attribute classifier serves every task of the dataset); the task only
picks the dataset. The small roles use their recipe (:data:`vcebench.models.recipes.TRAINERS`); ``ddpm``
and ``pmf`` dispatch to :mod:`vcebench.models.generative.ddpm` and :mod:`vcebench.models.generative.pmf`, with the
dataset's trained networks their quality numbers compare against (``generative_references``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..config.load import ConfigError, settings_errors
from ..config.tasks import Task, get_task
from ..core.io import check_writable, quantize, write_json
from ..data import load_split
from ..data.registry import SYNTHETIC_DATASETS, get_synthetic
from ..models.recipes import TRAINABLE, TRAINERS
from ..models.shipping.cards import install_shipped, shipped_folder
from ..models.task_models import check_settings, load_role, role_spec, train_command
from ..models.training.distributed import Shard
from ..protocol.noise import resolve_method
from ..registry.roles import GATE_ROLES, GENERATIVE, loss_roles


def task_attributes(cfg: dict, dataset: str) -> list[str]:
    """Query attributes of every configured task on ``dataset`` (what the classifier must predict)."""
    out: list[str] = []
    for t in cfg.get("tasks", {}).values():
        if t["dataset"] == dataset and t["attribute"] not in out:
            out.append(t["attribute"])
    return out


def counterfactual_renderer(cfg: dict, dataset: str):
    """``(split, attribute) -> uint8 images``: the split rendered with only that attribute flipped, for the
    judges' truth checks and ``cf_views`` (``vcebench.models.shipping.truth_checks``); None for a real dataset."""

    if dataset not in SYNTHETIC_DATASETS:
        return None
    synth = get_synthetic(cfg, dataset)

    def render(split, attribute: str):
        ids = split.sample_ids
        return torch.cat([quantize(synth.gt_counterfactuals(ids[i:i + 2048], attribute))
                          for i in range(0, len(ids), 2048)])

    return render


def generative_references(cfg: dict, task: Task, role: str, model_dir: Path,
                          fire_t: dict[str, float] | None = None) -> dict[str, Any]:
    """Trained networks the ddpm / pmf quality numbers use, when they exist in ``model_dir``
    (``registry.roles.GATE_ROLES``, which the workflow trains first): ``feature_fn`` (the dataset's
    fid_features: FID of samples and one-step predictions), ``reference_ddpm`` (the pmf's Tweedie
    comparison) and ``classifiers`` (labels kept by G(z_t, t), one per task of the dataset; for the
    pmf also ``fire_t``, each task's FiRe noise level: the job's resolved ``fire_t``, else resolved from ``cfg``)."""

    refs: dict[str, Any] = {}
    for r in GATE_ROLES.get(role, ()):
        if not (model_dir / task.dataset / r / "metrics.json").exists() or "weights" in role_spec(cfg, task.dataset, r):
            continue
        if r == "fid_features":
            fn, name = load_role(cfg, task, r, model_dir)
            refs.update(feature_fn=fn.eval(), feature_name=name)
        elif r == "ddpm":
            refs["reference_ddpm"] = load_role(cfg, task, r, model_dir)[0]
        elif r == "classifier":
            tasks = [get_task(cfg, n) for n, t in cfg.get("tasks", {}).items() if t["dataset"] == task.dataset]
            refs["classifiers"] = {t.attribute: load_role(cfg, t, r, model_dir)[0].eval() for t in tasks}
            if role == "pmf":  # each task's FiRe noise level: the label check is also reported there
                refs["fire_t"] = dict(fire_t) if fire_t is not None else \
                    {t.attribute: float(resolve_method(cfg, t, "fire")[0]["t"]) for t in tasks}
    return refs


def loss_networks(cfg: dict, task: Task, role: str, model_dir: Path) -> dict[str, Any]:
    """The networks ``role``'s recipe trains against ({role: network}; ``registry.roles.LOSS_ROLES``, only those
    whose weight the recipe turns on), trained before it (the workflow's rule does so) or canonical. One not
    trained yet: a one-line error with the command that trains it."""
    nets: dict[str, Any] = {}
    for r in loss_roles(role, role_spec(cfg, task.dataset, role)):
        trained = (model_dir / task.dataset / r / "metrics.json").exists()
        if "weights" not in role_spec(cfg, task.dataset, r) and not trained:
            raise ConfigError(f"config key `models.{task.dataset}.{role}` trains against the dataset's {r} network, "
                              f"which is not trained yet: {train_command(r, task, model_dir)}")
        nets[r] = load_role(cfg, task, r, model_dir)[0].eval()
    return nets


def train_role(cfg: dict, role: str, task: Task | str, data_dir: str | Path | None = None,
               out_dir: str | Path | None = None, model_dir: str | Path = "resources/models",
               progress: bool = True, shard: Shard | None = None,
               networks: str | Path | None = None, fire_t: dict[str, float] | None = None) -> dict[str, Any]:
    """Train ``role`` on ``task``'s dataset; writes weights, config.json and metrics.json; returns the metrics.

    ``networks`` (config key ``networks``): a folder of shipped networks (``vcebench.models.shipping.cards``); when
    it holds this role with the config's recipe, that network is checked and installed instead.

    ``shard`` (``vcebench.models.training.distributed.start_processes``): the device and the process of a
    ``ddpm`` / ``pmf`` run (one GPU, or one rank of a torchrun launch). The other roles are small
    networks trained by one CPU process (a note says so on a GPU); they refuse several processes. ``fire_t``: the
    pmf's FiRe noise levels as the job's settings resolved them (:func:`generative_references`)."""

    task = get_task(cfg, task) if isinstance(task, str) else task
    ds = task.dataset
    if role not in TRAINABLE:
        raise ConfigError(f"cannot train role {role!r}; trainable roles: {', '.join(TRAINABLE)}")
    if role == "identity" and task.kind != "faces":
        raise ConfigError(f"role 'identity' is for face datasets; {ds!r} is an x-ray dataset (use 'simsiam')")
    spec = role_spec(cfg, ds, role)
    if "weights" in spec:
        raise ConfigError(f"config key `models.{ds}.{role}` names canonical weights ({spec.get('weights')!r}); "
                          f"there is nothing to train. Remove `weights` to train this role instead.")
    out = Path(out_dir) if out_dir else Path(model_dir) / ds / role

    check_writable(out, f"the trained {role}")  # before training, not after it
    shipped = install_shipped(cfg, ds, role, networks, out, progress, shard)
    if shipped is not None:
        return shipped
    t0 = time.perf_counter()
    if shard is not None and shard.world > 1 and role not in GENERATIVE:
        raise ConfigError(f"role {role!r} trains in one process; several processes (torchrun, config key "
                          f"`gpus_per_train`) are for {' and '.join(GENERATIVE)} only")
    if role in GENERATIVE:
        if role == "ddpm":
            from ..models.generative.ddpm import train_ddpm as fn
        else:
            from ..models.generative.pmf import train_pmf as fn
        train = load_split(cfg, ds, "train", data_dir)
        val = load_split(cfg, ds, "val", data_dir)
        refs = generative_references(cfg, task, role, Path(model_dir), fire_t)
        if role == "pmf":
            refs["loss_networks"] = loss_networks(cfg, task, role, Path(model_dir))
        with settings_errors(f"config key `models.{ds}.{role}`"):
            return fn(spec, train.images, out, int(spec.get("seed", cfg["seed"])),
                      val_images_uint8=val.images, progress=progress, **refs, **({"shard": shard} if shard else {}))
    if shard is not None and shard.device.type != "cpu" and progress:
        print(f"[train {role}] the small networks train on the CPU; device {shard.device} is used by "
              f"{' and '.join(GENERATIVE)}", file=sys.stderr)
    defaults, fn = TRAINERS[role]
    settings = check_settings(role, ds, spec, defaults)
    splits = {s: load_split(cfg, ds, s, data_dir) for s in ("train", "val", "test")}
    with settings_errors(f"config key `models.{ds}.{role}`"):
        metrics = fn(settings, splits, out, dataset=ds, task_attributes=task_attributes(cfg, ds),
                     classifier_dir=out.parent / "classifier", progress=progress,
                     counterfactuals=counterfactual_renderer(cfg, ds))
    metrics["wall_seconds_total"] = round(time.perf_counter() - t0, 2)

    write_json(out / "metrics.json", metrics)
    return metrics


def train_job(cfg: dict, role: str, task: str, *, data_dir: str | None = None, out_dir: str | None = None,
              model_dir: str = "resources/models", progress: bool = True, networks: str | None = None,
              fire_t: dict[str, float] | None = None) -> tuple[dict[str, Any], bool]:
    """`vcebench train`: the config ``cfg`` (the files', or a training job's settings record,
    :func:`vcebench.steps.settings.train_inputs`) checked for a network of ``task``'s dataset, torch on the config's
    ``device`` with ``train_threads`` threads (cuda without a GPU: ``ConfigError``), then :func:`train_role` in the
    processes of the launch (one, or torchrun's). Returns the metrics and whether this process is the one that
    writes."""
    from ..config.load import train_threads
    from ..core.runtime import setup_torch
    from ..models.training.distributed import training_processes
    from ..protocol.settings import check_settings

    cfg = check_settings(cfg, only=(task, None))  # a network: its model settings
    device = setup_torch(train_threads(cfg), cfg["device"], cfg["cuda"])  # cuda without a GPU: ConfigError
    with training_processes(device, cfg["cuda"]["train_graphs"]) as shard:
        metrics = train_role(cfg, role, task, data_dir=data_dir, out_dir=out_dir, model_dir=model_dir,
                             progress=progress, shard=shard, networks=shipped_folder(networks, cfg), fire_t=fire_t)
    return metrics, shard.writer
