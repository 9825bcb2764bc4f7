"""On a GPU: deterministic runs resume bit-identically, emulated workers find their passes, bf16/compile train.

Each test skips with one line where no CUDA GPU is visible (the CPU versions are in test_precision.py).
"""
import json
import sys

import pytest
import torch

from tests.helpers import final_state, max_difference, records, train, write_config
from tests.test_resilience import preempt_and_resume

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)"),
]

ON_GPU = {"data": {"synthetic_images": 320}, "train": {"epochs": 3, "print_freq": 5, "device": "cuda"}}


def gpu_config(path, **train_settings):
    return write_config(path, {**ON_GPU, "train": {**ON_GPU["train"], **train_settings}})


def test_a_deterministic_run_resumes_bit_identical_to_an_uninterrupted_one(tmp_path):
    cfg = gpu_config(tmp_path / "d.toml", deterministic=True)
    assert train(cfg, tmp_path, "whole").returncode == 0
    assert train(cfg, tmp_path, "again").returncode == 0
    assert max_difference(final_state(tmp_path / "d" / "whole"), final_state(tmp_path / "d" / "again")) == 0.0
    preempt_and_resume(cfg, tmp_path, "cut")
    assert max_difference(final_state(tmp_path / "d" / "whole"), final_state(tmp_path / "d" / "cut")) == 0.0


def test_emulated_workers_find_how_many_fit_a_pass_and_record_it(tmp_path):
    cfg = gpu_config(tmp_path / "e.toml", workers=8, epochs=1)
    result = train(cfg, tmp_path, "e")
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = json.loads((tmp_path / "e" / "e" / "manifest.json").read_text())
    assert 1 <= manifest["workers_per_pass"] <= 8 and manifest["devices"][0].startswith("cuda")


@pytest.mark.parametrize("settings", [{"precision": "bf16", "channels_last": True},
                                      {"precision": "fp16"}, {"precision": "tf32", "compile": True}])
def test_mixed_precision_layouts_and_compile_train_on_the_gpu(tmp_path, settings):
    cfg = gpu_config(tmp_path / "m.toml", epochs=1, **settings)
    result = train(cfg, tmp_path, "m", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    epoch = records(tmp_path / "m" / "m", "epoch")[-1]
    assert torch.isfinite(torch.tensor([epoch["train_loss"], epoch["val_loss"]])).all()


def test_experiment_5s_32_workers_take_a_step_at_the_gpu_scale(tmp_path):
    from tests.helpers import REPO, run

    result = run([sys.executable, "-m", "trainers", "train", str(REPO / "experiments" / "05_linear_scaling"),
                  "--scale", "gpu", "--out", str(tmp_path), "--run", "w32", "--set", "data.kind=synthetic",
                  "--set", "train.workers=32", "--set", "bench.batches=1", "--set", "bench.warmup_batches=0"],
                 timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = json.loads((tmp_path / "05_linear_scaling" / "w32" / "manifest.json").read_text())
    assert manifest["workers"] == 32 and 1 <= manifest["workers_per_pass"] <= 32
