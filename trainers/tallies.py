"""What the training loop counts beside its steps, each called where an epoch ends: where the step time went
(StepTimes), the steps fp16's scaler skipped (SkippedSteps), the files no decoder could read (UnreadableFiles).
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


class SkippedSteps:
    """Optimizer steps fp16's scaler skipped for inf/NaN gradients: the epoch's, counted on the device as it steps
    (compute.Compute), and the epochs done (`total`); a checkpoint holds both, so a resumed run counts on."""

    def __init__(self, compute, log: Callable[[str], None]):
        self.compute, self.log = compute, log
        self.total = 0

    def restore(self, state: dict) -> None:
        """From a checkpoint's skipped_steps."""
        self.compute.skipped.fill_(state["epoch"])
        self.total = int(state["run"])

    def state(self) -> dict:
        """The checkpoint's skipped_steps: this epoch's so far (a mid-epoch checkpoint) and the epochs done."""
        return {"epoch": int(self.compute.skipped), "run": self.total}

    def end_epoch(self, steps: int) -> int:
        """This epoch's skipped steps (of its `steps`), into the run's total; a line when there were any."""
        skipped = self.compute.take_skipped()
        self.total += skipped
        if skipped:
            self.log(f"=> skipped {skipped} of {steps} optimizer steps for inf/NaN gradients "
                     f"(fp16); loss scale now {self.compute.scaler.get_scale():g}")
        return skipped

    def summary_line(self) -> str | None:
        if not self.total:
            return None
        return (f"=> skipped optimizer steps for inf/NaN gradients (fp16): {self.total} in all "
                "(manifest skipped_steps)")


class UnreadableFiles:
    """The files no decoder could read this epoch, per split, as sample indices (left out of their batch, never
    replaced); at the epoch's end summed over the ranks into the manifest's unreadable_images[split][epoch]."""

    SPLITS = ("train", "val")

    def __init__(self, backend, run, val_mode: str):
        self.backend, self.run, self.val_mode = backend, run, val_mode
        self.seen: dict[str, set] = {split: set() for split in self.SPLITS}

    def add(self, split: str, indices) -> None:
        self.seen[split].update(indices)

    def end_epoch(self, epoch: int) -> dict[str, int]:
        """This epoch's distinct unreadable files per split, summed over ranks (each sample index has one owner;
        every_rank validation counts on rank 0 alone): a collective, every rank calls it at the epoch's end."""
        b = self.backend
        local = [float(len(self.seen["train"])), float(len(self.seen["val"]))]
        counts = b.all_reduce_sum(torch.tensor(local, dtype=torch.float64, device=b.device)).tolist()
        result = {"train": int(counts[0]), "val": int(counts[1]) if self.val_mode == "sharded"
                  else len(self.seen["val"])}
        per_epoch = self.run.manifest.setdefault("unreadable_images", {})
        for split, n in result.items():
            per_epoch.setdefault(split, {})[str(epoch)] = n
        self.seen = {split: set() for split in self.SPLITS}
        return result


def unreadable_lines(manifest: dict) -> list[str]:
    """The run's end: a line per split that had unreadable files in some epoch (all attempts': the manifest's)."""
    return [f"=> unreadable {split} images per epoch: {max(per_epoch.values())} (manifest unreadable_images)"
            for split, per_epoch in manifest.get("unreadable_images", {}).items() if any(per_epoch.values())]
