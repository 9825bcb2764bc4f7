"""TensorBoard event files of a run folder: its metrics.jsonl records as scalars, live and after the fact.

One mapping (`Scalars`) turns records into (step, scalars) and serves both the trainer's live writer (RunFolder
with events=live(...)) and `python -m analysis tensorboard`, which writes them for finished run folders: so what a run
showed while it trained is what a conversion of its folder shows. The tags:

  train/loss, train/top1, train/top5, train/lr   an iter record's values (the step's, not the running means)
  train/images_per_s, train/data_share           images over all ranks / the step's time; waiting for data / it
  epoch/train_loss, epoch/train_top1, epoch/train_top5, epoch/lr   an epoch's training means and its first rate
  val/loss, val/top1, val/top5                   the epoch's validation
  time/data_share, time/compute_share, time/comm_share   where the epoch's (or benchmark's) step time went
  bench/images_per_s_steady, bench/images_per_s_thesis   a benchmark's throughput (TensorFlow's trainer too)

The step is the optimizer step done: epoch * iters + iter + 1 for an iter record, the epoch's last step for an
epoch record (its curves line up with the training curves), warm-up + timed batches for a bench record.

Resume-safety by rebuilding, not appending: a resumed run cuts metrics.jsonl back to its checkpoint and writes
those steps again, with new timings, so the events past the checkpoint would hold values metrics.jsonl no longer
has, and a killed writer may not have flushed its last ones. So the live writer, at its first scalar after it
starts or after a cut, replaces the folder's event files by one rebuilt from metrics.jsonl (the source of truth),
then appends: every step once, each equal to its record. A running TensorBoard reads the rebuilt file as a restart
(its step goes back) and drops what it had from that step on. Rebuilding costs a pass over metrics.jsonl.

TensorBoard is optional (`pip install -e .[tensorboard]`): without it `available()` is False and a run writes no
event files and nothing else changes. Only its protocol buffers and record framing are used, never its `compat.tf`,
which would import TensorFlow into a torch process where TensorFlow is installed.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from contract.reader import read_metrics
from contract.runfolder import EVENTS_GLOB, EVENTS_PREFIX

Scalar = tuple[str, float]


def available() -> bool:
    """TensorBoard's event-file parts import here."""
    try:
        _tensorboard()
    except ImportError:
        return False
    return True


def _tensorboard():
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    return event_pb2, summary_pb2, RecordWriter


# ============================================================================================ the one mapping


# the tags that copy a record's field as it is (derived ones, shares and images/s, are computed below)
FIELDS = {
    "iter": {"train/loss": "loss", "train/top1": "top1", "train/top5": "top5", "train/lr": "lr"},
    "epoch": {"epoch/train_loss": "train_loss", "epoch/train_top1": "train_top1", "epoch/train_top5": "train_top5",
              "epoch/lr": "lr", "val/loss": "val_loss", "val/top1": "val_top1", "val/top5": "val_top5"},
    "eval": {"eval/loss": "val_loss", "eval/top1": "val_top1", "eval/top5": "val_top5"},
    "bench": {"bench/images_per_s_steady": "images_per_s_steady", "bench/images_per_s_thesis": "images_per_s_thesis"},
}


def _copied(rec: dict) -> list[Scalar]:
    """The fields a tag copies; one a record lacks (written before it was recorded, or None) draws no point."""
    return [(tag, rec[name]) for tag, name in FIELDS[rec["kind"]].items() if rec.get(name) is not None]


def _derived(rec: dict) -> list[Scalar]:
    """Per step: images/s and the data share of an iter record's step; per epoch or benchmark: where the step time
    went (data, compute, communication), as shares of their sum (records from before the split: none)."""
    if rec["kind"] == "iter":
        step_s = rec["batch_time"]
        return [("train/images_per_s", rec["images"] / step_s),
                ("train/data_share", rec["data_time"] / step_s)] if step_s > 0 else []
    parts = {"data": rec.get("data_s"), "compute": rec.get("compute_s"), "comm": rec.get("comm_s")}
    if None in parts.values() or sum(parts.values()) <= 0:
        return []
    total = sum(parts.values())
    return [(f"time/{name}_share", value / total) for name, value in parts.items()]


class Scalars:
    """metrics.jsonl records -> (step, wall time, scalars). It remembers an epoch's steps from its iter records
    (the last iteration of every epoch is always written), which an epoch record's step needs."""

    def __init__(self):
        self.iters: int | None = None

    def of(self, rec: dict) -> tuple[int, float, list[Scalar]] | None:
        """The record's step, time and scalars; None for records that draw no curve (status, util)."""
        kind = rec["kind"]
        if kind == "iter":
            self.iters = rec["iters"]
            step = rec["epoch"] * rec["iters"] + rec["iter"] + 1
        elif kind == "epoch":
            # without an iter record before it (none written so far), the epoch itself is the step
            # an epoch record names its last step (since 2026-12-01: a cut-short epoch's too); an older one is placed
            # at its epoch's end, which a cut-short epoch is not
            step = rec["step"] if isinstance(rec.get("step"), int) else \
                (rec["epoch"] + 1) * self.iters if self.iters else rec["epoch"] + 1
        elif kind == "eval":  # an evaluation inside an epoch (train.eval_every) names its own step
            return rec["step"], rec["time"], _copied(rec)
        elif kind == "bench":
            step = rec["warmup_batches"] + rec["batches"]
        else:
            return None
        return step, rec["time"], _copied(rec) + _derived(rec)


# ============================================================================================ the event file


class EventFile:
    """One event file of a run folder, written synchronously (a line of records at a time is small, and a reader
    watching the run sees each step as soon as it is written)."""

    def __init__(self, run_dir: Path):
        event_pb2, self._summary_pb2, record_writer = _tensorboard()
        self._event = event_pb2.Event
        # TensorBoard's own name pattern; the pid keeps two writers of one second apart
        name = f"{EVENTS_PREFIX}{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        self._file = open(Path(run_dir) / name, "wb")
        self._records = record_writer(self._file)
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event) -> None:
        self._records.write(event.SerializeToString())

    def add(self, step: int, wall_time: float, scalars: list[Scalar]) -> None:
        values = [self._summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in scalars]
        self._write(self._event(step=step, wall_time=wall_time, summary=self._summary_pb2.Summary(value=values)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class RunEvents:
    """A run folder's event files kept equal to its metrics.jsonl: `add` each record as it is written; after the
    writer starts, or after metrics.jsonl was cut back, `stale()` makes the next scalar rebuild them first."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.mapping = Scalars()
        self.file: EventFile | None = None

    def stale(self) -> None:
        self.close()

    def add(self, rec: dict) -> None:
        """One record just written to metrics.jsonl (so a rebuild reads it too)."""
        if rec["kind"] not in FIELDS:
            return  # status and util records draw nothing: no rebuild for them
        if self.file is None:
            self.rebuild()
            return
        point = self.mapping.of(rec)
        if point:
            self.file.add(*point)
            self.file.flush()

    def rebuild(self) -> int:
        """The event files anew from metrics.jsonl; returns the steps written."""
        self.close()
        for path in self.run_dir.glob(EVENTS_GLOB):
            path.unlink()
        self.mapping, self.file = Scalars(), EventFile(self.run_dir)
        points = [p for p in map(self.mapping.of, read_metrics(self.run_dir).records) if p]
        for point in points:
            self.file.add(*point)
        self.file.flush()
        return len(points)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def live(run_dir: Path, writes: bool) -> RunEvents | None:
    """The trainer's writer for RunFolder(events=...): rank 0's (`writes`), where TensorBoard is installed."""
    return RunEvents(run_dir) if writes and available() else None


def write_run_events(run_dir: Path) -> int:
    """A finished (or stopped) run folder's event files from its metrics.jsonl; returns the steps written."""
    events = RunEvents(run_dir)
    try:
        return events.rebuild()
    finally:
        events.close()
