"""A study on a machine: the plan's runs (contract/plan.py) as processes here or jobs on Slurm, supervised, with
a line of progress each.

Re-running a study skips completed (and diverged) runs and resumes the others from their checkpoints -- in its own
runs root only: full studies write to results/runs/, smoke runs (--quick) to results/quick/, and the committed
results/reference/ is never counted as done. A folder counts as done only when its config fingerprint
(contract/fingerprint.py) is the plan's.
"""
from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import locks, reader, runfolder
from contract.config import Config, ConfigError, check_writable, cpu_isa_env, load_config
from contract.fingerprint import config_fingerprint
from contract.plan import Run, Study, load_study, whole_number
from contract.reader import folder_fingerprint
from studies.clock import Clock, duration, reference_seconds
from trainers.backends import Launch, choose_backend, free_port, horovod_available, torchrun_command

REPO = Path(__file__).resolve().parents[1]
FINISHED = ("completed", "diverged")
OTHER_CONFIG = "other-config"  # a run folder made by a config other than the plan's
FULL_OUT, QUICK_OUT = Path("results/runs"), Path("results/quick")  # full and smoke runs never share folders
PR_SET_PDEATHSIG = 1  # linux/prctl.h


# ----------------------------------------------------------------------------------------------------------------
# Planning: each run's resolved config, backend, folder and state
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Plan:
    run: Run
    cfg: Config
    backend: str
    run_dir: Path
    status: str
    trainer_args: list[str]
    fingerprint: str = ""

    def describe(self, nodes: int, per_node: int) -> str:
        c, r = self.cfg, self.cfg.resolved(self.backend)
        warmup = "none" if c.lr.warmup == "none" else f"{c.lr.warmup} {c.lr.warmup_epochs} epochs"
        framework = c.framework(self.backend)
        label = framework if framework == self.backend else f"{framework} ({self.backend})"
        return (f"{self.run.name}: {label}, {nodes} node(s) x {per_node} "
                f"process(es), {r['world_size']} worker(s), per-GPU batch {c.train.per_worker_batch}, global batch "
                f"{r['global_batch']}, lr {r['lr']:.4g}, warm-up {warmup}, {c.train.epochs} epochs"
                + (f", benchmark {c.bench.batches} batches" if c.bench.batches else ""))


def planned_runs(study: Study, scale: str, out: Path) -> list[Plan]:
    plans = []
    for run in study.runs:
        sets = study.overrides + [f"{k}={json.dumps(v)}" for k, v in run.settings.items()]
        cfg = load_config(study.config, scale, sets)
        run_dir = out / cfg.experiment / run.name
        args = [str(study.config), "--scale", scale, "--out", str(out), "--run-name", run.name]
        for s in sets:
            args += ["--set", s]
        fingerprint = config_fingerprint(cfg)
        plans.append(Plan(run, cfg, choose_backend(cfg, Launch()), run_dir, folder_status(run_dir, fingerprint), args,
                          fingerprint))
    return plans


def folder_status(run_dir: Path, fingerprint: str) -> str:
    """The run folder's status for this plan: missing, running, completed..., or OTHER_CONFIG when the folder holds
    a run of another config (a smoke run under a full run's name, a run from before a config change)."""
    found = folder_fingerprint(run_dir)
    if found is not None and found != fingerprint:
        return OTHER_CONFIG
    return run_status(run_dir)


def refuse_other_configs(plans: list[Plan]) -> None:
    """One line before anything starts when a planned run's folder holds another config's run: it is neither
    resumed (it would mix two configs in one run) nor skipped (it would count as this plan's result)."""
    other = [p for p in plans if p.status == OTHER_CONFIG]
    if other:
        p = other[0]
        raise ConfigError(f"{p.run_dir} holds a run of another config (fingerprint {folder_fingerprint(p.run_dir)}, "
                          f"this plan's {p.fingerprint}){f' and {len(other) - 1} more folders do' if len(other) > 1 else ''}; "
                          f"move it away or run the study with --out DIR")


def local_commands(plan: Plan) -> list[list[str]]:
    """The processes one run needs on this machine: one per torchrun node, or one horovodrun, or one python."""
    run, args, py = plan.run, plan.trainer_args, sys.executable
    if plan.status != "missing":
        args = args + ["--resume", "auto"]
    if plan.backend == "ddp":
        per_node = run.workers // run.nodes
        if run.nodes == 1:
            return [[*torchrun_command(py), "--standalone", "--nproc-per-node", str(per_node),
                     "-m", "trainers", "train", *args]]
        port = str(free_port())  # a fresh rendezvous per run: several torchrun nodes on localhost
        return [[*torchrun_command(py), "--nnodes", str(run.nodes), "--node-rank", str(node),
                 "--nproc-per-node", str(per_node), "--master-addr", "127.0.0.1", "--master-port", port,
                 "-m", "trainers", "train", *args] for node in range(run.nodes)]
    if plan.backend == "horovod":
        horovodrun = str(Path(py).parent / "horovodrun")
        return [[horovodrun, "-np", str(run.workers), "-H", f"localhost:{run.workers}", "--gloo",
                 py, "-m", "trainers", "train", *args]]
    return [[py, "-m", "trainers", "train", *args]]


def run_status(run_dir: Path) -> str:
    manifest = reader.read_manifest(run_dir)
    return manifest.get("status", "missing") if manifest else "missing"


# ----------------------------------------------------------------------------------------------------------------
# Running locally, with a progress line per run
# ----------------------------------------------------------------------------------------------------------------
def last_epoch(run_dir: Path) -> dict | None:
    """The newest epoch record of a run (for the progress line)."""
    return reader.last_record(run_dir / runfolder.METRICS, "epoch")


class Progress:
    """One line per run; on a terminal it updates in place with the newest epoch (of any run side by side)."""

    def __init__(self, total: int):
        self.total, self.tty = total, sys.stdout.isatty()

    def show(self, index: int, label: str, text: str, final: bool = False) -> None:
        line = f"[{index}/{self.total}] {label}: {text}"
        if self.tty:
            if not final:  # a line updated in place must not wrap: "\r" goes back to the start of its last row only
                line = line[:max(20, shutil.get_terminal_size().columns - 1)]
            sys.stdout.write("\r\033[K" + line + ("\n" if final else ""))
            sys.stdout.flush()
        elif final:
            print(line, flush=True)


@dataclass
class Active:
    """A run in progress: its processes and where its console output goes."""

    plan: Plan
    index: int
    procs: list[subprocess.Popen]
    console: Any
    started: float
    seen: dict | None = None
    done_at_start: int = 0  # epochs a resumed run had before this session (its rate counts only the new ones)
    console_start: int = 0  # where this attempt's output begins in console.log (earlier attempts' is above it)

    def console_text(self) -> str:
        try:
            with open(self.plan.run_dir / "console.log", "rb") as f:
                f.seek(self.console_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def poll(self) -> int | None:
        if any(p.poll() is None for p in self.procs):
            return None
        self.console.close()
        return max(abs(p.returncode) for p in self.procs)


def threads_per_process(plan: Plan, jobs: int, cores: int | None = None) -> int:
    """This machine's cores shared evenly by the runs side by side and each run's processes. torchrun alone would
    give its ranks 1 thread and horovodrun the default (all cores, each): 4 Horovod ranks on 2 cores then spin
    against each other, and DDP and Horovod would not be compared on equal terms."""
    processes = plan.run.workers if plan.backend in ("ddp", "horovod") else 1
    return max(1, (cores or os.cpu_count() or 1) // jobs // processes)


def default_jobs(study: Study, plans: list[Plan], cores: int | None = None) -> int:
    """Quality runs on the CPU go side by side, a core each (small models use one core better than two, and the
    local results were measured so); a throughput run is timed alone, and a GPU takes one run at a time."""
    if study.kind == "throughput" or any(p.cfg.train.device != "cpu" for p in plans):
        return 1
    return max(1, min(cores or os.cpu_count() or 1, len(plans)))


def terminate_with_parent(parent: int):
    """A preexec function: the child gets SIGTERM when the study that started it dies (Linux's parent-death signal,
    kept across exec); torchrun and horovodrun pass it on to their ranks. Elsewhere, nothing."""
    def arm() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the study died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)
    return arm if sys.platform.startswith("linux") else None


def start_local(plan: Plan, index: int, jobs: int) -> Active:
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.setdefault("OMP_NUM_THREADS", str(threads_per_process(plan, jobs)))  # a user's own setting wins
    before = last_epoch(plan.run_dir)
    env.update(cpu_isa_env(plan.cfg.train.cpu_isa))  # read once by torch: set before the trainer starts
    console = open(plan.run_dir / "console.log", "a")
    console_start = console.seek(0, os.SEEK_END)  # before the children share (and move) the file offset
    # own session: a Ctrl-C reaches the study, which stops its runs gracefully (SIGTERM -> checkpoint); and a
    # SIGTERM when the study dies, however it dies (kill -9 included), so no trainer goes on alone
    procs = [subprocess.Popen(c, stdout=console, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True,
                              preexec_fn=terminate_with_parent(os.getpid()))
             for c in local_commands(plan)]
    return Active(plan, index, procs, console, time.time(), done_at_start=before["epoch"] + 1 if before else 0,
                  console_start=console_start)


def summary(run_dir: Path) -> str:
    manifest = reader.read_manifest(run_dir)
    if manifest is None:
        return f"no manifest (see {run_dir / 'console.log'})"
    bench = reader.read_metrics(run_dir).of("bench")
    if bench:
        return f"{manifest['status']}: {bench[-1]['images_per_s_steady']:.1f} images/s (steady state)"
    best = manifest.get("best_val_top1")
    return manifest["status"] + (f": best val top-1 {best:.2f} %" if best is not None else "")


def mark_failed_if_silent(run_dir: Path, code: int) -> str | None:
    """A run whose every process was killed (kill -9, the OOM killer) could not say so: its manifest still says
    running. Say it for them, once nothing holds the run."""
    manifest = reader.read_manifest(run_dir)
    if not manifest or manifest.get("status") != "running":
        return None
    try:
        lock = locks.RankLock(run_dir, 0)
    except locks.RunInUse:  # a process trains it again: it speaks for itself
        return None
    except OSError as e:
        return f"could not mark it failed: {e.strerror}"
    try:
        run = runfolder.RunFolder.take_over(run_dir)
        run.status("failed", manifest.get("epochs_done", 0),
                   f"the run's processes ended (exit {code}) before they could write a status", code)
        run.close()
    except OSError as e:  # a full or read-only disk: say so on the study's console, go on with the others
        return f"could not mark it failed: {e.strerror}"
    finally:
        lock.release()
    return None


def time_left(run: Active, clock: Clock, now: float) -> tuple[float | None, str]:
    """An active run's seconds left and where the estimate comes from (its epochs, this study's runs, the reference)."""
    record = run.seen or last_epoch(run.plan.run_dir)
    done = record["epoch"] + 1 if record else run.done_at_start
    epochs = run.plan.cfg.train.epochs if not run.plan.cfg.bench.batches else 1
    return clock.run_left(run.plan.fingerprint, epochs, done, run.done_at_start, now - run.started)


def study_time(active: list[Active], waiting: list, clock: Clock, now: float) -> str:
    """'study 12 min in, ~40 min left': the whole study's elapsed time and what its unfinished runs still need."""
    left = [time_left(run, clock, now)[0] for run in active]
    pending = [plan.fingerprint for _, plan in waiting if plan.status not in FINISHED]
    return f"study {clock.elapsed(now)} in, {clock.study_left(left, pending)}"


def run_time(run: Active, clock: Clock, now: float) -> str:
    """'3 min in, ~9 min left (from its 5 epoch(s))' for an active run."""
    left, why = time_left(run, clock, now)
    eta = f"~{duration(left)} left ({why})" if left is not None else "no estimate yet"
    return f"{duration(now - run.started)} in, {eta}"


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
        if plan.backend == "horovod" and not have_horovod:
            progress.show(index, label, "skipped: Horovod is not built here (run `make setup-horovod`)", final=True)
            continue
        if locks.is_locked(plan.run_dir):  # another study (or a hand-started run) is training it
            progress.show(index, label, f"skipped: in use by pid {locks.lock_holder(plan.run_dir)}", final=True)
            failures += 1
            continue
        c = plan.cfg
        work = f"{c.bench.batches} timed batches" if c.bench.batches else f"{c.train.epochs} epochs"
        total, why = clock.expected(plan.fingerprint)
        expect = f", ~{duration(total)} ({why})" if total is not None else ""
        try:
            active.append(start_local(plan, index, jobs))
        except OSError as e:  # its folder or console.log cannot be written (a full disk): the next may be
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
                                                    f"val top-1 {record['val_top1']:.1f} %; {run_time(run, clock, now)}; "
                                                    f"{study_time(active, waiting, clock, now)}",
                                  final=not progress.tty)
                continue
            active.remove(run)
            failures += code not in (0, 3)  # a diverged run is a result, not a failure
            holder = locks.in_use_by(run.console_text()) if code == 2 else None
            if holder:  # another study started it first: its manifest is the other's, not this attempt's
                progress.show(run.index, label, f"skipped: in use by pid {holder}", final=True)
                continue
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


IMAGENET_TRAIN_IMAGES = 1_281_167
RECORD_BYTES = 700  # an iter record and its train.log line


def run_bytes(cfg: Config) -> int:
    """About what a run writes: its checkpoint twice (the new copy is written before the old one goes; weights and
    momentum) and a record and a log line every print_freq steps."""
    from trainers.models import build_model

    params = sum(p.numel() for p in build_model(cfg.model).parameters())
    d = cfg.data
    images = {"generated": d.classes * d.per_class, "synthetic": d.synthetic_images}.get(d.kind, IMAGENET_TRAIN_IMAGES)
    steps = cfg.bench.batches or cfg.train.epochs * max(1, images // cfg.global_batch)
    return 2 * 2 * 4 * params + (steps // cfg.train.print_freq + 1) * RECORD_BYTES


def space_warning(plans: list[Plan], out: Path) -> str | None:
    """A line when the runs to come would not fit in the free space of --out's file system."""
    todo = [p for p in plans if p.status not in FINISHED]
    if not todo:
        return None
    per_run = max(run_bytes(p.cfg) for p in todo)
    existing = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if per_run * len(todo) <= free:
        return None
    return (f"warning: {free / 1e6:.1f} MB free in {existing}; a run needs about {per_run / 1e6:.1f} MB, "
            f"{len(todo)} run(s) {per_run * len(todo) / 1e6:.1f} MB: free space or pick another --out")


def run_local(study: Study, scale: str, out: Path, dry_run: bool, jobs: int | None = None) -> int:
    plans = planned_runs(study, scale, out)
    if not dry_run:
        refuse_other_configs(plans)
    if dry_run:
        for plan in plans:
            per_node = plan.run.workers // plan.run.nodes if plan.backend in ("ddp", "horovod") else 1
            print(f"# {plan.describe(plan.run.nodes, per_node)}")
            if plan.status == OTHER_CONFIG:
                print(f"#   {plan.run_dir} holds another config's run: the study would refuse to start")
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
    started, have_horovod = time.time(), horovod_available()
    waiting = list(enumerate(plans, start=1))
    active: list[Active] = []
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops a study as Ctrl-C does
    try:
        clock = Clock(jobs, reference_seconds(study.experiment.name), started)
        failures = drive(waiting, active, jobs, progress, have_horovod, clock)
    except KeyboardInterrupt:
        stop_active(active)
        print(interrupted_line(study.experiment.name, [run.plan.run_dir for run in active]))
        return 130
    print(f"{study.experiment.name}: {len(plans)} runs, {failures} failed, {duration(time.time() - started)}; "
          f"run folders in {out / study.experiment.name}; {report_hint(out)}")
    print_comparison(plans, study)
    return 1 if failures else 0


def report_hint(out: Path) -> str:
    """The command that turns these runs into a report: `make report` reads results/runs, any other folder needs
    OUT= (a QUICK study's results/quick too)."""
    command = "make report" if Path(out) == FULL_OUT else f"make report OUT={out}"
    return f"`{command}` turns them into tables and figures"
def interrupted_line(experiment: str, stopped: list[Path]) -> str:
    """What a stopped study left: only a run with a checkpoint resumes; one stopped in start-up starts afresh."""
    saved = sum((run_dir / "checkpoint.pt").exists() for run_dir in stopped)
    fresh = len(stopped) - saved
    return (f"{experiment}: interrupted; {saved} run(s) checkpointed"
            + (f", {fresh} stopped before their first checkpoint (they start afresh)" if fresh else "")
            + ". The same command resumes them.")


def print_comparison(plans: list[Plan], study: Study) -> None:
    """This machine's results beside the committed reference's (named by its machine) and the thesis's."""
    try:
        from analysis.compare import comparison_text
    except ImportError as exc:  # the analysis needs pandas; a bare trainer environment may lack it
        print(f"(no comparison table: {exc})")
        return
    from analysis.numbers import numerics_label

    entries = [dict(name=p.run.name, run_dir=p.run_dir, fingerprint=p.fingerprint, experiment=p.cfg.experiment,
                    framework=p.cfg.framework(p.backend), gpus=p.run.workers,
                    per_gpu_batch=p.cfg.train.per_worker_batch,
                    numerics=numerics_label(p.cfg.train.precision, p.cfg.train.channels_last, p.cfg.train.compile))
               for p in plans]
    print(comparison_text(entries, study.kind))


# ----------------------------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------------------------
def data_warning(study: Study, scale: str) -> str | None:
    """One line when the runs would read ILSVRC-2012 from an unset $IMAGENET_DIR (the gpu and thesis scales)."""
    cfg = load_config(study.config, scale, study.overrides, need_data=False)
    if cfg.data.kind != "imagefolder" or (cfg.data.path and "$" not in cfg.data.path):
        return None
    unset = "IMAGENET_DIR is not set" if "IMAGENET_DIR" in cfg.data.path else "data.path is not set"
    return (f"warning: {unset} (data.path = {cfg.data.path or 'empty'}): the runs need the ILSVRC-2012 root "
            "(train/ and val/) where they start; export IMAGENET_DIR=..., or let a Slurm profile stage a tar")


def run_study(experiment: Path, scale: str = "local", launcher: str = "local", cluster: str = "local",
              dry_run: bool = False, quick: bool = False, out: Path | None = None, seeds: int | None = None,
              overrides: list[str] = (), jobs: int | None = None, only: list[str] = ()) -> int:
    if jobs is not None:
        whole_number("--jobs", jobs)
    if out is not None and not str(out):
        raise ConfigError("--out is empty; give the runs' folder (default results/runs)")
    study = load_study(experiment, scale, quick, seeds, list(overrides), list(only))
    out = out or (QUICK_OUT if quick else FULL_OUT)
    if study.question:
        print(f"{experiment.name}: {study.question}")
    if study.baseline:
        print(f"baseline: the 1-worker runs of {study.baseline} (`make exp{int(study.baseline[:2])}`), not retrained")
    warning = data_warning(study, scale)
    if warning:
        print(warning, file=sys.stderr)
    if launcher == "slurm":
        from studies.slurm import submit_all

        return submit_all(study, scale, cluster, out, dry_run)
    return run_local(study, scale, out, dry_run, jobs)
