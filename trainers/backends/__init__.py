"""All distributed setup lives here: launcher detection (launch.py), the backend registry, its checks, and `create`.

The training loop sees only a `Backend` (base.py), never torch.distributed or horovod; every backend is built as
`cls(cfg, launch, device)` after `resolve` ran every check of it (`check_world`: the one place those live).
"""
from __future__ import annotations

import importlib
import os

import torch

from trainers.backends.base import Backend
from trainers.launch import (COLLECTIVE_TIMEOUT, Launch, bind_gloo_towards, detect_launch,
                                       interface_towards, is_loopback)
from contract.config import DISTRIBUTED_BACKENDS, SHARDING_BACKENDS, Config, ConfigError, chosen_backend
from trainers.backends.rank_workers import workers_per_rank
from trainers.rendezvous import free_port, horovod_available, torchrun_command

__all__ = ["Backend", "Launch", "detect_launch", "create", "BACKENDS", "horovod_available",
           "torchrun_command", "free_port", "bind_gloo_towards"]

# the launchers Horovod forms a world under (its world is checked against the detected launch after hvd.init)
HOROVOD_LAUNCHERS = ("none", "horovodrun", "mpi", "slurm")

# name -> where its Backend class lives, imported only when chosen (the horovod module fails to import without
# Horovod). A new backend: one line here, and its checks in check_world.
BACKENDS: dict[str, str] = {  # as entry points are written: "module:class"
    "single": "trainers.backends.base:Backend",
    "emulated": "trainers.backends.emulated:EmulatedBackend",
    "ddp": "trainers.backends.torch_dist:DDPBackend",
    "fsdp": "trainers.backends.fsdp:FSDPBackend",
    "hsdp": "trainers.backends.fsdp:HSDPBackend",
    "dp": "trainers.backends.torch_dist:DataParallelBackend",
    "horovod": "trainers.backends.horovod:HorovodBackend",
}


def pick_device(cfg: Config, launch: Launch) -> torch.device:
    """One GPU per process, or the CPU. More processes on a node than GPUs: "auto" takes the CPU (gloo) on every
    rank alike, "cuda" is refused; NCCL cannot put two ranks on one GPU, and sharing one would be no test anyway."""
    wanted = cfg.train.device
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    per_node = max(launch.local_world_size, launch.local_rank + 1)
    if is_loopback(launch.master_addr):  # a rendezvous on 127.x reaches this machine alone: every rank is here
        per_node = max(per_node, launch.world_size)  # ("nodes" of torchrun on localhost, as the tests start)
    if wanted == "cuda" and not gpus:
        raise ConfigError("train.device = 'cuda' but no GPU is visible; use --set train.device=cpu")
    if wanted == "cuda" and per_node > gpus:
        raise ConfigError(f"{per_node} processes on this node but {gpus} GPU(s) visible: never two ranks on one GPU; "
                          f"start at most {gpus} per node, or use --set train.device=cpu (gloo); under Slurm let "
                          "every task see the node's GPUs (--gres=gpu:N, no per-task GPU binding)")
    if wanted == "cuda" or (wanted == "auto" and 0 < per_node <= gpus):
        torch.cuda.set_device(launch.local_rank)
        return torch.device("cuda", launch.local_rank)
    return torch.device("cpu")


def check_world(cfg: Config, launch: Launch, name: str) -> None:
    """Every check of backend `name` against the config and the launch, before any process group exists."""
    check_processes(cfg, launch, name)
    if cfg.train.device == "cuda" and not torch.cuda.is_available():  # here, not after the data set is made
        raise ConfigError("train.device = 'cuda' but no GPU is visible; use --set train.device=cpu")
    if name == "horovod":
        check_horovod_launch(launch)
    if name in SHARDING_BACKENDS:
        check_sharding(cfg, launch, name)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name == "dp" and cfg.train.device != "cpu" and 0 < gpus < cfg.train.workers:  # dp on the GPUs: one a worker
        raise ConfigError(f"backend dp with {cfg.train.workers} workers needs as many GPUs; {gpus} visible")


def check_processes(cfg: Config, launch: Launch, name: str) -> None:
    """The launch's processes against the backend and train.workers."""
    workers = cfg.train.workers
    if name in DISTRIBUTED_BACKENDS:
        if launch.world_size > 1:  # W workers over P processes: W/P emulated workers a process, W a multiple of P
            workers_per_rank(workers, launch.world_size)
            bpa = cfg.horovod.batches_per_allreduce
            if name == "horovod" and workers > launch.world_size and bpa > 1:
                raise ConfigError(f"horovod.batches_per_allreduce = {bpa} with {workers} workers over "
                                  f"{launch.world_size} processes: the emulated workers already accumulate their "
                                  "gradients locally; use one or the other")
        if launch.world_size == 1 and workers > 1:
            raise ConfigError(
                f"backend {name} with {workers} workers needs {workers} processes: start it under torchrun "
                f"--nproc-per-node {workers}, srun, mpirun or horovodrun, or use backend = 'emulated'"
            )
    elif launch.world_size > 1:
        raise ConfigError(f"backend {name} runs in one process, but {launch.world_size} were launched; "
                          "use ddp or horovod")


def check_sharding(cfg: Config, launch: Launch, name: str) -> None:
    """FSDP's limits: every rank runs each forward (its all-gathers) and holds a slice of each gradient."""
    if cfg.data.val_mode == "sharded":  # unequal shards: one rank's extra batch would wait for its peers' gathers
        raise ConfigError(f"backend {name} validates on every rank in step (each forward gathers the weights' "
                          "slices): use data.val_mode = 'every_rank'")
    if cfg.train.precision == "fp16":  # the scaler would judge each rank's own slice of the gradients for inf/NaN
        raise ConfigError(f"backend {name} with train.precision = 'fp16': a rank's gradient scaler sees only its "
                          "slice, so ranks could skip different steps; use 'bf16'")
    per_node = launch.local_world_size
    if name == "hsdp" and (launch.world_size % per_node or launch.world_size // per_node < 2):
        raise ConfigError(f"backend hsdp replicates across nodes: {launch.world_size} processes, {per_node} a node, "
                          "are not two or more equal nodes; use backend = 'fsdp' on one node")


def check_horovod_launch(launch: Launch) -> None:
    if launch.launcher not in HOROVOD_LAUNCHERS:
        raise ConfigError(
            f"backend horovod cannot run under {launch.launcher}; start it with `horovodrun -np N` or "
            f"`mpirun -np N` (or use backend = 'ddp' under {launch.launcher})"
        )
    if launch.launcher == "slurm" and "PMIX_RANK" not in os.environ:
        # Open MPI aborts (or hangs) in MPI_Init when srun starts it without a PMI plugin
        raise ConfigError(
            "backend horovod under srun needs `srun --mpi=pmix`; or run `mpirun -np N` inside the allocation "
            "as the thesis did"
        )


def resolve(cfg: Config, launch: Launch) -> str:
    """The backend's name, checked against the launch; raises ConfigError before anything starts."""
    name = chosen_backend(cfg, launch.launcher, launch.world_size)
    if name == "horovod":
        try:
            import trainers.backends.horovod  # noqa: F401  (fails without Horovod)
        except ImportError as e:
            hint = f"backend horovod needs Horovod with PyTorch support: run `make setup-horovod` ({e})"
            raise ConfigError(hint) from None
    if name not in BACKENDS:
        raise ConfigError(f"backend {name!r} is not available; known: {', '.join(sorted(BACKENDS))}")
    check_world(cfg, launch, name)
    return name


def create(cfg: Config, launch: Launch, name: str) -> Backend:
    """Backend `name` (resolved: its checks passed) on this process's device."""
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(cfg, launch, pick_device(cfg, launch))
