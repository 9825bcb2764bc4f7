"""Real multi-process data parallelism: DDP over gloo under torchrun, and emulated workers matching it."""
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import (REPO, final_state, max_difference, needs_photos, records, torchrun, train, trainer_env,
                           write_config)
from tests.test_precision import REAL_DATA
from trainers.backends import free_port

pytestmark = pytest.mark.slow


def test_emulated_workers_match_ddp_with_two_gloo_processes(tmp_path):
    ddp_cfg = write_config(tmp_path / "ddp.toml", {"train": {"backend": "ddp"}})
    emu_cfg = write_config(tmp_path / "emu.toml", {"train": {"backend": "emulated"}})
    ddp = torchrun(2, ddp_cfg, tmp_path, "ddp")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    emu = train(emu_cfg, tmp_path, "emu")
    assert emu.returncode == 0, emu.stderr[-3000:]
    # 2 epochs x 6 steps; parameters, BatchNorm running statistics (worker 0's) and all
    assert max_difference(final_state(tmp_path / "ddp" / "ddp"), final_state(tmp_path / "emu" / "emu")) < 1e-5
    manifest = json.loads((tmp_path / "ddp" / "ddp" / "manifest.json").read_text())
    assert manifest["backend"] == "ddp" and manifest["launcher"] == "torchrun" and manifest["world_size"] == 2


@pytest.mark.parametrize("kind", ["synthetic", "generated", pytest.param("photos", marks=needs_photos)])
def test_emulated_workers_one_a_pass_match_ddp_on_every_data_kind(tmp_path, kind):
    # one worker a pass computes its gradient as a DDP process does: exact on real images too, where a pass of
    # both workers differs by rounding that two epochs amplify (test_precision.py checks that on one step)
    data = {} if kind == "synthetic" else REAL_DATA[kind]
    ddp_cfg = write_config(tmp_path / "ddp.toml", {"train": {"backend": "ddp"}, "data": data})
    emu_cfg = write_config(tmp_path / "emu.toml", {"train": {"backend": "emulated", "workers_per_pass": 1},
                                                   "data": data})
    assert torchrun(2, ddp_cfg, tmp_path, "ddp").returncode == 0
    emu = train(emu_cfg, tmp_path, "emu")
    assert emu.returncode == 0, emu.stderr[-3000:]
    assert max_difference(final_state(tmp_path / "ddp" / "ddp"), final_state(tmp_path / "emu" / "emu")) < 1e-5


def test_ddp_metrics_are_sums_over_ranks(tmp_path):
    # sharded validation over an odd-sized set (3 images on 2 ranks) stays exact
    cfg = write_config(tmp_path / "c.toml", {"train": {"backend": "ddp", "epochs": 1},
                                             "data": {"val_mode": "sharded", "synthetic_images": 75}})
    emu_cfg = write_config(tmp_path / "e.toml", {"train": {"backend": "emulated", "epochs": 1},
                                                 "data": {"synthetic_images": 75}})
    assert torchrun(2, cfg, tmp_path, "d").returncode == 0
    assert train(emu_cfg, tmp_path, "e").returncode == 0
    ddp_epoch = records(tmp_path / "c" / "d", "epoch")[-1]
    emu_epoch = records(tmp_path / "e" / "e", "epoch")[-1]
    for key in ("train_loss", "train_top1", "val_loss", "val_top1", "val_top5"):
        assert ddp_epoch[key] == pytest.approx(emu_epoch[key], abs=1e-3), key
    assert ddp_epoch["images"] == emu_epoch["images"] == 76  # 75 padded to 2 x 38 as DistributedSampler does; 3 val images


def test_sharded_validation_with_unequal_shards_finishes_and_evaluates_with_rank_0s_statistics(tmp_path):
    # 48 images leave 1 validation image: rank 0 has one batch, rank 1 none. DDP's forward broadcast the buffers
    # before every batch, so rank 1 waited in the sums' allreduce while rank 0 waited in that broadcast (a hang)
    cfg = write_config(tmp_path / "c.toml", {"train": {"backend": "ddp", "epochs": 1},
                                             "data": {"val_mode": "sharded", "synthetic_images": 48}})
    emu_cfg = write_config(tmp_path / "e.toml", {"train": {"backend": "emulated", "epochs": 1},
                                                 "data": {"synthetic_images": 48}})
    ddp = torchrun(2, cfg, tmp_path, "d")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert train(emu_cfg, tmp_path, "e").returncode == 0
    ddp_epoch, emu_epoch = records(tmp_path / "c" / "d", "epoch")[-1], records(tmp_path / "e" / "e", "epoch")[-1]
    assert ddp_epoch["val_loss"] == pytest.approx(emu_epoch["val_loss"], abs=1e-3)


def test_a_killed_rank_makes_the_other_exit_with_a_message_naming_its_rank(tmp_path):
    cfg = write_config(tmp_path / "k.toml", {"train": {"backend": "ddp", "epochs": 50},
                                             "data": {"synthetic_images": 400}})
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = trainer_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=port)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "trainers", "train", str(cfg), "--out", str(tmp_path), "--run", "k"],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    log = tmp_path / "k" / "k" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and '"iter"' in log.read_text()):
        time.sleep(0.5)
    assert log.exists(), "training never started"
    procs[1].send_signal(signal.SIGKILL)
    killed_at = time.time()
    try:
        _, err = procs[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        pytest.fail("rank 0 still running 60 s after rank 1 was killed")
    assert time.time() - killed_at < 60
    assert procs[0].returncode not in (0, None)
    assert "rank 1 of 2 died (rank 0 noticed" in err.strip().splitlines()[-1]  # the rank that died, not the noticer
    manifest = json.loads((tmp_path / "k" / "k" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed_ranks"] == [1]


def test_world_size_that_disagrees_with_the_launcher_is_refused_before_launch(tmp_path):
    # 4 workers over 2 processes are 2 emulated workers a rank (test_rank_workers.py); 3 do not split
    cfg = write_config(tmp_path / "w.toml", {"train": {"backend": "ddp", "workers": 3}})
    result = torchrun(2, cfg, tmp_path, "w")
    assert result.returncode != 0
    assert "launched with 2 processes but train.workers = 3" in result.stderr


def test_each_ranks_placement_follows_its_allocation_and_is_recorded(tmp_path):
    """Issue 47: with nothing set, torchrun's 2 ranks share this machine's CPUs (its affinity) between them, each
    thread count from that allocation, and the manifest records every rank's placement, not rank 0's alone."""
    import os

    from contract.placement import problems
    from tests.helpers import run as run_cmd

    cfg = write_config(tmp_path / "c.toml", {"train": {"backend": "ddp", "epochs": 1, "threads": 0}})
    env = trainer_env()
    env.pop("OMP_NUM_THREADS")
    done = run_cmd([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                    str(free_port()), "-m", "trainers", "train", str(cfg), "--out", str(tmp_path), "--run-name", "p"],
                   env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = json.loads((tmp_path / "c" / "p" / "manifest.json").read_text())["placement"]
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert [(p["local_rank"], p["cpus"], p["threads"], p["threads_from"]) for p in ranks] == [
        (0, share, share, "allocation"), (1, share, share, "allocation")]
    assert problems(ranks) == []
