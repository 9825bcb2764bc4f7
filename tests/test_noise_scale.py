"""Gradient noise scale B_simple = tr(Σ) / |G|² (McCandlish et al. 2018, appendix A.1)."""
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tests.helpers import train_in_process, write_config
from tools import noise_scale
from tools.__main__ import main as cli


def test_estimate_inverts_the_expected_squared_norms():
    # |G|² = 4, tr Σ = 64: E|g_4|² = 4 + 64/4 = 20, E|g_128|² = 4 + 64/128 = 4.5
    est = noise_scale.estimate([20.0, 20.0], [4.5, 4.5], b_small=4, b_big=128)
    assert est.grad_sq == pytest.approx(4.0) and est.grad_sq_se == 0
    assert est.trace_cov == pytest.approx(64.0)
    assert est.b_simple == est.b_simple_low == est.b_simple_high == pytest.approx(16.0)
    assert (est.b_small, est.b_big, est.groups) == (4, 128, 2)


def test_the_range_widens_with_the_spread_of_the_groups_and_opens_when_the_gradient_is_unresolved():
    # per-group |G|² estimates 3 and 5 (mean 4, SE 1): the range takes |G|² from 6 down to 2
    groups = noise_scale.estimate([20.0, 20.0], [3.53125, 5.46875], b_small=4, b_big=128)
    assert groups.trace_cov == pytest.approx(64.0)
    assert groups.grad_sq == pytest.approx(4.0) and groups.grad_sq_se == pytest.approx(1.0)
    assert groups.b_simple_low == pytest.approx(groups.trace_cov / 6)
    assert groups.b_simple_high == pytest.approx(groups.trace_cov / 2)
    # the spread of the groups covers zero: B_simple has a lower bound only
    near_zero = noise_scale.estimate([16.0, 16.0], [0.2, 0.9], b_small=4, b_big=128)
    assert near_zero.b_simple_high == math.inf and 0 < near_zero.b_simple_low < near_zero.b_simple
    negative = noise_scale.estimate([16.0, 16.0], [0.1, 0.2], b_small=4, b_big=128)
    assert negative.grad_sq < 0 and negative.b_simple == negative.b_simple_low == negative.b_simple_high == math.inf


def test_estimate_refuses_batches_in_the_wrong_order_or_a_single_group():
    with pytest.raises(ValueError, match="b_small < b_big"):
        noise_scale.estimate([1.0, 1.0], [1.0, 1.0], b_small=8, b_big=8)
    with pytest.raises(ValueError, match="at least two groups"):
        noise_scale.estimate([1.0], [1.0], b_small=4, b_big=8)


@pytest.mark.slow
def test_measure_recovers_the_exact_noise_scale_of_a_finite_data_set():
    """Linear regression on 64 points: the per-example gradients are known exactly, so is tr(Σ)/|G|²."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.5 * torch.randn(64, generator=g)
    model = nn.Linear(5, 1, bias=False)
    nn.init.constant_(model.weight, 0.3)
    loss_fn = lambda out, target: ((out.squeeze(1) - target) ** 2).mean()  # noqa: E731

    per_example = []
    for i in range(64):
        model.zero_grad()
        loss_fn(model(x[i:i + 1]), y[i:i + 1]).backward()
        per_example.append(model.weight.grad.reshape(-1).clone())
    grads = torch.stack(per_example).double()
    mean = grads.mean(0)
    exact = ((grads - mean) ** 2).sum(1).mean() / (mean @ mean)  # sampling with replacement: population covariance

    def batches():  # b_small = 2 examples drawn with replacement
        while True:
            idx = torch.randint(0, 64, (2,), generator=g)
            yield x[idx], y[idx]

    est = noise_scale.measure(model, loss_fn, batches(), workers=8, groups=3000, b_small=2)
    assert est.b_big == 16
    assert est.b_simple == pytest.approx(float(exact), rel=0.1)


def test_noise_scale_of_a_run_folder_from_the_command_line(tmp_path, capsys):
    cfg = write_config(tmp_path / "n.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "run") == 0
    out = tmp_path / "ns.json"
    assert cli(["noise-scale", str(tmp_path / "n" / "run"), "--workers", "4", "--groups", "3", "--json", str(out)]) == 0
    assert cli(["noise-scale", str(tmp_path / "n" / "run"), "--workers", "4", "--groups", "3", "--init"]) == 0
    rows = json.loads(out.read_text())
    assert [r["weights"] for r in rows] == ["epoch 1"]
    assert rows[0]["b_big"] == 4 * rows[0]["b_small"] and rows[0]["groups"] == 3
    assert rows[0]["trace_cov"] > 0
    printed = capsys.readouterr().out
    assert "[epoch 1]: B_simple" in printed and "[initial]: B_simple" in printed
    ckpt = tmp_path / "n" / "run" / "checkpoint.pt"  # a checkpoint of the format before TrainState: its weights read
    state = torch.load(ckpt, weights_only=True)
    del state["version"]
    torch.save(state, ckpt)
    assert cli(["noise-scale", str(tmp_path / "n" / "run"), "--workers", "4", "--groups", "3", "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == rows


def test_update_adds_each_runs_row_to_the_file_and_replaces_only_that_runs(tmp_path):
    """A long study measures each run as it finishes (its checkpoint may not outlive the machine): --update keeps
    the other runs' rows and replaces a run measured again."""
    cfg = write_config(tmp_path / "n.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "run") == 0
    shutil.copytree(tmp_path / "n" / "run", tmp_path / "n" / "other")
    out = tmp_path / "ns.json"
    measure = ["--workers", "4", "--groups", "3", "--json", str(out), "--update"]
    for name in ("run", "other", "run"):
        assert cli(["noise-scale", str(tmp_path / "n" / name), *measure]) == 0
    rows = json.loads(out.read_text())
    assert [Path(r["run"]).name for r in rows] == ["other", "run"]
    assert rows[0]["b_simple"] == rows[1]["b_simple"]  # one checkpoint, one data order: one measurement


def test_a_run_without_a_checkpoint_is_one_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli(["noise-scale", str(tmp_path / "empty")]) == 2
    assert "has no checkpoint.pt" in capsys.readouterr().err
