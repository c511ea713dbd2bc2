"""The CI metric-regression check: a table against its reference, within each metric's tolerance.

A reference folder (``results/reference/quick``) holds ``tolerances.yaml``, the tables of the CPU kind that
made it and ``machine.json`` naming that kind. The quick preset trains its networks from scratch, and
training rounds differently on another kind of CPU even under the kernel pin (``vcebench.config.kernels``;
measured in docs/internals.md), so the tables of each further kind live in ``cpu/<kind>/`` beside them:
:func:`reference_tables` picks the folder of the CPU it runs on, :func:`accept_dir` the one
``vcebench report accept`` writes. The tolerances (from the generation seeds' spread) are shared.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .tables import format_value

MACHINE_FILE = "machine.json"


def kind_slug(kind: str) -> str:
    """``AuthenticAMD AMD EPYC`` -> ``authenticamd-amd-epyc``: a CPU kind as a folder name."""
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "unknown"


def reference_kind(folder: Path) -> str | None:
    """The CPU kind named by ``folder/machine.json`` (None when the folder has none)."""
    f = Path(folder) / MACHINE_FILE
    return str(json.loads(f.read_text())["cpu"]) if f.exists() else None


def reference_tables(ref_dir: Path, kind: str) -> tuple[Path, str | None]:
    """The folder of ``ref_dir``'s tables made on a CPU of ``kind``, and a note when there is none (then the
    folder's own tables, made on another kind: cells can move beyond their tolerance through training alone)."""
    ref_dir = Path(ref_dir)
    own = reference_kind(ref_dir)
    if own is None or own == kind:
        return ref_dir, None
    other = ref_dir / "cpu" / kind_slug(kind)
    if reference_kind(other) == kind:
        return other, None
    return ref_dir, (f"no reference made on this CPU ({kind}); comparing with {ref_dir}'s, made on {own}: "
                     "networks trained on another CPU kind round differently (docs/internals.md), so cells can "
                     "move beyond their tolerance without a code change; `make reference` here adds one")


def accept_dir(ref_dir: Path, kind: str) -> Path:
    """Where ``vcebench report accept`` writes the tables of a CPU of ``kind``: ``ref_dir`` when it is empty or
    was made on that kind, else ``ref_dir/cpu/<kind>/``."""
    ref_dir = Path(ref_dir)
    own = reference_kind(ref_dir)
    return ref_dir if own is None or own == kind else ref_dir / "cpu" / kind_slug(kind)


def machine_record(kind: str, kernels: dict, torch_version: str) -> dict:
    """What ``machine.json`` says: the CPU kind, the kernel pin and the torch build the tables were made with."""
    return {"cpu": kind, "cpu_isa": kernels.get("cpu_isa"), "torch_cpu_capability": kernels.get("torch_cpu_capability"),
            "torch": torch_version, "accepted": datetime.date.today().isoformat()}


def regression_check(current: pd.DataFrame, reference: pd.DataFrame, tolerances: dict, higher: dict[str, bool],
                     task: str) -> tuple[list[dict], list[dict]]:
    """Rows (task, method, metric, ref, now, delta, tol, status) for every toleranced metric.

    A metric regresses when it moves past its tolerance in its bad direction; moving in the good
    direction is reported as ``improved`` and does not fail. Tolerances: ``{metric: abs}`` or
    ``{metric: {abs: a, rel: r}}`` (the larger applies); ``default`` applies to the rest.
    """
    rows, failures = [], []
    ref = reference.set_index("method")
    cur = current.set_index("method")
    default = tolerances.get("default")
    for m in ref.index:
        for col, refval in ref.loc[m].items():
            tol = tolerances.get(col, default)
            if tol is None or col == "n" or pd.isna(refval) or col not in higher:
                continue
            if isinstance(tol, dict):
                tol = max(float(tol.get("abs", 0)), float(tol.get("rel", 0)) * abs(float(refval)))
            now = cur.loc[m, col] if (m in cur.index and col in cur.columns) else np.nan
            row = {"task": task, "method": m, "metric": col, "reference": float(refval),
                   "current": float(now) if pd.notna(now) else np.nan, "tolerance": float(tol)}
            if pd.isna(now):
                row["status"] = "MISSING"
            else:
                delta = float(now) - float(refval)
                row["delta"] = delta
                bad = -delta if higher[col] else delta
                row["status"] = "REGRESSED" if bad > tol else ("improved" if bad < -tol else "ok")
            rows.append(row)
            if row["status"] in ("REGRESSED", "MISSING"):
                failures.append(row)
    return rows, failures


def regression_markdown(rows: list[dict]) -> str:
    head = ("| task | method | metric | reference | current | delta | tolerance | status |\n"
            "|---|---|---|---|---|---|---|---|\n")
    fv = format_value
    body = "".join(
        f"| {r['task']} | {r['method']} | {r['metric']} | {fv(r['reference'])} | {fv(r['current'])} | "
        f"{fv(r.get('delta', float('nan')))} | {fv(r['tolerance'])} | {r['status']} |\n" for r in rows)
    return head + body
