"""The run folder: its record schema and its one writer. No torch here, so the analysis imports it.

A run is a folder `<out>/<experiment>/<run>/` (docs/architecture.md draws it) holding the files named below:
config.json; manifest.json, declared in contract/manifest.py and written only by begin/progress/end below;
metrics.jsonl, one record of a kind declared below a line, the source of truth; train.log (trainers/runlog.py's
lines); TensorBoard's event files (contract/events.py); checkpoint.pt, which also stores how many bytes of
metrics.jsonl and train.log it covers; console.log; and the ranks' lock files (contract/locks.py).

`RunFolder.record(kind, **fields)` checks the fields against the declared record type (an unknown kind or field, a
missing field or a wrong type is an error at write time), so the files cannot drift from the schema. Reading is
contract/reader.py's: a line that is not a JSON object of a declared kind (`parse_record`) is counted as bad.
"""
from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import sys
import threading
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract import manifest as declared
from contract.config import THESIS_BATCH_INDEX, Config, ConfigError
from contract.fingerprint import document_fingerprint
from contract.manifest import STATUSES

# The run folder's file names, typed here only (tests/test_architecture.py checks): the trainer, the study runner,
# the tools and the analysis find a run's files through these.
METRICS, LOG, MANIFEST, CONFIG = "metrics.jsonl", "train.log", "manifest.json", "config.json"
CHECKPOINT = "checkpoint.pt"
# TensorBoard's event files beside the records (contract/events.py writes them): TensorBoard finds a file by the
# "tfevents" in its name, so `tensorboard --logdir results/runs` shows each run as <experiment>/<run>
EVENTS_PREFIX = "events.out.tfevents."
EVENTS_GLOB = EVENTS_PREFIX + "*"


def link_bits_per_s(rate: str) -> float:
    """A link's rate as tc writes it ("100mbit", "1gbit", "500kbit": the manifest's `link`) in bits a second."""
    import re

    m = re.fullmatch(r"([\d.]+)\s*([kmgt]?)bit", rate.strip().lower())
    if not m:
        raise ConfigError(f"link rate {rate!r}: give it as tc does, e.g. 100mbit or 1gbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
CONSOLE = "console.log"  # the study runner's capture of a child's stdout and stderr, every attempt appended
LOCK = ".lock"  # rank 0's; every other rank's is rank_lock(r) (contract/locks.py)
RANK_LOCKS = ".rank*.lock"  # a glob for the other ranks' lock files
STUDY_LOCK = ".study.lock"  # held by the study that launches the run, so two studies never both start it
FILES = (CONFIG, MANIFEST, METRICS, LOG, CHECKPOINT, CONSOLE, LOCK, STUDY_LOCK)
# A committed run keeps these gzip'd beside its other files (metrics.jsonl.gz, ...): contract/runfiles.py opens either
# form, and says why a live run writes them plain.
COMPACT = ".gz"
COMPACTED = (METRICS, LOG, CONSOLE)
# Why writing a run's files can fail where no retry helps: a full disk, a quota (DISK_FULL: no room; the data cache
# says so too), a read-only mount, a file over the size limit. The trainer marks its run failed on these, and its
# command line says so in one line.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
WRITE_FAILURES = (*DISK_FULL, errno.EROFS, errno.EFBIG)


def config_document(cfg: Config, run: str, backend: str) -> dict[str, Any]:
    """The run's config.json: every setting, its names, and what follows from them for `backend` ("resolved").
    Written by the study that plans the run (the trainer starts from it) and again by the trainer as it starts."""
    return {"experiment": cfg.experiment, "run": run, "scale": cfg.scale, **cfg.to_dict(),
            "resolved": cfg.resolved(backend)}


def write_planned_config(cfg: Config, run_dir: Path, backend: str) -> Path:
    """A planned run's folder begins as its config.json; the trainer started from it fills in the rest."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CONFIG
    write_json_atomic(path, config_document(cfg, run_dir.name, backend))
    return path


def rank_lock(rank: int) -> str:
    """The name of a rank's lock file."""
    return LOCK if rank == 0 else f".rank{rank}.lock"


# ================================================================================================================
# The records of metrics.jsonl. Every record also has `kind` and `time` (Unix seconds), added by the writer.
# ================================================================================================================
@dataclass(frozen=True)
class Iter:
    """A training iteration (every print_freq-th, and the last of an epoch): the meters of pytorch/examples."""

    epoch: int
    iter: int  # 0-based index within the epoch
    iters: int  # iterations in the epoch
    lr: float  # the learning rate this iteration used
    images: int  # images in this step over all ranks
    batch_time: float
    batch_time_avg: float
    data_time: float
    data_time_avg: float
    loss: float
    loss_avg: float
    top1: float
    top1_avg: float
    top5: float
    top5_avg: float


@dataclass(frozen=True)
class Epoch:
    """One epoch: training sums reduced over ranks, validation, and where the epoch's training time went."""

    epoch: int
    lr: float  # the rate at the epoch's first iteration
    train_loss: float
    train_top1: float  # percent
    train_top5: float
    val_loss: float
    val_top1: float
    val_top5: float
    epoch_time: float  # seconds, training and validation
    images: int  # training images over all ranks, every step trained this epoch (a cut-short epoch's too)
    steps: int  # optimizer steps trained this epoch (fewer than its iterations where the target or the cap cut it)
    step: int  # optimizer steps done in all at the epoch's end: the step its validation evaluated
    skipped_images: int  # this epoch's distinct unreadable training files (each replaced by a readable one)
    skipped_val_images: int  # this epoch's distinct unreadable validation files (left out, not replaced)
    skipped_steps: int  # optimizer steps fp16's gradient scaler skipped (inf/NaN gradients); 0 in other precisions
    data_share: float  # waiting for data / step time, this epoch's training steps
    # seconds summed over this attempt's training steps on the writing rank (validation not included):
    data_s: float  # waiting for the next batch
    compute_s: float  # forward, backward and optimizer, minus communication
    comm_s: float  # communication measured in the backend (0 for single and emulated)


@dataclass(frozen=True)
class Eval:
    """An evaluation inside an epoch (train.eval_every): the validation (or held-out) set after `step` optimizer
    steps in all, so steps to a target are counted at k steps, not whole epochs. An epoch's end has its Epoch."""

    epoch: int
    iter: int  # 0-based index within the epoch of the step just done
    step: int  # optimizer steps done in all, this one included
    val_loss: float
    val_top1: float  # percent
    val_top5: float
    eval_time: float  # seconds this evaluation took


@dataclass(frozen=True)
class Bench:
    """A throughput benchmark: `batches` timed steps after `warmup_batches` untimed ones."""

    per_worker_batch: int
    world_size: int  # logical workers
    batches: int
    warmup_batches: int
    lr: float  # the learning rate the benchmark set
    images_per_s_steady: float
    images_per_s_thesis: float | None  # the thesis's formula at batch 199 (None with fewer than 200 steps)
    batch_time_avg_at_199: float | None
    data_share: float
    data_s: float  # as in Epoch, over the timed steps
    compute_s: float
    comm_s: float
    # a plug-in workload's model (workloads/): images are its samples (a GPT's windows), and these follow from
    # images_per_s_steady (workload_rates); None where unmeasured: a model without tokens, a device of unknown peak
    tokens_per_s: float | None = None  # images_per_s_steady x the tokens a sample (its context)
    model_flops_per_s: float | None = None  # images_per_s_steady x the model FLOPs of a sample (forward + backward)
    mfu: float | None = None  # model_flops_per_s / (one device's peak at the run's precision x the devices)


THESIS_BATCHES = THESIS_BATCH_INDEX + 1  # the thesis's running mean batch time at batch 199: the first 200 steps


def bench_throughput(times: list[float], images_per_step: int, warmup: int) -> dict[str, float | None]:
    """A Bench record's images/s from every step's time (warm-up steps first), for any trainer: the steady state
    (the steps after the warm-up) and the thesis's formula, images a step / the running mean batch time at batch
    199, which keeps the warm-up in (None with fewer than 200 steps)."""
    steady = times[warmup:]
    if not steady or sum(steady) <= 0:
        raise ValueError(f"no timed steps after {warmup} warm-up steps")
    at_199 = sum(times[:THESIS_BATCHES]) / THESIS_BATCHES if len(times) >= THESIS_BATCHES else None
    return {"images_per_s_steady": images_per_step * len(steady) / sum(steady),
            "images_per_s_thesis": images_per_step / at_199 if at_199 else None,
            "batch_time_avg_at_199": at_199}


def workload_rates(images_per_s: float, tokens_per_sample: int | None, flops_per_sample: int | None,
                   peak_flops: float | None, devices: int) -> dict[str, float | None]:
    """A Bench record's rates beyond images/s: tokens/s, model FLOP/s and MFU (PaLM's model FLOPs utilisation, the
    model's FLOPs a second over the devices' peak), each None where what it needs is unknown."""
    model_flops = images_per_s * flops_per_sample if flops_per_sample else None
    return {"tokens_per_s": images_per_s * tokens_per_sample if tokens_per_sample else None,
            "model_flops_per_s": model_flops,
            "mfu": model_flops / (peak_flops * devices) if model_flops and peak_flops and devices else None}


@dataclass(frozen=True)
class Status:
    """A change of the run's status; the manifest holds the latest."""

    status: str  # running, completed, diverged, failed, preempted
    epoch: int  # epochs done
    message: str = ""


@dataclass(frozen=True)
class GPUSample:
    index: int  # as the job's CUDA numbers it (CUDA_VISIBLE_DEVICES)
    util_pct: float
    mem_used_gb: float
    power_w: float | None
    nvml_index: int | None = None  # as the node numbers it (absent in runs before it was recorded)


@dataclass(frozen=True)
class Util:
    """A telemetry sample of one node (written by the sampler thread of each node's first rank)."""

    t: float  # seconds since the run started
    host: str
    rank: int  # global rank of the sampling process
    cpu_process_pct: float
    cpu_system_pct: float
    mem_process_gb: float
    mem_system_pct: float
    gpus: list = field(default_factory=list)  # GPUSample fields as dicts; empty without a GPU


RECORDS: dict[str, type] = {"iter": Iter, "epoch": Epoch, "eval": Eval, "bench": Bench, "status": Status, "util": Util}


class RecordError(TypeError):
    """A record that does not match its declaration: a bug in the writer, raised before anything is written."""


def _type_ok(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    origin = typing.get_origin(hint) or hint
    return isinstance(value, origin)


_HINTS: dict[type, dict[str, Any]] = {}


def _checked(cls: type, what: str, fields: dict) -> dict:
    """`fields` as a dict of `cls`'s declared fields: an unknown or missing field or a wrong type is a RecordError."""
    hints = _HINTS.setdefault(cls, typing.get_type_hints(cls))
    unknown = set(fields) - hints.keys()
    if unknown:
        raise RecordError(f"{what}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        values = dataclasses.asdict(cls(**fields))
    except TypeError as e:
        raise RecordError(f"{what}: {e}") from None
    for name, value in values.items():
        if not _type_ok(value, hints[name]):
            raise RecordError(f"{what}: {name} = {value!r} is not {hints[name]}")
    return values


def make_record(kind: str, **fields) -> dict:
    """The record as written: checked against its declaration (a util record's gpus too), `kind` first."""
    if kind not in RECORDS:
        raise RecordError(f"unknown record kind {kind!r}; declared: {', '.join(RECORDS)}")
    values = _checked(RECORDS[kind], f"{kind} record", fields)
    if kind == "status" and values["status"] not in STATUSES:
        raise RecordError(f"status record: unknown status {values['status']!r}")
    if kind == "util":
        if not all(isinstance(sample, dict) for sample in values["gpus"]):
            names = [f.name for f in dataclasses.fields(GPUSample)]
            raise RecordError(f"util record: a gpus entry must be a dict of {names}")
        values["gpus"] = [_checked(GPUSample, "util record, gpus entry", sample) for sample in values["gpus"]]
    return {"kind": kind, **values}


# ================================================================================================================
# The line format (contract/reader.py reads the files with it; the writer cuts back with it)
# ================================================================================================================
def parse_record(line: bytes | str) -> dict | None:
    """One line as a record, or None when it is not a JSON object of a declared kind (a bad line)."""
    try:
        rec = json.loads(line)
    except ValueError:  # not JSON, or bytes that are not UTF-8
        return None
    if not isinstance(rec, dict) or rec.get("kind") not in RECORDS:
        return None
    return rec


def parse_lines(lines) -> tuple[list[dict], int]:
    records, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        rec = parse_record(line)
        if rec is None:
            bad += 1
        else:
            records.append(rec)
    return records, bad


# ================================================================================================================
# Run names
# ================================================================================================================
MAX_RUN_NAME = 200  # bytes; file systems allow 255 a name, and the name also goes into Slurm job names and tables


def check_run_name(name: str) -> str:
    """A run name is one folder name inside the experiment's folder: no path separators, no '..', not absolute."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name or os.path.isabs(name):
        raise ConfigError(f"run name {name!r} must be a plain folder name (no '/', no '..', not absolute)")
    if not name.strip() or any(ord(c) < 32 or ord(c) == 127 for c in name):  # a line break splits every table
        raise ConfigError(f"run name {name!r} must hold visible characters and no line breaks, tabs or other "
                          "control characters")
    if len(name.encode()) > MAX_RUN_NAME:
        raise ConfigError(f"run name {name[:40]}... is {len(name.encode())} bytes long; use at most {MAX_RUN_NAME}")
    return name


# ================================================================================================================
# Manifest helpers
# ================================================================================================================
def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict) -> None:
    """The file whole or not at all: written beside it, synced (a crash of the machine must not put an empty file
    behind the rename), then renamed over it. A write that fails removes its half-written copy."""
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_manifest_anyway(path: Path, data: dict) -> None:
    """The final manifest, on a full disk too: atomically where a new file fits, else over the old one in place
    (truncating it frees its blocks first). A disk that takes nothing at all raises."""
    try:
        write_json_atomic(path, data)
    except OSError:
        path.with_name(path.name + ".tmp").unlink(missing_ok=True)
        with open(path, "r+" if path.exists() else "w") as f:
            f.truncate(0)
            f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def nearest_line_end(data: bytes, offset: int) -> int:
    """The line boundary (0, or just after a newline) nearest to `offset`. The checkpoint's byte count lands on one
    unless the file was edited since: a byte inserted before it moves the boundary one on, a byte deleted one back,
    and cutting at the count itself would leave half a line for the next record to be glued onto."""
    if offset <= 0 or data[offset - 1:offset] == b"\n":
        return max(offset, 0)
    before = data.rfind(b"\n", 0, offset) + 1  # 0 when there is no newline before
    after = data.find(b"\n", offset)
    if after == -1:
        return before
    return before if offset - before <= after + 1 - offset else after + 1


# ================================================================================================================
# The writer
# ================================================================================================================
def settle_compact(path: Path, fresh: bool) -> None:
    """A writer never leaves a record file in two forms: a fresh run drops an earlier attempt's compact records
    as it drops its plain ones (mode "w"); a resumed run cannot append to a compact (finished, committed) file."""
    compact = [path / (name + COMPACT) for name in (METRICS, LOG) if (path / (name + COMPACT)).exists()]
    if compact and not fresh:
        raise ConfigError(f"{compact[0]}: a finished run's compact records; a resumed run appends to plain ones, so "
                          f"it cannot resume this folder: train it afresh or pick another --run")
    for stale in compact:
        stale.unlink()


class RunFolder:
    """Rank 0's writer of a run folder; other ranks get one that writes nothing (writes=False)."""

    def __init__(self, path: Path, writes: bool, echo: bool = True, fresh: bool = True, clock=time.time,
                 events=None):
        """fresh: the run starts from scratch, so records of an earlier attempt (one killed before its first
        checkpoint) are dropped rather than read twice; a resumed run appends after `cut_back`.
        clock: what stamps each record's `time` (test fixtures pass a simulated one).
        events: the trainers' TensorBoard writer (contract/events.py `live`: None where TensorBoard is not
        installed), told each record written and each cut (it rebuilds from metrics.jsonl then: events.py says why)."""
        self.path = path
        self.clock = clock
        self._write_lock = threading.Lock()  # the telemetry sampler writes from its own thread
        self.writes = writes
        self.echo = echo and writes
        self.tty = sys.stdout.isatty()
        self.manifest: dict[str, Any] = {}
        if writes:
            path.mkdir(parents=True, exist_ok=True)
            settle_compact(path, fresh)
            # plain JSON lines and text, always: the run appends line by line, a resume cuts both files back to the
            # byte offsets its checkpoint stored (cut_back), and a study reads them while the run trains -- none of
            # which a gzip file allows; only a finished run is compacted (contract/runfiles.py)
            mode = "w" if fresh else "a"
            self._metrics = open(path / METRICS, mode, buffering=1)
            self._log = open(path / LOG, mode, buffering=1)
            if not fresh:
                self._end_last_line()
        self._events = events if writes else None

    @classmethod
    def take_over(cls, path: Path, manifest: dict[str, Any]) -> "RunFolder":
        """A writer for a survivor when rank 0 is gone: appends, and starts from the manifest on disk (read by the
        caller through the reader)."""
        run = cls(path, writes=True, echo=False, fresh=False)
        run.manifest = manifest
        return run

    def _end_last_line(self) -> None:
        """A process killed mid-write leaves half a line: end it, so the next record is a line of its own."""
        for f in (self._metrics, self._log):
            size = os.fstat(f.fileno()).st_size
            if size:
                with open(f.name, "rb") as r:
                    r.seek(size - 1)
                    if r.read(1) != b"\n":
                        f.write("\n")

    # ---- structured records ------------------------------------------------------------------------------------
    def record(self, kind: str, time: float | None = None, **fields) -> None:
        """Write one record of a declared kind (checked on every rank, so a wrong field fails in any test).
        `time`: when it happened, if not now (a telemetry sample gathered from another node later)."""
        rec = make_record(kind, **fields)
        if self.writes:
            rec["time"] = self.clock() if time is None else time
            line = json.dumps(rec) + "\n"
            with self._write_lock:
                if not self._metrics.closed:  # a sampler thread's last sample may come after the run closed
                    self._metrics.write(line)
                    if self._events is not None:
                        self._events.add(rec)

    # ---- the manifest (declared in contract/manifest.py): begun, brought up to date, ended ------------------------
    def begin(self, config: dict, attempt: dict | None = None, **fields) -> None:
        """This attempt's start: config.json, then the whole manifest (the caller's identity, placement and
        environment fields, `smoke` among them: contract/plan.py carries_quick; status running) and the running
        status record. A resumed run's manifest (the caller puts the one on disk in self.manifest) keeps its start,
        fields and attempts, `attempt` appended."""
        self.write_config(config)
        before = self.manifest
        attempts = [*before.get("attempts", []), attempt] if attempt else before.get("attempts")
        record = {**before, "manifest_version": declared.VERSION, "config_fingerprint": document_fingerprint(config),
                  "start": before.get("start", now_iso()), "end": None, "status": "running", "epochs_done": 0,
                  "failed_ranks": None, "message": None,
                  **({"attempts": attempts} if attempts is not None else {}), **fields}
        wrong = declared.problem(record)
        if wrong:
            raise declared.ManifestError(f"{MANIFEST}: {wrong}")
        # the status goes into this first write: a manifest without one, left by a kill before it, strands a study
        self.manifest = record
        if self.writes:
            write_json_atomic(self.path / MANIFEST, self.manifest)
        self.record("status", status="running", epoch=record["epochs_done"])

    def progress(self, **fields) -> None:
        """Bring the running manifest up to date (epochs done, best accuracy, tallies)."""
        declared.check_fields(fields)
        self.manifest.update(fields)
        if self.writes:
            write_json_atomic(self.path / MANIFEST, self.manifest)

    def end(self, status: str, epoch: int, message: str = "", exit_code: int | None = None, **fields) -> None:
        """The status record, then the final manifest, which is written even when the record cannot be (a full
        disk): a `running` manifest must never outlive its process. A run the step cap cut short is a smoke run.
        fields: more status fields (`end`: when, if not now: a simulated clock's)."""
        update = {"status": status, "epochs_done": epoch, "end": now_iso(), **fields, "exit_code": exit_code,
                  "message": message or None}
        if "capped_at_steps" in fields:
            update["smoke"] = True
        declared.check_fields(update)
        if status == "running":
            raise declared.ManifestError("a run ends completed, diverged, failed or preempted, never running")
        try:
            self.record("status", status=status, epoch=epoch, message=message)
        except OSError:
            pass
        self.manifest.update(update)
        if self.writes:
            write_manifest_anyway(self.path / MANIFEST, self.manifest)

    def write_config(self, config: dict) -> None:
        if self.writes:
            write_json_atomic(self.path / CONFIG, config)

    # ---- resume: the files hold exactly what the checkpoint covers -----------------------------------------------
    def sizes(self) -> dict[str, int]:
        """Bytes of metrics.jsonl and train.log written so far (stored in each checkpoint)."""
        if not self.writes:
            return {}
        return {METRICS: os.fstat(self._metrics.fileno()).st_size, LOG: os.fstat(self._log.fileno()).st_size}

    def cut_back(self, sizes: dict[str, int]) -> int:
        """Drop what was written after the checkpoint (it will be written again); keep its status records, which
        tell the story of the attempts rather than of training. Returns the records dropped."""
        if not self.writes or not sizes:
            return 0
        dropped = 0
        for name, f in ((METRICS, self._metrics), (LOG, self._log)):
            size, current = sizes.get(name), os.fstat(f.fileno()).st_size
            if size is None or size >= current:
                continue
            with open(self.path / name, "rb") as r:
                whole = r.read()
            size = nearest_line_end(whole, size)  # a file changed since the checkpoint: never cut mid-line
            tail = whole[size:]
            with self._write_lock:
                os.ftruncate(f.fileno(), size)  # the file is opened for appending: the next write lands at `size`
            if name == METRICS:
                if self._events is not None:  # its steps past the checkpoint will be written again
                    self._events.stale()
                records, _ = parse_lines(tail.split(b"\n"))
                dropped = sum(r["kind"] != "status" for r in records)
                for rec in records:
                    if rec["kind"] == "status":
                        f.write(json.dumps(rec) + "\n")
        return dropped

    # ---- human lines -------------------------------------------------------------------------------------------
    def log(self, line: str, progress: bool = False) -> None:
        """A train.log line; on a terminal, progress lines overwrite each other instead of scrolling."""
        if not self.writes:
            return
        self._log.write(line + "\n")
        if not self.echo:
            return
        if progress and self.tty:
            sys.stdout.write("\r" + line.replace("\t", "  ")[: os.get_terminal_size().columns - 1])
            sys.stdout.flush()
        else:
            if self.tty:
                sys.stdout.write("\r\033[K")
            print(line, flush=True)

    def close(self) -> None:
        if self.writes and not self._metrics.closed:
            with self._write_lock:
                if self._events is not None:
                    self._events.close()
                for f in (self._metrics, self._log):
                    try:
                        f.close()
                    except OSError:  # what a full disk kept in the buffer is lost; the manifest says why
                        pass
