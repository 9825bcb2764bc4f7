"""The interface the training loop sees, whatever runs the data parallelism underneath."""
from __future__ import annotations

import socket
import time
from contextlib import contextmanager

import torch
import torch.nn as nn

from contract.config import Config
from trainers.launch import Launch


class CommClock:
    """Seconds this process spent communicating (the `comm_s` of epoch and bench records), as its backend measures
    them: collectives it waits for, and the part of the gradient allreduce that backward did not hide."""

    def __init__(self):
        self.seconds = 0.0

    @contextmanager
    def timing(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start


class Backend:
    """One process's view of data-parallel training; subclasses override what differs from one worker. Built as
    `Backend(cfg, launch, device)` (backends.create) after its checks ran (backends.check_world)."""

    name = "single"
    backward_passes_per_step = 1  # > 1: local gradient accumulation before one allreduce (Horovod)
    batch_multiplier = 1  # images a shard reads per step, in per-worker batches (DataParallel splits k of them)
    workers_per_pass: int | None = None  # emulated workers per forward/backward pass (EmulatedBackend only)
    local = None  # DDP, Horovod with W workers over P < W ranks: this rank's W/P workers (rank_workers.RankWorkers)

    def __init__(self, cfg: Config, launch: Launch, device: torch.device):
        self.device = device
        self.rank = launch.rank
        self.world_size = launch.world_size
        self.local_rank = launch.local_rank
        self.workers = cfg.train.workers  # logical data-parallel workers; an emulating process holds several
        self.comm = CommClock()  # single and emulated never communicate: 0

    def comm_seconds(self) -> float:
        """Communication seconds so far (read at the start and end of an epoch: the difference is its comm_s)."""
        return self.comm.seconds

    def is_main(self) -> bool:
        return self.rank == 0

    def start_run(self, run_dir) -> None:
        """Called on every rank once the run folder is known (Horovod starts its Timeline there)."""

    def shards(self) -> list[tuple[int, int]]:
        """(shard, num_shards) pairs this process reads each step, per_worker_batch images each."""
        return self.local.shards() if self.local else [(self.rank, self.world_size)]

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def eval_model(self, model: nn.Module) -> nn.Module:
        """The model validation runs: the trained one, whose forward in eval mode calls no collective."""
        return model

    def unwrap(self, model: nn.Module) -> nn.Module:
        model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
        return getattr(model, "module", model)

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor):
        """The forward/backward passes of one step; their gradients accumulate before the optimizer steps."""
        n = self.backward_passes_per_step
        return zip(images.chunk(n), target.chunk(n)) if n > 1 else ((images, target),)

    def fit_passes(self, optimizer: torch.optim.Optimizer, try_pass, pinned: int | None = None) -> str | None:
        """Settle how a step splits into passes where that is left to measure (emulated workers on a GPU)."""
        return None

    def optimizer_step(self, optimizer: torch.optim.Optimizer, scaler=None) -> None:
        """One update; with fp16's gradient scaler, a step with inf/NaN gradients is skipped and the scale lowered."""
        if scaler is None:
            optimizer.step()
            return
        scaler.step(optimizer)
        scaler.update()

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        return optimizer

    def checkpoint_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        """The model's and optimizer's state dicts as rank 0 saves them, whole tensors; called on every rank (a
        sharding backend gathers its slices here)."""
        return self.unwrap(model).state_dict(), optimizer.state_dict()

    def load_checkpoint_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict,
                              optimizer_state: dict) -> None:
        """checkpoint_state's dicts, read from the checkpoint by every rank, back into the model and optimizer."""
        self.unwrap(model).load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)

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
        info = {"backend": self.name, "world_size": self.world_size, "workers": self.workers,
                "devices": self.devices(), "hosts": self.hosts()}
        return {**info, **self.local.describe()} if self.local else info


    def devices(self) -> list[str]:
        """Every rank's device, in rank order ("cuda:<local index> <name>"; "cpu" once on CPU)."""
        if self.device.type == "cpu":
            return [str(self.device)]
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        mine = [f"{self.device.type}:{index} {torch.cuda.get_device_name(index)}"]  # a rank may hold several
        return [name for names in self.gather_objects(mine) for name in names]
