"""The Horovod backend: horovodrun and a bare mpirun (the thesis's launch) train exactly as DDP and emulated workers.

Needs Horovod built with PyTorch (`make setup-horovod`). Elsewhere these tests skip with one line; in CI (CI=true)
a missing Horovod or Open MPI fails them instead, since `make test` builds Horovod first.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import (REPO, final_state, max_difference, mpirun_cannot_launch, records, run, torchrun, train,
                           trainer_env, write_config)

IN_CI = os.environ.get("CI", "").lower() == "true"


def horovod_missing() -> str | None:
    """Why Horovod can't be used here, or None."""
    try:
        import horovod.torch  # noqa: F401
    except ImportError as e:
        return f"Horovod with PyTorch is not built ({str(e).splitlines()[0] if str(e) else e}); run `make setup-horovod`"
    if horovodrun() is None:
        return "horovodrun is not on PATH; run `make setup-horovod`"
    return None


def horovodrun() -> str | None:
    local = Path(sys.executable).with_name("horovodrun")
    return str(local) if local.exists() else shutil.which("horovodrun")


def need(reason: str | None) -> None:
    if reason:
        (pytest.fail if IN_CI else pytest.skip)(reason)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """DDP with 2 gloo processes and 2 emulated workers, same seed and data: the runs Horovod must match."""
    need(horovod_missing())
    out = tmp_path_factory.mktemp("reference")
    ddp = torchrun(2, write_config(out / "ddp.toml", {"train": {"backend": "ddp"}}), out, "ddp")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    emu = train(write_config(out / "emu.toml", {"train": {"backend": "emulated"}}), out, "emu")
    assert emu.returncode == 0, emu.stderr[-3000:]
    return final_state(out / "ddp" / "ddp"), final_state(out / "emu" / "emu")


def horovod_config(tmp_path: Path, **horovod) -> Path:
    overrides = {"train": {"backend": "horovod"}}
    if horovod:
        overrides["horovod"] = horovod
    return write_config(tmp_path / "hvd.toml", overrides)


def trainer_args(config: Path, out: Path, run_name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trainers", "train", str(config), "--out", str(out), "--run", run_name, *extra]


@pytest.mark.slow
def test_horovodrun_trains_exactly_as_ddp_and_emulated_workers(tmp_path, reference):
    ddp, emu = reference
    result = run([horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2",
                  *trainer_args(horovod_config(tmp_path), tmp_path, "h")])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    run_dir = tmp_path / "hvd" / "h"
    # 2 epochs x 6 steps; parameters and worker 0's BatchNorm statistics
    assert max_difference(final_state(run_dir), ddp) < 1e-5
    assert max_difference(final_state(run_dir), emu) < 1e-5
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["backend"], manifest["launcher"], manifest["world_size"]) == ("horovod", "horovodrun", 2)
    assert manifest["horovod"]["controller"] == "gloo" and manifest["horovod"]["fp16_allreduce"] is False
    assert manifest["versions"]["horovod"]
    resolved = json.loads((run_dir / "config.json").read_text())["resolved"]
    assert resolved["framework"] == "horovod+pytorch" and resolved["global_batch"] == 8


@pytest.mark.slow
def test_bare_mpirun_of_the_trainer_works_as_in_the_thesis(tmp_path, reference):
    need(mpirun_cannot_launch())
    ddp, _ = reference
    env = trainer_env()
    result = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-bind-to", "none",
                  "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", *trainer_args(horovod_config(tmp_path), tmp_path, "m")],
                 env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    run_dir = tmp_path / "hvd" / "m"
    assert max_difference(final_state(run_dir), ddp) < 1e-5
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["launcher"], manifest["horovod"]["controller"]) == ("mpi", "mpi")


@pytest.mark.slow
def test_batches_per_allreduce_accumulates_locally_and_fp16_compression_trains(tmp_path):
    need(horovod_missing())
    config = horovod_config(tmp_path, batches_per_allreduce=2, fp16_allreduce=True)
    result = run([horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2", *trainer_args(config, tmp_path, "a")])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    run_dir = tmp_path / "hvd" / "a"
    iters = records(run_dir, "iter")
    # 48 images, 2 workers x 4 images x 2 backward passes = 16 a step, one allreduce each: 3 steps an epoch
    assert {r["iters"] for r in iters} == {3} and {r["images"] for r in iters} == {16}
    assert json.loads((run_dir / "config.json").read_text())["resolved"]["global_batch"] == 16
    assert all(r["train_loss"] == r["train_loss"] for r in records(run_dir, "epoch"))  # finite, not NaN


@pytest.mark.slow
def test_timeline_is_written_into_the_run_folder(tmp_path):
    need(horovod_missing())
    from trainers.backends.base import Backend

    if not hasattr(Backend, "start_run"):
        pytest.skip("the loop does not tell backends the run folder yet (Backend.start_run)")
    result = run([horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2",
                  *trainer_args(horovod_config(tmp_path, timeline=True), tmp_path, "t")])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    timeline = tmp_path / "hvd" / "t" / "horovod_timeline.json"
    assert timeline.exists() and "allreduce" in timeline.read_text()


@pytest.mark.slow
def test_without_horovod_the_horovod_backend_is_one_line_that_says_how_to_install_it(tmp_path):
    # Hide Horovod from the trainer's Python, as on a machine where it was never built.
    hide = "import sys, runpy; sys.modules['horovod'] = None; sys.argv[0] = 'trainers'; " \
           "runpy.run_module('trainers', run_name='__main__', alter_sys=True)"
    result = subprocess.run(
        [sys.executable, "-c", hide, "train", str(horovod_config(tmp_path)), "--out", str(tmp_path), "--run", "x"],
        capture_output=True, text=True, timeout=120, env=trainer_env(), cwd=REPO,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "make setup-horovod" in lines[0], result.stderr
    assert not (tmp_path / "hvd" / "x").exists()  # refused before anything started


@pytest.mark.slow
def test_fp16_with_its_gradient_scaler_trains_under_horovod(tmp_path):
    # the scaler must read gradients only after Horovod's allreduce finished (synchronize, then skip_synchronize)
    need(horovod_missing())
    config = write_config(tmp_path / "hvd.toml", {"train": {"backend": "horovod", "precision": "fp16"}})
    result = run([horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2", *trainer_args(config, tmp_path, "f")])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    # fp16 kernels round differently at another batch size: emulate each worker in a pass of its own, as a rank
    emulated = write_config(tmp_path / "emu.toml", {"train": {"backend": "emulated", "precision": "fp16",
                                                              "workers_per_pass": 1}})
    assert train(emulated, tmp_path, "e").returncode == 0
    state = torch.load(tmp_path / "hvd" / "f" / "checkpoint.pt", weights_only=True)
    emulated_state = torch.load(tmp_path / "emu" / "e" / "checkpoint.pt", weights_only=True)
    assert state["scaler"] == emulated_state["scaler"] and state["scaler"]["scale"] > 0
    assert max_difference(state["model"], emulated_state["model"]) < 1e-5


def test_the_build_script_with_horovod_already_built_and_no_tensorflow_asked_for_says_so_and_succeeds():
    """`make exp3` runs the build script before every study; with Horovod built and TensorFlow left out it must exit
    0 with one line (it once ended silently with status 1 under `set -e`, and every study printed 'Horovod could not
    be built')."""
    need(horovod_missing())
    env = {**os.environ, "HOROVOD_TENSORFLOW": "0"}
    venv = Path(sys.executable).parents[1]
    result = subprocess.run(["bash", str(REPO / "trainers" / "horovod_build" / "setup.sh"), str(venv)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "already installed" in result.stdout and "nothing to do" in result.stdout, result.stdout
