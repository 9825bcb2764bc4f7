"""The thesis's learning-rate formulas, pinned with the thesis's own numbers (appendices 5-15, tables 10-15)."""
import pytest

from contract.lr import Policy, lr_at, scaled_lr, schedule, single_worker_lr


@pytest.mark.parametrize(
    "workers, per_worker, expected",
    [(1, 128, 0.05), (8, 128, 0.4), (16, 128, 0.8), (24, 128, 1.2), (32, 128, 1.6), (32, 32, 0.4)],
)
def test_linear_rule_gives_the_thesis_rates(workers, per_worker, expected):
    assert scaled_lr(0.1, 256, workers * per_worker, "linear") == pytest.approx(expected)


def test_naive_rule_keeps_the_base_rate_whatever_the_batch():
    assert scaled_lr(0.1, 256, 32 * 128, "none") == 0.1


def test_sqrt_rule():
    assert scaled_lr(0.1, 256, 1024, "sqrt") == pytest.approx(0.2)


def test_unknown_scaling_is_refused():
    with pytest.raises(ValueError, match="unknown lr scaling"):
        scaled_lr(0.1, 256, 256, "cubic")


def test_single_worker_rate_is_appendix_13s_base():
    assert single_worker_lr(0.1, 256, 128) == pytest.approx(0.05)
    assert single_worker_lr(0.1, 256, 32) == pytest.approx(0.0125)


def _policy(**kw):
    defaults = dict(target=1.6, start=0.05, decay="milestones")
    return Policy(**{**defaults, **kw})


def test_stepping_warmup_is_appendix_9():
    # appendix 9: global_lr * (epoch + 1) / (warmup_epochs + 1), 32 GPUs at 1.6
    p = _policy(warmup="stepping", warmup_epochs=5)
    got = schedule(p, 7)
    assert got == pytest.approx([1.6 / 6, 3.2 / 6, 0.8, 6.4 / 6, 8.0 / 6, 1.6, 1.6])


def test_gradual_warmup_is_appendix_13():
    # appendix 13: base 0.05 = (128/256)*0.1, step (1.6 - 0.05)/5 = 0.31
    p = _policy(warmup="gradual", warmup_epochs=5)
    assert schedule(p, 6) == pytest.approx([0.05, 0.36, 0.67, 0.98, 1.29, 1.6])


def test_gradual_10_epoch_warmup_is_appendix_15_at_24_gpus():
    p = _policy(target=1.2, warmup="gradual", warmup_epochs=10)
    got = schedule(p, 11)
    assert got[0] == pytest.approx(0.05)
    assert got[1] == pytest.approx(0.165)
    assert got[9] == pytest.approx(1.085)
    assert got[10] == pytest.approx(1.2)


def test_warmup_rate_is_constant_within_an_epoch_for_the_thesis_policies():
    for warmup in ("stepping", "gradual"):
        p = _policy(warmup=warmup, warmup_epochs=5)
        assert lr_at(2, 0, 100, p) == lr_at(2, 99, 100, p)


def test_goyal_warmup_ramps_per_iteration_from_the_single_worker_rate():
    p = _policy(warmup="goyal", warmup_epochs=5)
    assert lr_at(0, 0, 100, p) == pytest.approx(0.05)
    assert lr_at(2, 50, 100, p) == pytest.approx(0.05 + 1.55 * 250 / 500)
    assert lr_at(4, 99, 100, p) < 1.6
    assert lr_at(5, 0, 100, p) == pytest.approx(1.6)


def test_step_decay_every_30_epochs_is_experiment_4():
    p = Policy(target=0.1, start=0.05, decay="step", step_every=30)
    got = schedule(p, 90)
    assert got[29] == pytest.approx(0.1)
    assert got[30] == pytest.approx(0.01)
    assert got[59] == pytest.approx(0.01)
    assert got[60] == pytest.approx(0.001)
    assert got[89] == pytest.approx(0.001)


def test_milestone_decay_at_30_60_80_is_experiments_5_to_9():
    got = schedule(_policy(warmup="stepping", warmup_epochs=5), 90)
    assert got[29] == pytest.approx(1.6)
    assert got[30] == pytest.approx(0.16)
    assert got[60] == pytest.approx(0.016)
    assert got[79] == pytest.approx(0.016)
    assert got[80] == pytest.approx(0.0016)
    assert len(got) == 90


# ---- the per-iteration gradual warm-up the miniature runs (experiments 8 and 9 at the local scale) ---------------
def test_per_iteration_gradual_passes_through_the_thesis_staircase_at_every_epoch_start():
    # the thesis's per-epoch steps (appendix 13) are the per-iteration line sampled at iteration 0 of each epoch
    stairs, ramp = _policy(warmup="gradual", warmup_epochs=5), _policy(warmup="goyal", warmup_epochs=5)
    for epoch in range(7):
        assert lr_at(epoch, 0, 100, ramp) == pytest.approx(lr_at(epoch, 0, 100, stairs))


def test_one_epoch_local_warmup_ramps_instead_of_jumping():
    # local experiment 8 at 32 workers: 63 steps an epoch, 1-worker rate 0.025, target 0.8, one warm-up epoch
    p = Policy(target=0.8, start=0.025, warmup="goyal", warmup_epochs=1, decay="milestones", milestones=(6, 12, 16))
    rates = [lr_at(0, i, 63, p) for i in range(63)] + [lr_at(1, 0, 63, p)]
    assert rates[0] == pytest.approx(0.025)
    assert rates[-1] == pytest.approx(0.8)
    steps = [b - a for a, b in zip(rates, rates[1:])]
    assert all(s == pytest.approx(0.775 / 63) for s in steps)  # no jump: every step is 1/63 of the way
    # the per-epoch formula with one warm-up epoch is the jump the issue found: 0.025 for 63 steps, then 0.8
    jump = Policy(target=0.8, start=0.025, warmup="gradual", warmup_epochs=1, decay="milestones")
    assert lr_at(0, 62, 63, jump) == pytest.approx(0.025) and lr_at(1, 0, 63, jump) == pytest.approx(0.8)


@pytest.mark.parametrize("experiment,local_steps", [("08_gradual_warmup_5", 4), ("09_gradual_warmup_10", 8)])
def test_gradual_experiments_warm_up_per_epoch_at_every_scale(experiment, local_steps):
    """The thesis's per-epoch gradual warm-up everywhere: at 72 local epochs its 5 (10) of 90 epochs are 4 (8), a
    ramp of that many equal steps from the 1-worker rate, as the thesis's 5 (10)."""
    from pathlib import Path

    from contract.config import load_config

    folder = Path(__file__).resolve().parents[1] / "experiments" / experiment
    for scale in ("thesis", "gpu", "local"):
        assert load_config(folder, scale).lr.warmup == "gradual"
    local = load_config(folder, "local", ["train.workers=32"])
    policy = local.lr_policy()
    rates = [lr_at(e, 0, 63, policy) for e in range(local_steps + 1)]
    assert rates[0] == pytest.approx(0.05) and rates[-1] == pytest.approx(1.6)  # 0.1 per 8: 4 and 128 images
    assert len(set(round(r, 9) for r in rates)) == local_steps + 1  # a new rate every warm-up epoch
    assert all(b - a == pytest.approx(rates[1] - rates[0]) for a, b in zip(rates[:-1], rates[1:-1]))


# ----------------------------------------------------------------------------------------------------------------
# Polynomial decay (lr.decay = "poly", power 2: You et al.'s LARS schedule), for experiment 12
# ----------------------------------------------------------------------------------------------------------------
def test_poly_decay_falls_quadratically_to_zero_over_the_run():
    p = Policy(target=1.0, start=1.0, decay="poly", epochs=10, power=2.0)
    assert lr_at(0, 0, 10, p) == 1.0
    assert lr_at(5, 0, 10, p) == pytest.approx(0.25)  # half way: (1 - 1/2) ** 2
    assert lr_at(2, 5, 10, p) == pytest.approx(0.75 ** 2)  # iteration 25 of 100
    assert lr_at(9, 9, 10, p) == pytest.approx(0.01 ** 2)  # the last iteration: just above 0
    assert schedule(p, 4) == pytest.approx([1.0, 0.81, 0.64, 0.49])  # per epoch: (1 - e / 10) ** 2


def test_poly_decay_starts_where_the_warmup_ends():
    p = Policy(target=1.6, start=0.05, warmup="goyal", warmup_epochs=2, decay="poly", epochs=10, power=2.0)
    assert lr_at(1, 5, 10, p) == pytest.approx(0.05 + 1.55 * 15 / 20)  # still warming up
    assert lr_at(2, 0, 10, p) == pytest.approx(1.6)  # the target when warm-up ends
    assert lr_at(6, 0, 10, p) == pytest.approx(1.6 * 0.25)  # 40 of the 80 iterations after it
    assert lr_at(4, 0, 10, Policy(target=1.0, start=1.0, decay="poly", epochs=10, power=1.0)) == pytest.approx(0.6)
