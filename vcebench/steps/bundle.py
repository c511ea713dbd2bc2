"""`vcebench report bundle` and `vcebench report verify` as a library (their arguments and printing:
:mod:`vcebench.cli.report`; the archive and the cell comparison: :mod:`vcebench.report.bundle`; docs/bundles.md).

:func:`make_bundle` packs a finished run's task tables and rows with a manifest naming the judges (the networks
the metrics used, by the sha256 of their files). :func:`verify_bundle` refuses a bundle whose members do not
match their hashes or whose judges are not this harness's, before any metric; then it scores every row's
counterfactuals through `vcebench evaluate`'s own path (:func:`vcebench.steps.evaluate.evaluate_task`, with this
harness's configuration and networks), rebuilds the table as `vcebench report task` does
(:func:`vcebench.report.load_task_table`) and compares it with the bundled one, cell by cell.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..report import bundle as rb
from ..report.bundle import IMAGES, RESULTS, BundleError


def _png(cf: np.ndarray) -> bytes:
    """One uint8 C x H x W counterfactual as PNG bytes (no metadata: the same pixels, the same bytes)."""
    from PIL import Image

    hwc = cf[0] if cf.shape[0] == 1 else np.moveaxis(cf, 0, -1)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(hwc)).save(buf, format="PNG")
    return buf.getvalue()


def _row_members(results: Path, task: str, method: str, images: bool) -> tuple[dict[str, bytes], dict]:
    """The archive members of one row and its metrics.json."""
    d = results / task / method
    missing = [f for f in rb.REQUIRED_ROW_FILES if not (d / f).is_file()]
    if missing:
        raise BundleError(f"row {task}/{method} of {results / f'{task}.csv'} has no {', '.join(missing)} in {d}; "
                          "a bundle holds what every row's numbers are recomputed from")
    members = {f"{RESULTS}/{task}/{method}/{f}": (d / f).read_bytes() for f in rb.ROW_FILES if (d / f).is_file()}
    if images:
        with np.load(d / "counterfactuals.npz", allow_pickle=False) as z:
            for sid, cf in zip(z["sample_id"], z["cf"]):
                members[f"{IMAGES}/{task}/{method}/{int(sid)}.png"] = _png(cf)
    return members, json.loads((d / "metrics.json").read_text())


def _row_record(task: str, method: str, mj: dict) -> dict[str, Any]:
    """What the manifest says of a row: its inputs, and the commit and CPU kind its provenance names."""
    prov = mj.get("provenance") or {}
    git = prov.get("git") or {}
    return {"task": task, "method": method, "n_inputs": mj.get("n_inputs"),
            "n_eval": (mj.get("inputs") or {}).get("n_eval", mj.get("n_inputs")),
            "commit": git.get("commit"), "dirty": git.get("dirty"),
            "cpu": (prov.get("kernels") or mj.get("kernels") or {}).get("cpu"), "torch": prov.get("torch")}


def make_bundle(cfg: dict, results: Path, tasks: list[str], out: Path, *, images: bool = False,
                model_dir: str = "resources/models") -> dict[str, Any]:
    """Write the bundle ``out`` of ``tasks`` from the results folder ``results`` (each task's table
    ``<task>.csv`` and the rows it lists; the judges hashed from ``model_dir`` and ``cfg``'s canonical weights,
    the networks the evaluation loaded). Returns the manifest."""
    import pandas as pd

    from ..config.kernels import cpu_kind
    from ..config.tasks import get_task
    from ..core.provenance import git_state, package_versions
    from ..models import judge_files

    members: dict[str, bytes] = {}
    rows, judges = [], {}
    for task in tasks:
        t = get_task(cfg, task)
        table = results / f"{task}.csv"
        if not table.is_file():
            raise BundleError(f"no table {table}: write it first (`vcebench report task --task {task}`)")
        for suffix in rb.TABLE_SUFFIXES:
            if (results / f"{task}{suffix}").is_file():
                members[f"{RESULTS}/{task}{suffix}"] = (results / f"{task}{suffix}").read_bytes()
        names: dict[str, set[str]] = {}
        for method in pd.read_csv(table)["method"]:
            row, mj = _row_members(results, task, str(method), images)
            members.update(row)
            rows.append(_row_record(task, str(method), mj))
            for role, name in (mj.get("models") or {}).items():
                names.setdefault(role, set()).add(str(name))
        mixed = {r: n for r, n in names.items() if len(n) > 1}
        if mixed:
            raise BundleError(f"the rows of {table} were scored by different networks: "
                              + "; ".join(f"{r}: {', '.join(sorted(n))}" for r, n in sorted(mixed.items())))
        judges[task] = {role: {"name": next(iter(n)), "files": judge_files(cfg, t, role, model_dir)}
                        for role, n in sorted(names.items())}
    manifest = {"tasks": list(tasks), "rows": rows, "judges": judges,
                "bundled_by": {"git": git_state(), "vcebench": package_versions().get("vcebench"),
                               "cpu": cpu_kind(), "models": str(model_dir)}}
    return rb.write_archive(out, members, manifest)


def _extract(members: dict[str, bytes], root: Path) -> None:
    """Write the (checked) members under ``root``."""
    for name, data in members.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def check_judges(manifest: dict, cfg: dict, model_dir: str) -> None:
    """Refuse (BundleError, every differing role named) a bundle whose judges are not this harness's networks:
    per task, the roles `vcebench evaluate` loads for it (``registry.eval_roles``), hashed as the bundle hashed
    its own (:func:`vcebench.models.task_models.judge_files`)."""
    from ..config.tasks import get_task
    from ..models import judge_files
    from ..registry import eval_roles

    problems = []
    for task in manifest["tasks"]:
        t = get_task(cfg, task)
        mine = {role: judge_files(cfg, t, role, model_dir) for role in eval_roles(t.kind, t.synthetic)}
        problems += [f"{task}: {p}" for p in rb.judge_differences((manifest.get("judges") or {}).get(task) or {}, mine)]
    if problems:
        raise BundleError("the bundle was scored by other judges than this harness's (--models "
                          f"{model_dir}, --config): " + "; ".join(problems)
                          + "; no metric is compared (verify with the networks the bundle names, or re-score)")


def _recompute_row(config_paths, task: str, method: str, n_eval: int, root: Path, out: Path, fid_ref: str | None,
                   data_dir: str | None, model_dir: str) -> None:
    """The row's metrics.json, recomputed from its bundled counterfactuals by `vcebench evaluate`'s path with
    this harness's settings and networks, written under ``out`` as a results folder."""
    from ..core.errors import UserError
    from ..core.io import write_json
    from .evaluate import eval_config, eval_settings, evaluate_task, samples_path

    dest = out / task / method / "metrics.json"
    try:
        cfg = eval_config(config_paths, task, method, n_eval)
        settings, device = eval_settings(cfg, task, method, data_dir=data_dir, model_dir=model_dir)
        result = evaluate_task(settings, str(root / RESULTS / task / method / "counterfactuals.npz"), fid_ref=fid_ref,
                               device=device, samples_out=samples_path(str(dest)), config_paths=config_paths)
    except UserError as e:
        raise BundleError(f"row {task}/{method}: its counterfactuals cannot be scored: {e}") from e
    write_json(dest, result)


def verify_bundle(bundle: Path, config_paths: list[str] | None, *, model_dir: str = "resources/models",
                  data_dir: str | None = None) -> tuple[str, list[dict], str]:
    """(the cell-by-cell markdown, the failing cells, a note saying how cells were compared) for ``bundle``:
    its members checked against the manifest and its judges against this harness's (BundleError, before any
    metric), then every row rescored and the tables compared (:func:`vcebench.report.bundle.compare_cells`:
    exact when every row was made on this CPU kind, else within the CPU-kind drift)."""
    import pandas as pd

    from metrics import metric_names

    from .. import report
    from ..config.kernels import cpu_kind
    from ..config.load import load_config
    from ..config.tasks import get_task
    from .evaluate import eval_config, eval_settings, metric_inputs, write_reference

    manifest, members = rb.read_archive(bundle)
    cfg = load_config(config_paths)
    check_judges(manifest, cfg, model_dir)
    kind = cpu_kind()
    kinds = sorted({str(r.get("cpu")) for r in manifest["rows"]})
    exact = kinds == [kind]
    note = (f"every row was made on this CPU kind ({kind}): cells compared exactly, at the table's 6 significant "
            "digits" if exact else
            f"rows made on {', '.join(kinds)}, verified on {kind}: cells compared within the CPU-kind drift "
            "(vcebench.report.regression.CPU_DRIFT: FR, FVA, FR_oracle exact, the rest 1.8 % of the value; interval "
            "bounds not held)")
    cells = []
    with tempfile.TemporaryDirectory(prefix="vcebench-verify-") as tmp:
        root, out = Path(tmp) / "bundle", Path(tmp) / "recomputed"
        _extract(members, root)
        for task in manifest["tasks"]:
            t = get_task(cfg, task)
            bundled = pd.read_csv(root / RESULTS / f"{task}.csv")
            methods = [str(m) for m in bundled["method"]]
            n_eval = {r["method"]: int(r["n_eval"]) for r in manifest["rows"] if r["task"] == task}
            fid_ref = None
            if "fid_reference" in metric_inputs(metric_names(t)):
                fid_ref = str(out / task / "fid_ref.npz")
                ref_settings, device = eval_settings(eval_config(config_paths, task, None), task, None,
                                                     data_dir=data_dir, model_dir=model_dir)
                with contextlib.redirect_stdout(sys.stderr):  # stdout: the table
                    write_reference(ref_settings, fid_ref, device, progress=False)
            for m in methods:
                _recompute_row(config_paths, task, m, n_eval[m], root, out, fid_ref, data_dir, model_dir)
            recomputed, _ = report.load_task_table(out, task, methods, t.kind, t.synthetic)
            buf = io.StringIO()
            recomputed.to_csv(buf, index=False, float_format=rb.CSV_FLOAT_FORMAT)  # the table's own precision
            cells += rb.compare_cells(task, bundled, pd.read_csv(io.StringIO(buf.getvalue())), exact)
    return rb.cells_markdown(cells), [c for c in cells if c["status"] in rb.FAILING], note
