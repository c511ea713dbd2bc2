"""Plant issue #60's faults end to end on copies of a finished regression run and check that the paired
regression (`make regression`'s `vcebench report regression`, docs/ci.md) fails naming every planted row; the
untouched copy, evaluated again the same way, must pass. The run's own folder and the reference are never
written: every case works on its own copy of the run's folder (the snakemake workdir, `runs/regression`).

    python scripts/plant_regression.py --run runs/regression --work /tmp/plants --all-rows

Each case copies the run, degrades the counterfactuals of the planted rows
(`results/<task>/<method>/counterfactuals.npz`, vcebench/report/plants.py), re-runs those rows' evaluate jobs
(snakemake, `--forcerun evaluate`), the task tables and the `regression` rule, as `make regression` does, and
reads the regression's diff (`logs/report/regression.log`):

- ``control``: nothing planted; every cell must pass;
- ``unedited``: 10 % of each row's flipped CFs replaced by the unedited input: caught by FR (and FR_paired);
- ``attack``: 10 % of each row's flipped CFs replaced by the pixel attack's CF for the same input (rows of tasks
  with an oracle where the attack flips the row's inputs; the others are listed as n/a): caught by FR_oracle,
  input by input;
- ``realism``: each row's CFs plus Gaussian noise, its strength set by a rule on the planted copy (the smallest
  found by bisection that raises the row's FID, computed by the evaluate job's own code, by --factor): caught by
  FID.

Rows: --rows TASK/METHOD ..., or --all-rows (every calibrated row of every task of the preset; the rows of one
case are planted on one copy: each row's evaluate job reads its own file only). Prints one line per case and
planted row and a markdown table of the outcomes (--out); exits 0 when the control passes and every planted row
fails its case's cell, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from vcebench.core.io import load_npz, save_npz, write_text
from vcebench.report import plants

ROOT = Path(__file__).resolve().parents[1]
CASES = ("control", "unedited", "attack", "realism")
EXPECTED = {"control": None, "unedited": "FR", "attack": "FR_oracle", "realism": "FID"}
FAILED = ("REGRESSED", "MISSING", "CHANGED")
ROW = re.compile(r"^\| (\S+) \| (\S+) \| (\S+) \| .*\| (REGRESSED|MISSING|CHANGED|ok|improved) \|")


def calibrated_rows(cfg: dict) -> list[tuple[str, str]]:
    """(task, method) of every calibrated row of the preset: its methods less the baselines and the attacks."""
    from vcebench.config.tasks import is_attack, is_baseline

    return [(t, m) for t in cfg["run_tasks"] for m in cfg["methods"] if not is_baseline(m) and not is_attack(m)]


def attackable(run: Path, task: str, method: str, args: argparse.Namespace) -> str | None:
    """Why the attack plant cannot apply to the row (None when it can): its task has no oracle, or the attack
    flips none of the row's flipped inputs (e.g. the pixel attack on the x-ray task flips no input)."""
    folder = run / "results" / task
    if json.loads((folder / method / "metrics.json").read_text())["metrics"].get("FR_oracle") is None:
        return "no oracle on this task"
    row = load_npz(folder / method / "counterfactuals.npz")
    if not len(plants.attack(row, load_npz(folder / args.attack_row / "counterfactuals.npz"), args.share)[1]):
        return f"{args.attack_row} flips none of the row's flipped inputs"
    return None


def snakemake(copy: Path, args: argparse.Namespace, *extra: str) -> int:
    """Runs the repository's workflow on ``copy`` (its workdir) with the preset; snakemake's exit status. Only
    the rules named in ``extra``'s ``--allowed-rules`` run: the explain jobs' outputs are the run's own."""
    cmd = [str(Path(sys.executable).with_name("snakemake")), *extra, "--snakefile", str(ROOT / "Snakefile"),
           "--configfile", str(args.configfile), "--config", f"workdir={copy}", "--cores", str(args.cores),
           "--rerun-triggers", "mtime"]  # targets first: several options take a list
    with open(copy / "plant-snakemake.log", "a") as log:
        return subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False).returncode


def fid_at(copy: Path, task: str, method: str, inputs: dict, row: dict):
    """sigma -> the row's FID with its CFs noised by sigma (plants.noised), computed by the evaluate job's own
    code (`vcebench evaluate --only FID`, in process, the networks loaded once)."""
    from vcebench.models import load_task_models
    from vcebench.steps.evaluate import evaluate_task
    from vcebench.steps.settings import evaluate_settings
    from vcebench.workflow import data_dir

    folder = copy / "results" / task / method
    dataset = evaluate_settings(folder / "settings.json")[0].task.dataset
    data = data_dir(dataset)
    settings, device = evaluate_settings(folder / "settings.json", data_dir=str(copy / data) if data else None,
                                         model_dir=str(copy / "resources" / "models"))
    models = load_task_models(settings.config, settings.task, roles=("classifier", "fid_features"), device=device,
                              model_dir=settings.model_dir)
    trial = folder / "plant-trial.npz"

    def fid(sigma: float) -> float:
        save_npz(trial, **(plants.noised(row, inputs, sigma) if sigma else row))
        out = evaluate_task(settings, str(trial), fid_ref=str(copy / "results" / task / "fid_ref.npz"),
                            device=device, only=["FID"], models=models)
        return float(out["metrics"]["FID"])

    return fid, trial


def plant(case: str, copy: Path, rows: list[tuple[str, str]], args: argparse.Namespace) -> dict:
    """Plants ``case`` on ``rows`` of the run copy ``copy``; {(task, method): what was done}."""
    done = {}
    for task, method in rows:
        path = copy / "results" / task / method / "counterfactuals.npz"
        row = load_npz(path)
        inputs = load_npz(copy / "results" / task / args.input_row / "counterfactuals.npz")
        if case == "unedited":
            new, ids = plants.unedited(row, inputs, args.share)
            what = f"{len(ids)} of {int(row['flipped'].sum())} flipped CFs -> the unedited input"
        elif case == "attack":
            attacked = load_npz(copy / "results" / task / args.attack_row / "counterfactuals.npz")
            new, ids = plants.attack(row, attacked, args.share)
            what = f"{len(ids)} of {int(row['flipped'].sum())} flipped CFs -> {args.attack_row}'s"
        else:
            fid, trial = fid_at(copy, task, method, inputs, row)
            sigma, before, after = plants.strength(fid, args.factor)
            trial.unlink(missing_ok=True)
            new = plants.noised(row, inputs, sigma)
            what = f"noise sd {sigma:.3g} grey levels: FID {before:.4g} -> {after:.4g} (x{after / before:.3g})"
        save_npz(path, **new)
        done[(task, method)] = what
    return done


def failing_cells(log: str) -> dict[tuple[str, str], list[str]]:
    """{(task, method): failing metrics} of a regression diff (its markdown rows)."""
    out: dict[tuple[str, str], list[str]] = {}
    for line in log.splitlines():
        if (m := ROW.match(line)) and m.group(4) in FAILED and m.group(3) not in out.get(m.group(1, 2), []):
            out.setdefault(m.group(1, 2), []).append(m.group(3))  # the failing lines come twice (stderr, diff)
    return out


def run_case(case: str, rows: list[tuple[str, str]], args: argparse.Namespace) -> list[dict]:
    """Copies the run, plants ``case``, re-evaluates ``rows``, runs the regression; one outcome per row."""
    copy = Path(args.work) / case
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(args.run, copy, symlinks=True)
    skipped = {r: why for r in rows if case == "attack" and (why := attackable(copy, *r, args))}
    rows = [r for r in rows if r not in skipped]
    done = plant(case, copy, rows, args) if case != "control" else {r: "untouched" for r in rows}
    targets = [f"results/{t}/{m}/metrics.json" for t, m in rows]
    rc_eval = snakemake(copy, args, *targets, "--forcerun", "evaluate", "--allowed-rules", "evaluate")
    if rc_eval:
        raise SystemExit(f"{case}: the evaluate jobs failed (exit {rc_eval}); see {copy / 'plant-snakemake.log'}")
    rc = snakemake(copy, args, "regression", "--forcerun", "report_task", "regression",
                   "--allowed-rules", "report_task", "regression")
    log = (copy / "logs" / "report" / "regression.log").read_text()
    fails = failing_cells(log)
    want = EXPECTED[case]
    out = [{"case": case, "row": f"{t}/{m}", "planted": f"n/a: {why}", "failing": [], "ok": True}
           for (t, m), why in skipped.items()]
    for r in rows:
        cells = fails.get(r, [])
        ok = (not cells) if want is None else (want in cells)
        out.append({"case": case, "row": f"{r[0]}/{r[1]}", "planted": done[r], "failing": cells, "ok": ok})
    stray = sorted(f"{t}/{m}: {', '.join(c)}" for (t, m), c in fails.items() if (t, m) not in rows)
    if stray or (want is None and rc) or (want is not None and not rc):
        out.append({"case": case, "row": "(others)", "planted": "untouched", "failing": stray,
                    "ok": not stray and bool(rc) == (want is not None), "exit": rc})
    return out


def outcome_table(results: list[dict]) -> str:
    lines = ["| case | row | planted | failing cells of the row | as expected |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['case']} | {r['row']} | {r['planted']} | {', '.join(r['failing']) or 'none'} "
                     f"| {'yes' if r['ok'] else '**NO**'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a finished regression run's folder, the workdir (read only)")
    p.add_argument("--work", required=True, help="scratch folder for the planted copies")
    p.add_argument("--configfile", default=str(ROOT / "config/presets/regression.yaml"), help="the run's preset")
    p.add_argument("--rows", nargs="*", default=[], metavar="TASK/METHOD", help="the rows planted")
    p.add_argument("--all-rows", action="store_true", help="every calibrated row of every task of the preset")
    p.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    p.add_argument("--share", type=float, default=plants.SHARE, help="of each row's flipped CFs (unedited, attack)")
    p.add_argument("--factor", type=float, default=plants.FACTOR, help="the realism plant's FID rise")
    p.add_argument("--input-row", default="input", help="the run's row of unedited inputs")
    p.add_argument("--attack-row", default="pixel_attack", help="the run's row of the pixel attack")
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--out", help="also write the outcome table (markdown) here")
    args = p.parse_args(argv)
    from vcebench.config.load import load_config

    work, run = Path(args.work).resolve(), Path(args.run).resolve()
    reference = (ROOT / load_config([ROOT / "config/config.yaml", args.configfile])["reference_dir"]).resolve()
    if any(work == d or d in work.parents or work in d.parents for d in (run, reference)):
        raise SystemExit(f"--work {work} overlaps the run or the reference; choose a scratch folder apart")
    if args.all_rows:
        rows = calibrated_rows(load_config([ROOT / "config/config.yaml", args.configfile]))
    else:
        rows = [tuple(r.split("/", 1)) for r in args.rows] or [("synthfaces_smile", "dime")]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = [o for case in args.cases for o in run_case(case, rows, args)]
    for r in results:
        print(f"{r['case']:9s} {r['row']:34s} {'ok' if r['ok'] else 'NOT AS EXPECTED'}: {r['planted']}; "
              f"failing: {', '.join(r['failing']) or 'nothing'}")
    if args.out:
        write_text(args.out, outcome_table(results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
