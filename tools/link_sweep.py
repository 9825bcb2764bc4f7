"""RQ2 where communication costs: experiment 3 across the local cluster's hosts at several link rates, one table and
one figure of throughput against the link's rate per backend.

    make link-sweep LINK="100mbit 1gbit none"   (python -m tools link-sweep --rates ... [--only RUN ...] [--out DIR])

For each rate: every node's link limited to it (tc's token bucket; `none` = unlimited), experiment 3's study run on
the cluster into DIR/<rate>/ and waited for; the links are unlimited again at the end, also after an interrupt. Each
run's manifest names its link, so rates are never pooled. Then DIR/link_sweep.{csv,md,png} (analysis/link.py).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

from contract.config import ConfigError
from contract.plan import study_plan
from slurm.client import Clients
from studies.slurm import submit_jobs

REPO = Path(__file__).resolve().parents[1]
EXP3 = REPO / "experiments" / "03_throughput_distributed_data_parallel"
SWEEP_OUT = Path("results/link_sweep")


def set_link(cluster_dir: Path, rate: str, env: dict | None = None, **run) -> None:
    """Every node's link of the local cluster limited to `rate` (tc's token bucket; `none` = unlimited)."""
    subprocess.run([sys.executable, "-m", "slurm.local_cluster", "link", "--dir", str(cluster_dir), "--rate", rate],
                   env=env, cwd=REPO, **run)


def run_rate(rate: str, cluster_dir: Path, out: Path, only: list[str], env: dict, timeout: float) -> None:
    """Limit the links to `rate`, run experiment 3's study into out/<rate>, wait for its jobs."""
    set_link(cluster_dir, rate, env, check=True)
    clients = Clients(env=env)  # env's SLURM_CONF: the local cluster's; its jobs inherit env as the study's did
    jobs = submit_rate(rate, out, only, clients)
    print(f"link {rate}: {len(jobs)} job(s) submitted; waiting", flush=True)
    wait_for(jobs, clients, timeout)


def submit_rate(rate: str, out: Path, only: list[str], clients) -> list[str]:
    """Experiment 3's study submitted to the local cluster into out/<rate> (what `python -m suite study EXP3
    --launcher slurm --cluster local` does), its job ids returned. The study's own lines are kept back, as when it
    ran as a command, and shown where sbatch fails."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            study = study_plan(EXP3, "local", quick=False, seeds=None, overrides=[], only=list(only))
            jobs, failed = submit_jobs(study, "local", "local", out / rate, dry_run=False, clients=clients)
    except ConfigError as e:
        raise SystemExit(f"error: the study at {rate} was not submitted: {e}") from None
    if failed:  # its whole output: sbatch's line under each job that failed
        print(said.getvalue(), end="", flush=True)
        raise SystemExit(f"error: the study at {rate} was not submitted: {failed} sbatch call(s) failed (sbatch's "
                         "line above each)")
    return jobs


def wait_for(jobs: list[str], clients: Clients, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while jobs and time.monotonic() < deadline:
        r = clients.run(["squeue", "-h", "-o", "%i", "-j", ",".join(jobs)], capture_output=True, text=True,
                        timeout=60)
        if not r.stdout.split():
            return
        time.sleep(2)
    if jobs:
        raise SystemExit(f"error: jobs {', '.join(jobs)} not finished after {timeout:.0f} s")


def tabulate(runs: Path, out: Path) -> list[Path]:
    """out/link_sweep.{csv,md,png,pdf}: the report's link-rate table and figure of every rate's runs under `runs`."""
    from analysis import catalogue as ct
    from analysis import figures as fg
    from analysis import link as lk
    from analysis import tables as tb
    from analysis.compare import made_from
    from analysis.runs import load_study

    df = load_study(runs)
    table, source = lk.link_table(df), made_from(df, runs)
    title = next(t.title for t in ct.TABLES if t.name == "link_rates")
    written = tb.write_table(table, out, "link_sweep", title, list(lk.NOTES), source, lk.shown(table))
    return written + (fg.save(lk.link_figure(table, title), out, "link_sweep", source) if len(table) else [])


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
        set_link(args.cluster_dir, "none", env, capture_output=True)
    tabulate(args.out, args.out)
    print((args.out / "link_sweep.md").read_text(), end="")
    print(f"link-sweep: {len(args.rates)} rates -> {args.out}/link_sweep.{{md,csv,png}}; the whole report of these "
          f"runs: make report OUT={args.out}")
    return 0
