"""The errors that are the user's to fix, and how settings errors become one.

Every such error derives from :class:`UserError` (and from the built-in class a caller would
expect: ``ValueError``, ``FileNotFoundError``); ``vcebench`` prints its message as one line and
exits with status 2 instead of a traceback (``vcebench.cli.main``).
"""

from __future__ import annotations

import contextlib
import os


class UserError(Exception):
    """A problem the user fixes (config, data, weights, arguments); the message says what and how."""


class ConfigError(UserError, ValueError):
    """A problem with the user's configuration; the message says which key and what to do."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be loaded for a role; the message names role, path and mismatch (raised by
    ``vcebench.models`` when weights are loaded, and by the config check of a block of released weights)."""


class DatasetError(UserError, ValueError):
    """A missing / malformed dataset; the message names the config key, the path, what was expected
    and where the data comes from (raised by ``vcebench.data``)."""


class DiskFullError(UserError, OSError):
    """No space left where a file was being written; the message names the file and, where known, the space
    it needed and the space left (``vcebench.core.io.disk_space`` raises it)."""


@contextlib.contextmanager
def settings_errors(what: str):
    """Turn a ``TypeError`` / ``ValueError`` raised while settings are in use (building a method or a
    network, training a role) into a :class:`ConfigError` that starts with ``what`` (the config key).
    User errors pass unchanged; ``VCEBENCH_TRACEBACK=1`` keeps the original exception (debugging)."""
    try:
        yield
    except (TypeError, ValueError) as e:
        if isinstance(e, UserError) or os.environ.get("VCEBENCH_TRACEBACK"):
            raise
        raise ConfigError(f"{what}: {type(e).__name__}: {e} "
                          f"(set VCEBENCH_TRACEBACK=1 for the traceback)") from e

