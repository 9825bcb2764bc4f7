"""k data-parallel workers emulated in one process: exactly synchronous data-parallel SGD.

Each step reads k per-worker batches in a k-replica DistributedSampler's order, normalises each with its own
BatchNorm statistics, averages the gradients and takes one optimizer step. Running statistics follow worker 0, as
in a real run (DDP broadcasts rank 0's buffers, Horovod saves rank 0's). When k batches don't fit in memory the step
runs in passes of `workers_per_pass` whole workers, gradients accumulating to the same mean.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from contract.config import Config
from trainers.backends.base import Backend
from trainers.launch import Launch
from trainers.compute import MEMORY_HEADROOM, largest_fitting_pass


class WorkerBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training batch is k workers' batches, interleaved: row i * k + j is image i of worker j.
    In that order the (b * k, C, H, W) batch is, without a copy, the (b, k * C, H, W) batch whose channel group j is
    worker j's: one native batch-norm call normalises each worker on its own statistics."""

    def __init__(self, num_features: int, workers: int, **kwargs):
        super().__init__(num_features, **kwargs)
        self.workers = workers
        self.update_stats = True  # False in later passes: worker 0, in the first pass, owns the running statistics

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.workers
        if not self.training:
            return super().forward(x)
        if not self.update_stats:  # batch statistics only: no running statistics, no num_batches_tracked
            n, c, h, w = x.shape
            y = F.batch_norm(x.reshape(n // k, k * c, h, w), None, None, self.weight.repeat(k),
                             self.bias.repeat(k), True, 0.0, self.eps)
            return y.reshape(n, c, h, w)
        if k == 1:
            return super().forward(x)
        n, c, h, w = x.shape
        grouped = x.reshape(n // k, k * c, h, w)  # a view when contiguous (NCHW); a copy in channels_last
        self.num_batches_tracked.add_(1)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        running_mean, running_var = self.running_mean.repeat(k), self.running_var.repeat(k)
        y = F.batch_norm(
            grouped, running_mean, running_var, self.weight.repeat(k), self.bias.repeat(k), True, momentum, self.eps
        )
        with torch.no_grad():  # keep worker 0's running statistics, as rank 0's are the ones a real run ends with
            self.running_mean.copy_(running_mean[:c])
            self.running_var.copy_(running_var[:c])
        return y.reshape(n, c, h, w)


class WorkerInterleaved(nn.Module):
    """Runs a batch of k workers' stacked batches (worker-major, as the sampler gives them) in worker-interleaved
    order, so every WorkerBatchNorm2d inside sees its workers without copying; outputs come back worker-major.
    Two small copies (the images and the logits) replace two copies of every batch-norm input and output. A model
    without BatchNorm (a GPT: its workers share no statistic) runs the batch as it is: the rows' order changes no
    number, and its outputs need not be a row a sample (a sequence's logits are a row a token)."""

    def __init__(self, module: nn.Module, workers: int):
        super().__init__()
        self.module = module
        self.workers = workers
        self.reorders = any(isinstance(m, WorkerBatchNorm2d) for m in module.modules())

    def set_pass(self, workers: int, first: bool) -> None:
        """The next forward holds `workers` workers; only the first pass of a step updates running statistics."""
        if (workers, first) == getattr(self, "_pass", (self.workers, True)):
            return
        self.workers, self._pass = workers, (workers, first)
        for m in self.module.modules():
            if isinstance(m, WorkerBatchNorm2d):
                m.workers, m.update_stats = workers, first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.workers
        if not self.training or k == 1:  # evaluation uses running statistics: the order does not matter
            return self.module(x)
        if x.shape[0] % k:
            raise ValueError(f"a batch of {x.shape[0]} images does not split into {k} equal worker batches")
        if not self.reorders:
            return self.module(x)
        out = self.module(_swap_leading(x, k, x.shape[0] // k))
        return _swap_leading(out, x.shape[0] // k, k)


def _swap_leading(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Reorder the first dimension from (rows, cols) to (cols, rows) order."""
    return t.reshape(rows, cols, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def use_worker_batchnorm(model: nn.Module, workers: int) -> nn.Module:
    """Swap every BatchNorm2d for a WorkerBatchNorm2d with the same state (state_dict keys unchanged)."""
    for name, child in model.named_children():
        if type(child) is nn.BatchNorm2d:
            replacement = WorkerBatchNorm2d(
                child.num_features, workers, eps=child.eps, momentum=child.momentum, affine=child.affine
            )
            replacement.load_state_dict(child.state_dict())
            setattr(model, name, replacement.to(child.weight.device))
        else:
            use_worker_batchnorm(child, workers)
    return model


class EmulatedWorkers:
    """k workers in one process, with their own BatchNorms, in passes: for EmulatedBackend and RankWorkers."""

    def __init__(self, device: torch.device, workers: int, workers_per_pass: int = 0):
        self.device, self.workers = device, workers
        # 0 = auto: one pass on CPU (memory is rarely the limit there); on a GPU the trainer measures what fits
        self.workers_per_pass = min(workers_per_pass, workers) if workers_per_pass else 0
        if not self.workers_per_pass and device.type != "cuda":
            self.workers_per_pass = workers
        self.interleaved: WorkerInterleaved | None = None  # the model's wrapper, from wrap_model on

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.interleaved = WorkerInterleaved(use_worker_batchnorm(model, self.workers), self.workers).to(self.device)
        return self.interleaved

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor):
        """Passes of whole workers (the last may hold fewer); worker-major rows, so each pass is a slice of the
        images and one of the targets (a sequence's targets are a row a token: as many rows a worker as tokens)."""
        per_pass = self.workers_per_pass or self.workers
        if per_pass >= self.workers:
            self.interleaved.set_pass(self.workers, first=True)
            yield images, target
            return
        batch, targets = len(images) // self.workers, len(target) // self.workers  # one worker's rows of each
        for first in range(0, self.workers, per_pass):
            k = min(per_pass, self.workers - first)
            self.interleaved.set_pass(k, first=first == 0)
            yield images[first * batch:(first + k) * batch], target[first * targets:(first + k) * targets]
        self.interleaved.set_pass(self.workers, first=True)

    def fit_passes(self, optimizer: torch.optim.Optimizer, try_pass, pinned: int | None = None) -> str | None:
        """workers_per_pass = 0 (auto) on a GPU: the most whole workers one pass holds, measured by try_pass(n),
        the trainer's forward/backward of n workers' batches of zeros, with the running statistics left alone;
        `pinned`, a resumed run's measure at its start, is taken as it is: the same passes, the same rounding."""
        if self.workers_per_pass:  # set in the config, or one pass (the CPU)
            return None
        if pinned:
            self.workers_per_pass = pinned
            return None
        total = torch.cuda.get_device_properties(self.device).total_memory

        def trial(n: int) -> None:
            optimizer.zero_grad()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.interleaved.set_pass(n, first=False)
            try_pass(n)
            torch.cuda.synchronize(self.device)

        try:
            self.workers_per_pass = largest_fitting_pass(
                trial, self.workers, lambda: torch.cuda.max_memory_allocated(self.device) <= MEMORY_HEADROOM * total)
        finally:
            optimizer.zero_grad()
            self.interleaved.set_pass(self.workers, first=True)
            torch.cuda.empty_cache()
        return f"=> {self.workers_per_pass} of {self.workers} emulated workers per forward/backward pass"


class EmulatedBackend(Backend):
    """train.workers workers emulated in this one process (EmulatedWorkers)."""

    name = "emulated"

    def __init__(self, cfg: Config, launch: Launch, device: torch.device):
        super().__init__(cfg, launch, device)
        self.emulated = EmulatedWorkers(device, self.workers, cfg.train.workers_per_pass)

    @property
    def workers_per_pass(self) -> int:
        return self.emulated.workers_per_pass  # 0 until fit_passes measured it (auto on a GPU)

    def shards(self) -> list[tuple[int, int]]:
        return [(worker, self.workers) for worker in range(self.workers)]

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return self.emulated.wrap_model(model)

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor):
        return self.emulated.micro_batches(images, target)

    def fit_passes(self, optimizer: torch.optim.Optimizer, try_pass, pinned: int | None = None) -> str | None:
        return self.emulated.fit_passes(optimizer, try_pass, pinned)

    def describe(self) -> dict:
        return {**super().describe(), "workers_per_pass": self.workers_per_pass or self.workers}
