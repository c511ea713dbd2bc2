"""Start and stop a throwaway one-node SLURM cluster on localhost (for tests/test_slurm.py).

Uses Debian's packages (``munge``, ``slurmctld``, ``slurmd``, ``slurm-client``): ``munged`` with a
freshly generated key and its own socket, ``slurmctld`` + ``slurmd`` in the foreground with a
minimal ``slurm.conf``, free TCP ports and every state/spool/log file under one temporary
directory, so nothing touches /etc, /run or /var and nothing collides with a real cluster.

    cluster = start_cluster()            # raises ClusterUnavailable(reason) if it cannot run here
    try:
        subprocess.run(["sbatch", ...], env=cluster.env)
    finally:
        cluster.stop()                   # cancels jobs, stops the daemons, removes the directory

The configuration keys are those of slurm.conf(5) for Slurm 22.05 (Debian 12); the node is
described with ``SlurmdParameters=config_overrides`` so a CPU / memory mismatch never drains it.
"""

from __future__ import annotations

import atexit
import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")
_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


class ClusterUnavailable(RuntimeError):
    """The one-node cluster cannot run on this machine; the message says why (daemon log lines)."""


def find_binary(name: str) -> str | None:
    """Path of a SLURM/munge binary: PATH first, then the sbin directories Debian installs into."""
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def missing_binaries() -> list[str]:
    """Names of the daemons / client commands that are not installed."""
    return [n for n in DAEMONS + CLIENTS if find_binary(n) is None]


def _free_ports(n: int) -> list[int]:
    """n distinct TCP ports that were free on 127.0.0.1 a moment ago (held open until all are picked)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(lines[-n:]) if lines else f"(empty log {path})"


def _mem_total_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8000


@dataclass
class SlurmCluster:
    """A running one-node cluster; ``env`` is what client commands (and snakemake) need."""

    root: Path
    conf: Path
    node: str
    env: dict[str, str]
    logs: dict[str, Path]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    keep_root: bool = False

    def run(self, *cmd: str, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
        """Run a client command (sinfo, squeue, ...) against this cluster."""
        return subprocess.run(
            list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def node_state(self) -> str:
        """The node's state as ``sinfo`` prints it (``idle``, ``down*``, ...), '' if unreachable."""
        try:
            r = self.run("sinfo", "-h", "-N", "-o", "%N %T", timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return ""
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == self.node:
                return parts[1]
        return ""

    def diagnostics(self, n: int = 15) -> str:
        """Last log lines of every daemon (quoted in skip reasons and failure messages)."""
        out = []
        for name, log in self.logs.items():
            proc = self.procs.get(name)
            rc = None if proc is None else proc.poll()
            status = "not started" if proc is None else ("running" if rc is None else f"exited rc={rc}")
            out.append(f"--- {name} ({status}), {log}:\n{_tail(log, n)}")
            console = log.with_suffix(".stdout")
            if console != log and console.exists() and console.stat().st_size:
                out.append(f"--- {name} console:\n{_tail(console, n)}")
        return "\n".join(out)

    def job_ids(self) -> list[str]:
        try:
            r = self.run("squeue", "-h", "-o", "%i", timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return []
        return [j for j in r.stdout.split() if j]

    def stop(self, timeout: float = 20.0) -> None:
        """Cancel every job, stop slurmd, slurmctld and munged (TERM, then KILL) and remove the root.

        Job processes (slurmstepd and its children) are ended by slurmd on scancel; any that
        survive are found by their SLURM_CONF environment and killed by pid.
        """
        running = [n for n in ("slurmd", "slurmctld") if n in self.procs and self.procs[n].poll() is None]
        if len(running) == 2:
            try:
                if self.job_ids():
                    self.run("scancel", "--full", "--user", getpass.getuser(), timeout=10, check=False)
                    deadline = time.monotonic() + 10
                    while self.job_ids() and time.monotonic() < deadline:
                        time.sleep(0.5)
            except (subprocess.TimeoutExpired, OSError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for pid in self.stray_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not self.keep_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def stray_pids(self) -> list[int]:
        """Pids of processes that still refer to this cluster (command line or SLURM_CONF in environ)."""
        marker = str(self.root).encode()
        own = os.getpid()
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == own:
                continue
            try:
                blob = (d / "cmdline").read_bytes() + b"\0" + (d / "environ").read_bytes()
            except OSError:
                continue
            if marker in blob:
                pids.append(int(d.name))
        return pids


def _write_conf(root: Path, node: str, cpus: int, mem_mb: int, ports: list[int], user: str) -> Path:
    conf = root / "slurm.conf"
    lines = [
        "# one-node test cluster written by tests/slurm_cluster.py",
        "ClusterName=vcebenchtest",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/builtin",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SlurmdParameters=config_overrides",
        # Finished jobs stay visible to squeue for 10 minutes: the executor plugin's squeue status
        # query needs MinJobAge >= 3 x its first status-check delay.
        "MinJobAge=600",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MailProg=/bin/true",
        f"PlugStackConfig={root / 'plugstack.conf'}",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf.write_text("\n".join(lines) + "\n")
    (root / "plugstack.conf").write_text("")
    return conf


def _write_shims(root: Path, conf: Path) -> Path:
    """root/bin with one wrapper per client command that pins SLURM_CONF to this cluster.

    snakemake-executor-plugin-slurm-jobstep (0.6.1) drops every SLURM_* variable but the job id
    before its inner ``srun``, SLURM_CONF included; a cluster found only through SLURM_CONF (like
    this one: nothing under /etc) would then be unreachable from inside a job. Real clusters keep
    slurm.conf at /etc/slurm or run configless, where this does not arise.
    """
    bindir = root / "bin"
    bindir.mkdir(exist_ok=True)
    for name in CLIENTS + ("srun", "sacct", "sshare", "sacctmgr"):
        real = find_binary(name)
        if real is None:
            continue
        shim = bindir / name
        shim.write_text(f'#!/bin/sh\nSLURM_CONF="{conf}" exec "{real}" "$@"\n')
        shim.chmod(0o755)
    return bindir


def start_cluster(cpus: int = 2, mem_mb: int | None = None, timeout: float = 40.0) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under a fresh temporary directory; wait for the node to be idle.

    cpus / mem_mb: what the node offers (mem_mb defaults to 80 % of this machine's memory, so a
    rule's ``mem_mb`` request that fits the machine is accepted). Raises ClusterUnavailable with
    the daemons' last log lines when a binary is missing or the node is not idle within
    ``timeout`` seconds; everything started so far is stopped first. A port taken between
    picking and binding (another process won the race) gets one more try on fresh ports.
    """
    try:
        return _start_once(cpus, mem_mb, timeout)
    except ClusterUnavailable as e:
        if "Address already in use" not in str(e):
            raise
    return _start_once(cpus, mem_mb, timeout)


def _start_once(cpus: int, mem_mb: int | None, timeout: float) -> SlurmCluster:
    missing = missing_binaries()
    if missing:
        raise ClusterUnavailable(
            f"SLURM/munge binaries not installed: {', '.join(missing)} "
            "(Debian: apt-get install slurm-wlm munge)"
        )
    # Short path: the munge socket must fit in sockaddr_un (108 bytes).
    root = Path(tempfile.mkdtemp(prefix="vceslurm-", dir="/tmp"))
    os.chmod(root, 0o755)
    for d in ("munge", "state", "spool", "run", "log"):
        (root / d).mkdir()
    node = socket.gethostname().split(".")[0] or "localhost"
    user = getpass.getuser()
    mem_mb = mem_mb or max(1000, int(_mem_total_mb() * 0.8))
    conf = _write_conf(root, node, cpus, mem_mb, _free_ports(2), user)
    env = dict(os.environ)
    env["SLURM_CONF"] = str(conf)
    env["PATH"] = f"{_write_shims(root, conf)}{os.pathsep}{env.get('PATH', '')}"
    for k in list(env):  # a test run inside a SLURM job must not talk to the outer cluster
        if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF":
            del env[k]
    logs = {
        "munged": root / "log" / "munged.stdout",  # in the foreground munged logs to stderr only
        "slurmctld": root / "log" / "slurmctld.log",
        "slurmd": root / "log" / "slurmd.log",
    }
    cluster = SlurmCluster(root=root, conf=conf, node=node, env=env, logs=logs)
    atexit.register(cluster.stop)  # safety net if the caller never reaches stop(); stop() is idempotent

    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chmod(key, 0o600)
    munge_sock = root / "munge" / "munge.socket"
    cmds = {
        "munged": [
            find_binary("munged"), "--foreground", "--force", f"--socket={munge_sock}",
            f"--key-file={key}", f"--pid-file={root / 'run' / 'munged.pid'}",
            f"--seed-file={root / 'munge' / 'munged.seed'}", "--num-threads=2",
        ],
        "slurmctld": [find_binary("slurmctld"), "-D", "-c", "-i", "-f", str(conf)],
        "slurmd": [find_binary("slurmd"), "-D", "-f", str(conf), "-N", node],
    }
    try:
        for name in DAEMONS:
            out = open(root / "log" / f"{name}.stdout", "wb")
            cluster.procs[name] = subprocess.Popen(
                cmds[name], env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=root,
            )
            out.close()
            if name == "munged":
                _wait_for(lambda: munge_sock.exists(), 10, cluster, "munged did not create its socket")
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for name, proc in cluster.procs.items():
                if proc.poll() is not None:
                    raise ClusterUnavailable(f"{name} exited with rc={proc.returncode}")
            state = cluster.node_state()
            if state == "idle":
                return cluster
            time.sleep(0.5)
        raise ClusterUnavailable(f"node {node} not idle after {timeout:.0f} s (sinfo state: {state!r})")
    except ClusterUnavailable as e:
        reason = f"{e}\n{cluster.diagnostics()}"
        cluster.stop()
        raise ClusterUnavailable(reason) from None
    except BaseException:
        cluster.stop()
        raise


def _wait_for(pred, timeout: float, cluster: SlurmCluster, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise ClusterUnavailable(f"{name} exited with rc={proc.returncode}")
        time.sleep(0.1)
    raise ClusterUnavailable(what)
