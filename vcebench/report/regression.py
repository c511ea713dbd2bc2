"""The CI metric-regression check: a table against its reference, within each cell's tolerance.

The default (paired) mode compares each row's per-input records with the reference's
(:mod:`vcebench.report.paired`) and holds the cells without records to :data:`CPU_DRIFT`
(``regression_check(drift_only=True)``); the seeds' mode (``--mode seeds``) holds every cell to its band over
the generation seeds, below.

A reference folder (``results/reference/regression``, the regression preset's run on the shipped networks)
holds ``tolerances.yaml``, the tables of the CPU kind that made it and ``machine.json`` naming that kind.
The tolerances are per cell (task x method x metric, :func:`vcebench.report.seeds.derive_cell_tolerances`)
and record the sha256 of the tables they were derived for (:func:`reference_sha256`): a reference accepted
again without new tolerances is refused (:func:`check_current`). ``strict``: every cell within the measured
drift between CPU kinds only (``cpu_drift`` of the tolerances: some metrics exact, the rest relative), in both
directions: what a behaviour-preserving change must pass.

A preset that trains its networks (the quick preset) rounds differently on another kind of CPU even under
the kernel pin (``vcebench.config.kernels``; docs/internals.md), so the tables of each further kind can live
in ``cpu/<kind>/`` beside them: :func:`reference_tables` picks the folder of the CPU it runs on,
:func:`accept_dir` the one ``vcebench report accept`` writes.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.io import sha256
from .seeds import NOT_CHECKED
from .tables import format_value

MACHINE_FILE = "machine.json"

# What moves between CPU kinds for the same commit, networks and config under the kernel pin, measured on the
# default run (a fresh clone's `make benchmark` on a 2-core Intel Xeon with AVX-512 against the snapshot made on
# an AMD EPYC, docs/ci.md): every FR, FVA and FR_oracle cell identical; 299 of 2,583 other numeric non-timing
# cells differed, by at most 1.8 % of the value. The tolerances' floor and `--strict`'s whole allowance.
CPU_DRIFT = {"exact": ["FR", "FVA", "FR_oracle"], "rel": 0.018}


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
                     "networks trained on another CPU kind round differently (docs/internals.md), and shipped "
                     "networks' values move within the measured CPU-kind drift (docs/ci.md); `vcebench report "
                     "accept` here adds one")


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


def reference_sha256(ref_dir: Path, tasks: list[str]) -> dict[str, str]:
    """``{task: sha256 of <ref_dir>/<task>.csv}``: the reference tables the tolerances guard."""
    return {t: sha256(Path(ref_dir) / f"{t}.csv") for t in tasks}


def check_current(tolerances: dict, ref_dir: Path) -> str | None:
    """None when ``tolerances`` were derived for the tables now in ``ref_dir`` (or record no hash: hand-written
    per-metric tolerances), else the one-line reason they are older than the reference, naming the tables."""
    want = (tolerances.get("derived") or {}).get("reference_sha256")
    if not want:
        return None
    missing = [t for t in want if not (Path(ref_dir) / f"{t}.csv").exists()]
    if missing:
        return f"the reference {ref_dir} has no table of {', '.join(missing)} that its tolerances guard"
    have = reference_sha256(ref_dir, list(want))
    changed = [t for t in want if have[t] != want[t]]
    if changed:
        return (f"the tolerances in {ref_dir} are older than the reference: {', '.join(f'{t}.csv' for t in changed)} "
                "changed since they were derived (sha256 in tolerances.yaml); derive them again for the new "
                "tables: `make reference` (docs/ci.md)")
    return None


def cell_tolerance(tolerances: dict, task: str, method: str, metric: str, refval: float,
                   strict: bool = False) -> float | None:
    """The tolerance of one cell. Per-cell files (``cells: {task: {method: {metric: abs}}}``) give each cell
    its own; per-metric files ``{metric: abs}`` or ``{metric: {abs: a, rel: r}}`` (the larger applies;
    ``default`` for the rest) give every cell of a metric the same. ``strict``: the measured CPU-kind drift
    (``cpu_drift: {exact: [...], rel: r}``): 0 for the exact metrics, ``r * |refval|`` for the others."""
    cells = tolerances.get("cells")
    if strict or (cells is not None and task not in cells):  # a task without a seed spread: the drift only
        drift = tolerances.get("cpu_drift")
        if drift is None:
            raise ValueError("strict comparison needs the tolerances' `cpu_drift` (derived tolerances have it)")
        return 0.0 if metric in drift.get("exact", []) else float(drift["rel"]) * abs(float(refval))
    if cells is not None:
        tol = ((cells.get(task) or {}).get(method) or {}).get(metric)
        return None if tol is None else float(tol)
    tol = tolerances.get(metric, tolerances.get("default"))
    if isinstance(tol, dict):
        tol = max(float(tol.get("abs", 0)), float(tol.get("rel", 0)) * abs(float(refval)))
    return None if tol is None else float(tol)


def checked_metrics(tolerances: dict, task: str, method: str) -> set[str] | None:
    """The metrics a per-cell file guards for ``method`` on ``task`` (None: a per-metric file, or a task the
    file has no seed spread of, held to the CPU-kind drift: every metric but the machine's)."""
    cells = tolerances.get("cells")
    return None if cells is None or task not in cells else set((cells.get(task) or {}).get(method) or {})


def unseeded_tasks(tolerances: dict, tasks: list[str]) -> list[str]:
    """The tasks of ``tasks`` that a per-cell file has no tolerances for: compared within the drift only."""
    cells = tolerances.get("cells")
    return [] if cells is None else [t for t in tasks if t not in cells]


def regression_check(current: pd.DataFrame, reference: pd.DataFrame, tolerances: dict, higher: dict[str, bool],
                     task: str, strict: bool = False, drift_only: bool = False,
                     skip: dict[str, set[str]] | None = None) -> tuple[list[dict], list[dict]]:
    """Rows (task, method, metric, ref, now, delta, tol, status) for every toleranced cell.

    A cell regresses when it moves past its tolerance (:func:`cell_tolerance`) in its bad direction; moving
    in the good direction is reported as ``improved`` and does not fail. ``strict``: a move past the CPU-kind
    drift in either direction is ``CHANGED`` and fails. A per-cell file guards the cells it names.
    ``drift_only`` (the paired mode's cells without per-input records): every cell but the machine's within
    the CPU-kind drift in its bad direction; ``skip``: ``{method: columns}`` left to the paired check.
    """
    rows, failures = [], []
    ref = reference.set_index("method")
    cur = current.set_index("method")
    for m in ref.index:
        guarded = None if drift_only else checked_metrics(tolerances, task, m)
        for col, refval in ref.loc[m].items():
            if col == "n" or pd.isna(refval) or col not in higher or (guarded is not None and col not in guarded):
                continue
            if (guarded is None and ("cells" in tolerances or drift_only) and col in NOT_CHECKED) \
                    or col in (skip or {}).get(m, ()):
                continue
            tol = cell_tolerance(tolerances, task, m, col, refval, strict or drift_only)
            if tol is None:
                continue
            now = cur.loc[m, col] if (m in cur.index and col in cur.columns) else np.nan
            row = {"task": task, "method": m, "metric": col, "reference": float(refval),
                   "current": float(now) if pd.notna(now) else np.nan, "tolerance": float(tol)}
            if pd.isna(now):
                row["status"] = "MISSING"
            else:
                delta = float(now) - float(refval)
                row["delta"] = delta
                bad = -delta if higher[col] else delta
                if strict:
                    row["status"] = "CHANGED" if abs(delta) > tol else "ok"
                else:
                    row["status"] = "REGRESSED" if bad > tol else ("improved" if bad < -tol else "ok")
            rows.append(row)
            if row["status"] in ("REGRESSED", "CHANGED", "MISSING"):
                failures.append(row)
    return rows, failures


# The paired check of the flip rate: CI reruns the reference's seed, so every input's outcome repeats on one CPU
# kind (and FR is identical across kinds, CPU_DRIFT): a row that loses more than this many of its inputs' flips
# (net of the ones it gains) regressed, whatever the seed band of its FR cell.
FLIPS_FILE = "{task}_flips.json"
PAIRED_MAX_LOST = 1


def read_flips(results: Path, task: str, methods: list[str]) -> dict[str, dict]:
    """Per input of each method's ``counterfactuals.npz`` in ``results/<task>/<method>/``: sample id -> the
    classifier flipped (1) or not (0), for the methods that have one. This is the method's own record (its
    float CF); the table's FR re-classifies the stored uint8 CF, which can differ on an input or so."""
    out = {}
    for m in methods:
        npz = Path(results) / task / m / "counterfactuals.npz"
        if npz.exists():
            with np.load(npz) as z:
                if "flipped" in z.files and "sample_id" in z.files:
                    out[m] = {str(int(i)): int(bool(f)) for i, f in zip(z["sample_id"], z["flipped"])}
    return out


def paired_flip_check(reference: dict[str, dict], current: dict[str, dict], task: str,
                      strict: bool = False) -> tuple[list[dict], list[dict]]:
    """Rows (metric ``FR_paired``) comparing each method's per-input flips with the reference's, input by
    input: ``reference`` / ``current`` count the reference inputs flipped then and now, ``delta`` is the net
    change in inputs. A row regresses when it lost more than :data:`PAIRED_MAX_LOST` flips net of the ones it
    gained; ``strict``: any input whose outcome changed fails (``CHANGED``); a method or an input missing now
    is ``MISSING``."""
    rows, failures = [], []
    for m, ref in reference.items():
        cur = current.get(m)
        row = {"task": task, "method": m, "metric": "FR_paired", "reference": float(sum(ref.values())),
               "tolerance": float(0 if strict else PAIRED_MAX_LOST)}
        if cur is None or not set(ref) <= set(cur):
            row.update(current=np.nan, status="MISSING")
        else:
            lost = sum(1 for i, f in ref.items() if f and not cur[i])
            gained = sum(1 for i, f in ref.items() if not f and cur[i])
            row.update(current=float(sum(cur[i] for i in ref)), delta=float(gained - lost), lost=lost,
                       gained=gained)
            if strict:
                row["status"] = "CHANGED" if lost or gained else "ok"
            else:
                row["status"] = ("REGRESSED" if lost - gained > PAIRED_MAX_LOST
                                 else "improved" if gained > lost else "ok")
        rows.append(row)
        if row["status"] in ("REGRESSED", "CHANGED", "MISSING"):
            failures.append(row)
    return rows, failures


def regression_markdown(rows: list[dict]) -> str:
    """One line per checked cell; ``interval``: the paired interval of now - reference, where there is one."""
    head = ("| task | method | metric | reference | current | delta | tolerance | status | paired interval |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    fv = format_value

    def interval(r: dict) -> str:
        return f"[{fv(r['interval'][0])}, {fv(r['interval'][1])}]" if r.get("interval") else "--"

    body = "".join(
        f"| {r['task']} | {r['method']} | {r['metric']} | {fv(r['reference'])} | {fv(r['current'])} | "
        f"{fv(r.get('delta', float('nan')))} | {fv(r['tolerance'])} | {r['status']} | {interval(r)} |\n"
        for r in rows)
    return head + body
