"""W logical workers over P real ranks: W/P emulated workers inside each rank of a DDP or Horovod run.

Rank r holds logical workers r*W/P ... (r+1)*W/P - 1 (sampling.logical_shards), normalises each on its own batch
(emulated.py, in passes of train.workers_per_pass), accumulates their gradients and averages over the ranks once a
step: the mean over all W workers, as one process computes it, up to the order of the float sums (with the same
passes per worker the runs agree to rounding: tests/test_rank_workers.py). Rank 0's worker 0 is logical worker 0,
whose running statistics are kept.
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn as nn

from contract.config import ConfigError
from trainers.backends.emulated import EmulatedWorkers


def workers_per_rank(workers: int, world_size: int) -> int:
    """W / P, or a ConfigError saying what to change when P does not divide W."""
    if world_size < 1 or workers < world_size or workers % world_size:
        divisors = [p for p in range(1, workers + 1) if workers % p == 0]
        raise ConfigError(
            f"launched with {world_size} processes but train.workers = {workers}: the workers must split evenly over "
            f"the processes (W a multiple of P); use --set train.workers={world_size * math.ceil(workers / world_size)} "
            f"or launch {' or '.join(map(str, divisors))} processes"
        )
    return workers // world_size


class RankWorkers:
    """This rank's share of the logical workers, emulated (backends build one only when W > P: W == P keeps the
    plain one-worker-a-rank path)."""

    def __init__(self, device: torch.device, rank: int, world_size: int, workers: int, workers_per_pass: int):
        self.rank, self.world_size, self.workers = rank, world_size, workers
        self.per_rank = workers_per_rank(workers, world_size)
        # 0 = auto: all of them in one pass on the CPU; on a GPU one a pass (each pass one thesis GPU's batch).
        # Measuring what fits, as one process does, would run trial backward passes through the gradient allreduce.
        if not workers_per_pass and device.type == "cuda":
            workers_per_pass = 1
        self.emulated = EmulatedWorkers(device, self.per_rank, workers_per_pass)

    @property
    def workers_per_pass(self) -> int:
        return self.emulated.workers_per_pass or self.per_rank

    def passes(self) -> int:
        return math.ceil(self.per_rank / self.workers_per_pass)

    def shards(self) -> list[tuple[int, int]]:
        from trainers.data.sampling import logical_shards  # here: the backends' import stays free of the data stack

        return logical_shards(self.rank, self.world_size, self.workers)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """The model with one BatchNorm per local worker (WorkerInterleaved over WorkerBatchNorm2d), on the device."""
        return self.emulated.wrap_model(model)

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor, no_sync=None):
        """The emulated passes of one step; all but the last under `no_sync()` (DDP: gradients accumulate locally,
        the last backward allreduces their sum). The context stays open while the loop runs the pass's
        forward and backward (this generator is suspended at its yield meanwhile)."""
        last = self.passes() - 1
        for i, (x, y) in enumerate(self.emulated.micro_batches(images, target)):
            with no_sync() if no_sync is not None and i < last else nullcontext():
                yield x, y

    def describe(self) -> dict:
        return {"workers_per_rank": self.per_rank, "workers_per_pass": self.workers_per_pass}
