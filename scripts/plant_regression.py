"""Plant the three faults of issue #60 on copies of a finished regression run and check that the paired
regression (`vcebench report regression`, docs/ci.md) catches each one, naming its row; the untouched copy
must pass. The run's own folder and the reference are never written: every case works on its own copy.

    python scripts/plant_regression.py --results runs/regression/results \\
        --reference results/reference/regression --task synthfaces_smile --method dime --work /tmp/plants \\
        --config config/config.yaml --config config/presets/regression.yaml

Cases (vcebench/report/plants.py): ``control`` (untouched, must pass), ``unedited`` (10 % of the row's flipped
CFs replaced by the unedited input: FR and FR_paired), ``oracle`` (10 % of its oracle successes fail, FR
unchanged: FR_oracle), ``realism`` (its CF feature rows moved until its FID is 1.3 x: FID). Prints one line per
case and exits 0 when every plant fails its expected cell and the control passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
from pathlib import Path

import numpy as np

from vcebench.cli import main as vcebench_main
from vcebench.core.io import save_npz
from vcebench.report import paired, plants

EXPECTED = {"control": None, "unedited": "FR", "oracle": "FR_oracle", "realism": "FID"}


def plant(case: str, results: Path, task: str, method: str) -> str:
    """Plants ``case`` on the run copy ``results`` (its row ``task`` / ``method``); returns what it did."""
    row = results / task / method
    rec = paired.read_records(row / paired.SAMPLES_FILE)
    originals = paired.read_originals(results / task / "fid_ref.npz")
    if case == "control":
        return "untouched"
    if case == "unedited":
        new, ids = plants.unedited_cfs(rec, originals)
        cf = row / "counterfactuals.npz"
        if cf.exists():  # the method's own flips (FR_paired) lose the same inputs
            with np.load(cf, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            if "flipped" in arrays and "sample_id" in arrays:
                arrays["flipped"] = arrays["flipped"] & ~np.isin(arrays["sample_id"], ids)
                save_npz(cf, **arrays)
        what = f"{len(ids)} flipped CFs replaced by the unedited input"
    elif case == "oracle":
        new = plants.oracle_failures(rec)
        what = f"{int((rec['q/FR_oracle'] == 1).sum() - (new['q/FR_oracle'] == 1).sum())} oracle successes failed"
    elif case == "realism":
        if originals is None:
            raise SystemExit(f"no {results / task / 'fid_ref.npz'}: the realism plant needs the originals' rows")
        new, before, after = plants.realism(rec, originals)
        what = f"CF features moved: FID {before:.4g} -> {after:.4g}"
    else:
        raise ValueError(f"unknown case {case!r}")
    save_npz(row / paired.SAMPLES_FILE, **new)
    return what


def run_case(case: str, args: argparse.Namespace) -> tuple[bool, str]:
    """Copies the run, plants ``case``, runs `vcebench report regression`; (as expected, the summary line)."""
    work = Path(args.work) / case
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(args.results, work, ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    what = plant(case, work, args.task, args.method)
    cli = ["report", "regression", "--reference", str(args.reference), "--results", str(work), "--out-dir",
           str(work), "--out", str(work / "regression.md"), "--tasks", *args.tasks]
    for c in args.config:
        cli += ["--config", c]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = vcebench_main(cli)
    report = (work / "regression.md").read_text() if (work / "regression.md").exists() else err.getvalue()
    failing = [line for line in report.splitlines()
               if line.startswith(f"| {args.task} |") and ("| REGRESSED |" in line or "| MISSING |" in line)]
    want = EXPECTED[case]
    named = [line for line in failing if want and line.startswith(f"| {args.task} | {args.method} | {want} |")]
    ok = rc == 0 if want is None else (rc == 1 and bool(named))
    seen = "; ".join(" ".join(c.strip() for c in line.split("|")[2:4]) for line in failing) or "nothing failed"
    return ok, f"{case:9s} {'ok' if ok else 'NOT AS EXPECTED'}: {what}; exit {rc}; failing: {seen}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", required=True, help="a finished regression run's results folder (read only)")
    p.add_argument("--reference", default="results/reference/regression", help="the reference (read only)")
    p.add_argument("--task", default="synthfaces_smile")
    p.add_argument("--method", default="dime")
    p.add_argument("--tasks", nargs="*", help="the tasks compared (default: --task)")
    p.add_argument("--work", required=True, help="scratch folder for the planted copies")
    p.add_argument("--config", action="append", default=[], help="config files, as for `vcebench report`")
    p.add_argument("--cases", nargs="*", default=list(EXPECTED), choices=list(EXPECTED))
    args = p.parse_args(argv)
    args.tasks = args.tasks or [args.task]
    work, protected = Path(args.work).resolve(), [Path(args.reference).resolve(), Path(args.results).resolve()]
    if any(work == d or d in work.parents or work in d.parents for d in protected):
        raise SystemExit(f"--work {work} overlaps the run or the reference; choose a scratch folder apart")
    results = [run_case(case, args) for case in args.cases]
    for _, line in results:
        print(line)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
