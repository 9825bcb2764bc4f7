"""PyTorch's sharded data parallelism, FSDP2 (`torch.distributed.fsdp.fully_shard`), full and hybrid.

Each rank keeps a 1/P slice of every parameter, of its gradient and of its optimizer state (ZeRO-3): a shard unit's
full weights are all-gathered just before its forward and backward and freed after them, and its gradients are
reduce-scattered, each rank receiving the mean over ranks of its own slice, which its optimizer steps. The numbers
are DDP's: the same mean gradient, the same update, summed in another order.

    fsdp  full sharding over all P ranks (a 1-D mesh)
    hsdp  hybrid: sharded within a node, replicated across nodes (a 2-D mesh, nodes x ranks a node); the all-gathers
          and reduce-scatters stay on the node's links, one all-reduce of each slice crosses between nodes

A model names its shard units (`shard_units()`: a transformer's blocks, as torchtitan shards them); one without is
sharded as one unit. What differs from DDP (torch_dist.py, whose process group and collectives this reuses):
checkpoints gather the shards into one state dict on rank 0 (checkpoint_state), and every rank validates in step
(each forward all-gathers). `comm_s` counts the backend's own collectives only: FSDP's all-gathers and
reduce-scatters run inside forward and backward, untimed.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

from contract.config import Config, ConfigError
from trainers.backends.torch_dist import DDPBackend
from trainers.launch import Launch

# Rank 0 gathers each full tensor onto its CPU (the other ranks receive nothing): a checkpoint as DDP's, one file
GATHER_TO_RANK0 = StateDictOptions(full_state_dict=True, cpu_offload=True)
# Every rank receives rank 0's full tensors and keeps its own slice of them
SCATTER_FROM_RANK0 = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
LOCAL_PREFIX = "module."  # W > P: the rank's workers' WorkerInterleaved around the model (rank_workers.py)


class FSDPBackend(DDPBackend):
    name = "fsdp"

    def __init__(self, cfg: Config, launch: Launch, device: torch.device):
        super().__init__(cfg, launch, device)  # the process group: NCCL between GPUs, gloo on CPU
        self.mesh = self.device_mesh(launch)
        self.fsdp: nn.Module | None = None  # the sharded root, from wrap_model on

    def device_mesh(self, launch: Launch) -> DeviceMesh:
        return init_device_mesh(self.device.type, (self.world_size,), mesh_dim_names=("shard",))

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        if self.local:  # this rank's W/P workers, each with its own BatchNorm statistics, inside the one sharded model
            model = self.local.wrap_model(model)
        broadcast_from_rank0(model)  # each rank then keeps its slice of rank 0's weights (DDP broadcasts them too)
        core = model.module if self.local else model
        for unit in getattr(core, "shard_units", list)():
            fully_shard(unit, mesh=self.mesh)  # PyTorch: gathered for its forward and backward, freed after them
        fully_shard(model, mesh=self.mesh)  # the root: every parameter not in a unit (embeddings, a tied head)
        self.fsdp = model
        return model

    def eval_model(self, model: nn.Module) -> nn.Module:
        """The sharded model itself: every rank validates the same batches (data.val_mode = "every_rank", the only
        mode check_world lets FSDP run), so each forward's all-gathers meet on every rank."""
        return model

    def micro_batches(self, images: torch.Tensor, target: torch.Tensor):
        if not self.local:
            return super().micro_batches(images, target)
        # PyTorch: no gradient reduction for all passes but the last: gradients accumulate unsharded, then one
        # reduce-scatter a step of the rank's accumulated gradient
        return self.local.micro_batches(images, target, self.no_sync)

    @contextmanager
    def no_sync(self):
        self.fsdp.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.fsdp.set_requires_gradient_sync(True)

    def checkpoint_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        """Every rank's slices gathered into whole tensors on rank 0 (the other ranks get empty dicts): the
        model's state dict as the bare model's, the optimizer's keyed by parameter name. Called on every rank."""
        # PyTorch: distributed checkpoint's state dicts, full (unsharded) and offloaded to rank 0's CPU
        model_state = get_model_state_dict(model, options=GATHER_TO_RANK0)
        optimizer_state = get_optimizer_state_dict(model, optimizer, options=GATHER_TO_RANK0)
        if self.local:
            model_state = {key.removeprefix(LOCAL_PREFIX): value for key, value in model_state.items()}
        return model_state, optimizer_state

    def load_checkpoint_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict,
                              optimizer_state: dict) -> None:
        """A checkpoint_state's dicts, read by every rank, into the sharded model and optimizer: each rank keeps
        its slices of rank 0's copy (broadcast, so every rank resumes from the same bits)."""
        if self.local:
            model_state = {LOCAL_PREFIX + key: value for key, value in model_state.items()}
        set_model_state_dict(model, model_state, options=SCATTER_FROM_RANK0)
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=SCATTER_FROM_RANK0)


class HSDPBackend(FSDPBackend):
    """Hybrid sharding: the mesh's rows are nodes (torchrun, srun and mpirun number a node's ranks together)."""

    name = "hsdp"

    def device_mesh(self, launch: Launch) -> DeviceMesh:
        per_node = launch.local_world_size  # whole nodes of two or more: backends.check_world
        mesh = init_device_mesh(self.device.type, (self.world_size // per_node, per_node), mesh_dim_names=("replicate", "shard"))
        check_rows_are_nodes(self.hosts(), per_node)
        return mesh


def check_rows_are_nodes(hosts: list[str], per_node: int) -> None:
    """Each row of the mesh, ranks k*per_node ... (k+1)*per_node - 1, on one host: otherwise "within a node"
    would shard across the slow links the hybrid mode is meant to keep them off."""
    rows = [hosts[start:start + per_node] for start in range(0, len(hosts), per_node)]
    mixed = [row for row in rows if len(set(row)) > 1]
    if mixed:
        raise ConfigError(f"backend hsdp needs each node's ranks numbered together; ranks {per_node} a row span "
                          f"hosts {sorted(set(mixed[0]))}: launch with block distribution (srun -m block)")


def broadcast_from_rank0(model: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (before sharding: each rank then slices the same tensors)."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor, src=0)
