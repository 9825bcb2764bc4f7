"""RQ2 where communication costs: experiment 3 across the local cluster's hosts at several link rates, one table and
one figure of throughput against the link's rate per backend.

    python -m tools link-sweep --cluster-dir .cluster --rates 100mbit 1gbit none [--only RUN ...] [--out DIR]
    make link-sweep LINK="100mbit 1gbit none"

For each rate in turn: every node's link is limited to it (`python -m slurm.local_cluster link`, tc's token bucket;
`none` = unlimited), experiment 3's study is submitted to the cluster into DIR/<rate>/ (its jobs one at a time: the
hosts share this machine's cores), and the sweep waits for its jobs. The links are unlimited again at the end, also
after an interrupt. Each rate has a runs folder of its own, so runs at different rates are never pooled. Then
DIR/link_sweep.{csv,md,png}: each run's steady-state images/s and the share of its timed steps spent communicating
(the `comm_s` its benchmark measured), by backend, processes and rate, from the run folders alone.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from contract.reader import read_manifest, read_metrics
from contract.runfolder import METRICS

REPO = Path(__file__).resolve().parents[1]
EXP3 = REPO / "experiments" / "03_throughput_distributed_data_parallel"
SWEEP_OUT = Path("results/link_sweep")


def run_rate(rate: str, cluster_dir: Path, out: Path, only: list[str], env: dict, timeout: float) -> None:
    """Limit the links to `rate`, run experiment 3's study into out/<rate>, wait for its jobs."""
    subprocess.run([sys.executable, "-m", "slurm.local_cluster", "link", "--dir", str(cluster_dir), "--rate", rate],
                   check=True, env=env, cwd=REPO)
    study = subprocess.run([sys.executable, "-m", "trainers", "study", str(EXP3), "--launcher", "slurm", "--cluster",
                            "local", "--out", str(out / rate), *(["--only", *only] if only else [])],
                           env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    if study.returncode != 0:
        why = (study.stderr or study.stdout).strip()[-300:]
        raise SystemExit(f"error: the study at {rate} was not submitted: {why}")
    jobs = [line.split()[-1] for line in study.stdout.splitlines() if line.startswith("#   Submitted batch job")]
    print(f"link {rate}: {len(jobs)} job(s) submitted; waiting", flush=True)
    wait_for(jobs, env, timeout)


def wait_for(jobs: list[str], env: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while jobs and time.monotonic() < deadline:
        r = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(jobs)], env=env, capture_output=True,
                           text=True, timeout=60)
        if not r.stdout.split():
            return
        time.sleep(2)
    if jobs:
        raise SystemExit(f"error: jobs {', '.join(jobs)} not finished after {timeout:.0f} s")


def sweep_table(out: Path, rates: list[str]) -> pd.DataFrame:
    """One row per run: rate, backend, processes, steady images/s, communication share, hosts."""
    rows = []
    for rate in rates:
        for metrics in sorted((out / rate).glob(f"*/*/{METRICS}")):
            run_dir = metrics.parent
            bench = [r for r in read_metrics(metrics).records if r.get("kind") == "bench"]
            manifest = read_manifest(run_dir) or {}
            if not bench or manifest.get("status") != "completed":
                continue
            b = bench[-1]
            timed = b["data_s"] + b["compute_s"] + b["comm_s"]
            rows.append({"link": rate, "backend": manifest.get("backend"), "processes": manifest.get("world_size"),
                         "hosts": len(set(manifest.get("hosts") or [])), "images_per_s": b["images_per_s_steady"],
                         "comm_share": b["comm_s"] / timed if timed else float("nan"), "run": run_dir.name})
    return pd.DataFrame(rows, columns=["link", "backend", "processes", "hosts", "images_per_s", "comm_share", "run"])


def write_outputs(table: pd.DataFrame, out: Path, rates: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table.to_csv(out / "link_sweep.csv", index=False)
    lines = ["# Experiment 3 across the local cluster's hosts at each link rate", "",
             f"Made from {len(table)} runs in {out}/<rate>/ (this machine's hosts in network namespaces; `none`: "
             "unlimited). comm_share: the share of the timed steps spent communicating.", "",
             "| link | backend | processes | hosts | images/s | comm_share |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.link} | {r.backend} | {r.processes} | {r.hosts} | {r.images_per_s:.1f} | {r.comm_share:.2f} |"
              for r in table.itertuples()]
    (out / "link_sweep.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(6, 4))
    position = {rate: i for i, rate in enumerate(rates)}
    for (backend, processes), g in table.groupby(["backend", "processes"]):
        g = g.sort_values("link", key=lambda s: s.map(position))
        ax.plot([position[x] for x in g["link"]], g["images_per_s"], marker="o",
                label=f"{backend}, {processes} processes")
    ax.set_xticks(range(len(rates)), ["unlimited" if r == "none" else r for r in rates])
    ax.set_xlabel("each host's link rate")
    ax.set_ylabel("images/s (steady state)")
    ax.set_title("Experiment 3 across hosts: throughput against the link", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "link_sweep.png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools link-sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--cluster-dir", type=Path, default=Path(".cluster"), help="the local cluster's folder")
    ap.add_argument("--rates", nargs="+", default=["100mbit", "1gbit", "none"], help="tc's rates; none = unlimited")
    ap.add_argument("--only", nargs="*", default=[], help="only these runs of experiment 3 (names or patterns)")
    ap.add_argument("--out", type=Path, default=SWEEP_OUT, help=f"where the runs and the table go ({SWEEP_OUT})")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for each rate's jobs")
    args = ap.parse_args(argv)
    conf = args.cluster_dir.resolve() / "slurm.conf"
    if not conf.exists():
        print(f"error: no local cluster in {args.cluster_dir}: start one with `make cluster NODES=3`", file=sys.stderr)
        return 2
    env = {**os.environ, "SLURM_CONF": str(conf)}
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for rate in args.rates:
            run_rate(rate, args.cluster_dir, args.out, args.only, env, args.timeout)
    finally:  # the links are never left limited
        subprocess.run([sys.executable, "-m", "slurm.local_cluster", "link", "--dir", str(args.cluster_dir),
                        "--rate", "none"], env=env, cwd=REPO, capture_output=True)
    table = sweep_table(args.out, args.rates)
    write_outputs(table, args.out, args.rates)
    print((args.out / "link_sweep.md").read_text(), end="")
    print(f"link-sweep: {len(table)} runs at {len(args.rates)} rates -> {args.out}/link_sweep.{{md,csv,png}}")
    return 0
