"""TF_CONFIG for MultiWorkerMirroredStrategy, built from the launcher's environment (no TensorFlow import here).

MWMS needs every worker's host:port in rank order and this process's index among them. What each launcher tells:
  srun              SLURM_PROCID, SLURM_STEP_NUM_TASKS, the step's node list and tasks per node (block placement,
                    Slurm's default: a node's tasks are consecutive ranks) -> any number of hosts;
  the study, torchrun, mpirun, horovodrun on one host
                    RANK / OMPI_COMM_WORLD_RANK / HOROVOD_RANK and the world size -> every worker on this host.
Worker r listens on the rendezvous port + 1 + its local rank (MASTER_PORT, else trainers/rendezvous.py's job port):
the port itself stays the launcher's. A TF_CONFIG already set (by hand) is used as it is.
"""
from __future__ import annotations

import json
import re
from typing import Mapping

from contract.config import ConfigError
from trainers.rendezvous import expand_nodelist, job_port

LOCAL_HOST = "127.0.0.1"


def tasks_per_node(spec: str, nodes: int) -> list[int]:
    """Slurm's tasks-per-node list ("2(x3),1" -> [2, 2, 2, 1]); one number alone holds for every node."""
    counts = []
    for item in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match:
            raise ConfigError(f"cannot read Slurm's tasks per node {spec!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts * nodes if len(counts) == 1 and nodes > 1 else counts


def slurm_workers(env: Mapping[str, str]) -> tuple[list[str], int]:
    hosts = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    counts = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1"), len(hosts))
    if len(counts) != len(hosts):
        raise ConfigError(f"Slurm lists {len(hosts)} nodes but tasks for {len(counts)}; cannot place the workers")
    port = job_port(env)
    workers = [f"{host}:{port + 1 + local}" for host, n in zip(hosts, counts) for local in range(n)]
    return workers, int(env["SLURM_PROCID"])


RANK_VARIABLES = (("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),  # the study's own launch, torchrun
                  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),  # mpirun
                  ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE"))  # horovodrun


def one_host_workers(env: Mapping[str, str]) -> tuple[list[str], int] | None:
    for rank_key, size_key, local_key in RANK_VARIABLES:
        if rank_key in env and size_key in env:
            size = int(env[size_key])
            if int(env.get(local_key, size)) != size:
                raise ConfigError(f"MultiWorkerMirroredStrategy over {size} processes on several hosts needs their "
                                  "addresses: launch it with srun (Slurm) or set TF_CONFIG on every worker")
            port = job_port(env)
            return [f"{LOCAL_HOST}:{port + 1 + r}" for r in range(size)], int(env[rank_key])
    return None


def tf_config(env: Mapping[str, str]) -> dict | None:
    """TF_CONFIG's contents for this process; None for one worker alone (MWMS needs no peers then)."""
    if env.get("TF_CONFIG"):
        return json.loads(env["TF_CONFIG"])
    if "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env and int(env["SLURM_STEP_NUM_TASKS"]) > 1:
        workers, index = slurm_workers(env)
    else:
        found = one_host_workers(env)
        if found is None or len(found[0]) == 1:
            return None
        workers, index = found
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
