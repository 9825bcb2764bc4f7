"""The TensorFlow trainer's runs (issue 37), each in processes of its own (never TensorFlow in pytest's process):
the run folder contract, the averaging proved by every run (and a broken average caught), both backends with two
processes, the Keras models' shapes against PyTorch's.

Needs `make setup-tf` (TensorFlow; Horovod built with it for the Horovod tests). Elsewhere these tests skip with one
line; in CI (CI=true) a missing TensorFlow fails them instead, since `make test` runs setup-tf first.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from contract import events
from contract import manifest as declared
from contract import placement
from tests.helpers import REPO, f32, free_port, read_back, records, run, trainer_env, write_config
from trainers.tf.available import horovod_has_tensorflow, tensorflow_installed

pytestmark = pytest.mark.slow
IN_CI = os.environ.get("CI", "").lower() == "true"
TINY_TF = {"bench": {"batches": 4, "warmup_batches": 1}, "train": {"framework": "tensorflow", "workers": 1}}


def need(reason: str | None) -> None:
    if reason:
        (pytest.fail if IN_CI else pytest.skip)(reason)


@pytest.fixture(autouse=True)
def tensorflow_here():
    need(None if tensorflow_installed() else "TensorFlow is not installed; run `make setup-tf`")


def tf_config(tmp_path: Path, backend: str, workers: int) -> Path:
    return write_config(tmp_path / f"{backend}.toml", {**TINY_TF, "train": {**TINY_TF["train"], "backend": backend,
                                                                            "workers": workers}})


def start_workers(config: Path, out: Path, name: str, n: int, **env) -> list:
    """n MultiWorkerMirroredStrategy workers as the study starts them (studies/tf_launch.py)."""
    import subprocess

    port = free_port()
    return [subprocess.Popen([sys.executable, "-m", "trainers.tf", "train", str(config), "--out", str(out), "--run",
                              name], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=trainer_env(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                                             LOCAL_WORLD_SIZE=str(n), MASTER_PORT=str(port), **env))
            for r in range(n)]


def finish(procs: list, timeout: int = 240) -> list[tuple[int, str]]:
    return [(p.wait(timeout=timeout), p.stdout.read()) for p in procs]


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_a_tensorflow_run_keeps_the_run_folder_contract(tmp_path):
    """Started as any run (python -m trainers train), handed to trainers.tf: the same files, read alike."""
    from analysis.logs import parse_tf_cnn_benchmarks
    from analysis.numbers import log_throughput

    config = tf_config(tmp_path, "mwms", 1)
    result = run([sys.executable, "-m", "trainers", "train", str(config), "--out", str(tmp_path), "--run", "one"],
                 timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    run_dir = tmp_path / config.stem / "one"
    assert json.loads((run_dir / "config.json").read_text())["resolved"]["framework"] == "tensorflow"
    m = manifest(run_dir)
    assert (m["status"], m["backend"], m["world_size"], m["weights_agree"]["ranks"]) == ("completed", "mwms", 1, 1)
    assert m["versions"]["tensorflow"] == "2.21.0"
    assert declared.problem(m) is None  # the declared record, written through the run folder as PyTorch's is
    from contract.machine import cpu_vector_isa
    assert m["machine"]["isa"] == cpu_vector_isa() is not None  # reference-add compares it: never left unknown
    (bench,) = records(run_dir, "bench")
    assert (bench["batches"], bench["warmup_batches"], bench["world_size"]) == (4, 1, 1)
    assert bench["images_per_s_steady"] > 0 and bench["images_per_s_thesis"] is None  # fewer than 200 steps
    parsed = log_throughput(parse_tf_cnn_benchmarks((run_dir / "train.log").read_bytes()), gpus=1)
    assert parsed["thesis_images_per_s"] == round(bench["images_per_s_steady"], 2)  # its `total images/sec`
    assert parsed["per_gpu_batch"] == 4 and parsed["bad_lines"] == 0
    if events.available():  # TensorBoard installed (in CI: make setup-tensorboard): the PyTorch trainer's tags
        scalars = read_back(run_dir)
        assert scalars["bench/images_per_s_steady"] == [(5, bench["time"], f32(bench["images_per_s_steady"]))]
        assert set(scalars) == {"bench/images_per_s_steady", "time/data_share", "time/compute_share",
                                "time/comm_share"}


def test_a_tensorflow_config_trains_through_the_front_door(tmp_path):
    """`python -m suite train` trains a TensorFlow config as `python -m trainers train` does (issue 65): the trainer
    hands it to the TensorFlow trainer in its own process, which has not loaded torch."""
    config = tf_config(tmp_path, "mwms", 1)
    result = run([sys.executable, "-m", "suite", "train", str(config), "--out", str(tmp_path), "--run", "door"],
                 timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    m = manifest(tmp_path / config.stem / "door")
    assert (m["status"], m["backend"], m["world_size"], m["versions"]["tensorflow"]) == ("completed", "mwms", 1,
                                                                                         "2.21.0")


def test_mwms_two_workers_end_with_the_same_weights_and_a_broken_average_is_caught(tmp_path):
    config = tf_config(tmp_path, "mwms", 2)
    for code, output in finish(start_workers(config, tmp_path, "averaged", 2)):
        assert code == 0, output[-3000:]
    m = manifest(tmp_path / config.stem / "averaged")
    assert m["status"] == "completed" and m["weights_agree"] == {"ranks": 2, "max_relative_difference": 0.0,
                                                                 "rtol": 1e-05}
    assert [r["local_rank"] for r in m["placement"]] == [0, 1]  # every rank's placement, gathered, as PyTorch's
    assert not placement.problems(m["placement"]) and all(r["threads"] >= 1 for r in m["placement"])
    broken = finish(start_workers(config, tmp_path, "broken", 2, TRAINERS_TF_FAULT="skip-averaging"))
    assert all(code == 1 for code, _ in broken), [o[-2000:] for _, o in broken]
    m = manifest(tmp_path / config.stem / "broken")
    assert m["status"] == "failed" and "their gradients were not averaged" in m["message"]


def horovodrun(config: Path, out: Path, name: str, **env):
    horovodrun = str(Path(sys.executable).with_name("horovodrun"))
    return run([horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m", "trainers.tf", "train",
                str(config), "--out", str(out), "--run", name], timeout=300, env=trainer_env(**env))


def test_horovod_tensorflow_two_ranks_average_and_a_broken_average_is_caught(tmp_path):
    need(None if horovod_has_tensorflow() else "Horovod is not built with TensorFlow; run `make setup-tf`")
    config = tf_config(tmp_path, "horovod", 2)
    result = horovodrun(config, tmp_path, "averaged")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    m = manifest(tmp_path / config.stem / "averaged")
    assert (m["status"], m["world_size"], m["weights_agree"]["max_relative_difference"]) == ("completed", 2, 0.0)
    assert [r["local_rank"] for r in m["placement"]] == [0, 1] and not placement.problems(m["placement"])
    assert json.loads((tmp_path / config.stem / "averaged" / "config.json").read_text())["resolved"][
        "framework"] == "horovod+tensorflow"
    broken = horovodrun(config, tmp_path, "broken", TRAINERS_TF_FAULT="skip-averaging")
    assert broken.returncode != 0
    m = manifest(tmp_path / config.stem / "broken")
    assert m["status"] == "failed" and "their gradients were not averaged" in m["message"]


SHAPES = """
import json, sys
import numpy as np
from contract.config import ModelConfig
from trainers.tf.models import build_keras_model
name, classes, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = build_keras_model(ModelConfig(name=name, num_classes=classes), size)
print(json.dumps(sorted(list(v.shape) for v in model.trainable_variables)))
"""


def keras_shapes(name: str, classes: int, size: int) -> list:
    result = run([sys.executable, "-c", SHAPES, name, str(classes), str(size)], timeout=240,
                 env=trainer_env(TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name, classes, size", [("cifar_resnet20", 100, 32), ("resnet50", 1000, 224)])
def test_the_keras_models_have_the_pytorch_models_layer_shapes(name, classes, size):
    from contract.config import ModelConfig
    from trainers.models import build_model

    def keras_layout(shape):  # PyTorch's (out, in, k, k) kernels and (out, in) dense weights as Keras stores them
        return [*shape[2:], shape[1], shape[0]] if len(shape) == 4 else shape[::-1] if len(shape) == 2 else shape

    model = build_model(ModelConfig(name=name, num_classes=classes))
    torch_shapes = sorted(keras_layout(list(p.shape)) for p in model.parameters())
    assert keras_shapes(name, classes, size) == torch_shapes
