"""Submitting a study's runs to a Slurm cluster: one `sbatch` of the experiment's slurm.sbatch per run."""
from __future__ import annotations

import dataclasses
import json
import math
import shlex
import shutil
import sys
from pathlib import Path

from analysis.advisor import model as advisor
from contract.config import DISTRIBUTED_BACKENDS, ConfigError
from contract.placement import cpus_per_task_for, planned_line
from contract.plan import Study, node_gpus_used
from slurm.client import Clients, NoConfiguration
from slurm.profiles import ProfileError, load_profile, sbatch_argv
from studies.launch import REFUSED, REPO, planned_runs, refuse_unknown_runs, threads_per_process, write_planned
from studies.progress import print_comparison
from studies.tf_launch import tf_skip_line


def placement(workers: int, backend: str, nodes: int, gpus_per_node: int,
              ranks_per_node: int = 0) -> tuple[int, int, int]:
    """(nodes, tasks per node, GPUs per node) for one run on a cluster with `gpus_per_node` GPUs (0: CPU only, whose
    ranks a node are the profile's `ranks_per_node`, 0 = all on one node)."""
    if backend not in DISTRIBUTED_BACKENDS:  # one process: single, emulated workers, or DataParallel over a node
        return 1, 1, min(workers, gpus_per_node) if backend == "dp" else min(1, gpus_per_node)
    per_node_at_most = gpus_per_node or ranks_per_node
    if nodes > 1:
        per_node = workers // nodes
    elif per_node_at_most:
        nodes = math.ceil(workers / per_node_at_most)
        per_node = math.ceil(workers / nodes)
    else:
        per_node = workers
    if gpus_per_node and per_node > gpus_per_node:  # two ranks on one GPU would measure neither
        raise ConfigError(f"{workers} workers on {nodes} node(s) is {per_node} processes a node; the profile's nodes "
                          f"have {gpus_per_node} GPUs (its gpus_per_node)")
    return nodes, per_node, min(per_node, gpus_per_node)


def submit_all(study: Study, scale: str, cluster: str, out, dry_run: bool, gpus: int | None = None) -> int:
    """The study's exit code: 1 where an sbatch call failed (its line says why)."""
    return 1 if submit_jobs(study, scale, cluster, out, dry_run, gpus)[1] else 0


def submit_jobs(study: Study, scale: str, cluster: str, out, dry_run: bool, gpus: int | None = None,
                clients: Clients | None = None) -> tuple[list[str], int]:
    """The study's runs submitted, each line printed as it goes: (the job ids sbatch gave, in order, a dry run's
    its placeholder; how many sbatch calls failed), so a caller (tools/link_sweep.py) waits for the jobs without
    reading the lines. `clients`: the cluster's (default: its profile's, checked before anything is written)."""
    try:
        profile = load_profile(cluster)
    except ProfileError as e:
        raise ConfigError(str(e)) from None
    script = study.experiment / "slurm.sbatch"
    if not script.is_file():
        raise ConfigError(f"{study.experiment} has no slurm.sbatch")
    clients = None if dry_run else clients or slurm_clients(profile)  # before any run's config.json is written
    failed, submitted, jobs = 0, 0, []
    plans = planned_runs(study, scale, out, gpus or profile.gpus_per_node or None)
    if not dry_run:
        refuse_unknown_runs(plans)
    shared = cores_shared(profile) if study.kind == "throughput" else None
    for plan in plans:
        argv, line = job_argv(plan, profile, study, script)
        if study.kind == "throughput":
            argv, alone = timed_alone(argv, profile, shared)
            line = f"{line}; {alone}"
        if plan.status in REFUSED:  # a dry run only: a submitting study has refused it above
            print(f"#   {plan.run_dir} holds {REFUSED[plan.status]}: the study would refuse to start")
        if plan.status in ("completed", "diverged"):
            print(f"#   skipped, already {plan.status}")
            continue
        tf_skip = tf_skip_line(plan)  # the local study's line: no job is submitted (nor resubmitted) to fail
        if tf_skip:
            print(f"#   {tf_skip}")
            continue
        print(f"#   {line}")
        print(shlex.join(argv), flush=True)
        job = "<a job id>" if dry_run else submit(clients, plan, argv)
        if job:
            submitted += 1
            jobs.append(job)
        else:  # not counted: the closing line says how many failed, and the study exits 1
            failed += 1
    if not dry_run:
        closing(study, plans, submitted, failed)
    return jobs, failed


# Slurm's singleton dependency starts a job only when no earlier job of its name and user is pending or running: every
# throughput job of the suite (experiments 1-3, any study) bears this name, so none ever times beside another
ALONE_JOB_NAME = "scaling-throughput"


def cores_shared(profile) -> str | None:
    """Why the profile's nodes share CPU cores, or None: the profile says so (shared_machine: the local cluster's
    hosts are namespaces of one machine), or the newest `make cluster-check` found its hosts on one machine (the
    link probe's boot ids: shared_cores), whatever the profile says."""
    if profile.shared_machine:
        return "the profile's nodes share one machine's cores (shared_machine)"
    try:
        fit = advisor.latest_link_fit(profile.name)
        found = json.loads(fit.read_text()).get("inter", {}).get("shared_cores") if fit else None
    except (advisor.InputError, OSError, ValueError, AttributeError):
        return None  # an unreadable check says nothing either way; cluster-check's own line names it
    return f"cluster-check found the nodes share {found} cores ({fit.parent.name})" if found else None


def timed_alone(argv: list[str], profile, shared: str | None) -> tuple[list[str], str]:
    """A throughput job's argv so that no other job shares its cores while it is timed, and the line saying how:
    whole nodes (--exclusive) where the profile allows it; one throughput job at a time (a singleton dependency)
    where the nodes share cores (--exclusive cannot help: another node is the same machine) or the site's
    partitions refuse --exclusive (the profile's exclusive_throughput = false)."""
    if shared or not profile.exclusive_throughput:
        named = [ALONE_JOB_NAME if prev == "-J" else a for prev, a in zip(["", *argv], argv)]
        why = shared or "the profile's exclusive_throughput = false"
        return (["sbatch", "--dependency=singleton", *named[1:]],
                f"timed alone: one throughput job at a time (--dependency=singleton, job name {ALONE_JOB_NAME}): {why}")
    if "--exclusive" not in argv:
        argv = ["sbatch", "--exclusive", *argv[1:]]
    return argv, "timed alone: whole nodes (--exclusive)"


def slurm_clients(profile) -> Clients:
    """The cluster's Slurm clients, checked before anything is written: sbatch on PATH, a configuration it can
    read (or the profile's configless site, said in one line)."""
    if shutil.which("sbatch") is None:
        raise ConfigError("sbatch is not on PATH: submit from a Slurm login node (or `make cluster` for a local "
                          "cluster), or see the jobs first with --dry-run")
    clients = Clients.of(profile)
    try:
        clients.check()
    except NoConfiguration as e:
        raise ConfigError(str(e)) from None
    return clients


def submit(clients: Clients, plan, argv: list[str]) -> str | None:
    """One run's job id, or None where sbatch failed (its exit code, or no job id printed): such a run is not
    counted as submitted, and the folders made for it alone are taken back (no planned run without a job)."""
    made = first_missing(plan.run_dir)
    write_planned(plan)  # the job's trainer starts from it (and sbatch -o writes into its folder)
    got = clients.submit(argv)
    if got.job:
        print(f"#   Submitted batch job {got.job}")  # sbatch's own words, as a user knows them
        return got.job
    print(f"#   not submitted: sbatch {'exited ' + str(got.returncode) if got.returncode else 'printed no job id'}: "
          f"{got.said}")
    if made:
        shutil.rmtree(made)
    return None


def first_missing(path: Path) -> Path | None:
    """The outermost of `path` and its parents that does not exist yet (None: `path` exists)."""
    missing = None
    while not path.exists():
        missing, path = path, path.parent
    return missing


def closing(study: Study, plans, submitted: int, failed: int = 0) -> None:
    """The study's closing table once its jobs are done: a rerun that submits nothing prints it (after the jobs,
    each run's folder says how it ended); the last line says which of the two this was, and how many sbatch
    calls failed."""
    name = study.experiment.name
    if failed:
        print(f"{name}: {submitted} job(s) submitted, {failed} failed (sbatch's line above each): fix what it says, "
              "then, once squeue shows none of this study's jobs, run the same line again")
        return
    if submitted:
        print(f"{name}: {submitted} job(s) submitted; once squeue shows none of them, run the same line again: it "
              "submits nothing and prints the closing table")
        return
    print_comparison(plans, study)
    print(f"{name}: every run is done (none submitted); the table above is the study's closing table")


def job_argv(plan, profile, study: Study, script) -> tuple[list[str], str]:
    """One run's sbatch argv and the line saying what each of its ranks will get; its placement printed first. A
    profile's cpus_per_task = 0 is derived from its cpus_per_node where that is known (contract/placement.py)."""
    if plan.processes:  # the node scale: one exclusive node, one process a GPU (W/P workers each)
        nodes, per_node = 1, plan.processes
        gpus = node_gpus_used(plan.run.workers, plan.backend, plan.processes)  # DataParallel: W GPUs, 1 process
    else:
        nodes, per_node, gpus = placement(plan.run.workers, plan.backend, plan.run.nodes, profile.gpus_per_node,
                                          profile.ranks_per_node)
    train_args = plan.trainer_args + (["--resume", "auto"] if plan.status not in ("missing",) else [])
    # beyond the profile: the backend, this venv's Python, the harness; on a shared machine also each rank's threads,
    # as a local run of the same shape gets them (studies/launch.py)
    env = {"BACKEND": plan.backend, "PYTHON": sys.executable, "HARNESS_DIR": str(REPO / "slurm")}
    if profile.shared_machine and plan.cfg.train.device == "cpu":
        env["OMP_NUM_THREADS"] = str(threads_per_process(plan, 1))
    cpus = profile.cpus_per_task or cpus_per_task_for(profile.cpus_per_node, per_node)
    try:  # a run the profile's nodes cannot hold (more tasks a node than GPUs) is one line
        argv = sbatch_argv(dataclasses.replace(profile, cpus_per_task=cpus), script, nodes, per_node, gpus,
                           job_name=f"{study.experiment.name[:2]}-{plan.run.name}",
                           time_limit=study.time_limit or None, output=plan.run_dir / "slurm-%j.out",
                           env=env, train_args=train_args)
    except ProfileError as e:
        raise ConfigError(f"{plan.run.name}: {e}") from None
    print(f"# {plan.describe(nodes, per_node)}")
    return argv, planned_line(cpus, per_node, env.get("OMP_NUM_THREADS"))
