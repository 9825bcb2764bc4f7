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
