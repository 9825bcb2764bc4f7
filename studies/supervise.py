"""Supervise: the study's runs on this machine, `jobs` of them side by side -- started as slots free up, watched
epoch by epoch, a silent death marked failed in the run's manifest, and every run stopped gracefully on Ctrl-C.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from contract import locks, reader
from studies.clock import Clock, duration
from studies.launch import FINISHED, REFUSED, Active, Plan, folder_status, last_epoch, start_local
from studies.progress import Progress, epoch_words, run_time, study_time, summary
from studies.tf_launch import tf_skip_line


def mark_failed_if_silent(run_dir: Path, code: int) -> str | None:
    """A run whose every process was killed (kill -9, the OOM killer) could not say so: its manifest still says
    running. Say it for them, once nothing holds the run."""
    manifest = reader.read_manifest(run_dir)
    if not manifest or manifest.get("status") != "running":
        return None
    try:
        locks.mark_failed(run_dir, f"the run's processes ended (exit {code}) before they could write a status",
                              code)
    except OSError as e:  # a full or read-only disk: say so on the study's console, go on with the others
        return f"could not mark it failed: {e.strerror}"
    return None


def claim_run(plan: Plan, index: int, label: str, progress: Progress) -> tuple[locks.StudyClaim | None, int]:
    """This study's claim on a run, and the run's folder read again under it: since the plan was made another study
    (or a hand-started trainer) may have finished, started or replaced it, and a study reports only what it does
    itself. (None, failures) where the run is not this study's to start, with its line."""
    if locks.is_locked(plan.run_dir):  # another study (or a hand-started run) is training it: not a failure
        progress.left_to_others(index, label, locks.lock_holder(plan.run_dir))
        return None, 0
    claim = locks.StudyClaim.take(plan.run_dir)
    if claim is None:  # another study has just launched it
        progress.left_to_others(index, label, locks.study_claim_holder(plan.run_dir), "another study, ")
        return None, 0
    plan.status = folder_status(plan.run_dir, plan.fingerprint)  # started with --resume auto unless still missing
    if plan.status in FINISHED:
        claim.release()
        progress.show(index, label, f"skipped, already {plan.status} (by another process since this study "
                                    "planned it)", final=True)
        return None, 0
    if plan.status in REFUSED:
        claim.release()
        progress.show(index, label, f"not started: {plan.run_dir} now holds {REFUSED[plan.status]}", final=True)
        return None, 1
    return claim, 0


def start_waiting(waiting: list, active: list[Active], jobs: int, progress: Progress, have_horovod: bool,
                  clock: Clock) -> int:
    """Start runs while fewer than `jobs` are active, with a line each (its expected time); returns the failures
    (runs another process holds)."""
    failures = 0
    while waiting and len(active) < jobs:
        index, plan = waiting.pop(0)
        label = f"{plan.cfg.experiment}/{plan.run.name}"
        if plan.status in FINISHED:
            progress.show(index, label, f"skipped, already {plan.status}", final=True)
            continue
        tf_skip = tf_skip_line(plan)  # a TensorFlow row where TensorFlow (or Horovod's TF part) is missing
        if tf_skip:
            progress.show(index, label, tf_skip, final=True)
            continue
        if plan.backend == "horovod" and not have_horovod:
            progress.show(index, label, "skipped: Horovod is not built here (run `make setup-horovod`)", final=True)
            continue
        claim, refused = claim_run(plan, index, label, progress)
        failures += refused
        if claim is None:
            continue
        c = plan.cfg
        work = f"{c.bench.batches} timed batches" if c.bench.batches else f"{c.train.epochs} epochs"
        total, why = clock.expected(plan.fingerprint)
        expect = f", ~{duration(total)} ({why})" if total is not None else ""
        try:
            active.append(start_local(plan, index, jobs))
            active[-1].claim = claim
        except OSError as e:  # its folder or console.log cannot be written (a full disk): the next may be
            claim.release()
            progress.show(index, label, f"failed to start: {e.strerror} ({e.filename})", final=True)
            failures += 1
            continue
        progress.show(index, label, f"{plan.backend}, {plan.run.workers} worker(s), {work}{expect}...; "
                                    f"{study_time(active, waiting, clock, time.time())}",
                      final=not progress.tty or jobs > 1)
    return failures


def drive(waiting: list, active: list[Active], jobs: int, progress: Progress, have_horovod: bool,
          clock: Clock | None = None) -> int:
    """Start runs while fewer than `jobs` are active; report each epoch and each run's end with the time it took and
    the time left. Returns the number that failed."""
    clock = clock or Clock(jobs, {}, time.time())
    failures = 0
    while waiting or active:
        failures += start_waiting(waiting, active, jobs, progress, have_horovod, clock)
        time.sleep(0.5)
        for run in list(active):
            label = f"{run.plan.cfg.experiment}/{run.plan.run.name}"
            code = run.poll()
            now = time.time()
            if code is None:
                record = last_epoch(run.plan.run_dir)
                if record and record != run.seen:  # side by side on a terminal, the newest epoch of any run
                    run.seen = record
                    progress.show(run.index, label, f"epoch {record['epoch'] + 1}/{run.plan.cfg.train.epochs}, "
                                                    f"{epoch_words(record, run.plan.cfg.model.name)}; "
                                                    f"{run_time(run, clock, now)}; "
                                                    f"{study_time(active, waiting, clock, now)}",
                                  final=not progress.tty)
                continue
            active.remove(run)
            holder = locks.in_use_by(run.console_text()) if code == 2 else None
            if holder:  # a hand-started trainer took it first: its manifest is the other's, not this attempt's
                progress.left_to_others(run.index, label, holder)
                continue
            failures += code not in (0, 3)  # a diverged run is a result, not a failure
            problem = mark_failed_if_silent(run.plan.run_dir, code) if code not in (0, 3) else None
            clock.finished(run.plan.fingerprint, run.plan.run_dir)
            progress.show(run.index, label, f"{summary(run.plan.run_dir)} ({duration(now - run.started)}, "
                                            f"exit {code}{'; ' + problem if problem else ''}); "
                                            f"{study_time(active, waiting, clock, now)}", final=True)
    return failures


def stop_active(active: list[Active]) -> None:
    """SIGTERM to every process of the active runs: each checkpoints at its next iteration and exits."""
    for run in active:
        for proc in run.procs:
            if proc.poll() is None:
                proc.terminate()
    for run in active:
        for proc in run.procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
