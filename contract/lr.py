"""Learning-rate policies of the thesis, as pure functions.

Scaling rules pick the target rate from the global batch; warm-up and decay pick the rate at a point of training.
Every formula is the thesis's own (appendices 5, 7, 9, 13, 15) or Goyal et al.'s, and each is pinned in
tests/test_lr.py with the thesis's numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SCALINGS = ("none", "linear", "sqrt")
WARMUPS = ("none", "stepping", "gradual", "goyal")
DECAYS = ("step", "milestones", "poly", "none")


@dataclass(frozen=True)
class Policy:
    """Everything `lr_at` needs, resolved from the config and the world size."""

    target: float  # the rate after the scaling rule
    start: float  # the single-worker rate a gradual or goyal warm-up starts from
    warmup: str = "none"
    warmup_epochs: int = 0
    decay: str = "step"
    step_every: int = 30
    milestones: tuple[int, ...] = (30, 60, 80)
    gamma: float = 0.1
    epochs: int = 90  # the run's length: where "poly" reaches 0
    power: float = 2.0


def scaled_lr(base: float, base_batch: int, global_batch: int, scaling: str) -> float:
    """The target learning rate for a global batch.

    none:   the naive method, `base` whatever the batch (experiment 4).
    linear: Goyal et al.'s rule, base x global / base_batch (0.1 per 256 images: 0.05 at 128, 1.6 at 4096).
    sqrt:   base x sqrt(global / base_batch) (Krizhevsky 2014, Hoffer et al. 2017).
    """
    if scaling == "none":
        return base
    if scaling == "linear":
        return base * global_batch / base_batch
    if scaling == "sqrt":
        return base * math.sqrt(global_batch / base_batch)
    raise ValueError(f"unknown lr scaling {scaling!r}; choose one of {', '.join(SCALINGS)}")


def single_worker_lr(base: float, base_batch: int, per_worker_batch: int) -> float:
    """The rate the linear rule gives one worker: (per_worker_batch / 256) x 0.1 in appendices 13 and 15."""
    return base * per_worker_batch / base_batch


def decayed(policy: Policy, epoch: int, iteration: int = 0, iters_per_epoch: int = 1) -> float:
    """The target rate after decay: /10 every 30 epochs (exp. 4), /10 at 30, 60, 80 (exp. 5-9), or "poly":
    target x (1 - t / T) ** power, t counting iterations since the warm-up ended and T the iterations left then
    (You et al.'s LARS schedule; power 2), so the last iteration's rate is just above 0; or "none": the target all
    run long (experiment 13: a step count to a target must not depend on how long the run was planned to be)."""
    if policy.decay == "none":
        return policy.target
    if policy.decay == "poly":
        begin = policy.warmup_epochs if policy.warmup != "none" else 0
        done = (epoch - begin) * iters_per_epoch + iteration
        return policy.target * (1.0 - done / ((policy.epochs - begin) * iters_per_epoch)) ** policy.power
    if policy.decay == "step":
        drops = epoch // policy.step_every
    elif policy.decay == "milestones":
        drops = sum(1 for m in policy.milestones if epoch >= m)
    else:
        raise ValueError(f"unknown lr decay {policy.decay!r}; choose one of {', '.join(DECAYS)}")
    return policy.target * policy.gamma**drops


def lr_at(epoch: int, iteration: int, iters_per_epoch: int, policy: Policy) -> float:
    """The learning rate for `iteration` (0-based) of `epoch` (0-based).

    1) stepping warm-up (appendix 9): target x (epoch + 1) / (W + 1), constant within an epoch;
    2) gradual warm-up (appendices 13, 15): start + epoch x (target - start) / W, constant within an epoch;
    3) goyal warm-up: start + (target - start) x t / (W x iters), t counting iterations since the start;
    4) after warm-up: the decayed target (steps, milestones, or poly per iteration).
    """
    warm = policy.warmup_epochs
    if policy.warmup != "none" and epoch < warm:
        if policy.warmup == "stepping":
            return policy.target * (epoch + 1) / (warm + 1)
        if policy.warmup == "gradual":
            return policy.start + epoch * (policy.target - policy.start) / warm
        if policy.warmup == "goyal":
            progress = (epoch * iters_per_epoch + iteration) / (warm * iters_per_epoch)
            return policy.start + (policy.target - policy.start) * progress
        raise ValueError(f"unknown lr warm-up {policy.warmup!r}; choose one of {', '.join(WARMUPS)}")
    return decayed(policy, epoch, iteration, iters_per_epoch)


def schedule(policy: Policy, epochs: int) -> list[float]:
    """The rate at the start of each epoch (what `python -m trainers schedule` prints)."""
    return [lr_at(e, 0, 1, policy) for e in range(epochs)]
