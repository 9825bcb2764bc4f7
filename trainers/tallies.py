"""What the training loop counts beside its steps, each called where an epoch ends: where the step time went
(StepTimes: this attempt's, never saved), the steps fp16's scaler skipped (take_skipped_steps), the files no decoder
could read (UnreadableFiles: this epoch's). What a run keeps of the last two is its TrainState's (checkpoint.py):
a checkpoint saves it, a resume restores it, and the manifest's skipped_steps and unreadable_images are written
from it.
"""
from __future__ import annotations

from typing import Callable

import torch


def time_split(data_s: float, steps_s: float, comm_s: float) -> dict[str, float]:
    """Where the training steps' time went: waiting for data, communicating, and the rest (computing)."""
    return {"data_s": data_s, "compute_s": max(0.0, steps_s - data_s - comm_s), "comm_s": comm_s}


def data_wait_line(share: float, decoder: str | None = None) -> str:
    """The run summary's answer to "was data the bottleneck?", with what might help that the run does not already
    do: a decoder other than its own (`decoder`: None when it decodes no files)."""
    if share <= 0.1:
        return f"=> waiting for data: {100 * share:.1f} % of step time"
    others = [] if decoder in (None, "dali") else [f'"{d}"' for d in ("gpu", "dali") if d != decoder]
    helps = "more data.loader_workers" + (f" or data.decoder = {' or '.join(others)}" if others else "")
    return f"=> waiting for data: {100 * share:.1f} % of step time; {helps} would help"


class StepTimes:
    """The last epoch's time split and data share (its epoch record's), and the run's waiting for data in all."""

    def __init__(self, decoder: str | None = None):
        self.decoder = decoder  # the JPEG decoder of its data (None: no files decoded), for the summary's hint
        self.split = time_split(0.0, 0.0, 0.0)  # the last epoch's data_s, compute_s, comm_s
        self.epoch_data_share = 0.0
        self.data_s = self.step_s = 0.0  # this attempt's: waiting for batches / whole steps

    def add_epoch(self, data_s: float, steps_s: float, comm_s: float) -> None:
        self.split = time_split(data_s, steps_s, comm_s)
        self.data_s, self.step_s = self.data_s + data_s, self.step_s + steps_s
        self.epoch_data_share = data_s / steps_s if steps_s else 0.0

    def data_wait_share(self) -> float | None:
        """The manifest's data_wait_share: the steps' time spent waiting for data, so far."""
        return self.data_s / self.step_s if self.step_s else None

    def summary_line(self) -> str | None:
        return data_wait_line(self.data_s / self.step_s, self.decoder) if self.step_s else None


def take_skipped_steps(compute, steps: int, log: Callable[[str], None]) -> int:
    """This epoch's optimizer steps (of its `steps`) that fp16's scaler skipped for inf/NaN gradients, counted on the
    device as it stepped (compute.Compute) and taken from there at the epoch's end; a line when there were any. The
    run's total is the TrainState's skipped_steps (checkpoint.py)."""
    skipped = compute.take_skipped()
    if skipped:
        log(f"=> skipped {skipped} of {steps} optimizer steps for inf/NaN gradients "
            f"(fp16); loss scale now {compute.scaler.get_scale():g}")
    return skipped


def skipped_steps_line(total: int) -> str | None:
    """The run's end: the skipped steps of all its epochs (the TrainState's, all attempts')."""
    if not total:
        return None
    return f"=> skipped optimizer steps for inf/NaN gradients (fp16): {total} in all (manifest skipped_steps)"


class UnreadableFiles:
    """The files no decoder could read this epoch, per split, as sample indices (left out of their batch, never
    replaced); at the epoch's end counted over the ranks into the TrainState's unreadable_images[split][epoch]."""

    SPLITS = ("train", "val")

    def __init__(self, backend, val_mode: str):
        self.backend, self.val_mode = backend, val_mode
        self.seen: dict[str, set] = {split: set() for split in self.SPLITS}

    def add(self, split: str, indices) -> None:
        self.seen[split].update(indices)

    def end_epoch(self) -> dict[str, int]:
        """This epoch's distinct unreadable files per split, summed over ranks (each sample index has one owner;
        every_rank validation counts on rank 0 alone): a collective, every rank calls it at the epoch's end."""
        b = self.backend
        local = [float(len(self.seen["train"])), float(len(self.seen["val"]))]
        counts = b.all_reduce_sum(torch.tensor(local, dtype=torch.float64, device=b.device)).tolist()
        result = {"train": int(counts[0]), "val": int(counts[1]) if self.val_mode == "sharded"
                  else len(self.seen["val"])}
        self.seen = {split: set() for split in self.SPLITS}
        return result


def unreadable_lines(unreadable_images: dict[str, dict[str, int]]) -> list[str]:
    """The run's end: a line per split that had unreadable files in some epoch (the TrainState's, all attempts')."""
    return [f"=> unreadable {split} images per epoch: {max(per_epoch.values())} (manifest unreadable_images)"
            for split, per_epoch in unreadable_images.items() if any(per_epoch.values())]
