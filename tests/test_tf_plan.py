"""The TensorFlow rows (issue 37), without TensorFlow: the setting, the fingerprints it leaves alone, the study's
rows and commands, TF_CONFIG from a launcher's environment, the benchmark formula. Nothing here imports
tensorflow (torch shares this process; trainers/tf/ runs in its own)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contract.config import ConfigError, load_config
from contract.fingerprint import config_fingerprint
from contract.runfolder import bench_throughput
from tests.helpers import REPO, write_config
from trainers.tf import cluster

EXP1, EXP2, EXP3 = (REPO / "experiments" / name for name in (
    "01_throughput_single_gpu", "02_throughput_local_data_parallel", "03_throughput_distributed_data_parallel"))
TF = ["train.framework=tensorflow"]


def test_the_thesis_formula_keeps_the_warm_up_and_the_steady_state_leaves_it_out():
    times = [1.0] * 10 + [0.5] * 190  # 200 steps: 10 slow warm-up steps
    got = bench_throughput(times, images_per_step=64, warmup=10)
    assert got["images_per_s_steady"] == pytest.approx(64 / 0.5)
    assert got["batch_time_avg_at_199"] == pytest.approx((10 * 1.0 + 190 * 0.5) / 200)
    assert got["images_per_s_thesis"] == pytest.approx(64 / 0.525)
    short = bench_throughput([2.0, 1.0, 1.0], images_per_step=8, warmup=1)
    assert short == {"images_per_s_steady": 8.0, "images_per_s_thesis": None, "batch_time_avg_at_199": None}
    with pytest.raises(ValueError, match="no timed steps"):
        bench_throughput([1.0, 1.0], 8, warmup=2)


def test_framework_defaults_to_pytorch_and_leaves_the_committed_fingerprints_as_they_were():
    reference = REPO / "results" / "reference" / "vm-2cpu" / "01_throughput_single_gpu" / "b128-ddp-s0"
    from contract.reader import folder_fingerprint

    assert folder_fingerprint(reference) == "0955d2225c7a"  # as before train.framework existed
    cfg = load_config(EXP1, "local", ["train.per_worker_batch=128", "train.backend=ddp"])
    assert cfg.train.framework == "pytorch" and config_fingerprint(cfg) == "0955d2225c7a"
    tf = load_config(EXP1, "local", ["train.per_worker_batch=128", "train.backend=horovod", *TF])
    assert config_fingerprint(tf) not in ("0955d2225c7a", config_fingerprint(
        load_config(EXP1, "local", ["train.per_worker_batch=128", "train.backend=horovod"])))


def test_what_the_framework_measures_is_named_for_the_analysis():
    horovod = load_config(EXP1, "local", ["train.backend=horovod", *TF])
    mwms = load_config(EXP1, "local", ["train.backend=mwms", *TF])
    assert horovod.resolved()["framework"] == "horovod+tensorflow"
    assert mwms.resolved()["framework"] == "tensorflow"
    assert load_config(EXP1, "local", ["train.backend=horovod"]).resolved()["framework"] == "horovod+pytorch"


@pytest.mark.parametrize("sets, message", [
    (["train.backend=mwms"], "MultiWorkerMirroredStrategy: set train.framework = 'tensorflow' too"),
    (["train.backend=ddp", *TF], "trains with train.backend = 'horovod' or 'mwms', not 'ddp'"),
    (["train.backend=mwms", "train.framework=jax"], "train.framework = 'jax' is not one of pytorch, tensorflow"),
    (["train.backend=mwms", "bench.batches=0", *TF], "needs bench.batches > 0"),
    (["train.backend=mwms", "data.kind=generated", *TF], "needs data.kind = 'synthetic'"),
    (["train.backend=mwms", "model.name=resnet18", *TF], "needs model.name one of resnet50, cifar_resnet8"),
    (["train.backend=mwms", "train.precision=bf16", *TF], "needs train.precision = 'fp32'"),
])
def test_a_tensorflow_run_the_trainer_cannot_do_is_one_line(sets, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(EXP1, "local", sets)


def test_the_pytorch_front_door_never_trains_tensorflow_in_its_own_process(tmp_path):
    from trainers.__main__ import main

    config = write_config(tmp_path / "c.toml", {"bench": {"batches": 2}})
    assert main(["train", str(config), "--out", str(tmp_path), "--set", "train.framework=tensorflow",
                 "--set", "train.backend=mwms", "--set", "train.workers=1"]) == 2
    assert "tensorflow" not in sys.modules


@pytest.mark.parametrize("scale", ["local", "gpu", "node", "thesis"])
def test_experiments_1_to_3_have_both_tensorflow_backends_at_every_scale(scale):
    from contract.plan import study_plan

    for experiment in (EXP1, EXP2) + ((EXP3,) if scale != "node" else ()):
        study = study_plan(experiment, scale, quick=False, seeds=None, overrides=[])
        tf_rows = [r for r in study.runs if r.settings.get("train.framework") == "tensorflow"]
        assert {r.settings["train.backend"] for r in tf_rows} == {"horovod", "mwms"}, (experiment.name, scale)
        pytorch = [r for r in study.runs if "train.framework" not in r.settings]
        assert {r.settings.get("train.backend") for r in pytorch} >= {"ddp", "horovod"}
    exp1 = study_plan(EXP1, "local", quick=False, seeds=None, overrides=[])
    assert {r.name for r in exp1.runs} >= {"b32-tensorflow-horovod-s0", "b128-tensorflow-mwms-s0", "b32-ddp-s0"}


def test_the_study_launches_tensorflow_runs_in_processes_of_their_own_and_skips_them_without_it(tmp_path,
                                                                                               monkeypatch):
    from contract.plan import study_plan
    from studies import tf_launch
    from studies.launch import local_commands, planned_runs
    from trainers.tf import available

    study = study_plan(EXP2, "local", quick=False, seeds=None, overrides=[], only=["w2-b32-tensorflow-*"])
    plans = {p.backend: p for p in planned_runs(study, "local", tmp_path)}
    (horovod,) = local_commands(plans["horovod"])
    assert horovod[0].endswith("horovodrun") and horovod[1:5] == ["-np", "2", "-H", "localhost:2"]
    assert horovod[horovod.index("--gloo") + 1:][1:4] == ["-m", "trainers.tf", "train"]
    workers = local_commands(plans["mwms"])
    assert [c[:2] for c in workers] == [["env", "RANK=0"], ["env", "RANK=1"]]
    assert all("WORLD_SIZE=2" in c and c[c.index("-m") + 1] == "trainers.tf" for c in workers)
    monkeypatch.setattr(available, "tensorflow_installed", lambda: False)
    assert tf_launch.tf_skip_line(plans["mwms"]) == "skipped: TensorFlow is not installed here (run `make setup-tf`)"
    monkeypatch.setattr(available, "tensorflow_installed", lambda: True)
    monkeypatch.setattr(available, "horovod_has_tensorflow", lambda: False)
    assert "Horovod is not built with TensorFlow" in tf_launch.tf_skip_line(plans["horovod"])
    assert tf_launch.tf_skip_line(plans["mwms"]) is None


def test_tf_config_of_srun_places_each_nodes_tasks_on_its_host(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError("no scontrol")))
    env = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "gpu[08-09]",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "MASTER_PORT": "12000"}
    assert cluster.tf_config(env) == {"cluster": {"worker": ["gpu08:12001", "gpu08:12002", "gpu09:12001",
                                                            "gpu09:12002"]},
                                      "task": {"type": "worker", "index": 3}}
    assert cluster.expand_nodelist("a[1-2,5],b") == ["a1", "a2", "a5", "b"]
    assert cluster.tasks_per_node("2(x2),1", 3) == [2, 2, 1] and cluster.tasks_per_node("4", 2) == [4, 4]


def test_tf_config_on_one_host_and_the_mistakes_it_refuses():
    one_host = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_PORT": "30000"}
    assert cluster.tf_config(one_host) == {"cluster": {"worker": ["127.0.0.1:30001", "127.0.0.1:30002"]},
                                           "task": {"type": "worker", "index": 1}}
    mpi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "MASTER_PORT": "30000"}
    assert cluster.tf_config(mpi)["cluster"]["worker"] == ["127.0.0.1:30001", "127.0.0.1:30002"]
    assert cluster.tf_config({}) is None and cluster.tf_config({"RANK": "0", "WORLD_SIZE": "1"}) is None
    given = {"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}
    assert cluster.tf_config({"TF_CONFIG": json.dumps(given), "RANK": "0", "WORLD_SIZE": "2"}) == given
    with pytest.raises(ConfigError, match="on several hosts needs their addresses: launch it with srun"):
        cluster.tf_config({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_PORT": "30000"})
