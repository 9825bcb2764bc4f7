"""The run folder: its record schema, its one writer and its one reader. No torch here, so the analysis imports it.

A run is a folder `<out>/<experiment>/<run>/` holding
  config.json    the resolved config;
  manifest.json  versions, hosts, backend, threads, start/end, status (running/completed/diverged/failed/preempted);
  metrics.jsonl  one JSON object a line, the source of truth: each line one of the record kinds declared below;
  train.log      human lines in pytorch/examples' format (trainers/runlog.py formats them);
  checkpoint.pt  the trainer's checkpoint, which also stores how many bytes of metrics.jsonl and train.log it covers;
  .lock          the pid of rank 0 while the run trains (rank 0 holds an flock on the folder itself, which deleting
                 no file can defeat); `.rank<r>.lock` is each other rank's, flocked.

Writing: `RunFolder.record(kind, **fields)` checks the fields against the declared record type (an unknown kind or
field, a missing field or a wrong type is an error at write time), so the files cannot drift from the schema.
Reading: `read_metrics(path)` parses every line as JSON; a line that is not a JSON object of a declared kind is
counted as bad, never guessed at.
"""
from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import platform
import subprocess
import sys
import threading
import time
import types
import typing
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from contract.config import ConfigError

METRICS, LOG, MANIFEST, CONFIG = "metrics.jsonl", "train.log", "manifest.json", "config.json"
LOCK = ".lock"


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
    images: int  # training images over all ranks
    skipped_images: int  # this epoch's distinct unreadable training files (each replaced by a readable one)
    skipped_val_images: int  # this epoch's distinct unreadable validation files (left out, not replaced)
    skipped_steps: int  # optimizer steps fp16's gradient scaler skipped (inf/NaN gradients); 0 in other precisions
    data_share: float  # waiting for data / step time, this epoch's training steps
    # seconds summed over this attempt's training steps on the writing rank (validation not included):
    data_s: float  # waiting for the next batch
    compute_s: float  # forward, backward and optimizer, minus communication
    comm_s: float  # communication measured in the backend (0 for single and emulated)


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


@dataclass(frozen=True)
class Status:
    """A change of the run's status; the manifest holds the latest."""

    status: str  # running, completed, diverged, failed, preempted
    epoch: int  # epochs done
    message: str = ""


@dataclass(frozen=True)
class GPUSample:
    index: int
    util_pct: float
    mem_used_gb: float
    power_w: float | None


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


RECORDS: dict[str, type] = {"iter": Iter, "epoch": Epoch, "bench": Bench, "status": Status, "util": Util}
STATUSES = ("running", "completed", "diverged", "failed", "preempted")


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


def make_record(kind: str, **fields) -> dict:
    """The record as written: checked against its declaration, `kind` first."""
    cls = RECORDS.get(kind)
    if cls is None:
        raise RecordError(f"unknown record kind {kind!r}; declared: {', '.join(RECORDS)}")
    hints = _HINTS.setdefault(cls, typing.get_type_hints(cls))
    unknown = set(fields) - hints.keys()
    if unknown:
        raise RecordError(f"{kind} record: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        rec = cls(**fields)
    except TypeError as e:
        raise RecordError(f"{kind} record: {e}") from None
    values = dataclasses.asdict(rec)
    for name, value in values.items():
        if not _type_ok(value, hints[name]):
            raise RecordError(f"{kind} record: {name} = {value!r} is not {hints[name]}")
    if kind == "status" and values["status"] not in STATUSES:
        raise RecordError(f"status record: unknown status {values['status']!r}")
    if kind == "util":
        values["gpus"] = [make_gpu_sample(g) for g in values["gpus"]]
    return {"kind": kind, **values}


def make_gpu_sample(sample: dict) -> dict:
    """One entry of a util record's `gpus`, checked against GPUSample."""
    if not isinstance(sample, dict):
        raise RecordError(f"util record: a gpus entry must be a dict of {[f.name for f in dataclasses.fields(GPUSample)]}")
    hints = _HINTS.setdefault(GPUSample, typing.get_type_hints(GPUSample))
    try:
        values = dataclasses.asdict(GPUSample(**sample))
    except TypeError as e:
        raise RecordError(f"util record, gpus entry: {e}") from None
    for name, value in values.items():
        if not _type_ok(value, hints[name]):
            raise RecordError(f"util record, gpus entry: {name} = {value!r} is not {hints[name]}")
    return values


# ================================================================================================================
# Reading
# ================================================================================================================
@dataclass
class Metrics:
    """What a metrics.jsonl holds: its good records in order, the bad lines counted, and a problem if any."""

    records: list[dict]
    bad_lines: int = 0
    problem: str | None = None  # "missing", "empty", "unreadable (...)"

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["kind"] == kind]


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


def read_metrics(path: str | Path) -> Metrics:
    """Every record of a metrics.jsonl (a run folder or the file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Metrics([], 0, "missing")
    except OSError as e:
        return Metrics([], 0, f"unreadable ({type(e).__name__}: {e.strerror or e})")
    records, bad = parse_lines(data.split(b"\n"))
    problem = None
    if not data.strip():
        problem = "empty"
    elif not records:
        problem = "no readable record"
    return Metrics(records, bad, problem)


def last_record(path: str | Path, kind: str, tail_bytes: int = 65536) -> dict | None:
    """The newest record of one kind, reading only the end of the file (for progress lines)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    try:
        with open(path, "rb") as f:
            start = max(0, f.seek(0, 2) - tail_bytes)
            f.seek(start)
            lines = f.read().split(b"\n")
    except OSError:
        return None
    if start:
        lines = lines[1:]  # the first line may be cut
    for line in reversed(lines):
        rec = parse_record(line) if line.strip() else None
        if rec is not None and rec["kind"] == kind:
            return rec
    return None


def read_manifest(run_dir: str | Path) -> dict | None:
    try:
        data = json.loads((Path(run_dir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ================================================================================================================
# Run names and locks
# ================================================================================================================
class RunInUse(ConfigError):
    """Another process trains this run folder."""


IN_USE = "is in use by another process (pid {pid})"  # the words of RunInUse, which in_use_by reads back


def in_use_by(console_text: str) -> str | None:
    """The pid a trainer named when it was refused because another process held its run, from its console output."""
    head, tail = IN_USE.split("{pid}")
    for line in reversed(console_text.splitlines()):
        if line.startswith("error: ") and head in line:
            return line.split(head, 1)[1].split(tail, 1)[0]
    return None


MAX_RUN_NAME = 200  # bytes; file systems allow 255 a name, and the name also goes into Slurm job names and tables


def check_run_name(name: str) -> str:
    """A run name is one folder name inside the experiment's folder: no path separators, no '..', not absolute."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name or os.path.isabs(name):
        raise ConfigError(f"run name {name!r} must be a plain folder name (no '/', no '..', not absolute)")
    if len(name.encode()) > MAX_RUN_NAME:
        raise ConfigError(f"run name {name[:40]}... is {len(name.encode())} bytes long; use at most {MAX_RUN_NAME}")
    return name


def _lock_path(run_dir: Path, rank: int) -> Path:
    return run_dir / (LOCK if rank == 0 else f".rank{rank}.lock")


def _lock_target(run_dir: Path, rank: int) -> Path:
    """What a rank's flock is held on. Rank 0's is the run folder itself, which exists as long as the run does: a
    lock on a file could be defeated by deleting the file (a second writer then locks a new one beside the first)."""
    return run_dir if rank == 0 else _lock_path(run_dir, rank)


def _open_lock_target(run_dir: Path, rank: int) -> int:
    target = _lock_target(run_dir, rank)
    return os.open(target, os.O_RDONLY) if rank == 0 else os.open(target, os.O_RDWR | os.O_CREAT, 0o644)


def lock_holder(run_dir: Path, rank: int = 0) -> str:
    """The pid holding a rank's lock: from the kernel's table of locks where there is one (Linux), else from the
    note the holder wrote into its lock file ("?" when neither says)."""
    return _flock_owner(_lock_target(Path(run_dir), rank)) or _pid_note(_lock_path(Path(run_dir), rank)) or "?"


def _flock_owner(path: Path) -> str | None:
    """/proc/locks: `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF` (pid, then device major:minor:inode in hex)."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            return fields[4]
    return None


def _pid_note(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class RankLock:
    """An exclusive flock held while this rank trains the run: rank 0's, on the run folder, is the run's lock.

    The kernel drops it when the process dies, however it dies, so peers can tell a dead rank from a live one.
    The holder's pid is written into the lock file (`.lock` for rank 0), for the message a second process gets.
    """

    def __init__(self, run_dir: Path, rank: int):
        self.path = _lock_path(run_dir, rank)
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = _open_lock_target(run_dir, rank)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunInUse(f"run folder {run_dir} {IN_USE.format(pid=lock_holder(run_dir, rank))}; "
                           "wait for it to end or pick another --run") from None
        self.fd: int | None = fd
        self.path.write_text(f"{os.getpid()}\n")

    def discard(self, made: list[Path]) -> None:
        """Remove the lock file (the lock is still held, so no one else can take it meanwhile) and the folders this
        run made (innermost first) that are empty then: a run refused before it started leaves no folder behind."""
        self.path.unlink(missing_ok=True)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # something else is in it (another rank's lock, a log): it stays, restartable
                return

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def is_locked(run_dir: Path, rank: int = 0) -> bool:
    """Whether a live process holds rank `rank`'s lock of a run folder (probing takes and drops it at once)."""
    try:
        fd = os.open(_lock_target(Path(run_dir), rank), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock if this probe took it
    return False


def dead_ranks(run_dir: Path, world_size: int, me: int, wait_s: float = 3.0) -> list[int]:
    """The ranks whose process is gone (their lock is free), waiting up to wait_s for a dying peer to exit."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = [r for r in range(world_size) if r != me and not is_locked(run_dir, r)]
        if dead or time.monotonic() > deadline:
            return dead
        time.sleep(0.1)


# ================================================================================================================
# Manifest helpers
# ================================================================================================================
def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


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


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (importing Horovod to ask would initialise it)."""
    return {"python": platform.python_version(), "torch": package_version("torch"),
            "torchvision": package_version("torchvision"), "horovod": package_version("horovod")}


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
class RunFolder:
    """Rank 0's writer of a run folder; other ranks get one that writes nothing (writes=False)."""

    def __init__(self, path: Path, writes: bool, echo: bool = True, fresh: bool = True, clock=time.time):
        """fresh: the run starts from scratch, so records of an earlier attempt (one killed before its first
        checkpoint) are dropped rather than read twice; a resumed run appends after `cut_back`.
        clock: what stamps each record's `time` (test fixtures pass a simulated one)."""
        self.path = path
        self.clock = clock
        self._write_lock = threading.Lock()  # the telemetry sampler writes from its own thread
        self.writes = writes
        self.echo = echo and writes
        self.tty = sys.stdout.isatty()
        self.manifest: dict[str, Any] = {}
        if writes:
            path.mkdir(parents=True, exist_ok=True)
            mode = "w" if fresh else "a"
            self._metrics = open(path / METRICS, mode, buffering=1)
            self._log = open(path / LOG, mode, buffering=1)
            if not fresh:
                self._end_last_line()

    @classmethod
    def take_over(cls, path: Path) -> "RunFolder":
        """A writer for a survivor rank when rank 0 is gone: appends, and starts from the manifest on disk."""
        run = cls(path, writes=True, echo=False, fresh=False)
        run.manifest = read_manifest(path) or {}
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

    def status(self, status: str, epoch: int, message: str = "", exit_code: int | None = None, **manifest) -> None:
        """The status record, then the manifest. Ending a run, the manifest is written even when the record cannot
        be (a full disk): a `running` manifest must never outlive its process."""
        try:
            self.record("status", status=status, epoch=epoch, message=message)
        except OSError:
            if status == "running":
                raise
        update = {"status": status, "epochs_done": epoch, **manifest}
        if status != "running":
            update.update(end=now_iso(), exit_code=exit_code, message=message or None)
            self.manifest.update(update)
            if self.writes:
                write_manifest_anyway(self.path / MANIFEST, self.manifest)
            return
        self.update_manifest(**update)

    def write_config(self, config: dict) -> None:
        if self.writes:
            write_json_atomic(self.path / CONFIG, config)

    def update_manifest(self, **fields) -> None:
        self.manifest.update(fields)
        if self.writes:
            write_json_atomic(self.path / MANIFEST, self.manifest)

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
                for f in (self._metrics, self._log):
                    try:
                        f.close()
                    except OSError:  # what a full disk kept in the buffer is lost; the manifest says why
                        pass


# ================================================================================================================
# Speaking for a run whose writer is gone
# ================================================================================================================
def mark_failed(run_dir: Path, message: str, exit_code: int, **manifest) -> None:
    """Set a run's manifest to failed for a writer that is gone (rank 0 died, or every process was killed), under
    rank 0's lock: holding it keeps a restarted run out meanwhile. Nothing when a live process holds the run (it
    speaks for itself) or the manifest no longer says running. A disk that refuses the lock or the manifest (full,
    read-only) raises its OSError."""
    try:
        lock = RankLock(run_dir, 0)
    except RunInUse:
        return
    try:
        run = RunFolder.take_over(run_dir)
        if run.manifest.get("status") == "running":
            run.status("failed", run.manifest.get("epochs_done", 0), message, exit_code, **manifest)
        run.close()
    finally:
        lock.release()
