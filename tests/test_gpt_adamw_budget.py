"""What experiment 15 adds to the core (issue 66): AdamW (optim.name = "adamw", trainers/optimizers.py), decoupled
weight decay on the GPT's matrices alone, under the scaling rules and warm-ups of contract/lr.py; and a token budget
(data.train_tokens, data.val_tokens: windows spread over each split, workloads/gpt/build.py), which leaves every
committed run's fingerprint as it was."""
import json
import math

import pytest
import torch

from contract.config import Config, ConfigError, DataConfig, OptimConfig, from_dict, load_config
from contract.fingerprint import config_fingerprint, document_fingerprint
from contract.lr import lr_at
from tests.helpers import records, train_in_process, write_config
from tests.test_gpt_trainer import tiny_corpus
from trainers.optimizers import build_optimizer
from trainers.show_config import not_applying
from workloads import WorkloadConfigError
from workloads.gpt.build import build_datasets
from workloads.gpt.model import GPT
from workloads.gpt.sizes import PRESETS


def gpt_model() -> GPT:
    torch.manual_seed(0)
    return GPT(PRESETS["gpt_local"])


# ---- AdamW ---------------------------------------------------------------------------------------------------------
def test_adamw_decays_the_matrices_and_neither_norms_nor_biases_each_tensor_once():
    """gpt_local: 4 blocks of 4 matrices (qkv, out, up, down), the token embedding (the tied head: one tensor) and
    the position embedding are decayed; each block's 2 LayerNorms (weight, bias) and 4 Linear biases, and the final
    LayerNorm's 2, are not: 18 tensors and 34."""
    model = gpt_model()
    adamw = build_optimizer(model, OptimConfig(name="adamw", weight_decay=0.1, beta1=0.8, beta2=0.95), 1e-3)
    decayed, flat = adamw.param_groups
    assert (len(decayed["params"]), decayed["weight_decay"]) == (18, 0.1)
    assert (len(flat["params"]), flat["weight_decay"]) == (34, 0.0)
    assert all(p.ndim == 2 for p in decayed["params"]) and all(p.ndim == 1 for p in flat["params"])
    assert any(p is model.head.weight for p in decayed["params"])  # the tied head, listed once
    assert len({id(p) for g in adamw.param_groups for p in g["params"]}) == len(list(model.parameters()))
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["betas"] == (0.8, 0.95)


def test_adamws_decay_is_decoupled_a_zero_gradient_shrinks_a_matrix_by_lr_times_decay_and_leaves_a_bias():
    """Loshchilov & Hutter: w <- w - lr (adam_step + wd w). With a zero gradient Adam's moments stay 0, so its step
    is 0 / (0 + eps) = 0 and only the decay moves the weights: matrices by the factor (1 - lr wd), biases not."""
    model = gpt_model()
    lr, wd = 0.01, 0.1
    adamw = build_optimizer(model, OptimConfig(name="adamw", weight_decay=wd), lr)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    adamw.step()
    for name, p in model.named_parameters():
        factor = 1 - lr * wd if p.ndim > 1 else 1.0
        assert torch.equal(p.detach(), before[name] * factor) or torch.allclose(p.detach(), before[name] * factor,
                                                                                rtol=0, atol=1e-9), name


@pytest.mark.parametrize("scaling, warmup, target", [("sqrt", "goyal", 2e-3), ("linear", "gradual", 4e-3)])
def test_adamw_trains_under_each_rule_and_warm_up_at_the_rate_each_step_asks(tmp_path, scaling, warmup, target):
    """4 emulated workers of 2 windows, the rate scaled from 2 windows (the 1-worker batch): sqrt gives base x
    sqrt(8 / 2) = 2 base, linear 4 base, each reached from the 1-worker rate over the first epoch -- goyal linearly
    step by step, gradual (the thesis's) at the next epoch's start -- then held (decay none). Every step's recorded
    rate is lr_at's, every parameter group of AdamW trains at it, and the loss falls."""
    config = write_config(tmp_path / "a.toml", {
        "model": {"name": "gpt_local"}, "data": {"kind": "tokens", "path": tiny_corpus(tmp_path)},
        "train": {"workers": 4, "per_worker_batch": 2, "backend": "emulated", "epochs": 3},
        "optim": {"name": "adamw", "weight_decay": 0.1, "beta2": 0.95},
        "lr": {"base": 1e-3, "base_batch": 2, "scaling": scaling, "warmup": warmup, "warmup_epochs": 1,
               "decay": "none"}})
    assert train_in_process(config, tmp_path, "r") == 0
    run_dir = tmp_path / "a" / "r"
    document = json.loads((run_dir / "config.json").read_text())
    assert document["resolved"]["lr"] == pytest.approx(target)
    assert document["resolved"]["warmup_start_lr"] == pytest.approx(1e-3)
    policy = from_dict(document).lr_policy()
    steps = records(run_dir, "iter")
    n = steps[0]["iters"]  # 26 windows, 8 a step: 3 steps an epoch
    assert [s["lr"] for s in steps] == pytest.approx([lr_at(s["epoch"], s["iter"], n, policy) for s in steps])
    warming = [1e-3 + (target - 1e-3) * i / n for i in range(n)] if warmup == "goyal" else [1e-3] * n
    assert [s["lr"] for s in steps] == pytest.approx(warming + [target] * (len(steps) - n))
    groups = torch.load(run_dir / "checkpoint.pt", weights_only=True)["optimizer"]["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([target, target])
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    epochs = records(run_dir, "epoch")
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"] < math.log(256) + 0.5


# ---- the token budget ----------------------------------------------------------------------------------------------
def gpt_config(path: str, **data) -> Config:
    return from_dict({"model": {"name": "gpt_local"}, "data": {"kind": "tokens", "path": path, **data},
                      "train": {"channels_last": False}})


def test_a_token_budget_takes_windows_spread_evenly_over_each_split(tmp_path):
    """The tiny corpus: 26 training windows of 128 tokens, 2 validation windows. 5 windows of training (640 tokens,
    and 700: a part window is not read) are windows 0, 5, 10, 15, 20 (i x 26 // 5); 0 reads every window."""
    folder = tiny_corpus(tmp_path)
    whole, whole_val, _ = build_datasets(gpt_config(folder), tmp_path)
    assert (len(whole), len(whole_val)) == (26, 2)
    for tokens in (640, 700):
        train, val, described = build_datasets(gpt_config(folder, train_tokens=tokens, val_tokens=128), tmp_path)
        assert [train[i][0].tolist() for i in range(5)] == [whole[i][0].tolist() for i in (0, 5, 10, 15, 20)]
        assert len(train) == 5 and len(val) == 1 and val[0][1].tolist() == whole_val[0][1].tolist()
        assert described["windows"] == {"train": 5, "val": 1}


@pytest.mark.parametrize("data, message", [
    ({"train_tokens": 27 * 128}, "data.train_tokens = 3456 is 27 windows of 128 tokens; train.bin holds 26"),
    ({"val_tokens": 100}, "data.val_tokens = 100 is 0 windows of 128 tokens; val.bin holds 2"),
])
def test_a_budget_the_split_cannot_hold_is_one_line(tmp_path, data, message):
    with pytest.raises(WorkloadConfigError, match="^" + message):
        build_datasets(gpt_config(tiny_corpus(tmp_path), **data), tmp_path)


def test_a_negative_budget_is_refused_where_the_config_is_read(tmp_path):
    config = write_config(tmp_path / "c.toml", {"model": {"name": "gpt_local"}, "data": {"kind": "tokens"}})
    with pytest.raises(ConfigError, match="data.train_tokens = -1 must be >= 0"):
        load_config(config, "local", ["data.train_tokens=-1"])


def test_the_budget_at_0_leaves_every_fingerprint_as_it_was_and_a_budget_is_another_condition():
    """A config.json written before the budget existed (no train_tokens, val_tokens) hashes as the same config with
    them at 0; any budget is another condition."""
    before = json.loads(json.dumps(Config().to_dict()))
    for key in ("train_tokens", "val_tokens"):
        del before["data"][key]
    assert document_fingerprint({**before, "scale": "thesis"}) == config_fingerprint(Config())
    budgeted = Config(data=DataConfig(train_tokens=1024))
    assert config_fingerprint(budgeted) != config_fingerprint(Config())


def test_the_budget_is_read_by_a_token_kind_and_said_unread_by_the_images():
    doc = {"data": {"kind": "generated"}, "model": {"name": "cifar_resnet8"}}
    assert ("data", "train_tokens") in not_applying(doc) and ("data", "val_tokens") in not_applying(doc)
    tokens = {"data": {"kind": "tokens"}, "model": {"name": "gpt_local"}}
    assert ("data", "train_tokens") not in not_applying(tokens)
