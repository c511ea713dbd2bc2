"""Files on the Hugging Face Hub, by ``hf://owner/repo/path/to/file@revision``: found in the local Hub cache, else
downloaded into it with ``huggingface_hub`` (imported on first use), and checked by sha256.

Offline (``HF_HUB_OFFLINE=1``) only the cache is read. The cache is huggingface_hub's own
(``HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``: ``models--<owner>--<repo>/{blobs, snapshots/<commit>,
refs/<branch>}``), so a file fetched by ``hf download`` is found too. Format-free: what a file holds is the
loaders' business (a ``.pt`` is read with ``torch.load(weights_only=True)`` like any other).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .io import sha256

SCHEME = "hf://"
_URL = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)/(?P<file>[^@]+?)(?:@(?P<rev>[\w./-]+))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubError(ConfigError):
    """A Hub file that cannot be found, fetched or verified; the message names it."""


@dataclass(frozen=True)
class HubFile:
    repo: str  # owner/name
    filename: str  # path inside the repository
    revision: str | None = None  # a commit (pinned), a branch or tag; None: main

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.repo}/{self.filename}" + (f"@{self.revision}" if self.revision else "")


def is_hub_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SCHEME)


def parse(url: str, key: str = "weights") -> HubFile:
    """``hf://owner/repo/file@revision`` (revision optional) -> HubFile; a ConfigError-like one-line error."""
    m = _URL.match(url)
    if not m:
        raise HubError(f"config key `{key}`: {url!r} is not a Hub path hf://owner/repo/path/to/file[@revision]")
    return HubFile(m["repo"], m["file"], m["rev"])


def offline() -> bool:
    """``HF_HUB_OFFLINE`` set (huggingface_hub's truthy values)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def cache_dir() -> Path:
    """The local Hub cache huggingface_hub uses (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise HubError("the Hub needs huggingface_hub (a vcebench dependency): pip install huggingface_hub") from None
    return huggingface_hub


def local_path(f: HubFile, key: str = "weights") -> Path:
    """The file in the local Hub cache (fetched into it first unless offline): a path under
    ``snapshots/<commit>/``. Not in the cache offline, or not on the Hub: a one-line HubError naming it."""
    hub = _hub()
    cached = hub.try_to_load_from_cache(f.repo, f.filename, cache_dir=str(cache_dir()), revision=f.revision)
    if isinstance(cached, str) and Path(cached).is_file():
        return Path(cached)
    if offline():
        raise HubError(f"config key `{key}`: {f.url} is not in the local Hub cache {cache_dir()} and "
                       f"HF_HUB_OFFLINE=1 forbids fetching it (fetch it online first: vcebench models fetch, "
                       f"or hf download {f.repo} {f.filename}" + (f" --revision {f.revision}" if f.revision else "")
                       + ")")
    try:
        return Path(hub.hf_hub_download(f.repo, f.filename, revision=f.revision, cache_dir=str(cache_dir())))
    except Exception as e:  # noqa: BLE001 (network, 404, auth: one line naming the file)
        first = (str(e).strip().splitlines() or [""])[0]
        raise HubError(f"config key `{key}`: cannot fetch {f.url}: {type(e).__name__}: {first}") from None


def commit_of(path: Path) -> str | None:
    """The commit a cached file belongs to (its ``snapshots/<commit>/`` folder), None outside a Hub cache."""
    parts = Path(path).parts
    if "snapshots" in parts:
        i = len(parts) - 1 - parts[::-1].index("snapshots")
        if i + 1 < len(parts) and COMMIT.match(parts[i + 1]):
            return parts[i + 1]
    return None


def verify(path: Path, expected: str | None, name: str) -> str:
    """``path``'s sha256, which must be ``expected`` when that is set (else a one-line HubError naming ``name``)."""
    got = sha256(path)
    if expected and got != expected.lower():
        raise HubError(f"{name}: sha256 {got[:16]}... does not match the pinned {expected[:16]}... ({path}): a "
                       f"changed or tampered file; delete it from the Hub cache and fetch again, or re-pin it")
    return got
