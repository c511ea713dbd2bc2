"""`vcebench models fetch <dataset>` as a library: the released networks of a real dataset's tasks that have a
Hub home, fetched at their pinned revision, checked against their sha256 and pointed at by a config overlay per
task; the roles without one listed with where to get them and the config key to set.

What is where: the project file ``config/hub.yaml`` (its header says what each key means). The Hub side (cache,
offline mode, hashes) is :mod:`vcebench.core.hub`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core import hub
from ..core.errors import ConfigError
from ..core.io import atomic_path

PINS = Path("config/hub.yaml")
OVERLAY_DIR = Path("resources/hub")


@dataclass(frozen=True)
class Entry:
    """One role's file of ``config/hub.yaml``."""

    role: str
    task: str | None = None
    repo: str | None = None
    file: str | None = None
    revision: str | None = None
    sha256: str | None = None
    config: dict = field(default_factory=dict)
    by_hand: tuple[str, ...] = ()
    source: str | None = None

    @property
    def on_hub(self) -> bool:
        return bool(self.repo and self.file)

    @property
    def hub_file(self) -> hub.HubFile:
        return hub.HubFile(str(self.repo), str(self.file), self.revision)


def read_pins(path: str | Path = PINS) -> dict[str, list[Entry]]:
    """``config/hub.yaml``: dataset -> its entries; a malformed entry is a one-line ConfigError."""
    from ..config.load import read_yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist (the project's Hub pins; run from the repository root or pass "
                          f"--pins)")
    data = read_yaml(path) or {}
    out: dict[str, list[Entry]] = {}
    keys = set(Entry.__dataclass_fields__)
    for dataset, entries in data.items():
        out[dataset] = []
        for i, e in enumerate(entries or []):
            where = f"{path}: {dataset}[{i}]"
            if not isinstance(e, dict) or "role" not in e or set(e) - keys:
                raise ConfigError(f"{where}: an entry is a mapping with `role` and any of {', '.join(sorted(keys))}")
            if e.get("sha256") and not re.fullmatch(r"[0-9a-f]{64}", str(e["sha256"])):
                raise ConfigError(f"{where}: `sha256` must be 64 hex digits or null, got {e['sha256']!r}")
            if e.get("revision") and not hub.COMMIT.match(str(e["revision"])):
                raise ConfigError(f"{where}: `revision` pins a commit (40 hex digits) or is null, got "
                                  f"{e['revision']!r}")
            out[dataset].append(Entry(**{**e, "config": dict(e.get("config") or {}),
                                         "by_hand": tuple(e.get("by_hand") or ())}))
    return out


def dataset_tasks_roles(cfg: dict, dataset: str) -> dict[str, tuple[str, ...]]:
    """The configured tasks of ``dataset`` -> the roles their methods (config ``methods``) and metrics load."""
    from .. import registry
    from ..config.tasks import get_task, method_roles, runs_on

    out = {}
    for name, t in (cfg.get("tasks") or {}).items():
        if t.get("dataset") != dataset:
            continue
        task = get_task(cfg, name)
        roles = list(registry.eval_roles(task.kind, task.synthetic))
        for m in cfg.get("methods") or []:
            if runs_on(task, m):
                roles += [r for r in method_roles(m) if r not in roles]
        out[name] = tuple(roles)
    if not out:
        raise ConfigError(f"no configured task uses dataset {dataset!r} (config key `tasks`); datasets with "
                          f"tasks: {', '.join(sorted({t.get('dataset') for t in (cfg.get('tasks') or {}).values()}))}")
    return out


def _state(e: Entry) -> str:
    rev = f"revision {e.revision[:12]}" if e.revision else "revision unpinned (main)"
    return f"{rev}, sha256 {e.sha256[:12] + '...' if e.sha256 else 'unverified'}"


def record_pin(path: str | Path, e: Entry, revision: str, digest: str) -> None:
    """Write the commit and the hash of ``e``'s first download into its entry of ``path`` (a line edit: the
    file's comments and anchors stay)."""
    path = Path(path)
    text = path.read_text()
    m = re.search(rf"^(\s*)file: {re.escape(str(e.file))}\s*$", text, flags=re.M)
    if not m or len(re.findall(rf"^\s*file: {re.escape(str(e.file))}\s*$", text, flags=re.M)) != 1:
        raise ConfigError(f"{path}: cannot record the pin of {e.file}: its `file:` line is not there once")
    end = text.find("\n- ", m.end())
    end = len(text) if end < 0 else end
    block = text[m.end():end]
    block = re.sub(r"^(\s*)revision: null\s*$", rf"\g<1>revision: {revision}", block, count=1, flags=re.M)
    block = re.sub(r"^(\s*)sha256: null\s*$", rf"\g<1>sha256: {digest}", block, count=1, flags=re.M)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text[:m.end()] + block + text[end:])


def fetch(cfg: dict, dataset: str, *, pins: str | Path = PINS, out_dir: str | Path = OVERLAY_DIR,
          dry_run: bool = False, log: Callable[[str], Any] = print) -> dict[str, Path]:
    """Fetch (or, ``dry_run``, list) the Hub files of ``dataset``'s tasks, verify them, record first pins, and
    write ``<out_dir>/<task>.yaml`` per task: the config overlay pointing the roles at the files. Returns
    task -> overlay path (none on a dry run)."""
    tasks = dataset_tasks_roles(cfg, dataset)
    entries = read_pins(pins).get(dataset, [])
    needed = sorted({r for roles in tasks.values() for r in roles})
    log(f"{dataset}: tasks {', '.join(tasks)}; roles {', '.join(needed)}")
    if hub.offline() and not dry_run:
        log(f"offline (HF_HUB_OFFLINE=1): reading the local Hub cache {hub.cache_dir()}, fetching nothing")
    blocks: dict[str, dict[str, dict]] = {t: {} for t in tasks}
    by_hand: list[str] = []
    for role in needed:
        mine = [e for e in entries if e.role == role and (e.task is None or e.task in tasks)]
        for e in [e for e in mine if e.on_hub]:
            serves = [e.task] if e.task else [t for t, roles in tasks.items() if role in roles]
            label = f"{role} ({', '.join(serves)})"
            log(f"  {label}: {e.hub_file.url} -- {_state(e)}")
            if e.by_hand:
                by_hand += [f"models.{dataset}.{role}.{k}" for k in e.by_hand]
            if dry_run:
                continue
            path = hub.local_path(e.hub_file, f"{pins}: {dataset} {role} {e.file}")
            digest = hub.verify(path, e.sha256, str(e.file))
            commit = hub.commit_of(path) or e.revision
            if not e.sha256 or not e.revision:
                if commit is None:
                    raise hub.HubError(f"{e.file}: {path} lies outside a Hub cache snapshot: no commit to pin")
                record_pin(pins, e, commit, digest)
                log(f"    recorded in {pins}: revision {commit[:12]}, sha256 {digest[:12]}... (first download: "
                    f"trust on first use)")
            else:
                log(f"    verified: sha256 {digest[:12]}... at {commit[:12]}")
            for t in serves:
                blocks[t][role] = {"weights": str(path), **e.config}
        if not any(e.on_hub for e in mine):
            src = "; ".join(e.source for e in mine if e.source) or "no source recorded (docs/real-data.md)"
            log(f"  {role}: no Hub file recorded -- get it from {src}; set config key "
                f"`models.{dataset}.{role}.weights`")
    if by_hand:
        log(f"still by hand (from the authors' repository, in a preset): {', '.join(dict.fromkeys(by_hand))}")
    if dry_run:
        return {}
    out: dict[str, Path] = {}
    for t, roles in blocks.items():
        path = Path(out_dir) / f"{t}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# written by `vcebench models fetch {dataset}` from {pins}: the {t} roles fetched from the Hub "
                  f"(the local cache's files)\n")
        with atomic_path(path) as tmp:
            Path(tmp).write_text(header + yaml.safe_dump({"models": {dataset: roles}}, sort_keys=False))
        out[t] = path
        log(f"{t}: overlay {path} ({len(roles)} role(s)): --configfile {path} (snakemake) or --config {path}")
    return out
