"""One run, whatever launched it: from its lock to its final status and exit code.

    exit_code = run_training(cfg, run_dir, resume, echo, force)   # what `python -m trainers train` runs on each rank

`run_training` (the checks, trainers/checks.py, then the lock), `train_locked` (setup, state, the manifest's
running status), `train_to_the_end` (the loop or the benchmark, and how each way out ends), then a failure's line.
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import torch

from trainers import backends, bench, checkpoint, compute, loop
from contract.config import Config
from contract.locks import RankLock, dead_ranks, mark_failed
from contract.plan import carries_quick
from contract.invariants import check_run
from contract.reader import read_config, read_manifest, read_metrics
from contract.runfolder import MANIFEST, WRITE_FAILURES, RunFolder, config_document, now_iso
from contract.versions import git_commit, versions
from trainers.checkpoint import TrainState
from trainers.checks import check_launch, earlier_attempt_wait
from trainers.loop import Diverged, Preempted
from trainers.setup import Setup, build_setup, placement_record
from trainers.tallies import skipped_steps_line, unreadable_lines

EXIT_COMPLETED, EXIT_FAILED, EXIT_CONFIG, EXIT_DIVERGED, EXIT_PREEMPTED = 0, 1, 2, 3, 4


def run_training(cfg: Config, run_dir: Path, resume: bool = False, echo: bool = True, force: bool = False) -> int:
    launch, name, pinned = check_launch(cfg, run_dir, resume, force)  # ConfigError before any process group exists
    # Before anything in the folder is touched: a second process training this run is refused here (exit 2).
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # the folders this run will create
    lock = RankLock(run_dir, launch.rank, wait_s=earlier_attempt_wait())
    try:
        return train_locked(cfg, run_dir, resume, echo, launch, name, force, pinned)
    finally:
        if made and not (run_dir / MANIFEST).exists():  # refused before it started (a data or config mistake)
            lock.discard(made)
        lock.release()


def train_locked(cfg: Config, run_dir: Path, resume: bool, echo: bool, launch: backends.Launch, name: str,
                 force: bool, pinned: dict) -> int:
    s, state = build_setup(cfg, run_dir, name, launch, resume, echo, pinned)
    run, b = s.run, s.backend
    if (run_dir / MANIFEST).exists() and s.resuming:
        run.manifest = read_manifest(run_dir) or {}
    attempt = {"start": now_iso(), "epoch": state.epoch, "iteration": state.step, **checkpoint.arithmetic(s),
               "threads_env": thread_settings(), "forced": force and s.resuming}
    document = config_document(cfg, run_dir.name, name)
    run.begin(  # every attempt's arithmetic: a mix would show in `attempts`
        document, attempt, smoke=carries_quick(document), epochs_done=state.epoch,
        launcher=launch.launcher, seed=cfg.train.seed,
        link=os.environ.get("CLUSTER_LINK"),  # the local cluster's link rate where one was set (make cluster LINK=)
        versions={**versions(), "cuda": torch.version.cuda}, git_commit=git_commit(), threads=thread_settings(),
        **({"dataset": s.dataset} if s.dataset else {}),  # what a plug-in workload's data was read from
        cpu=compute.cpu_description(),  # the kernels' ISA: what a bit-identical rerun elsewhere must pin
        machine=compute.machine_identity(),  # which machine's result this is (contract/machine.py)
        placement=b.gather_objects(placement_record(s)),  # every rank's, in rank order (contract/placement.py)
        resumed_at=now_iso() if state.epoch or state.step else None, **b.describe(),
        **(state.tallies() if s.resuming else {}),  # the checkpoint's, over the earlier attempt's record of them
    )
    try:
        return train_to_the_end(s, state, run_dir)
    finally:
        run.close()


def train_to_the_end(s: Setup, state: TrainState, run_dir: Path) -> int:
    cfg, run, b, started_at = s.cfg, s.run, s.backend, state.epoch
    try:
        bench.benchmark(s, state) if cfg.bench.batches > 0 else loop.fit(s, state)
    except Diverged as e:
        run.log(f"=> diverged: {e}")
        run.end("diverged", started_at, str(e), EXIT_DIVERGED)
        return EXIT_DIVERGED
    except Preempted as e:
        b.barrier()  # rank 0's checkpoint is on disk before any rank exits: srun and mpirun kill the rest at once
        run.log(f"=> preempted: {e}")
        run.end("preempted", run.manifest.get("epochs_done", 0), str(e), EXIT_PREEMPTED)
        return EXIT_PREEMPTED
    except Exception as e:  # a lost peer, an I/O error...: one line that names the failed rank, after the traceback
        if not write_failure(e):  # a full or read-only disk needs no traceback: the line says what to fix
            traceback.print_exc()
        report_failure(run_dir, run, b, e)
        return EXIT_FAILED
    finally:
        s.stop.restore()
        s.telemetry.finish()
        b.close()
    done = loop.epochs_to_train(s) if cfg.bench.batches == 0 else 0
    if loop.reached_target(s, state):  # it ended sooner
        done = run.manifest.get("epochs_done", done)
    for line in [*unreadable_lines(state.unreadable_images), skipped_steps_line(state.skipped_steps),
                 s.times.summary_line()]:
        if line:
            run.log(line)
    breaches = record_breaches(run, run_dir, done)
    if breaches:  # a bug in the trainer: the run is not called completed on records that contradict themselves
        message = f"the run record breaks its invariants (contract/invariants.py): {'; '.join(breaches)}"
        print(f"error: {message}", file=sys.stderr, flush=True)
        run.end("failed", done, message, EXIT_FAILED)
        return EXIT_FAILED
    run.end("completed", done, exit_code=EXIT_COMPLETED, **{**capped(s), **stopped_at_target(s, state, done)})
    return EXIT_COMPLETED


def record_breaches(run: RunFolder, run_dir: Path, done: int) -> list[str]:
    """The run record's invariants, checked where it is written (rank 0, which writes it), as it is about to be
    called completed with `done` epochs."""
    if not run.writes:
        return []
    manifest = {**run.manifest, "status": "completed", "epochs_done": done}
    return check_run(read_config(run_dir), manifest, read_metrics(run_dir).records)


def thread_settings() -> dict:
    """What decides this process's CPU parallelism, so a rerun can match it (results drift with the thread count)."""
    return {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
            **{k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}


def capped(s: Setup) -> dict:
    """The completed status's message and field of a run the step cap cut short (a smoke run)."""
    cap = s.cfg.train.max_steps
    if s.cfg.bench.batches or not loop.cut_by_cap(s):
        return {}
    return {"message": f"capped at {cap} optimizer steps (train.max_steps): a smoke run", "capped_at_steps": cap}


def stopped_at_target(s: Setup, state: TrainState, epochs: int) -> dict:
    """The completed status's message of a run that train.stop_at_top1 ended at its target."""
    if s.cfg.bench.batches or not loop.reached_target(s, state):
        return {}
    return {"message": f"stopped at the target: validation top-1 {state.best_top1:.2f} >= "
                       f"{s.cfg.train.stop_at_top1:g} after {epochs} epochs (train.stop_at_top1)"}


def write_failure(error: BaseException | None) -> OSError | None:
    """The full or read-only disk behind an error, if that is what it is (torch.save wraps it in a RuntimeError)."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in WRITE_FAILURES:
            return error
        error = error.__cause__ or error.__context__
    return None


def failure_message(dead: list[int], rank: int, world_size: int, workers: int, noticed: str,
                    hosts: list[str] | None = None) -> str:
    """The line naming the ranks that died (else the one that failed); with W workers over P processes (the node
    scale), with the logical workers each held; across hosts (`hosts`: each rank's, in rank order), with theirs."""
    failed = dead or [rank]
    held = ""
    if world_size > 1 and workers > world_size:
        k = workers // world_size
        held = f" (logical workers {', '.join(f'{r * k}-{(r + 1) * k - 1}' for r in failed)} of {workers})"
    where = ""
    if hosts and len(hosts) == world_size and len(set(hosts)) > 1:
        where = f" on {', '.join(dict.fromkeys(hosts[r] for r in failed))}"
    who = f"rank {', '.join(map(str, failed))} of {world_size}{held}{where}"
    return f"{who} died (rank {rank} noticed: {noticed})" if dead else f"{who}: {noticed}"


def report_failure(run_dir: Path, run: RunFolder, b: backends.Backend, error: Exception) -> None:
    """Name the rank that failed (a dead one has dropped its lock) and set the manifest to failed: rank 0, or the
    lowest live rank when rank 0 is the one gone."""
    dead = dead_ranks(run_dir, b.world_size, b.rank) if b.world_size > 1 else []
    # DDP wraps a collective's error once per callback it passes through: keep the innermost words
    noticed = f"{type(error).__name__}: {error}".splitlines()[0]
    noticed = noticed.split("Got the following error when running the callback: ")[-1][:300]
    disk = write_failure(error)
    if disk:
        noticed = (f"{disk.strerror} writing {disk.filename or run_dir}: free space or pick another --out, "
                   "then --resume auto")
    hosts = run.manifest.get("hosts") or (read_manifest(run_dir) or {}).get("hosts")  # rank 0's, or from disk
    message = failure_message(dead, b.rank, b.world_size, b.workers, noticed, hosts)
    print(f"error: training failed: {message}", file=sys.stderr, flush=True)
    failed = dead or [b.rank]
    if run.writes:
        run.end("failed", run.manifest.get("epochs_done", 0), message, EXIT_FAILED, failed_ranks=failed)
        return
    survivors = sorted(set(range(b.world_size)) - set(dead))
    if 0 not in dead or b.rank != survivors[0]:
        return
    mark_failed(run_dir, message, EXIT_FAILED, failed_ranks=failed)  # unless rank 0 got to say anything itself
