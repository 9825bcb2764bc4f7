"""The `node` scale: one machine with all its GPUs.

Quality studies run their W workers over P = min(W, GPUs) processes, one a GPU (W/P emulated workers in each,
trainers/backends/rank_workers.py); throughput studies measure real DDP/Horovod on 1...N of the node's GPUs, and a
run that asks for more GPUs than the node has is left out with a line. The node's GPU count: `--gpus N` (make GPUS=N),
else the GPUs visible here (torch.cuda.device_count()), else experiments/scales.toml [node.study] gpus (8), so a dry
run on a machine without GPUs prints the launches of an 8-GPU node.
"""
from __future__ import annotations

from pathlib import Path

from contract.config import ConfigError, find_scales_file, read_toml

SCALE = "node"
DEFAULT_GPUS = 8


def node_gpus(config: Path, requested: int | None = None) -> tuple[int, str]:
    """(the node's GPUs, where that number comes from)."""
    if requested is not None:
        if requested < 1:
            raise ConfigError(f"--gpus {requested}: a node has at least 1 GPU")
        return requested, "--gpus"
    try:
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # no usable CUDA here
        visible = 0
    if visible:
        return visible, "visible here"
    scales = find_scales_file(Path(config))
    gpus = (read_toml(scales).get(SCALE, {}).get("study", {}) if scales else {}).get("gpus", DEFAULT_GPUS)
    return int(gpus), "experiments/scales.toml [node.study] (none visible here; GPUS=N to change)"


def processes(workers: int, backend: str, gpus: int) -> int:
    """Processes a run starts on the node: one a GPU for DDP/Horovod, at most the node's GPUs (W/P workers each)."""
    return min(workers, gpus) if backend in ("ddp", "horovod") else 1


def fits(workers: int, backend: str, gpus: int, throughput: bool) -> bool:
    """Whether the node can run it: a throughput run measures W real GPUs (never emulated), DataParallel too."""
    return not (throughput or backend == "dp") or workers <= gpus
