"""Where a number came from: one provenance record per job, written into every metrics.json and explain timing
file, summarised in every table footer and printed per row by ``vcebench report provenance``.

The record (:func:`build_record`) holds the code (git commit and dirty flag of the repository the code runs from,
or None with the reason, e.g. an installed wheel; the package versions), the inputs (the sha256 of each config
file the job was given, a hash of its resolved settings, the fingerprints of the real dataset's split and label
files, :mod:`vcebench.data.fingerprints`) and the machine (python, torch, CUDA, cuDNN, the CPU and its kernel pin
(:func:`vcebench.config.kernels.record`), the GPU and its driver where CUDA is available, torch's threads).
This module is plumbing (layer 0: it takes the kernels record, the settings and the data fingerprints as
arguments); :func:`vcebench.protocol.provenance.job_record` gathers them for a job. Nothing here imports torch
at module level; :func:`build_record` imports it (every job has it loaded).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .io import sha256

# The repository this package sits in (a clone or an editable install); a wheel's copy sits in site-packages.
CODE_ROOT = Path(__file__).resolve().parents[2]
# Reported when the package metadata cannot say what vcebench requires (run from a clone without `pip install`).
FALLBACK_PACKAGES = ("vcebench", "torch", "torchvision", "numpy", "scipy", "pandas", "snakemake", "safetensors",
                     "diffusers", "huggingface_hub", "lpips", "torchmetrics", "clean-fid", "facenet-pytorch",
                     "fvcore", "matplotlib", "pyyaml", "jsonschema", "pillow", "threadpoolctl", "optuna", "tqdm")
RECORD_VERSION = 1


def git_state(root: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{commit, dirty, reason}`` of the git checkout at ``root`` (default: the repository this code runs
    from). ``dirty``: a tracked file changed or an untracked, not ignored file present (``git status
    --porcelain``). Not a checkout (an installed wheel), no git, or a git error: commit and dirty None, reason
    says why."""
    root = Path(root) if root is not None else CODE_ROOT

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()

    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        if top != root.resolve():
            return {"commit": None, "dirty": None,
                    "reason": f"{root} is not the top of a git checkout (inside {top}): an installed copy"}
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain"))
    except FileNotFoundError:
        return {"commit": None, "dirty": None, "reason": "git is not installed"}
    except subprocess.CalledProcessError as e:
        msg = (e.stderr or "").strip().splitlines()
        return {"commit": None, "dirty": None,
                "reason": f"{root} is not a git checkout (an installed wheel?)" + (f": {msg[0]}" if msg else "")}
    except subprocess.TimeoutExpired:
        return {"commit": None, "dirty": None, "reason": "git did not answer within 60 s"}
    return {"commit": commit, "dirty": dirty, "reason": None}


def _requirement_name(req: str) -> str:
    """``'scipy>=1.10,<1.19; extra == "dev"'`` -> ``scipy``."""
    return re.split(r"[\s<>=!~;\[(@]", req.strip(), maxsplit=1)[0]


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str | None]:
    """The installed version of vcebench and of every package it requires (its metadata's ``Requires-Dist``
    without the extras; :data:`FALLBACK_PACKAGES` when vcebench is not installed); None: not installed."""
    from importlib import metadata

    try:
        reqs = [r for r in (metadata.requires("vcebench") or []) if "extra ==" not in r]
        names = ["vcebench", *(_requirement_name(r) for r in reqs)]
    except metadata.PackageNotFoundError:
        names = list(FALLBACK_PACKAGES)
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def config_hashes(paths: Iterable[str | os.PathLike] | None) -> dict[str, str | None]:
    """``{path: sha256}`` of each config file a job was given (None: the file is gone)."""
    return {str(p): (sha256(p) if Path(p).is_file() else None) for p in (paths or [])}


def _plain(o: Any) -> Any:
    """``o`` as plain JSON values: mappings (read-only views too) as dicts, dataclasses by their fields (those
    marked ``compare=False``, derived values, left out), tuples and sets as lists, paths and the rest as str."""
    if isinstance(o, (Mapping, MappingProxyType)):
        return {str(k): _plain(v) for k, v in o.items()}
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: _plain(getattr(o, f.name)) for f in dataclasses.fields(o) if f.compare}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, (set, frozenset)):
        return sorted(_plain(v) for v in o)
    if isinstance(o, Enum):
        return _plain(o.value)
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    if hasattr(o, "item"):  # a numpy scalar
        return o.item()
    return str(o)


def resolved_settings(settings: Any) -> dict[str, Any]:
    """A job's resolved settings (a :class:`~vcebench.protocol.run_settings.RunSettings` or ``EvalSettings``)
    as one plain mapping: every field, the whole read-only configuration included. The stand-in for the
    per-job resolved-settings file: :func:`settings_hash` takes any mapping."""
    return _plain(settings)


def settings_hash(resolved: Mapping[str, Any]) -> str:
    """The sha256 of ``resolved`` as canonical JSON (keys sorted, no spaces, UTF-8): equal settings, equal
    hash, whatever the key order."""
    text = json.dumps(_plain(resolved), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _gpu() -> dict[str, Any] | None:
    """The CUDA device's name, capability and driver version (``nvidia-smi``; None where it is missing);
    None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    i = torch.cuda.current_device()
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", f"--id={i}"],
                                capture_output=True, text=True, check=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    cap = torch.cuda.get_device_capability(i)
    return {"name": torch.cuda.get_device_name(i), "capability": f"{cap[0]}.{cap[1]}", "driver": driver,
            "count": torch.cuda.device_count()}


def machine_record(kernels: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Python, torch, CUDA / cuDNN, the CPU kernels (``kernels``: :func:`vcebench.config.kernels.record`, which
    names the CPU), the GPU, torch's threads, the host."""
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": cudnn, "kernels": dict(kernels or {}), "gpu": _gpu(), "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(), "hostname": socket.gethostname()}


def build_record(*, config_paths: Iterable[str | os.PathLike] | None = None,
                 settings: Mapping[str, Any] | None = None, settings_sha256: str | None = None,
                 data_files: Mapping[str, Any] | None = None,
                 kernels: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of one job: the code (:func:`git_state`, :func:`package_versions`), its inputs (the
    sha256 of each file of ``config_paths``, the job's ``settings_sha256`` (else the hash of a ``settings``
    mapping), ``data_files``: the
    fingerprints of the real data files read, :func:`vcebench.data.fingerprints.fingerprints`) and the machine
    (:func:`machine_record` with the CPU ``kernels`` record). A job's record:
    :func:`vcebench.protocol.provenance.job_record`."""
    return {"version": RECORD_VERSION, "git": git_state(), "packages": package_versions(),
            "configs": config_hashes(config_paths),
            "settings_hash": settings_sha256 or (None if settings is None else settings_hash(settings)),
            "data_files": dict(data_files or {}), **machine_record(kernels),
            "argv": list(sys.argv)}


def _code_phrase(recs: list[Mapping[str, Any]]) -> str:
    """``vcebench 1a2b3c4d+dirty`` (commits shortened; several when rows differ; the reason when none)."""
    gits = [r.get("git") or {} for r in recs]
    commits = sorted({g["commit"][:8] for g in gits if g.get("commit")})
    if not commits:
        reason = next((g.get("reason") for g in gits if g.get("reason")), "no git checkout")
        version = next((r.get("packages", {}).get("vcebench") for r in recs if r.get("packages")), None)
        return f"vcebench {version or '?'} (no commit: {reason})"
    dirty = "+dirty" if any(g.get("dirty") for g in gits) else ""
    return f"vcebench {', '.join(commits)}{dirty}" + (" (rows differ)" if len(commits) > 1 else "")


def _one_or_many(values: Iterable[Any], what: str) -> str | None:
    uniq = sorted({str(v) for v in values if v is not None})
    if not uniq:
        return None
    return f"{what} {uniq[0]}" if len(uniq) == 1 else f"{what} {' / '.join(uniq)} (rows differ)"


def summary(records: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One footer line over the rows' provenance records ``{row: record}`` (None when no row has one):
    ``Provenance: vcebench <commit>[+dirty], torch 2.14.1, <cpu>, 1 thread; settings <hash8> ...``."""
    recs = [r for r in records.values() if r]
    if not recs:
        return None
    bits = [_code_phrase(recs)]
    torch_v = _one_or_many((r.get("torch") for r in recs), "torch")
    if torch_v:
        cuda = _one_or_many((r.get("cuda") for r in recs), "CUDA")
        bits.append(torch_v + (f" ({cuda})" if cuda else ""))
    cpu = _one_or_many(((r.get("kernels") or {}).get("cpu") for r in recs), "")
    if cpu:
        bits.append(cpu.strip())
    gpu = _one_or_many(((r.get("gpu") or {}).get("name") for r in recs), "GPU")
    if gpu:
        bits.append(gpu)
    threads = {r.get("torch_threads") for r in recs if r.get("torch_threads") is not None}
    if threads:
        n = sorted(threads)
        bits.append(f"{n[0]} thread{'s' if n[0] != 1 else ''}" if len(n) == 1 else f"{n[0]}-{n[-1]} threads")
    hashes = sorted({r["settings_hash"][:8] for r in recs if r.get("settings_hash")})
    tail = []
    if hashes:
        tail.append(f"settings {hashes[0]}" if len(hashes) == 1 else f"settings hashes {', '.join(hashes)}"
                    if len(hashes) <= 3 else f"{len(hashes)} settings hashes (one per setting)")
    files = {f: d.get("sha256", "")[:8] for r in recs for f, d in (r.get("data_files") or {}).items()}
    if files:
        tail.append("data files " + ", ".join(f"{Path(f).name} {h}" for f, h in sorted(files.items())))
    return ("Provenance: " + ", ".join(bits) + ("; " + "; ".join(tail) if tail else "")
            + " (per row: `vcebench report provenance`).")


def rows(path: str | os.PathLike) -> dict[str, Mapping[str, Any] | None]:
    """``{row: provenance record}`` of a results folder (every ``<task>/<method>/metrics.json`` under it, named by
    its folder) or of one metrics.json (``<task>/<method>``); a row written before provenance was recorded maps
    to None."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("**/metrics.json"))
    out: dict[str, Mapping[str, Any] | None] = {}
    for f in files:
        data = json.loads(f.read_text())
        if not isinstance(data, dict) or "metrics" not in data:  # a training run's metrics.json
            continue
        name = (str(f.parent.relative_to(path)) if f != path  # its folder: unique under RESULTS
                else f"{data.get('task', f.parent.parent.name)}/{data.get('method', f.parent.name)}")
        out[name] = data.get("provenance")
    return out


def describe_row(rec: Mapping[str, Any] | None) -> str:
    """One line per row for ``vcebench report provenance``."""
    if not rec:
        return "no provenance record (written before vcebench recorded it)"
    line = summary({"row": rec}) or ""
    line = line.removeprefix("Provenance: ").removesuffix(" (per row: `vcebench report provenance`).")
    configs = ", ".join(f"{Path(p).name} {(h or 'missing')[:8]}" for p, h in (rec.get("configs") or {}).items())
    return line + (f"; configs {configs}" if configs else "") + f"; python {rec.get('python', '?')}"
