"""The `node` scale (issue #27): one machine with all its GPUs. Dry runs print the launches of an 8-GPU node on a
machine without GPUs; the Slurm profile asks for one exclusive node."""
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, trainer_env


def study(*args: str, gpus_visible: bool = False) -> subprocess.CompletedProcess:
    env = trainer_env(IMAGENET_DIR="/data/ilsvrc2012", CUDA_VISIBLE_DEVICES="" if not gpus_visible else "0")
    return subprocess.run([sys.executable, "-m", "trainers", "study", *args, "--scale", "node", "--dry-run"],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def test_experiment_6_node_dry_run_prints_torchrun_over_the_8_gpus(tmp_path):
    result = study("experiments/06_linear_scaling_stepping_warmup", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "8 GPU(s)" in out  # where the count came from is said
    for workers, lr in [(8, "0.4"), (16, "0.8"), (24, "1.2"), (32, "1.6")]:
        assert re.search(rf"node-w{workers}-s0: pytorch \(ddp\), 1 node\(s\) x 8 process\(es\), {workers} worker\(s\), "
                         rf"per-GPU batch 128, global batch {128 * workers}, lr {lr}, warm-up stepping 5 epochs", out)
        assert re.search(rf"torch\.distributed\.run --standalone --nproc-per-node 8 -m trainers train "
                         rf"\S*06_linear_scaling_stepping_warmup/config\.toml --scale node .*--run-name node-w{workers}-s0 "
                         rf"--set train\.workers={workers}", out)
    assert not list(tmp_path.iterdir())  # a dry run creates nothing


def test_gpus_sets_the_node_size_and_fewer_workers_than_gpus_take_one_gpu_each(tmp_path):
    result = study("experiments/04_naive_scaling", "--gpus", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "--nproc-per-node 1 -m trainers train" in result.stdout  # w1: one process
    assert re.search(r"--nproc-per-node 2 .*--run-name node-w2-s0", result.stdout)
    assert re.search(r"--nproc-per-node 4 .*--run-name node-w32-s0", result.stdout)


def test_experiment_2_node_dry_run_measures_1_to_n_gpus_and_leaves_out_what_the_node_lacks(tmp_path):
    result = study("experiments/02_throughput_local_data_parallel", "--gpus", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"horovodrun -np 4 -H localhost:4 --gloo .*--run-name node-w4-horovod-s0", out)
    assert re.search(r"--nproc-per-node 2 .*--run-name node-w2-ddp-s0", out)
    assert "node-w8-ddp-s0" in out and "needs 8 GPUs" in out  # said, not launched
    assert not re.search(r"--run-name node-w8-ddp-s0", out)


def test_experiment_6_node_slurm_dry_run_prints_one_exclusive_node(tmp_path):
    result = study("experiments/06_linear_scaling_stepping_warmup", "--launcher", "slurm", "--cluster", "node",
                   "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for workers in (8, 16, 24, 32):
        assert re.search(rf"sbatch -N 1 --ntasks-per-node 8 -p gpu --cpus-per-task 8 --gpus-per-node=8 --exclusive "
                         rf"--mem=0 .*-J 06-node-w{workers}-s0 .*--scale node .*--set train\.workers={workers}", out)
    assert not list(tmp_path.iterdir())


def test_the_node_profile_loads_and_asks_for_gpus_per_node():
    from slurm.profiles import load_profile, sbatch_argv

    profile = load_profile("node")
    argv = sbatch_argv(profile, "x.sbatch", 1, 4, 4, "j", None, "o")
    assert "--gpus-per-node=4" in argv and "--exclusive" in argv and "--mem=0" in argv
    assert not any(a.startswith("--gres") for a in argv)


@pytest.mark.parametrize("experiment", ["05_linear_scaling", "08_gradual_warmup_5", "11_base_rate_sweep"])
def test_quality_configs_at_the_node_scale_are_the_gpu_scales_numerics_over_ddp(experiment, monkeypatch):
    from contract.config import load_config

    monkeypatch.setenv("IMAGENET_DIR", "/data/ilsvrc2012")
    node = load_config(REPO / "experiments" / experiment, "node").train
    gpu = load_config(REPO / "experiments" / experiment, "gpu").train
    assert (node.backend, node.device) == ("ddp", "cuda")
    assert (node.precision, node.channels_last, node.workers_per_pass) == (gpu.precision, gpu.channels_last,
                                                                           gpu.workers_per_pass)
