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
        cluster = start_cluster(cpus=2)
    except ClusterUnavailable as e:
        pytest.skip(f"one-node SLURM cluster cannot run on this machine: {e}")
    yield cluster
    cluster.stop()


def _snakemake(cluster: SlurmCluster, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
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
    if r.returncode != 0:
        pytest.fail(
            f"snakemake --profile profiles/slurm failed (rc={r.returncode}):\n{r.stderr[-6000:]}\n"
            f"{cluster.diagnostics()}"
        )
    return r


# Two independent jobs (they run side by side on the node's 2 CPUs) named like workflow rules, so
# the profile's per-rule set-resources apply. Each job records what SLURM granted it.
_SNAKEFILE = textwrap.dedent(
    """
    rule all:
        input: "merge.txt", "report.txt"

    rule merge_counterfactuals:
        output: "merge.txt"
        threads: 1
        resources: mem_mb=100, runtime=1
        shell: "{RECORD}"

    rule report_task:
        output: "report.txt"
        threads: 1
        shell: "{RECORD}"
    """
).replace(
    "{RECORD}",
    "echo job=$SLURM_JOB_ID mem=$SLURM_MEM_PER_NODE cpus=$SLURM_CPUS_PER_TASK "
    "limit=$(squeue -h -j $SLURM_JOB_ID -o %l) vcebench=$(command -v vcebench) > {output}",
)


def _record(path: Path) -> dict[str, str]:
    return dict(item.split("=", 1) for item in path.read_text().split())


def test_profile_runs_jobs_through_sbatch(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Every rule becomes a SLURM job carrying the profile's per-rule memory / runtime and the rule's threads."""
    (tmp_path / "Snakefile").write_text(_SNAKEFILE)
    t0 = time.monotonic()
    _snakemake(slurm, ["--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path)],
               cwd=tmp_path, timeout=150)
    elapsed = time.monotonic() - t0
    merge, report = _record(tmp_path / "merge.txt"), _record(tmp_path / "report.txt")
    assert merge["job"].isdigit() and report["job"].isdigit(), (merge, report)
    assert merge["job"] != report["job"]
    # profile set-resources win over the rule's own resources (mem_mb=100, runtime=1)
    assert (merge["mem"], merge["limit"], merge["cpus"]) == ("4000", "15:00", "1"), merge
    assert (report["mem"], report["limit"], report["cpus"]) == ("2000", "15:00", "1"), report
    assert Path(merge["vcebench"]).parent == BIN  # the venv reached the job through --export=ALL
    states = slurm.run("squeue", "--states=all", "-h", "-o", "%i %T").stdout.split("\n")
    finished = {line.split()[0]: line.split()[1] for line in states if line.strip()}
    assert finished.get(merge["job"]) == "COMPLETED" and finished.get(report["job"]) == "COMPLETED", finished
    print(f"two SLURM jobs through profiles/slurm in {elapsed:.1f} s")


def test_failed_job_fails_the_run_with_its_log(slurm: SlurmCluster, tmp_path: Path) -> None:
    """A job exiting non-zero is reported as failed (after the profile's retry), not as success."""
    (tmp_path / "Snakefile").write_text(textwrap.dedent(
        """
        rule regression:
            output: "never.txt"
            threads: 1
            shell: "echo failing on purpose attempt {resources.mem_mb} >&2; exit 3"
        """
    ))
    env = dict(slurm.env, PATH=f"{BIN}{os.pathsep}{slurm.env.get('PATH', '')}")
    r = subprocess.run(
        [str(BIN / "snakemake"), "--profile", str(PROFILE), *FAST_POLL, "--retries", "0",
         "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150,
    )
    assert r.returncode != 0, r.stderr[-3000:]
    assert not (tmp_path / "never.txt").exists()
    assert "SLURM-job" in r.stderr and "FAILED" in r.stderr, r.stderr[-3000:]


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
        job = cluster.run("sbatch", "--parsable", "--mem", "100", "-o", "/dev/null", "--wrap", "sleep 300").stdout
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if cluster.run("squeue", "-h", "-j", job.strip(), "-o", "%T").stdout.strip() == "RUNNING":
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


def _render_implemented() -> bool:
    r = subprocess.run([str(BIN / "vcebench"), "data", "--help"], capture_output=True, text=True)
    return r.returncode == 0 and "render" in r.stdout


@pytest.mark.slow
def test_quick_preset_render_through_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The real Snakefile: one synthetic dataset of the quick preset rendered by a SLURM job."""
    if not _render_implemented():
        pytest.skip("`vcebench data render` is not implemented yet")
    target = "resources/data/synthxray/train.npz"
    _snakemake(slurm, ["--configfile", str(ROOT / "config/presets/quick.yaml"),
                       "--config", f"workdir={tmp_path}", "--directory", str(ROOT), target],
               cwd=ROOT, timeout=600)
    assert (tmp_path / target).stat().st_size > 0


@pytest.mark.slow
def test_quick_preset_through_slurm(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The whole quick preset (all synthetic tasks, all methods) through profiles/slurm."""
    if not _render_implemented():
        pytest.skip("`vcebench data render` is not implemented yet")
    _snakemake(slurm, ["--configfile", str(ROOT / "config/presets/quick.yaml"),
                       "--config", f"workdir={tmp_path}", "--directory", str(ROOT)],
               cwd=ROOT, timeout=3600)
    import yaml

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    quick = yaml.safe_load((ROOT / "config/presets/quick.yaml").read_text())
    tasks = quick.get("run_tasks", cfg["run_tasks"])
    methods = quick.get("methods", cfg["methods"])
    for task in tasks:
        csv = (tmp_path / "results" / f"{task}.csv").read_text()
        for method in methods:
            assert method in csv, (task, method, csv)
