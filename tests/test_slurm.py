"""profiles/slurm on a real (one-node, localhost) SLURM cluster started from Debian's packages.

The cluster (munged + slurmctld + slurmd, everything under one temporary directory) is started
once per module by tests/slurm_cluster.py and torn down afterwards. Tests skip, quoting the
daemons' log lines, when the packages are missing or the daemons cannot run here.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import ClusterUnavailable, SlurmCluster, missing_binaries, start_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "slurm"
BIN = Path(sys.executable).parent  # the venv's bin: snakemake, vcebench
# Test-only executor overrides: poll squeue (the test cluster has no slurmdbd, so sacct cannot
# answer) and start polling after 1 s instead of the profile's 40 s.
FAST_POLL = ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1"]


def _skip_reason() -> str | None:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm not installed (pip install -e '.[slurm]')"
    if not (BIN / "snakemake").exists():
        return f"snakemake not found next to {sys.executable}"
    missing = missing_binaries()
    if missing:
        return f"SLURM/munge not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)"
    return None


@pytest.fixture(scope="module")
def slurm() -> SlurmCluster:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        # 2 CPUs like this machine; 64 GB declared (SlurmdParameters=config_overrides) so the profile's
        # cluster-sized mem_mb requests (16 GB for explain_shard / evaluate) fit side by side.
        cluster = start_cluster(cpus=2, mem_mb=64000)
    except ClusterUnavailable as e:
        pytest.skip(f"one-node SLURM cluster cannot run on this machine: {e}")
    yield cluster
    cluster.stop()


def _snakemake(
    cluster: SlurmCluster, args: list[str], cwd: Path, timeout: float, expect_ok: bool = True
) -> subprocess.CompletedProcess:
    """Run snakemake with profiles/slurm against the test cluster; fail with both logs on error."""
    env = dict(cluster.env)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # jobs run `vcebench` (sbatch --export=ALL)
    env.setdefault("VCEBENCH_THREADS", "1")
    cmd = [str(BIN / "snakemake"), "--profile", str(PROFILE), *FAST_POLL, *args]
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(
            f"snakemake --profile profiles/slurm did not finish in {timeout:.0f} s\n"
            f"squeue: {cluster.run('squeue', '--states=all', check=False).stdout}\n"
            f"{out[-4000:]}\n{cluster.diagnostics()}"
        )
    if expect_ok and r.returncode != 0:
        pytest.fail(
            f"snakemake --profile profiles/slurm failed (rc={r.returncode}):\n{r.stderr[-6000:]}\n"
            f"{_job_log_tails(cwd, args)}\n{cluster.diagnostics()}"
        )
    return r


def _job_log_tails(cwd: Path, args: list[str], n: int = 12) -> str:
    """The end of each failed job's SLURM log (the error of the snakemake that ran inside the job)."""
    logdir = Path(args[args.index("--slurm-logdir") + 1]) if "--slurm-logdir" in args else cwd / ".snakemake"
    out = []
    for log in sorted(logdir.rglob("*.log"))[:4] if logdir.is_dir() else []:
        lines = log.read_text(errors="replace").splitlines()
        errors = [i for i, line in enumerate(lines) if "Error" in line or "Traceback" in line]
        start = max(0, errors[0] - 2) if errors else max(0, len(lines) - n)
        out.append(f"--- SLURM job log {log}:\n" + "\n".join(lines[start:start + n]))
    return "\n".join(out)


# Two independent jobs that run side by side on the node's 2 CPUs, named like workflow rules so the
# profile's per-rule set-resources apply: one records what SLURM granted it, one fails on purpose.
# (One snakemake run for both: the executor's status polling backs off 1 s, 11 s, 21 s, ... so
# every extra round of jobs costs ~30 s.)
_SNAKEFILE = textwrap.dedent(
    """
    rule all:
        input: "merge.txt", "never.txt"

    rule merge_counterfactuals:
        output: "merge.txt"
        threads: 1
        resources: mem_mb=100, runtime=1
        shell:
            "echo job=$SLURM_JOB_ID granted=$(squeue -h -j $SLURM_JOB_ID -o %m,%l,%C) "
            "vcebench=$(command -v vcebench) > {output}"

    rule regression:
        output: "never.txt"
        threads: 1
        shell: "echo failing on purpose in job $SLURM_JOB_ID >&2; exit 3"
    """
)


def test_profile_runs_jobs_through_sbatch(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Each rule becomes a SLURM job with the profile's per-rule resources; a failing job fails the run."""
    (tmp_path / "Snakefile").write_text(_SNAKEFILE)
    t0 = time.monotonic()
    args = ["--retries", "0", "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path)]
    r = _snakemake(slurm, args, cwd=tmp_path, timeout=150, expect_ok=False)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0, "a failed SLURM job must fail the snakemake run"
    assert not (tmp_path / "never.txt").exists()
    err = r.stderr
    assert "SLURM-job" in err and "'FAILED'" in err and "failing on purpose" in err, err[-3000:]
    # keep-going (profile): the independent job finished, with the profile's set-resources, not
    # the rule's own mem_mb=100 / runtime=1
    assert (tmp_path / "merge.txt").exists(), f"{r.stderr[-4000:]}\n{slurm.diagnostics()}"
    merge = dict(item.split("=", 1) for item in (tmp_path / "merge.txt").read_text().split())
    assert merge["job"].isdigit(), merge
    assert merge["granted"] == "4000M,15:00,1", merge  # memory, time limit, CPUs
    assert Path(merge["vcebench"]).parent == BIN  # the venv reached the job through --export=ALL
    lines = slurm.run("squeue", "--states=all", "-h", "-o", "%i %T").stdout.splitlines()
    states = dict(line.split() for line in lines if line.strip())
    assert states.get(merge["job"]) == "COMPLETED", states
    assert sorted(states.values()) == ["COMPLETED", "FAILED"], states
    print(f"two SLURM jobs through profiles/slurm in {elapsed:.1f} s")


def test_cluster_teardown_leaves_no_process() -> None:
    """stop() ends the daemons and any job still running, and removes the state directory."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        cluster = start_cluster(cpus=1, mem_mb=2000)
    except ClusterUnavailable as e:
        pytest.skip(f"one-node SLURM cluster cannot run on this machine: {e}")
    try:
        job = cluster.run("sbatch", "--parsable", "--mem", "100", "-o", "/dev/null", "--wrap", "sleep 300")
        job = job.stdout.strip()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING":
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"job {job} never started\n{cluster.diagnostics()}")
        pids = [p.pid for p in cluster.procs.values()]
    finally:
        cluster.stop()
    assert all(p.poll() is not None for p in cluster.procs.values())
    assert not cluster.root.exists()
    deadline = time.monotonic() + 10
    while cluster.stray_pids() and time.monotonic() < deadline:  # zombies are reaped by init
        time.sleep(0.2)
    assert cluster.stray_pids() == []
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_daemon_failure_is_reported_with_its_log_and_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that dies at start-up gives ClusterUnavailable quoting its output; the others are stopped."""
    import slurm_cluster

    if missing_binaries():
        pytest.skip(f"SLURM/munge not installed: {', '.join(missing_binaries())}")
    fake = tmp_path / "slurmd"
    fake.write_text("#!/bin/sh\necho 'slurmd: fatal: pretend cgroup failure' >&2\nexit 1\n")
    fake.chmod(0o755)
    real = slurm_cluster.find_binary
    monkeypatch.setattr(slurm_cluster, "find_binary", lambda n: str(fake) if n == "slurmd" else real(n))
    with pytest.raises(ClusterUnavailable) as info:
        start_cluster(timeout=20)
    msg = str(info.value)
    assert "slurmd exited with rc=1" in msg and "pretend cgroup failure" in msg, msg
    root = Path(msg.split("--- munged", 1)[1].split(", ", 1)[1].split("/log/", 1)[0])
    assert not root.exists()  # state directory removed
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _mentions(p, str(root))]


def _mentions(proc: Path, marker: str) -> bool:
    try:
        return marker.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def _quick_args(workdir: Path) -> list[str]:
    """The real Snakefile with the quick preset, writing into ``workdir`` (not the checkout's runs/quick).

    Needs the Snakefile's ``configfile:`` and ``workdir:`` to be absolute (workflow.basedir): each
    SLURM job reruns snakemake from inside the workdir, where relative ones do not resolve.
    """
    return ["--slurm-logdir", str(workdir / "slurm_logs"),
            "--config", f"workdir={workdir}", "--configfile", str(ROOT / "config/presets/quick.yaml")]


@pytest.mark.slow
def test_quick_preset_render_through_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The real Snakefile: one synthetic dataset of the quick preset rendered by a SLURM job."""
    target = "resources/data/synthxray/train.npz"
    _snakemake(slurm, [target, *_quick_args(tmp_path)], cwd=ROOT, timeout=600)
    assert (tmp_path / target).stat().st_size > 0


@pytest.mark.slow
def test_quick_preset_through_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The whole quick preset (all synthetic tasks, all methods) through profiles/slurm."""
    _snakemake(slurm, _quick_args(tmp_path), cwd=ROOT, timeout=3600)
    import yaml

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    quick = yaml.safe_load((ROOT / "config/presets/quick.yaml").read_text())
    tasks = quick.get("run_tasks", cfg["run_tasks"])
    methods = quick.get("methods", cfg["methods"])
    for task in tasks:
        csv = (tmp_path / "results" / f"{task}.csv").read_text()
        for method in methods:
            assert method in csv, (task, method, csv)
