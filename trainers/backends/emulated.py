"""k data-parallel workers emulated in one process: exactly synchronous data-parallel SGD.

Each step reads k per-worker batches in the order a k-replica DistributedSampler gives them, normalises each with
its own BatchNorm batch statistics, averages the gradients (the mean loss over the k equal batches) and takes one
optimizer step. Running statistics follow worker 0, as in a real run: DDP broadcasts rank 0's buffers before each
forward and Horovod saves rank 0's.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainers.backends.base import Backend


class WorkerBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training batch is k workers' batches, interleaved: row i * k + j is image i of worker j.

    In that order the (b * k, C, H, W) batch is, without a copy, the (b, k * C, H, W) batch whose channel group j is
    worker j's: one native batch-norm call normalises each worker on its own statistics, with the affine parameters
    repeated k times. WorkerInterleaved puts a model's batches in that order.
    """

    def __init__(self, num_features: int, workers: int, **kwargs):
        super().__init__(num_features, **kwargs)
        self.workers = workers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.workers
        if not self.training or k == 1:
            return super().forward(x)
        n, c, h, w = x.shape
        grouped = x.reshape(n // k, k * c, h, w)  # a view: conv outputs are contiguous
        self.num_batches_tracked.add_(1)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        running_mean, running_var = self.running_mean.repeat(k), self.running_var.repeat(k)
        y = F.batch_norm(
            grouped, running_mean, running_var, self.weight.repeat(k), self.bias.repeat(k), True, momentum, self.eps
        )
        with torch.no_grad():  # keep worker 0's running statistics, as rank 0's are the ones a real run ends with
            self.running_mean.copy_(running_mean[:c])
            self.running_var.copy_(running_var[:c])
        return y.view(n, c, h, w)


class WorkerInterleaved(nn.Module):
    """Runs a batch of k workers' stacked batches (worker-major, as the sampler gives them) in worker-interleaved
    order, so every WorkerBatchNorm2d inside sees its workers without copying; outputs come back worker-major.
    Two small copies (the images and the logits) replace two copies of every batch-norm input and output."""

    def __init__(self, module: nn.Module, workers: int):
        super().__init__()
        self.module = module
        self.workers = workers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.workers
        if not self.training or k == 1:  # evaluation uses running statistics: the order does not matter
            return self.module(x)
        if x.shape[0] % k:
            raise ValueError(f"a batch of {x.shape[0]} images does not split into {k} equal worker batches")
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


class EmulatedBackend(Backend):
    name = "emulated"

    def shards(self) -> list[tuple[int, int]]:
        return [(worker, self.workers) for worker in range(self.workers)]

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return WorkerInterleaved(use_worker_batchnorm(model, self.workers), self.workers).to(self.device)
