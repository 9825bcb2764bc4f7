"""The `node` scale's GPU count (docs/scales.md): `--gpus N` (make GPUS=N), else the GPUs visible here, else
experiments/scales.toml [node.study] gpus (8), so a dry run on a machine without GPUs prints an 8-GPU node's launches.
How a run is placed on the node is the plan's (contract/plan.py, shared with `make cost`).
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
