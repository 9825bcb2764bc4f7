"""The one training loop: every experiment, scale and backend runs this.

    trainer = Trainer(cfg, run_dir, backend_name, launch, resume)   # model, optimizer, data on the backend
    trainer.fit()   # per epoch: train_epoch (step after step), validate, the epoch record, the checkpoint

Read top to bottom: `Trainer.fit` (the epochs), `train_epoch` (the steps, and the checks that stop a run: a NaN
loss raises Diverged, a stop signal Preempted, agreed by all ranks where the meters are read), `step`, `validate`,
the step cap. A step cap (train.max_steps, a smoke run) ends the run early: the epoch it ends in is validated on as
many batches as the cap and recorded as the last. Beside the loop, each an object or module it calls: a `Backend`
(trainers/backends) for everything distributed, trainers.data for batches, LogEvery (runlog.py) for train.log's
cadence, what it counts (tallies.py: the step time's split, fp16's skipped steps, unreadable files), the util
records (telemetry.py), what a checkpoint holds and a resume puts back (checkpoint.py) and RunFolder for its
records. Who starts it and turns its way out into a status and an exit code: trainers/run.py; its benchmark mode:
bench.py.
"""
from __future__ import annotations

import itertools
import math
import os
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

from trainers import backends, checkpoint, compute, data, rendezvous, telemetry
from contract import events, placement
from contract.config import Config
from contract.lr import lr_at
from trainers.models import build_model
from trainers.optimizers import build_optimizer
from contract.runfolder import CHECKPOINT, RunFolder
from trainers.runlog import DeviceTotals, LogEvery, Sums, summary_line, test_line, train_line
from trainers.tallies import SkippedSteps, StepTimes, UnreadableFiles


EVAL_BATCH = 250  # train.eval_every's evaluations: batches at least this large (forward only, in eval mode)


class Diverged(Exception):
    pass


class Preempted(Exception):
    pass


# ----------------------------------------------------------------------------------------------------------------
# Preemption: Slurm sends SIGUSR1 (--signal) or SIGTERM before it kills a job; stop at the next iteration boundary
# ----------------------------------------------------------------------------------------------------------------
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
        """TRAINERS_REHEARSE_PREEMPTION=S (make cluster-check's train layer): once a Slurm job's first attempt has
        done S optimizer steps, rank 0 has Slurm send its batch shell the time limit's warning (`scancel --batch
        --signal=USR1`, as `--signal=B:USR1@N` would) and waits until the launcher has forwarded it here. So the whole
        path (job.sh's trap, srun's forwarding, the checkpoint, the requeue, the resume) is rehearsed at a step
        chosen in advance, on any machine; a signal that never arrives is said, and the run goes on."""
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


# ----------------------------------------------------------------------------------------------------------------
# The trainer: one process's part of a run
# ----------------------------------------------------------------------------------------------------------------
class Trainer:
    """The model, its optimizer and its data on this process's backend; `fit` trains them epoch by epoch."""

    def __init__(self, cfg: Config, run_dir: Path, backend_name: str, launch: backends.Launch, resume: bool,
                 echo: bool = True, pinned: dict | None = None):
        self.cfg = cfg
        t = cfg.train
        self.pinned = pinned or {}  # a resumed run's arithmetic, as it started (pin_arithmetic)
        self.launch = launch
        self.allocation, self.placement = place(cfg, launch, self.pinned)
        torch.set_num_threads(self.placement.threads)  # the same rule under every launcher (contract/placement.py)
        compute.configure_torch(t)
        self.policy = cfg.lr_policy()
        # Data first: generating the miniature dataset may take a minute, and no peer should be waiting on us.
        self.train_ds, self.val_ds = data.build_datasets(cfg.data, cfg.model.num_classes, t.seed)
        self.backend = b = backends.create(cfg, launch, backend_name)
        self.ckpt_path = run_dir / CHECKPOINT
        self.resuming = resume and self.ckpt_path.exists()
        self.run = RunFolder(run_dir, writes=b.is_main(), echo=echo, fresh=not self.resuming,
                             events=events.live(run_dir, b.is_main()))
        b.start_run(run_dir)
        torch.manual_seed(t.seed)
        self.compute = compute.Compute(t, b.device)
        self.model = compute.compile_model(b.wrap_model(compute.prepare_model(build_model(cfg.model), t)), t)
        self.criterion = nn.CrossEntropyLoss().to(b.device)
        self.optimizer = b.wrap_optimizer(build_optimizer(self.model, cfg.optim, self.policy.target), self.model)
        self.per_shard_batch = t.per_worker_batch * b.batch_multiplier
        self.train_sampler = data.StepBatchSampler(len(self.train_ds), b.shards(), self.per_shard_batch,
                                                   seed=t.seed, shuffle=True)  # before restore: its steps bound it
        self.start_epoch, self.start_step, self.partial, self.best_top1 = 0, 0, Sums(), 0.0
        self.lr = 0.0  # the learning rate last set (set_lr)
        self.skipped = SkippedSteps(self.compute, self.run.log)
        if self.resuming:
            checkpoint.restore_trainer(self)
        else:
            b.broadcast_initial_state(self.model, self.optimizer)
        passes = b.fit_passes(self.optimizer, self.try_pass, self.pinned.get("workers_per_pass"))
        if passes:
            self.run.log(passes)
        self.stop = StopSignal()
        decoder = cfg.data.decoder if cfg.data.kind == "imagefolder" else None  # only JPEG folders are decoded
        self.times, self.unreadable = StepTimes(decoder), UnreadableFiles(b, self.run, cfg.data.val_mode)
        self.make_loaders()
        self.telemetry = telemetry.UtilRecords(cfg.telemetry.interval_s, b, self.run)

    def placement_record(self) -> dict:
        """This rank's entry in the manifest's per-rank `placement` (its host, CPUs, threads, loader workers, GPU)."""
        device = self.backend.device
        gpu = None
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            gpu = (index, str(torch.cuda.get_device_properties(index).uuid))
        return placement.record(self.placement, self.allocation, socket.gethostname(), self.launch.local_rank, gpu)

    def make_loaders(self) -> None:
        """The loaders, built once: each epoch only moves the sampler on (persistent workers keep running)."""
        b, workers = self.backend, self.placement.loader_workers  # data.loader_workers, at most the rank's CPUs
        pin = b.device.type == "cuda"
        self.train_loader = data.make_loader(self.train_ds, self.train_sampler, workers, pin)
        # on a GPU the next batches are moved (and decoded) on a stream of their own while this one trains
        self.train_batches = data.DeviceBatches(self.train_loader, b.device)
        val_batch = self.per_shard_batch * len(b.shards())
        if self.cfg.train.eval_every:  # evaluated often: in batches of at least EVAL_BATCH (eval mode: the same sums)
            val_batch = max(val_batch, EVAL_BATCH)
        val = data.IndexBatches(data.val_indices(len(self.val_ds), b.world_size, b.rank, self.cfg.data.val_mode),
                                val_batch)
        self.val_loader = data.DeviceBatches(data.make_loader(self.val_ds, val, workers, pin), b.device)

    # ---- the run: epochs ----------------------------------------------------------------------------------
    def fit(self) -> None:
        """Each epoch from the start (or the checkpoint): train, validate, record, checkpoint; a stop signal that
        reached any rank ends the run after the epoch."""
        last_epoch = self.last_epoch()
        for epoch in range(self.start_epoch, last_epoch):
            if self.reached_target():  # the epoch before reached it (or did, before a resume)
                break
            started = time.time()
            train = self.train_epoch(epoch).reduced(self.backend)
            capped = self.cut_by_cap() and epoch + 1 == last_epoch
            val = self.validate(self.cfg.train.max_steps if capped else None)
            train_loss, train_top1, train_top5 = train.means()
            val_loss, val_top1, val_top5 = val.means()
            self.run.log(summary_line(val_top1, val_top5))
            skipped = self.skipped.end_epoch(len(self.train_sampler))
            self.best_top1 = max(self.best_top1, val_top1)
            unreadable = self.unreadable.end_epoch(epoch)
            self.run.record(
                "epoch", epoch=epoch, lr=lr_at(epoch, 0, 1, self.policy), train_loss=train_loss,
                train_top1=train_top1, train_top5=train_top5, val_loss=val_loss, val_top1=val_top1,
                val_top5=val_top5, epoch_time=time.time() - started, images=train.images,
                skipped_images=unreadable["train"], skipped_val_images=unreadable["val"], skipped_steps=skipped,
                data_share=self.times.epoch_data_share, **self.times.split,
            )
            self.telemetry.write(gather=True)
            checkpoint.save_trainer(self, epoch + 1, 0, Sums())
            self.run.progress(epochs_done=epoch + 1, best_val_top1=self.best_top1,
                              unreadable_images=self.run.manifest.get("unreadable_images", {}),
                              data_wait_share=self.times.data_wait_share(), skipped_steps=self.skipped.total)
            # every rank agrees (a collective): a signal that reached one rank before this point and another after
            # it would otherwise stop one and leave the other waiting in the next epoch's first allreduce
            if self.backend.any_rank(self.stop.received is not None) and epoch + 1 < last_epoch:
                raise Preempted(f"stopped by a signal after epoch {epoch}; checkpoint written")

    # ---- one epoch of training ----------------------------------------------------------------------------
    def train_epoch(self, epoch: int) -> Sums:
        """The epoch's steps from self.start_step (a resume mid-epoch) to its end or the step cap: this process's
        sums. Where the meters are read, all ranks agree, at the same iteration, on whether to stop: a NaN loss on
        any rank ends the run as diverged; a stop signal on any rank, with a checkpoint of this very step."""
        b = self.backend
        loader, n = self.batches(epoch, self.start_step)
        last = self.capped_steps(epoch)  # n, unless the step cap ends the run in this epoch
        totals, self.partial = DeviceTotals(b.device, self.partial), Sums()
        every = LogEvery(totals, self.cfg.train.print_freq, lambda i, meters: self.log_iteration(epoch, i, n, meters),
                         also={last - 1})  # the epoch's last step: its reading is the epoch's sums
        self.model.train()
        self.run.log(f"Setting learning rate for epoch {epoch} to {lr_at(epoch, self.start_step, n, self.policy)}")
        comm_start = b.comm_seconds()
        steps = enumerate(loader, start=self.start_step)
        if last < n:  # capped: the loader is left unfinished (the run ends with this epoch)
            steps = itertools.islice(steps, max(0, last - self.start_step))
        for i, (images, target, skipped) in every(steps):
            self.unreadable.add("train", skipped)
            self.set_lr(lr_at(epoch, i, n, self.policy))
            output, loss = self.step(images, target)
            totals.add(loss, output, target)
            # a lone process looks at a stop signal every step; several agree on one where they all read anyway
            reading = every.end_step(i, read=b.world_size == 1 and self.stop.received is not None)
            if self.eval_due(epoch, i, last) and self.evaluate(epoch, i):
                break  # the target reached at this step: the epoch ends here (fit validates, records, checkpoints)
            if reading is None:
                continue
            self.stop.rehearse(epoch * len(self.train_sampler) + i + 1, b.is_main(), self.run.log)
            # a NaN anywhere since the last reading has made the summed loss NaN (losses are >= 0)
            read_loss = reading.loss if math.isfinite(reading.sums.loss) else reading.sums.loss
            if not b.any_rank(not math.isfinite(read_loss) or self.stop.received is not None):
                continue
            if b.any_rank(not math.isfinite(read_loss)):
                raise Diverged(f"loss is {read_loss} at epoch {epoch}, iteration {i}")
            if i + 1 < last:  # a signal at the epoch's last step: the epoch ends first (validated, checkpointed)
                checkpoint.save_trainer(self, epoch, i + 1, reading.sums)
                raise Preempted(f"stopped by a signal at epoch {epoch}, iteration {i + 1}; checkpoint written")
        self.start_step = 0
        data_s = every.data_time.sum + loader.gpu_wait_s()  # plus the GPU's idle wait for a batch still being decoded
        self.times.add_epoch(data_s, every.batch_time.sum, b.comm_seconds() - comm_start)
        return every.sums

    def step(self, images: torch.Tensor, target: torch.Tensor):
        """Forward, backward, update: the batch's logits and mean loss, on the device (nothing waits for the GPU).

        The backend may split the batch into passes (Horovod's local accumulation; emulated workers that don't
        fit in one pass); each pass's loss is weighted by its share of the images, so the accumulated gradient is
        the whole batch's mean loss gradient.
        """
        c = self.compute
        images = c.layout(images)
        self.optimizer.zero_grad()
        outputs, losses, total = [], [], len(target)
        for x, y in self.backend.micro_batches(images, target):
            with c.autocast():
                output = self.model(x)
                loss = self.criterion(output, y)
            c.backward(loss if len(y) == total else loss * (len(y) / total))
            outputs.append(output.detach())
            losses.append(loss.detach() if len(y) == total else loss.detach().double() * len(y))
        c.optimizer_step(self.backend, self.optimizer)
        if len(outputs) == 1:
            return outputs[0], losses[0]
        return torch.cat(outputs), torch.stack(losses).sum() / total

    def batches(self, epoch: int, start_step: int):
        self.train_sampler.set_epoch(epoch, start_step)
        return self.train_batches, len(self.train_sampler)  # the full epoch's steps, also when resuming mid-epoch

    def set_lr(self, lr: float) -> None:
        self.lr = lr  # the rate the iter records show
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def log_iteration(self, epoch: int, i: int, n: int, every: LogEvery) -> None:
        """train.log's line and the iter record of a training or benchmark step (LogEvery's write)."""
        batch_time, data_time, r = every.batch_time, every.data_time, every.reading
        self.run.log(train_line(epoch, i, n, batch_time, data_time, r.losses, r.top1, r.top5), progress=True)
        if self.backend.is_main():
            self.telemetry.write(gather=False)
        self.run.record(
            "iter", epoch=epoch, iter=i, iters=n, lr=self.lr, images=every.totals.last_images * self.backend.world_size,
            batch_time=batch_time.val, batch_time_avg=batch_time.avg, data_time=data_time.val,
            data_time_avg=data_time.avg, loss=r.losses.val, loss_avg=r.losses.avg, top1=r.top1.val,
            top1_avg=r.top1.avg, top5=r.top5.val, top5_avg=r.top5.avg,
        )

    # ---- evaluation every k steps (train.eval_every): steps to a target at k steps' resolution ------------------
    def eval_due(self, epoch: int, i: int, last: int) -> bool:
        """Step i of `epoch` ends a k-step stretch (counted over the whole run, so a resume keeps the cadence) and is
        not the epoch's last (whose evaluation is the epoch's own)."""
        k = self.cfg.train.eval_every
        return bool(k) and (epoch * len(self.train_sampler) + i + 1) % k == 0 and i + 1 < last

    def evaluate(self, epoch: int, i: int) -> bool:
        """One evaluation after step i: its `eval` record; True when it reached train.stop_at_top1."""
        started = time.time()
        loss, top1, top5 = self.validate().means()
        self.model.train()
        self.best_top1 = max(self.best_top1, top1)
        self.run.record("eval", epoch=epoch, iter=i, step=epoch * len(self.train_sampler) + i + 1, val_loss=loss,
                        val_top1=top1, val_top5=top5, eval_time=time.time() - started)
        return self.reached_target()

    # ---- validation ---------------------------------------------------------------------------------------
    def validate(self, batches: int | None = None) -> Sums:
        """The validation sums (all ranks'); batches: the first this many batches only (a capped run's last epoch)."""
        n = len(self.val_loader)
        every = LogEvery(DeviceTotals(self.backend.device), self.cfg.train.print_freq, lambda i, meters: self.run.log(
            test_line(i, n, meters.batch_time, meters.reading.losses, meters.reading.top1, meters.reading.top5),
            progress=True))
        self.model.eval()
        with torch.no_grad():
            for i, (images, target) in every(itertools.islice(self.val_batches(), batches)):
                with self.compute.autocast():
                    output = self.model(self.compute.layout(images))
                    loss = self.criterion(output, target)
                every.totals.add(loss, output, target)
                every.end_step(i)
        sums = every.final_sums()
        # "every_rank" (the thesis): each rank saw the whole set, so rank 0's sums are exact already
        return sums.reduced(self.backend) if self.cfg.data.val_mode == "sharded" else sums

    def val_batches(self):
        """The validation batches with their numbers; a batch all of whose files were unreadable is left out."""
        for i, (images, target, skipped) in enumerate(self.val_loader):
            self.unreadable.add("val", skipped)  # excluded from the batch, never replaced
            if len(target):
                yield i, (images, target)

    # ---- the step cap (train.max_steps): a smoke run of the real model, data and launch ------------------------
    def capped_steps(self, epoch: int) -> int:
        """The steps epoch `epoch` trains: all of them, or those left under the cap (0 once it is reached)."""
        n, cap = len(self.train_sampler), self.cfg.train.max_steps
        return n if not cap else max(0, min(n, cap - epoch * n))

    def last_epoch(self) -> int:
        """The epochs the run trains: train.epochs, or fewer when the cap ends it sooner."""
        cap, n = self.cfg.train.max_steps, len(self.train_sampler)
        return self.cfg.train.epochs if not cap else min(self.cfg.train.epochs, math.ceil(cap / n))

    def cut_by_cap(self) -> bool:
        """The cap ends the run before the schedule does."""
        return 0 < self.cfg.train.max_steps < self.cfg.train.epochs * len(self.train_sampler)

    def reached_target(self) -> bool:
        """train.stop_at_top1 is set and an epoch's validation top-1 has reached it: the run ends there."""
        target = self.cfg.train.stop_at_top1
        return 0 < target <= self.best_top1

    # ---- what one forward/backward pass holds --------------------------------------------------------------
    def try_pass(self, workers: int) -> None:
        """Forward and backward of `workers` workers' batches of zeros: the backend's measure of what one pass holds
        (fit_passes). Zeros draw no random numbers; the backend keeps the running statistics out of it."""
        t, size, device = self.cfg.train, self.cfg.data.image_size, self.backend.device
        images = self.compute.layout(torch.zeros(workers * t.per_worker_batch, 3, size, size, device=device))
        target = torch.zeros(workers * t.per_worker_batch, dtype=torch.long, device=device)
        self.model.train()
        with self.compute.autocast():
            loss = self.criterion(self.model(images), target)
        self.compute.backward(loss)
