"""PyTorch's own data parallelism: DistributedDataParallel (one process per GPU) and DataParallel (one process)."""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn

from trainers.backends.base import Backend

# How long a collective may wait on a slow peer. A peer that dies closes its sockets and is noticed at once.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=int(os.environ.get("TRAINERS_COLLECTIVE_TIMEOUT_S", "300")))


class DDPBackend(Backend):
    name = "ddp"

    def __init__(self, device, rank, world_size, local_rank, workers, init_method: str):
        super().__init__(device, rank, world_size, local_rank, workers)
        # PyTorch: NCCL between GPUs, gloo on CPU; the thesis's shared-file init when init_method is file://
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=COLLECTIVE_TIMEOUT,
        )

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        # PyTorch: DDP broadcasts rank 0's parameters and buffers here, and the buffers again before each forward.
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, broadcast_buffers=True)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # PyTorch: sums of correct/total, not means of means
        return tensor

    def any_rank(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
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
        return sorted(set(names))


class DataParallelBackend(Backend):
    """nn.DataParallel: one process splits each batch over the node's GPUs (the seed-004 comparison)."""

    name = "dp"

    def __init__(self, device, workers):
        super().__init__(device, workers=workers)
        self.batch_multiplier = workers

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
