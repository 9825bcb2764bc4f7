"""The Slurm and MPI harness on a real single-node Slurm cluster (slurm/local_cluster.py).

Slow: the preemption test needs a job to meet its 1-minute time limit (about 2 minutes in all). With CI=true
(as root) the fixture installs Slurm and these tests must run; elsewhere they skip when Slurm can't start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm_helpers import ROOT, slurm_cluster, uninterrupted_final  # noqa: F401  (slurm_cluster: fixture)

pytestmark = pytest.mark.slow

HELPERS = ROOT / "tests" / "slurm_helpers.py"
EXAMPLE = ROOT / "slurm" / "example.sbatch"


def test_cluster_is_up(slurm_cluster):
    assert slurm_cluster.running()
    assert slurm_cluster.node_state() in ("idle", "mixed", "allocated")
    r = slurm_cluster.run(["scontrol", "ping"])
    assert "UP" in r.stdout


def test_cli_starts_and_stops_a_second_cluster(slurm_cluster, tmp_path):
    """`python -m slurm.local_cluster start|status|stop --dir D --nodes 4`: 4 hosts idle within 10 s (one node on
    localhost, said in one line, where namespaces cannot be made), then nothing of it left: no daemon, namespace or
    link."""
    from slurm import local_cluster

    cli = [sys.executable, "-m", "slurm.local_cluster"]
    d = tmp_path / "c2"
    started = time.monotonic()
    r = subprocess.run([*cli, "start", "--dir", str(d), "--nodes", "4"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"export SLURM_CONF={d / 'slurm.conf'}" in r.stdout
    second = local_cluster.Cluster.load(d)
    pids = second.pids()
    multi_host = local_cluster.multi_host_unavailable() is None
    try:
        if multi_host:
            assert "4 hosts in network namespaces" in r.stdout
            sinfo = second.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split()
            assert sinfo == ["n1", "idle", "n2", "idle", "n3", "idle", "n4", "idle"], sinfo
            assert time.monotonic() - started < 10
        else:
            assert "one node on localhost instead of 4 hosts" in r.stdout
        r = subprocess.run([*cli, "status", "--dir", str(d)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "idle" in r.stdout, r.stdout + r.stderr
    finally:
        r = subprocess.run([*cli, "stop", "--dir", str(d)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "stopped" in r.stdout
    assert len(pids) == (4 if multi_host else 1) + 2  # slurmctld, a slurmd a node, munged
    assert not any(local_cluster._pid_alive(pid) for name, pid in pids.items() if name != "munged")
    if multi_host:
        assert second.network.leftovers() == []
    assert slurm_cluster.running()          # the session's cluster is untouched


def test_trivial_job(slurm_cluster, tmp_path):
    out = tmp_path / "hello.out"
    job = slurm_cluster.submit(["-n", "2", "-o", str(out), str(ROOT / "slurm" / "hello.sbatch")], cwd=tmp_path)
    assert slurm_cluster.wait(job, timeout=60) == "COMPLETED"
    text = out.read_text()
    assert f"hello from job {job}" in text
    assert "task 0 of 2" in text and "task 1 of 2" in text
    # The completion log answers once the job is done (no accounting database).
    assert slurm_cluster.state(job) == "COMPLETED"


# One write(2) per line: mpirun merges the ranks' output streams, and print's separate writes can interleave.
RANK_PY = ("import os; os.write(1, ('rank %s' % os.environ.get('OMPI_COMM_WORLD_RANK', "
           "os.environ.get('PMIX_RANK')) + chr(10)).encode())")


def test_mpirun_hello(slurm_cluster, tmp_path):
    """mpirun -np 2 outside Slurm (as root: --allow-run-as-root; 2 cores: --oversubscribe)."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env.pop("SLURM_CONF", None)
    r = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", sys.executable, "-c", RANK_PY],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(x for x in r.stdout.splitlines() if x.startswith("rank")) == ["rank 0", "rank 1"]


def test_mpirun_and_srun_pmix_inside_a_job(slurm_cluster, tmp_path):
    """Inside sbatch a plain mpirun takes the allocation's slots; srun starts MPI ranks with --mpi=pmix."""
    script = tmp_path / "mpi.sbatch"
    script.write_text(f"""#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun {sys.executable} -c "{RANK_PY}" | sed 's/^/mpirun /' | sort
srun --mpi=pmix {sys.executable} -c "{RANK_PY}" | sed 's/^/srun /' | sort
""")
    out = tmp_path / "mpi.out"
    job = slurm_cluster.submit(["-n", "2", "-o", str(out), str(script)], cwd=tmp_path)
    assert slurm_cluster.wait(job, timeout=90) == "COMPLETED", out.read_text()
    lines = [x for x in out.read_text().splitlines() if " rank " in x]
    assert lines == ["mpirun rank 0", "mpirun rank 1", "srun rank 0", "srun rank 1"], out.read_text()


def _submit_fake_training(cluster, workdir: Path, name: str, tasks: int, steps: int, env: dict[str, str]) -> int:
    """Submit slurm/example.sbatch running the fake trainer with a 1-minute limit and USR1 50 s before it."""
    workdir.mkdir(parents=True, exist_ok=True)
    exports = {"HARNESS_DIR": str(ROOT / "slurm"), "TRAIN_CMD": f"{sys.executable} {HELPERS}",
               "JOB_SIGNAL": "B:USR1@50", **env}
    argv = ["-n", str(tasks), "-t", "1", "--signal=B:USR1@50", "--requeue", "--open-mode=append", "-J", name,
            "-o", str(workdir / "job.out"), "--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in exports.items())]),
            str(EXAMPLE), "--state", str(workdir / "state"), "--steps", str(steps), "--step-time", "1"]
    return cluster.submit(argv, cwd=workdir)


def _events(workdir: Path) -> list[dict]:
    path = workdir / "state" / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _last_checkpoint(events: list[dict], resume: dict) -> int:
    """The step of rank 0's last checkpoint before a resume. Usually the preemption just before it; a restart that
    the signal reaches before its handler is installed dies without one (job.sh requeues it all the same), and the
    next resumes from the same checkpoint again."""
    before = [e for e in events[:events.index(resume)] if e["kind"] == "preempted" and e["rank"] == 0]
    return before[-1]["step"] if before else 0


def test_preempted_job_requeues_itself_and_finishes(slurm_cluster, tmp_path):
    """A run longer than its 1-minute limit is signalled, checkpoints, exits 4, is requeued (or resubmitted)
    by job.sh, resumes with --resume auto, and ends in the state of an uninterrupted run. Three variants run
    at once: DDP-style under srun, Horovod-style under mpirun, and successor submission instead of requeue."""
    steps = 50   # 50 s of work: more than the latest the USR1 can come (10 s in + up to 30 s of Slurm's polling)
    want = uninterrupted_final(steps)
    runs = {
        "srun": (2, {"BACKEND": "ddp"}),
        "mpirun": (2, {"BACKEND": "horovod", "MPI_ARGS": "--oversubscribe", "MPI_ALLOW_ROOT": "1"}),
        "chain": (1, {"BACKEND": "ddp", "REQUEUE": "chain"}),
    }
    jobs = {k: _submit_fake_training(slurm_cluster, tmp_path / k, f"preempt-{k}", n, steps, env)
            for k, (n, env) in runs.items()}
    states = slurm_cluster.wait_all(list(jobs.values()), timeout=300, fast_requeue=True)
    # The chained variant's first job ends normally after submitting its successor: follow the chain by name.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and slurm_cluster.run(["squeue", "-h", "-n", "preempt-chain"]).stdout.strip():
        time.sleep(0.5)
    for kind, job in jobs.items():
        state = states[job]
        log = (tmp_path / kind / "job.out").read_text()
        assert state == "COMPLETED", f"{kind}: {state}\n{log}"
        final = tmp_path / kind / "state" / "final.json"
        assert final.exists(), f"{kind}: no final state\n{log}"
        assert json.loads(final.read_text()) == want, f"{kind}\n{log}"
        events = _events(tmp_path / kind)
        preempted = [e for e in events if e["kind"] == "preempted" and e["rank"] == 0]
        resumed = [e for e in events if e["kind"] == "resume" and e["rank"] == 0]
        assert preempted and resumed, f"{kind}: never preempted/resumed\n{log}"
        assert all(e["step"] == _last_checkpoint(events, e) for e in resumed), f"{kind}\n{log}"
        assert "got SIGUSR1" in log and "exited with 0" in log
        if kind == "chain":
            assert "submitted successor job" in log
            chain = sorted({int(e["job"]) for e in events})
            assert len(chain) >= 2 and all(slurm_cluster.state(j) == "COMPLETED" for j in chain), chain
        else:
            assert slurm_cluster.job_info(job)["Restarts"] != "0"
            assert "requeueing job" in log  # written before `scontrol requeue`, which ends the batch shell
        # Every rank resumed where rank 0's checkpoint left off.
        ranks = {e["rank"] for e in events if e["kind"] == "completed"}
        assert ranks == set(range(runs[kind][0])), f"{kind}\n{log}"
