"""Who started this process and where its peers are: the launcher (none, torchrun, srun, mpirun, horovodrun) read
from its environment, and the interface gloo reaches them through."""
from __future__ import annotations

import datetime
import os
import re
import socket
import sys
from dataclasses import dataclass
from typing import Mapping, NamedTuple

from contract.config import ConfigError
from trainers.rendezvous import expand_nodelist, job_port

# How long a collective may wait on a slow peer (TRAINERS_COLLECTIVE_TIMEOUT_S). A peer that dies closes its sockets
# and is noticed at once; one cut off (its node's link down) is given up on after this.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=int(os.environ.get("TRAINERS_COLLECTIVE_TIMEOUT_S", "300")))
# Whether this process started a torch process group (set by the backend that starts one): end_process's question
started_process_group = False


def end_process(code: int) -> None:
    """Exit with `code`. A process that started a torch process group leaves without Python's finalization, its
    streams flushed: gloo's worker thread may still be releasing a finished collective (FSDP's all-gathers hold
    tensors Python owns), which needs the interpreter, and one that has begun finalizing aborts it -- SIGABRT,
    "terminate called without an active exception", a finished run's exit code lost (seen about once in 20 FSDP
    runs on a loaded 2-core machine; pytorch/pytorch#179291). Everything a run writes is closed before this."""
    if not started_process_group:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)

@dataclass(frozen=True)
class Launch:
    """Who started this process and where its peers are, read from the launcher's environment."""

    launcher: str = "none"  # "none" | "torchrun" | "slurm" | "mpi" | "horovodrun"
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    local_world_size: int = 1  # processes on this node: more than its GPUs means CPU, never two ranks on one GPU


class Route(NamedTuple):
    resolved: str  # what the name resolved to here
    source: str  # this host's address towards it
    interface: str  # the interface holding that address: what gloo must bind so that other hosts reach this one


def interface_towards(addr: str) -> Route | None:
    """How this host reaches `addr` (which may be this host's own: rank 0's node); None when `addr` does not resolve.

    No packet is sent: connecting a UDP socket only asks the kernel's routing table which source it would use."""
    import psutil

    try:
        ip = socket.getaddrinfo(addr, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))
            local = s.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return Route(ip, local, name)
    return None


def detect_launch(env: Mapping[str, str] = os.environ) -> Launch:
    def num(key: str) -> int:
        return int(env[key])

    def per_node(key: str, fallback: str) -> int:  # "2(x3)" and "2,1" (Slurm's per-node lists): this node's first
        return int(re.match(r"\d+", env.get(key) or env.get(fallback, "1")).group())

    if "HOROVOD_RANK" in env:  # horovodrun with Gloo
        return Launch("horovodrun", num("HOROVOD_RANK"), num("HOROVOD_SIZE"), num("HOROVOD_LOCAL_RANK"),
                      local_world_size=per_node("HOROVOD_LOCAL_SIZE", "HOROVOD_SIZE"))
    if "RANK" in env and "WORLD_SIZE" in env and "LOCAL_RANK" in env:  # torchrun
        return Launch(
            "torchrun", num("RANK"), num("WORLD_SIZE"), num("LOCAL_RANK"),
            env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", "29500")),
            local_world_size=per_node("LOCAL_WORLD_SIZE", "WORLD_SIZE"),
        )
    if "OMPI_COMM_WORLD_RANK" in env:  # mpirun (also horovodrun over MPI), on one host or in a Slurm allocation
        nodes = env.get("SLURM_JOB_NODELIST")
        addr = env.get("MASTER_ADDR") or (expand_nodelist(nodes)[0] if nodes else "127.0.0.1")
        port = job_port(env) if ("MASTER_PORT" in env or "SLURM_JOB_ID" in env) else 29500
        return Launch(
            "mpi", num("OMPI_COMM_WORLD_RANK"), num("OMPI_COMM_WORLD_SIZE"),
            num("OMPI_COMM_WORLD_LOCAL_RANK"), addr, port,
            local_world_size=per_node("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE"),
        )
    if "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:  # srun (the batch shell itself has no step size)
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "127.0.0.1")
        return Launch(
            "slurm", num("SLURM_PROCID"), num("SLURM_STEP_NUM_TASKS"), int(env.get("SLURM_LOCALID", "0")),
            env.get("MASTER_ADDR") or expand_nodelist(nodes)[0], job_port(env),
            local_world_size=per_node("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"),
        )
    return Launch()


def is_loopback(addr: str | None) -> bool:
    return addr is not None and (addr == "localhost" or addr.startswith("127.") or addr == "::1")


def bind_gloo_towards(master: str | None, launch: Launch) -> None:
    """Across hosts, gloo binds the interface that reaches the rendezvous host (GLOO_SOCKET_IFNAME, unless the user
    set it), derived here on each node: otherwise it binds what this host's *name* resolves to, which is 127.0.1.1
    on many machines, and ranks on other hosts are told to connect there. A rendezvous name that resolves to
    loopback on a job of several hosts is the same mistake one step earlier: one line, before any rank waits."""
    if not master or is_loopback(master) or launch.world_size <= launch.local_world_size:
        return  # one host: loopback is right
    found = interface_towards(master)
    if found is None:
        raise ConfigError(f"rank {launch.rank}: the rendezvous host {master!r} does not resolve on "
                          f"{socket.gethostname()}: add it to this node's /etc/hosts or DNS, or set MASTER_ADDR "
                          f"to an address")
    if is_loopback(found.source):
        raise ConfigError(f"rank {launch.rank}: the rendezvous host {master!r} resolves to loopback "
                          f"({found.resolved}) on {socket.gethostname()}, so ranks on the job's other hosts cannot "
                          f"reach it: make the name resolve to the node's network address (/etc/hosts), or set "
                          f"MASTER_ADDR to that address")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", found.interface)
