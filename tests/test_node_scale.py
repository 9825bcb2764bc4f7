"""The `node` scale (issue #27): one machine with all its GPUs. Dry runs print the launches of an 8-GPU node on a
machine without GPUs; the Slurm profile asks for one exclusive node."""
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, trainer_env


def study(*args: str, gpus_visible: bool = False) -> subprocess.CompletedProcess:
    env = trainer_env(IMAGENET_DIR="/data/ilsvrc2012", CUDA_VISIBLE_DEVICES="" if not gpus_visible else "0")
    return subprocess.run([sys.executable, "-m", "suite", "study", *args, "--scale", "node", "--dry-run"],
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
                         rf"\S*06_linear_scaling_stepping_warmup/node-w{workers}-s0/config\.json\n", out)
    assert not list(tmp_path.iterdir())  # a dry run creates nothing


def test_gpus_sets_the_node_size_and_fewer_workers_than_gpus_take_one_gpu_each(tmp_path):
    result = study("experiments/04_naive_scaling", "--gpus", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "--nproc-per-node 1 -m trainers train" in result.stdout  # w1: one process
    assert re.search(r"--nproc-per-node 2 .*node-w2-s0/config\.json", result.stdout)
    assert re.search(r"--nproc-per-node 4 .*node-w32-s0/config\.json", result.stdout)


def test_experiment_2_node_dry_run_measures_1_to_n_gpus_and_leaves_out_what_the_node_lacks(tmp_path):
    result = study("experiments/02_throughput_local_data_parallel", "--gpus", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"horovodrun -np 4 -H localhost:4 --gloo .*node-w4-horovod-s0/config\.json", out)
    assert re.search(r"--nproc-per-node 2 .*node-w2-ddp-s0/config\.json", out)
    assert "node-w8-ddp-s0" in out and "needs 8 GPUs" in out  # said, not launched
    assert not re.search(r"node-w8-ddp-s0/config\.json", out)


def test_experiment_6_node_slurm_dry_run_prints_one_exclusive_node(tmp_path):
    result = study("experiments/06_linear_scaling_stepping_warmup", "--launcher", "slurm", "--cluster", "node",
                   "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for workers in (8, 16, 24, 32):
        assert re.search(rf"sbatch -N 1 --ntasks-per-node 8 -p gpu --cpus-per-task 8 --gpus-per-node=8 --exclusive "
                         rf"--mem=0 .*-J 06-node-w{workers}-s0 .*node-w{workers}-s0/config\.json\n", out)
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


# ---- placement rules (contract/plan.py: the studies and `make cost` place a node run alike) --------------------
def test_a_run_of_w_workers_takes_min_w_n_processes_and_dataparallel_w_gpus_in_one():
    from contract.plan import node_fits, node_gpus_used, node_processes

    assert [node_processes(w, "ddp", 8) for w in (1, 2, 8, 16, 32)] == [1, 2, 8, 8, 8]
    assert node_processes(32, "horovod", 4) == 4 and node_processes(32, "emulated", 8) == 1
    assert node_gpus_used(4, "dp", 8) == 4 and node_gpus_used(32, "ddp", 8) == 8
    assert node_fits(32, "ddp", 8, throughput=False)  # a quality run: 4 workers a GPU
    assert not node_fits(16, "ddp", 8, throughput=True)  # a throughput run measures 16 real GPUs
    assert not node_fits(16, "dp", 8, throughput=False) and node_fits(8, "dp", 8, throughput=False)


def test_the_declared_node_size_is_scales_toml_and_a_gpus_below_1_is_refused():
    from contract.config import ConfigError
    from contract.plan import check_node_gpus, declared_node_gpus

    assert declared_node_gpus(REPO / "experiments" / "06_linear_scaling_stepping_warmup" / "config.toml") == 8
    assert check_node_gpus(4) == 4 and check_node_gpus(2) == 2
    for bad in (1, 0, -2):  # one GPU: W workers in one DDP process, which the trainer refuses (that is SCALE=gpu)
        with pytest.raises(ConfigError, match=f"^--gpus {bad}: the node scale spreads the workers over a node of 2 "
                                              "or more GPUs; on one GPU use SCALE=gpu"):
            check_node_gpus(bad)


def test_a_node_of_one_gpu_is_one_line_pointing_to_the_gpu_scale(tmp_path, capsys):
    from suite.__main__ import main

    assert main(["study", "experiments/06_linear_scaling_stepping_warmup", "--scale", "node", "--dry-run",
                 "--gpus", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "use SCALE=gpu" in err[0], err


# ---- experiments 1-3 at the node scale -------------------------------------------------------------------------
def test_experiment_1_node_dry_run_measures_one_gpu_of_the_node_with_ddp_and_horovod_in_fp32(tmp_path):
    result = study("experiments/01_throughput_single_gpu", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for b in (32, 64, 128):
        assert re.search(rf"torch\.distributed\.run --standalone --nproc-per-node 1 .*node-b{b}-ddp-s0/config\.json",
                         out)
        assert re.search(rf"horovodrun -np 1 -H localhost:1 .*node-b{b}-horovod-s0/config\.json", out)
        for backend in ("horovod", "mwms"):  # TensorFlow's rows (issue 37), in processes of their own
            assert re.search(rf" -m trainers\.tf train .*node-b{b}-tensorflow-{backend}-s0/config\.json", out)
    assert out.count("torch.distributed.run") == 3 and out.count("horovodrun -np") == 3 + 3


def test_experiment_2_node_dry_run_runs_ddp_and_horovod_on_1_2_4_8_gpus_and_dataparallel_in_one_process(tmp_path):
    result = study("experiments/02_throughput_local_data_parallel", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for w in (1, 2, 4, 8):
        assert re.search(rf"--nproc-per-node {w} -m trainers train .*node-w{w}-ddp-s0/config\.json", out)
        assert re.search(rf"horovodrun -np {w} -H localhost:{w} --gloo .*node-w{w}-horovod-s0/config\.json", out)
        assert re.search(rf"\n\S*python\S* -m trainers train .*node-w{w}-dp-s0/config\.json", out)  # one process
    assert "left out" not in out  # an 8-GPU node holds every run


def test_experiment_2_node_slurm_dry_run_gives_dataparallel_its_w_gpus(tmp_path):
    result = study("experiments/02_throughput_local_data_parallel", "--launcher", "slurm", "--cluster", "node",
                   "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    for w in (1, 2, 4, 8):
        assert re.search(rf"sbatch -N 1 --ntasks-per-node 1 .*--gpus-per-node={w} .*-J 02-node-w{w}-dp-s0 ",
                         result.stdout)
        assert re.search(rf"sbatch -N 1 --ntasks-per-node {w} .*--gpus-per-node={w} .*-J 02-node-w{w}-ddp-s0 ",
                         result.stdout)


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_experiment_3_at_the_node_scale_is_one_line_pointing_to_the_thesis_scale(tmp_path, capsys, launcher):
    from suite.__main__ import main

    assert main(["study", "experiments/03_throughput_distributed_data_parallel", "--scale", "node", "--dry-run",
                 "--launcher", launcher, "--cluster", "node", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "runs across several nodes" in err[0] and "SCALE=thesis" in err[0] and "make exp2 SCALE=node" in err[0]
    assert not list(tmp_path.iterdir())


def test_the_manifest_names_every_ranks_gpu_in_rank_order(monkeypatch):
    # On a node every rank drives its own GPU: the manifest lists all of them, not rank 0's alone.
    import torch

    from contract.config import Config, TrainConfig
    from trainers.backends import Launch
    from trainers.backends.base import Backend

    class TwoRanks(Backend):
        def gather_objects(self, obj):  # what rank 1, on cuda:1, contributes beside this rank's own
            return [obj, [name.replace("cuda:0", "cuda:1") for name in obj]]

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    cfg, launch = Config(train=TrainConfig(workers=8, backend="ddp")), Launch("torchrun", rank=0, world_size=2)
    ranks = TwoRanks(cfg, launch, torch.device("cuda", 0))
    assert ranks.devices() == ["cuda:0 NVIDIA H100 80GB HBM3", "cuda:1 NVIDIA H100 80GB HBM3"]
    assert TwoRanks(cfg, launch, torch.device("cpu")).devices() == ["cpu"]
