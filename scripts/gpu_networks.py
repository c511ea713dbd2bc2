#!/usr/bin/env python3
"""Train the synthetic benchmark's generators at their plateau budgets on one GPU (issue #24), both network
sets at once, and bring back what finished within the lease.

Run by ``scripts/gpu_networks.sh`` on the GPU machine (the package importable, the rendered train / val
splits in ``--data``). The recipes are ``config/config.yaml``'s (``wsd``: each budget of ``PLAN`` is
a run of its own on the shared trunk, ``vcebench/steps/curves.py``), set 2 with ``config/presets/ref2.yaml``'s
seeds. Verbs:

- ``probe``: one graphed faces DDPM alone for a short run; prints its steps per second;
- ``train``: the jobs of ``PLAN``, ``--parallel`` at once in its order (``vcebench models curve --train-only``,
  one process each, ``cuda.train_graphs`` as ``--graphs`` says); writes ``<work>/driver.json`` and returns when
  all ended. On an H200, 8 graphed processes at once ran 12-16 steps/s each, about 110 together (the GPU
  time-shares processes); ``probe`` tells whether one process alone runs faster than that;
- ``pack``: what exists now (it may run while ``train`` goes on) into ``--out``: each finished budget's
  network folder (its snapshot is the same weights: ``unpack`` writes it back), and, for a run not finished,
  its resume state (or the trunk it would resume from), by ``PLAN``'s order, within ``--max-mib``; a tar in
  15 MiB parts and ``progress.json`` (each job's last logged step);
- ``stop``: end the training processes (each resumes from its last checkpoint);
- ``unpack [PARTS] --into DIR`` (here, after the lease): the tar into ``DIR/<set>/<dataset>/<role>/`` and the
  snapshots written back from the network folders, so that ``vcebench models curve --score-only`` scores them
  (without PARTS: only the snapshots, e.g. after ``scripts/training_states.sh restore``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# (set, dataset, task, role, budgets below the recipe's `steps` that the curve needs) in packing priority:
# the faces pair decides the FiRe and DDPM rows, set 1 before set 2 (its curve decides the budget)
PLAN = [
    ("ref1", "synthfaces", "synthfaces_smile", "ddpm", [12800]),
    ("ref1", "synthfaces", "synthfaces_smile", "pmf", [12800]),
    ("ref2", "synthfaces", "synthfaces_smile", "ddpm", [12800]),
    ("ref2", "synthfaces", "synthfaces_smile", "pmf", [12800]),
    ("ref1", "synthxray", "synthxray_pacemaker", "pmf", []),
    ("ref1", "synthxray", "synthxray_pacemaker", "ddpm", [1200, 2400]),
    ("ref2", "synthxray", "synthxray_pacemaker", "pmf", []),
    ("ref2", "synthxray", "synthxray_pacemaker", "ddpm", [2400]),
]
# `--plan ablation`: the faces pmf recipe ablation (scripts/pmf_ablation.sh, docs/networks.md), every arm of set 1,
# then of set 2, each a `vcebench models curve --train-only` run at the recipe's budget
ARMS = ("base", "perceptual", "perceptual_features", "exact_jvp", "wide", "full")
ABLATION = [(s, arm) for s in ("ref1", "ref2") for arm in ARMS]
CLI = [sys.executable, "-c", "import sys; from vcebench.cli import main; sys.exit(main())"]
WEIGHTS = {"ddpm": "unet/diffusion_pytorch_model.safetensors", "pmf": "model.safetensors"}


def job_dir(work: Path, s: str, ds: str, role: str) -> Path:
    return work / s / ds / role


def write_overlay(path: Path, args, extra: str = "") -> Path:
    """The config merged over the recipes: device, threads, CUDA graphs (and ``extra`` YAML)."""
    path.write_text(f"device: {args.device}\nthreads: {args.threads}\ntrain_threads: {args.threads}\n"
                    f"cuda: {{train_graphs: {'true' if args.graphs else 'false'}}}\n{extra}")
    return path


def ablation_env(args, s: str) -> dict[str, str]:
    """The environment of scripts/pmf_ablation.sh for set ``s`` of ``--plan ablation`` under ``--work``."""
    work = Path(args.work)
    return {**os.environ, "SET": s, "OUT": str(work / "ablation"), "DATA": str(args.data),
            "MODELS": str(work / "ablation" / s / "models"), "EXTRA": str(work / "gpu.yaml")}


def jobs(args) -> list[dict]:
    """The plan's jobs in packing priority: name (its log), dir (its curve folder), cmd and env."""
    work = Path(args.work)
    if args.plan == "ablation":
        return [{"name": f"ablation-{s}-{arm}", "dir": work / "ablation" / s / arm,
                 "cmd": ["bash", "scripts/pmf_ablation.sh", arm, "--train-only"], "env": ablation_env(args, s)}
                for s, arm in ABLATION]
    out = []
    for s, ds, task, role, at in PLAN:
        sets = ["--config", "config/presets/ref2.yaml"] if s == "ref2" else []
        cmd = [*CLI, "models", "curve", "--task", task, "--role", role, *(["--at", *map(str, at)] if at else []),
               "--train-only",
               "--data", str(Path(args.data) / ds), "--config", "config/config.yaml", *sets,
               "--config", str(work / "gpu.yaml"),
               *(c for extra in args.config for c in ("--config", extra)),
               "--out", str(job_dir(work, s, ds, role))]
        out.append({"name": f"{s}-{ds}-{role}", "dir": job_dir(work, s, ds, role), "cmd": cmd, "env": None})
    return out


def train(args) -> int:
    work = Path(args.work)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    write_overlay(work / "gpu.yaml", args)
    if args.plan == "ablation":  # the networks the gate and the losses use, installed from networks/<set>
        for s in sorted({s for s, _ in ABLATION}):
            with (work / "logs" / f"ablation-{s}-prepare.log").open("w") as log:
                subprocess.run(["bash", "scripts/pmf_ablation.sh", "prepare"], env=ablation_env(args, s),
                               stdout=log, stderr=subprocess.STDOUT, check=True)
    procs, rcs, queue = {}, {}, jobs(args)
    started = time.time()
    while queue or procs:  # at most --parallel jobs at once, in the plan's order
        while queue and len(procs) < args.parallel:
            job = queue.pop(0)
            log = (work / "logs" / f"{job['name']}.log").open("w")
            procs[job["name"]] = subprocess.Popen(job["cmd"], stdout=log, stderr=subprocess.STDOUT, env=job["env"])
            (work / "driver.json").write_text(json.dumps({
                "started": started, "graphs": args.graphs, "parallel": args.parallel,
                "pids": {k: p.pid for k, p in procs.items()}}))
        for k, p in list(procs.items()):
            if p.poll() is not None:
                rcs[k] = p.returncode
                del procs[k]
        time.sleep(1)
    (work / "done.json").write_text(json.dumps({"ended": time.time(), "rc": rcs}))
    return 0 if not any(rcs.values()) else 1


def probe(args) -> int:
    """One graphed faces DDPM alone for ``--probe-steps`` steps: its steps per second (printed), to choose
    how many jobs share the GPU (several processes time-share one GPU)."""
    work = Path(args.work) / "probe"
    work.mkdir(parents=True, exist_ok=True)
    # the evaluation after the first run falls between the two snapshots: keep it negligible
    overlay = write_overlay(work / "gpu.yaml", args,
                            "models: {synthfaces: {ddpm: {n_samples: 4, sample_steps: 2, eval_images: 16}}}\n")
    n = args.probe_steps
    cmd = [*CLI, "models", "curve", "--task", "synthfaces_smile", "--role", "ddpm", "--steps", str(n),
           "--at", str(n // 4), "--train-only", "--data", str(Path(args.data) / "synthfaces"),
           "--config", "config/config.yaml", "--config", str(overlay),
           *(c for extra in args.config for c in ("--config", extra)), "--out", str(work / "run")]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    a, b = (work / "run" / f"train-{m:06d}" / "snapshots" / f"step-{m:06d}.safetensors" for m in (n // 4, n))
    # wsd: the n // 4 budget is its own run, then the n run continues its trunk: the n run's steps after the
    # trunk over the time between the two snapshots
    from vcebench.models.training.generative import decay_start

    rate = (n - decay_start(n // 4, 0.2)) / max(b.stat().st_mtime - a.stat().st_mtime, 1e-3)
    print(f"{rate:.1f}")
    return 0


def last_step(log: Path) -> int | None:
    """The last step a training log's progress bar printed (tqdm: 'train ddpm:  41%|...| 10496/25600')."""
    if not log.exists():
        return None
    found = re.findall(r"(\d+)/(\d+) \[", log.read_text(errors="replace")[-4000:])
    return int(found[-1][0]) if found else None


def pack(args) -> int:
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen: list[Path] = []
    total = 0
    budget = args.max_mib * 1024 * 1024
    progress = {}

    def add(paths: list[Path]) -> bool:
        nonlocal total
        size = sum(p.stat().st_size for p in paths)
        if total + size > budget:
            return False
        chosen.extend(paths)
        total += size
        return True

    pending = []
    for job in jobs(args):
        d, name = job["dir"], job["name"]
        done = sorted(p.parent for p in d.glob("train-*/metrics.json"))
        for run in done:  # finished budgets: the network folder, less its snapshot (the same weights)
            files = [f for f in sorted(run.rglob("*")) if f.is_file() and "snapshots" not in f.parts
                     and "checkpoint" not in f.parts and not f.name.endswith(".tmp")]
            if not add(files):
                print(f"[pack] no room for {run}", flush=True)
        progress[name] = {"finished": [r.name for r in done],
                          "last_logged_step": last_step(work / "logs" / f"{name}.log")}
        log = work / "logs" / f"{name}.log"
        if log.exists() and '"trained":' in log.read_text(errors="replace"):
            continue  # every budget of the job finished: nothing to resume
        unfinished = [p for p in sorted(d.glob("train-*/checkpoint/state.pt")) if p.is_file()]
        pending.append(unfinished[-1:] or sorted(d.glob("trunk/*/step-*.pt"))[-1:])
    for states in pending:  # then what a run not finished resumes from, in PLAN's order
        if states and not add(states):
            print(f"[pack] no room for {states[0]}", flush=True)
    tar_path = work / "pack.tar"
    with tarfile.open(tar_path, "w") as tar:
        for f in chosen:
            tar.add(f, arcname=str(f.relative_to(work)))
    data = tar_path.read_bytes()
    for old in out.glob("networks.tar.part*"):
        old.unlink()
    step = 15 * 1024 * 1024
    parts = []
    for i in range(0, len(data), step):
        p = out / f"networks.tar.part{i // step:02d}"
        p.write_bytes(data[i:i + step])
        parts.append(p.name)
    info = {"packed_at": time.time(), "files": len(chosen), "mib": round(total / 2**20, 1), "parts": parts,
            "progress": progress}
    for name in ("driver.json", "done.json"):
        if (work / name).exists():
            info[name] = json.loads((work / name).read_text())
    (out / "progress.json").write_text(json.dumps(info, indent=1))
    with tarfile.open(out / "logs.tgz", "w:gz") as tar:
        tar.add(work / "logs", arcname="logs")
    print(json.dumps({k: v for k, v in info.items() if k != "driver.json"}, indent=1), flush=True)
    return 0


def stop(args) -> int:
    driver = Path(args.work) / "driver.json"
    if not driver.exists():
        return 0
    for name, pid in json.loads(driver.read_text())["pids"].items():
        try:
            os.kill(pid, signal.SIGTERM)
            print(f"[stop] {name} (pid {pid})", flush=True)
        except ProcessLookupError:
            pass
    time.sleep(3)
    return 0


def unpack(args) -> int:
    """The parts into ``--into``, and each budget's snapshot written back from its network's weights."""
    from safetensors.torch import load_file

    from vcebench.models.checkpoints import save_snapshot
    from vcebench.models.training.generative import snapshot_path

    into = Path(args.into)
    if args.parts:
        data = b"".join(Path(p).read_bytes() for p in sorted(args.parts))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(into, filter="data")
    for run in sorted(into.glob("*/*/*/train-*")):  # <set>/<dataset>/<role> and ablation/<set>/<arm>: pmf runs
        role, step = (run.parent.name if run.parts[-4] != "ablation" else "pmf"), int(run.name.split("-")[1])
        weights = run / WEIGHTS[role]
        if weights.exists() and not snapshot_path(run, step).exists():
            save_snapshot(snapshot_path(run, step), load_file(str(weights)), step)
            print(f"[unpack] {snapshot_path(run, step)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("verb", choices=["probe", "train", "pack", "stop", "unpack"])
    ap.add_argument("parts", nargs="*", help="unpack: the networks.tar.part* files")
    ap.add_argument("--data", default=".gpu/data", help="rendered splits: <data>/<dataset>/{train,val}.npz")
    ap.add_argument("--work", default="/tmp/gpunets")
    ap.add_argument("--out", default=os.environ.get("OUT", "runs/gpu-networks"))
    ap.add_argument("--into", default="runs/gpu-networks")
    ap.add_argument("--graphs", type=int, default=1, help="cuda.train_graphs (1: replay CUDA graphs)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads per job (8 jobs, 16 cores)")
    ap.add_argument("--parallel", type=int, default=len(PLAN), help="train: jobs at once (default: all)")
    ap.add_argument("--probe-steps", type=int, default=2000, help="probe: steps of the one-process run")
    ap.add_argument("--device", default="cuda", help="cuda; cpu to try the script here")
    ap.add_argument("--config", action="append", default=[], help="train: a config merged last (a trial's steps)")
    ap.add_argument("--max-mib", type=float, default=58.0, help="pack at most this much")
    ap.add_argument("--plan", choices=["plateau", "ablation"], default="plateau",
                    help="train / pack: the generators' plateau runs (PLAN) or the pmf recipe ablation (ABLATION)")
    args = ap.parse_args()
    return {"probe": probe, "train": train, "pack": pack, "stop": stop, "unpack": unpack}[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
