"""A study on a machine, from its front door (`python -m suite study`): the plan's runs (contract/plan.py)
launched as processes here (studies/launch.py), supervised (studies/supervise.py) with a line of progress each
(studies/progress.py), or submitted as jobs to Slurm (studies/slurm.py).
"""
from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from pathlib import Path

from contract.config import DISTRIBUTED_BACKENDS, ConfigError, check_writable
from contract.plan import NODE_SCALE, Study, check_node_gpus, study_plan, whole_number
from studies.clock import Clock, duration, reference_seconds
from studies.launch import (FINISHED, FULL_OUT, QUICK_OUT, REFUSED, Active, data_warning, default_jobs,
                            local_commands, planned_runs, refuse_unknown_runs, space_warning,
                            terminate_with_parent)
from studies.progress import Progress, interrupted_line, next_hint, print_comparison, report_hint
from studies.slurm import submit_all
from studies.supervise import drive, stop_active
from trainers.rendezvous import horovod_available


def run_local(study: Study, scale: str, out: Path, dry_run: bool, jobs: int | None = None,
              gpus: int | None = None) -> int:
    plans = planned_runs(study, scale, out, gpus)
    if not dry_run:
        refuse_unknown_runs(plans)
    if dry_run:
        for plan in plans:
            per_node = plan.ranks() // plan.run.nodes if plan.backend in DISTRIBUTED_BACKENDS else 1
            print(f"# {plan.describe(plan.run.nodes, per_node)}")
            if plan.status in REFUSED:
                print(f"#   {plan.run_dir} holds {REFUSED[plan.status]}: the study would refuse to start")
            for cmd in local_commands(plan):
                print(shlex.join(cmd))
        return 0
    check_writable(out)  # a read-only or unmakeable --out: one line before any run starts
    warning = space_warning(plans, out)
    if warning:
        print(warning, file=sys.stderr)
    if study.kind == "throughput":
        jobs = 1  # a throughput run is timed alone
    jobs = jobs or default_jobs(study, plans)
    progress = Progress(len(plans))
    skipped = sum(plan.status in FINISHED for plan in plans)  # finished before this study: neither rerun nor timed
    started, have_horovod = time.time(), horovod_available()
    waiting = list(enumerate(plans, start=1))
    active: list[Active] = []
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops a study as Ctrl-C does
    die_with_make()
    try:
        clock = Clock(jobs, reference_seconds(study.experiment.name), started)
        failures = drive(waiting, active, jobs, progress, have_horovod, clock)
    except KeyboardInterrupt:
        stop_active(active)
        print(interrupted_line(study.experiment.name, [run.plan.run_dir for run in active]))
        return 130
    print_comparison(plans, study)
    # last, so the line that says where the runs went and the next command is not lost above the comparison
    elsewhere = f", {progress.elsewhere} left to the process training them" if progress.elsewhere else ""
    print(f"{study.experiment.name}: {len(plans)} runs, {skipped} skipped (finished before), "
          f"{failures} failed{elsewhere}, "
          f"{duration(time.time() - started)}; run folders in {out / study.experiment.name}; {report_hint(out)}"
          f"{next_hint(study.next_step, out, scale)}")
    return 1 if failures else 0


MAX_JOBS = 64  # runs side by side; past the cores, more only time-share them (--jobs 100000: a typo, not a plan)


def check_options(scale: str, launcher: str, cluster: str, gpus: int | None) -> None:
    """An option this study would not use is a mistake, not a default: one line each."""
    if gpus is not None and scale == NODE_SCALE:
        check_node_gpus(gpus, "--gpus")
    elif gpus is not None:  # the other scales' runs take their GPUs from their workers (W) and the launcher
        whole_number("--gpus", gpus)
        raise ConfigError(f"--gpus {gpus} is the node's GPUs at --scale {NODE_SCALE}; at --scale {scale} each "
                          f"run's workers set its GPUs: leave --gpus out (make: GPUS=)")
    if cluster != "local" and launcher != "slurm":  # `local` is the default (the Makefile always passes it)
        raise ConfigError(f"--cluster {cluster} is a Slurm profile: add --launcher slurm (make LAUNCHER=slurm), or "
                          "leave --cluster out to run the study on this machine")


def die_with_make() -> None:
    """A study that `make` started stops (SIGTERM: its runs checkpoint) when make is killed, even by SIGKILL, as it
    does on Ctrl-C: make sets MAKELEVEL for what it runs. A study started by hand (nohup, a batch script) is left to
    outlive its shell."""
    if os.environ.get("MAKELEVEL"):
        arm = terminate_with_parent(os.getppid())
        if arm:
            arm()


def run_study(experiment: Path, scale: str = "local", launcher: str = "local", cluster: str = "local",
              dry_run: bool = False, quick: bool = False, out: Path | None = None, seeds: int | None = None,
              overrides: list[str] = (), jobs: int | None = None, only: list[str] = (), gpus: int | None = None) -> int:
    if jobs is not None:
        whole_number("--jobs", jobs)
        if jobs > MAX_JOBS:
            raise ConfigError(f"--jobs = {jobs} is more than {MAX_JOBS} runs side by side: each takes at least a core, "
                              f"so more only time-share the cores; give at most {MAX_JOBS} (by default one run a core)")
    if out is not None and not str(out):
        raise ConfigError("--out is empty; give the runs' folder (default results/runs)")
    study = study_plan(experiment, scale, quick, seeds, list(overrides), list(only))
    check_options(scale, launcher, cluster, gpus)  # before any line is printed
    out = out or (QUICK_OUT if quick else FULL_OUT)
    if study.question:
        print(f"{experiment.name}: {study.question}")
    if study.baseline:
        print(f"baseline: the 1-worker runs of {study.baseline} (`make exp{int(study.baseline[:2])}`), not retrained")
    if study.left_out:
        print(f"QUICK: {len(study.left_out)} run(s) left out, their global batch larger than QUICK's training set "
              f"(run them without QUICK): {', '.join(study.left_out)}")
    if not study.runs:
        raise ConfigError(f"{experiment.name}: no run of this study fits QUICK's training set; run it without QUICK")
    warning = data_warning(study)
    if warning:
        print(warning, file=sys.stderr)
    if launcher == "slurm":
        return submit_all(study, scale, cluster, out, dry_run, gpus)
    return run_local(study, scale, out, dry_run, jobs, gpus)
