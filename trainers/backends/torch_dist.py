"""PyTorch's own data parallelism: DistributedDataParallel (one process per GPU) and DataParallel (one process)."""
from __future__ import annotations

import inspect
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from contract.config import Config
from trainers.backends.base import Backend, CommClock
from trainers import launch as launching
from trainers.launch import COLLECTIVE_TIMEOUT, Launch, bind_gloo_towards
from trainers.rendezvous import free_port
from trainers.backends.rank_workers import RankWorkers


class ExposedAllreduce:
    """A DDP communication hook's state: how long each backward waited for its gradient allreduce.

    The collectives run one after another, so the step's last bucket completes last, and it is launched when
    backward's own computation is about done: from its launch to its completion is the communication backward did
    not hide. Host clocks on CPU; on a GPU CUDA events, read once per epoch (no sync per step).
    """

    def __init__(self, clock: CommClock, device: torch.device):
        self.clock, self.cuda = clock, device.type == "cuda"
        self.pending: list[tuple] = []  # CUDA: (launch event, done event) pairs not yet read

    def stamp(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, launched, done) -> None:
        if self.cuda:
            self.pending.append((launched, done))
        else:
            self.clock.seconds += done - launched

    def settle(self) -> None:
        """CUDA: read the recorded events (one synchronisation, at the end of an epoch)."""
        if self.pending:
            torch.cuda.synchronize()
            self.clock.seconds += sum(a.elapsed_time(b) for a, b in self.pending) / 1000.0
            self.pending.clear()


def timed_allreduce_hook(state: ExposedAllreduce, bucket):
    """PyTorch's default allreduce hook (average over ranks), timed for the step's last bucket."""
    if not bucket.is_last():
        return default_hooks.allreduce_hook(None, bucket)
    launched = state.stamp()

    def done(fut):
        state.add(launched, state.stamp())
        return fut.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


class DDPBackend(Backend):
    name = "ddp"

    def __init__(self, cfg: Config, launch: Launch, device: torch.device):
        super().__init__(cfg, launch, device)
        init_method = rendezvous(cfg.train.init_method, launch, device)
        # rank 0's buffers are the ones saved and evaluated; other ranks' only matter when they validate a shard
        self.broadcast_buffers = cfg.data.val_mode == "sharded"
        # W logical workers over P ranks (W > P): W/P emulated workers in this rank (rank_workers.py)
        if self.workers > self.world_size:
            self.local = RankWorkers(device, self.rank, self.world_size, self.workers, cfg.train.workers_per_pass)
            self.workers_per_pass = self.local.workers_per_pass
        self.allreduce_wait = ExposedAllreduce(self.comm, device)  # the gradient allreduce's exposed time
        self.ddp: nn.parallel.DistributedDataParallel | None = None  # the model's wrapper, from wrap_model on
        # PyTorch: NCCL between GPUs, gloo on CPU; the thesis's shared-file init when init_method is file://
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            init_method=init_method,
            rank=self.rank,
            world_size=self.world_size,
            timeout=COLLECTIVE_TIMEOUT,
        )
        launching.started_process_group = True  # the process ends through launch.end_process

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        if self.local:  # this rank's workers, each with its own BatchNorm statistics, inside the one DDP replica
            model = self.local.wrap_model(model)
        # PyTorch: DDP broadcasts rank 0's parameters and buffers here, and (broadcast_buffers) the buffers again
        # before each forward: the running statistics every rank then evaluates with are rank 0's. Without sharded
        # validation only rank 0's are ever used (saved, evaluated), so the per-step broadcast is left out.
        # gradient_as_bucket_view: gradients live in DDP's allreduce buckets, saving a copy each way per step.
        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                                  **buffer_sync(self.broadcast_buffers))
        ddp.register_comm_hook(self.allreduce_wait, timed_allreduce_hook)  # PyTorch: the default allreduce, timed
        self.ddp = ddp
        return ddp

    def eval_model(self, model: nn.Module) -> nn.Module:
        """Sharded validation: rank 0's buffers broadcast once, then the replica inside DDP. DDP's own forward would
        broadcast them before every batch, a collective per batch, and ranks whose shards have unequal batch counts
        (1 validation image on 2 ranks) would wait on each other until the timeout. Eval mode changes no buffer, so
        the numbers are those of DDP's per-batch broadcast."""
        if not self.broadcast_buffers:
            return model
        for buffer in self.ddp.module.buffers():
            dist.broadcast(buffer, src=0)
        return self.ddp.module

    def unwrap(self, model: nn.Module) -> nn.Module:
        model = super().unwrap(model)
        return model.module if self.local else model  # the local workers' WorkerInterleaved: its model inside

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor):
        if not self.local:
            return super().micro_batches(images, target)
        # PyTorch: no_sync() for all passes but the last: one allreduce a step, of the rank's accumulated gradient
        return self.local.micro_batches(images, target, self.ddp.no_sync)

    def comm_seconds(self) -> float:
        self.allreduce_wait.settle()
        return self.comm.seconds

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        with self.comm.timing():
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # PyTorch: sums of correct/total, not means of means
        return tensor

    def any_rank(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        with self.comm.timing():
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return bool(t.item())

    def barrier(self) -> None:
        dist.barrier()

    def gather_objects(self, obj) -> list:
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, obj)  # PyTorch: pickled through the process group (NCCL: on the GPU)
        return gathered

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def hosts(self) -> list[str]:
        names: list = [None] * self.world_size
        dist.all_gather_object(names, super().hosts()[0])
        return names  # rank order: which host each rank ran on


def rendezvous(init_method: str, launch: Launch, device: torch.device) -> str:
    """The process group's init method (train.init_method, else env://, whose address and port default to the
    launch's); on CPU, gloo bound to the interface that reaches the rendezvous host."""
    init = init_method or "env://"
    if init == "env://":
        os.environ.setdefault("MASTER_ADDR", launch.master_addr or "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(launch.master_port or free_port()))
    if device.type == "cpu":
        bind_gloo_towards(os.environ.get("MASTER_ADDR") or launch.master_addr, launch)
    return init


def buffer_sync(every_forward: bool) -> dict:
    """DDP's option for broadcasting rank 0's buffers before each forward (renamed in torch 2.14; both keep the
    broadcast at construction)."""
    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": every_forward}
    return {"broadcast_buffers": every_forward}


class DataParallelBackend(Backend):
    """nn.DataParallel: one process splits each batch over the node's GPUs (the seed-004 comparison)."""

    name = "dp"

    def __init__(self, cfg: Config, launch: Launch, device: torch.device):
        super().__init__(cfg, launch, device)
        self.batch_multiplier = self.workers

    def shards(self) -> list[tuple[int, int]]:
        return [(0, 1)]

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        if self.device.type == "cuda":
            return nn.DataParallel(model, device_ids=list(range(self.workers)))
        return model  # on CPU DataParallel is one replica: the same computation on the whole batch

    def describe(self) -> dict:
        info = super().describe()
        if self.device.type == "cuda":
            info["devices"] = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(self.workers)]
        return info
