"""Telemetry: a sampler per node that records CPU, memory and GPU utilisation as `util` records.

One daemon thread on local rank 0 of each node samples every `telemetry.interval_s` seconds:
  cpu_process_pct  this process and its children (loader workers), a percent of all the node's logical cores
                   (the scale of cpu_system_pct: one busy core of 8 = 12.5)
  cpu_system_pct   the whole node's CPU use over the same interval
  mem_process_gb   resident memory of this process and its children;  mem_system_pct  the node's memory in use
  gpus             per GPU this job sees: {"index" (CUDA's), "nvml_index" (the node's), "util_pct",
                   "mem_used_gb", "power_w"}; empty without one (NVML is optional: one line says so)
UtilRecords drains the buffer: rank 0 writes its node's samples as the loop logs and gathers the other nodes' at each
epoch's end. No torch import.
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time
from collections import deque

import psutil

GB = 1024 ** 3


# ---- CPU and memory (psutil) -----------------------------------------------------------------------------------------
class ProcessTreeCpu:
    """CPU seconds of a process and its live children, turned into a percent of the node between two samples."""

    def __init__(self, process: psutil.Process):
        self.process = process
        self.cores = psutil.cpu_count() or 1
        self.seen: dict[int, float] = {}  # pid -> CPU seconds at the last sample
        self.last_wall = time.monotonic()
        self.sample()  # the baseline: the first interval starts here

    def tree(self) -> list[psutil.Process]:
        try:
            return [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            return [self.process]

    def sample(self) -> tuple[float, float]:
        """(cpu_process_pct, mem_process_gb) since the previous call."""
        used, rss, now_seen = 0.0, 0, {}
        for proc in self.tree():
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss += proc.memory_info().rss
            except psutil.Error:  # a loader worker that exited just now
                continue
            seconds = times.user + times.system
            now_seen[proc.pid] = seconds
            used += seconds - self.seen.get(proc.pid, 0.0)  # a child born since the last sample: all its time
        wall = time.monotonic()
        elapsed, self.last_wall, self.seen = wall - self.last_wall, wall, now_seen
        pct = 100.0 * max(used, 0.0) / (elapsed * self.cores) if elapsed > 0 else 0.0
        return min(pct, 100.0), rss / GB


class NodeCpu:
    """The node's CPU use between two samples, from its CPU times (psutil.cpu_percent keeps its baseline per
    thread, so its first figure in the sampler thread would be a meaningless 0)."""

    def __init__(self):
        self.last = psutil.cpu_times()

    @staticmethod
    def _busy_total(t) -> tuple[float, float]:
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # guest time is in user already
        return total - t.idle - getattr(t, "iowait", 0.0), total

    def sample(self) -> float:
        now = psutil.cpu_times()
        (busy1, total1), (busy0, total0) = self._busy_total(now), self._busy_total(self.last)
        self.last = now
        return min(max(100.0 * (busy1 - busy0) / (total1 - total0), 0.0), 100.0) if total1 > total0 else 0.0


# ---- GPUs (NVML) -----------------------------------------------------------------------------------------------------
class Nvml:
    """Per-GPU utilisation, memory and power through NVML; `available` is False (and samples empty) without it."""

    def __init__(self, warn):
        self.handles: list = []
        self.available = False
        try:
            import pynvml  # the nvidia-ml-py package

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.nvml_indices = visible_nvml_indices(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.nvml_indices]
            self.available = bool(self.handles)
        except Exception as e:  # no package, no driver (NVMLError_LibraryNotFound), no GPU: CPU fields only
            warn(f"=> telemetry: no GPU figures ({type(e).__name__}: {e}); recording CPU and memory only")
            return
        if not self.available:
            warn("=> telemetry: NVML sees no GPU visible to this job (CUDA_VISIBLE_DEVICES="
                 f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}); recording CPU and memory only")

    def sample(self) -> list[dict]:
        if not self.available:
            return []
        try:
            return [self._one(i, n, h) for i, (n, h) in enumerate(zip(self.nvml_indices, self.handles))]
        except Exception as e:  # a driver hiccup must never stop training: drop GPU fields from here on
            self.available = False
            print(f"telemetry: NVML failed ({type(e).__name__}: {e}); recording CPU and memory only from now",
                  file=sys.stderr, flush=True)
            return []

    def _one(self, index: int, nvml_index: int, handle) -> dict:
        nv = self.nvml
        util = nv.nvmlDeviceGetUtilizationRates(handle).gpu
        mem = nv.nvmlDeviceGetMemoryInfo(handle).used
        try:
            power = nv.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
        except nv.NVMLError:  # some boards don't report power
            power = None
        return {"index": index, "nvml_index": nvml_index, "util_pct": float(util), "mem_used_gb": mem / GB,
                "power_w": power}


def visible_nvml_indices(nvml, cuda_visible: str | None) -> list[int]:
    """The NVML indices of the GPUs this job's CUDA sees, in CUDA's order: all of them when CUDA_VISIBLE_DEVICES is
    unset; else its entries (indices, or UUIDs and their prefixes), stopping at the first unknown one as CUDA does.
    Integer entries assume CUDA numbers GPUs in PCI order, as it does on a node of one GPU model."""
    count = nvml.nvmlDeviceGetCount()
    if cuda_visible is None:
        return list(range(count))
    uuids = None
    chosen: list[int] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if entry.isdigit():
            match = [int(entry)] if int(entry) < count else []
        else:
            if uuids is None:
                uuids = [str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
            match = [i for i, u in enumerate(uuids) if entry and u.startswith(entry)]
        if len(match) != 1 or match[0] in chosen:
            break
        chosen += match
    return chosen


# ---- The sampler thread ----------------------------------------------------------------------------------------------
class Sampler:
    """Samples every `interval_s` seconds on a daemon thread into a buffer that `drain()` empties."""

    def __init__(self, interval_s: float, rank: int, warn=print):
        self.interval_s = interval_s
        self.rank = rank
        self.host = socket.gethostname()
        self.cpu = ProcessTreeCpu(psutil.Process())
        self.node_cpu = NodeCpu()
        self.gpus = Nvml(warn)
        self.buffer: deque[dict] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.buffer.append(self.sample())
            except Exception as e:  # never let telemetry take a run down
                print(f"telemetry: sample failed ({type(e).__name__}: {e}); sampler stopped", file=sys.stderr)
                return

    def sample(self) -> dict:
        cpu_pct, mem_gb = self.cpu.sample()
        return {
            "time": time.time(), "host": self.host, "rank": self.rank,
            "cpu_process_pct": cpu_pct, "cpu_system_pct": self.node_cpu.sample(),
            "mem_process_gb": mem_gb, "mem_system_pct": psutil.virtual_memory().percent,
            "gpus": self.gpus.sample(),
        }

    def drain(self) -> list[dict]:
        out = []
        while self.buffer:
            out.append(self.buffer.popleft())
        return out

    def stop(self) -> None:
        """Stop the thread and take a last sample (so a run shorter than the interval has one too)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            self.buffer.append(self.sample())
        except Exception:  # the run is ending anyway: never fail it for a sample
            pass


def start_sampler(interval_s: float, rank: int, local_rank: int, warn=print) -> Sampler | None:
    """A started sampler on local rank 0 of each node when interval_s > 0; None elsewhere or when disabled.

    warn: where the one line goes when there are no GPU figures (the trainer passes its train.log)."""
    if interval_s <= 0 or local_rank != 0:
        return None
    return Sampler(interval_s, rank, warn).start()


# ---- The run's util records ------------------------------------------------------------------------------------------
class UtilRecords:
    """This node's sampler (on its local rank 0) and the `util` records its samples become in the run folder."""

    def __init__(self, interval_s: float, backend, run):
        self.backend, self.run = backend, run
        self.started = time.time()  # the samples' origin until the manifest has the run's start
        self.sampler = start_sampler(interval_s, backend.rank, backend.local_rank, run.log)

    def write(self, gather: bool) -> None:
        """The samples so far as util records: rank 0's own node's as it logs; with gather (a collective, so every
        rank calls it at the same point: an epoch's end) every node's, through the backend."""
        samples = self.sampler.drain() if self.sampler else []
        if gather:
            samples = [s for node in self.backend.gather_objects(samples) for s in node]
        start = self.run.manifest.get("start")
        origin = datetime.datetime.fromisoformat(start).timestamp() if start else self.started
        for sample in samples:
            self.run.record("util", t=sample["time"] - origin, **sample)  # t: seconds since the run started

    def finish(self) -> None:
        """Stop the sampler; rank 0 writes its node's last samples (other nodes' are lost)."""
        if not self.sampler:
            return
        self.sampler.stop()
        if self.backend.is_main():
            try:
                self.write(gather=False)
            except OSError:  # the disk that failed the run takes no more samples either
                pass
