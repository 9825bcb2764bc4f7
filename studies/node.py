"""The `node` scale: one machine with all its GPUs.

Quality studies run their W workers over P = min(W, GPUs) processes, one a GPU (W/P emulated workers in each,
trainers/backends/rank_workers.py); throughput studies measure real DDP/Horovod on 1...N of the node's GPUs, and a
run that asks for more GPUs than the node has is left out with a line; a study that launches several nodes
(experiment 3) is refused in one line (SCALE=thesis). The placement rules are the plan's (contract/plan.py, shared
with `make cost`); here: the node's GPU count. `--gpus N` (make GPUS=N), else the GPUs visible here
(torch.cuda.device_count()), else experiments/scales.toml [node.study] gpus (8), so a dry run on a machine without
GPUs prints the launches of an 8-GPU node.
"""
from __future__ import annotations

from pathlib import Path

from contract.plan import check_node_gpus, declared_node_gpus


def node_gpus(config: Path, requested: int | None = None) -> tuple[int, str]:
    """(the node's GPUs, where that number comes from)."""
    if requested is not None:
        return check_node_gpus(requested, "--gpus"), "--gpus"
    try:
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # no usable CUDA here
        visible = 0
    if visible:
        return check_node_gpus(visible, "GPUs visible here:"), "visible here"
    return declared_node_gpus(config), "experiments/scales.toml [node.study] (none visible here; GPUS=N to change)"
