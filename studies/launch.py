"""Launch: the plan's runs (contract/plan.py) made concrete on this machine -- each run's resolved config, backend,
folder and state, the commands it needs, and its processes started.

Re-running a study skips completed (and diverged) runs and resumes the others from their checkpoints -- in its own
runs root only: full studies write to results/runs/, smoke runs (--quick) to results/quick/, and the committed
results/reference/ is never counted as done. A folder counts as done only when its config fingerprint
(contract/fingerprint.py) is the plan's.
"""
from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import reader, runfiles, runfolder
from contract.config import (DISTRIBUTED_BACKENDS, SHARDING_BACKENDS, Config, ConfigError, ModelConfig,
                             blocking_path, cpu_isa_env)
from contract.fingerprint import config_fingerprint
from contract.reader import folder_fingerprint
from contract.plan import NODE_SCALE, Run, Study, node_fits, node_processes
from studies import node, tf_launch
from trainers.rendezvous import free_port, torchrun_command

REPO = Path(__file__).resolve().parents[1]
FINISHED = reader.FINISHED
OTHER_CONFIG = "other-config"  # a run folder made by a config other than the plan's
NO_IDENTITY = "no-identity"  # a run folder whose config.json cannot be read: whose run it holds is unknown
DAMAGED = "damaged"  # a run folder whose records are not its documents' run (contract/reader.py record_problem)
NO_FOLDER = "no-folder"  # the run's folder is a symbolic link that leads to no folder (dangling, a loop), or a file
REFUSED = {OTHER_CONFIG: "another config's run", NO_IDENTITY: "a run without a readable config.json",  # what each holds
           DAMAGED: "a run whose records cannot be read as its config's", NO_FOLDER: "a link to no folder, or a file"}
MISSING, NO_STATUS = "missing", "no-status"  # no manifest; a manifest without a readable status (folder_status)
FULL_OUT, QUICK_OUT = Path("results/runs"), Path("results/quick")  # full and smoke runs never share folders
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PEER_GRACE_S = 60  # how long a run's other processes may outlive one that failed (they wait for it forever)
PEER_KILL_S = 10  # then SIGTERM, and this long after it SIGKILL
TORCHRUN_BACKENDS = ("ddp", *SHARDING_BACKENDS)  # PyTorch's process groups: torchrun starts their ranks here


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
    trainer_args: list[str]  # the trainer's arguments: the run's config.json, which the study writes as it starts it
    fingerprint: str = ""
    processes: int = 0  # the node scale: P = min(W, the node's GPUs) for DDP/Horovod (studies/node.py); 0 = W

    def ranks(self) -> int:
        """Processes a DDP/Horovod run starts: W, or at the node scale at most the node's GPUs (W/P workers each)."""
        return self.processes or self.run.workers

    def describe(self, nodes: int, per_node: int) -> str:
        c, r = self.cfg, self.cfg.resolved(self.backend)
        warmup = "none" if c.lr.warmup == "none" else f"{c.lr.warmup} {c.lr.warmup_epochs} epochs"
        framework = c.framework(self.backend)
        label = framework if framework == self.backend else f"{framework} ({self.backend})"
        return (f"{self.run.name}: {label}, {nodes} node(s) x {per_node} "
                f"process(es), {r['world_size']} worker(s), per-GPU batch {c.train.per_worker_batch}, global batch "
                f"{r['global_batch']}, lr {r['lr']:.4g}, warm-up {warmup}, {c.train.epochs} epochs"
                + (f", benchmark {c.bench.batches} batches" if c.bench.batches else "")
                + (f", capped at {c.train.max_steps} steps" if c.train.max_steps and not c.bench.batches else ""))


def planned_runs(study: Study, scale: str, out: Path, gpus: int | None = None) -> list[Plan]:
    """gpus: at the node scale, the node's GPUs (studies/node.py); runs it cannot hold are left out with a line."""
    if scale == NODE_SCALE:
        gpus, source = node.node_gpus(study.config, gpus)
        print(f"node: {gpus} GPU(s) ({source})")
    plans = []
    for run in study.runs:
        cfg = run.cfg
        run_dir = out / cfg.experiment / run.name
        args = [str(run_dir / runfolder.CONFIG)]  # the run as planned, saved there as it starts (write_planned)
        fingerprint = config_fingerprint(cfg)
        backend = run.backend
        processes = 0
        if scale == NODE_SCALE:
            if not node_fits(run.workers, backend, gpus, cfg.bench.batches > 0):
                print(f"# {run.name}: left out, needs {run.workers} GPUs; the node has {gpus}")
                continue
            processes = node_processes(run.workers, backend, gpus)
        plans.append(Plan(run, cfg, backend, run_dir, folder_status(run_dir, fingerprint), args, fingerprint,
                          processes))
    return plans


def folder_status(run_dir: Path, fingerprint: str) -> str:
    """The run folder's status for this plan: missing, running, completed..., OTHER_CONFIG when the folder holds
    a run of another config (a smoke run under a full run's name, a run from before a config change), or NO_IDENTITY
    when it holds a run whose config.json cannot be read: such a run may be any config's, so it never counts as this
    plan's (completed) nor is resumed as it; DAMAGED when its records cannot be read as the run its documents name
    (config.json changed after the run, a finished run's metrics.jsonl gone), NO_FOLDER when its path leads to no
    folder (a dangling or looping symbolic link, a file)."""
    if blocking_path(run_dir):
        return NO_FOLDER
    if reader.identity_problem(run_dir):
        return NO_IDENTITY
    found = folder_fingerprint(run_dir)
    if found is not None and found != fingerprint:
        return OTHER_CONFIG
    if reader.record_problem(run_dir):
        return DAMAGED
    # no manifest: nothing started (the trainer starts afresh); one the study cannot read a status from (written half,
    # or by a writer killed before its status): started with --resume auto, which continues or starts afresh
    if not (run_dir / runfolder.MANIFEST).exists():
        return MISSING
    status = (reader.read_manifest(run_dir) or {}).get("status")
    return status if status in runfolder.STATUSES else NO_STATUS


def refuse_unknown_runs(plans: list[Plan]) -> None:
    """One line before anything starts when a planned run's folder holds another config's run, or a run whose config
    cannot be read: it is neither resumed (it would mix two configs in one run) nor skipped (it would count as this
    plan's result)."""
    for status, why in ((NO_FOLDER, _no_folder_line), (NO_IDENTITY, _no_identity_line),
                        (OTHER_CONFIG, _other_config_line), (DAMAGED, _damaged_line)):
        found = [p for p in plans if p.status == status]
        if found:
            more = f" (and {len(found) - 1} more folder(s))" if len(found) > 1 else ""
            raise ConfigError(why(found[0]) + more)


def _other_config_line(p: Plan) -> str:
    return (f"{p.run_dir} holds a run of another config (fingerprint {folder_fingerprint(p.run_dir)}, this plan's "
            f"{p.fingerprint}); move it away or run the study with --out DIR")


def _no_identity_line(p: Plan) -> str:
    return (f"{p.run_dir} holds a run whose {reader.identity_problem(p.run_dir)}: which config and seed it ran "
            f"cannot be told, so it is neither skipped nor resumed; clear it (rm -r {p.run_dir}) and run the study "
            "again to re-plan it")


def _damaged_line(p: Plan) -> str:
    return (f"{p.run_dir} holds a run whose {reader.record_problem(p.run_dir)}; it is neither skipped as done nor "
            f"resumed: restore what changed, or clear it (rm -r {p.run_dir}) and run the study again to re-plan it")


def _no_folder_line(p: Plan) -> str:
    path, why = blocking_path(p.run_dir)
    link = f"remove the link (rm {path}) or " if path.is_symlink() else ""
    return f"{p.run_dir} cannot hold the run: {why}; {link}run the study with --out DIR"


def local_commands(plan: Plan) -> list[list[str]]:
    """The processes one run needs on this machine: one per torchrun node, or one horovodrun, or one python; a
    TensorFlow run runs its own trainer (studies/tf_launch.py)."""
    run, py = plan.run, sys.executable
    args = plan.trainer_args + (["--resume", "auto"] if plan.status != MISSING else [])
    tensorflow = plan.cfg.train.framework == "tensorflow"
    trainer = [py, "-m", "trainers.tf" if tensorflow else "trainers", "train", *args]
    if plan.backend == "horovod":  # with Gloo, PyTorch's and TensorFlow's alike
        horovodrun = str(Path(py).parent / "horovodrun")
        return [[horovodrun, "-np", str(plan.ranks()), "-H", f"localhost:{plan.ranks()}", "--gloo", *trainer]]
    if tensorflow:
        return tf_launch.mwms_commands(plan.ranks(), trainer)
    if plan.backend in TORCHRUN_BACKENDS:
        per_node = plan.ranks() // run.nodes
        if run.nodes == 1:
            return [[*torchrun_command(py), "--standalone", "--nproc-per-node", str(per_node), *trainer[1:]]]
        port = str(free_port())  # a fresh rendezvous per run: several torchrun nodes on localhost
        return [[*torchrun_command(py), "--nnodes", str(run.nodes), "--node-rank", str(node),
                 "--nproc-per-node", str(per_node), "--master-addr", "127.0.0.1", "--master-port", port,
                 *trainer[1:]] for node in range(run.nodes)]
    return [trainer]


def last_epoch(run_dir: Path) -> dict | None:
    """The newest epoch record of a run (for the progress line)."""
    return reader.last_record(run_dir / runfolder.METRICS, "epoch")


# ----------------------------------------------------------------------------------------------------------------
# Starting a run's processes here
# ----------------------------------------------------------------------------------------------------------------
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
    claim: Any = None  # this study's claim on the run (contract/locks.StudyClaim), dropped when its processes end

    def console_text(self) -> str:
        try:
            with runfiles.open_run_file(self.plan.run_dir / runfolder.CONSOLE) as f:
                f.seek(self.console_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    failed_at: float | None = None  # when one of the run's processes first exited with a failure

    def poll(self) -> int | None:
        codes = [p.poll() for p in self.procs]
        if any(c is None for c in codes):
            self.end_stranded_peers(codes)
            return None
        self.console.close()
        if self.claim is not None:
            self.claim.release()
        return max(abs(p.returncode) for p in self.procs)

    def end_stranded_peers(self, codes: list[int | None]) -> None:
        """A run's process that failed (an MWMS worker whose gRPC server could not start, one node's torchrun) leaves
        its peers waiting for it forever: after PEER_GRACE_S they are sent SIGTERM, PEER_KILL_S later SIGKILL (a
        TensorFlow worker blocked in gRPC ignores SIGTERM), so the run ends failed and the study goes on."""
        if not any(c not in (None, 0) for c in codes):
            return
        self.failed_at = self.failed_at or time.monotonic()
        waited = time.monotonic() - self.failed_at
        for proc, code in zip(self.procs, codes):
            if code is None and waited > PEER_GRACE_S:
                proc.kill() if waited > PEER_GRACE_S + PEER_KILL_S else proc.terminate()


def threads_per_process(plan: Plan, jobs: int, cores: int | None = None) -> int:
    """This machine's cores shared evenly by the runs side by side and each run's processes. torchrun alone would
    give its ranks 1 thread and horovodrun the default (all cores, each): 4 Horovod ranks on 2 cores then spin
    against each other, and DDP and Horovod would not be compared on equal terms."""
    processes = plan.ranks() if plan.backend in DISTRIBUTED_BACKENDS else 1
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


def write_planned(plan: Plan) -> None:
    """The run's config.json, from which its trainer starts: the config resolved once, by the plan."""
    runfolder.write_planned_config(plan.cfg, plan.run_dir, plan.backend)


def start_local(plan: Plan, index: int, jobs: int) -> Active:
    write_planned(plan)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.setdefault("OMP_NUM_THREADS", str(threads_per_process(plan, jobs)))  # a user's own setting wins
    before = last_epoch(plan.run_dir)
    env.update(cpu_isa_env(plan.cfg.train.cpu_isa))  # read once by torch: set before the trainer starts
    # plain, appended by every attempt and read from this attempt's offset while it runs (console_text): only a
    # finished run's is compacted (contract/runfiles.py)
    console = open(plan.run_dir / runfolder.CONSOLE, "a")
    console_start = console.seek(0, os.SEEK_END)  # before the children share (and move) the file offset
    # own session: a Ctrl-C reaches the study, which stops its runs gracefully (SIGTERM -> checkpoint); and a
    # SIGTERM when the study dies, however it dies (kill -9 included), so no trainer goes on alone
    procs = [subprocess.Popen(c, stdout=console, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True,
                              preexec_fn=terminate_with_parent(os.getpid()))
             for c in local_commands(plan)]
    return Active(plan, index, procs, console, time.time(), done_at_start=before["epoch"] + 1 if before else 0,
                  console_start=console_start)


# ----------------------------------------------------------------------------------------------------------------
# Checks before anything starts: the disk's free space, the data's folder
# ----------------------------------------------------------------------------------------------------------------
IMAGENET_TRAIN_IMAGES = 1_281_167
RECORD_BYTES = 700  # an iter record and its train.log line


@functools.lru_cache(maxsize=None)
def parameters(model: ModelConfig) -> int:
    """The parameters of a model (its workload's: trainers/workload.py), built once a model section."""
    from trainers import workload

    cfg = Config(model=model)
    return sum(p.numel() for p in workload.of(cfg).build_model(cfg).parameters())


def run_bytes(cfg: Config) -> int:
    """About what a run writes: its checkpoint twice (the new copy is written before the old one goes; weights and
    momentum) and a record and a log line every print_freq steps."""
    params = parameters(cfg.model)
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


def data_warning(study: Study) -> str | None:
    """One line when the runs would read ILSVRC-2012 from an unset $IMAGENET_DIR (the gpu and thesis scales)."""
    data = study.runs[0].cfg.data  # the study's data section, whichever run; its $VARIABLES as written
    if data.kind != "imagefolder" or (data.path and "$" not in os.path.expandvars(data.path)):
        return None
    unset = "IMAGENET_DIR is not set" if "IMAGENET_DIR" in data.path else "data.path is not set"
    return (f"warning: {unset} (data.path = {data.path or 'empty'}): the runs need the ILSVRC-2012 root "
            "(train/ and val/) where they start; export IMAGENET_DIR=..., or let a Slurm profile stage a tar")
