"""Which sample goes to which worker and step: DistributedSampler's sharding, step batches, the loader.

One rule serves real ranks and emulated workers: epoch e's permutation is DistributedSampler's (randperm seeded by
seed + e, padded to a multiple of the world size, shard r takes r::world), and a step's batch is the concatenation
of its shards' next batches, so step s of k emulated workers is exactly step s of k real ranks (and of W logical
workers over P ranks: logical_shards).
"""

from __future__ import annotations

import functools
import math
import signal
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate


def epoch_permutation(n: int, epoch: int, seed: int, shuffle: bool = True) -> list[int]:
    """DistributedSampler's order of all n indices in epoch `epoch` (before padding and sharding)."""
    if not shuffle:
        return list(range(n))
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n, generator=g).tolist()


def _pad(indices: list[int], num_shards: int) -> list[int]:
    """Wrap around to a multiple of num_shards, exactly as DistributedSampler(drop_last=False) does."""
    total = math.ceil(len(indices) / num_shards) * num_shards
    pad = total - len(indices)
    reps = math.ceil(pad / len(indices)) if indices else 0
    return indices + (indices * reps)[:pad]


def logical_shards(rank: int, world_size: int, workers: int) -> list[tuple[int, int]]:
    """The (shard, num_shards) pairs rank `rank` of `world_size` reads with `workers` logical workers: workers
    rank * k ... (rank + 1) * k - 1, k = workers / world_size, whose step batch is that slice of one process's."""
    if world_size < 1 or workers % world_size or not 0 <= rank < world_size:
        raise ValueError(f"{workers} workers do not split evenly over {world_size} ranks (rank {rank})")
    k = workers // world_size
    return [(rank * k + j, workers) for j in range(k)]


def shard_indices(n: int, num_shards: int, shard: int, epoch: int, seed: int, shuffle: bool = True) -> list[int]:
    """The indices DistributedSampler(num_replicas=num_shards, rank=shard, shuffle, seed) gives in `epoch`."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not in 0..{num_shards - 1}")
    return _pad(epoch_permutation(n, epoch, seed, shuffle), num_shards)[shard::num_shards]


class StepBatchSampler:
    """Per optimizer step, the concatenated indices of the given shards' next `per_shard_batch` samples.

    shards=[(rank, world)] for a real rank; [(0, k), ..., (k-1, k)] for k emulated workers. Every shard holds
    ceil(n / world) samples (DistributedSampler(drop_last=False)), so the last step's micro-batches are smaller but
    equal across shards. len() is a full epoch's steps; iteration yields steps start_step..len()-1 (mid-epoch
    resume); set_epoch(e, start_step) reuses the sampler (and the loader's persistent workers).
    """

    def __init__(self, n: int, shards: list[tuple[int, int]], per_shard_batch: int, epoch: int = 0, seed: int = 0,
                 shuffle: bool = True, start_step: int = 0):
        worlds = {w for _, w in shards}
        if not shards or len(worlds) != 1 or any(not 0 <= r < w for r, w in shards):
            raise ValueError(f"shards must be (rank, world) pairs of one world size, got {shards}")
        if per_shard_batch < 1 or n < 1:
            raise ValueError(f"need n >= 1 and per_shard_batch >= 1, got n={n}, per_shard_batch={per_shard_batch}")
        self.n, self.shards, self.per_shard_batch = n, list(shards), per_shard_batch
        self.world = worlds.pop()
        self.seed, self.shuffle = seed, shuffle
        self.shard_size = math.ceil(n / self.world)  # DistributedSampler's num_samples
        self.steps_per_epoch = math.ceil(self.shard_size / per_shard_batch)
        self.set_epoch(epoch, start_step)

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        if not 0 <= start_step <= self.steps_per_epoch:
            raise ValueError(f"start_step {start_step} is not in 0..{self.steps_per_epoch}")
        self.epoch, self.start_step = epoch, start_step

    def __len__(self) -> int:
        return self.steps_per_epoch

    def micro_batch(self, step: int) -> int:
        """Each shard's batch size at `step` (per_shard_batch, except perhaps the last step)."""
        return min(self.per_shard_batch, self.shard_size - step * self.per_shard_batch)

    def __iter__(self):
        padded = _pad(epoch_permutation(self.n, self.epoch, self.seed, self.shuffle), self.world)
        per_shard = [padded[r::self.world] for r, _ in self.shards]
        b = self.per_shard_batch
        for step in range(self.start_step, self.steps_per_epoch):
            yield [i for idx in per_shard for i in idx[step * b:(step + 1) * b]]


def val_indices(n: int, world: int, rank: int, mode: str) -> list[int]:
    """Validation indices of one rank: "every_rank" = all n (the thesis's scripts), "sharded" = rank::world
    without padding, so summing correct and total over ranks counts each image exactly once."""
    if mode == "every_rank":
        return list(range(n))
    if mode == "sharded":
        return list(range(rank, n, world))
    raise ValueError(f"validation mode must be every_rank or sharded, not {mode!r}")


class IndexBatches:
    """Fixed-order batches of a list of indices (validation); the last one may be smaller."""

    def __init__(self, indices: list[int], batch_size: int):
        self.indices, self.batch_size = list(indices), batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.indices) / self.batch_size)

    def __iter__(self):
        for s in range(0, len(self.indices), self.batch_size):
            yield self.indices[s:s + self.batch_size]


# ---- The loader ------------------------------------------------------------------------------------------------------
class Batch(NamedTuple):
    images: torch.Tensor
    targets: torch.Tensor
    skipped: tuple[int, ...]  # indices of this batch's unreadable files (replaced in training, dropped in validation)


def _unreadable(bad) -> tuple[int, ...]:
    """An item's unreadable-file indices; 0 is accepted for "none" (datasets that never skip)."""
    if isinstance(bad, int):
        if bad:
            raise TypeError("a dataset item reports its unreadable files as a tuple of sample indices, not a count")
        return ()
    return tuple(bad)


def collate(items, stack=None) -> Batch:
    """Stack (image, target, unreadable) items, dropping those without an image (unreadable validation files);
    keep the unreadable indices (workers are other processes, the loop counts distinct files per epoch).
    A dataset with __getitems__ (memory.DecodedDataset) makes the whole Batch itself: it passes through.
    `stack`: a plug-in workload's collate of the kept (x, y) pairs (workloads/), in place of stacking them here."""
    if isinstance(items, Batch):
        return items
    unreadable = tuple(sorted({i for _, _, bad in items for i in _unreadable(bad)}))
    kept = [(x, y) for x, y, _ in items if x is not None]
    if stack is not None and kept:
        return Batch(*stack(kept), unreadable)
    if not kept:
        return Batch(torch.empty(0), torch.empty(0, dtype=torch.long), unreadable)
    images, targets = zip(*kept)
    if hasattr(images[0], "collate"):  # the GPU decoder's encoded items batch themselves
        return Batch(images[0].collate(list(images)), torch.as_tensor(targets, dtype=torch.long), unreadable)
    return Batch(default_collate(list(images)), torch.as_tensor(targets, dtype=torch.long), unreadable)


class _EpochTagged:
    """Sends (epoch, index) pairs to the dataset, so persistent workers' dataset copies need no set_epoch."""

    def __init__(self, batch_sampler):
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        epoch = getattr(self.batch_sampler, "epoch", None)
        for batch in self.batch_sampler:
            yield batch if epoch is None else [(epoch, i) for i in batch]


def _ignore_preemption_signals(worker_id: int) -> None:
    """Loader workers leave SIGTERM/SIGUSR1 to the training process, which checkpoints and stops them.

    Slurm signals every process of a job step; a worker killed by the signal would fail the run instead."""
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


def make_loader(dataset, batch_sampler, loader_workers: int, pin_memory: bool = False, stack=None) -> DataLoader:
    """A DataLoader over batch_sampler (StepBatchSampler / IndexBatches / any iterable of index lists)
    yielding Batch(images, targets, skipped indices); workers persist across epochs when loader_workers > 0.
    Change epochs with batch_sampler.set_epoch(e, start_step) on the sampler passed in. `stack`: collate's."""
    return DataLoader(dataset, batch_sampler=_EpochTagged(batch_sampler), num_workers=loader_workers,
                      collate_fn=functools.partial(collate, stack=stack) if stack else collate,
                      pin_memory=pin_memory, persistent_workers=loader_workers > 0,
                      worker_init_fn=_ignore_preemption_signals if loader_workers > 0 else None)
