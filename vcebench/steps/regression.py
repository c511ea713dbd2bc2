"""`vcebench report regression`, `vcebench report accept` and `vcebench report tolerances` as a library (docs/ci.md).

Two modes. ``paired`` (the default: `make regression`, CI): the rerun of the reference's own seed against the
reference input by input (:mod:`vcebench.report.paired`) for every per-input quantity the rows record, the
other cells (costs) within the measured CPU-kind drift, and ``FR_paired`` on the methods' own flips.
``seeds``: every cell within its band over the generation seeds (``tolerances.yaml``), for a change that moves
the random draws. ``strict`` in either: any move past the CPU-kind drift, either direction.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from ..config.load import read_yaml
from ..core.io import copy_file, write_text

MODES = ("paired", "seeds")


def accept(tasks: list[str], reference: Path, out_dir: Path,
           copied: Callable[[Path], None] = lambda path: None) -> tuple[str, Path, list[tuple[Path, str]]]:
    """`report accept`: copies ``<out_dir>/<task>.{csv,md}`` into the reference folder of this kind of CPU
    (``reference``, or its ``cpu/<kind>/`` when ``reference`` was made on another kind), each row's per-input
    flips (``<task>_flips.json``) and per-input records (``samples/<task>/<method>.npz``, trimmed by
    :func:`vcebench.report.paired.trim_records`, with the originals' feature rows in ``originals.npz``),
    calling ``copied`` with each file written, then its machine.json. Returns the CPU kind, that folder and
    the references of other kinds kept beside it (folder, kind)."""
    import torch

    from ..config.kernels import cpu_kind, record
    from ..core.io import write_json
    from ..report.regression import FLIPS_FILE, MACHINE_FILE, accept_dir, machine_record, read_flips, reference_kind

    kind = cpu_kind()
    ref_dir = accept_dir(reference, kind)
    ref_dir.mkdir(parents=True, exist_ok=True)
    for t in tasks:
        for ext in ("csv", "md"):
            src = out_dir / f"{t}.{ext}"
            shutil.copyfile(src, ref_dir / src.name)
            copied(ref_dir / src.name)
        methods = [p.name for p in sorted((out_dir / t).glob("*")) if p.is_dir()]
        flips = read_flips(out_dir, t, methods)
        if flips:  # the per-input outcomes the paired FR check compares against
            write_json(ref_dir / FLIPS_FILE.format(task=t), flips)
            copied(ref_dir / FLIPS_FILE.format(task=t))
        for path in accept_records(out_dir, t, methods, ref_dir):
            copied(path)
    write_json(ref_dir / MACHINE_FILE, machine_record(kind, record(), torch.__version__))
    others = []
    for d in [reference, *sorted((reference / "cpu").glob("*"))]:
        other = reference_kind(d) if d != ref_dir else None
        if other:
            others.append((d, other))
    return kind, ref_dir, others


def accept_records(results: Path, task: str, methods: list[str], ref_dir: Path) -> list[Path]:
    """Replaces ``<ref_dir>/samples/<task>/`` with the trimmed records of the rows of ``methods`` that have a
    ``samples.npz`` and the originals' feature rows of their inputs (from ``<results>/<task>/fid_ref.npz``);
    returns the files written (none when no row has a record)."""
    import numpy as np

    from ..core.io import save_npz
    from ..report import paired

    records = paired.read_run_records(results, task, methods)
    folder = paired.reference_records_dir(ref_dir, task)
    if folder.exists():
        shutil.rmtree(folder)  # rows accepted before and gone now must not linger
    written = []
    dtype = np.float32
    for m, rec in records.items():
        trimmed = paired.trim_records(rec)
        save_npz(folder / f"{m}.npz", **trimmed)
        written.append(folder / f"{m}.npz")
        dtype = next((v.dtype for k, v in trimmed.items() if k.startswith("features/")), dtype)
    orig = paired.read_originals(results / task / "fid_ref.npz")
    if records and orig is not None:
        ids = np.unique(np.concatenate([paired.trim_records(r)["ids"] for r in records.values()]))
        save_npz(folder / paired.ORIGINALS_FILE, **paired.trim_originals(orig, ids, dtype))
        written.append(folder / paired.ORIGINALS_FILE)
    return written


def _paired_rows(cfg, ref_dir: Path, task: str, results: Path, reference_table, higher: dict, rel: float,
                 strict: bool) -> tuple[list[dict], list[dict], dict[str, set[str]]]:
    """The paired check of ``task`` (:func:`vcebench.report.paired.paired_check`) and the columns it covers."""
    import pandas as pd

    from ..core.runtime import setup_torch
    from ..report import paired
    from ..report.regression import PAIRED_MAX_LOST

    setup_torch(cfg.get("threads"))  # the feature metrics' bootstrap: the job's threads, never oversubscribed
    ref_records = paired.read_reference_records(ref_dir, task)
    current = paired.read_run_records(results, task, list(ref_records))
    table = reference_table.set_index("method")
    features = {m: [c for c in paired.FEATURE_METRICS if c in table.columns and m in table.index
                    and pd.notna(table.at[m, c])] for m in ref_records}
    ref_orig = paired.read_originals(paired.reference_records_dir(ref_dir, task) / paired.ORIGINALS_FILE)
    cur_orig = paired.read_originals(results / task / "fid_ref.npz") or ref_orig
    originals = (ref_orig, cur_orig) if ref_orig is not None else None
    seeds = [int(s) for s in cfg["metrics"]["sfid_seeds"]]
    rows, fails = paired.paired_check(task, ref_records, current, originals, higher, features, rel,
                                      PAIRED_MAX_LOST, seeds, strict=strict)
    return rows, fails, paired.covered(ref_records, features, originals is not None)


def regression(cfg, ref_dir: Path, tasks: list[str], results: Path, out_dir: Path, kind: str,
               strict: bool = False, out: Path | None = None,
               mode: str = "paired") -> tuple[str, list[dict], str | None]:
    """The CI metric regression (module docstring): each task's ``<out_dir>/<task>.csv`` and its rows' records
    in ``results`` against the reference of the CPU ``kind``, written to ``out`` when given. Returns the
    markdown report, the failing cells (:func:`failures_markdown` prints them) and the note on a reference
    made on another CPU kind (or None). ``UserError`` (one line) when the tolerances are missing or older than
    the reference they guard, or, in the paired mode, when the reference holds no per-input records."""
    import pandas as pd

    from .. import report
    from ..config.tasks import get_task
    from ..core.errors import UserError
    from ..report import paired
    from ..report.regression import (
        CPU_DRIFT,
        FLIPS_FILE,
        check_current,
        paired_flip_check,
        read_flips,
        reference_kind,
        reference_tables,
        unseeded_tasks,
    )

    if mode not in MODES:
        raise UserError(f"unknown regression mode {mode!r} (one of {', '.join(MODES)})")
    tol_file = ref_dir / "tolerances.yaml"
    if not tol_file.exists():
        raise UserError(f"no tolerances at {tol_file}; derive them with `vcebench report tolerances "
                        f"--reference {ref_dir}` (after `snakemake seeds`)")
    tolerances = read_yaml(tol_file) or {}
    stale = check_current(tolerances, ref_dir)
    if stale:
        raise UserError(stale)
    if strict and "cpu_drift" not in tolerances:
        raise UserError(f"--strict needs derived per-cell tolerances (`cpu_drift` in {tol_file})")
    tables_dir, note = reference_tables(ref_dir, kind)
    bare = [t for t in tasks if not paired.has_records(tables_dir, t)]
    if mode == "paired" and bare:
        raise UserError(f"the reference {tables_dir} has no per-input records of {', '.join(bare)} "
                        f"({paired.RECORDS_DIR}/<task>/<method>.npz): re-accept it (`make reference`, or "
                        "`vcebench report accept` after a run that writes samples.npz), or compare with the "
                        "seeds' band: `--mode seeds` (docs/ci.md)")
    tolerances.setdefault("cpu_drift", CPU_DRIFT)
    all_rows, failures = [], []
    for t in tasks:
        task = get_task(cfg, t)
        cur_file = out_dir / f"{t}.csv"
        if not cur_file.exists():
            raise UserError(f"no table {cur_file} to compare (run the preset first: `make regression`)")
        ref = pd.read_csv(tables_dir / f"{t}.csv")
        cur = pd.read_csv(cur_file)
        _, higher = report.load_task_table(results, t, list(cur["method"]), task.kind, task.synthetic)
        skip: dict[str, set[str]] = {}
        if mode == "paired":
            rows, fails, skip = _paired_rows(cfg, tables_dir, t, results, ref, higher,
                                             float(tolerances["cpu_drift"]["rel"]), strict)
            all_rows += rows
            failures += fails
        rows, fails = report.regression_check(cur, ref, tolerances, higher, t, strict=strict,
                                              drift_only=mode == "paired", skip=skip)
        all_rows += rows
        failures += fails
        flips_file = tables_dir / FLIPS_FILE.format(task=t)
        if flips_file.exists():  # the paired check of FR, input by input (report.regression.paired_flip_check)
            ref_flips = json.loads(flips_file.read_text())
            rows, fails = paired_flip_check(ref_flips, read_flips(results, t, list(ref_flips)), t, strict=strict)
            all_rows += rows
            failures += fails
    what = "changed past the CPU-kind drift" if strict else "regressed past tolerance"
    status = (f"{len(failures)} cell(s) {what}" if failures
              else f"no {'change' if strict else 'regression'} ({len(all_rows)} cells within "
                   f"{'the CPU-kind drift' if strict else 'tolerance'})")
    made_on = reference_kind(tables_dir) or "a CPU it does not name"
    derived = tolerances.get("derived") or {}
    prov = (f"Tolerances derived at commit {derived['commit']} on {derived['networks']} (seeds {derived['seeds']}, "
            f"n = {derived['n']}).\n\n" if derived and mode == "seeds" else "")
    text_mode = {"paired": "Mode: paired (each per-input quantity against the reference's, input by input; "
                           "the other cells within the CPU-kind drift; docs/ci.md).\n\n",
                 "seeds": "Mode: seeds (each cell within its band over the generation seeds).\n\n"}[mode]
    if strict:
        text_mode += "Strict: any move past the measured CPU-kind drift fails, either direction.\n\n"
    bare = unseeded_tasks(tolerances, tasks)
    if bare and not strict and mode == "seeds":
        text_mode += (f"No seed spread in the tolerances for {', '.join(bare)}: held to the CPU-kind drift only "
                      "(`make reference` derives them).\n\n")
    text = (f"# Metric regression against {tables_dir}\n\nReference made on {made_on}; this CPU: {kind}.\n\n"
            + prov + text_mode + (f"Note: {note}\n\n" if note else "") + f"{status}\n\n"
            + report.regression_markdown(all_rows))
    if out is not None:
        report.write_text(out, text)
    return text, failures, note


def failures_markdown(failures: list[dict]) -> str:
    """The failing cells of :func:`regression` as its markdown table."""
    from .. import report

    return report.regression_markdown(failures)


def networks_sha256(folder: Path) -> str:
    """One sha256 over every ``card.json`` of a network set (each card holds the sha256 of its files)."""
    import hashlib

    h = hashlib.sha256()
    for card in sorted(Path(folder).rglob("card.json")):
        h.update(str(card.relative_to(folder)).encode() + b"\0" + card.read_bytes() + b"\0")
    return h.hexdigest()


def git_commit(repo: Path, ignore: Path | None = None) -> str:
    """``git rev-parse --short HEAD`` of ``repo``, with ``+dirty`` when tracked files differ from it, the folder
    ``ignore`` aside (the reference being written; ``unknown`` outside a git checkout)."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        inside = ignore is not None and Path(ignore).resolve().is_relative_to(repo.resolve())
        spec = ["--", ".", f":(exclude){Path(ignore).resolve().relative_to(repo.resolve())}"] if inside else []
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", *spec],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def cell_tolerances(cfg, ref_dir: Path, tasks: list[str], seeds_dir: Path, repo: Path,
                    allow_missing_seeds: bool = False) -> tuple[str, str]:
    """The per-cell tolerances file of ``ref_dir`` (text) from ``<seeds_dir>/<task>_seeds.csv`` and the
    detection-power table (markdown), naming the commit and the network set they were made on and the sha256
    of the reference tables they guard. The reference must hold the tables of the run the seeds spread around
    (``<seeds_dir>/<task>.csv``, accepted first); ``UserError`` otherwise."""
    import datetime

    import pandas as pd

    from ..config.tasks import is_attack, is_baseline
    from ..core.errors import UserError
    from ..report import seeds
    from ..report.regression import CPU_DRIFT, reference_sha256

    sc = cfg["seeds"]
    seeded = [t for t in tasks if (seeds_dir / f"{t}_seeds.csv").exists()]
    if not seeded or (len(seeded) < len(tasks) and not allow_missing_seeds):
        missing = ", ".join(str(seeds_dir / f"{t}_seeds.csv") for t in tasks if t not in seeded)
        raise UserError(f"no seed spread {missing} (`make reference` runs the seeds; --allow-missing-seeds "
                        "holds those tasks to the CPU-kind drift only)")
    for t in tasks:
        ref_t, run_t = ref_dir / f"{t}.csv", seeds_dir / f"{t}.csv"
        for f in (ref_t, run_t):
            if not f.exists():
                raise UserError(f"{f} does not exist (`make reference` runs the seeds and accepts the tables)")
        if ref_t.read_bytes() != run_t.read_bytes():
            raise UserError(f"{ref_t} is not the table of the run in {seeds_dir}: accept it first "
                            "(`vcebench report accept`), then derive its tolerances")
    spreads = {t: pd.read_csv(seeds_dir / f"{t}_seeds.csv") for t in seeded}
    z, floors = float(sc["z"]), dict(sc["floors"])
    cells = seeds.derive_cell_tolerances(spreads, floors, z, CPU_DRIFT)
    networks = cfg.get("networks")
    net_path = (repo / networks) if networks else None
    derived = {"commit": git_commit(repo, ignore=ref_dir), "date": datetime.date.today().isoformat(),
               "networks": str(networks) if networks else "networks trained by the run",
               "networks_sha256": networks_sha256(net_path) if net_path and net_path.is_dir() else None,
               "seeds": [int(s) for s in sc["seeds"]], "n": int(cfg["n_eval"]), "z": z, "tasks": list(tasks),
               "reference_sha256": reference_sha256(ref_dir, tasks)}
    if len(seeded) < len(tasks):
        derived["unseeded_tasks"] = [t for t in tasks if t not in seeded]  # held to the CPU-kind drift
    text = seeds.cell_tolerance_yaml(derived, CPU_DRIFT, floors, z, cells)
    rows = [m for m in cfg["methods"] if not is_baseline(m) and not is_attack(m)]  # the calibrated rows
    values = {t: pd.read_csv(ref_dir / f"{t}.csv") for t in seeded}
    power = seeds.detection_power(cells, values, rows, ["FR", "FR_oracle", "FVA", "FID", "sFID", "KID",
                                                         "nfe_per_cf", "tflops_per_cf", "GT_L1_region", "FS",
                                                         "MNAC", "CD", "COUT", "L1", "MAD", "S3"])
    md = (f"# Detection power of the regression in {ref_dir.name}\n\nDerived at commit {derived['commit']} on "
          f"{derived['networks']}, seeds {derived['seeds']}, n = {derived['n']} per task, tasks {', '.join(seeded)} "
          "(`vcebench report tolerances`).\n\n" + paired_detection(cfg, ref_dir, tasks)
          + SEEDS_HEADING + seeds.detection_markdown(power, rows))
    return text, md


SEEDS_HEADING = "\n## The seeds' band (`--mode seeds`)\n\n"


def paired_detection(cfg, ref_dir: Path, tasks: list[str]) -> str:
    """The paired check's detection table (:func:`vcebench.report.paired.detection_markdown`) over the calibrated
    rows (no baseline, no attack) of the reference's per-input records and tables."""
    import pandas as pd

    from .. import registry
    from ..config.tasks import is_attack, is_baseline
    from ..report import paired
    from ..report.regression import CPU_DRIFT, PAIRED_MAX_LOST

    rows = [m for m in cfg["methods"] if not is_baseline(m) and not is_attack(m)]  # the calibrated rows
    records = {t: {m: r for m, r in paired.read_reference_records(ref_dir, t).items() if m in rows} for t in tasks}
    values = {t: pd.read_csv(ref_dir / f"{t}.csv").set_index("method").to_dict("index") for t in tasks
              if (ref_dir / f"{t}.csv").exists()}
    return paired.detection_markdown(records, values, list(paired.FEATURE_METRICS), registry.column_directions(),
                                     CPU_DRIFT["rel"], PAIRED_MAX_LOST)


def refresh_paired_detection(cfg, ref_dir: Path, tasks: list[str]) -> Path:
    """Rewrites the paired check's part of ``<ref_dir>/detection.md`` from the reference as it is (after an
    accept of new records), the seeds' part kept as derived; returns the file."""
    path = ref_dir / "detection.md"
    old = path.read_text() if path.exists() else f"# Detection power of the regression in {ref_dir.name}\n\n"
    if SEEDS_HEADING in old:
        head, seeds_part = old.split(SEEDS_HEADING, 1)
        head = head.split("## The paired check", 1)[0]
    else:  # a file from before the paired part: its title and header paragraph, then the seeds' table
        parts = old.split("\n\n", 2)
        head, seeds_part = "\n\n".join(parts[:2]) + "\n\n", parts[2] if len(parts) > 2 else ""
    write_text(path, head + paired_detection(cfg, ref_dir, tasks)
               + (SEEDS_HEADING + seeds_part if seeds_part.strip() else ""))
    return path


def write_tolerances(cfg, ref_dir: Path, tasks: list[str], seeds_dir: Path, repo: Path,
                     allow_missing_seeds: bool = False) -> tuple[str, str]:
    """Writes ``<ref_dir>/tolerances.yaml`` and ``detection.md`` (:func:`cell_tolerances`) and copies the seed
    tables beside them; returns the tolerances' header and the detection power."""
    text, power = cell_tolerances(cfg, ref_dir, tasks, seeds_dir, repo, allow_missing_seeds)
    write_text(ref_dir / "tolerances.yaml", text)
    write_text(ref_dir / "detection.md", power)
    for t in tasks:
        if (seeds_dir / f"{t}_seeds.md").exists():
            copy_file(seeds_dir / f"{t}_seeds.md", ref_dir / f"{t}_seeds.md")
    return text.split("\nderived:")[0], power
