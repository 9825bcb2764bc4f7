"""Studies on a real Slurm cluster on localhost, and DDP under a bare mpirun: the real trainer, not a stand-in."""
import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, final_state, max_difference, records, run, train, trainer_env, write_config

pytestmark = pytest.mark.slow
SHAPE_FILES = {"config.json", "manifest.json", "metrics.jsonl", "train.log"}


def submit_study(cluster, experiment: str, out, *extra) -> list[int]:
    env = trainer_env(**cluster.env)
    result = run([sys.executable, "-m", "suite", "study", f"experiments/{experiment}", "--launcher", "slurm",
                  "--cluster", "local", "--quick", "--out", str(out), *extra], env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = [int(j) for j in re.findall(r"Submitted batch job (\d+)", result.stdout)]
    assert jobs, result.stdout
    return jobs


def run_local_study(experiment: str, out, *extra) -> None:
    result = run([sys.executable, "-m", "suite", "study", f"experiments/{experiment}", "--quick", "--out", str(out),
                  *extra], timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr


def shape(run_dir):
    files = {p.name for p in run_dir.iterdir()} & SHAPE_FILES
    config = json.loads((run_dir / "config.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    kinds = sorted({r["kind"] for r in map(json.loads, open(run_dir / "metrics.jsonl"))})
    return files, sorted(config), sorted(config["resolved"]), sorted(manifest), kinds


def run_on_slurm_and_locally(cluster, experiment, tmp_path, only: list[str]):
    """The QUICK study's runs `only` names submitted to the cluster and run locally; both must leave the same
    completed run folders. One run a launch path is enough: the others differ in a batch size or a worker count,
    which Slurm never sees (and test_study.py runs every run of experiment 1's QUICK study locally)."""
    jobs = submit_study(cluster, experiment, tmp_path / "slurm", "--only", *only)
    states = cluster.wait_all(jobs, timeout=600)
    assert set(states.values()) == {"COMPLETED"}, states
    run_local_study(experiment, tmp_path / "local", "--only", *only)
    check_same_shape(tmp_path / "slurm", tmp_path / "local", experiment)
    return tmp_path / "slurm" / experiment


def check_same_shape(slurm_out, local_out, experiment):
    slurm_runs = sorted(p.name for p in (slurm_out / experiment).iterdir())
    assert slurm_runs == sorted(p.name for p in (local_out / experiment).iterdir())
    for name in slurm_runs:
        a, b = slurm_out / experiment / name, local_out / experiment / name
        assert json.loads((a / "manifest.json").read_text())["status"] == "completed", name
        assert shape(a) == shape(b), name


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI for the Horovod rows (make setup-cluster)")
def test_throughput_study_runs_on_slurm_like_it_runs_locally(slurm_cluster, tmp_path):
    # each framework's launch once (DDP, Horovod with PyTorch and with TensorFlow, MultiWorkerMirroredStrategy)
    slurm_runs = run_on_slurm_and_locally(slurm_cluster, "01_throughput_single_gpu", tmp_path, ["b32-*"])
    assert {p.name.split("-")[0] for p in slurm_runs.iterdir()} == {"b32"}
    manifest = json.loads((slurm_runs / "b32-horovod-s0/manifest.json").read_text())
    assert manifest["launcher"] == "mpi" and manifest["backend"] == "horovod"
    manifest = json.loads((slurm_runs / "b32-ddp-s0/manifest.json").read_text())
    assert manifest["launcher"] == "slurm" and manifest["backend"] == "ddp"


def test_quality_study_runs_on_slurm_like_it_runs_locally(slurm_cluster, tmp_path):
    # the smallest and the largest batch: every emulated run is the same launch, one process
    slurm_runs = run_on_slurm_and_locally(slurm_cluster, "04_naive_scaling", tmp_path, ["w1-s0", "w32-s0"])
    assert sorted(p.name for p in slurm_runs.iterdir()) == ["w1-s0", "w32-s0"]
    for run_dir in slurm_runs.iterdir():
        assert [r["epoch"] for r in records(run_dir, "epoch")] == [0, 1]


def signal_once_an_epoch_is_recorded(cluster, job: int, run_dir, timeout: float = 600) -> None:
    """What `--signal=B:USR1@N` sends the batch shell N seconds before the time limit, sent as soon as the first
    epoch is in metrics.jsonl instead of when Slurm's clock says so: the cut can't miss, however fast the machine
    (the 59 epochs left outlast the signal's way to the trainer by far)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []
        if any('"epoch"' in line and json.loads(line)["kind"] == "epoch" for line in lines[:-1]):
            break  # (the last line may be half written)
        state = cluster.state(job)
        assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {job} is {state} before its first epoch"
        assert time.monotonic() < deadline, "no epoch recorded in time"
        time.sleep(0.2)
    cluster.run(["scancel", "--batch", "--signal=USR1", str(job)])


def test_a_run_cut_by_the_time_limit_requeues_and_ends_as_an_uninterrupted_one(slurm_cluster, tmp_path):
    from slurm.profiles import load_profile, sbatch_argv

    cfg = write_config(tmp_path / "long.toml", {"train": {"epochs": 60, "workers": 1, "print_freq": 50},
                                                "data": {"synthetic_images": 400}})
    uninterrupted = subprocess.Popen(
        [sys.executable, "-m", "trainers", "train", str(cfg), "--out", str(tmp_path), "--run", "whole"],
        env=trainer_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    run_dir = tmp_path / "long" / "cut"
    run_dir.mkdir(parents=True)
    # A limit no attempt reaches: the cut is the limit's warning signal, sent below once an epoch is recorded.
    argv = sbatch_argv(
        load_profile("local"), REPO / "experiments/04_naive_scaling/slurm.sbatch", nodes=1, tasks_per_node=1,
        gpus_per_node=0, job_name="cut", time_limit="30", output=run_dir / "slurm-%j.out",
        env={"BACKEND": "single", "PYTHON": sys.executable, "HARNESS_DIR": str(REPO / "slurm")},
        train_args=[str(cfg), "--out", str(tmp_path), "--run-name", "cut"],
    )
    job = slurm_cluster.submit(argv, env=trainer_env(**slurm_cluster.env), cwd=REPO)
    signal_once_an_epoch_is_recorded(slurm_cluster, job, run_dir)
    assert slurm_cluster.wait(job, timeout=900, fast_requeue=True) == "COMPLETED"
    assert uninterrupted.wait(timeout=600) == 0, uninterrupted.stderr.read()[-2000:]
    statuses = [r["status"] for r in records(run_dir, "status")]
    assert "preempted" in statuses and statuses[-1] == "completed", statuses
    assert json.loads((run_dir / "manifest.json").read_text())["resumed_at"]  # the requeued job resumed
    assert max_difference(final_state(tmp_path / "long" / "whole"), final_state(run_dir)) == 0.0


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI (make setup-cluster)")
def test_ddp_under_a_bare_mpirun_matches_emulated_workers(tmp_path):
    from trainers.backends import free_port

    ddp_cfg = write_config(tmp_path / "ddp.toml", {"train": {"backend": "ddp"}})
    emu_cfg = write_config(tmp_path / "emu.toml", {"train": {"backend": "emulated"}})
    env = trainer_env(MASTER_PORT=str(free_port()), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = run(["mpirun", "--oversubscribe", "-np", "2", "-x", "MASTER_PORT", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
                  sys.executable, "-m", "trainers", "train", str(ddp_cfg), "--out", str(tmp_path), "--run", "ddp"],
                 env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert train(emu_cfg, tmp_path, "emu").returncode == 0
    manifest = json.loads((tmp_path / "ddp" / "ddp" / "manifest.json").read_text())
    assert manifest["launcher"] == "mpi" and manifest["world_size"] == 2
    assert max_difference(final_state(tmp_path / "ddp" / "ddp"), final_state(tmp_path / "emu" / "emu")) < 1e-5
