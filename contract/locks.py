"""Who trains a run folder: each rank holds an flock while it trains, so a second process is refused and a dead rank
is told from a live one.

Rank 0's lock is on the run folder itself (deleting no file can defeat it); it writes its pid into `<run>/.lock`
for the message a second process gets. Every other rank locks `<run>/.rank<r>.lock` and writes its pid there.
The kernel drops a lock when its process dies, however it dies.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from contract.config import ConfigError
from contract.reader import read_manifest
from contract.runfolder import STUDY_LOCK, RunFolder, rank_lock


class RunInUse(ConfigError):
    """Another process trains this run folder."""


IN_USE = "is in use by another process (pid {pid})"  # the words of RunInUse, which in_use_by reads back


def in_use(run_dir: Path, rank: int = 0) -> RunInUse:
    """The one line a second process training a held run folder gets."""
    return RunInUse(f"run folder {run_dir} {IN_USE.format(pid=lock_holder(run_dir, rank))}; wait for it to end or "
                    "pick another --run")


def in_use_by(console_text: str) -> str | None:
    """The pid a trainer named when it was refused because another process held its run, from its console output."""
    head, tail = IN_USE.split("{pid}")
    for line in reversed(console_text.splitlines()):
        if line.startswith("error: ") and head in line:
            return line.split(head, 1)[1].split(tail, 1)[0]
    return None


def _lock_path(run_dir: Path, rank: int) -> Path:
    return run_dir / rank_lock(rank)


def _lock_target(run_dir: Path, rank: int) -> Path:
    """What a rank's flock is held on. Rank 0's is the run folder itself, which exists as long as the run does: a
    lock on a file could be defeated by deleting the file (a second writer then locks a new one beside the first)."""
    return run_dir if rank == 0 else _lock_path(run_dir, rank)


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
    """An exclusive flock held while this rank trains the run (the module's docstring): rank 0's is the run's."""

    def __init__(self, run_dir: Path, rank: int, wait_s: float = 0.0):
        """wait_s: how long a lock held by another process may take to be let go before this is refused (a rank of
        an earlier attempt still ending); 0 = refused at once (a second launch of the run)."""
        self.path = _lock_path(run_dir, rank)
        run_dir.mkdir(parents=True, exist_ok=True)
        target = _lock_target(run_dir, rank)
        fd = os.open(target, os.O_RDONLY) if rank == 0 else os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise in_use(run_dir, rank) from None
                if not told:
                    told = True
                    print(f"=> rank {rank}: run folder {run_dir} is held by pid {lock_holder(run_dir, rank)} (this "
                          f"rank of an earlier attempt?); waiting up to {wait_s:.0f} s for it to end", flush=True)
                time.sleep(0.5)
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


class StudyClaim:
    """A study's claim on a run it launches: an flock on `<run>/.study.lock`, taken before any trainer starts and
    held until the run's processes end. A second study finds it held and leaves the run to the first, instead of
    starting a trainer that is refused (whose refusal would land in the first study's console.log)."""

    def __init__(self, fd: int):
        self.fd: int | None = fd

    @classmethod
    def take(cls, run_dir: Path) -> "StudyClaim | None":
        """The claim, or None when another study holds it (its pid: study_claim_holder)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / STUDY_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def study_claim_holder(run_dir: Path) -> str:
    try:
        return (Path(run_dir) / STUDY_LOCK).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


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
        run = RunFolder.take_over(run_dir, read_manifest(run_dir) or {})
        if run.manifest.get("status") == "running":
            run.end("failed", run.manifest.get("epochs_done", 0), message, exit_code, **manifest)
        run.close()
    finally:
        lock.release()
