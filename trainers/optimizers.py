"""The optimizer a run trains with: SGD as the thesis ran, or a large-batch optimizer from a library.

    sgd    torch.optim.SGD: momentum, weight decay on every parameter (pytorch/examples' main.py, the thesis)
    lars   timm.optim.Lars (You et al. 2017): SGD whose step for each tensor is scaled by the trust ratio
           trust_coefficient x |w| / (|g| + weight_decay x |w|)
    lamb   timm.optim.Lamb (You et al. 2019): Adam's update with the same per-tensor trust ratio (gradients
           clipped to a global norm of 1, timm's default)
    radam  torch.optim.RAdam (Liu et al. 2019): Adam whose variance estimate warms itself up
    adamw  torch.optim.AdamW (Loshchilov & Hutter 2019): Adam with weight decay decoupled from the gradient's
           moments (w -= lr x weight_decay x w each step), the transformers' optimizer (nanoGPT, torchtitan)

`exclude_bn_bias` (lars, lamb, adamw): the one-dimensional tensors -- BatchNorm's and LayerNorm's weights, every
bias -- are neither adapted nor decayed, as the LARS papers' ResNet-50 recipes do (timm adapts only a group with
weight decay); under AdamW they are not decayed and the matrices (embeddings included) are, as nanoGPT and
torchtitan group them.
The state of each is a plain `state_dict`, so checkpoints and resume treat them alike.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from contract.config import OPTIMIZERS, OptimConfig


def param_groups(model: nn.Module, weight_decay: float, exclude_bn_bias: bool) -> list[dict]:
    params = [p for p in model.parameters() if p.requires_grad]
    if not exclude_bn_bias:
        return [{"params": params, "weight_decay": weight_decay}]
    return [{"params": [p for p in params if p.ndim > 1], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: OptimConfig, lr: float) -> torch.optim.Optimizer:
    if cfg.name == "sgd":
        # foreach: the update as a few ops over all tensors, not a few per tensor (the default on CUDA only; on
        # the CPU ~0.5 ms less per step of the local 1-worker run, the same bits)
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                               foreach=True)
    if cfg.name == "radam":
        return torch.optim.RAdam(model.parameters(), lr=lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                                 foreach=True)
    groups = param_groups(model, cfg.weight_decay, cfg.exclude_bn_bias)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=(cfg.beta1, cfg.beta2), foreach=True)
    if cfg.name == "lars":
        from timm.optim import Lars

        return Lars(groups, lr=lr, momentum=cfg.momentum, trust_coeff=cfg.trust_coefficient)
    if cfg.name == "lamb":
        from timm.optim import Lamb

        return Lamb(groups, lr=lr, betas=(cfg.beta1, cfg.beta2))
    raise ValueError(f"unknown optimizer {cfg.name!r}; choose one of {', '.join(OPTIMIZERS)}")
