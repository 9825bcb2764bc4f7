"""The suite across hosts: a 3-node Slurm cluster whose nodes are hosts of their own (network namespaces, each with
its own address, hostname and hosts file; slurm/local_cluster.py), driven by the suite's own launch path.

Slow: about 4 minutes. With CI=true (root) the cluster must start; elsewhere the tests skip with the reason.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import REPO, final_state, max_difference, records, trainer_env, write_config
from tests.test_rank_workers import EIGHT, finish, free_port, start_ranks

pytestmark = pytest.mark.slow

EXP3 = "experiments/03_throughput_distributed_data_parallel"


@pytest.fixture(scope="module")
def hosts_cluster():
    """A running 3-host cluster (slurm.local_cluster.Cluster), stopped and removed at the end of the module."""
    from slurm import local_cluster

    reason = local_cluster.available() or local_cluster.multi_host_unavailable()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes") and os.geteuid() == 0:
            pytest.fail(f"CI=true as root but a multi-host cluster cannot start: {reason}")
        pytest.skip(f"no multi-host cluster: {reason}")
    workdir = Path(tempfile.mkdtemp(prefix="slurm-hosts-"))
    cluster = local_cluster.start(workdir, nodes=3)
    try:
        yield cluster
    finally:
        cluster.stop()
        assert cluster.network.leftovers() == []
        shutil.rmtree(workdir, ignore_errors=True)


def cluster_env(cluster) -> dict:
    return {**trainer_env(), **cluster.env}


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def job_ids(study_output: str) -> list[int]:
    return [int(line.split()[-1]) for line in study_output.splitlines() if line.startswith("#   Submitted batch job")]


def test_experiment_3_runs_its_ranks_on_distinct_hosts_and_is_reported(hosts_cluster, tmp_path):
    """`make exp3 LAUNCHER=slurm CLUSTER=local` on 3 hosts: DDP under srun, Horovod under mpirun, as the thesis ran
    them; every rank's host in the manifest; one job at a time (the hosts share this machine's cores)."""
    from tests.test_horovod import horovod_missing

    out = tmp_path / "runs"
    study = subprocess.run([sys.executable, "-m", "trainers", "study", EXP3, "--launcher", "slurm", "--cluster",
                            "local", "--out", str(out)], cwd=REPO, env=cluster_env(hosts_cluster),
                           capture_output=True, text=True, timeout=120)
    assert study.returncode == 0, study.stdout + study.stderr
    jobs = job_ids(study.stdout)
    assert len(jobs) == 6 and study.stdout.count("--dependency=afterany:") == 5
    states = hosts_cluster.wait_all(jobs, timeout=900)
    runs = out / Path(EXP3).name
    logs = {p.parent.name: p.read_text()[-2000:] for p in runs.glob("*/slurm-*.out")}
    expected = {"n2-ddp-t1-s0": 2, "n2-ddp-t2-s0": 4, "n1-t1-ddp-s0": 1}
    if not horovod_missing():
        expected.update({"n2-horovod-t1-s0": 2, "n2-horovod-t2-s0": 4, "n1-t1-horovod-s0": 1})
    for name, ranks in expected.items():
        m = manifest(runs / name)
        assert m["status"] == "completed", (name, states, logs.get(name))
        assert len(m["hosts"]) == ranks and set(m["hosts"]) <= set(hosts_cluster.nodes)
        # two nodes: the ranks are split over two hosts, in rank order
        hosts = m["hosts"]
        assert len(set(hosts)) == (2 if name.startswith("n2") else 1), hosts
        assert hosts == sorted(hosts, key=hosts_cluster.nodes.index)
    report = subprocess.run([sys.executable, "-m", "analysis", "report", "--runs", str(out), "--out",
                             str(tmp_path / "report"), "--no-notebooks"], cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    import pandas as pd

    ddp = pd.read_csv(tmp_path / "report" / "tables" / "table08.csv")  # PyTorch DDP across nodes
    ours = ddp[ddp["scale"] != "thesis"]
    assert sorted(ours["processes"]) == [1, 2, 4] and ours["ours_steady"].gt(0).all()
    assert "(host n1" in (tmp_path / "report" / "tables" / "table08.md").read_text()  # the hosts, not "vm"


def test_eight_workers_over_two_hosts_match_one_host_and_a_requeue_mid_run(hosts_cluster, tmp_path):
    """8 workers over 2 ranks on 2 hosts end with the parameters of the same run on one host, bit for bit; and so
    does a run preempted mid-run (the time limit's signal), requeued by its job and resumed from its checkpoint."""
    from slurm.profiles import load_profile, sbatch_argv

    cfg = write_config(tmp_path / "p.toml", {"data": {"synthetic_images": 320},
                                             "train": {**EIGHT, "backend": "ddp", "epochs": 3, "print_freq": 2}})
    assert finish(start_ranks(cfg, tmp_path, "one-host", port=str(free_port()))) == [0, 0]
    script = tmp_path / "job.sbatch"
    script.write_text(f'#!/bin/bash\nsource "{REPO}/slurm/job.sh" || exit 2\nrun_job "$@"\n')
    jobs = {}
    for name in ("hosts", "requeued"):
        argv = sbatch_argv(load_profile("local"), script, nodes=2, tasks_per_node=1, gpus_per_node=0, job_name=name,
                           time_limit="10", output=tmp_path / f"{name}-%j.out",
                           env={"BACKEND": "ddp", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"},
                           train_args=[str(cfg), "--out", str(tmp_path), "--run-name", name])
        jobs[name] = hosts_cluster.submit(argv, env=cluster_env(hosts_cluster), cwd=REPO)
    cut = tmp_path / "p" / "requeued"
    wait_for_epoch(hosts_cluster, jobs["requeued"], cut)
    hosts_cluster.run(["scancel", "--batch", "--signal=USR1", str(jobs["requeued"])])
    states = hosts_cluster.wait_all(list(jobs.values()), timeout=600, fast_requeue=True)
    logs = "".join(p.read_text()[-1500:] for p in tmp_path.glob("*.out"))
    assert set(states.values()) == {"COMPLETED"}, (states, logs)
    whole = final_state(tmp_path / "p" / "one-host")
    for name in jobs:
        run_dir = tmp_path / "p" / name
        assert max_difference(whole, final_state(run_dir)) == 0.0, name
        assert len(set(manifest(run_dir)["hosts"])) == 2
        assert sorted({r["epoch"] for r in records(run_dir, "epoch")}) == [0, 1, 2]
    m = manifest(cut)
    assert len(m["attempts"]) == 2, m["attempts"]


def wait_for_epoch(cluster, job: int, run_dir: Path, timeout: float = 300) -> None:
    """Until the run has recorded its first epoch (so a checkpoint exists); fails if the job ends first."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "metrics.jsonl").exists() and records(run_dir, "epoch"):
            return
        state = cluster.state(job)
        assert state not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), f"job {job} ended {state} first"
        time.sleep(0.3)
    raise AssertionError(f"no epoch record in {run_dir} after {timeout} s")
