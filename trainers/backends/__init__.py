"""All distributed setup lives here: launcher detection (launch.py), the backend registry, and `create`.

The training loop sees only a `Backend` (base.py); it never imports torch.distributed or horovod.
"""
from __future__ import annotations

import os
import socket
from typing import Callable

import torch

from trainers.backends.base import Backend
from trainers.backends.launch import COLLECTIVE_TIMEOUT, Launch, detect_launch, interface_towards
from contract.config import DISTRIBUTED_BACKENDS, Config, ConfigError
from trainers.backends.rank_workers import workers_per_rank

__all__ = ["Backend", "Launch", "detect_launch", "register", "create", "BACKENDS", "horovod_available",
           "torchrun_command", "free_port"]


BACKENDS: dict[str, Callable[[Config, Launch, torch.device], Backend]] = {}


def register(name: str):
    def add(factory):
        BACKENDS[name] = factory
        return factory

    return add


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


def is_loopback(addr: str | None) -> bool:
    return addr is not None and (addr == "localhost" or addr.startswith("127.") or addr == "::1")


def choose_backend(cfg: Config, launch: Launch) -> str:
    if cfg.train.backend != "auto":
        return cfg.train.backend
    if launch.launcher == "horovodrun":
        return "horovod"
    if launch.world_size > 1:
        return "ddp"
    return "emulated" if cfg.train.workers > 1 else "single"


def check_world(cfg: Config, launch: Launch, name: str) -> None:
    """Refuse a launch that disagrees with the config, before any process group exists."""
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


@register("single")
def _single(cfg: Config, launch: Launch, device: torch.device) -> Backend:
    return Backend(device)


@register("emulated")
def _emulated(cfg: Config, launch: Launch, device: torch.device) -> Backend:
    from trainers.backends.emulated import EmulatedBackend

    return EmulatedBackend(device, workers=cfg.train.workers, workers_per_pass=cfg.train.workers_per_pass)


@register("ddp")
def _ddp(cfg: Config, launch: Launch, device: torch.device) -> Backend:
    from trainers.backends.torch_dist import DDPBackend

    init = cfg.train.init_method or "env://"
    if init == "env://":
        os.environ.setdefault("MASTER_ADDR", launch.master_addr or "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(launch.master_port or free_port()))
    if device.type == "cpu":
        bind_gloo_towards(os.environ.get("MASTER_ADDR") or launch.master_addr, launch)
    # rank 0's buffers are the ones saved and evaluated; other ranks' only matter when they validate a shard
    broadcast = cfg.data.val_mode == "sharded"
    return DDPBackend(device, launch.rank, launch.world_size, launch.local_rank, cfg.train.workers, init, broadcast,
                      cfg.train.workers_per_pass)


@register("dp")
def _dp(cfg: Config, launch: Launch, device: torch.device) -> Backend:
    from trainers.backends.torch_dist import DataParallelBackend

    if device.type == "cuda" and torch.cuda.device_count() < cfg.train.workers:
        raise ConfigError(f"backend dp with {cfg.train.workers} workers needs as many GPUs; "
                          f"{torch.cuda.device_count()} visible")
    return DataParallelBackend(device, cfg.train.workers)


@register("horovod")
def _horovod(cfg: Config, launch: Launch, device: torch.device) -> Backend:
    from trainers.backends.horovod import create_horovod

    return create_horovod(cfg, launch, device)


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


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve(cfg: Config, launch: Launch) -> str:
    """The backend's name, checked against the launch; raises ConfigError before anything starts."""
    name = choose_backend(cfg, launch)
    if name == "horovod":
        try:
            import trainers.backends.horovod  # noqa: F401  (fails without Horovod)
        except ImportError as e:
            hint = f"backend horovod needs Horovod with PyTorch support: run `make setup-horovod` ({e})"
            raise ConfigError(hint) from None
    if name not in BACKENDS:
        raise ConfigError(f"backend {name!r} is not available; known: {', '.join(sorted(BACKENDS))}")
    check_world(cfg, launch, name)
    if cfg.train.device == "cuda" and not torch.cuda.is_available():  # here, not after the data set is made
        raise ConfigError("train.device = 'cuda' but no GPU is visible; use --set train.device=cpu")
    return name


def horovod_available() -> bool:
    """Whether Horovod with PyTorch support imports here (the study runner skips Horovod runs otherwise)."""
    try:
        import horovod.torch  # noqa: F401  Horovod
    except Exception:  # ImportError, or a build without PyTorch support
        return False
    return True


def torchrun_command(python: str) -> list[str]:
    """torchrun as a module of this interpreter (no console script needed)."""
    return [python, "-m", "torch.distributed.run"]


def create(cfg: Config, launch: Launch, name: str) -> Backend:
    return BACKENDS[name](cfg, launch, pick_device(cfg, launch))
