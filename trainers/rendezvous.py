"""The rendezvous of a Slurm job: its node list's hosts and the port (the one formula, used by the backends and by
slurm/job.sh: `python -m trainers.rendezvous` prints it); and what a study needs to start ranks (a free port,
torchrun's command, whether Horovod is there). No torch import: the batch shell and the study runner call it.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from typing import Mapping


def expand_nodelist(nodelist: str) -> list[str]:
    """A Slurm node list's hosts ("gpu[1-3,7],login" -> gpu1 gpu2 gpu3 gpu7 login), by scontrol where there is one
    (it knows every form), else by the common forms: ranges and lists in one bracket, zero-padding kept."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        pass
    hosts = []
    for part in re.split(r",(?![^\[]*\])", nodelist):
        match = re.fullmatch(r"(.*)\[([^\]]+)\](.*)", part)
        if not match:
            hosts.append(part)
            continue
        head, ranges, tail = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            for n in range(int(low), int(high or low) + 1):
                hosts.append(f"{head}{n:0{len(low)}d}{tail}")
    return hosts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(python: str) -> list[str]:
    """torchrun as a module of this interpreter (no console script needed)."""
    return [python, "-m", "torch.distributed.run"]


def horovod_available() -> bool:
    """Whether Horovod with PyTorch support imports here (the study runner skips Horovod runs otherwise)."""
    try:
        import horovod.torch  # noqa: F401  Horovod
    except Exception:  # ImportError, or a build without PyTorch support
        return False
    return True


def job_port(env: Mapping[str, str]) -> int:
    """MASTER_PORT when set; else a port fresh for each job and each restart of it (a stale rendezvous hangs):
    10000 + (job id mod 4000) x 10 + (restarts mod 10), 40,000 ports from 10000 to 49999."""
    if env.get("MASTER_PORT"):
        return int(env["MASTER_PORT"])
    job = int(env.get("SLURM_JOB_ID") or 0)
    return 10000 + (job % 4000) * 10 + restarts(env) % 10


def restarts(env: Mapping[str, str]) -> int:
    """How many attempts of this Slurm job came before this one: Slurm's requeues (SLURM_RESTART_COUNT) and
    job.sh's successor jobs (CHAIN_DEPTH); 0 outside Slurm."""
    return int(env.get("SLURM_RESTART_COUNT") or 0) + int(env.get("CHAIN_DEPTH") or 0)


if __name__ == "__main__":
    try:
        print(job_port(os.environ))
    except ValueError as e:  # a non-numeric SLURM_JOB_ID or MASTER_PORT
        print(f"error: no rendezvous port from this environment: {e}", file=sys.stderr)
        sys.exit(2)
