"""The interface the training loop sees, whatever runs the data parallelism underneath."""
from __future__ import annotations

import socket

import torch
import torch.nn as nn


class Backend:
    """One process's view of data-parallel training. Subclasses override what differs from one worker."""

    name = "single"
    backward_passes_per_step = 1  # > 1: local gradient accumulation before one allreduce (Horovod)
    batch_multiplier = 1  # images a shard reads per step, in per-worker batches (DataParallel splits k of them)

    def __init__(self, device: torch.device, rank: int = 0, world_size: int = 1, local_rank: int = 0, workers: int = 1):
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.workers = workers  # logical data-parallel workers; an emulating process holds several

    def is_main(self) -> bool:
        return self.rank == 0

    def start_run(self, run_dir) -> None:
        """Called on every rank once the run folder is known (Horovod starts its Timeline there)."""

    def shards(self) -> list[tuple[int, int]]:
        """(shard, num_shards) pairs this process reads each step, per_worker_batch images each."""
        return [(self.rank, self.world_size)]

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        return optimizer

    def broadcast_initial_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Make every rank start from rank 0's parameters, buffers and optimizer state."""

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def any_rank(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def gather_objects(self, obj) -> list:
        """Every rank's `obj` (picklable), in rank order, on every rank (the telemetry samples of each node)."""
        return [obj]

    def close(self) -> None:
        pass

    def hosts(self) -> list[str]:
        return [socket.gethostname()]

    def describe(self) -> dict:
        return {
            "backend": self.name,
            "world_size": self.world_size,
            "workers": self.workers,
            "devices": [str(self.device)] if self.device.type == "cpu" else device_names(self.device),
            "hosts": self.hosts(),
        }


def device_names(device: torch.device) -> list[str]:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return [f"{device.type}:{index} {torch.cuda.get_device_name(index)}"]
