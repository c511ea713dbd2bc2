#!/usr/bin/env python3
"""Train the synthetic benchmark's generators (ddpm and pmf of synthfaces and synthxray, two seed sets) on
one GPU, each with the EMA snapshots of its training curve, within a wall-clock budget.

Run by ``scripts/gpu_networks.sh`` on a GPU machine (the package's dependencies importable, the rendered
train / val splits in ``--data``). Steps:

1. smoke: every job trains 64 steps with snapshots at 32 and 64, all at once, on the GPU; the time between
   the two snapshots is each job's step rate under the same load as the real run;
2. budget: each recipe (dataset, role) gets the largest step count of ``LADDER`` that its slower seed set
   finishes within ``--budget`` seconds at that rate (a generator's own budget: equal seconds, not equal
   steps), the same for both sets (same recipe, other seeds);
3. training: ``vcebench models curve --train-only`` per job, snapshots at N / 2^k (k = 0..5), all at once;
4. packing into ``--out``: per set a tar (split into 15 MiB parts) with each run's folder; set 1 keeps its
   snapshots (fp16 except none: the final weights are the run's own output), set 2 only the final networks.

The snapshots are scored later on a CPU (the same command without ``--train-only``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

JOBS = [  # (dataset, task, role, seed of set 1 = config.yaml's)
    ("synthfaces", "synthfaces_smile", "ddpm", 71),
    ("synthfaces", "synthfaces_smile", "pmf", 81),
    ("synthxray", "synthxray_pacemaker", "ddpm", 72),
    ("synthxray", "synthxray_pacemaker", "pmf", 82),
]
SETS = {"set1": 0, "set2": 100}  # seed offset of each network set
LADDER = (800, 1200, 1600, 2400, 3200, 4800, 6400, 9600, 12800, 19200, 25600, 38400)
CLI = [sys.executable, "-c", "import sys; from vcebench.cli import main; sys.exit(main())"]


DEVICE, THREADS = "cuda", 2


def overlay(path: Path, ds: str, role: str, seed: int, extra: dict | None = None) -> Path:
    import yaml

    cfg = {"device": DEVICE, "threads": THREADS, "train_threads": THREADS,
           "models": {ds: {role: {"seed": seed, **(extra or {})}}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def launch(args, work: Path, name: str, ds: str, task: str, role: str, seed: int, steps: int, at: list[int],
           extra: dict | None = None) -> tuple[subprocess.Popen, Path, Path]:
    out = work / name
    cfg = overlay(work / "cfg" / f"{name.replace('/', '-')}.yaml", ds, role, seed, extra)
    log = work / "logs" / f"{name.replace('/', '-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [*CLI, "models", "curve", "--task", task, "--role", role, "--steps", str(steps), "--at", *map(str, at),
           "--data", str(Path(args.data) / ds), "--out", str(out), "--train-only",
           "--config", "config/config.yaml", "--config", str(cfg)]
    p = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    return p, out, log


def wait_all(procs: dict, deadline: float) -> dict[str, int]:
    rcs = {}
    for name, (p, _, log) in procs.items():
        try:
            rcs[name] = p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs[name] = -9
        if rcs[name] != 0:
            print(f"[{name}] rc {rcs[name]}; log tail:\n" + "".join(log.read_text().splitlines(True)[-15:]),
                  flush=True)
    return rcs


def to_fp16(path: Path) -> None:
    from safetensors.torch import load_file, safe_open, save_file

    with safe_open(str(path), "pt") as f:
        meta = dict(f.metadata() or {})
    w = {k: (v.half() if v.is_floating_point() else v) for k, v in load_file(str(path)).items()}
    save_file(w, str(path), metadata={**meta, "dtype": "float16 (transfer copy of a float32 snapshot)"})


def pack(work: Path, out: Path, set_name: str, keep_snapshots: bool, part_mib: int = 15) -> list[str]:
    tar_path = work / f"{set_name}.tar"
    with tarfile.open(tar_path, "w") as tar:
        for d in sorted((work / set_name).glob("*/*/train")):
            for f in sorted(d.rglob("*")):
                if not f.is_file() or "checkpoint" in f.parts:
                    continue
                if "snapshots" in f.parts:
                    if not keep_snapshots:
                        continue
                    to_fp16(f)
                tar.add(f, arcname=str(f.relative_to(work)))
    data, parts = tar_path.read_bytes(), []
    step = part_mib * 1024 * 1024
    for i in range(0, len(data), step):
        p = out / f"{set_name}.tar.part{i // step:02d}"
        p.write_bytes(data[i:i + step])
        parts.append(p.name)
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=".gpu/data", help="rendered splits: <data>/<dataset>/{train,val}.npz")
    ap.add_argument("--out", default=os.environ.get("OUT", "runs/gpu-networks"))
    ap.add_argument("--work", default="/tmp/gpunets")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds of training per job (default 300)")
    ap.add_argument("--smoke-steps", type=int, default=64)
    ap.add_argument("--ladder", type=int, nargs="+", default=list(LADDER), help="step counts to choose from")
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu to try the script on a laptop")
    ap.add_argument("--threads", type=int, default=2, help="torch threads per job (default 2: 8 jobs, 16 cores)")
    ap.add_argument("--only", nargs="+", default=None, metavar="DATASET/ROLE", help="a subset of the jobs")
    args = ap.parse_args()
    global DEVICE, THREADS, JOBS
    DEVICE, THREADS = args.device, args.threads
    if args.only:
        JOBS = [j for j in JOBS if f"{j[0]}/{j[2]}" in args.only]
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"budget_s": args.budget, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t0 = time.time()

    # 1. smoke + rate
    procs = {}
    k = args.smoke_steps
    for s, off in SETS.items():
        for ds, task, role, seed in JOBS:
            name = f"smoke/{s}/{ds}/{role}"
            procs[name] = launch(args, work, name, ds, task, role, seed + off, k, [k // 2, k],
                                 {"n_samples": 8, "eval_images": 32, "checkpoint_every": 100000})
    rcs = wait_all(procs, time.time() + 150)
    summary["smoke_seconds"] = round(time.time() - t0, 1)
    if any(rcs.values()):
        summary["smoke_failed"] = rcs
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        return 2
    rates = {}
    for name, (_, d, _) in procs.items():
        snap = d / "train" / "snapshots"
        a, b = ((snap / f"step-{n:06d}.safetensors").stat().st_mtime for n in (k // 2, k))
        rates[name] = (k - k // 2) / max(b - a, 1e-3)
    summary["smoke_steps_per_second"] = {n: round(r, 2) for n, r in rates.items()}
    print(json.dumps(summary, indent=1), flush=True)

    # 2. budgets
    steps = {}
    for ds, _, role, _ in JOBS:
        r = min(rates[f"smoke/{s}/{ds}/{role}"] for s in SETS)
        fit = [n for n in args.ladder if n / r <= args.budget]
        steps[(ds, role)] = fit[-1] if fit else args.ladder[0]
    summary["steps"] = {f"{ds}/{role}": n for (ds, role), n in steps.items()}
    print("steps:", summary["steps"], flush=True)

    # 3. training
    t1 = time.time()
    procs = {}
    for s, off in SETS.items():
        for ds, task, role, seed in JOBS:
            n = steps[(ds, role)]
            at = [n >> j for j in range(5, -1, -1)]
            procs[f"{s}/{ds}/{role}"] = launch(args, work, f"{s}/{ds}/{role}", ds, task, role, seed + off, n, at)
    rcs = wait_all(procs, t1 + args.budget * 1.1 + 30)
    summary["train_rc"] = rcs
    summary["train_wall_s"] = round(time.time() - t1, 1)
    for name, (_, d, _) in procs.items():
        m = d / "train" / "metrics.json"
        if m.exists():
            tr = json.loads(m.read_text()).get("training", {})
            summary.setdefault("runs", {})[name] = {k2: tr.get(k2) for k2 in (
                "steps", "batch_size", "train_seconds", "images_per_second", "loss_last", "peak_gpu_memory_mib",
                "amp", "device")}
        summary.setdefault("snapshots", {})[name] = sorted(p.name for p in (d / "train" / "snapshots").glob("*"))

    # 4. pack
    summary["files"] = pack(work, out, "set1", True) + pack(work, out, "set2", False)
    summary["total_s"] = round(time.time() - t0, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    with tarfile.open(out / "logs.tgz", "w:gz") as tar:
        tar.add(work / "logs", arcname="logs")
    print(json.dumps({k2: v for k2, v in summary.items() if k2 != "snapshots"}, indent=1), flush=True)
    return 0 if not any(rcs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
