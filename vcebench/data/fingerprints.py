"""Fingerprints of a real dataset's split and label files: the sha256 of each file its declaration lists
(``DatasetSpec.split_files``), checked against the expected hash, or, where none is published (every file of
CelebA, CelebA-HQ and CheXpert today), against the first one seen on this machine, recorded in a JSON file
(:data:`DEFAULT_RECORD`; trust on first use, as the Hub pins of ``config/hub.yaml``).

Per file the status is ``match`` (the expected or recorded hash), ``mismatch`` (a different file: another
release, an edited split) or ``first-seen`` (no hash known: this one is recorded). A mismatch is a
:class:`ModifiedSplitError` naming the file, or a warning where modified splits are allowed (config key
``datasets.<dataset>.allow_modified_splits``, ``vcebench data check --allow-modified-splits``: a user's own
split). The record lives at ``$VCEBENCH_DATA_FINGERPRINTS`` where set (the tests set it), else
:data:`DEFAULT_RECORD`. ``vcebench data check`` prints the statuses; every metrics.json's provenance record carries the
fingerprints of the files its dataset was read from (:func:`fingerprints`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import registry
from ..core.errors import DatasetError
from ..core.io import sha256, write_json

# Where the first-seen hashes are recorded (relative to the working directory, as the workflow's resources/).
DEFAULT_RECORD = Path("resources/data/fingerprints.json")
RECORD_ENV = "VCEBENCH_DATA_FINGERPRINTS"
ALLOW_KEY = "allow_modified_splits"


class ModifiedSplitError(DatasetError):
    """A split or label file differs from its expected or first-seen sha256 (one line, naming the file)."""


@dataclass(frozen=True)
class FileCheck:
    """One file's fingerprint: the dataset, the config key it is found by, its path, its sha256, the hash it
    was compared with (None: first seen), where that came from (``published`` / ``recorded`` / None) and the
    status (``match`` / ``mismatch`` / ``first-seen``)."""

    dataset: str
    key: str
    path: str
    sha256: str
    expected: str | None
    source: str | None
    status: str

    def line(self) -> str:
        """``list_eval_partition.txt: match (sha256 1a2b3c4d..., recorded)`` for ``vcebench data check``."""
        if self.status == "first-seen":
            return f"{self.path}: unknown, first seen (no published sha256): recorded {self.sha256[:16]}..."
        return (f"{self.path}: {self.status} (sha256 {self.sha256[:16]}..., {self.source} "
                f"{(self.expected or '')[:16]}...)")


def split_file_paths(dataset: str, section: Mapping[str, Any]) -> list[tuple[str, Path, str | None]]:
    """``(config key, path, expected sha256)`` of each split or label file of ``dataset`` that exists under the
    folders of its config ``section`` (``datasets.<dataset>``); an unset key is skipped (the loader names it)."""
    out = []
    for key, name, expected in registry.get_dataset_spec(dataset).split_files:
        base = section.get(key)
        if not base:
            continue
        path = Path(os.path.expanduser(str(base))) / name if name else Path(os.path.expanduser(str(base)))
        if path.is_file():
            out.append((key, path, expected))
    return out


def record_path(record: str | os.PathLike | None = None) -> Path:
    """``record``, else ``$VCEBENCH_DATA_FINGERPRINTS``, else :data:`DEFAULT_RECORD`."""
    return Path(record or os.environ.get(RECORD_ENV) or DEFAULT_RECORD)


def read_record(record: str | os.PathLike | None = None) -> dict[str, str]:
    """``{resolved path: sha256}`` of the first-seen record (:func:`record_path`; empty when there is none yet)."""
    record = record_path(record)
    if not record.exists():
        return {}
    try:
        data = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DatasetError(f"{record}: cannot read the recorded data fingerprints ({e}); delete it to record "
                           "them again") from None
    return dict(data.get("files", {}))


def check_split_files(dataset: str, section: Mapping[str, Any], *, record: str | os.PathLike | None = None,
                      allow_modified: bool | None = None) -> list[FileCheck]:
    """Fingerprint the split and label files of ``dataset`` (config ``section``) and compare each with its
    expected sha256, else with the one recorded in ``record`` (:func:`record_path`); a file with neither is
    ``first-seen``, and its hash is added to ``record``. A mismatch
    raises :class:`ModifiedSplitError` naming the file, unless ``allow_modified`` (None: the section's
    ``allow_modified_splits``), which prints a warning instead."""
    allow = bool(section.get(ALLOW_KEY, False)) if allow_modified is None else allow_modified
    record = record_path(record)
    seen = read_record(record)
    checks, new = [], {}
    for key, path, expected in split_file_paths(dataset, section):
        digest, where = sha256(path), str(path.resolve())
        source = "published" if expected else ("recorded" if where in seen else None)
        want = expected or seen.get(where)
        status = "first-seen" if want is None else ("match" if want == digest else "mismatch")
        if status == "first-seen":
            new[where] = digest
        checks.append(FileCheck(dataset, key, str(path), digest, want, source, status))
    if new:
        write_json(record, {"about": "sha256 of real-data split and label files as first seen on this machine "
                            "(vcebench/data/fingerprints.py); delete an entry to accept a new file",
                            "files": {**seen, **new}})
    for c in checks:
        if c.status == "mismatch":
            msg = (f"{c.path} (config key `datasets.{dataset}.{c.key}`) differs from its {c.source} sha256 "
                   f"({c.sha256[:16]}... != {c.expected[:16]}...): another release or an edited split")
            if not allow:
                raise ModifiedSplitError(msg + f"; for your own split set `datasets.{dataset}.{ALLOW_KEY}: true` "
                                         "or pass --allow-modified-splits")
            print(f"vcebench: warning: {msg} (allowed: `{ALLOW_KEY}`)", file=sys.stderr)
    return checks


def fingerprints(config: Mapping[str, Any], dataset: str, *,
                 record: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """``{path: {sha256, status, dataset, key}}`` of the split and label files ``dataset`` is read from under
    ``config`` (empty for a synthetic dataset), for the provenance record; a mismatch raises as in
    :func:`check_split_files`."""
    spec = registry.get_dataset_spec(dataset)
    if spec.synthetic or not spec.split_files:
        return {}
    section = (config.get("datasets") or {}).get(dataset) or {}
    return {c.path: {"sha256": c.sha256, "status": c.status, "dataset": dataset, "key": c.key}
            for c in check_split_files(dataset, section, record=record)}
