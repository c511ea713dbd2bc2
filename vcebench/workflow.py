"""Helpers the Snakefile imports: which networks a step needs, and input checks at DAG construction.

Logic lives here (importable, tested), not in the rule files (docs/style.md).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from . import registry
from .config.load import (  # noqa: F401 (Snakefile)
    ConfigError,
    attach_tuned,
    read_yaml,
    resolve_hub_weights,
    train_threads,
    validate,
)
from .config.tasks import (  # noqa: F401 (Snakefile)
    SYNTHETIC_DATASETS,
    check_method_names,
    check_runs_on,
    external_name,
    get_task,
    method_roles,
    pareto_methods,
    split_method,
    task_for_dataset,
    task_methods,
)
from .core.merge import copy_tree
from .protocol.resolve import (  # noqa: F401 (Snakefile)
    CONFIG_SNAPSHOT,
    config_snapshot,
    reference_json,
    settings_json,
    settings_path,
    train_json,
    tune_json,
    write_settings,
)
from .registry.roles import GATE_ROLES, GENERATIVE, loss_roles


def config_paths(configfiles: list, basedir: str | Path = ".") -> list[str]:
    """The config files in the order a job merges them (`vcebench <verb> --config ...`), absolute: Snakemake lists
    command-line ``--configfile`` entries before the Snakefile's ``configfile:``, the CLI merges left to right, so
    the default comes first."""
    default = (Path(basedir) / "config/config.yaml").resolve()
    rest = [str(Path(p).resolve()) for p in configfiles if Path(p).resolve() != default]
    return [str(default), *rest]


def reference_dir(cfg: dict, basedir: str | Path = ".") -> str:
    """The committed reference results the ``regression`` target compares against (absolute; the rule
    passes it as ``{params.ref:q}``: a config value never reaches the shell unquoted)."""
    return str((Path(basedir) / cfg["reference_dir"]).resolve())


def fail_fast(check, *args) -> None:
    """Run a config check at DAG construction; a ConfigError (any error that is the user's to fix, e.g. a
    checkpoint block's format) ends Snakemake with its one-line message (no traceback)."""
    import sys

    from .core.errors import UserError

    try:
        check(*args)
    except UserError as e:
        print(f"vcebench config error: {e}", file=sys.stderr)
        sys.exit(1)


def check_config(cfg: dict, configfiles: list, basedir: str | Path = ".") -> dict:
    """Every check the Snakefile runs on the config when it builds the DAG (``snakemake -n`` included), so a
    wrong key, type, choice or range ends the run there with one line naming the key (:func:`fail_fast`), before
    any job: each file read as the CLI reads it, the schema (registry's names filled in), ``hf://`` weights, the
    method names, the tuned files, every method and model setting
    (:func:`vcebench.protocol.settings.check_settings`), and the config as the jobs merge the same files
    (:func:`jobs_config`). ``cfg``: Snakemake's config (coerced in place); returns it."""
    from .protocol.settings import check_settings

    given = copy_tree(cfg)
    check_config_files(configfiles)
    if cfg.get("networks") in ("null", "none"):  # `--config networks=null`: Snakemake reads it as the string
        cfg["networks"] = None
    validate(cfg, Path(basedir) / "config" / "schema.yaml")
    resolve_hub_weights(cfg)  # weights written hf://owner/repo/file@revision: the file in the local Hub cache
    check_method_names(cfg)
    attach_tuned(cfg, basedir)
    check_settings(cfg)
    jobs_config(given, configfiles, basedir)
    return cfg


def jobs_config(given: dict, configfiles: list, basedir: str | Path = ".") -> None:
    """The config files as every job reads them (``vcebench <verb> --config ...``, :func:`config_paths`' order),
    checked by the jobs' own loader (:func:`vcebench.protocol.settings.load_settings`) wherever that merge differs
    from Snakemake's (``given``). The two merge a mapping over a value that is none differently: Snakemake keeps
    ``scales: [8, 10, 15]`` under a preset's ``scales: {}``, the jobs take ``{}``, so only their check sees it."""
    from .core.merge import deep_merge
    from .protocol.settings import load_settings

    paths = config_paths(configfiles, basedir)
    merged: dict = {}
    for p in paths:
        merged = deep_merge(merged, read_yaml(p) or {})
    if merged != given:
        load_settings(paths)


def check_config_files(paths) -> None:
    """Each config file read as the CLI reads it (:func:`vcebench.config.load.read_yaml`): Snakemake's own reader
    keeps the last of a key written twice without a word."""
    for p in paths:
        read_yaml(p)


def warn_empty_shards(cfg: dict) -> None:
    """A warning when config ``n_shards`` is above the inputs a method explains (``n_eval``): the shards beyond
    them are jobs with nothing to do."""
    import sys

    shards, n = int(cfg["n_shards"]), int(cfg["n_eval"])
    if shards > n:
        print(f"vcebench config warning: n_shards is {shards} but n_eval is {n}: {shards - n} shard(s) of each "
              f"method get no input (empty jobs); set n_shards to at most {n}", file=sys.stderr)


def shell_flags(flag: str, values) -> str:
    """``--flag v1 --flag v2 ...`` with every value shell-quoted (for a rule's ``params``)."""
    return " ".join(f"{flag} {shlex.quote(str(v))}" for v in values)


def shell_words(values) -> str:
    """Shell-quoted values joined by spaces (one argument each)."""
    return " ".join(shlex.quote(str(v)) for v in values)


def train_processes(cfg: dict, role: str) -> int:
    """Processes (GPUs) of one training job: config ``gpus_per_train`` for the ddpm / pmf on CUDA, else 1."""
    if cfg.get("device") != "cuda":
        return 1

    return int(cfg["gpus_per_train"]) if role in GENERATIVE else 1


def train_gpus(cfg: dict, role: str) -> int:
    """The ``gpu`` resource of a training job: its processes for the ddpm / pmf on CUDA, else 0 (the
    other roles are small networks trained on the CPU, ``vcebench.models.recipes.train_role``)."""
    if cfg.get("device") != "cuda":
        return 0

    return train_processes(cfg, role) if role in GENERATIVE else 0


def networks_dir(cfg: dict, basedir: str | Path = ".") -> str:
    """``vcebench train --networks``: the config's shipped-networks folder (absolute; relative paths are the
    repository's), or ``none`` (config ``networks: null``: every network is trained)."""
    value = cfg.get("networks")
    return str((Path(basedir) / value).resolve()) if value else "none"


def shipped_card(cfg: dict, basedir: str | Path, dataset: str, role: str) -> list[str]:
    """The card of the shipped ``dataset``/``role`` when there is one (an input of its training job: a new
    shipped network reruns it), else []."""
    folder = networks_dir(cfg, basedir)
    card = Path(folder) / dataset / role / "card.json"
    return [str(card)] if folder != "none" and card.is_file() else []


def train_launcher(cfg: dict, role: str) -> str:
    """The command that starts ``vcebench`` for a training job: ``vcebench`` itself, or
    ``torchrun --standalone --nproc_per_node N --no-python vcebench`` for N > 1 processes (shell-quoted)."""
    n = train_processes(cfg, role)
    if n == 1:
        return "vcebench"
    return shell_words(["torchrun", "--standalone", "--nproc_per_node", n, "--no-python", "vcebench"])


def visible_gpus() -> int:
    """GPUs this machine shows a local run: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``
    (0 without either); the Snakefile's local limit on concurrent GPU jobs."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def tuned_dir(cfg: dict, basedir: str | Path = ".") -> str:
    """Where `snakemake tune` writes and the run reads the tuned settings (absolute; protocol.tuned_dir)."""
    return str((Path(basedir) / cfg["protocol"]["tuned_dir"]).resolve())


def tune_roles(cfg: dict, task_name: str) -> list[str]:
    """Networks `vcebench tune` loads: every tuned method's, and those of the metrics it scores."""
    from .protocol.tune import tune_methods

    known = registry.metrics()
    roles = {"classifier"} | {r for m in tune_methods(cfg) for r in method_roles(m)}
    roles |= {r for k in cfg["tune"]["metrics"]
              for r in (known[k].roles if k in known else ())}
    return sorted(roles)


REAL_TRAINABLE = ("ddpm", "pmf")


def gate_roles(cfg: dict, dataset: str, role: str) -> list[str]:
    """Trained roles of ``dataset`` that ``role``'s quality gate measures against or its recipe's losses train
    against (``registry.roles.LOSS_ROLES``, only when their weight is on): trained first."""
    spec = (cfg.get("models") or {}).get(dataset) or {}
    wanted = dict.fromkeys((*GATE_ROLES.get(role, ()), *loss_roles(role, spec.get(role))))
    return [r for r in wanted if r in spec and "weights" not in (spec[r] or {})]


def trained_networks(cfg: dict) -> list[str]:
    """The ``metrics.json`` of every trained (not user-supplied) network of the run's synthetic datasets:
    the ``networks`` target (``make networks``)."""
    from .config.tasks import SYNTHETIC_DATASETS
    from .registry.specs import MODEL_ROLES  # every role is trainable on a synthetic dataset

    run = {cfg["tasks"][t]["dataset"] for t in cfg.get("run_tasks", []) if t in cfg.get("tasks", {})}
    out = []
    for ds in [d for d in SYNTHETIC_DATASETS if d in run]:
        for role, spec in ((cfg.get("models") or {}).get(ds) or {}).items():
            if role in MODEL_ROLES and "weights" not in (spec or {}):
                out.append(f"resources/models/{ds}/{role}/metrics.json")
    return out


def eval_roles(cfg: dict, task_name: str) -> tuple[str, ...]:
    """Networks the evaluation of ``task_name`` loads: the classifier and its metrics' (``registry.eval_roles``)."""
    task = get_task(cfg, task_name)
    return registry.eval_roles(task.kind, task.synthetic)


def dataset_of(cfg: dict, task_name: str) -> str:
    return get_task(cfg, task_name).dataset


def data_dir(dataset: str) -> str:
    """The rendered split cache of a synthetic dataset (``resources/data/<dataset>``); '' for a real one."""
    return f"resources/data/{dataset}" if dataset in SYNTHETIC_DATASETS else ""


def task_pattern(cfg: dict) -> str:
    """The Snakemake wildcard constraint of ``{task}``: the configured task names (any identifiers)."""
    import re

    names = sorted(cfg.get("tasks") or {}, key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) or "[A-Za-z][A-Za-z0-9_]*"


def trained_on_real(cfg: dict, dataset: str, role: str) -> bool:
    """A generative role of a real dataset given as training settings (no ``weights``): the workflow
    trains it on the dataset (FiRe ships no PMF weights; a DDPM can be trained the same way)."""
    spec = ((cfg.get("models") or {}).get(dataset) or {}).get(role)
    return role in REAL_TRAINABLE and bool(spec) and "weights" not in spec


def model_input(cfg: dict, dataset: str, role: str) -> str:
    """What a rule needing ``role`` waits for: the canonical weights path, or the trained model's sentinel."""
    if dataset in SYNTHETIC_DATASETS or trained_on_real(cfg, dataset, role):
        return f"resources/models/{dataset}/{role}/metrics.json"
    return cfg["models"][dataset][role]["weights"]


def check_real_task(cfg: dict, task_name: str, roles: tuple[str, ...]) -> None:
    """Fail at DAG construction when a real task lacks its data or weights (names the config key)."""
    task = get_task(cfg, task_name)
    if task.dataset in SYNTHETIC_DATASETS:
        return
    spec = registry.get_dataset_spec(task.dataset)
    key = f"datasets.{task.dataset}.{spec.root_key}"
    root = cfg["datasets"].get(task.dataset, {}).get(spec.root_key)
    if not root or not Path(root).exists():
        raise ConfigError(
            f"task {task_name!r} needs the {task.dataset} dataset: set config key `{key}` "
            f"(now {root!r}) to a folder holding {spec.layout}. Download from {spec.source}. "
            f"Validate it with `vcebench data check {task.dataset} --root PATH`.")
    models = (cfg.get("models") or {}).get(task.dataset, {})
    for role in roles:
        spec = models.get(role) or {}
        if trained_on_real(cfg, task.dataset, role):
            continue
        w = spec.get("weights")
        if not w or not Path(w).exists():
            raise ConfigError(
                f"task {task_name!r} needs canonical weights for role {role!r}: set config key "
                f"`models.{task.dataset}.{role}.weights` (now {w!r}) to an existing file or folder "
                f"(see docs/real-data.md).")


def settings_key(cfg: dict, kind: str, *names: str) -> str:
    """A stable string of the configuration a job's output depends on, passed to the rule as an unused
    ``params`` entry so that Snakemake's params trigger reruns it when that configuration changes
    (``kind``: ``model`` (dataset, role): the role's spec plus the dataset's; ``data`` (dataset)). A method's
    jobs read their settings file instead (:func:`settings_json`, rule ``resolve_settings``)."""
    import json

    if kind == "model":
        ds, role = names
        obj = {"spec": ((cfg.get("models") or {}).get(ds) or {}).get(role),
               "dataset": (cfg.get("datasets") or {}).get(ds), "seed": cfg.get("seed"),
               "threads": train_threads(cfg),  # on the CPU the trained weights depend on the thread count
               "networks": cfg.get("networks")}
    elif kind == "data":
        obj = {"dataset": (cfg.get("datasets") or {}).get(names[0])}
    else:
        raise ValueError(f"unknown settings kind {kind!r}")
    return json.dumps(obj, sort_keys=True, default=str)


# --- imported results (`external_<name>` methods, workflows/external.smk) ---------------------------

def generated_methods(methods: list[str]) -> list[str]:
    """The methods vcebench runs itself (explained and profiled), i.e. all but the imported ones."""
    return [m for m in methods if not external_name(m)]


def external_spec(cfg: dict, task: str, method: str) -> dict:
    """``external.<name>`` of ``external_<name>`` with ``{task}`` in its paths filled in."""
    name = external_name(method)
    specs = cfg.get("external") or {}
    if name not in specs:
        raise ConfigError(f"method {method!r} imports results from config key `external.{name}`, which is not set "
                          f"(set: {sorted(specs) or 'none'}); see docs/import.md")
    spec = dict(specs[name])
    for key in ("path", "mapping"):
        if spec.get(key):
            spec[key] = str(spec[key]).replace("{task}", task)
    return spec


def external_inputs(cfg: dict, task: str, method: str, basedir: str | Path = ".") -> list[str]:
    """The folder (and mapping CSV) an ``external_<name>`` method imports, absolute (relative paths are
    from ``basedir``, the repository: rules run in the config's ``workdir``)."""
    spec = external_spec(cfg, task, method)
    paths = {k: Path(basedir) / spec[k] for k in ("path", "mapping") if spec.get(k)}
    for key, p in paths.items():
        if not p.exists():
            raise ConfigError(f"method {method!r} on task {task!r}: config key `external.{external_name(method)}."
                              f"{key}` points at {str(p)!r}, which does not exist")
    return [str(p) for p in paths.values()]


def import_args(cfg: dict, task: str, method: str, basedir: str | Path = ".") -> str:
    """The ``vcebench import`` flags of an ``external_<name>`` method, shell-quoted."""
    import shlex

    spec = external_spec(cfg, task, method)
    paths = external_inputs(cfg, task, method, basedir)
    args = ["--layout", spec["layout"], "--path", paths[0]]
    if spec.get("mapping"):
        args += ["--mapping", paths[1]]
    return " ".join(shlex.quote(str(a)) for a in args)


def other_seeds(cfg: dict) -> list[int]:
    """The seeds `snakemake seeds` reruns generation with (config ``seeds.seeds`` less the run's own ``seed``)."""
    return [s for s in cfg["seeds"]["seeds"] if s != cfg["seed"]]
