"""Placement: the CPUs, threads, loader workers and GPU each rank was given, decided from its allocation, recorded
per rank in the manifest and checked. The one place that owns it: the trainer decides with `decide`, the manifest
holds `record`'s dict per rank (`placement`), `make cluster-check` and the study's comparison read them with
`problems` and `per_rank`. No torch here (the TensorFlow trainer and the analysis import it).

Why from the allocation: a launcher left to its defaults gives a rank torch's default threads (all the CPUs it
sees) under srun and torchrun, but one core under mpirun (Open MPI binds a rank to a core): two backends of one
study then compare different machines. So each rank counts the CPUs it was given the same way whoever started it
(`cpus_given`), and explicit settings win over them (`decide`; docs/training.md states the order).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Allocation:
    """What a rank was given, as its environment tells it."""

    affinity: tuple[int, ...]  # the CPUs this process may run on
    parent_affinity: tuple[int, ...]  # its launcher's (srun's step, mpirun's daemon, torchrun): the node's share
    cpus_per_task: int | None  # SLURM_CPUS_PER_TASK, when the job asked for CPUs a task
    local_ranks: int  # ranks of this run on this node


@dataclass(frozen=True)
class Placement:
    cpus: int  # CPUs this rank was given
    threads: int  # torch's (TensorFlow's) intra-op threads
    threads_from: str  # "train.threads" | "checkpoint" | "OMP_NUM_THREADS" | "allocation"
    loader_workers: int

    def warning(self, rank: int, host: str) -> str | None:
        """The one line said when explicit threads exceed the rank's CPUs (they win, and run slower)."""
        if self.threads <= self.cpus:
            return None
        return (f"warning: rank {rank} on {host} runs {self.threads} threads ({threads_source(self.threads_from)}) "
                f"on {self.cpus} CPU(s); {threads_fix(self.threads_from, self.threads, self.cpus)}")


def threads_source(source: str) -> str:
    """Where a rank's threads came from, in words (a checkpoint is no setting a user can change)."""
    return "pinned by the checkpoint it resumed from" if source == "checkpoint" else source


def threads_fix(source: str, threads: int, cpus: int) -> str:
    """The fix for more threads than CPUs, naming only settings that exist: train.threads and OMP_NUM_THREADS are
    settings; a resumed run's threads are its checkpoint's (issue 63: a line said "set checkpoint to at most 2")."""
    more = f"give the rank {threads} CPUs (the profile's cpus_per_task)"
    if source in ("train.threads", "OMP_NUM_THREADS"):
        return f"set {source} to at most {cpus} (or leave it unset), or {more}"
    if source == "checkpoint":
        return (f"a resumed run keeps the threads it started with: {more}, or resume it with --resume force and "
                f"train.threads at most {cpus}")
    return more


def cpus_given(alloc: Allocation) -> int:
    """The CPUs this rank may count as its own: SLURM_CPUS_PER_TASK where the job asked for CPUs a task (at most its
    affinity), else the CPUs it may run on over the ranks sharing them: a launcher that bound the rank (mpirun, to a
    core or a socket) narrowed its affinity, shared by fewer ranks; unbound, its node's local ranks share the set."""
    mine = max(1, len(alloc.affinity))
    if alloc.cpus_per_task:
        return max(1, min(alloc.cpus_per_task, mine))
    whole = max(mine, len(alloc.parent_affinity))
    sharing = max(1, round(alloc.local_ranks * mine / whole))
    return max(1, mine // sharing)


def decide(alloc: Allocation, threads: int = 0, pinned_threads: int | None = None, omp_env: str | None = None,
           loader_workers: int = 0) -> Placement:
    """This rank's placement: train.threads, else a resumed run's pinned threads, else OMP_NUM_THREADS, else its CPUs;
    loader workers at most its CPUs (each a process decoding on a CPU of its own)."""
    cpus = cpus_given(alloc)
    omp = int(omp_env) if omp_env and omp_env.strip().isdigit() and int(omp_env) > 0 else 0
    for value, source in ((threads, "train.threads"), (pinned_threads or 0, "checkpoint"), (omp, "OMP_NUM_THREADS"),
                          (cpus, "allocation")):
        if value:
            return Placement(cpus, value, source, min(loader_workers, cpus))
    raise AssertionError("unreachable: cpus >= 1")


def read_allocation(local_ranks: int, environ: Mapping[str, str] | None = None) -> Allocation:
    """This process's allocation from the OS and the launcher's environment."""
    env = os.environ if environ is None else environ
    affinity = tuple(sorted(affinity_of(0)))
    parent = tuple(sorted(affinity_of(os.getppid()) or affinity))
    per_task = env.get("SLURM_CPUS_PER_TASK", "")
    return Allocation(affinity, parent, int(per_task) if per_task.isdigit() else None, max(1, local_ranks))


def user_omp_threads(launcher: str, environ: Mapping[str, str] | None = None, parent: int | None = None) -> str | None:
    """OMP_NUM_THREADS as a user (or the study) set it. torchrun sets it to 1 for its ranks when nobody did, which
    would pass for a choice and undo the allocation: its ranks take it only when torchrun itself was started with
    it (the parent's environment at exec, /proc/<pid>/environ, which torchrun's own setting does not change)."""
    env = os.environ if environ is None else environ
    value = env.get("OMP_NUM_THREADS")
    if not value or launcher != "torchrun":
        return value
    try:
        started_with = Path(f"/proc/{parent or os.getppid()}/environ").read_bytes().split(b"\0")
    except OSError:
        return value  # no /proc: take it as set
    return value if any(v.startswith(b"OMP_NUM_THREADS=") for v in started_with) else None


def affinity_of(pid: int) -> set[int]:
    """The CPUs `pid` may run on; every CPU where the OS cannot say (macOS, a parent gone)."""
    try:
        return os.sched_getaffinity(pid)
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1)) if pid == 0 else set()


def cpu_list(cpus: Sequence[int]) -> str:
    """Linux's CPU list notation: (0, 1, 2, 5) -> "0-2,5"."""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def parse_cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def record(placement: Placement, alloc: Allocation, host: str, local_rank: int,
           gpu: tuple[int, str] | None = None) -> dict:
    """One rank's entry in the manifest's `placement` list (rank order)."""
    entry = {"host": host, "local_rank": local_rank, "cpu_list": cpu_list(alloc.affinity), **asdict(placement)}
    if gpu is not None:
        entry["gpu_index"], entry["gpu_uuid"] = gpu
    return entry


def problems(ranks: Sequence[Mapping]) -> list[str]:
    """What is wrong with a run's per-rank placement (the manifest's list): one line each, naming the rank and the
    fix. Empty when every rank has its CPUs, its GPU, and no more threads or loader workers than CPUs."""
    lines = []
    for r, p in enumerate(ranks):
        if p["threads"] > p["cpus"]:
            lines.append(f"rank {r} on {p['host']}: {p['threads']} threads ({threads_source(p['threads_from'])}) on "
                         f"{p['cpus']} CPU(s); {threads_fix(p['threads_from'], p['threads'], p['cpus'])}")
        if p["loader_workers"] > p["cpus"]:
            lines.append(f"rank {r} on {p['host']}: {p['loader_workers']} loader workers on {p['cpus']} CPU(s); "
                         f"lower data.loader_workers to {p['cpus']} or raise cpus_per_task")
        if "gpu_index" in p and p["gpu_index"] != p["local_rank"]:
            lines.append(f"rank {r} on {p['host']}: GPU {p['gpu_index']} is not its local rank's ({p['local_rank']}); "
                         "let each rank take cuda:LOCAL_RANK (unset CUDA_VISIBLE_DEVICES per rank)")
    return lines + shared(ranks)


def shared(ranks: Sequence[Mapping]) -> list[str]:
    """Ranks of one host whose CPUs overlap and whose threads together exceed them, or that hold one GPU."""
    lines, by_host = [], {}
    for r, p in enumerate(ranks):
        by_host.setdefault(p["host"], []).append(r)
    for host, rs in by_host.items():
        if len(rs) < 2:
            continue
        union = set().union(*(parse_cpu_list(ranks[r]["cpu_list"]) for r in rs))
        threads = sum(ranks[r]["threads"] for r in rs)
        if threads > len(union):
            lines.append(f"ranks {', '.join(map(str, rs))} on {host} share CPUs {cpu_list(union)}: {threads} threads "
                         f"on {len(union)} CPU(s); give each rank CPUs of its own (cpus_per_task) or fewer threads")
        uuids = [ranks[r].get("gpu_uuid") for r in rs if ranks[r].get("gpu_uuid")]
        for uuid in sorted({u for u in uuids if uuids.count(u) > 1}):
            holders = [r for r in rs if ranks[r].get("gpu_uuid") == uuid]
            lines.append(f"ranks {', '.join(map(str, holders))} on {host} share GPU {uuid}: one rank a GPU "
                         "(tasks a node at most gpus_per_node)")
    return lines


def cpus_per_task_for(cpus_per_node: int, ranks_on_node: int) -> int:
    """A profile's cpus_per_task = 0 where its nodes' CPUs are known: the node's CPUs over the ranks on it (0: leave
    it to Slurm, and each rank divides what it finds, `cpus_given`)."""
    return max(1, cpus_per_node // max(1, ranks_on_node)) if cpus_per_node else 0


def planned_line(cpus_per_task: int, ranks_on_node: int, omp_threads: str | None = None) -> str:
    """What a dry run says each rank of a job will get (the jobs decide it on their node, by the rule above)."""
    if omp_threads:
        return f"each rank: {omp_threads} thread(s) (OMP_NUM_THREADS), whatever CPUs it gets"
    if cpus_per_task:
        return (f"each rank: {cpus_per_task} CPU(s) (--cpus-per-task), as many threads, loader workers at most "
                "that")
    return (f"each rank: its node's CPUs over the node's {ranks_on_node} rank(s) (cpus_per_task = 0 and the "
            "profile's cpus_per_node unknown), as many threads")


def per_rank(ranks: Sequence[Mapping] | None, key: str) -> int | None:
    """One number for a run's ranks (threads or cpus a rank) when they agree; None when unrecorded or mixed."""
    values = {p.get(key) for p in ranks or ()}
    return values.pop() if len(values) == 1 else None


def peak_memory(ranks: Sequence[Mapping] | None) -> tuple[float | None, str]:
    """(the largest peak memory among a run's ranks, bytes: the rank that must fit its device; what the peaks
    measured, each kind once, in rank order); (None, "") where no rank recorded one."""
    peaks = [p for p in ranks or () if isinstance(p, Mapping) and isinstance(p.get("peak_memory_bytes"), int | float)
             and not isinstance(p.get("peak_memory_bytes"), bool)]
    if not peaks:
        return None, ""
    kinds = dict.fromkeys(str(p["peak_memory_of"]) for p in peaks if p.get("peak_memory_of"))
    return float(max(p["peak_memory_bytes"] for p in peaks)), ", ".join(kinds)


def nodes(ranks: Sequence[Mapping] | None) -> float:
    """The nodes a run's ranks were started on: its ranks of local rank 0, one a node, as its launcher numbered them
    (torchrun's "nodes" on one machine share its host name, so hosts alone cannot count them); NaN where unrecorded."""
    local = [p.get("local_rank") for p in ranks or () if isinstance(p, Mapping)]
    return float(local.count(0)) if local and all(isinstance(r, int) for r in local) else float("nan")
