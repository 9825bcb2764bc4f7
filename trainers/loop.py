"""The one training loop: every experiment, scale and backend runs this.

Per epoch: set the learning rate from the policy, train, validate, checkpoint. A step cap (train.max_steps, a
smoke run) ends the run early: the epoch it ends in is validated on as many batches as the cap and recorded as the
last. The loop talks to a `Backend` (trainers/backends) for everything distributed, to trainers.data for batches
and to RunFolder for its records.
"""
from __future__ import annotations

import datetime
import itertools
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn as nn

from trainers import backends, checkpoint, compute, data, telemetry
from contract.config import Config, ConfigError, check_paths, check_writable
from contract.lr import lr_at
from trainers.models import build_model
from trainers.optimizers import build_optimizer
from contract.locks import RankLock, dead_ranks, mark_failed
from contract.reader import read_manifest
from contract.runfolder import (CHECKPOINT, CONFIG, LOCK, LOG, MANIFEST, METRICS, RANK_LOCKS, WRITE_FAILURES, RunFolder,
                                bench_throughput, now_iso)
from contract.versions import git_commit, versions
from trainers.runlog import DeviceTotals, LogEvery, Readout, Sums, summary_line, test_line, train_line

THESIS_BATCH_INDEX = 199  # the thesis read the running mean batch time at training batch 199
EXIT_COMPLETED, EXIT_FAILED, EXIT_CONFIG, EXIT_DIVERGED, EXIT_PREEMPTED = 0, 1, 2, 3, 4


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
        self.previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}

    def _handle(self, signum, frame):
        self.received = signum

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------------------------------------------
# The trainer: one process's part of a run
# ----------------------------------------------------------------------------------------------------------------
class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, backend_name: str, launch: backends.Launch, resume: bool,
                 echo: bool = True, pinned: dict | None = None):
        self.cfg = cfg
        t = cfg.train
        self.pinned = pinned or {}  # a resumed run's arithmetic, as it started (pin_arithmetic)
        if t.threads or self.pinned.get("threads"):
            torch.set_num_threads(t.threads or self.pinned["threads"])
        compute.configure_torch(t)
        self.policy = cfg.lr_policy()
        # Data first: generating the miniature dataset may take a minute, and no peer should be waiting on us.
        self.train_ds, self.val_ds = data.build_datasets(cfg.data, cfg.model.num_classes, t.seed)
        self.backend = backends.create(cfg, launch, backend_name)
        b = self.backend
        self.ckpt_path = run_dir / CHECKPOINT
        self.resuming = resume and self.ckpt_path.exists()
        self.run = RunFolder(run_dir, writes=b.is_main(), echo=echo, fresh=not self.resuming)
        b.start_run(run_dir)
        torch.manual_seed(t.seed)
        self.compute = compute.Compute(t, b.device)
        self.model = compute.compile_model(b.wrap_model(compute.prepare_model(build_model(cfg.model), t)), t)
        self.criterion = nn.CrossEntropyLoss().to(b.device)
        optimizer = build_optimizer(self.model, cfg.optim, self.policy.target)
        self.optimizer = b.wrap_optimizer(optimizer, self.model)
        self.per_shard_batch = t.per_worker_batch * b.batch_multiplier
        self.train_sampler = data.StepBatchSampler(len(self.train_ds), b.shards(), self.per_shard_batch,
                                                   seed=t.seed, shuffle=True)  # before restore: its steps bound it
        self.start_epoch, self.start_step, self.partial, self.best_top1 = 0, 0, Sums(), 0.0
        self.lr = 0.0  # the learning rate last set (set_lr)
        self.skipped_total = 0  # optimizer steps fp16's scaler skipped in the epochs done (the epoch's: compute)
        if self.resuming:
            self.restore()
        else:
            b.broadcast_initial_state(self.model, self.optimizer)
        passes = b.fit_passes(self.optimizer, self.try_pass, self.pinned.get("workers_per_pass"))
        if passes:
            self.run.log(passes)
        self.stop = StopSignal()
        self.time_split = {"data_s": 0.0, "compute_s": 0.0, "comm_s": 0.0}
        self.unreadable = {"train": set(), "val": set()}  # this epoch's unreadable files (sample indices)
        self.data_s = self.step_s = self.epoch_data_share = 0.0  # waiting for batches / whole steps
        # The loaders are built once: each epoch only moves the sampler on (persistent workers keep running)
        pin = b.device.type == "cuda"
        self.train_loader = data.make_loader(self.train_ds, self.train_sampler, cfg.data.loader_workers, pin)
        # on a GPU the next batches are moved (and decoded) on a stream of their own while this one trains
        self.train_batches = data.DeviceBatches(self.train_loader, b.device)
        val = data.IndexBatches(data.val_indices(len(self.val_ds), b.world_size, b.rank, cfg.data.val_mode),
                                self.per_shard_batch * len(b.shards()))
        self.val_loader = data.DeviceBatches(data.make_loader(self.val_ds, val, cfg.data.loader_workers, pin), b.device)
        self.started = time.time()
        self.sampler = telemetry.start_sampler(cfg.telemetry.interval_s, b.rank, b.local_rank, self.run.log)

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

    # ---- checkpoints ------------------------------------------------------------------------------------------
    def restore(self) -> None:
        path = self.ckpt_path
        state = checkpoint.load(path)
        self.start_epoch, self.start_step = state["epoch"], state["step"]
        checkpoint.check_position(path, self.start_epoch, self.start_step, self.cfg.train.epochs,
                                  len(self.train_sampler))
        with checkpoint.applying(path):
            self.backend.unwrap(self.model).load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            problem = checkpoint.optimizer_state_problem(self.optimizer)
            if problem:
                raise ValueError(problem)
            self.best_top1 = float(state["best_top1"])
            self.compute.load_state_dict(state.get("scaler", {}))
            skipped = state.get("skipped_steps", {})  # absent in checkpoints from before it was counted
            self.compute.skipped.fill_(skipped.get("epoch", 0))
            self.skipped_total = int(skipped.get("run", 0))
            checkpoint.restore_rng(state["rng"])
        # what was written after this checkpoint will be written again: cut it, or the files would hold it twice
        dropped = self.run.cut_back(state.get("run_files", {}))
        self.run.log(f"=> resumed from the checkpoint at epoch {self.start_epoch}, iteration {self.start_step}"
                     + (f"; {dropped} record(s) written after it dropped" if dropped else ""))
        self.partial = self.running_sums(state)  # after the cut: its line stays in train.log

    def running_sums(self, state: dict) -> Sums:
        """The epoch's sums up to the checkpoint: what its iter records' running averages go on from."""
        if "partial" in state:
            return Sums(*state["partial"])
        if self.start_step:  # a checkpoint written without them: the averages and the epoch's train sums restart
            self.run.log(f"=> the checkpoint holds no running sums: the running averages of epoch {self.start_epoch} "
                         f"restart at iteration {self.start_step} (so do its train_loss/top1/top5)")
        return Sums()

    def save(self, epoch: int, step: int, partial: Sums) -> None:
        if not (self.backend.is_main() and self.cfg.train.checkpoint):
            return
        checkpoint.save(self.ckpt_path, {
            "model": self.backend.unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": epoch,
            "step": step,
            "partial": [partial.loss, partial.top1, partial.top5, partial.images],
            "best_top1": self.best_top1,
            "rng": checkpoint.rng_state(),
            "scaler": self.compute.state_dict(),  # fp16's loss scale: resume takes the same steps
            # steps the scaler skipped: this epoch's so far (a mid-epoch checkpoint) and the epochs done
            "skipped_steps": {"epoch": int(self.compute.skipped), "run": self.skipped_total},
            "config": self.cfg.to_dict(),
            "arithmetic": self.arithmetic(),  # what a resume must reuse to continue the same run
            "run_files": self.run.sizes(),  # bytes of metrics.jsonl and train.log this checkpoint covers
        })

    def arithmetic(self) -> dict:
        """The settings of this attempt that decide the numbers beyond the config (stored with each checkpoint)."""
        return {"threads": torch.get_num_threads(), "device": self.backend.device.type,
                "processes": self.backend.world_size,  # W workers over P: another P sums in another order
                "workers_per_pass": self.backend.workers_per_pass or None,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "onednn_isa": compute.cpu_description()["onednn_isa"],
                "precision": self.cfg.train.precision, "deterministic": self.cfg.train.deterministic}

    # ---- one epoch of training --------------------------------------------------------------------------------
    def batches(self, epoch: int, start_step: int):
        self.train_sampler.set_epoch(epoch, start_step)
        return self.train_batches, len(self.train_sampler)  # the full epoch's steps, also when resuming mid-epoch

    def set_lr(self, lr: float) -> None:
        self.lr = lr  # the rate the iter records show
        for group in self.optimizer.param_groups:
            group["lr"] = lr

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

    def train_epoch(self, epoch: int) -> Sums:
        b = self.backend
        loader, n = self.batches(epoch, self.start_step)
        last = self.capped_steps(epoch)  # n, unless the step cap ends the run in this epoch
        totals, self.partial = DeviceTotals(b.device, self.partial), Sums()
        every = LogEvery(
            totals, self.cfg.train.print_freq, lambda i, meters: self.log_iteration(epoch, i, n, meters),
            also={last - 1},  # the epoch's last step: its reading is the epoch's sums
            # a signal in a lone process is checked at every step; several processes agree on it where they read
            read_also=lambda i: b.world_size == 1 and self.stop.received is not None,
            after_read=lambda i, meters: self.check_stop(epoch, i + 1, last, meters.reading))
        self.model.train()
        self.run.log(f"Setting learning rate for epoch {epoch} to {lr_at(epoch, self.start_step, n, self.policy)}")
        comm_start = b.comm_seconds()
        steps = enumerate(loader, start=self.start_step)
        if last < n:  # capped: the loader is left unfinished (the run ends with this epoch)
            steps = itertools.islice(steps, max(0, last - self.start_step))
        for i, (images, target, skipped) in every(steps):
            self.unreadable["train"].update(skipped)
            self.set_lr(lr_at(epoch, i, n, self.policy))
            output, loss = self.step(images, target)
            totals.add(loss, output, target)
        self.start_step = 0
        batch_s = every.batch_time.sum
        data_s = every.data_time.sum + loader.gpu_wait_s()  # plus the GPU's idle wait for a batch still being decoded
        self.time_split = time_split(data_s, batch_s, b.comm_seconds() - comm_start)
        self.data_s, self.step_s = self.data_s + data_s, self.step_s + batch_s
        self.epoch_data_share = data_s / batch_s if batch_s else 0.0
        return every.sums

    def log_iteration(self, epoch: int, i: int, n: int, every: LogEvery) -> None:
        """train.log's line and the iter record of a training or benchmark step (LogEvery's write)."""
        batch_time, data_time, r = every.batch_time, every.data_time, every.reading
        self.run.log(train_line(epoch, i, n, batch_time, data_time, r.losses, r.top1, r.top5), progress=True)
        if self.backend.is_main():
            self.write_util(gather=False)
        self.run.record(
            "iter", epoch=epoch, iter=i, iters=n, lr=self.lr, images=every.totals.last_images * self.backend.world_size,
            batch_time=batch_time.val, batch_time_avg=batch_time.avg, data_time=data_time.val,
            data_time_avg=data_time.avg, loss=r.losses.val, loss_avg=r.losses.avg, top1=r.top1.val,
            top1_avg=r.top1.avg, top5=r.top5.val, top5_avg=r.top5.avg,
        )

    def check_stop(self, epoch: int, next_step: int, n: int, reading: Readout) -> None:
        """All ranks agree, at the same iteration, on whether to stop (a NaN here, a signal there)."""
        # a NaN anywhere since the last reading has made the summed loss NaN (losses are >= 0)
        loss = reading.loss if math.isfinite(reading.sums.loss) else reading.sums.loss
        local = not math.isfinite(loss) or self.stop.received is not None
        if not self.backend.any_rank(local):
            return
        if self.backend.any_rank(not math.isfinite(loss)):
            raise Diverged(f"loss is {loss} at epoch {epoch}, iteration {next_step - 1}")
        if next_step == n:  # the epoch's last step: finish it (validate, checkpoint) before stopping
            return
        self.save(epoch, next_step, reading.sums)
        raise Preempted(f"stopped by a signal at epoch {epoch}, iteration {next_step}; checkpoint written")

    def write_util(self, gather: bool) -> None:
        """Telemetry samples as util records: rank 0's own node's as it logs; with gather (a collective, so every
        rank calls it at the same point: an epoch's end) every node's, through the backend."""
        samples = self.sampler.drain() if self.sampler else []
        if gather:
            samples = [s for node in self.backend.gather_objects(samples) for s in node]
        start = self.run.manifest.get("start")
        origin = datetime.datetime.fromisoformat(start).timestamp() if start else self.started
        for sample in samples:
            self.run.record("util", **telemetry.as_record(sample, origin))

    # ---- validation ---------------------------------------------------------------------------------------
    def validate(self, batches: int | None = None) -> Sums:
        """batches: validate on the first this many batches only (a capped smoke run's last epoch)."""
        n = len(self.val_loader)
        every = LogEvery(DeviceTotals(self.backend.device), self.cfg.train.print_freq, lambda i, meters: self.run.log(
            test_line(i, n, meters.batch_time, meters.reading.losses, meters.reading.top1, meters.reading.top5),
            progress=True))
        self.model.eval()
        with torch.no_grad():
            for _, (images, target) in every(itertools.islice(self.val_batches(), batches)):
                with self.compute.autocast():
                    output = self.model(self.compute.layout(images))
                    loss = self.criterion(output, target)
                every.totals.add(loss, output, target)
        sums = every.final_sums()
        # "every_rank" (the thesis): each rank saw the whole set, so rank 0's sums are exact already
        return sums.reduced(self.backend) if self.cfg.data.val_mode == "sharded" else sums

    def val_batches(self):
        """The validation batches with their numbers; a batch all of whose files were unreadable is left out."""
        for i, (images, target, skipped) in enumerate(self.val_loader):
            self.unreadable["val"].update(skipped)  # excluded from the batch, never replaced
            if len(target):
                yield i, (images, target)

    # ---- the run ------------------------------------------------------------------------------------------
    def fit(self) -> None:
        last_epoch = self.last_epoch()
        for epoch in range(self.start_epoch, last_epoch):
            started = time.time()
            train = self.train_epoch(epoch).reduced(self.backend)
            capped = self.cut_by_cap() and epoch + 1 == last_epoch
            val = self.validate(self.cfg.train.max_steps if capped else None)
            train_loss, train_top1, train_top5 = train.means()
            val_loss, val_top1, val_top5 = val.means()
            self.run.log(summary_line(val_top1, val_top5))
            skipped = self.count_skipped()
            self.best_top1 = max(self.best_top1, val_top1)
            unreadable = self.count_unreadable(epoch)
            self.run.record(
                "epoch", epoch=epoch, lr=lr_at(epoch, 0, 1, self.policy), train_loss=train_loss,
                train_top1=train_top1, train_top5=train_top5, val_loss=val_loss, val_top1=val_top1,
                val_top5=val_top5, epoch_time=time.time() - started, images=train.images,
                skipped_images=unreadable["train"], skipped_val_images=unreadable["val"], skipped_steps=skipped,
                data_share=self.epoch_data_share, **self.time_split,
            )
            self.write_util(gather=True)
            self.save(epoch + 1, 0, Sums())
            self.run.update_manifest(epochs_done=epoch + 1, best_val_top1=self.best_top1,
                                     unreadable_images=self.run.manifest.get("unreadable_images", {}),
                                     data_wait_share=self.data_s / self.step_s if self.step_s else None,
                                     skipped_steps=self.skipped_total)
            # every rank agrees (a collective): a signal that reached one rank before this point and another after
            # it would otherwise stop one and leave the other waiting in the next epoch's first allreduce
            if self.backend.any_rank(self.stop.received is not None) and epoch + 1 < last_epoch:
                raise Preempted(f"stopped by a signal after epoch {epoch}; checkpoint written")

    def count_skipped(self) -> int:
        """This epoch's optimizer steps that fp16's scaler skipped, into the run's total; a line when there were."""
        skipped = self.compute.take_skipped()
        self.skipped_total += skipped
        if skipped:
            self.run.log(f"=> skipped {skipped} of {len(self.train_sampler)} optimizer steps for inf/NaN gradients "
                         f"(fp16); loss scale now {self.compute.scaler.get_scale():g}")
        return skipped

    def count_unreadable(self, epoch: int) -> dict[str, int]:
        """This epoch's distinct unreadable files per split, summed over ranks (each sample index has one owner;
        every_rank validation counts on rank 0 alone), into the manifest's unreadable_images[split][epoch]."""
        b = self.backend
        local = [float(len(self.unreadable["train"])), float(len(self.unreadable["val"]))]
        counts = b.all_reduce_sum(torch.tensor(local, dtype=torch.float64, device=b.device)).tolist()
        result = {"train": int(counts[0]), "val": int(counts[1]) if self.cfg.data.val_mode == "sharded"
                  else len(self.unreadable["val"])}
        per_epoch = self.run.manifest.setdefault("unreadable_images", {})
        for split, n in result.items():
            per_epoch.setdefault(split, {})[str(epoch)] = n
        self.unreadable = {"train": set(), "val": set()}
        return result

    def benchmark(self) -> None:
        """Time `bench.batches` training steps after `bench.warmup_batches` untimed ones, on the configured data."""
        cfg, b = self.cfg, self.backend
        warm, timed = cfg.bench.warmup_batches, cfg.bench.batches
        per_process = self.per_shard_batch * len(b.shards())
        source, comm_start = self.bench_batches(per_process), 0.0

        def numbered():  # the warm-up's waits for data and communication are left out, as its step times are
            nonlocal comm_start
            for i in range(warm + timed):
                if i == warm:
                    comm_start = b.comm_seconds()
                    self.train_batches.gpu_wait_s()
                yield i, next(source)

        totals = DeviceTotals(b.device)
        # the GPU is waited for only where LogEvery reads, so the sums of step times up to each of these are exact
        every = LogEvery(totals, cfg.train.print_freq, lambda i, meters: self.log_iteration(0, i, warm + timed, meters),
                         also={warm - 1, THESIS_BATCH_INDEX, warm + timed - 1}, keep_times=True)
        self.model.train()
        lr = lr_at(0, 0, 1, self.policy)  # the rate of the first step: the warm-up's start where there is one
        self.set_lr(lr)
        for _, (images, target, _) in every(numbered()):
            output, loss = self.step(images, target)
            totals.add(loss, output, target)
        times, images_per_step = every.batch_times, per_process * b.world_size  # all ranks' images in one step
        steady, data_s = times[warm:], sum(every.data_times[warm:]) + self.train_batches.gpu_wait_s()
        self.run.record(
            "bench", per_worker_batch=cfg.train.per_worker_batch, world_size=b.workers, batches=timed,
            warmup_batches=warm, lr=lr, **bench_throughput(times, images_per_step, warm),
            data_share=data_s / sum(steady), **time_split(data_s, sum(steady), b.comm_seconds() - comm_start),
        )
        self.data_s, self.step_s = data_s, sum(steady)
        self.run.update_manifest(data_wait_share=self.data_s / self.step_s)
        self.write_util(gather=True)

    def bench_batches(self, per_process: int):
        """The benchmark's endless batches: in synthetic mode tf_cnn_benchmarks' one batch, already on the device;
        else the configured data's, epoch 0 over and over (on the device already: DeviceBatches)."""
        cfg = self.cfg
        if cfg.data.kind != "synthetic":
            loader, _ = self.batches(0, 0)
            return forever(loader)
        images, target = data.synthetic_batch(per_process, cfg.data.image_size, cfg.model.num_classes,
                                              cfg.train.seed, self.backend.device)
        return itertools.repeat((self.compute.layout(images), target, 0))  # channels_last once, as by hand


def data_wait_line(share: float) -> str:
    """The run summary's answer to "was data the bottleneck?"."""
    hint = "; more data.loader_workers or data.decoder = \"gpu\" would help" if share > 0.1 else ""
    return f"=> waiting for data: {100 * share:.1f} % of step time{hint}"


def time_split(data_s: float, steps_s: float, comm_s: float) -> dict[str, float]:
    """Where the training steps' time went: waiting for data, communicating, and the rest (computing)."""
    return {"data_s": data_s, "compute_s": max(0.0, steps_s - data_s - comm_s), "comm_s": comm_s}


def thread_settings() -> dict:
    """What decides this process's CPU parallelism, so a rerun can match it (results drift with the thread count)."""
    return {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
            **{k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}


def forever(loader):
    while True:
        yield from loader


# ----------------------------------------------------------------------------------------------------------------
# Entry point: one run, whatever launched it
# ----------------------------------------------------------------------------------------------------------------
def run_training(cfg: Config, run_dir: Path, resume: bool = False, echo: bool = True, force: bool = False) -> int:
    check_paths(cfg)
    compute.check_cpu_isa(cfg.train)
    check_writable(run_dir)
    check_run_files(run_dir)
    launch = backends.detect_launch()
    name = backends.resolve(cfg, launch)  # ConfigError before any process group exists
    # Before anything in the folder is touched: a second process training this run is refused here (exit 2).
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # the folders this run will create
    lock = RankLock(run_dir, launch.rank)
    try:
        return train_locked(cfg, run_dir, resume, echo, launch, name, force)
    finally:
        if made and not (run_dir / MANIFEST).exists():  # refused before it started (a data or config mistake)
            lock.discard(made)
        lock.release()


def check_run_files(run_dir: Path) -> None:
    """The run's files are files: one that became a folder (a copy or a script gone wrong) would fail where it is
    first opened, as a traceback, after the run had been marked running."""
    names = (MANIFEST, METRICS, LOG, CONFIG, CHECKPOINT, LOCK, *(p.name for p in run_dir.glob(RANK_LOCKS)))
    for path in (run_dir / name for name in names):
        if path.is_dir():
            raise ConfigError(f"{path} is a folder, not the run's file; move it aside (mv {path} {path}.bad) "
                              "or pick another --run")


def pin_arithmetic(cfg: Config, path: Path, force: bool, processes: int = 1) -> dict:
    """A resumed run keeps the arithmetic it started with, whatever this attempt's defaults (a study's JOBS sets
    OMP_NUM_THREADS): what the config leaves open is taken from the checkpoint; what it sets otherwise is refused
    unless forced, as is another number of processes (this launch's `processes`). Checkpoints from before this was
    stored pin nothing."""
    state = checkpoint.load(path)
    checkpoint.check_same_config(path, state["config"], cfg.to_dict())  # before any process group exists
    saved = state.get("arithmetic")
    if not saved:
        return {}
    t = cfg.train
    wants_cuda = t.device == "cuda" or (t.device == "auto" and torch.cuda.is_available())
    would_be = {"threads": t.threads or None, "device": "cuda" if wants_cuda else "cpu", "processes": processes,
                "workers_per_pass": t.workers_per_pass or None,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "onednn_isa": compute.cpu_description()["onednn_isa"]}
    checkpoint.check_same_arithmetic(path, saved, would_be, force)
    return {key: saved.get(key) for key in ("threads", "workers_per_pass") if not force or would_be[key] is None}


def train_locked(cfg: Config, run_dir: Path, resume: bool, echo: bool, launch: backends.Launch, name: str,
                 force: bool = False) -> int:
    if launch.rank == 0 and not resume and (run_dir / MANIFEST).exists():  # no manifest: nothing started, restart
        raise ConfigError(f"run folder {run_dir} exists; continue it with --resume auto or pick another --run")
    pinned = {}
    if resume and (run_dir / CHECKPOINT).exists():
        pinned = pin_arithmetic(cfg, run_dir / CHECKPOINT, force, launch.world_size)
    trainer = Trainer(cfg, run_dir, name, launch, resume, echo, pinned)
    run, b = trainer.run, trainer.backend
    run.write_config({"experiment": cfg.experiment, "run": run_dir.name, "scale": cfg.scale, **cfg.to_dict(),
                      "resolved": cfg.resolved(name)})
    if (run_dir / MANIFEST).exists() and trainer.resuming:
        run.manifest = read_manifest(run_dir) or {}
    attempt = {"start": now_iso(), "epoch": trainer.start_epoch, "iteration": trainer.start_step,
               **trainer.arithmetic(), "threads_env": thread_settings(), "forced": force and trainer.resuming}
    attempts = run.manifest.get("attempts", []) if trainer.resuming else []
    # the status goes into this first write: a manifest without one, left by a kill before the next, strands a study
    run.update_manifest(
        status="running", epochs_done=trainer.start_epoch, start=run.manifest.get("start", now_iso()), end=None,
        launcher=launch.launcher, seed=cfg.train.seed,
        link=os.environ.get("CLUSTER_LINK"),  # the local cluster's link rate where one was set (make cluster LINK=)
        attempts=[*attempts, attempt],  # every attempt's arithmetic: a mix would show here
        versions={**versions(), "cuda": torch.version.cuda}, git_commit=git_commit(), threads=thread_settings(),
        cpu=compute.cpu_description(),  # the kernels' ISA: what a bit-identical rerun elsewhere must pin
        resumed_at=now_iso() if trainer.start_epoch or trainer.start_step else None, failed_ranks=None, message=None,
        **b.describe(),
    )
    run.status("running", trainer.start_epoch)
    try:
        return train_to_the_end(trainer, run_dir)
    finally:
        run.close()


def train_to_the_end(trainer: Trainer, run_dir: Path) -> int:
    cfg, run, b = trainer.cfg, trainer.run, trainer.backend
    try:
        trainer.benchmark() if cfg.bench.batches > 0 else trainer.fit()
    except Diverged as e:
        run.log(f"=> diverged: {e}")
        run.status("diverged", trainer.start_epoch, str(e), EXIT_DIVERGED)
        return EXIT_DIVERGED
    except Preempted as e:
        b.barrier()  # rank 0's checkpoint is on disk before any rank exits: srun and mpirun kill the rest at once
        run.log(f"=> preempted: {e}")
        run.status("preempted", run.manifest.get("epochs_done", 0), str(e), EXIT_PREEMPTED)
        return EXIT_PREEMPTED
    except Exception as e:  # a lost peer, an I/O error...: one line that names the failed rank, after the traceback
        if not write_failure(e):  # a full or read-only disk needs no traceback: the line says what to fix
            traceback.print_exc()
        report_failure(run_dir, run, b, e)
        return EXIT_FAILED
    finally:
        trainer.stop.restore()
        if trainer.sampler:  # what rank 0's node sampled since the last epoch (other nodes' last samples are lost)
            trainer.sampler.stop()
            if b.is_main():
                try:
                    trainer.write_util(gather=False)
                except OSError:  # the disk that failed the run takes no more samples either
                    pass
        b.close()
    done = trainer.last_epoch() if cfg.bench.batches == 0 else 0
    for split, per_epoch in run.manifest.get("unreadable_images", {}).items():
        if any(per_epoch.values()):
            run.log(f"=> unreadable {split} images per epoch: {max(per_epoch.values())} (manifest unreadable_images)")
    if trainer.skipped_total:
        run.log(f"=> skipped optimizer steps for inf/NaN gradients (fp16): {trainer.skipped_total} in all "
                "(manifest skipped_steps)")
    if trainer.step_s:
        run.log(data_wait_line(trainer.data_s / trainer.step_s))
    run.status("completed", done, exit_code=EXIT_COMPLETED, **capped(trainer))
    return EXIT_COMPLETED


def capped(trainer: Trainer) -> dict:
    """The completed status's message and manifest field of a run the step cap cut short: a smoke run, whose
    numbers are no result of the study."""
    cap = trainer.cfg.train.max_steps
    if trainer.cfg.bench.batches or not trainer.cut_by_cap():
        return {}
    return {"message": f"capped at {cap} optimizer steps (train.max_steps): a smoke run", "capped_at_steps": cap}


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
    """Name the rank that failed and set the manifest to failed, whichever rank it was.

    A rank that dies (a signal, the OOM killer) drops its lock, so the others can tell it from the one that merely
    noticed. Rank 0 writes the manifest; if rank 0 is the one gone, the lowest live rank does.
    """
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
        run.status("failed", run.manifest.get("epochs_done", 0), message, EXIT_FAILED, failed_ranks=failed)
        return
    survivors = sorted(set(range(b.world_size)) - set(dead))
    if 0 not in dead or b.rank != survivors[0]:
        return
    mark_failed(run_dir, message, EXIT_FAILED, failed_ranks=failed)  # unless rank 0 got to say anything itself
