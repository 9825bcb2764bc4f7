"""A machine's identity, declared once: what a run's numbers depend on beyond its config and seed.

FIELDS are what every new manifest records (`machine`, written by the trainer from this_machine()), what a reference
machine's machine.toml declares, and what tools/reference_add.py compares: a run counts as a machine's only where
each field both sides know is the same, and a mismatch is one line naming the field. Runs migrated from before this
identity (tools/migrate_manifests.py) lack the fields they never measured (cores, memory, GPU model), so the CPU
model, which tells apart the two machines behind results/reference/, is the one field required.
"""
from __future__ import annotations

import json
import os
import platform
from typing import Any

from contract.versions import package_version

#: the fields of a machine's identity, in the order a mismatch is looked for
FIELDS = ("cpu_model", "isa", "cores", "memory_gib", "gpu_model", "torch")
#: what a run's manifest must record for its machine to be told at all (old manifests record it too)
REQUIRED = "cpu_model"


def cpuinfo() -> tuple[str | None, set[str]]:
    """The CPU's model name and feature flags from /proc/cpuinfo (Linux; elsewhere platform's name, no flags)."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return platform.processor() or None, set()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("model name") or platform.processor() or None, set(fields.get("flags", "").split())


# oneDNN's instruction sets, best first, with the /proc/cpuinfo flags each needs
ONEDNN_ISAS = [("AVX512_CORE_AMX", ("amx_tile", "avx512_bf16")), ("AVX512_CORE_BF16", ("avx512_bf16",)),
               ("AVX512_CORE_VNNI", ("avx512_vnni",)), ("AVX512_CORE", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
               ("AVX2_VNNI", ("avx_vnni", "avx2")), ("AVX2", ("avx2",)), ("AVX", ("avx",)), ("SSE41", ("sse4_1",))]


def onednn_isa() -> str | None:
    """The instruction set oneDNN's kernels compute with here: the CPU's best (its flags), capped where
    ONEDNN_MAX_CPU_ISA names a lower one. None where the flags cannot be read."""
    flags = cpuinfo()[1]
    best = next((isa for isa, needs in ONEDNN_ISAS if all(f in flags for f in needs)), None)
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    names = [isa for isa, _ in ONEDNN_ISAS]
    if best and cap in names and names.index(cap) > names.index(best):  # capped below the CPU's best
        return cap
    return best


def cpu_vector_isa() -> str | None:
    """onednn_isa in torch's names (get_cpu_capability: AVX512, AVX2, DEFAULT): the identity's isa for a process
    without torch (the TensorFlow trainer, whose oneDNN kernels dispatch on the same flags)."""
    isa = onednn_isa()
    if isa is None:
        return None
    return next((name for name in ("AVX512", "AVX2") if isa.startswith(name)), "DEFAULT")


def memory_gib() -> int | None:
    """The machine's memory in whole GiB (/proc/meminfo's MemTotal, rounded: the kernel's reserve moves it a little
    from boot to boot), None where it cannot be read."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / 2**30)
    except (OSError, ValueError, IndexError):
        return None
    return None


def this_machine(isa: str | None, gpu_model: str | None) -> dict[str, Any]:
    """This machine's identity. isa: torch's CPU capability and gpu_model: the first GPU's name (None without one),
    both from the caller that has torch loaded (contract/ never imports it)."""
    return {"cpu_model": cpuinfo()[0], "isa": isa, "cores": os.cpu_count(), "memory_gib": memory_gib(),
            "gpu_model": gpu_model, "torch": package_version("torch")}


def recorded(manifest: dict) -> dict[str, Any]:
    """The machine identity a run's manifest records (its `machine`); a field it does not know is absent."""
    machine = manifest.get("machine")
    return {k: machine[k] for k in FIELDS if k in machine} if isinstance(machine, dict) else {}


def mismatch(run: dict[str, Any], declared: dict[str, Any]) -> str:
    """Why a run's recorded identity is not the declared machine's ('' when it is): the first field that differs,
    or the CPU model when the run records none."""
    if run.get(REQUIRED) is None:
        return f"its manifest records no {REQUIRED}, so its machine cannot be told"
    for field in FIELDS:
        if field in run and field in declared and run[field] != declared[field]:
            return f"its {field} {run[field]!r} is not the machine's {declared[field]!r}"
    return ""


def key(manifest: dict | None) -> str:
    """The machine part of a run's identity, as one comparable string (contract/reader.py RUN_IDENTITY)."""
    return json.dumps(recorded(manifest if isinstance(manifest, dict) else {}), sort_keys=True)


# ---- A GPU's peak: the denominator of MFU (model FLOPs utilisation) ------------------------------------------------
# Dense tensor-core peaks by precision, FLOP/s, from NVIDIA's datasheets (the sparse figures halved); train.precision
# "fp32" is strict IEEE fp32 (no TF32), "bf16"/"fp16" autocast. Matched by the words of torch's device name, first
# match wins (an H100 SXM reports "NVIDIA H100 80GB HBM3"); a GPU not listed, and the CPU, have no peak: MFU unmeasured.
H100_SXM = {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12}
GPU_PEAK_FLOPS: tuple[tuple[tuple[str, ...], dict[str, float]], ...] = (
    (("H100", "PCIE"), {"fp32": 51.2e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12}),
    (("H100", "HBM3"), H100_SXM),
    (("H100", "SXM"), H100_SXM),
    (("H200",), H100_SXM),  # the H100 SXM's chip and clocks with more memory
    (("A100",), {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}),
    (("V100", "SXM2"), {"fp32": 15.7e12, "fp16": 125e12}),
    (("P100", "SXM2"), {"fp32": 10.6e12, "fp16": 21.2e12}),  # the thesis's Taito GPUs' chip
    (("P100", "PCIE"), {"fp32": 9.3e12, "fp16": 18.7e12}),
)


def peak_flops(gpu_name: str | None, precision: str) -> float | None:
    """One GPU's dense peak FLOP/s at train.precision, or None where it is not known (the CPU: gpu_name None)."""
    words = (gpu_name or "").upper()
    for needed, peaks in GPU_PEAK_FLOPS:
        if gpu_name and all(word in words for word in needed):
            return peaks.get(precision)
    return None
