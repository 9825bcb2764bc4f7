"""Submitting a study's runs to a Slurm cluster: one `sbatch` of the experiment's slurm.sbatch per run."""
from __future__ import annotations

import math
import shlex
import shutil
import subprocess
import sys

from contract.config import DISTRIBUTED_BACKENDS, ConfigError
from contract.plan import Study, node_gpus_used
from slurm.profiles import ProfileError, load_profile, sbatch_argv
from studies.launch import REFUSED, REPO, planned_runs, refuse_unknown_runs, threads_per_process, write_planned


def placement(workers: int, backend: str, nodes: int, gpus_per_node: int) -> tuple[int, int, int]:
    """(nodes, tasks per node, GPUs per node) for one run on a cluster with `gpus_per_node` GPUs (0: CPU only)."""
    if backend not in DISTRIBUTED_BACKENDS:  # one process: single, emulated workers, or DataParallel over a node
        return 1, 1, min(workers, gpus_per_node) if backend == "dp" else min(1, gpus_per_node)
    if nodes > 1:
        per_node = workers // nodes
    elif gpus_per_node:
        nodes = math.ceil(workers / gpus_per_node)
        per_node = math.ceil(workers / nodes)
    else:
        per_node = workers
    if gpus_per_node and per_node > gpus_per_node:  # two ranks on one GPU would measure neither
        raise ConfigError(f"{workers} workers on {nodes} node(s) is {per_node} processes a node; the profile's nodes "
                          f"have {gpus_per_node} GPUs (its gpus_per_node)")
    return nodes, per_node, min(per_node, gpus_per_node)


def submit_all(study: Study, scale: str, cluster: str, out, dry_run: bool, gpus: int | None = None) -> int:
    try:
        profile = load_profile(cluster)
    except ProfileError as e:
        raise ConfigError(str(e)) from None
    script = study.experiment / "slurm.sbatch"
    if not script.is_file():
        raise ConfigError(f"{study.experiment} has no slurm.sbatch")
    if not dry_run:
        require_sbatch()
    failures, previous_job = 0, None
    plans = planned_runs(study, scale, out, gpus or profile.gpus_per_node or None)
    if not dry_run:
        refuse_unknown_runs(plans)
    # nodes that share one machine's cores would time each other: a throughput study's jobs wait for each other
    one_at_a_time = profile.shared_machine and study.kind == "throughput"
    for plan in plans:
        if plan.processes:  # the node scale: one exclusive node, one process a GPU (W/P workers each)
            nodes, per_node = 1, plan.processes
            gpus = node_gpus_used(plan.run.workers, plan.backend, plan.processes)  # DataParallel: W GPUs, 1 process
        else:
            nodes, per_node, gpus = placement(plan.run.workers, plan.backend, plan.run.nodes, profile.gpus_per_node)
        train_args = plan.trainer_args + (["--resume", "auto"] if plan.status not in ("missing",) else [])
        try:  # a run the profile's nodes cannot hold (more tasks a node than GPUs) is one line
            argv = sbatch_argv(
                profile, script, nodes, per_node, gpus, job_name=f"{study.experiment.name[:2]}-{plan.run.name}",
                time_limit=study.time_limit or None, output=plan.run_dir / "slurm-%j.out",
                env=job_env(plan, profile), train_args=train_args,
            )
        except ProfileError as e:
            raise ConfigError(f"{plan.run.name}: {e}") from None
        print(f"# {plan.describe(nodes, per_node)}")
        if plan.status in REFUSED:  # a dry run only: a submitting study has refused it above
            print(f"#   {plan.run_dir} holds {REFUSED[plan.status]}: the study would refuse to start")
        if plan.status in ("completed", "diverged"):
            print(f"#   skipped, already {plan.status}")
            continue
        if one_at_a_time and previous_job:
            argv[1:1] = [f"--dependency=afterany:{previous_job}"]
        print(shlex.join(argv), flush=True)
        if dry_run:
            previous_job = "<the previous job>"
        else:
            write_planned(plan)  # the job's trainer starts from it (and sbatch -o writes into its folder)
            result = subprocess.run(argv, capture_output=True, text=True)
            print(f"#   {result.stdout.strip() or result.stderr.strip()}")
            failures += result.returncode != 0
            previous_job = job_id(result.stdout) or previous_job
    return 1 if failures else 0


def require_sbatch() -> None:
    """One line before any run's config.json is written, where this machine cannot submit a job: a study half
    submitted would leave planned folders behind a FileNotFoundError."""
    if shutil.which("sbatch") is None:
        raise ConfigError("sbatch is not on PATH: submit from a Slurm login node (or `make cluster` for a local "
                          "cluster), or see the jobs first with --dry-run")


def job_env(plan, profile) -> dict[str, str]:
    """What the job script reads beyond the profile: the backend, this venv's Python, the harness; on a shared
    machine also each rank's threads, as a local run of the same shape gets them (studies/launch.py)."""
    env = {"BACKEND": plan.backend, "PYTHON": sys.executable, "HARNESS_DIR": str(REPO / "slurm")}
    if profile.shared_machine and plan.cfg.train.device == "cpu":
        env["OMP_NUM_THREADS"] = str(threads_per_process(plan, 1))
    return env


def job_id(sbatch_stdout: str) -> str | None:
    """The id in sbatch's "Submitted batch job 123"."""
    words = sbatch_stdout.split()
    return words[-1] if words and words[-1].isdigit() else None
