"""train.cpu_isa: the CPU kernels' instruction set, pinned through environment variables that torch reads once,
when it loads. Torch-free on purpose: the trainer's command line pins them before anything imports torch, and
trainers/checks.py's check_cpu_isa checks afterwards that torch runs what was asked.
"""
from __future__ import annotations

import os
import sys

from contract.config import ConfigError, cpu_isa_env
from contract.machine import cpuinfo

ISA_FLAGS = {"default": (), "avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq")}


def check_cpu_has(cpu_isa: str) -> None:
    """ATen trusts ATEN_CPU_CAPABILITY: kernels of an instruction set the CPU lacks die of SIGILL mid-run."""
    flags = cpuinfo()[1]
    missing = [f for f in ISA_FLAGS.get(cpu_isa, ()) if f not in flags]
    if flags and missing:  # no flags known (not Linux): nothing to check against
        raise ConfigError(f"train.cpu_isa = {cpu_isa!r}: this CPU has no {cpu_isa} kernels (it lacks "
                          f"{', '.join(missing)}); pick an instruction set it has, or leave it empty")


def pin_cpu_isa(cpu_isa: str) -> None:
    """Put the pinned instruction set's variables into this process's environment while torch is not loaded yet,
    so a plain call does what restarting the process with them would (torch reads them when it loads; children
    inherit them). A process that already holds torch is left as it is: check_cpu_isa refuses it in one line."""
    wanted = cpu_isa_env(cpu_isa)
    if "torch" in sys.modules or all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    check_cpu_has(cpu_isa)  # before torch loads: it would trust them
    os.environ.update(wanted)
