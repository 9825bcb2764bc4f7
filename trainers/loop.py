"""The one training loop: every experiment, scale and backend runs this.

    setup, state = build_setup(cfg, run_dir, backend_name, launch, resume)   # trainers/setup.py
    fit(setup, state)   # per epoch: train_epoch (step after step), validate, the epoch record, the checkpoint

Explicit arguments in, numbers out: `setup` is what the run trains with (read, never written), `state`
(checkpoint.TrainState) where it stands, its tallies included: the only thing the loop changes besides the weights
and this attempt's meters. A NaN loss raises Diverged, a stop signal Preempted,
agreed by all ranks where the meters are read. A step cap (train.max_steps, a smoke run) ends the run early: its
last epoch is validated on as many batches as the cap. trainers/run.py turns the way out into a status.
"""
from __future__ import annotations

import itertools
import math
import time

import torch

from contract.lr import lr_at
from trainers import checkpoint
from trainers.checkpoint import TrainState
from trainers.runlog import DeviceTotals, LogEvery, Sums, summary_line, test_line, train_line
from trainers.setup import Setup
from trainers.tallies import take_skipped_steps


class Diverged(Exception):
    pass


class Preempted(Exception):
    pass


# ---- the run: epochs ----------------------------------------------------------------------------------------------
def fit(s: Setup, state: TrainState) -> None:
    """Each epoch from the start (or the checkpoint): train, validate, record, checkpoint."""
    last_epoch = epochs_to_train(s)
    for epoch in range(state.epoch, last_epoch):
        if reached_target(s, state):  # the epoch before reached it (or did, before a resume)
            break
        started = time.time()
        sums, steps = train_epoch(s, state, epoch)
        train = sums.reduced(s.backend)
        capped = cut_by_cap(s) and epoch + 1 == last_epoch
        val = validate(s, s.cfg.train.max_steps if capped else None)
        train_loss, train_top1, train_top5 = train.means()
        val_loss, val_top1, val_top5 = val.means()
        s.run.log(summary_line(val_top1, val_top5))
        skipped = take_skipped_steps(s.compute, len(s.train_sampler), s.run.log)
        state.best_top1 = max(state.best_top1, val_top1)
        unreadable = s.unreadable.end_epoch()  # a collective
        state.add_epoch(epoch, skipped, unreadable)
        s.run.record(
            "epoch", epoch=epoch, lr=lr_at(epoch, 0, 1, s.policy), train_loss=train_loss,
            train_top1=train_top1, train_top5=train_top5, val_loss=val_loss, val_top1=val_top1,
            val_top5=val_top5, epoch_time=time.time() - started, images=train.images, steps=steps,
            step=epoch * len(s.train_sampler) + steps,
            skipped_images=unreadable["train"], skipped_val_images=unreadable["val"], skipped_steps=skipped,
            data_share=s.times.epoch_data_share, **s.times.split,
        )
        s.telemetry.write(gather=True)
        state.epoch, state.step = epoch + 1, 0
        checkpoint.save_state(s, state, Sums())
        s.run.progress(epochs_done=epoch + 1, best_val_top1=state.best_top1,
                       data_wait_share=s.times.data_wait_share(), **state.tallies())  # the manifest's record of them
        # every rank agrees (a collective): a signal that reached one rank before this point and another after
        # it would otherwise stop one and leave the other waiting in the next epoch's first allreduce
        if s.backend.any_rank(s.stop.received is not None) and epoch + 1 < last_epoch:
            raise Preempted(f"stopped by a signal after epoch {epoch}; checkpoint written")


# ---- one epoch of training ----------------------------------------------------------------------------------------
def train_epoch(s: Setup, state: TrainState, epoch: int) -> tuple[Sums, int]:
    """The epoch's steps from state.step (a resume mid-epoch) to its end, the step cap or the evaluation that
    reached the target: this process's sums over every step trained, and the steps the epoch trained in all.
    Where the meters are read, all ranks agree, at the same iteration, on whether to stop: a NaN loss on any rank
    ends the run as diverged; a stop signal on any rank, with a checkpoint of this very step."""
    b, start = s.backend, state.step
    loader, n = batches(s, epoch, start)
    last = capped_steps(s, epoch)  # n, unless the step cap ends the run in this epoch
    totals, state.partial = DeviceTotals(b.device, state.partial), Sums()
    every = LogEvery(totals, s.cfg.train.print_freq, lambda i, meters: log_iteration(s, state, epoch, i, n, meters),
                     also={last - 1})  # the epoch's last step: its reading is the epoch's sums
    s.model.train()
    s.run.log(f"Setting learning rate for epoch {epoch} to {lr_at(epoch, start, n, s.policy)}")
    comm_start = b.comm_seconds()
    numbered = enumerate(loader, start=start)
    if last < n:  # capped: the loader is left unfinished (the run ends with this epoch)
        numbered = itertools.islice(numbered, max(0, last - start))
    trained = start
    for i, (images, target, skipped) in every(numbered):
        s.unreadable.add("train", skipped)
        set_lr(s, state, lr_at(epoch, i, n, s.policy))
        output, loss = step(s, images, target)
        totals.add(loss, output, target, len(images))
        trained = i + 1
        # a lone process looks at a stop signal every step; several agree on one where they all read anyway
        reading = every.end_step(i, read=b.world_size == 1 and s.stop.received is not None)
        if eval_due(s, epoch, i, last) and evaluate(s, state, epoch, i):
            break  # the target reached at this step: the epoch ends here (fit validates, records, checkpoints)
        if reading is None:
            continue
        s.stop.rehearse(epoch * len(s.train_sampler) + i + 1, b.is_main(), s.run.log)
        # a NaN anywhere since the last reading has made the summed loss NaN (losses are >= 0)
        read_loss = reading.loss if math.isfinite(reading.sums.loss) else reading.sums.loss
        if not b.any_rank(not math.isfinite(read_loss) or s.stop.received is not None):
            continue
        if b.any_rank(not math.isfinite(read_loss)):
            raise Diverged(f"loss is {read_loss} at epoch {epoch}, iteration {i}")
        if i + 1 < last:  # a signal at the epoch's last step: the epoch ends first (validated, checkpointed)
            state.epoch, state.step = epoch, i + 1
            checkpoint.save_state(s, state, reading.sums)
            raise Preempted(f"stopped by a signal at epoch {epoch}, iteration {i + 1}; checkpoint written")
    state.step = 0
    data_s = every.data_time.sum + loader.gpu_wait_s()  # plus the GPU's idle wait for a batch still being decoded
    s.times.add_epoch(data_s, every.batch_time.sum, b.comm_seconds() - comm_start)
    # read once more where steps followed the last reading: an epoch the target cut short between two progress
    # lines has trained them too (its record's images, loss and accuracy are every step's, not the last line's)
    return every.final_sums(), trained


def step(s: Setup, images: torch.Tensor, target: torch.Tensor):
    """Forward, backward, update: the batch's logits and mean loss, on the device (nothing waits for the GPU). Each
    of the backend's passes has its loss weighted by its share of the images: the whole batch's mean loss gradient."""
    c = s.compute
    images = c.layout(images)
    s.optimizer.zero_grad()
    outputs, losses, total = [], [], len(target)
    for x, y in s.backend.micro_batches(images, target):
        with c.autocast():
            output = s.model(x)
            loss = s.criterion(output, y)
        c.backward(loss if len(y) == total else loss * (len(y) / total))
        outputs.append(output.detach())
        losses.append(loss.detach() if len(y) == total else loss.detach().double() * len(y))
    c.optimizer_step(s.backend, s.optimizer)
    if len(outputs) == 1:
        return outputs[0], losses[0]
    return torch.cat(outputs), torch.stack(losses).sum() / total


def batches(s: Setup, epoch: int, start_step: int):
    s.train_sampler.set_epoch(epoch, start_step)
    return s.train_batches, len(s.train_sampler)  # the full epoch's steps, also when resuming mid-epoch


def set_lr(s: Setup, state: TrainState, lr: float) -> None:
    state.lr = lr  # the rate the iter records show
    for group in s.optimizer.param_groups:
        group["lr"] = lr


def log_iteration(s: Setup, state: TrainState, epoch: int, i: int, n: int, every: LogEvery) -> None:
    """train.log's line and the iter record of a training or benchmark step (LogEvery's write)."""
    batch_time, data_time, r = every.batch_time, every.data_time, every.reading
    s.run.log(train_line(epoch, i, n, batch_time, data_time, r.losses, r.top1, r.top5), progress=True)
    if s.backend.is_main():
        s.telemetry.write(gather=False)
    s.run.record(
        "iter", epoch=epoch, iter=i, iters=n, lr=state.lr, images=every.totals.last_images * s.backend.world_size,
        batch_time=batch_time.val, batch_time_avg=batch_time.avg, data_time=data_time.val,
        data_time_avg=data_time.avg, loss=r.losses.val, loss_avg=r.losses.avg, top1=r.top1.val,
        top1_avg=r.top1.avg, top5=r.top5.val, top5_avg=r.top5.avg,
    )


# ---- evaluation every k steps (train.eval_every): steps to a target at k steps' resolution ------------------------
def eval_due(s: Setup, epoch: int, i: int, last: int) -> bool:
    """Step i of `epoch` ends a k-step stretch (counted over the whole run, so a resume keeps the cadence) and is
    not the epoch's last (whose evaluation is the epoch's own)."""
    k = s.cfg.train.eval_every
    return bool(k) and (epoch * len(s.train_sampler) + i + 1) % k == 0 and i + 1 < last


def evaluate(s: Setup, state: TrainState, epoch: int, i: int) -> bool:
    """One evaluation after step i: its `eval` record; True when it reached train.stop_at_top1."""
    started = time.time()
    loss, top1, top5 = validate(s).means()
    s.model.train()
    state.best_top1 = max(state.best_top1, top1)
    s.run.record("eval", epoch=epoch, iter=i, step=epoch * len(s.train_sampler) + i + 1, val_loss=loss,
                 val_top1=top1, val_top5=top5, eval_time=time.time() - started)
    return reached_target(s, state)


# ---- validation ---------------------------------------------------------------------------------------------------
def validate(s: Setup, batches: int | None = None) -> Sums:
    """The validation sums (all ranks'); batches: the first this many batches only (a capped run's last epoch)."""
    n = len(s.val_loader)
    every = LogEvery(DeviceTotals(s.backend.device), s.cfg.train.print_freq, lambda i, meters: s.run.log(
        test_line(i, n, meters.batch_time, meters.reading.losses, meters.reading.top1, meters.reading.top5),
        progress=True))
    s.model.eval()
    model = s.backend.eval_model(s.model)
    with torch.no_grad():
        for i, (images, target) in every(itertools.islice(val_batches(s), batches)):
            with s.compute.autocast():
                output = model(s.compute.layout(images))
                loss = s.criterion(output, target)
            every.totals.add(loss, output, target, len(images))
            every.end_step(i)
    sums = every.final_sums()
    # "every_rank" (the thesis): each rank saw the whole set, so rank 0's sums are exact already
    return sums.reduced(s.backend) if s.cfg.data.val_mode == "sharded" else sums


def val_batches(s: Setup):
    """The validation batches with their numbers; a batch all of whose files were unreadable is left out."""
    for i, (images, target, skipped) in enumerate(s.val_loader):
        s.unreadable.add("val", skipped)  # excluded from the batch, never replaced
        if len(target):
            yield i, (images, target)


# ---- the step cap (train.max_steps): a smoke run of the real model, data and launch -------------------------------
def capped_steps(s: Setup, epoch: int) -> int:
    """The steps epoch `epoch` trains: all of them, or those left under the cap (0 once it is reached)."""
    n, cap = len(s.train_sampler), s.cfg.train.max_steps
    return n if not cap else max(0, min(n, cap - epoch * n))


def epochs_to_train(s: Setup) -> int:
    """The epochs the run trains: train.epochs, or fewer when the cap ends it sooner."""
    cap, n = s.cfg.train.max_steps, len(s.train_sampler)
    return s.cfg.train.epochs if not cap else min(s.cfg.train.epochs, math.ceil(cap / n))


def cut_by_cap(s: Setup) -> bool:
    """The cap ends the run before the schedule does."""
    return 0 < s.cfg.train.max_steps < s.cfg.train.epochs * len(s.train_sampler)


def reached_target(s: Setup, state: TrainState) -> bool:
    """train.stop_at_top1 is set and an epoch's validation top-1 has reached it: the run ends there."""
    target = s.cfg.train.stop_at_top1
    return 0 < target <= state.best_top1
