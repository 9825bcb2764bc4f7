"""Emulated workers in one process: the same outputs, gradients and BatchNorm statistics as k separate replicas."""
import copy

import pytest
import torch
import torch.nn as nn

from trainers.backends.emulated import WorkerInterleaved, use_worker_batchnorm
from contract.config import ModelConfig
from trainers.models import build_model

K, B = 4, 3


def replicas_step(model, images, target):
    """The reference: k real replicas, each normalising its own batch; gradients averaged as an allreduce does."""
    outputs, grads, replicas = [], None, []
    for j in range(K):
        replica = copy.deepcopy(model).train()
        out = replica(images[j * B:(j + 1) * B])
        nn.functional.cross_entropy(out, target[j * B:(j + 1) * B]).backward()
        g = [p.grad / K for p in replica.parameters()]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        outputs.append(out.detach())
        replicas.append(replica)
    return torch.cat(outputs), grads, replicas[0]


def test_emulated_step_equals_k_replicas():
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="cifar_resnet8", num_classes=10, width=4))
    images, target = torch.randn(K * B, 3, 16, 16), torch.randint(0, 10, (K * B,))
    expected_out, expected_grads, worker0 = replicas_step(model, images, target)

    emulated = WorkerInterleaved(use_worker_batchnorm(copy.deepcopy(model), K), K).train()
    out = emulated(images)
    nn.functional.cross_entropy(out, target).backward()

    assert torch.allclose(out, expected_out, atol=1e-5)
    for got, want in zip(emulated.module.parameters(), expected_grads):
        assert torch.allclose(got.grad, want, atol=1e-5)
    for name, buffer in emulated.module.state_dict().items():  # running statistics: worker 0's, as rank 0 keeps
        assert torch.allclose(buffer.float(), worker0.state_dict()[name].float(), atol=1e-6), name


def test_evaluation_ignores_the_worker_order():
    model = WorkerInterleaved(use_worker_batchnorm(build_model(ModelConfig(name="cifar_resnet8", num_classes=10,
                                                                              width=4)), K), K).eval()
    images = torch.randn(5, 3, 16, 16)  # any size: running statistics, no workers
    assert torch.allclose(model(images), model.module(images))


def test_a_batch_that_does_not_split_into_equal_worker_batches_is_refused():
    model = WorkerInterleaved(nn.Identity(), K).train()
    with pytest.raises(ValueError, match="does not split into 4 equal worker batches"):
        model(torch.randn(K * B + 1, 3))
