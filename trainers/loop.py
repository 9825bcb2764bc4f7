"""The one training loop: every experiment, scale and backend runs this.

Per epoch: set the learning rate from the policy, train, validate, checkpoint. The loop talks to a `Backend`
(trainers/backends) for everything distributed, to trainers.data for batches and to RunFolder for its records.
"""
from __future__ import annotations

import datetime
import json
import math
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from trainers import backends, checkpoint, data, telemetry
from trainers.config import Config, ConfigError, check_paths, check_writable
from trainers.lr import lr_at
from trainers.models import build_model
from trainers.runlog import AverageMeter, RunFolder, now_iso, summary_line, test_line, train_line, versions, git_commit

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
# The pieces of a run
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Sums:
    """Loss and correct predictions summed over images: reduced across ranks as sums, never means of means."""

    loss: float = 0.0
    top1: float = 0.0
    top5: float = 0.0
    images: int = 0

    def add(self, loss: float, c1: float, c5: float, n: int) -> None:
        self.loss += loss * n
        self.top1 += c1
        self.top5 += c5
        self.images += n

    def reduced(self, backend) -> "Sums":
        sums = [self.loss, self.top1, self.top5, float(self.images)]
        t = backend.all_reduce_sum(torch.tensor(sums, dtype=torch.float64, device=backend.device))
        loss, c1, c5, n = t.tolist()
        return Sums(loss, c1, c5, int(n))

    def means(self) -> tuple[float, float, float]:
        n = max(self.images, 1)
        return self.loss / n, 100.0 * self.top1 / n, 100.0 * self.top5 / n


def correct_topk(output: torch.Tensor, target: torch.Tensor, ks=(1, 5)) -> list[float]:
    maxk = min(max(ks), output.shape[1])
    pred = output.topk(maxk, dim=1).indices
    hits = pred.eq(target.view(-1, 1))
    return [hits[:, : min(k, maxk)].any(dim=1).sum().item() for k in ks]


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, backend_name: str, launch: backends.Launch, resume: bool,
                 echo: bool = True):
        self.cfg = cfg
        t = cfg.train
        if t.threads:
            torch.set_num_threads(t.threads)
        self.policy = cfg.lr_policy()
        # Data first: generating the miniature dataset may take a minute, and no peer should be waiting on us.
        self.train_ds, self.val_ds = data.build_datasets(
            cfg.data.kind, cfg.data.path, cfg.data.image_size, cfg.model.num_classes, t.seed,
            generated=generated_spec(cfg), synthetic_size=cfg.data.synthetic_images,
        )
        self.backend = backends.create(cfg, launch, backend_name)
        b = self.backend
        self.ckpt_path = run_dir / "checkpoint.pt"
        self.resuming = resume and self.ckpt_path.exists()
        self.run = RunFolder(run_dir, writes=b.is_main(), echo=echo, fresh=not self.resuming)
        b.start_run(run_dir)
        torch.manual_seed(t.seed)
        self.model = b.wrap_model(build_model(cfg.model))
        self.criterion = nn.CrossEntropyLoss().to(b.device)
        optimizer = torch.optim.SGD(
            self.model.parameters(), lr=self.policy.target, momentum=cfg.optim.momentum,
            weight_decay=cfg.optim.weight_decay,
        )
        self.optimizer = b.wrap_optimizer(optimizer, self.model)
        self.per_shard_batch = t.per_worker_batch * b.batch_multiplier
        self.start_epoch, self.start_step, self.partial, self.best_top1 = 0, 0, Sums(), 0.0
        if self.resuming:
            self.restore()
        else:
            b.broadcast_initial_state(self.model, self.optimizer)
        self.stop = StopSignal()
        self.skipped = 0
        self.started = time.time()
        self.sampler = telemetry.start_sampler(cfg.telemetry.interval_s, b.rank, b.local_rank, self.run.log)

    # ---- checkpoints ------------------------------------------------------------------------------------------
    def restore(self) -> None:
        state = checkpoint.load(self.ckpt_path)
        self.backend.unwrap(self.model).load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.start_epoch, self.start_step = state["epoch"], state["step"]
        self.partial = Sums(*state["partial"])
        self.best_top1 = state["best_top1"]
        checkpoint.restore_rng(state["rng"])

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
            "config": self.cfg.to_dict(),
        })

    # ---- one epoch of training --------------------------------------------------------------------------------
    def batches(self, epoch: int, start_step: int):
        sampler = data.StepBatchSampler(
            len(self.train_ds), self.backend.shards(), self.per_shard_batch, epoch, self.cfg.train.seed,
            shuffle=True, start_step=start_step,
        )
        pin = self.backend.device.type == "cuda"
        loader = data.make_loader(self.train_ds, sampler, self.cfg.data.loader_workers, pin)
        return loader, len(sampler)  # the full epoch's steps, also when resuming from start_step

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, images: torch.Tensor, target: torch.Tensor):
        """Forward, backward, update; backward_passes_per_step > 1 accumulates gradients over chunks first."""
        chunks = self.backend.backward_passes_per_step
        self.optimizer.zero_grad()
        outputs, loss_sum = [], 0.0
        for x, y in zip(images.chunk(chunks), target.chunk(chunks)):
            output = self.model(x)
            loss = self.criterion(output, y)
            (loss / chunks).backward()
            outputs.append(output.detach())
            loss_sum += loss.item() * len(y)
        self.optimizer.step()
        return torch.cat(outputs), loss_sum / len(target)

    def train_epoch(self, epoch: int) -> Sums:
        cfg, b = self.cfg, self.backend
        loader, n = self.batches(epoch, self.start_step)
        batch_time, data_time, losses, top1, top5 = (AverageMeter() for _ in range(5))
        sums, self.partial = self.partial, Sums()
        self.model.train()
        lr = lr_at(epoch, self.start_step, n, self.policy)
        self.run.log(f"Setting learning rate for epoch {epoch} to {lr}")
        end = time.time()
        for i, (images, target, skipped) in enumerate(loader, start=self.start_step):
            data_time.update(time.time() - end)
            self.skipped += int(skipped)
            images, target = images.to(b.device, non_blocking=True), target.to(b.device, non_blocking=True)
            lr = lr_at(epoch, i, n, self.policy)
            self.set_lr(lr)
            output, loss = self.step(images, target)
            c1, c5 = correct_topk(output, target)
            size = len(target)
            losses.update(loss, size)
            top1.update(100.0 * c1 / size, size)
            top5.update(100.0 * c5 / size, size)
            sums.add(loss, c1, c5, size)
            batch_time.update(time.time() - end)
            if i % cfg.train.print_freq == 0 or i == n - 1:
                self.log_iteration(epoch, i, n, lr, size, batch_time, data_time, losses, top1, top5)
            self.check_stop(epoch, i + 1, n, loss, sums)
            end = time.time()
        self.start_step = 0
        return sums

    def log_iteration(self, epoch, i, n, lr, size, batch_time, data_time, losses, top1, top5) -> None:
        self.run.log(train_line(epoch, i, n, batch_time, data_time, losses, top1, top5), progress=True)
        if self.backend.is_main():
            self.write_util(gather=False)
        self.run.record(
            "iter", epoch=epoch, iter=i, iters=n, lr=lr, images=size * self.backend.world_size,
            batch_time=batch_time.val, batch_time_avg=batch_time.avg, data_time=data_time.val,
            data_time_avg=data_time.avg, loss=losses.val, loss_avg=losses.avg, top1=top1.val,
            top1_avg=top1.avg, top5=top5.val, top5_avg=top5.avg,
        )

    def check_stop(self, epoch: int, next_step: int, n: int, loss: float, sums: Sums) -> None:
        """All ranks agree, at the same iteration, on whether to stop (a NaN here, a signal there)."""
        local = not math.isfinite(loss) or self.stop.received is not None
        if not self.backend.any_rank(local):
            return
        if self.backend.any_rank(not math.isfinite(loss)):
            raise Diverged(f"loss is {loss} at epoch {epoch}, iteration {next_step - 1}")
        if next_step == n:  # the epoch's last step: finish it (validate, checkpoint) before stopping
            return
        self.save(epoch, next_step, sums)
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
    def validate(self) -> Sums:
        b = self.backend
        indices = data.val_indices(len(self.val_ds), b.world_size, b.rank, self.cfg.data.val_mode)
        batch = self.per_shard_batch * len(b.shards())
        loader = data.make_loader(
            self.val_ds, [indices[i: i + batch] for i in range(0, len(indices), batch)],
            self.cfg.data.loader_workers, b.device.type == "cuda",
        )
        batch_time, losses, top1, top5 = (AverageMeter() for _ in range(4))
        sums = Sums()
        self.model.eval()
        end = time.time()
        with torch.no_grad():
            for i, (images, target, _) in enumerate(loader):
                images, target = images.to(b.device, non_blocking=True), target.to(b.device, non_blocking=True)
                output = self.model(images)
                loss = self.criterion(output, target).item()
                c1, c5 = correct_topk(output, target)
                size = len(target)
                sums.add(loss, c1, c5, size)
                losses.update(loss, size)
                top1.update(100.0 * c1 / size, size)
                top5.update(100.0 * c5 / size, size)
                batch_time.update(time.time() - end)
                end = time.time()
                if i % self.cfg.train.print_freq == 0:
                    self.run.log(test_line(i, len(loader), batch_time, losses, top1, top5), progress=True)
        # "every_rank" (the thesis): each rank saw the whole set, so rank 0's sums are exact already
        return sums.reduced(b) if self.cfg.data.val_mode == "sharded" else sums

    # ---- the run ------------------------------------------------------------------------------------------
    def fit(self) -> None:
        for epoch in range(self.start_epoch, self.cfg.train.epochs):
            started = time.time()
            train = self.train_epoch(epoch).reduced(self.backend)
            val = self.validate()
            train_loss, train_top1, train_top5 = train.means()
            val_loss, val_top1, val_top5 = val.means()
            self.run.log(summary_line(val_top1, val_top5))
            self.best_top1 = max(self.best_top1, val_top1)
            self.run.record(
                "epoch", epoch=epoch, lr=lr_at(epoch, 0, 1, self.policy), train_loss=train_loss,
                train_top1=train_top1, train_top5=train_top5, val_loss=val_loss, val_top1=val_top1,
                val_top5=val_top5, epoch_time=time.time() - started, images=train.images, skipped_images=self.skipped,
            )
            self.write_util(gather=True)
            self.save(epoch + 1, 0, Sums())
            self.run.update_manifest(epochs_done=epoch + 1, best_val_top1=self.best_top1)
            if self.stop.received is not None and epoch + 1 < self.cfg.train.epochs:
                raise Preempted(f"stopped by a signal after epoch {epoch}; checkpoint written")

    def benchmark(self) -> None:
        """Time `bench.batches` training steps after `bench.warmup_batches` untimed ones, on the configured data."""
        cfg, b = self.cfg, self.backend
        warm, timed = cfg.bench.warmup_batches, cfg.bench.batches
        per_process = self.per_shard_batch * len(b.shards())
        if cfg.data.kind == "synthetic":  # tf_cnn_benchmarks' synthetic mode: one batch already on the device
            fixed = data.synthetic_batch(per_process, cfg.data.image_size, cfg.model.num_classes, cfg.train.seed,
                                         b.device)
            source = ((*fixed, 0) for _ in range(warm + timed))
        else:
            loader, _ = self.batches(0, 0)
            source = forever(loader)
        times, data_times = [], []
        batch_time, data_time, losses, top1, top5 = (AverageMeter() for _ in range(5))
        self.model.train()
        self.set_lr(lr_at(0, 0, 1, self.policy))
        end = time.time()
        for i in range(warm + timed):
            images, target, _ = next(source)
            data_time.update(time.time() - end)
            images, target = images.to(b.device, non_blocking=True), target.to(b.device, non_blocking=True)
            output, loss = self.step(images, target)
            c1, c5 = correct_topk(output, target)
            losses.update(loss, len(target))
            top1.update(100.0 * c1 / len(target), len(target))
            top5.update(100.0 * c5 / len(target), len(target))
            batch_time.update(time.time() - end)
            times.append(batch_time.val)
            data_times.append(data_time.val)
            self.log_iteration(0, i, warm + timed, self.policy.target, len(target), batch_time, data_time, losses,
                               top1, top5)
            end = time.time()
        images_per_step = per_process * b.world_size  # all ranks' images in one step
        steady = times[warm:]
        self.run.record(
            "bench", per_worker_batch=cfg.train.per_worker_batch, world_size=b.workers, batches=timed,
            warmup_batches=warm, images_per_s_steady=images_per_step * len(steady) / sum(steady),
            images_per_s_thesis=images_per_step / (sum(times[:200]) / 200) if len(times) >= 200 else None,
            batch_time_avg_at_199=sum(times[:200]) / 200 if len(times) >= 200 else None,
            data_share=sum(data_times[warm:]) / sum(steady),
        )
        self.write_util(gather=True)


def forever(loader):
    while True:
        yield from loader


def generated_spec(cfg: Config) -> dict | None:
    if cfg.data.kind != "generated":
        return None
    d = cfg.data
    return {"classes": d.classes, "per_class": d.per_class, "val_per_class": d.val_per_class,
            "image_size": d.image_size, "seed": d.data_seed}


# ----------------------------------------------------------------------------------------------------------------
# Entry point: one run, whatever launched it
# ----------------------------------------------------------------------------------------------------------------
def run_training(cfg: Config, run_dir: Path, resume: bool = False, echo: bool = True) -> int:
    check_paths(cfg)
    check_writable(run_dir)
    launch = backends.detect_launch()
    name = backends.resolve(cfg, launch)  # ConfigError before any process group exists
    if launch.rank == 0 and not resume and (run_dir / "metrics.jsonl").exists():
        raise ConfigError(f"run folder {run_dir} exists; continue it with --resume auto or pick another --run")
    if resume and (run_dir / "checkpoint.pt").exists():  # refuse a changed config before any process group exists
        saved = checkpoint.load(run_dir / "checkpoint.pt")["config"]
        checkpoint.check_same_config(run_dir / "checkpoint.pt", saved, cfg.to_dict())
    trainer = Trainer(cfg, run_dir, name, launch, resume, echo)
    run, b = trainer.run, trainer.backend
    run.write_config({"experiment": cfg.experiment, "run": run_dir.name, "scale": cfg.scale, **cfg.to_dict(),
                      "resolved": cfg.resolved(name)})
    if (run_dir / "manifest.json").exists() and trainer.resuming:
        run.manifest = json.loads((run_dir / "manifest.json").read_text())
    run.update_manifest(
        start=run.manifest.get("start", now_iso()), end=None, launcher=launch.launcher, seed=cfg.train.seed,
        versions=versions(), git_commit=git_commit(),
        resumed_at=now_iso() if trainer.start_epoch or trainer.start_step else None,
        **b.describe(),
    )
    run.status("running", trainer.start_epoch)
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
    except Exception as e:  # a lost peer, an I/O error...: one line that names this rank, after the traceback
        message = f"rank {b.rank} of {b.world_size}: {type(e).__name__}: {e}"
        traceback.print_exc()
        print(f"error: training failed on {message}", file=sys.stderr, flush=True)
        run.status("failed", run.manifest.get("epochs_done", 0), message, EXIT_FAILED)
        return EXIT_FAILED
    finally:
        trainer.stop.restore()
        if trainer.sampler:  # what rank 0's node sampled since the last epoch (other nodes' last samples are lost)
            trainer.sampler.stop()
            if b.is_main():
                trainer.write_util(gather=False)
        b.close()
    done = cfg.train.epochs if cfg.bench.batches == 0 else 0
    if trainer.skipped:
        run.log(f"=> skipped {trainer.skipped} unreadable images")
    run.status("completed", done, exit_code=EXIT_COMPLETED)
    run.close()
    return EXIT_COMPLETED
