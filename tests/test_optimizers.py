"""The optimizers beside SGD (optim.name = lars, lamb, radam, adamw; trainers/optimizers.py) on every backend: they
train, are recorded, resume bit-identically, and 2 emulated workers match DDP over 2 gloo processes as SGD does."""
import json

import pytest
import torch

from tests.helpers import (final_state, max_difference, records, run, torchrun, train, train_in_process,
                           write_config)
from tests.test_horovod import horovodrun, horovod_missing, need, trainer_args
from tests.test_resilience import SLOWER, preempt_and_resume
from contract.config import ModelConfig, OptimConfig
from trainers.models import build_model
from trainers.optimizers import build_optimizer

LARGE_BATCH = ["lars", "lamb", "radam", "adamw"]  # the large-batch ones of experiment 12, and the GPT's AdamW
RATES = {"sgd": 0.05, "lars": 0.5, "lamb": 0.01, "radam": 0.01, "adamw": 0.01}  # per 8 images, each in its range


def optim_config(path, name, **train):
    return write_config(path, {"optim": {"name": name}, "lr": {"base": RATES[name]}, "train": train})


@pytest.mark.parametrize("name", LARGE_BATCH)
def test_each_optimizer_trains_emulated_workers_and_is_recorded(tmp_path, name):
    cfg = optim_config(tmp_path / f"{name}.toml", name)
    assert train_in_process(cfg, tmp_path, name) == 0
    run_dir = tmp_path / name / name
    assert json.loads((run_dir / "config.json").read_text())["optim"]["name"] == name
    epochs = records(run_dir, "epoch")
    assert len(epochs) == 2 and all(torch.isfinite(torch.tensor(e["train_loss"])) for e in epochs)
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)["optimizer"]["state"]
    assert state  # the optimizer's own state (momentum, Adam's moments) is in the checkpoint
    sgd = optim_config(tmp_path / "sgd.toml", "sgd")
    assert train_in_process(sgd, tmp_path, "sgd") == 0
    assert max_difference(final_state(run_dir), final_state(tmp_path / "sgd" / "sgd")) > 1e-3  # not SGD's steps


def test_one_worker_in_one_process_trains_with_each(tmp_path):
    for name in LARGE_BATCH:
        cfg = optim_config(tmp_path / f"{name}.toml", name, workers=1, backend="single", epochs=1)
        assert train_in_process(cfg, tmp_path, name) == 0, name


def test_lars_lamb_and_adamw_neither_adapt_nor_decay_batchnorm_and_biases_unless_asked():
    model = build_model(ModelConfig(name="cifar_resnet8", num_classes=10, width=8))
    lars = build_optimizer(model, OptimConfig(name="lars"), 0.1)
    weights, flat = lars.param_groups
    assert all(p.ndim > 1 for p in weights["params"]) and weights["weight_decay"] == 1e-4
    assert all(p.ndim == 1 for p in flat["params"]) and flat["weight_decay"] == 0.0  # timm adapts neither
    assert len(weights["params"]) + len(flat["params"]) == len(list(model.parameters()))
    everything = build_optimizer(model, OptimConfig(name="lamb", exclude_bn_bias=False), 0.1)
    assert len(everything.param_groups) == 1 and everything.defaults["betas"] == (0.9, 0.999)
    adamw = build_optimizer(model, OptimConfig(name="adamw", weight_decay=0.1, beta2=0.95), 0.1)
    assert [group["weight_decay"] for group in adamw.param_groups] == [0.1, 0.0]
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["betas"] == (0.9, 0.95)


@pytest.mark.parametrize("setting, message", [
    ("optim.name=adam", "optim.name = 'adam' is not one of sgd, lars, lamb, radam, adamw"),
    ("optim.beta2=1.0", "optim.beta2 = 1.0 must be in [0, 1)"),
    ("optim.trust_coefficient=0", "optim.trust_coefficient"),
    ("lr.decay=cosine", "lr.decay"),
    ("lr.power=0", "lr.power"),
])
def test_bad_optimizer_settings_are_one_line_and_exit_2(tmp_path, capsys, setting, message):
    cfg = write_config(tmp_path / "c.toml")
    assert train_in_process(cfg, tmp_path, "c", "--set", setting) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "c" / "c").exists()


# ----------------------------------------------------------------------------------------------------------------
# Slow: real processes
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE_BATCH)
def test_a_preempted_run_resumes_bit_identically_with_each_optimizer(tmp_path, name):
    cfg = write_config(tmp_path / "r.toml", {**SLOWER, "optim": {"name": name}, "lr": {"base": RATES[name]}})
    assert train(cfg, tmp_path, "whole").returncode == 0
    preempt_and_resume(cfg, tmp_path, "cut")
    assert max_difference(final_state(tmp_path / "r" / "whole"), final_state(tmp_path / "r" / "cut")) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE_BATCH)
def test_two_emulated_workers_match_ddp_over_two_gloo_processes(tmp_path, name):
    ddp = torchrun(2, write_config(tmp_path / "ddp.toml", {"train": {"backend": "ddp"}, "optim": {"name": name},
                                                          "lr": {"base": RATES[name]}}), tmp_path, "ddp")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    # one worker a pass: each gradient computed as its DDP process computes it (a pass of both rounds its sums
    # otherwise, which LAMB's per-element normalisation makes 9.5e-5 after 12 steps)
    emu = train(write_config(tmp_path / "emu.toml", {"train": {"backend": "emulated", "workers_per_pass": 1},
                                                     "optim": {"name": name}, "lr": {"base": RATES[name]}}),
                tmp_path, "emu")
    assert emu.returncode == 0, emu.stderr[-3000:]
    assert max_difference(final_state(tmp_path / "ddp" / "ddp"), final_state(tmp_path / "emu" / "emu")) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE_BATCH)
def test_each_optimizer_trains_under_horovodrun_as_under_ddp(tmp_path, name):
    need(horovod_missing())
    settings = {"optim": {"name": name}, "lr": {"base": RATES[name]}}
    ddp = torchrun(2, write_config(tmp_path / "ddp.toml", {"train": {"backend": "ddp"}, **settings}), tmp_path, "d")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    hvd_cfg = write_config(tmp_path / "hvd.toml", {"train": {"backend": "horovod"}, **settings})
    result = run([horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2", *trainer_args(hvd_cfg, tmp_path, "h")])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert max_difference(final_state(tmp_path / "hvd" / "h"), final_state(tmp_path / "ddp" / "d")) < 1e-5
