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
epoch record (its curves line up with the training curves), warm-up + timed batches for a bench record. A record
that lacks a field its step is read from (`unplaced`: an iter record without `iters`, edited by hand) draws nothing
and is named; a field that is no number draws no point; every other record draws as ever.

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


#: the fields a record's step is read from (its time too, `time`): a record without one as a whole number cannot be
#: placed on a curve and draws no point (a record written before the field, or edited by hand)
STEP_FIELDS = {"iter": ("epoch", "iters", "iter"), "epoch": ("epoch",), "eval": ("step",),
               "bench": ("warmup_batches", "batches")}


def _number(value) -> bool:
    """A value a scalar can hold (NaN and inf too: a diverged run's loss is drawn as it was)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def unplaced(rec: dict) -> str | None:
    """Why a record of a kind that draws curves cannot be placed on them, or None: a field its step is read from
    that it lacks or that is no whole number, or a time that is no number."""
    kind = rec["kind"]
    for name in STEP_FIELDS.get(kind, ()):
        value = rec.get(name)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):  # a step is a count
            return f"{kind} record without a whole-number {name!r}"
    return None if _number(rec.get("time")) else f"{kind} record without a number 'time'"


def _copied(rec: dict) -> list[Scalar]:
    """The fields a tag copies; one a record lacks (written before it was recorded, or None) or that is no number
    draws no point."""
    return [(tag, rec[name]) for tag, name in FIELDS[rec["kind"]].items() if _number(rec.get(name))]


def _derived(rec: dict) -> list[Scalar]:
    """Per step: images/s and the data share of an iter record's step; per epoch or benchmark: where the step time
    went (data, compute, communication), as shares of their sum (records from before the split: none)."""
    if rec["kind"] == "iter":
        step_s, images, data_s = rec.get("batch_time"), rec.get("images"), rec.get("data_time")
        if not (_number(step_s) and _number(images) and _number(data_s) and step_s > 0):
            return []
        return [("train/images_per_s", images / step_s), ("train/data_share", data_s / step_s)]
    parts = {"data": rec.get("data_s"), "compute": rec.get("compute_s"), "comm": rec.get("comm_s")}
    if not all(map(_number, parts.values())) or sum(parts.values()) <= 0:
        return []
    total = sum(parts.values())
    return [(f"time/{name}_share", value / total) for name, value in parts.items()]


class Scalars:
    """metrics.jsonl records -> (step, wall time, scalars). It remembers an epoch's steps from its iter records
    (the last iteration of every epoch is always written), which an epoch record's step needs."""

    def __init__(self):
        self.iters: int | None = None

    def of(self, rec: dict) -> tuple[int, float, list[Scalar]] | None:
        """The record's step, time and scalars; None for records that draw no curve (status, util) or that cannot
        be placed on one (unplaced)."""
        kind = rec["kind"]
        if kind not in FIELDS or unplaced(rec):
            return None
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
        else:  # a benchmark
            step = rec["warmup_batches"] + rec["batches"]
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
        self.left_out: list[str] = []  # why each record the last rebuild could not place was left out

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
        """The event files anew from metrics.jsonl; returns the steps written. A record that cannot be placed
        (unplaced) is left out and its reason kept in `self.left_out`, so one bad line never costs the others."""
        self.close()
        for path in self.run_dir.glob(EVENTS_GLOB):
            path.unlink()
        self.mapping, self.file = Scalars(), EventFile(self.run_dir)
        records = read_metrics(self.run_dir).records
        self.left_out = [why for why in map(unplaced, (r for r in records if r["kind"] in FIELDS)) if why]
        points = [p for p in map(self.mapping.of, records) if p]
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


def write_run_events(run_dir: Path) -> tuple[int, list[str]]:
    """A finished (or stopped) run folder's event files from its metrics.jsonl: (the steps written, why each record
    left out was). A folder that cannot be written raises its OSError."""
    events = RunEvents(run_dir)
    try:
        return events.rebuild(), events.left_out
    finally:
        events.close()
