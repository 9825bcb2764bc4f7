"""How the model computes: precision, memory layout, torch.compile, cuDNN autotuning and determinism.

`[train] precision`: "fp32" strict IEEE (TF32 off, as on the thesis's P100s); "tf32" TF32 tensor-core math in
matmuls and convolutions; "bf16" autocast to bfloat16 (CPU too); "fp16" autocast to float16 with a gradient scaler,
checkpointed so resume stays exact, whose skipped steps (inf/NaN gradients) are counted, not taken for divergence.
`deterministic` asks for deterministic kernels everywhere, so a resumed GPU run ends bit-identical.
"""
from __future__ import annotations

import contextlib
import os
import resource
import sys

import torch
import torch.nn as nn

from contract.config import TrainConfig
from contract.machine import cpuinfo, onednn_isa, this_machine

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
def configure_torch(t: TrainConfig) -> None:
    """Process-wide switches; call before the first CUDA kernel (cuBLAS reads its workspace setting at init)."""
    tf32 = t.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32  # torch's default is True: fp32 would silently be TF32 convolutions
    torch.backends.cudnn.benchmark = t.cudnn_benchmark and not t.deterministic  # autotuning picks by timing
    torch.backends.cudnn.deterministic = t.deterministic
    if t.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS reductions
    torch.use_deterministic_algorithms(t.deterministic)


def machine_identity() -> dict:
    """This machine's identity (contract/machine.py), with the CPU kernels' ISA and first GPU torch reports."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return this_machine(torch.backends.cpu.get_cpu_capability(), gpu)


def cpu_description() -> dict:
    """The CPU and the kernels' instruction sets this process computes with: a result reruns bit-identically only
    with the same ATen capability and oneDNN ISA (and threads)."""
    return {"model": cpuinfo()[0], "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_isa": onednn_isa(),
            **{k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}}


class GlobalAvgPool(nn.Module):
    """AdaptiveAvgPool2d(1) as a mean: the same numbers, and a backward CUDA runs deterministically."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3), keepdim=True)


def use_deterministic_pooling(model: nn.Module) -> nn.Module:
    """Swap global adaptive average pooling (adaptive_avg_pool2d's CUDA backward has no deterministic kernel)."""
    for name, child in model.named_children():
        if isinstance(child, nn.AdaptiveAvgPool2d) and child.output_size in (1, (1, 1)):
            setattr(model, name, GlobalAvgPool())
        else:
            use_deterministic_pooling(child)
    return model


def prepare_model(model: nn.Module, t: TrainConfig) -> nn.Module:
    """Layout and kernels of the bare model, before a backend wraps it."""
    if t.deterministic:
        model = use_deterministic_pooling(model)
    if t.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


class Compute:
    """Autocast, the fp16 gradient scaler (and the steps it skipped) and the input layout of one run."""

    def __init__(self, t: TrainConfig, device: torch.device):
        self.dtype = AUTOCAST_DTYPES.get(t.precision)
        self.device_type = device.type
        self.channels_last = t.channels_last
        self.scaler = torch.amp.GradScaler(device.type) if t.precision == "fp16" else None
        self.skipped = torch.zeros((), dtype=torch.int64, device=device)  # optimizer steps the scaler skipped

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def layout(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def optimizer_step(self, backend, optimizer: torch.optim.Optimizer) -> None:
        """The backend's update; with fp16, a skipped step is counted in `skipped`, on the device: update() halves
        the scale exactly when step() skipped the update, and _get_scale_async() reads it without making the host
        wait (GradScaler has no public device-side view). All ranks skip alike: no collective."""
        if self.scaler is None:
            backend.optimizer_step(optimizer)
            return
        before = self.scaler._get_scale_async().clone()
        backend.optimizer_step(optimizer, self.scaler)
        self.skipped += self.scaler._get_scale_async() < before

    def take_skipped(self) -> int:
        """The steps skipped since the last call (one wait for the device: call it where the loop reads anyway)."""
        n = int(self.skipped)
        self.skipped.zero_()
        return n

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def peak_memory(device: torch.device) -> dict:
    """This process's peak memory so far, for its entry of the manifest's placement: on a GPU the peak of the
    tensors it allocated (torch.cuda.max_memory_allocated: the run's weights, gradients, optimizer state and
    activations, not the caching allocator's reserve); on the CPU its peak resident set (getrusage: its whole life,
    the interpreter included, loader processes not). The two measure different things: `peak_memory_of` says which."""
    if device.type == "cuda":
        return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)), "peak_memory_of": "cuda_allocated"}
    kib = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib, "peak_memory_of": "cpu_rss"}


# ---- Emulated workers per pass: the most whole workers whose forward/backward fits in GPU memory ---------------------
MEMORY_HEADROOM = 0.9  # a pass may use 90 % of the GPU: the optimizer state and allocator slack come on top


def largest_fitting_pass(try_pass, workers: int, fits=lambda: True) -> int:
    """Halve the workers per pass from all of them until `try_pass(n)` runs without CUDA running out of memory
    and `fits()` (the peak against the headroom) agrees; one worker per pass that does not fit is the user's
    error, raised as is."""
    n = workers
    while True:
        try:
            try_pass(n)
            if fits() or n == 1:
                return n
        except torch.cuda.OutOfMemoryError:
            if n == 1:
                raise
        n = (n + 1) // 2
