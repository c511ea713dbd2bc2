"""One job's provenance record (:mod:`vcebench.core.provenance`) from its resolved settings: what
`vcebench explain` and `vcebench evaluate` write into their timing file and metrics.json."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..config.kernels import record as kernel_record
from ..config.load import default_config_paths
from ..core.provenance import build_record
from ..data.fingerprints import fingerprints


def job_record(settings: Any, config_paths: Iterable[str | os.PathLike] | None) -> dict[str, Any]:
    """:func:`~vcebench.core.provenance.build_record` of one explain or evaluate job: its ``settings`` (a
    ``RunSettings`` or ``EvalSettings``, identified by its ``settings_sha256``, the hash of its resolved-settings
    record (:mod:`vcebench.protocol.resolve`); the
    split files of their dataset fingerprinted, a changed one refused as
    :func:`vcebench.data.fingerprints.check_split_files` says), the config files it was given (None: the
    default ones; a job run from its resolved-settings file names that file) and this process's CPU kernels."""
    paths = list(config_paths) if config_paths else default_config_paths()
    return build_record(config_paths=paths, settings_sha256=settings.settings_sha256,
                        data_files=fingerprints(settings.config, settings.task.dataset), kernels=kernel_record())
