"""What one rank of a cluster-check job sees: `python -m tools cluster-probe LAYER --dir D` (started by srun or
mpirun inside the job studies/cluster_check.py submits; not meant to be run by hand).

Each rank writes D/LAYER/rank<r>.json with what it found, or its error (so the table names it with its host), and
its placement (contract/placement.py); the check reads every rank's file and decides. Layers: hosts (names and
addresses as seen here), staging (the staged data on this node), ddp (an all_reduce's sum and bus bandwidth),
horovod (an allreduce's average), placement, link-intra / link-inter (all_reduce time against message size, 4 KB to
32 MB within a time budget, within a node or across two: the points the scaling advisor fits its link to).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import time
import traceback
from functools import partial
from pathlib import Path

from trainers.launch import detect_launch

LAYERS = ("hosts", "staging", "ddp", "horovod", "placement", "link-intra", "link-inter")
# the all_reduce sizes a link probe times, smallest first: 4 KB to 16 MB by fours, then 32 MB
LINK_SIZES = tuple([4 ** k * 1024 for k in range(1, 8)] + [32 * 1024 * 1024])
LINK_REPEATS = 5  # timed all_reduces a size; their median is the point


def write(folder: Path, rank: int, result: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps({"rank": rank, "host": socket.gethostname(), **result}))
    os.replace(tmp, folder / f"rank{rank}.json")


def resolve(name: str) -> str | None:
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    except OSError:
        return None


def probe_hosts(launch) -> dict:
    return {"own_address": resolve(socket.gethostname()), "master": launch.master_addr,
            "master_address": resolve(launch.master_addr) if launch.master_addr else None}


def probe_staging(marker: str) -> dict:
    """Whether the marker was staged here, and where scratch came from."""
    path = Path(os.environ.get("DATA_PATH", "")) / marker
    var = os.environ.get("SCRATCH_VAR", "")
    return {"staged": path.is_file(), "path": str(path),
            "scratch_from": f"${var}" if var and os.environ.get(var) else f"no ${var or 'TMPDIR'} on this node"}


def remove_staged(folder: Path, launch, marker: str, wait_s: float = 60) -> None:
    """Each rank removes its node's staged file and job.sh's marker once every rank has written what it saw (scratch
    may be one path on a shared disk, so no rank removes it before all have looked)."""
    if not os.environ.get("DATA_PATH"):
        return
    deadline = time.monotonic() + wait_s
    while len(list(folder.glob("rank*.json"))) < launch.world_size and time.monotonic() < deadline:
        time.sleep(0.2)
    path = Path(os.environ["DATA_PATH"]) / marker
    for leftover in (path, *path.parent.glob(".staged-*.tar")):
        leftover.unlink(missing_ok=True)


def probe_placement(launch, loader_workers: int) -> dict:
    """This rank's placement as the trainer would decide it, with the GPU it would take (cuda:LOCAL_RANK)."""
    from contract import placement

    local = max(launch.local_world_size, launch.local_rank + 1)
    alloc = placement.read_allocation(local)
    placed = placement.decide(alloc, 0, None, placement.user_omp_threads(launch.launcher), loader_workers)
    return {"placement": placement.record(placed, alloc, socket.gethostname(), launch.local_rank, gpu_of(launch))}


def gpu_of(launch) -> tuple[int, str] | None:
    """(index, UUID) of the GPU this rank would take: cuda:LOCAL_RANK, or the last it sees where a per-task binding
    left it fewer (which the check names); None without a GPU."""
    try:
        import torch
    except ImportError:
        return None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        return None
    index = min(launch.local_rank, count - 1)
    return index, str(torch.cuda.get_device_properties(index).uuid)


@contextlib.contextmanager
def process_group(launch):
    """torch.distributed across the job's ranks (gloo on CPU, NCCL on a GPU), its device, and the group ended after."""
    import torch
    import torch.distributed as dist

    from trainers import backends

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", launch.local_rank) if cuda else torch.device("cpu")
    if not cuda:
        backends.bind_gloo_towards(launch.master_addr, launch)
    os.environ.setdefault("MASTER_ADDR", launch.master_addr or "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(launch.master_port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=launch.rank, world_size=launch.world_size,
                            timeout=datetime.timedelta(seconds=120))
    try:
        yield dist, device
    finally:
        dist.destroy_process_group()


def probe_ddp(launch, megabytes: float) -> dict:
    import torch

    with process_group(launch) as (dist, device):
        ones = torch.ones(4, device=device)
        dist.all_reduce(ones)
        correct = bool((ones == launch.world_size).all())
        return {"correct": correct, "interface": os.environ.get("GLOO_SOCKET_IFNAME"),
                "bus_gbit_s": bus_bandwidth(dist, device, megabytes, launch.world_size),
                "link": os.environ.get("CLUSTER_LINK")}  # the local cluster's limited link, where one is set


def probe_link(launch, budget_s: float) -> dict:
    """The median time of an all_reduce at each of LINK_SIZES, smallest first, until the next size would outlast
    what is left of `budget_s` (a slow link stops early: at 20 Mbit/s 32 MB takes 13 s a time)."""
    import torch

    with process_group(launch) as (dist, device):
        warm = torch.zeros(LINK_SIZES[0] // 4, device=device)
        for _ in range(LINK_REPEATS):  # connections, buffers and the first barriers' costs before any size is timed
            dist.barrier()
            dist.all_reduce(warm)
        points, started = [], time.monotonic()
        for nbytes in LINK_SIZES:
            if points and time.monotonic() - started + (LINK_REPEATS + 1) * points[-1][1] * nbytes / points[-1][0] \
                    > budget_s:
                break
            points.append([nbytes, timed_all_reduce(dist, device, nbytes)])
            print(f"cluster-probe: all_reduce of {nbytes} bytes: {1000 * points[-1][1]:.2f} ms", flush=True)
        where = [None] * launch.world_size
        dist.all_gather_object(where, (socket.gethostname(), boot_id(), os.cpu_count()))
        from contract.machine import cpuinfo

        return {"points": points, "ranks": launch.world_size, "hosts": [w[0] for w in where], "device": device.type,
                "cpu_model": cpuinfo()[0], "shared_cores": one_machine_cores(where),
                "link": os.environ.get("CLUSTER_LINK"), "interface": os.environ.get("GLOO_SOCKET_IFNAME")}


def boot_id() -> str | None:
    """This kernel's boot id: the same in every network namespace of one machine, different on another machine."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def one_machine_cores(where: list[tuple[str, str | None, int | None]]) -> int | None:
    """Where ranks on several hosts all run on one kernel (hosts in namespaces of one machine, whatever the profile
    says), that machine's cores, which every rank's threads share; else None. `where`: (host, boot id, cores) a rank."""
    hosts, boots = {h for h, _, _ in where}, {b for _, b, _ in where}
    if len(hosts) > 1 and len(boots) == 1 and None not in boots:
        return where[0][2]
    return None


def timed_all_reduce(dist, device, nbytes: int) -> float:
    """The slowest rank's median of LINK_REPEATS all_reduces of nbytes, so every rank decides alike where to stop."""
    import statistics

    import torch

    times = all_reduce_times(dist, device, torch.zeros(max(1, nbytes // 4), device=device), LINK_REPEATS)
    slowest = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest)


def bus_bandwidth(dist, device, megabytes: float, world: int, repeats: int = 3) -> float:
    """nccl-tests' bus bandwidth of an all_reduce of `megabytes` MB in Gbit/s: what each rank's link carries."""
    import torch

    data = torch.zeros(int(megabytes * 1e6 / 4), device=device)
    times = all_reduce_times(dist, device, data, repeats)
    return 2 * (world - 1) / world * data.numel() * 4 * 8 / min(times) / 1e9


def all_reduce_times(dist, device, data, repeats: int) -> list[float]:
    """Seconds of `repeats` all_reduces of `data`, each started together (a barrier), after one untimed."""
    import torch

    dist.all_reduce(data)
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(data)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def probe_horovod() -> dict:
    import horovod.torch as hvd
    import torch

    hvd.init()
    try:
        value = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Average)
        expected = (hvd.size() - 1) / 2
        return {"correct": abs(float(value) - expected) < 1e-6, "size": hvd.size()}
    finally:
        hvd.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools cluster-probe", description=__doc__.splitlines()[0])
    ap.add_argument("layer", choices=LAYERS)
    ap.add_argument("--dir", required=True, type=Path, help="the check's folder (on the shared file system)")
    ap.add_argument("--megabytes", type=float, default=40.0, help="ddp: the all_reduce measured for bandwidth")
    ap.add_argument("--budget-s", type=float, default=20.0, help="link-*: seconds the all_reduces may take")
    ap.add_argument("--marker", default="", help="staging: the file the staged tar holds")
    ap.add_argument("--loader-workers", type=int, default=0, help="placement: the scale's data.loader_workers")
    # job.sh adds `--set data.path=...` where it staged data: the probe reads $DATA_PATH itself
    args, _ = ap.parse_known_args(argv)
    launch = detect_launch()
    link = partial(probe_link, launch, args.budget_s)  # within a node or across two: the job's shape decides
    probes = {"hosts": partial(probe_hosts, launch), "staging": partial(probe_staging, args.marker),
              "ddp": partial(probe_ddp, launch, args.megabytes), "horovod": probe_horovod, "placement": dict,
              "link-intra": link, "link-inter": link}
    try:
        result = probes[args.layer]()
        write(args.dir / args.layer, launch.rank, {"ok": True, **probe_placement(launch, args.loader_workers),
                                                   **result})
        if args.layer == "staging":
            remove_staged(args.dir / args.layer, launch, args.marker)
        return 0
    except Exception as e:  # noqa: BLE001 -- any failure is this layer's finding, written for the table
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        write(args.dir / args.layer, launch.rank, {"ok": False, "error": f"{type(e).__name__}: {line}"[:300],
                                                   "trace": traceback.format_exc()[-2000:]})
        return 1
