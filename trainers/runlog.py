"""A run folder: config.json, manifest.json, metrics.jsonl (the source of truth) and train.log (for people).

train.log keeps the line format of pytorch/examples' imagenet/main.py as the thesis ran it (early 2019), so the
thesis's way of reading logs (throughput = per-GPU batch x GPUs / running-mean batch time at batch 199) still works.
Only rank 0 writes; other ranks get a RunFolder that writes nothing.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torchvision


class AverageMeter:
    """The current value and the running mean, as pytorch/examples' AverageMeter."""

    def __init__(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def versions() -> dict[str, str | None]:
    try:
        import horovod

        hvd_version = horovod.__version__
    except ImportError:
        hvd_version = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "horovod": hvd_version,
        "cuda": torch.version.cuda,
    }


def train_line(epoch: int, i: int, n: int, batch, data, loss, top1, top5) -> str:
    return (
        f"Epoch: [{epoch}][{i}/{n}]\tTime {batch.val:.3f} ({batch.avg:.3f})\tData {data.val:.3f} ({data.avg:.3f})\t"
        f"Loss {loss.val:.4f} ({loss.avg:.4f})\tAcc@1 {top1.val:.3f} ({top1.avg:.3f})\t"
        f"Acc@5 {top5.val:.3f} ({top5.avg:.3f})"
    )


def test_line(i: int, n: int, batch, loss, top1, top5) -> str:
    return (
        f"Test: [{i}/{n}]\tTime {batch.val:.3f} ({batch.avg:.3f})\tLoss {loss.val:.4f} ({loss.avg:.4f})\t"
        f"Acc@1 {top1.val:.3f} ({top1.avg:.3f})\tAcc@5 {top5.val:.3f} ({top5.avg:.3f})"
    )


def summary_line(top1: float, top5: float) -> str:
    return f" * Acc@1 {top1:.3f} Acc@5 {top5:.3f}"


class RunFolder:
    def __init__(self, path: Path, writes: bool, echo: bool = True, fresh: bool = True):
        """fresh: the run starts from scratch, so records of an earlier attempt (one killed before its first
        checkpoint) are dropped rather than read twice; a resumed run appends."""
        self.path = path
        self.writes = writes
        self.echo = echo and writes
        self.tty = sys.stdout.isatty()
        self.manifest: dict[str, Any] = {}
        if writes:
            path.mkdir(parents=True, exist_ok=True)
            mode = "w" if fresh else "a"
            self._metrics = open(path / "metrics.jsonl", mode, buffering=1)
            self._log = open(path / "train.log", mode, buffering=1)

    # ---- structured records ------------------------------------------------------------------------------------
    def record(self, kind: str, **fields) -> None:
        if self.writes:
            self._metrics.write(json.dumps({"kind": kind, "time": time.time(), **fields}) + "\n")

    def status(self, status: str, epoch: int, message: str = "", exit_code: int | None = None) -> None:
        self.record("status", status=status, epoch=epoch, message=message)
        update = {"status": status, "epochs_done": epoch}
        if status != "running":
            update.update(end=now_iso(), exit_code=exit_code)
        self.update_manifest(**update)

    def write_config(self, config: dict) -> None:
        if self.writes:
            write_json_atomic(self.path / "config.json", config)

    def update_manifest(self, **fields) -> None:
        self.manifest.update(fields)
        if self.writes:
            write_json_atomic(self.path / "manifest.json", self.manifest)

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
        if self.writes:
            self._metrics.close()
            self._log.close()
