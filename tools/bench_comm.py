"""DDP vs Horovod throughput on N CPU processes, and Horovod's communication share (seed 002's method).

    python -m tools bench-comm [--nproc 2] [--model resnet18] [--image-size 64] [--batch 16]
                                  [--batches 20] [--warmup 5] [--accumulate 16] [--fp16] [--json FILE]
    python -m tools bench-comm --cluster P --nodes N [...]   # across N nodes of a Slurm cluster, one rank a node
    make bench-comm CLUSTER=local NODES=2                    # on the local cluster's hosts, at its link's rate

Across nodes (--cluster, a profile in slurm/clusters/): every row is one Slurm job submitted with the profile as a
study's runs are (slurm/job.sh: srun for DDP, mpirun or srun for Horovod), N nodes x 1 task (the single row: 1 x 1),
one after another; the run folders go to --out (default results/bench_comm/<profile>-n<N>, on the file system the
nodes share). Each row's hosts and the link's rate (the local cluster's `make cluster-link`, recorded in each
manifest) are printed with it: the communication share at 100mbit is another finding than at 10 Gbit/s.

Every row is the trainer's own benchmark mode (`bench.batches`, synthetic data already in memory, the thesis's
steady-state images/s) on the same model, per-worker batch, seed and threads:
  single            one process, no communication: the compute-only reference (x N = perfect scaling)
  ddp               torchrun --nproc-per-node N, DistributedDataParallel over gloo
  horovod           horovodrun --gloo -np N, hvd.DistributedOptimizer, batches_per_allreduce = 1
  horovod-fp16      the same with fp16 gradient compression (--fp16; the thesis turned it off)
  horovod-accK      batches_per_allreduce = K: one allreduce every K per-worker batches
Communication share (Determined's check, seeds/002: compare throughput at aggregation frequency 1 and a very large
one): with K large the allreduce cost is spread over K batches, so throughput approaches compute-only and
    share = 1 - images/s(batches_per_allreduce=1) / images/s(batches_per_allreduce=K)
is the fraction of a step spent communicating (and waiting on it) that overlapping with backward did not hide.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trainers.backends import free_port, torchrun_command
from contract.reader import read_manifest, read_metrics
from trainers.show_config import toml_value

REPO = Path(__file__).resolve().parents[1]


def write_config(path: Path, args: argparse.Namespace, backend: str, workers: int, batches: int, warmup: int) -> Path:
    config = {"model": {"name": args.model, "num_classes": args.classes},
              "data": {"kind": "synthetic", "image_size": args.image_size, "loader_workers": 0},
              "train": {"epochs": 1, "per_worker_batch": args.batch, "workers": workers, "backend": backend, "seed": 0,
                        "print_freq": 1, "threads": args.threads, "checkpoint": False},
              "bench": {"batches": batches, "warmup_batches": warmup}}
    path.write_text("".join(f"[{section}]\n" + "".join(f"{key} = {toml_value(value)}\n" for key, value in table.items())
                            for section, table in config.items()))
    return path


def horovodrun() -> str:
    local = Path(sys.executable).with_name("horovodrun")
    found = str(local) if local.exists() else shutil.which("horovodrun")
    if not found:
        raise SystemExit("error: horovodrun not found; run `make setup-horovod`")
    return found


def clean_env(threads: int) -> dict:
    """The launchers' own variables must not leak into the runs they start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_", "HOROVOD_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # the caller's kept
    env.update(OMP_NUM_THREADS=str(threads), PYTHONPATH=path)
    return env


def run_one(label: str, launch: list[str], config: Path, out: Path, sets: list[str], env: dict) -> dict:
    cmd = [*launch, "-m", "trainers", "train", str(config), "--out", str(out), "--run-name", label]
    for s in sets:
        cmd += ["--set", s]
    print(f"[bench-comm] {label}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"error: {label} failed (exit {result.returncode}):\n{tail}")
    return row_of(out / config.stem / label, label, "completed")


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools bench-comm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="processes (= workers) for ddp and horovod")
    p.add_argument("--model", default="resnet18", help="any trainers.models name (resnet50 is slow on CPU)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=16, help="per-worker batch")
    p.add_argument("--batches", type=int, default=20, help="timed steps (batches_per_allreduce=1 rows)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--accumulate", type=int, default=16, help="K: batches_per_allreduce of the compute-bound row")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--fp16", action="store_true", help="also time Horovod with fp16 compression")
    p.add_argument("--out", help="keep the run folders here (default: a temporary folder)")
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--cluster", help="a Slurm profile (slurm/clusters/<P>.toml): run every row as a job across "
                                     "--nodes nodes, one rank a node (default: processes on this machine)")
    p.add_argument("--nodes", type=int, default=2, help="--cluster: nodes (= processes) of the ddp/horovod rows")
    p.add_argument("--timeout", type=float, default=1800, help="--cluster: seconds to wait for all the jobs")
    return p


def measure(args) -> list[dict]:
    """Every row's benchmark run: single, DDP, Horovod (and fp16), Horovod with batches_per_allreduce = K."""
    env, n = clean_env(args.threads), args.nproc
    launchers = {"single": [sys.executable],
                 "ddp": [*torchrun_command(sys.executable), "--nproc-per-node", str(n), "--master-port",
                         str(free_port())],
                 "horovod": [horovodrun(), "--gloo", "-np", str(n), "-H", f"localhost:{n}", sys.executable]}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        return [run_one(label, launchers[label if label == "single" else backend], config, out, sets, env)
                for label, backend, config, sets in configs(args, Path(tmp), n)]


def configs(args, folder: Path, n: int) -> list[tuple[str, str, Path, list[str]]]:
    """(row, launcher's backend, config, --set overrides) of every row, configs written into `folder`."""
    k_batches = max(2, math.ceil(args.batches / args.accumulate))
    horovod = write_config(folder / "bench_horovod.toml", args, "horovod", n, args.batches, args.warmup)
    rows = [("single", "ddp", write_config(folder / "bench_single.toml", args, "single", 1, args.batches,
                                           args.warmup), []),
            ("ddp", "ddp", write_config(folder / "bench_ddp.toml", args, "ddp", n, args.batches, args.warmup), []),
            ("horovod", "horovod", horovod, [])]
    if args.fp16:
        rows.append(("horovod-fp16", "horovod", horovod, ["horovod.fp16_allreduce=true"]))
    rows.append((f"horovod-acc{args.accumulate}", "horovod",
                 write_config(folder / "bench_horovod_acc.toml", args, "horovod", n, k_batches, 1),
                 [f"horovod.batches_per_allreduce={args.accumulate}"]))
    return rows


def measure_across_nodes(args) -> tuple[list[dict], str]:
    """Every row as a Slurm job on the profile's cluster; (the rows, where they ran: hosts and link)."""
    from slurm.client import Clients, NoConfiguration
    from slurm.profiles import ProfileError, load_profile, sbatch_argv
    from studies.cluster_check import wait

    try:
        profile = load_profile(args.cluster)
        clients = Clients.of(profile)
        clients.check()  # before the rows' folder is made: no client starts without a configuration
    except (ProfileError, NoConfiguration) as e:
        raise SystemExit(f"error: {e}") from None
    out = Path(args.out or f"results/bench_comm/{profile.name}-n{args.nodes}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    jobs, previous, rows = {}, None, configs(args, out, args.nodes)
    for label, launcher, config, sets in rows:
        nodes = 1 if label == "single" else args.nodes
        train = [str(config), "--out", str(out), "--run-name", label, *(x for s in sets for x in ("--set", s))]
        argv = sbatch_argv(profile, REPO / "slurm" / "check.sbatch", nodes, 1, min(1, profile.gpus_per_node),
                           job_name=f"bench-{label}", time_limit="15", output=out / f"{label}.out",
                           env={"PYTHON": sys.executable, "HARNESS_DIR": str(REPO / "slurm"), "BACKEND": launcher,
                                "RESUME": "never", "OMP_NUM_THREADS": str(args.threads)}, train_args=train)
        argv[1:1] = [f"--dependency=afterany:{previous}"] if previous else []
        got = clients.submit(argv, timeout=60, cwd=REPO)
        if not got.job:
            raise SystemExit(f"error: sbatch of the {label} row failed: {got.said[:300]}")
        jobs[label] = previous = int(got.job)
        print(f"[bench-comm] {label}: job {previous} on {nodes} node(s)", file=sys.stderr, flush=True)
    states = wait(clients, jobs, args.timeout)
    return [row_of(out / config.stem / label, label, states[label])
            for label, _, config, _ in rows], where(out / "bench_ddp" / "ddp")


def row_of(run_dir: Path, label: str, state: str) -> dict:
    bench = read_metrics(run_dir).of("bench")
    if not bench:
        raise SystemExit(f"error: the {label} row's job ended {state} with no benchmark in {run_dir}; its log: "
                         f"{run_dir.parents[1] / (label + '.out')}")
    return {"run": label, **{k: bench[-1][k] for k in ("world_size", "per_worker_batch", "batches",
                                                       "images_per_s_steady")}}


def where(run_dir: Path) -> str:
    """The hosts the DDP row ran on and the link between them, from its manifest."""
    manifest = read_manifest(run_dir) or {}
    hosts = manifest.get("hosts") or []
    link = manifest.get("link") or "not limited (the cluster's own interconnect)"
    return f"across {len(set(hosts))} hosts ({', '.join(dict.fromkeys(hosts))}), link {link}"


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if args.cluster:
        if args.nodes < 2:
            raise SystemExit(f"error: --nodes {args.nodes}: across nodes means 2 or more")
        args.nproc = args.nodes
        rows, place = measure_across_nodes(args)
    else:
        rows, place = measure(args), "on this machine"
    n = args.nproc
    by = {r["run"]: r["images_per_s_steady"] for r in rows}
    compute_bound = by[f"horovod-acc{args.accumulate}"]
    summary = {
        "model": args.model, "image_size": args.image_size, "per_worker_batch": args.batch, "nproc": n,
        "threads_per_process": args.threads, "accumulate": args.accumulate, "rows": rows, "where": place,
        "ddp_vs_horovod": by["ddp"] / by["horovod"],
        "horovod_comm_share": 1.0 - by["horovod"] / compute_bound,
        "ddp_comm_share_vs_horovod_accK": 1.0 - by["ddp"] / compute_bound,
        "scaling_efficiency": {name: by[name] / (n * by["single"]) for name in by if name != "single"},
    }
    print(f"model {args.model} {args.image_size}px, per-worker batch {args.batch}, {n} processes x "
          f"{args.threads} thread(s), {place}")
    print(f"{'run':<16}{'workers':>8}{'images/s':>11}{'vs single x N':>15}")
    for r in rows:
        eff = r["images_per_s_steady"] / (n * by["single"]) if r["run"] != "single" else 1 / n
        print(f"{r['run']:<16}{r['world_size']:>8}{r['images_per_s_steady']:>11.2f}{eff:>15.1%}")
    print(f"DDP / Horovod throughput: {summary['ddp_vs_horovod']:.3f}")
    print(f"Horovod communication share (1 - acc1/acc{args.accumulate}): {summary['horovod_comm_share']:.1%}")
    print(f"DDP against the same compute-bound reference: {summary['ddp_comm_share_vs_horovod_accK']:.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
