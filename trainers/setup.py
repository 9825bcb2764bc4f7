"""What a run trains with, built by one function: the model, optimizer, loaders and backend of this process.

    setup, state = build_setup(cfg, run_dir, backend_name, launch, resume, echo, pinned)

`Setup` is built once and only read after (a frozen dataclass): the objects the run trains with, whose contents
change as it trains (the weights, the loaders' positions, this attempt's meters), never which objects they are.
Where the run stands is the `TrainState` (checkpoint.py), all a checkpoint saves besides the weights. A resume builds
the same Setup and takes its TrainState from the checkpoint, at the same point of the build as ever (the generators'
states included): after the model and optimizer, before the passes are measured and the loaders built.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from contract import events, placement
from contract.config import Config
from contract.runfolder import CHECKPOINT, RunFolder
from trainers import backends, checkpoint, compute, data, rendezvous, telemetry, workload
from trainers.optimizers import build_optimizer
from trainers.tallies import StepTimes, UnreadableFiles

EVAL_BATCH = 250  # train.eval_every's evaluations: batches at least this large (forward only, in eval mode)


# ---- Preemption: Slurm sends SIGUSR1 (--signal) or SIGTERM before it kills a job; stop at a step's end ------------
class StopSignal:
    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self):
        self.received: int | None = None
        self.rehearsed = False  # rehearse: once an attempt
        self.previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}

    def _handle(self, signum, frame):
        self.received = signum

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def rehearse(self, step: int, is_main: bool, log) -> None:
        """TRAINERS_REHEARSE_PREEMPTION=S (cluster-check's train layer): after S steps of a Slurm job's first attempt,
        rank 0 has Slurm send its batch shell the time limit's warning (`scancel --batch --signal=USR1`) and waits
        for it here, so job.sh's trap, the forwarding, checkpoint, requeue and resume are rehearsed on any machine."""
        at = int(os.environ.get("TRAINERS_REHEARSE_PREEMPTION") or 0)
        if not at or step < at or not is_main or self.received is not None or self.rehearsed \
                or rendezvous.restarts(os.environ) > 0 or "SLURM_JOB_ID" not in os.environ:
            return
        self.rehearsed = True  # once an attempt
        import subprocess

        subprocess.run(["scancel", "--batch", "--signal=USR1", os.environ["SLURM_JOB_ID"]], timeout=60)
        deadline = time.monotonic() + 120
        while self.received is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.received is None:
            log("=> rehearsed preemption: the signal sent to the batch shell did not reach this rank")


def place(cfg: Config, launch: backends.Launch, pinned: dict) -> tuple[placement.Allocation, placement.Placement]:
    """This rank's CPUs, threads and loader workers from its allocation (contract/placement.py); more threads
    than CPUs, which an explicit setting may ask for, is one warning line (rank 0's)."""
    local = max(launch.local_world_size, launch.local_rank + 1)
    if backends.is_loopback(launch.master_addr):  # torchrun's "nodes" on localhost share this machine's CPUs
        local = max(local, launch.world_size)
    alloc = placement.read_allocation(local)
    placed = placement.decide(alloc, cfg.train.threads, pinned.get("threads"),
                              placement.user_omp_threads(launch.launcher), cfg.data.loader_workers)
    warning = placed.warning(launch.rank, socket.gethostname())
    if warning and launch.rank == 0:
        print(warning, file=sys.stderr, flush=True)
    return alloc, placed


@dataclasses.dataclass(frozen=True)
class Setup:
    """One process's part of a run: what it trains with, the meters that write its records, where they go."""
    cfg: Config
    workload: workload.Vision | workload.Plugin  # what trains: the model, data and batches (trainers/workload.py)
    launch: backends.Launch
    allocation: placement.Allocation
    placement: placement.Placement
    policy: Any  # the learning-rate schedule (contract/lr.py)
    backend: backends.Backend
    run: RunFolder
    ckpt_path: Path
    resuming: bool
    compute: compute.Compute
    model: nn.Module
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    per_shard_batch: int
    train_ds: Any
    val_ds: Any
    dataset: dict | None  # the workload's description of the data it read (the manifest's `dataset`), or None
    train_sampler: data.StepBatchSampler
    train_batches: data.DeviceBatches  # built once: each epoch only moves the sampler on
    val_loader: data.DeviceBatches
    stop: StopSignal
    times: StepTimes
    unreadable: UnreadableFiles
    telemetry: telemetry.UtilRecords


def build_setup(cfg: Config, run_dir: Path, backend_name: str, launch: backends.Launch, resume: bool,
                echo: bool = True, pinned: dict | None = None) -> tuple[Setup, checkpoint.TrainState]:
    """The Setup and the state training starts from; `pinned`: a resumed run's arithmetic (checks.pin_arithmetic)."""
    t, pinned = cfg.train, pinned or {}
    allocation, placed = place(cfg, launch, pinned)
    torch.set_num_threads(placed.threads)  # the same rule under every launcher (contract/placement.py)
    compute.configure_torch(t)
    policy = cfg.lr_policy()
    w = workload.of(cfg)
    # Data first: generating the miniature dataset may take a minute, and no peer should be waiting on us.
    train_ds, val_ds, dataset = w.build_datasets(cfg)
    b = backends.create(cfg, launch, backend_name)
    resuming = resume and (run_dir / CHECKPOINT).exists()
    run = RunFolder(run_dir, writes=b.is_main(), echo=echo, fresh=not resuming, events=events.live(run_dir, b.is_main()))
    b.start_run(run_dir)
    torch.manual_seed(t.seed)
    c = compute.Compute(t, b.device)
    model, criterion, optimizer = build_trained(cfg, w, b, policy)
    per_shard_batch = t.per_worker_batch * b.batch_multiplier
    sampler = data.StepBatchSampler(len(train_ds), b.shards(), per_shard_batch, seed=t.seed, shuffle=True)
    if resuming:
        state = checkpoint.restore_state(run_dir / CHECKPOINT, run, b, model, optimizer, c, epochs=t.epochs,
                                         steps=len(sampler))
    else:
        state = checkpoint.TrainState()
        b.broadcast_initial_state(model, optimizer)
    passes = b.fit_passes(optimizer, lambda workers: try_pass(cfg, w, c, model, criterion, b.device, workers),
                          pinned.get("workers_per_pass"))
    if passes:
        run.log(passes)
    stop = StopSignal()  # from here on a signal stops the run at a step's end
    decoder = cfg.data.decoder if cfg.data.kind == "imagefolder" else None  # only JPEG folders are decoded
    train_batches, val_loader = make_loaders(cfg, b, placed.loader_workers, (train_ds, val_ds), sampler,
                                             per_shard_batch, w.collate)
    return Setup(cfg, w, launch, allocation, placed, policy, b, run, run_dir / CHECKPOINT, resuming, c, model,
                 criterion, optimizer, per_shard_batch, train_ds, val_ds, dataset, sampler,
                 train_batches=train_batches, val_loader=val_loader, stop=stop, times=StepTimes(decoder),
                 unreadable=UnreadableFiles(b, cfg.data.val_mode),
                 telemetry=telemetry.UtilRecords(cfg.telemetry.interval_s, b, run)), state


def build_trained(cfg: Config, w: workload.Vision | workload.Plugin, b: backends.Backend,
                  policy) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer]:
    """The workload's model (prepared, wrapped by its backend, compiled where asked), its loss and its optimizer."""
    t = cfg.train
    model = b.wrap_model(compute.prepare_model(w.build_model(cfg), t))
    model = torch.compile(model) if t.compile else model  # the wrapped model (DDP's optimizer splits the graph)
    criterion = nn.CrossEntropyLoss().to(b.device)
    optimizer = b.wrap_optimizer(build_optimizer(model, cfg.optim, policy.target), model)
    return model, criterion, optimizer


def make_loaders(cfg: Config, b: backends.Backend, workers: int, datasets: tuple[Any, Any],
                 train_sampler: data.StepBatchSampler, per_shard_batch: int,
                 stack=None) -> tuple[data.DeviceBatches, ...]:
    """The training and validation loaders, built once: each epoch only moves the sampler on (persistent workers
    keep running). `workers`: data.loader_workers, at most the rank's CPUs; `stack`: the workload's collate."""
    train_ds, val_ds = datasets
    pin = b.device.type == "cuda"
    # on a GPU the next batches are moved (and decoded) on a stream of their own while this one trains
    train_batches = data.DeviceBatches(data.make_loader(train_ds, train_sampler, workers, pin, stack), b.device)
    val_batch = per_shard_batch * len(b.shards())
    if cfg.train.eval_every:  # evaluated often: in batches of at least EVAL_BATCH (eval mode: the same sums)
        val_batch = max(val_batch, EVAL_BATCH)
    val = data.IndexBatches(data.val_indices(len(val_ds), b.world_size, b.rank, cfg.data.val_mode), val_batch)
    return train_batches, data.DeviceBatches(data.make_loader(val_ds, val, workers, pin, stack), b.device)


def placement_record(s: Setup) -> dict:
    """This rank's entry in the manifest's per-rank `placement` (its host, CPUs, threads, loader workers, GPU)."""
    device = s.backend.device
    gpu = None
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        gpu = (index, str(torch.cuda.get_device_properties(index).uuid))
    return placement.record(s.placement, s.allocation, socket.gethostname(), s.launch.local_rank, gpu)


def try_pass(cfg: Config, w: workload.Vision | workload.Plugin, c: compute.Compute, model: nn.Module,
             criterion: nn.Module, device: torch.device, workers: int) -> None:
    """Forward and backward of `workers` workers' batches of zeros (the workload's): the backend's measure of what
    one pass holds (fit_passes). Zeros draw no random numbers; the backend keeps the running statistics out of it."""
    images, target = w.dummy_batch(cfg, workers * cfg.train.per_worker_batch, device)
    images = c.layout(images)
    model.train()
    with c.autocast():
        loss = criterion(model(images), target)
    c.backward(loss)
