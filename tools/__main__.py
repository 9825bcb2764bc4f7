"""The tools' one entry point: python -m tools NAME [ARGS...] (python -m tools NAME --help for each)."""
from __future__ import annotations

import sys

from contract.cli import command_word, one_line_errors
from contract.config import DataError
from slurm.client import NoConfiguration
from tools import (advisor_local, bench, bench_comm, bench_step, cluster_check, cluster_probe, compact_runs, data_bench,
                   exp13_next, gpu_check, link_sweep, migrate_manifests, noise_scale, reference_add, screenshot,
                   step_split, telemetry_overhead)

TOOLS = {
    "bench": (bench, "the trainer against a hand-written loop, and emulated workers' cost (a GPU: the GPU bench)"),
    "bench-step": (bench_step, "the local step's time, before/after, with channels_last and compile variants"),
    "bench-comm": (bench_comm, "DDP vs Horovod throughput on CPU processes, and the communication share"),
    "data-bench": (data_bench, "images/s of torchvision's ImageFolder pipeline and ours on a folder"),
    "noise-scale": (noise_scale, "gradient noise scale B_simple of runs' models (McCandlish et al. 2018)"),
    "telemetry": (telemetry_overhead, "the utilisation sampler's overhead: `telemetry overhead CONFIG`"),
    "cluster-check": (cluster_check, "check a Slurm cluster layer by layer in minutes (make cluster-check CLUSTER=P)"),
    "cluster-probe": (cluster_probe, "one rank's part of a cluster-check job (started inside the job)"),
    "link-sweep": (link_sweep, "experiment 3 across the local cluster's hosts at several link rates (RQ2)"),
    "exp13-next": (exp13_next, "experiment 13's next rows (edge rates or the study) from its finished tuning runs"),
    "migrate-manifests": (migrate_manifests, "rewrite older run folders' manifest.json at the current version"),
    "compact-runs": (compact_runs, "gzip finished run folders' records and logs in place (the committed runs' form)"),
    "reference-add": (reference_add, "copy a study's finished runs into a committed reference machine's folder"),
    "advisor-local": (advisor_local, "the scaling advisor against experiment 3 on the local cluster at each link rate"),
    "step-split": (step_split, "one worker's step as forward, backward and optimizer, and its gradients (the advisor)"),
    "gpu-check": (gpu_check, "verify a GPU machine in ~10 minutes -> results/gpu_checks/<gpu>-<date>/"),
    "screenshot": (screenshot, "a report page's first screen in chromium, offline (make setup-browser) -> a PNG"),
}


def usage() -> str:
    return "usage: python -m tools NAME [ARGS...]\n" + "".join(f"  {name:12} {text}\n" for name, (_, text) in TOOLS.items())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    word = command_word(argv, TOOLS, usage(), "tool")
    if isinstance(word, int):
        return word
    module, _ = TOOLS[word]
    # NoConfiguration: a Slurm configuration gone mid-command is one line too
    return one_line_errors(lambda: module.main(argv[1:]), (DataError, NoConfiguration))

if __name__ == "__main__":
    sys.exit(main())
