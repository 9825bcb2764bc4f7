"""A private Slurm cluster on this machine, for the tests and for trying the suite's cluster path before a real one.

    from slurm import local_cluster
    cluster = local_cluster.start(workdir, nodes=3) # 3 hosts (namespaces), slurmctld, slurmd each; nodes idle
    job = cluster.submit(["-t", "1", "job.sbatch"]) # -> job id (int); an argv from profiles.sbatch_argv works too
    cluster.wait(job, timeout=60)                   # -> final state, e.g. "COMPLETED"
    cluster.stop()                                  # cancels jobs, kills the daemons it started (by PID),
                                                    # removes the namespaces and links

    python -m slurm.local_cluster start  --dir D [--nodes N]   # prints `export SLURM_CONF=...`
    python -m slurm.local_cluster status --dir D
    python -m slurm.local_cluster stop   --dir D

With nodes=N >= 2 every node is a host of its own (slurm/netns.py; slurm/README.md says what that makes possible),
else one node on localhost. Everything (slurm.conf, state, spool, logs, PID files, hosts files, the job-completion
log `sacct -c` reads) lives in `workdir`; a system-wide Slurm is left alone. The configuration is the smallest that
behaves like a real cluster: cons_tres with CR_Core, no cgroups (proctrack/linuxproc, task/none: works in
containers), no accounting database (jobcomp/filetxt), ReturnToService=2 (a node that was down comes back by itself).

Needs the Debian packages from slurm/install.sh and, for slurmd, root (slurmd must switch to the job's user).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import getpass
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm import netns
from slurm.client import Clients, NoConfiguration

# Job states after which nothing more happens to a job (REQUEUED and PENDING are not final).
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
    "DEADLINE", "BOOT_FAIL", "SPECIAL_EXIT",
})

MUNGED = "/usr/sbin/munged"
MUNGE_PIDFILE = Path("/run/munge/munged.pid")
CONTROLLER = "ctl"  # the controller's host name in the multi-host mode
LINK_FILE = "link"  # in workdir: the rate every node's link is limited to, when one is


class ClusterError(RuntimeError):
    """Slurm could not be started or did not answer; the message is one line meant for a skip reason."""


# ---- Configuration ---------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hardware(cpus: int | None = None) -> tuple[str, str]:
    """(this machine's name, its CPUs=.. RealMemory=.. tokens) as `slurmd -C` describes it.

    cpus: pretend the node has this many cores (slurmd is told to trust the config: SlurmdParameters=
    config_overrides), so tests can run several multi-rank jobs at once on a 2-core machine."""
    try:
        out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ClusterError(f"`slurmd -C` failed: {e}") from None
    line = out.splitlines()[0].strip()
    if not line.startswith("NodeName="):
        raise ClusterError(f"unexpected `slurmd -C` output: {line!r}")
    # RealMemory as reported may exceed what slurmd later measures by a few MB; leave a margin so the node
    # is not drained for "Low RealMemory".
    parts = []
    for tok in line.split()[1:]:
        key = tok.split("=", 1)[0]
        if key == "UpTime":
            continue
        if key == "RealMemory":
            tok = f"RealMemory={max(1, int(int(tok.split('=')[1]) * 0.95))}"
        elif cpus and key in ("CPUs", "CoresPerSocket"):
            tok = f"{key}={cpus}"
        elif cpus and key in ("Boards", "SocketsPerBoard", "ThreadsPerCore"):
            tok = f"{key}=1"
        parts.append(tok)
    return line.split()[0].split("=", 1)[1], " ".join(parts)


def _task_prolog(workdir: Path) -> Path:
    """A TaskProlog giving every task a TMPDIR on its own node (workdir/tmp/<node>), as node-local scratch would, and
    CLUSTER_LINK, the link's rate where `limit_links` set one (the trainer records it in the manifest)."""
    path = workdir / "task_prolog.sh"
    path.write_text(f'#!/bin/sh\nd="{workdir}/tmp/$SLURMD_NODENAME"\nmkdir -p "$d" && echo "export TMPDIR=$d"\n'
                    f'[ -s "{workdir}/{LINK_FILE}" ] && echo "export CLUSTER_LINK=$(cat "{workdir}/{LINK_FILE}")"\n'
                    f'exit 0\n')
    path.chmod(0o755)
    return path


def write_config(workdir: Path, cpus: int | None = None, network: netns.Network | None = None) -> Path:
    """Write workdir/slurm.conf (and the state/spool/log dirs) and return its path.

    network: the hosts of the multi-host mode (its first name is the controller, the others the nodes); None: one
    node on localhost."""
    workdir = workdir.resolve()
    for sub in ("state", "spool", "log", "run", "tmp"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    host, hardware = _hardware(cpus)
    if network is None:
        names, ctl = [host], f"{host}(127.0.0.1)"
        nodes = f"NodeName={host} {hardware} NodeAddr=127.0.0.1 State=UNKNOWN"
        ports = f"SlurmctldPort={_free_port()}\nSlurmdPort={_free_port()}"
    else:  # each host has its own address, so the default ports are free on every one
        names, ctl = network.names[1:], f"{CONTROLLER}({network.address(CONTROLLER)})"
        nodes = "\n".join(f"NodeName={n} {hardware} NodeAddr={network.address(n)} State=UNKNOWN" for n in names)
        ports = "SlurmctldPort=6817\nSlurmdPort=6818"
    user = getpass.getuser()
    conf = f"""\
# Written by slurm/local_cluster.py: a private cluster of {len(names)} node(s) on this machine.
ClusterName=local
SlurmctldHost={ctl}
{ports}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={workdir}/state
SlurmdSpoolDir={workdir}/spool/%n
SlurmctldPidFile={workdir}/run/slurmctld.pid
SlurmdPidFile={workdir}/run/slurmd.%n.pid
SlurmctldLogFile={workdir}/log/slurmctld.log
SlurmdLogFile={workdir}/log/slurmd.%n.log
TaskProlog={_task_prolog(workdir)}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={workdir}/log/jobcomp.txt
ReturnToService=2
MinJobAge=600
KillWait=10
# Jobs may requeue themselves (the preemption path of slurm/job.sh); a requeued job keeps its id.
JobRequeue=1
{"SlurmdTimeout=30" if network else ""}
{"SlurmdParameters=config_overrides" if cpus or network else ""}
{nodes}
PartitionName=debug Nodes={",".join(names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
    path = workdir / "slurm.conf"
    path.write_text(conf)
    return path


# ---- Processes -------------------------------------------------------------------------------------------------------

def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill(pid: int | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if not _pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def processes_in_namespaces(inodes: set[int]) -> list[int]:
    """The PIDs of the processes whose network namespace is one of `inodes`."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and os.stat(d / "ns" / "net").st_ino in inodes:
                pids.append(int(d.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def _other_slurm_daemons(ours: set[int]) -> list[int]:
    """PIDs of slurmctld/slurmd processes that are not this cluster's (another private or system cluster)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in ours:
            continue
        try:
            if (d / "comm").read_text().strip() in ("slurmctld", "slurmd") and _pid_alive(int(d.name)):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def _munge_works() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        if enc.returncode != 0:
            return False
        dec = subprocess.run(["unmunge"], input=enc.stdout, capture_output=True, timeout=10)
        return dec.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _start_munged() -> int | None:
    """Start munged when none answers; return its PID if we started it (so stop() can end it), else None."""
    if _munge_works():
        return None
    if os.geteuid() != 0:
        raise ClusterError("munged is not running and starting it needs root")
    if not Path(MUNGED).exists():
        raise ClusterError("munge is not installed (run slurm/install.sh)")
    subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge"], check=True)
    r = subprocess.run(["runuser", "-u", "munge", "--", MUNGED], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise ClusterError(f"munged failed to start: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    for _ in range(50):
        if _munge_works():
            return _read_pid(MUNGE_PIDFILE)
        time.sleep(0.1)
    raise ClusterError("munged started but `munge -n | unmunge` still fails")


# ---- The cluster -----------------------------------------------------------------------------------------------------

@dataclass
class Cluster:
    """A running private cluster; `env` holds what Slurm's client commands need (SLURM_CONF)."""

    workdir: Path
    conf: Path
    munged_pid: int | None = None          # set only when start() launched munged itself
    env: dict[str, str] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)  # the node names, in the order of their addresses
    network: netns.Network | None = None   # the hosts of the multi-host mode; None: one node on localhost

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.conf = Path(self.conf)
        self.env = {"SLURM_CONF": str(self.conf)}

    # ---- commands --------------------------------------------------------------------------------------------
    def run(self, argv: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        """Run a Slurm client command (sinfo, squeue, scontrol, ...) against this cluster (through the suite's one
        door for clients, slurm/client.py: its slurm.conf must be readable)."""
        env = {**os.environ, **self.env, **kw.pop("env", {})}
        return Clients(env=env).run(argv, capture_output=True, text=True, check=check, timeout=timeout, **kw)

    def submit(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None) -> int:
        """`sbatch --parsable ARGV` -> job id. ARGV may start with "sbatch" (as profiles.sbatch_argv returns)."""
        argv = list(argv)
        if argv and Path(argv[0]).name == "sbatch":
            argv = argv[1:]
        got = Clients(env={**os.environ, **self.env, **(env or {})}).submit(["sbatch", *argv], cwd=cwd, timeout=60)
        if not got.job:
            raise ClusterError(f"sbatch failed: {got.said}")
        return int(got.job)

    def job_info(self, job: int) -> dict[str, str]:
        """`scontrol show job -o J` as a dict (JobState, Reason, Restarts, ExitCode, ...); {} if unknown."""
        r = self.run(["scontrol", "show", "job", "-o", str(job)], check=False)
        if r.returncode != 0:
            return {}
        info: dict[str, str] = {}
        for tok in r.stdout.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                info.setdefault(k, v)
        return info

    def state(self, job: int) -> str | None:
        """Current state of a job, from scontrol or, once purged, from the completion log (`sacct -c`)."""
        info = self.job_info(job)
        if info:
            return info.get("JobState")
        r = self.run(["sacct", "-c", "-n", "-P", "-j", str(job), "-o", "state"], check=False)
        lines = [x.split()[0] for x in r.stdout.splitlines() if x.strip()]
        return lines[-1] if lines else None

    def requeue_now(self, job: int) -> None:
        """A requeued job waits 120 s before it may start again; let it start now.

        Not sooner than 5 s after the job ended: slurmd revokes the old run's credential with 1-second
        resolution and kills a restart whose credential is not newer ("Job credential revoked" -> FAILED);
        2 s was seen to be too little once on a busy machine."""
        end = self.job_info(job).get("EndTime", "")
        try:
            wait = datetime.datetime.fromisoformat(end).timestamp() + 5.0 - time.time()
        except ValueError:
            wait = 5.0
        time.sleep(min(max(wait, 3.0), 10.0))  # at least 3 s whatever EndTime says
        self.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], check=False)

    def wait(self, job: int, timeout: float = 120, fast_requeue: bool = False, poll: float = 0.5) -> str:
        """Block until the job reaches a final state and return it; ClusterError on timeout.

        fast_requeue: whenever the job sits pending after a requeue (Restarts > 0, Reason=BeginTime), let it
        start at once instead of Slurm's 120 s back-off (for tests of the requeue path)."""
        return self.wait_all([job], timeout, fast_requeue, poll)[job]

    def wait_all(self, jobs: list[int], timeout: float = 120, fast_requeue: bool = False,
                 poll: float = 0.5) -> dict[int, str]:
        """`wait` for several jobs at once (so every one of them gets the fast requeue): {job: final state}."""
        deadline = time.monotonic() + timeout
        done: dict[int, str] = {}
        last: dict[int, str | None] = {}
        while time.monotonic() < deadline:
            for job in jobs:
                if job in done:
                    continue
                info = self.job_info(job)
                state = info.get("JobState") if info else self.state(job)
                last[job] = state
                if state in FINAL_STATES:
                    done[job] = state
                elif (fast_requeue and info and state == "PENDING" and info.get("Reason") == "BeginTime"
                        and int(info.get("Restarts", "0")) > 0):
                    self.requeue_now(job)
            if len(done) == len(jobs):
                return done
            time.sleep(poll)
        raise ClusterError(f"jobs not finished after {timeout:.0f} s: "
                           + ", ".join(f"{j} {last.get(j)}" for j in jobs if j not in done))

    def node_state(self) -> str:
        """The nodes' states, one word when they agree ("idle"), else "n1 idle, n2 down*"."""
        r = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False)
        pairs = [line.split() for line in r.stdout.splitlines() if len(line.split()) == 2]
        states = {state for _, state in pairs}
        return states.pop() if len(states) == 1 else ", ".join(" ".join(p) for p in pairs)

    def jobs(self) -> list[int]:
        r = self.run(["squeue", "-h", "-o", "%i"], check=False)
        return [int(x) for x in r.stdout.split() if x.strip().isdigit()]

    # ---- life cycle ------------------------------------------------------------------------------------------
    def pids(self) -> dict[str, int | None]:
        """{"slurmctld": pid, "slurmd <node>": pid for each node, "munged": pid or None}."""
        run = self.workdir / "run"
        return {"slurmctld": _read_pid(run / "slurmctld.pid"),
                **{f"slurmd {n}": _read_pid(run / f"slurmd.{n}.pid") for n in self.nodes},
                "munged": self.munged_pid}

    def running(self) -> bool:
        p = self.pids()
        return all(_pid_alive(pid) for name, pid in p.items() if name != "munged")

    def stop(self, timeout: float = 20) -> None:
        """Cancel all jobs (so no slurmstepd outlives the cluster), then kill the daemons started, by PID."""
        if self.running():
            jobs = self.jobs()
            if jobs:
                self.run(["scancel", *map(str, jobs)], check=False)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and any(
                        self.job_info(j).get("JobState") not in FINAL_STATES | {None} for j in jobs):
                    time.sleep(0.3)
        p = self.pids()
        for name, pid in p.items():
            if name.startswith("slurmd"):
                _kill(pid)
        _kill(p["slurmctld"])
        # munged is shared by every Slurm on the machine: end the one we started only if no other uses it.
        if p["munged"] and not _other_slurm_daemons({v for v in p.values() if v}):
            _kill(p["munged"])
        if self.network:
            for host in self.network.names:  # a step whose slurmd went first (a node lost, a hung srun) is orphaned
                self.crash_node(host)
            self.network.destroy()
        (self.workdir / "cluster.json").unlink(missing_ok=True)

    def save(self) -> None:
        (self.workdir / "cluster.json").write_text(json.dumps(
            {"conf": str(self.conf), "munged_pid": self.munged_pid, "nodes": self.nodes,
             "network": asdict(self.network) if self.network else None}, indent=1))

    @classmethod
    def load(cls, workdir: str | Path) -> "Cluster":
        workdir = Path(workdir).resolve()
        state = json.loads((workdir / "cluster.json").read_text())
        network = netns.Network(**state["network"]) if state.get("network") else None
        return cls(workdir, Path(state["conf"]), state.get("munged_pid"), nodes=state.get("nodes", []),
                   network=network)

    # ---- the interconnect ------------------------------------------------------------------------------------
    def limit_links(self, rate: str | None) -> None:
        """Limit every node's link to `rate` (tc's units: 100mbit, 1gbit) with a token bucket, or lift it (None)."""
        if not self.network:
            raise ClusterError("one node on localhost has no links to limit (start it with --nodes 2 or more)")
        try:
            self.network.limit(rate)
        except netns.NetnsError as e:
            raise ClusterError(str(e)) from None
        (self.workdir / LINK_FILE).write_text(rate or "")

    @property
    def link(self) -> str | None:
        path = self.workdir / LINK_FILE
        return (path.read_text().strip() or None) if path.exists() else None

    # ---- faults ----------------------------------------------------------------------------------------------
    def kill_node(self, node: str) -> None:
        """SIGKILL a node's slurmd (the node is lost: Slurm marks it DOWN once SlurmdTimeout passes)."""
        pid = self.pids().get(f"slurmd {node}")
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    def set_link(self, node: str, up: bool) -> None:
        """Take a node's link down (the node lost to the network: its processes run on, unreachable, and Slurm marks
        it DOWN once SlurmdTimeout passes) or up again (ReturnToService=2: it comes back by itself)."""
        if not self.network:
            raise ClusterError("one node on localhost has no link to take down (start it with --nodes 2 or more)")
        if node not in self.nodes:
            raise ClusterError(f"no node {node!r}; the nodes: {', '.join(self.nodes)}")
        try:
            self.network.set_link(node, up)
        except netns.NetnsError as e:
            raise ClusterError(str(e)) from None

    def crash_node(self, node: str) -> list[int]:
        """A node crashes: SIGKILL every process on it (its slurmd, its jobs' steps and tasks: every process in the
        host's network namespace, all started by this cluster). Returns their PIDs."""
        if not self.network:
            raise ClusterError("one node on localhost: crashing it would end the cluster")
        try:
            target = os.stat(f"/run/netns/{self.network.netns(node)}").st_ino
        except FileNotFoundError:
            return []
        pids = processes_in_namespaces({target})
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids


def available() -> str | None:
    """None if a local cluster can be started here, else a one-line reason."""
    missing = [c for c in ("slurmctld", "slurmd", "sbatch", "munge") if shutil.which(c) is None
               and not Path(f"/usr/sbin/{c}").exists()]
    if missing:
        return f"Slurm not installed ({', '.join(missing)} missing; run slurm/install.sh as root)"
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root (slurmd switches to the job's user)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (run slurm/install.sh)"
    return None


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def start(workdir: str | Path, timeout: float = 60, cpus: int | None = None, nodes: int = 1) -> Cluster:
    """Write the config into `workdir`, start munged (if needed), slurmctld and the slurmds; wait for idle nodes.

    nodes: 1 = one node on localhost; N >= 2 = N hosts in network namespaces (ClusterError where they cannot be
    made; see `multi_host_unavailable`). cpus: cores each node claims to have (default: the real count)."""
    reason = available() or (multi_host_unavailable() if nodes > 1 else None)
    if reason:
        raise ClusterError(reason)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    network = None
    if nodes > 1:
        try:
            network = netns.create(_tag(workdir), [CONTROLLER, *(f"n{i}" for i in range(1, nodes + 1))], workdir)
        except netns.NetnsError as e:
            raise ClusterError(str(e)) from None
    conf = write_config(workdir, cpus, network)
    node_names = network.names[1:] if network else [_hardware(cpus)[0]]
    cluster = Cluster(workdir, conf, nodes=node_names, network=network)
    cluster.save()  # from here on, `stop` can undo what was made
    try:
        cluster.munged_pid = _start_munged()
        cluster.save()
        _start_daemons(cluster)
        _wait_idle(cluster, timeout)
        return cluster
    except BaseException:
        cluster.stop()
        raise


def multi_host_unavailable() -> str | None:
    """None when the multi-host mode can start here, else a one-line reason."""
    return netns.unavailable()


def _tag(workdir: Path) -> str:
    """A short name of this cluster's namespaces and links, unique per workdir (two clusters coexist)."""
    return "sl" + hashlib.sha1(str(workdir).encode()).hexdigest()[:5]


def _start_daemons(cluster: Cluster) -> None:
    """slurmctld, then one slurmd a node; in the multi-host mode each as its own host."""
    conf, net = str(cluster.conf), cluster.network
    commands = [([_daemon("slurmctld"), "-f", conf], CONTROLLER)]
    commands += [([_daemon("slurmd"), "-f", conf, "-N", n], n) if net else ([_daemon("slurmd"), "-f", conf], n)
                 for n in cluster.nodes]
    for argv, host in commands:
        argv = net.enter(host, argv) if net else argv
        r = subprocess.run(argv, env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise ClusterError(f"{Path(argv[-3] if net else argv[0]).name} on {host} failed to start "
                               f"(rc {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}")


def _wait_idle(cluster: Cluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = cluster.node_state()
        if state == "idle":
            return
        if ("down" in state or "drain" in state) and time.monotonic() > deadline - timeout + 10:
            cluster.run(["scontrol", "update", f"nodename={','.join(cluster.nodes)}", "state=resume"], check=False)
        time.sleep(0.25)
    log = cluster.workdir / "log" / "slurmctld.log"
    tail = log.read_text().strip().splitlines()[-1:] if log.exists() else []
    raise ClusterError(f"nodes not idle after {timeout:.0f} s (state {state!r}); slurmctld.log: {tail}")


# ---- CLI -------------------------------------------------------------------------------------------------------------

def cli_start(workdir: Path, args) -> int:
    if (workdir / "cluster.json").exists() and Cluster.load(workdir).running():
        print(f"already running; export SLURM_CONF={workdir / 'slurm.conf'}")
        return 0
    nodes, why = args.nodes, multi_host_unavailable() if args.nodes > 1 else None
    if why:
        print(f"one node on localhost instead of {nodes} hosts: {why}")
        nodes = 1
    c = start(workdir, cpus=args.cpus, nodes=nodes)
    if args.rate and c.network:
        c.limit_links(args.rate)
    mode = (f"{nodes} hosts in network namespaces ({c.network.subnet}, controller {CONTROLLER})"
            if c.network else "one node on localhost")
    mode += f", links limited to {c.link}" if c.link else ""
    print(f"cluster up: {mode}; nodes {', '.join(c.nodes)}: {c.node_state()}; now run:\n"
          f"  export SLURM_CONF={c.conf}")
    return 0


def cli_link(c: Cluster, args) -> int:
    c.limit_links(None if args.rate in (None, "none") else args.rate)
    print(f"links of {', '.join(c.nodes)}: {c.link or 'unlimited'}")
    return 0


def cli_stop(c: Cluster, args) -> int:
    c.stop()
    print("stopped")
    return 0


def cli_status(c: Cluster, args) -> int:
    print(f"daemons {'running' if c.running() else 'not running'}: {c.pids()}")
    print(c.run(["sinfo"], check=False).stdout + c.run(["squeue"], check=False).stdout, end="")
    return 0 if c.running() else 1


# what each action on a folder without a cluster returns: nothing to stop is no error
ON_A_CLUSTER = {"link": (cli_link, 1), "stop": (cli_stop, 0), "status": (cli_status, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm.local_cluster",
                                 description="A private Slurm cluster on this machine: N hosts in network "
                                             "namespaces, or one node on localhost.")
    ap.add_argument("action", choices=["start", *ON_A_CLUSTER])
    ap.add_argument("--dir", required=True, help="folder for slurm.conf, state, spool and logs")
    ap.add_argument("--nodes", type=int, default=1,
                    help="nodes, each a host of its own when 2 or more (default 1: one node on localhost)")
    ap.add_argument("--cpus", type=int, help="cores each node claims (default: the real count)")
    ap.add_argument("--rate", help="start, link: limit every node's link to this rate (tc's units: 100mbit, 1gbit); "
                                   "link --rate none lifts it")
    args = ap.parse_args(argv)
    if args.nodes < 1:
        ap.error(f"--nodes must be 1 or more, got {args.nodes}")
    workdir = Path(args.dir).resolve()
    try:
        if args.action == "start":
            return cli_start(workdir, args)
        action, without = ON_A_CLUSTER[args.action]
        if not (workdir / "cluster.json").exists():
            print(f"no cluster in {workdir}")
            return without
        return action(Cluster.load(workdir), args)
    except (ClusterError, NoConfiguration) as e:  # NoConfiguration: the cluster's slurm.conf went missing
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
