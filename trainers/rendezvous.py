"""The rendezvous port of a Slurm job: the one formula, used by the backends and by slurm/job.sh; and what a study
needs to start ranks (a free port, torchrun's command, whether Horovod is there).

`python -m trainers.rendezvous` prints it for the environment it runs in (job.sh exports it as MASTER_PORT).
No torch import here: the batch shell calls it before every launch, and the study runner plans without torch.
"""
from __future__ import annotations

import os
import socket
import sys
from typing import Mapping


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
