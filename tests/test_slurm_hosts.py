"""The suite across hosts: a 3-node Slurm cluster whose nodes are hosts of their own (network namespaces, each with
its own address, hostname and hosts file; slurm/local_cluster.py), driven by the suite's own launch path.

Slow: about 4 minutes. With CI=true (root) the cluster must start; elsewhere the tests skip with the reason.
"""
from __future__ import annotations

import json
import os
import re
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
    hosts = {os.stat(f"/run/netns/{cluster.network.netns(h)}").st_ino for h in cluster.network.names}
    try:
        yield cluster
    finally:
        cluster.stop()
        assert cluster.network.leftovers() == []
        assert local_cluster.processes_in_namespaces(hosts) == []  # no daemon, step or task left on any host
        shutil.rmtree(workdir, ignore_errors=True)


def cluster_env(cluster) -> dict:
    return {**trainer_env(), **cluster.env}


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def job_ids(study_output: str) -> list[int]:
    return [int(line.split()[-1]) for line in study_output.splitlines() if line.startswith("#   Submitted batch job")]


def job_span(cluster, job: str) -> tuple[str, str]:
    """A finished job's (start, end), ISO times from the completion log (`sacct -c`)."""
    r = cluster.run(["sacct", "-c", "-n", "-P", "-j", str(job), "-o", "start,end"], check=False)
    start, end = r.stdout.strip().splitlines()[-1].split("|")
    return start, end


def test_experiment_3_runs_its_ranks_on_distinct_hosts_and_is_reported(hosts_cluster, tmp_path):
    """`make exp3 LAUNCHER=slurm CLUSTER=local` on 3 hosts: DDP under srun, Horovod under mpirun, as the thesis ran
    them; every rank's host in the manifest; one job at a time (the hosts share this machine's cores)."""
    from tests.test_horovod import horovod_missing

    out = tmp_path / "runs"
    # three of the six runs (CI's time): DDP's 4 ranks over 2 hosts, Horovod's 2, and DDP's 1-process baseline
    only = ["n2-ddp-t2-s0", "n1-t1-ddp-s0"] + ([] if horovod_missing() else ["n2-horovod-t1-s0"])
    study = subprocess.run([sys.executable, "-m", "suite", "study", EXP3, "--launcher", "slurm", "--cluster",
                            "local", "--out", str(out), "--only", *only], cwd=REPO, env=cluster_env(hosts_cluster),
                           capture_output=True, text=True, timeout=120)
    assert study.returncode == 0, study.stdout + study.stderr
    jobs = job_ids(study.stdout)
    assert len(jobs) == len(only) and study.stdout.count("sbatch --dependency=singleton ") == len(only)
    states = hosts_cluster.wait_all(jobs, timeout=900)
    # issue 63: the hosts share this machine's cores, so no two throughput jobs ever ran at once (Slurm's own
    # completion log: each job's start and end)
    spans = sorted(job_span(hosts_cluster, job) for job in jobs)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), spans
    runs = out / Path(EXP3).name
    logs = {p.parent.name: p.read_text()[-2000:] for p in runs.glob("*/slurm-*.out")}
    expected = {"n2-ddp-t2-s0": 4, "n1-t1-ddp-s0": 1, "n2-horovod-t1-s0": 2}
    expected = {name: ranks for name, ranks in expected.items() if name in only}
    for name, ranks in expected.items():
        m = manifest(runs / name)
        assert m["status"] == "completed", (name, states, logs.get(name))
        assert len(m["hosts"]) == ranks and set(m["hosts"]) <= set(hosts_cluster.nodes)
        # two nodes: the ranks are split over two hosts, in rank order
        hosts = m["hosts"]
        assert len(set(hosts)) == (2 if name.startswith("n2") else 1), hosts
        assert hosts == sorted(hosts, key=hosts_cluster.nodes.index)
        placed = m["placement"]  # issue 47: every rank's placement, none with more threads than CPUs
        assert [p["host"] for p in placed] == hosts and all(p["threads"] <= p["cpus"] for p in placed), placed
    report = subprocess.run([sys.executable, "-m", "analysis", "report", "--runs", str(out), "--out",
                             str(tmp_path / "report"), "--no-notebooks"], cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    import pandas as pd

    ddp = pd.read_csv(tmp_path / "report" / "tables" / "table08.csv")  # PyTorch DDP across nodes
    ours = ddp[ddp["scale"] != "thesis"]
    assert sorted(ours["processes"]) == [1, 4] and ours["ours_steady"].gt(0).all()
    assert sorted(ours["nodes"]) == [1, 2]  # the hosts the ranks ran on (issue 47: blank before)
    assert "(host n1" in (tmp_path / "report" / "tables" / "table08.md").read_text()  # the hosts, not "vm"


def test_eight_workers_over_two_hosts_match_one_host_and_a_requeue_mid_run(hosts_cluster, tmp_path):
    """8 workers over 2 ranks on 2 hosts end with the parameters of the same run on one host, bit for bit; and so
    does a run preempted mid-run (the time limit's signal), requeued by its job and resumed from its checkpoint."""
    from slurm.profiles import load_profile, sbatch_argv

    # 40 epochs: the preemption signal, sent once the first epoch is recorded, meets a run far from its end on any
    # machine (3 epochs were once over before the signal arrived)
    cfg = write_config(tmp_path / "p.toml", {"data": {"synthetic_images": 320},
                                             "train": {**EIGHT, "backend": "ddp", "epochs": 40, "print_freq": 10}})
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
        assert sorted({r["epoch"] for r in records(run_dir, "epoch")}) == list(range(40))
    assert "preempted" in [r["status"] for r in records(cut, "status")]
    assert len(manifest(cut)["attempts"]) == 2


def wait_for_epoch(cluster, job: int, run_dir: Path, timeout: float = 300) -> None:
    """Until the run has recorded its first epoch and written its checkpoint, in that order (the epoch record comes
    first: a node lost between the two leaves nothing to resume, and the requeued run starts afresh with one
    attempt); fails if the job ends first."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "metrics.jsonl").exists() and records(run_dir, "epoch") and (run_dir / "checkpoint.pt").exists():
            return
        state = cluster.state(job)
        assert state not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), f"job {job} ended {state} first"
        time.sleep(0.3)
    raise AssertionError(f"no epoch record in {run_dir} after {timeout} s")


# ---- make cluster-check: every layer passes here, and a broken one is named -------------------------------------
def cluster_check(cluster, tmp_path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools", "cluster-check", "--cluster", "local", "--out",
                           str(tmp_path), *args], cwd=REPO, env={**cluster_env(cluster), **(env or {})},
                          capture_output=True, text=True, timeout=600)


def table(result: subprocess.CompletedProcess) -> dict[str, str]:
    """{layer: "pass" | "FAIL" | "not run"} from the check's table."""
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[1].strip(): cells[2].strip() for cells in rows if cells[1].strip() != "layer"}


def test_cluster_check_passes_every_layer_on_the_local_cluster(hosts_cluster, tmp_path):
    from studies.cluster_check import LAYERS
    from tests.test_horovod import horovod_missing

    result = cluster_check(hosts_cluster, tmp_path)
    expected = {layer: "pass" for layer in LAYERS}
    if horovod_missing():
        expected["horovod"] = "FAIL"
    assert table(result) == expected, result.stdout + result.stderr
    assert result.returncode == (1 if horovod_missing() else 0)
    assert "over eth0" in result.stdout and "Gbit/s" in result.stdout  # gloo bound the nodes' link, measured
    # the train layer's rehearsed preemption: checkpointed half-way, requeued, resumed where it stopped
    assert "preempted after 3, requeued, resumed at epoch 0, iteration 3" in result.stdout, result.stdout
    run = next(tmp_path.glob("local-*/train/05_linear_scaling/check"))
    assert len(manifest(run)["attempts"]) == 2 and "preempted" in [r["status"] for r in records(run, "status")]
    assert len(list(tmp_path.glob("local-*/cluster_check.md"))) == 1


def test_cluster_check_times_the_link_within_and_across_hosts_and_fits_it(hosts_cluster, tmp_path):
    """Issue 51: the link probes' points and fits, in the file the advisor reads (no timing is asserted: only that
    each size was timed, the fit has a bandwidth, and the rows show it)."""
    from analysis.advisor import model as advisor

    result = cluster_check(hosts_cluster, tmp_path, "--layers", "link-intra", "link-inter")
    assert table(result) == {"nodes": "pass", "link-intra": "pass", "link-inter": "pass"}, result.stdout + result.stderr
    assert "alpha " in result.stdout and "Gbit/s a message" in result.stdout
    path = advisor.latest_link_fit("local", tmp_path)
    intra, inter, fits = advisor.read_link_fit(path)
    assert len(set(fits["intra"]["hosts"])) == 1 and len(set(fits["inter"]["hosts"])) == 2
    assert all(len(fits[k]["points"]) >= 2 and fits[k]["bytes_per_s"] > 0 for k in ("intra", "inter"))


def test_cluster_check_names_a_hosts_file_that_sends_a_node_to_loopback(hosts_cluster, tmp_path):
    hosts = hosts_cluster.network.hosts_file("n1")
    good = hosts.read_text()
    try:  # in place: each node's /etc/hosts is a bind mount of this file
        with open(hosts, "r+") as f:
            f.write(good.replace(f"{hosts_cluster.network.address('n1')}\tn1", "127.0.1.1\tn1"))
            f.truncate()
        result = cluster_check(hosts_cluster, tmp_path, "--layers", "hosts", "ddp")
    finally:
        with open(hosts, "r+") as f:
            f.write(good)
            f.truncate()
    assert result.returncode == 1 and table(result) == {"nodes": "pass", "hosts": "FAIL", "ddp": "FAIL"}
    assert "n1 resolves its own name to 127.0.1.1" in result.stdout
    assert "rendezvous host 'n1' resolves to loopback (127.0.1.1) on n1" in result.stdout  # the trainer's own line


def test_cluster_check_with_a_bad_omp_num_threads_fails_placement_alone_and_runs_nothing_after(hosts_cluster,
                                                                                               tmp_path):
    """Issue 63: OMP_NUM_THREADS=8 on 2-CPU nodes failed every layer with the placement line (and the train row said
    "set checkpoint to at most 2"). The placement layer fails with the fix; the later layers' jobs are never
    submitted, and their rows say so."""
    result = cluster_check(hosts_cluster, tmp_path, "--layers", "placement", "ddp", "train",
                           env={"OMP_NUM_THREADS": "8"})
    assert result.returncode == 1
    assert table(result) == {"nodes": "pass", "placement": "FAIL", "ddp": "not run", "train": "not run"}, result.stdout
    assert "8 threads (OMP_NUM_THREADS)" in result.stdout and "set OMP_NUM_THREADS to at most" in result.stdout
    assert result.stdout.count("not run: placement failed (its row says the fix)") == 2
    assert "set checkpoint" not in result.stdout
    assert not list(tmp_path.glob("local-*/ddp.sbatch-line")) and not list(tmp_path.glob("local-*/train.out"))


def test_cluster_check_names_a_wrong_network_interface(hosts_cluster, tmp_path):
    result = cluster_check(hosts_cluster, tmp_path, "--layers", "ddp", env={"GLOO_SOCKET_IFNAME": "bogus0"})
    assert result.returncode == 1 and table(result) == {"nodes": "pass", "ddp": "FAIL"}
    assert "bogus0" in result.stdout


def test_a_limited_link_is_what_ddp_all_reduce_gets(hosts_cluster, tmp_path):
    """The interconnect as a dial: at a 100 Mbit/s link, DDP's all_reduce reaches at least 0.8 of the link's rate
    (nccl-tests' bus bandwidth): the link, not the machine, is the limit."""
    import re

    hosts_cluster.limit_links("100mbit")
    try:
        result = cluster_check(hosts_cluster, tmp_path, "--layers", "ddp")
    finally:
        hosts_cluster.limit_links(None)
    assert result.returncode == 0, result.stdout + result.stderr
    share = float(re.search(r"= ([\d.]+) of the 100mbit link", result.stdout).group(1))
    print(f"DDP all_reduce at a 100mbit link: {share:.2f} of its rate")
    assert 0.8 <= share <= 1.05


def test_the_link_sweep_runs_experiment_3_at_each_rate_into_its_own_folder(hosts_cluster, tmp_path):
    """RQ2 where communication costs: `make link-sweep` runs experiment 3 across hosts at each link rate, each rate
    into a runs folder of its own (never pooled), and tabulates images/s and the communication share per backend;
    the links are unlimited again afterwards. (The numbers are the machine's: the test checks their provenance.)"""
    import pandas as pd

    result = subprocess.run([sys.executable, "-m", "tools", "link-sweep", "--cluster-dir", str(hosts_cluster.workdir),
                             "--rates", "100mbit", "none", "--only", "n2-ddp-t1-s0", "--out", str(tmp_path)],
                            cwd=REPO, env=cluster_env(hosts_cluster), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    table = pd.read_csv(tmp_path / "link_sweep.csv")
    # the sweep's `none` (tc lifts the limit) reads as the report's "unlimited" point (analysis/link.py)
    assert list(table["link"]) == ["100mbit", "unlimited"] and set(table["backend"]) == {"ddp"}
    assert (table["hosts"] == 2).all() and (table["images_per_s"] > 0).all() and table["comm_share"].between(0, 1).all()
    for rate in ("100mbit", "none"):
        m = manifest(tmp_path / rate / Path(EXP3).name / "n2-ddp-t1-s0")
        assert m["link"] == (None if rate == "none" else rate)  # each run records the link it ran under
    assert hosts_cluster.link is None and (tmp_path / "link_sweep.png").stat().st_size > 0


def test_bench_comm_runs_its_rows_across_hosts_and_names_the_link(hosts_cluster, tmp_path):
    """`make bench-comm CLUSTER=local NODES=2`: every row a Slurm job, DDP's and Horovod's ranks on two hosts, the
    link's rate in the output and the JSON (the figures are the machine's: the test checks where they came from)."""
    from tests.test_horovod import horovod_missing

    if horovod_missing():
        pytest.skip("Horovod is not built (make setup-horovod): bench-comm's Horovod rows need it")
    hosts_cluster.limit_links("100mbit")
    try:
        result = subprocess.run([sys.executable, "-m", "tools", "bench-comm", "--cluster", "local", "--nodes", "2",
                                 "--model", "cifar_resnet20", "--classes", "10", "--image-size", "32", "--batch", "4",
                                 "--batches", "4", "--warmup", "1", "--accumulate", "2", "--out", str(tmp_path),
                                 "--json", str(tmp_path / "bench.json")], cwd=REPO, env=cluster_env(hosts_cluster),
                                capture_output=True, text=True, timeout=900)
    finally:
        hosts_cluster.limit_links(None)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "2 processes x 1 thread(s), across 2 hosts (n1, n2), link 100mbit" in result.stdout
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert summary["where"].endswith("link 100mbit")
    rows = {r["run"]: r for r in summary["rows"]}
    assert [rows[r]["world_size"] for r in ("single", "ddp", "horovod", "horovod-acc2")] == [1, 2, 2, 2]
    for row, config in (("ddp", "bench_ddp"), ("horovod", "bench_horovod"), ("horovod-acc2", "bench_horovod_acc")):
        hosts = manifest(tmp_path / config / row)["hosts"]
        assert len(set(hosts)) == 2 and rows[row]["images_per_s_steady"] > 0, (row, hosts)


def two_host_run(cluster, tmp_path, name: str, epochs: int = 30) -> tuple[int, Path]:
    """The same 8-worker run on one host (tmp_path/p/one-host, the reference), then submitted as a 2-node job with
    --requeue (the local profile's): (its job id, its run folder)."""
    from slurm.profiles import load_profile, sbatch_argv

    cfg = write_config(tmp_path / "p.toml", {"data": {"synthetic_images": 320},
                                             "train": {**EIGHT, "backend": "ddp", "epochs": epochs, "print_freq": 5}})
    assert finish(start_ranks(cfg, tmp_path, "one-host", port=str(free_port()))) == [0, 0]
    script = tmp_path / "job.sbatch"
    script.write_text(f'#!/bin/bash\nsource "{REPO}/slurm/job.sh" || exit 2\nrun_job "$@"\n')
    argv = sbatch_argv(load_profile("local"), script, nodes=2, tasks_per_node=1, gpus_per_node=0, job_name=name,
                       time_limit="10", output=tmp_path / f"{name}-%j.out",
                       env={"BACKEND": "ddp", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"},
                       train_args=[str(cfg), "--out", str(tmp_path), "--run-name", name])
    assert "--requeue" in argv
    return cluster.submit(argv, env=cluster_env(cluster), cwd=REPO), tmp_path / "p" / name


def assert_resumed_as_on_one_host(run_dir: Path, lost: str, epochs: int = 30) -> None:
    """Two attempts, the second without the lost host, and the parameters of the uninterrupted run, bit for bit."""
    m = manifest(run_dir)
    assert m["status"] == "completed" and len(m["attempts"]) == 2 and lost not in m["hosts"], m
    assert len(set(m["hosts"])) == 2
    assert max_difference(final_state(run_dir.parent / "one-host"), final_state(run_dir)) == 0.0
    assert sorted({r["epoch"] for r in records(run_dir, "epoch")}) == list(range(epochs))


def wait_for_node(cluster, node: str, states: tuple[str, ...], timeout: float) -> str:
    """Until sinfo shows `node` in one of `states` (e.g. "down*", "idle"); its state then."""
    import time

    deadline, state = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        r = cluster.run(["sinfo", "-h", "-n", node, "-o", "%T"], check=False)
        state = r.stdout.strip()
        if state in states:
            return state
        time.sleep(0.5)
    raise AssertionError(f"{node} still {state!r} after {timeout:.0f} s, waiting for {states}")


def test_a_node_whose_link_goes_down_mid_run_is_declared_down_and_the_run_resumes_on_the_others(hosts_cluster,
                                                                                                 tmp_path):
    """A node's link goes down mid-run: the run stalls in its all_reduce, Slurm marks the node DOWN once SlurmdTimeout
    passes and requeues the job (--requeue) onto the nodes left. The cut-off rank runs on there, unreachable, holding
    its lock on the shared file system, so the new attempt's rank waits for it; once the link is up again Slurm ends
    the stale rank, the node returns (idle), and the run resumes from its checkpoint, ending bit-identical to the same
    run on one host. Every wait is on a state, never on a guessed time."""
    job, run_dir = two_host_run(hosts_cluster, tmp_path, "unlinked")
    wait_for_epoch(hosts_cluster, job, run_dir)
    lost = manifest(run_dir)["hosts"][1]  # not the batch host: the job's shell survives to be requeued
    log = lambda: "".join(p.read_text() for p in tmp_path.glob("unlinked-*.out"))  # noqa: E731
    hosts_cluster.set_link(lost, up=False)
    try:
        # slurmctld pings every SlurmdTimeout/3 and gives up after SlurmdTimeout (30 s), whatever the machine's speed
        wait_for_node(hosts_cluster, lost, ("down*",), timeout=120)
        wait_until(lambda: restarted(hosts_cluster, job), timeout=120, what=f"job {job} running again")
        wait_until(lambda: "is held by pid" in log(), timeout=120, what="the new rank waiting for the cut-off one")
    finally:
        hosts_cluster.set_link(lost, up=True)
    assert hosts_cluster.wait(job, timeout=600, fast_requeue=True) == "COMPLETED", log()[-3000:]
    assert "DUE TO NODE FAILURE" in log()
    assert_resumed_as_on_one_host(run_dir, lost)
    # ReturnToService=2 returns it once it registers again; slurmctld stops pinging a node that is DOWN and not
    # responding, and asks it to register only on its periodic registration round: one ping cycle (SlurmdTimeout / 3)
    # in 21 (Slurm's MAX_REG_FREQUENCY), 210 s with SlurmdTimeout=30, counted from the link coming up.
    wait_for_node(hosts_cluster, lost, ("idle",), timeout=300)
    from slurm.local_cluster import processes_in_namespaces

    host = {os.stat(f"/run/netns/{hosts_cluster.network.netns(lost)}").st_ino}
    assert processes_in_namespaces(host) == [hosts_cluster.pids()[f"slurmd {lost}"]]  # the cut-off rank ended


def restarted(cluster, job: int) -> bool:
    """Whether a requeued job runs again; one pending after its requeue is let start at once (not after 120 s)."""
    info = cluster.job_info(job)
    if info.get("JobState") == "PENDING" and info.get("Reason") == "BeginTime":
        cluster.requeue_now(job)
    return info.get("JobState") == "RUNNING" and int(info.get("Restarts", "0")) > 0


def wait_until(condition, timeout: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"not {what} after {timeout:.0f} s")


def test_a_node_lost_mid_run_is_requeued_and_the_run_ends_as_on_one_host(hosts_cluster, tmp_path):
    """A node crashes mid-run (every process on it killed): the surviving rank names the lost rank and its host,
    srun waits until Slurm declares the node down, Slurm requeues the job (--requeue), and it resumes from its
    checkpoint on the nodes left, ending bit-identical to the same run on one host (the world size is unchanged).
    (The crashed node stays lost: after this test, two nodes are left.)"""
    job, run_dir = two_host_run(hosts_cluster, tmp_path, "lost")
    wait_for_epoch(hosts_cluster, job, run_dir)
    lost = manifest(run_dir)["hosts"][1]
    assert hosts_cluster.crash_node(lost)
    assert hosts_cluster.wait(job, timeout=300, fast_requeue=True) == "COMPLETED"
    log = next(tmp_path.glob("lost-*.out")).read_text()
    assert f"rank 1 of 2 (logical workers 4-7 of 8) on {lost} died" in log
    assert "DUE TO NODE FAILURE" in log
    assert_resumed_as_on_one_host(run_dir, lost)


def test_cluster_check_names_a_dead_node_before_any_job_waits_for_it(hosts_cluster, tmp_path):
    """Last in this module: the node stays lost (its slurmd killed) until the cluster stops (as may the node the
    test before crashed)."""
    import time

    hosts_cluster.kill_node("n2")
    deadline = time.monotonic() + 120  # slurmctld notices at its next ping (SlurmdTimeout / 3)
    while time.monotonic() < deadline and "n2 idle*" not in hosts_cluster.node_state() \
            and "down" not in hosts_cluster.node_state():
        time.sleep(1)
    result = cluster_check(hosts_cluster, tmp_path, "--nodes", "3", "--layers", "hosts")
    assert result.returncode == 1 and table(result) == {"nodes": "FAIL", "hosts": "not run"}, result.stdout
    assert re.search(r"[12] of 3 nodes answer \(.*n2 (idle|down)\*", result.stdout), result.stdout
    assert "failing: nodes;" in result.stdout
