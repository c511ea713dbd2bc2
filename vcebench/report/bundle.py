"""A results bundle: one archive a lab hands over with its numbers, and the checks of `vcebench report verify`
that need no network (docs/bundles.md).

The archive is an uncompressed tar, deterministic (members sorted by name, mtime :data:`MTIME`, owner 0, mode
0644: the same results give the same bytes). It holds :data:`MANIFEST` and, laid out as a results folder under
:data:`RESULTS`, the task tables (``results/<task>.csv``, ``.md``, ...) and each row's files
(``results/<task>/<method>/``: :data:`ROW_FILES`); ``--images`` adds each counterfactual as a PNG under
:data:`IMAGES`. The manifest (schema :data:`SCHEMA` / :data:`VERSION`) lists every other member with its sha256
and size, the rows (their commit, dirty flag and CPU kind from their provenance), the judges (per task and role
the files and sha256 of the network the metrics used, :func:`vcebench.models.task_models.judge_files`) and the
harness that bundled them; it carries the sha256 of its own canonical text (``manifest_sha256``), so that a
changed byte of the manifest is refused too. The verifying half that runs the metrics is
:mod:`vcebench.steps.bundle`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

from ..core.errors import UserError
from ..core.io import atomic_path
from .regression import CPU_DRIFT, cell_tolerance
from .tables import COST_COLUMNS, CSV_FLOAT_FORMAT, INTERVAL_SUFFIXES, PROTOCOL_COLUMNS

SCHEMA = "vcebench-bundle"
VERSION = 1
MANIFEST = "manifest.json"
RESULTS = "results"
IMAGES = "images"
MTIME = 0  # every member's modification time: a bundle's bytes depend on its contents only
# A row's files: the judges' numbers (metrics.json with provenance; samples.npz, the per-input records), what
# the row ran with (settings.json, resolved once by the workflow), its costs (profile.json) and the
# counterfactuals every number is recomputed from. The first and the last are required.
ROW_FILES = ("metrics.json", "samples.npz", "settings.json", "profile.json", "counterfactuals.npz")
REQUIRED_ROW_FILES = ("metrics.json", "counterfactuals.npz")
# A task's tables beside <task>.csv (the one verify compares): the same table for people, its paired tests and
# the truth checks of its columns, where the run wrote them.
TABLE_SUFFIXES = (".csv", ".md", ".tex", "_pairs.csv", "_pairs.md", "_validity.json")
FAILING = ("MISMATCH", "MISSING")


class BundleError(UserError, ValueError):
    """A bundle that cannot be made or is refused: the message names the member, the judge or the row."""


def _canonical(obj: Any) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def manifest_bytes(body: Mapping[str, Any]) -> bytes:
    """The manifest's text: ``body`` with ``manifest_sha256``, the sha256 of ``body``'s canonical JSON (keys
    sorted, one-space indent, UTF-8), in that same canonical form."""
    body = {k: v for k, v in body.items() if k != "manifest_sha256"}
    return _canonical({**body, "manifest_sha256": hashlib.sha256(_canonical(body)).hexdigest()})


def write_archive(out: str | Path, members: Mapping[str, bytes], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Write the bundle ``out`` (atomically): ``members`` (archive name -> bytes) and the manifest made of
    ``manifest`` with the schema and every member's sha256 and size. Returns the manifest written."""
    for name in members:
        check_name(name)
    body = {**manifest, "schema": SCHEMA, "version": VERSION,
            "members": {n: {"sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)}
                        for n, b in sorted(members.items())}}
    text = manifest_bytes(body)
    files = {MANIFEST: text, **members}
    with atomic_path(out, needed=sum(len(b) for b in files.values())) as tmp:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(files):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(files[name]), MTIME, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(files[name]))
    return json.loads(text)


def check_name(name: str) -> None:
    """A member name a bundle may hold: a relative POSIX path without ``..`` (else BundleError naming it)."""
    p = PurePosixPath(name)
    if not name or p.is_absolute() or "\\" in name or any(part in ("", ".", "..") for part in name.split("/")):
        raise BundleError(f"bundle member {name!r}: not a plain relative path; the bundle is refused")


def read_archive(path: str | Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(the manifest, archive name -> bytes of every other member) of the bundle ``path``, each member checked
    against the manifest's sha256: a member changed, missing or not listed, a manifest that is not its own
    canonical text, or another schema is a BundleError naming the member."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no bundle {path}")
    try:
        tar = tarfile.open(path, "r:")
    except (tarfile.TarError, OSError) as e:
        raise BundleError(f"{path}: not a bundle archive (an uncompressed tar written by `vcebench report "
                          f"bundle`): {e}") from e
    members: dict[str, bytes] = {}
    with tar:
        for info in tar.getmembers():
            check_name(info.name)
            if not info.isreg():
                raise BundleError(f"bundle member {info.name!r}: not a regular file; the bundle is refused")
            if info.name in members:
                raise BundleError(f"bundle member {info.name!r} appears twice; the bundle is refused")
            members[info.name] = tar.extractfile(info).read()
    text = members.pop(MANIFEST, None)
    if text is None:
        raise BundleError(f"{path}: no {MANIFEST}; not a bundle of `vcebench report bundle`")
    manifest = _parse_manifest(text)
    listed = manifest["members"]
    unlisted, missing = sorted(set(members) - set(listed)), sorted(set(listed) - set(members))
    if unlisted or missing:
        raise BundleError(f"{path}: " + "; ".join(
            ([f"member(s) not in the manifest: {', '.join(unlisted)}"] if unlisted else [])
            + ([f"member(s) of the manifest missing: {', '.join(missing)}"] if missing else []))
            + "; the bundle is refused")
    for name in sorted(listed):
        have, want = hashlib.sha256(members[name]).hexdigest(), listed[name]["sha256"]
        if have != want:
            raise BundleError(f"bundle member {name}: its sha256 {have[:16]}... differs from the manifest's "
                              f"{want[:16]}...: the member was altered after bundling; the bundle is refused")
    return manifest, members


def _parse_manifest(text: bytes) -> dict[str, Any]:
    """The manifest from its bytes, refused (naming it) unless it is its own canonical text with its own sha256
    and of this schema and version."""
    try:
        manifest = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise BundleError(f"bundle member {MANIFEST}: not valid JSON ({e}): altered; the bundle is refused") from e
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        got = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise BundleError(f"bundle member {MANIFEST}: schema {got!r}, not {SCHEMA!r}; the bundle is refused")
    if manifest.get("version") != VERSION:
        raise BundleError(f"bundle member {MANIFEST}: {SCHEMA} version {manifest.get('version')!r}; this harness "
                          f"reads version {VERSION}")
    if manifest_bytes(manifest) != text:
        raise BundleError(f"bundle member {MANIFEST}: its text is not the canonical text of its own sha256 "
                          f"(manifest_sha256): altered after bundling; the bundle is refused")
    if not isinstance(manifest.get("members"), dict):
        raise BundleError(f"bundle member {MANIFEST}: no `members` table; the bundle is refused")
    return manifest


def judge_differences(bundled: Mapping[str, Any], harness: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One sentence per judge role whose files differ between the bundle's ``{role: {name, files}}`` and this
    harness's ``{role: {file: sha256}}`` (a role one side lacks included); empty: the same networks."""
    out = []
    for role in sorted(set(bundled) | set(harness)):
        if role not in harness:
            out.append(f"{role}: the bundle's metrics used one, this harness's task does not use this role")
            continue
        if role not in bundled:
            out.append(f"{role}: this harness's metrics use one, the bundle names none")
            continue
        files, mine = dict(bundled[role].get("files") or {}), dict(harness[role])
        if files != mine:
            diff = ", ".join(f"{f} {(files.get(f) or 'none')[:12]} (bundle) vs {(mine.get(f) or 'none')[:12]} (here)"
                             for f in sorted(set(files) | set(mine)) if files.get(f) != mine.get(f))
            name = bundled[role].get("name")
            out.append(f"{role}{f' ({name})' if name else ''}: {diff}")
    return out


def _base(col: str) -> tuple[str, bool]:
    """``FID_lo`` -> (``FID``, True); ``FID`` -> (``FID``, False)."""
    for s in INTERVAL_SUFFIXES:
        if col.endswith(s):
            return col[: -len(s)], True
    return col, False


def _cell(v: Any) -> str:
    return "--" if v is None or pd.isna(v) else (CSV_FLOAT_FORMAT % float(v))


def compare_cells(task: str, bundled: pd.DataFrame, recomputed: pd.DataFrame, exact: bool) -> list[dict]:
    """One row (task, method, column, bundled, recomputed, status) per cell of the bundled table. Metric cells
    (and ``n``) are compared with the recomputed table at the csv's precision (:data:`CSV_FLOAT_FORMAT`): ``exact``
    (rows made on this CPU kind), equal; else within :data:`vcebench.report.regression.CPU_DRIFT` (FR, FVA,
    FR_oracle equal, the rest within 1.8 % of the value), interval bounds ``not held`` (measured to move up to
    5.5 % across kinds, docs/ci.md). Cost and protocol columns are the lab's measurements: ``not recomputed``.
    A column one table lacks holds empty cells (``--``: no row had a value); a row not recomputed: ``MISSING``."""
    not_recomputed = set(COST_COLUMNS) | set(PROTOCOL_COLUMNS)
    rec = recomputed.set_index("method")
    cols = [c for c in bundled.columns if c != "method"]
    cols += [c for c in recomputed.columns if c not in bundled.columns and c != "method"
             and _base(c)[0] not in not_recomputed]
    rows = []
    for _, row in bundled.iterrows():
        m = row["method"]
        for col in cols:
            b = row.get(col)  # a column one table lacks: empty cells (no row had a value)
            base, interval = _base(col)
            out = {"task": task, "method": m, "column": col, "bundled": _cell(b)}
            if base in not_recomputed:
                rows.append({**out, "recomputed": "--", "status": "not recomputed"})
                continue
            r = rec.loc[m, col] if (m in rec.index and col in rec.columns) else None
            out["recomputed"] = _cell(r)
            if m not in rec.index:
                status = "MISSING"
            elif out["bundled"] == out["recomputed"]:
                status = "match"
            elif out["bundled"] == "--" or out["recomputed"] == "--" or exact:
                status = "MISMATCH"
            elif interval:
                status = "not held"
            else:
                tol = cell_tolerance({"cpu_drift": CPU_DRIFT}, task, m, base, float(b), strict=True)
                rounding = 1e-5 * max(abs(float(b)), abs(float(r)))  # two cells of 6 significant digits
                status = "within drift" if abs(float(r) - float(b)) <= tol + rounding else "MISMATCH"
            rows.append({**out, "status": status})
    return rows


def cells_markdown(rows: list[dict]) -> str:
    """The cell-by-cell table of :func:`compare_cells`, then one line counting each status."""
    head = "| task | method | column | bundled | recomputed | status |\n|---|---|---|---|---|---|\n"
    body = "".join(f"| {r['task']} | {r['method']} | {r['column']} | {r['bundled']} | {r['recomputed']} | "
                   f"{r['status']} |\n" for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return head + body + "\n" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + " cells.\n"
