"""What else ran on a rank's CPUs while its steps were timed: measured around the timed steps, recorded in the
manifest's per-rank `placement` entry (contract/placement.py), judged by the rules below where the run is read.

    before = hostload.sample(affinity)         # as the timed steps start
    ...                                        # the timed steps
    entry.update(hostload.window(before, hostload.sample(affinity)))
    hostload.disturbances(manifest["placement"])   # [] or one reason a line, for the report and the closing table

Why: a throughput number measures the machine it ran on only if nothing else ran there. A busy laptop turned a
1-process baseline of 868 img/s into 42 (two torch threads spinning against other work) and the report drew a 16x
speed-up on 2 cores; a node shared with another job does the same on a cluster. MLPerf's rule is that a system is
measured alone, so each rank records, for its timed steps: the wall time, its own CPU time (its process tree:
loader workers included), the busy time of the CPUs it may run on (Linux's /proc/stat, steal included: a
hypervisor that took the CPU for another guest is other work too) and the 1-minute load average before and after
(damped over a minute, so it is recorded for the reader but never judged). No torch here: both trainers and the
analysis import it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from contract.placement import parse_cpu_list

# The declared reading rules (docs/training.md "Was the machine quiet?"):
# busy: other work took more CPU than the run's ranks left spare on their CPUs, by more than a quarter of a CPU
# (the study's own supervisor and a launcher's agent poll, a few hundredths of a CPU)
BUSY_SLACK_CPUS = 0.25
# short: a rank got less than half the CPU time its threads could use (its share where the run's own ranks
# outnumber their CPUs); a cgroup's CPU quota throttles a rank without showing as other work
CPU_SHORT = 0.5
WINDOW_FIELDS = ("timed_wall_s", "timed_cpu_s", "busy_cpu_s", "load_before", "load_after", "machine")


@dataclass(frozen=True)
class Sample:
    wall: float  # time.monotonic()
    cpu: float  # this process tree's user + system CPU seconds
    busy: float | None  # the busy seconds of `cpus` since boot; None where /proc/stat cannot be read
    load: float | None  # the 1-minute load average


def sample(cpus: Sequence[int]) -> Sample:
    """The clocks now, for the CPUs this rank may run on."""
    return Sample(time.monotonic(), tree_cpu_seconds(os.getpid()), busy_seconds(cpus), load_average())


def window(before: Sample, after: Sample) -> dict:
    """A rank's fields for its placement entry: the timed steps' wall and CPU seconds and what its CPUs did."""
    busy = None if before.busy is None or after.busy is None else round(after.busy - before.busy, 4)
    return {"timed_wall_s": round(after.wall - before.wall, 4), "timed_cpu_s": round(after.cpu - before.cpu, 4),
            "busy_cpu_s": busy, "load_before": before.load, "load_after": after.load, "machine": machine_id()}


def with_windows(ranks: Sequence[Mapping] | None, windows: Sequence[Mapping]) -> list[dict] | None:
    """The manifest's per-rank placement with each rank's timed window merged in (windows gathered in rank order);
    None where the placement recorded another number of ranks (nothing to merge into)."""
    ranks = list(ranks or [])
    return [{**entry, **w} for entry, w in zip(ranks, windows)] if len(ranks) == len(windows) else None


# ------------------------------------------------------------------------------------------------ the clocks
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)  # /proc/stat: user nice system [idle iowait] irq softirq steal


def busy_seconds(cpus: Sequence[int], stat: Path = Path("/proc/stat")) -> float | None:
    """Seconds the CPUs in `cpus` spent busy since boot (every process's work, this one's included)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    wanted, ticks = {f"cpu{c}" for c in cpus}, 0
    for line in lines:
        name, *fields = line.split()
        if name in wanted:
            ticks += sum(int(fields[i]) for i in BUSY_COLUMNS if i < len(fields))
    return ticks / CLOCK_TICKS if wanted else None


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its living descendants (a DataLoader's workers do a rank's work);
    this process's own clock where /proc cannot be read."""
    try:
        return sum(process_cpu_seconds(p) for p in descendants(pid))
    except OSError:
        t = os.times()
        return t.user + t.system


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc/<pid>/task/*/children."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue  # a thread or child that ended meanwhile
    return found


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (every thread), from /proc/<pid>/stat; 0 for one that ended meanwhile."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if pid == os.getpid():
            raise
        return 0.0
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of proc(5)


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine_id() -> str | None:
    """The boot of the machine this rank ran on: the local cluster's hosts are network namespaces of one machine,
    and share its CPUs, so ranks are grouped by this, not by host name."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------ the reading
def disturbances(ranks: Sequence[Mapping] | None) -> list[str]:
    """Why this run's timing does not measure its machine alone, one reason a line; [] when it does or when the
    manifest recorded no window (a run before this was recorded, or not a throughput run)."""
    if not isinstance(ranks, (list, tuple)):  # none recorded, or a damaged manifest's: nothing to judge
        return []
    timed = [r for r in ranks if isinstance(r, Mapping) and _number(r.get("timed_wall_s"))
             and r["timed_wall_s"] > 0 and _number(r.get("timed_cpu_s"))]
    if not timed or len(timed) != len(ranks):
        return []
    by_machine: dict[str, list[Mapping]] = {}
    for r in timed:
        by_machine.setdefault(str(r.get("machine") or r.get("host")), []).append(r)
    lines = []
    for group in by_machine.values():  # a busy host crowds its ranks out: the cause is named, not its effect too
        lines += _busy(group) or _short(group)
    return lines


def _busy(group: list[Mapping]) -> list[str]:
    """Other work on one machine's CPUs beyond what the run's ranks left spare."""
    busy_by_set: dict[str, list[float]] = {}
    for r in group:
        if not _number(r.get("busy_cpu_s")):
            return []
        busy_by_set.setdefault(str(r.get("cpu_list")), []).append(float(r["busy_cpu_s"]))
    cpus = len(_union(group))
    if not cpus:
        return []
    wall = sum(r["timed_wall_s"] for r in group) / len(group)
    busy = sum(sum(v) / len(v) for v in busy_by_set.values())  # ranks of one CPU set measured the same CPUs
    others = max(0.0, busy - sum(r["timed_cpu_s"] for r in group)) / wall
    spare = max(0.0, cpus - sum(int(r.get("threads") or 1) for r in group))
    if others <= spare + BUSY_SLACK_CPUS:
        return []
    host = group[0].get("host", "?")
    return [f"host busy: other work used {others:.2f} of {cpus} CPU(s) on {host} while timed ({spare:g} spare)"]


def _short(group: list[Mapping]) -> list[str]:
    """Ranks whose CPU time fell short of their threads (their share, where the ranks outnumber their CPUs)."""
    cpus = len(_union(group)) or None
    threads = sum(int(r.get("threads") or 1) for r in group)
    share = min(1.0, cpus / threads) if cpus else 1.0
    lines = []
    for r in group:
        own = int(r.get("threads") or 1)
        used = r["timed_cpu_s"] / r["timed_wall_s"]
        if used < CPU_SHORT * own * share:
            lines.append(f"CPU short: a rank on {r.get('host', '?')} got {used:.2f} CPU(s) of its {own} thread(s)' "
                         f"{own * share:.2f} while timed (throttled?)")
    return lines[:1] if len(lines) > 1 else lines  # one line a machine: the reason, not every rank's copy


def _union(group: list[Mapping]) -> set[int]:
    cpus: set[int] = set()
    for r in group:
        if isinstance(r.get("cpu_list"), str):
            cpus |= parse_cpu_list(r["cpu_list"])
    return cpus


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
