"""Shared pieces of the Slurm tests: the `slurm_cluster` fixture and a fake trainer.

The fixture starts one private Slurm cluster (slurm/local_cluster.py) for the whole session and stops it at the
end. With CI=true it installs Slurm first (slurm/install.sh, root) and fails loudly if the cluster can't start;
elsewhere the tests skip with a one-line reason. To share it with other test modules, tests/conftest.py does
`from tests.slurm_helpers import slurm_cluster  # noqa: F401`; importing it in several places still starts one cluster.

Run as a script, this file is a fake trainer with the contract's preemption behaviour and nothing else:

    python tests/slurm_helpers.py --state DIR --steps N [--step-time S] [--resume auto]

It advances a deterministic state one step at a time (rank 0 writes DIR/progress.json), and on SIGUSR1 or
SIGTERM it checkpoints (DIR/ckpt.json, atomically) at the next step boundary and exits 4; with `--resume auto`
it continues from the checkpoint. Finishing writes DIR/final.json and exits 0. Every start, signal, resume and
exit is appended to DIR/events.jsonl. Ranks other than 0 (SLURM_PROCID / OMPI_COMM_WORLD_RANK) only follow:
when stopping they wait for rank 0's checkpoint before exiting, as a real trainer's barrier would (srun
--kill-on-bad-exit and mpirun end the other ranks as soon as one exits non-zero).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------------------
# The fixture
# --------------------------------------------------------------------------------------------------------------

_SHARED: dict = {"cluster": None, "users": 0, "dir": None}


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _acquire_cluster():
    """Start the session's cluster once (or return the running one); raise a reason string to skip."""
    from slurm import local_cluster

    if _SHARED["cluster"] is not None:
        _SHARED["users"] += 1
        return _SHARED["cluster"]
    reason = local_cluster.available()
    if reason and _in_ci() and os.geteuid() == 0:
        r = subprocess.run(["bash", str(ROOT / "slurm" / "install.sh")], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"slurm/install.sh failed: {(r.stderr or r.stdout).strip()[-500:]}")
        reason = local_cluster.available()
    if reason:
        raise local_cluster.ClusterError(reason)
    workdir = Path(tempfile.mkdtemp(prefix="slurm-test-"))
    # 6 cores claimed (whatever the machine has): the preemption test runs 2 + 2 + 1 ranks at once; its
    # ranks mostly sleep.
    cluster = local_cluster.start(workdir, cpus=6)
    _SHARED.update(cluster=cluster, users=1, dir=workdir)
    atexit.register(_stop_shared)      # a crashed or interrupted session still stops the daemons
    return cluster


def _stop_shared() -> None:
    cluster = _SHARED["cluster"]
    if cluster is not None:
        _SHARED["cluster"] = None
        cluster.stop()
        if not os.environ.get("SLURM_TEST_KEEP"):      # SLURM_TEST_KEEP=1 keeps the daemons' logs
            shutil.rmtree(_SHARED["dir"], ignore_errors=True)


def _release_cluster() -> None:
    _SHARED["users"] -= 1
    if _SHARED["users"] <= 0:
        _stop_shared()


try:
    if __name__ == "__main__":   # the fake trainer: no pytest import (seconds on a loaded machine) before its handlers
        raise ImportError
    import pytest

    @pytest.fixture(scope="session")
    def slurm_cluster():
        """A running single-node Slurm cluster (slurm.local_cluster.Cluster) shared by the session."""
        from slurm import local_cluster

        try:
            cluster = _acquire_cluster()
        except local_cluster.ClusterError as e:
            if _in_ci():
                pytest.fail(f"CI=true but the local Slurm cluster cannot start: {e}")
            pytest.skip(f"no local Slurm cluster: {e}")
        try:
            yield cluster
        finally:
            _release_cluster()
except ImportError:  # run as the fake trainer, without pytest
    pass


# --------------------------------------------------------------------------------------------------------------
# The fake trainer
# --------------------------------------------------------------------------------------------------------------

def advance(acc: int, step: int) -> int:
    """One deterministic 'training step' (a linear congruential update that depends on the step number)."""
    return (acc * 1103515245 + 12345 + step) % 2**31


def uninterrupted_final(steps: int) -> dict:
    acc = 0
    for step in range(steps):
        acc = advance(acc, step)
    return {"step": steps, "acc": acc}


def _rank() -> int:
    # Open MPI's variable first: ranks that mpirun starts inside a batch job inherit the batch step's
    # SLURM_PROCID=0 (the real trainer's launcher detection must prefer OMPI_* for the same reason).
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def fake_train(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fake trainer for the Slurm requeue tests")
    ap.add_argument("--state", required=True, type=Path)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--step-time", type=float, default=0.0)
    ap.add_argument("--resume", choices=["auto"])
    args = ap.parse_args(argv)
    rank = _rank()
    attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0")) + int(os.environ.get("CHAIN_DEPTH", "0"))
    args.state.mkdir(parents=True, exist_ok=True)
    ckpt, events = args.state / "ckpt.json", args.state / "events.jsonl"

    def event(kind: str, **kw) -> None:
        with open(events, "a") as f:
            f.write(json.dumps({"kind": kind, "rank": rank, "attempt": attempt, "time": time.time(),
                                "job": os.environ.get("SLURM_JOB_ID"), **kw}) + "\n")

    stop = {"sig": None}

    def on_signal(signum, frame):
        stop["sig"] = signal.Signals(signum).name
        event("signal", signal=stop["sig"])

    signal.signal(signal.SIGUSR1, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    step, acc = 0, 0
    if args.resume == "auto" and ckpt.exists():
        state = json.loads(ckpt.read_text())
        step, acc = state["step"], state["acc"]
        event("resume", step=step)
    event("start", step=step, resume=args.resume)

    while step < args.steps:
        if stop["sig"]:
            done = args.state / f"stopped.{attempt}"
            if rank == 0:
                _write_json(ckpt, {"step": step, "acc": acc})
                done.touch()
            else:   # the barrier: leave only once rank 0's checkpoint is on disk
                deadline = time.monotonic() + 30
                while not done.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            event("preempted", step=step)
            return 4
        acc = advance(acc, step)
        step += 1
        if rank == 0:
            _write_json(args.state / "progress.json", {"step": step, "acc": acc})
        if args.step_time:
            time.sleep(args.step_time)
    if rank == 0:
        _write_json(args.state / "final.json", {"step": step, "acc": acc})
    event("completed", step=step)
    return 0


if __name__ == "__main__":
    sys.exit(fake_train())
