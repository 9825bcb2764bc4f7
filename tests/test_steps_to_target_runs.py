"""What experiment 13 (steps to a target accuracy) needs of a run: a rate that does not decay (lr.decay = "none"), a
held-out split of the training set to tune on (data.holdout_share), a run that ends at its target
(train.stop_at_top1), and study seeds a tuning run never drew ([study] extra's first_seed)."""
from __future__ import annotations

import json

import pytest
import torch

from contract.config import ConfigError, held_out_count, load_config
from contract.lr import Policy, lr_at
from tests.helpers import REPO, records, train_in_process, write_config

GENERATED = {"data": {"kind": "generated", "classes": 4, "per_class": 6, "val_per_class": 2, "image_size": 16,
                      "loader_workers": 0},
             "model": {"num_classes": 4}, "train": {"epochs": 4, "workers": 1, "per_worker_batch": 4}}


# ---- lr.decay = "none" ----------------------------------------------------------------------------------------
def test_no_decay_keeps_the_target_after_the_warmup_to_the_last_iteration():
    p = Policy(target=1.6, start=0.05, warmup="goyal", warmup_epochs=2, decay="none", epochs=10)
    assert lr_at(0, 0, 10, p) == pytest.approx(0.05)
    assert lr_at(1, 5, 10, p) == pytest.approx(0.05 + 1.55 * 15 / 20)
    assert [lr_at(e, i, 10, p) for e in (2, 5, 9) for i in (0, 9)] == [1.6] * 6


# ---- data.holdout_share ---------------------------------------------------------------------------------------
def test_the_held_out_split_takes_each_class_s_last_images_floored_at_least_one():
    from trainers.data.folder import held_out_split

    targets = [0] * 5 + [1] * 10 + [0] * 5  # class 0: indices 0-4 and 15-19
    train, held = held_out_split(targets, 0.2)
    assert held == [13, 14, 18, 19] and train == [i for i in range(20) if i not in held]
    assert held_out_count(0.2, 4) == 1 and held_out_count(0.25, 10) == 2 and held_out_count(0.0, 10) == 0


def test_a_held_out_share_is_refused_where_it_cannot_work(tmp_path):
    config = write_config(tmp_path / "c.toml", GENERATED)
    with pytest.raises(ConfigError, match=r"data.holdout_share = 1.0 must be a share"):
        load_config(config, "local", ["data.holdout_share=1.0"])
    with pytest.raises(ConfigError, match=r"leaves no training image of the 1 a class"):
        load_config(config, "local", ["data.holdout_share=0.5", "data.per_class=1"])
    with pytest.raises(ConfigError, match=r"synthetic data has nothing to hold out"):
        load_config(write_config(tmp_path / "s.toml"), "local", ["data.holdout_share=0.2"])


@pytest.mark.parametrize("decoded", [True, False])
def test_held_out_images_leave_training_and_are_validated_on_as_validation_images_are(tmp_path, decoded):
    from trainers.data import build_datasets
    from trainers.data.folder import held_out_split
    from trainers.data.memory import val_resize_crop

    config = write_config(tmp_path / "c.toml", GENERATED)
    train, val = build_datasets(load_config(config, "local").data, 4, 0, decoded=decoded)
    kept, held = build_datasets(load_config(config, "local", ["data.holdout_share=0.2"]).data, 4, 0, decoded=decoded)
    assert (len(train), len(val), len(kept), len(held)) == (24, 8, 20, 4)  # one of each class's 6 held out
    targets = train.targets.tolist() if decoded else train.targets
    kept_at, held_at = held_out_split(targets, 0.2)
    if decoded:  # the images themselves: training's without the held-out ones; those centre-cropped, unaugmented
        assert torch.equal(kept.images, train.images[kept_at])
        assert torch.equal(held.images, val_resize_crop(train.images[held_at], 16)) and not held.random
    else:
        assert kept.samples == [train.samples[i] for i in kept_at]
        assert held.samples == [train.samples[i] for i in held_at] and not held.random_transform
    assert sorted(int(held[i][1]) for i in range(4)) == [0, 1, 2, 3]
    assert not any(torch.equal(held[0][0], val[i][0]) for i in range(len(val)))  # no validation image


# ---- train.stop_at_top1 ---------------------------------------------------------------------------------------
def test_a_run_ends_after_the_first_epoch_that_reaches_its_target_and_the_epochs_before_are_unchanged(tmp_path):
    full = write_config(tmp_path / "full.toml", GENERATED)
    assert train_in_process(full, tmp_path, "r") == 0
    whole = records(tmp_path / "full" / "r", "epoch")
    reached = [e for e in whole if e["val_top1"] > 0]
    assert reached, "no epoch above 0 % top-1: pick another seed for this test"
    target, at = reached[0]["val_top1"], reached[0]["epoch"]
    stopped = write_config(tmp_path / "stop.toml", {**GENERATED, "train": {**GENERATED["train"],
                                                                           "stop_at_top1": target}})
    assert train_in_process(stopped, tmp_path, "r") == 0
    run_dir = tmp_path / "stop" / "r"
    cut = records(run_dir, "epoch")
    assert [e["epoch"] for e in cut] == list(range(at + 1))
    assert [e["val_top1"] for e in cut] == [e["val_top1"] for e in whole[:at + 1]]
    assert [e["train_loss"] for e in cut] == [e["train_loss"] for e in whole[:at + 1]]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["epochs_done"] == at + 1
    assert "stopped at the target" in manifest["message"]
    # run again (a resumed study): it has reached its target, so it trains no further epoch
    assert train_in_process(stopped, tmp_path, "r", "--resume", "force") == 0
    assert [e["epoch"] for e in records(run_dir, "epoch")] == list(range(at + 1))


def test_stop_at_top1_is_a_percent(tmp_path):
    with pytest.raises(ConfigError, match=r"train.stop_at_top1 = 150.0 must be a top-1 in percent"):
        load_config(write_config(tmp_path / "c.toml"), "local", ["train.stop_at_top1=150.0"])


def test_the_new_settings_at_their_defaults_leave_the_committed_fingerprints_and_are_other_conditions_when_set():
    from contract.fingerprint import config_fingerprint
    from contract.reader import folder_fingerprint

    exp5 = REPO / "experiments" / "05_linear_scaling" / "config.toml"
    plain = config_fingerprint(load_config(exp5, "local", ["train.workers=32"]))
    assert plain == folder_fingerprint(REPO / "results/reference/vm-2cpu/05_linear_scaling/w32-s0") == "c9c3ffca2274"
    for setting in ("train.stop_at_top1=50.0", "data.holdout_share=0.2", "lr.decay=\"none\""):
        assert config_fingerprint(load_config(exp5, "local", ["train.workers=32", setting])) != plain


# ---- [study] extra's first_seed ---------------------------------------------------------------------------------
def test_an_extra_run_s_seeds_may_start_past_the_tuning_seed(tmp_path):
    from contract.plan import expand

    config = write_config(tmp_path / "c.toml", {})
    text = config.read_text() + ('[study]\nextra = [{ run = "tune", "train.workers" = 2 }, '
                                 '{ run = "study", "train.workers" = 2, seeds = 3, first_seed = 1 }]\n')
    config.write_text(text)
    runs = expand(config, "local", need_data=False)
    assert [(r.name, r.cfg.train.seed) for r in runs] == [("tune-s3", 3), ("study-s1", 1), ("study-s2", 2),
                                                          ("study-s3", 3)]
    config.write_text(text.replace("first_seed = 1", "first_seed = -1"))
    with pytest.raises(ConfigError, match=r"study first_seed = -1 must be a whole number >= 0"):
        expand(config, "local", need_data=False)


# ---- train.eval_every: steps to a target at k steps' resolution (experiment 13's second edition) ----------------
EVERY = {**GENERATED, "train": {**GENERATED["train"], "eval_every": 2}}  # 6 steps an epoch: evaluations at 2 and 4


def test_evaluations_every_k_steps_are_recorded_and_change_no_training_step(tmp_path):
    assert train_in_process(write_config(tmp_path / "plain.toml", GENERATED), tmp_path, "r") == 0
    assert train_in_process(write_config(tmp_path / "every.toml", EVERY), tmp_path, "r") == 0
    plain, every = records(tmp_path / "plain" / "r", "epoch"), records(tmp_path / "every" / "r", "epoch")
    evals = records(tmp_path / "every" / "r", "eval")
    # every second step over the whole run, never an epoch's last (the epoch's own validation is that one)
    assert [e["step"] for e in evals] == [2, 4, 8, 10, 14, 16, 20, 22]
    assert [(e["epoch"], e["iter"]) for e in evals[:3]] == [(0, 1), (0, 3), (1, 1)]
    assert [e["train_loss"] for e in every] == [e["train_loss"] for e in plain]  # evaluating trains nothing
    assert [e["val_top1"] for e in every] == pytest.approx([e["val_top1"] for e in plain])
    assert records(tmp_path / "plain" / "r", "eval") == []


def test_a_run_with_eval_every_ends_at_the_first_evaluation_that_reaches_its_target(tmp_path):
    assert train_in_process(write_config(tmp_path / "every.toml", EVERY), tmp_path, "r") == 0
    evals = records(tmp_path / "every" / "r", "eval")
    first = next((e for e in evals if e["val_top1"] > 0), None)
    assert first is not None, "no evaluation above 0 % top-1: pick another seed for this test"
    stopped = write_config(tmp_path / "stop.toml", {**EVERY, "train": {**EVERY["train"],
                                                                       "stop_at_top1": first["val_top1"]}})
    assert train_in_process(stopped, tmp_path, "r") == 0
    run_dir = tmp_path / "stop" / "r"
    cut = records(run_dir, "eval")
    assert cut[-1]["step"] == first["step"] and [e["step"] for e in cut] == [e["step"] for e in evals
                                                                             if e["step"] <= first["step"]]
    epochs = records(run_dir, "epoch")
    assert [e["epoch"] for e in epochs] == list(range(first["epoch"] + 1))  # the epoch it reached it in, cut short
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"
    assert train_in_process(stopped, tmp_path, "r", "--resume", "force") == 0  # resumed: nothing more is trained
    assert records(run_dir, "eval")[-1]["step"] == first["step"]


def test_eval_every_is_a_step_count_and_absent_from_the_committed_fingerprints_at_zero(tmp_path):
    with pytest.raises(ConfigError, match=r"train.eval_every = -1 must be >= 0"):
        load_config(write_config(tmp_path / "c.toml"), "local", ["train.eval_every=-1"])
    from contract.fingerprint import config_fingerprint

    config = write_config(tmp_path / "g.toml", GENERATED)
    assert config_fingerprint(load_config(config, "local", ["train.eval_every=0"])) == \
        config_fingerprint(load_config(config, "local"))
    assert config_fingerprint(load_config(config, "local", ["train.eval_every=2"])) != \
        config_fingerprint(load_config(config, "local"))


def test_a_run_with_eval_every_interrupted_mid_epoch_resumes_to_the_same_evaluations(tmp_path, monkeypatch):
    """The study's resumption with k-step evaluations: cut after step 9 (epoch 1, after the evaluation at step 8),
    resumed, it records the evaluations and weights of a run never cut."""
    from tests.helpers import final_state, max_difference
    from tests.test_precision import preempt_at

    config = write_config(tmp_path / "every.toml", EVERY)
    assert train_in_process(config, tmp_path, "whole") == 0
    preempt_at(monkeypatch, 6 + 3)
    assert train_in_process(config, tmp_path, "cut") == 4
    monkeypatch.undo()
    assert train_in_process(config, tmp_path, "cut", "--resume", "auto") == 0
    whole, cut = records(tmp_path / "every" / "whole", "eval"), records(tmp_path / "every" / "cut", "eval")
    assert [(e["step"], e["val_top1"], e["val_loss"]) for e in cut] == \
        [(e["step"], e["val_top1"], e["val_loss"]) for e in whole]
    assert max_difference(final_state(tmp_path / "every" / "whole"), final_state(tmp_path / "every" / "cut")) == 0.0


def test_an_epoch_cut_at_its_target_records_the_steps_it_trained_and_counts_at_its_stopping_evaluation(tmp_path):
    """Issue 62: a run stopped at its target between two progress lines recorded the images, loss and accuracy of
    its last line (4 images where 8 were trained), and the reader put that epoch's end before the evaluation that
    reached the target. A real run: its epoch record is every step it trained, and its steps to the target are its
    stopping evaluation's step, read from evaluations alone."""
    from analysis.experiments.steps_to_target_e2 import curve, first_reach
    from analysis.runs import load_runs
    from contract.invariants import check_run
    from contract.reader import read_document, read_metrics

    every_step = {**EVERY, "train": {**EVERY["train"], "print_freq": 1}}  # an iter record at every step
    assert train_in_process(write_config(tmp_path / "whole.toml", every_step), tmp_path, "r") == 0
    evals = records(tmp_path / "whole" / "r", "eval")
    first = next((e for e in evals if e["val_top1"] > 0), None)
    assert first is not None, "no evaluation above 0 % top-1: pick another seed for this test"
    steps = first["iter"] + 1  # of its epoch: 2 or 4 of 6, never the last (that evaluation is the epoch's own)
    assert steps < 6
    stopped = write_config(tmp_path / "stop.toml", {**EVERY, "train": {**EVERY["train"], "print_freq": 1000,
                                                                       "stop_at_top1": first["val_top1"]}})
    assert train_in_process(stopped, tmp_path, "r") == 0
    run_dir = tmp_path / "stop" / "r"
    cut = records(run_dir, "epoch")[-1]
    assert (cut["epoch"], cut["steps"], cut["step"], cut["images"]) == (first["epoch"], steps, first["step"], 4 * steps)
    losses = [r["loss"] for r in records(tmp_path / "whole" / "r", "iter") if r["epoch"] == first["epoch"]][:steps]
    assert cut["train_loss"] == pytest.approx(sum(losses) / steps, rel=1e-6)  # every step's, not the first's alone
    assert check_run(read_document(run_dir / "config.json")[0], read_document(run_dir / "manifest.json")[0],
                     read_metrics(run_dir).records) == []
    df = load_runs(tmp_path / "stop")
    reach = first_reach(curve(df[df["kind"] == "eval"], df[df["kind"] == "epoch"]), first["val_top1"])
    assert reach["steps"] == first["step"]
