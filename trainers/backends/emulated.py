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
    """BatchNorm2d whose training batch is k workers' batches stacked; each is normalised on its own statistics.

    No Python loop over workers: the (k*b, C, H, W) batch is viewed as (b, k*C, H, W), so one native batch-norm call
    treats each worker's channels as channels of their own, with the affine parameters repeated k times.
    """

    def __init__(self, num_features: int, workers: int, **kwargs):
        super().__init__(num_features, **kwargs)
        self.workers = workers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.workers
        if not self.training or k == 1:
            return super().forward(x)
        n, c, h, w = x.shape
        b = n // k
        grouped = x.view(k, b, c, h, w).transpose(0, 1).reshape(b, k * c, h, w)
        self.num_batches_tracked.add_(1)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        running_mean, running_var = self.running_mean.repeat(k), self.running_var.repeat(k)
        y = F.batch_norm(
            grouped, running_mean, running_var, self.weight.repeat(k), self.bias.repeat(k), True, momentum, self.eps
        )
        with torch.no_grad():  # keep worker 0's running statistics, as rank 0's are the ones a real run ends with
            self.running_mean.copy_(running_mean[:c])
            self.running_var.copy_(running_var[:c])
        return y.view(b, k, c, h, w).transpose(0, 1).reshape(n, c, h, w)


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
        return use_worker_batchnorm(model, self.workers).to(self.device)
