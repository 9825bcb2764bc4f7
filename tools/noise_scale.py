"""The gradient noise scale of a run's model: the batch size beyond which a problem stops using larger batches well.

McCandlish, Kaplan and Amodei, "An Empirical Model of Large-Batch Training" (2018; seed 000), appendix A.1:
B_simple = tr(Σ) / |G|², with G the full-data gradient and Σ the covariance of one example's gradient. A batch of
B examples gives E|g_B|² = |G|² + tr(Σ)/B, so gradients at two batch sizes give unbiased estimates of both terms:

    |G|² ≈ (B_big |g_big|² − B_small |g_small|²) / (B_big − B_small)
    tr Σ ≈ (|g_small|² − |g_big|²) / (1/B_small − 1/B_big)

Here the small batch is one worker's (per_worker_batch, batch norm over it, as in training) and the big one the
average of `workers` such gradients: the gradient an emulated step with that many workers applies. In the paper's
model a batch B needs about (1 + B / B_noise) times the fewest epochs, so a global batch far above B_simple trains
fewer useful steps per epoch: the reason a miniature with a small noise scale cannot keep 32-worker quality.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn as nn

from trainers import checkpoint, data
from contract.config import ConfigError, from_dict
from contract.runfolder import CHECKPOINT
from trainers.models import build_model


@dataclass(frozen=True)
class NoiseScale:
    b_simple: float       # tr(Σ) / |G|², in examples
    b_simple_low: float   # with |G|² two standard errors higher: a lower bound
    b_simple_high: float  # with |G|² two standard errors lower; inf when |G|² is not resolved from zero
    grad_sq: float        # |G|² estimate
    grad_sq_se: float     # its standard error over the groups
    trace_cov: float      # tr(Σ) estimate
    b_small: int
    b_big: int
    groups: int           # big batches measured (each the mean of b_big / b_small small ones)


def estimate(small_sq: list[float], big_sq: list[float], b_small: int, b_big: int) -> NoiseScale:
    """B_simple from, per group, the mean squared norm of its small-batch gradients and that of their mean.

    Late in training |G|² is a small difference of large numbers: its standard error over the groups gives the range
    of B_simple (the spread of tr Σ, a mean of large positive terms, is left out)."""
    if not b_big > b_small > 0:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small} and {b_big}")
    if len(small_sq) != len(big_sq) or len(big_sq) < 2:
        raise ValueError("need one small and one big squared norm per group, and at least two groups")
    per_group = [(b_big * big - b_small * small) / (b_big - b_small) for small, big in zip(small_sq, big_sq)]
    grad_sq = statistics.fmean(per_group)
    grad_sq_se = statistics.stdev(per_group) / math.sqrt(len(per_group))
    trace_cov = (statistics.fmean(small_sq) - statistics.fmean(big_sq)) / (1 / b_small - 1 / b_big)
    low = trace_cov / (grad_sq + 2 * grad_sq_se) if grad_sq + 2 * grad_sq_se > 0 else math.inf
    high = trace_cov / (grad_sq - 2 * grad_sq_se) if grad_sq > 2 * grad_sq_se else math.inf
    point = trace_cov / grad_sq if grad_sq > 0 else math.inf
    return NoiseScale(point, low, high, grad_sq, grad_sq_se, trace_cov, b_small, b_big, len(big_sq))


def measure(model: nn.Module, loss_fn: Callable, batches: Iterator, workers: int, groups: int,
            b_small: int, progress: Callable[[int], None] = lambda done: None) -> NoiseScale:
    """`groups` times: `workers` small-batch gradients, their squared norms, and the squared norm of their mean."""
    small_sq, big_sq = [], []
    for group in range(groups):
        total, sq = None, 0.0
        for _ in range(workers):
            x, y = next(batches)
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            g = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]).detach().double()
            sq += float(g @ g)
            total = g.clone() if total is None else total.add_(g)
        mean = total / workers
        small_sq.append(sq / workers)
        big_sq.append(float(mean @ mean))
        progress(group + 1)
    return estimate(small_sq, big_sq, b_small, b_small * workers)


# ---- A run folder's model on its own training data -------------------------------------------------------------------
def training_batches(cfg, seed: int) -> Iterator:
    """Endless per-worker batches of the run's training set, with its training transforms, in a seeded order."""
    train_ds, _ = data.build_datasets(cfg.data, cfg.model.num_classes, cfg.train.seed)  # the loop's own data set
    epoch = 0
    while True:
        order = data.epoch_permutation(len(train_ds), epoch, seed)
        b = cfg.train.per_worker_batch
        for s in range(0, len(order) - b + 1, b):
            batch = data.collate([train_ds[(epoch, i)] for i in order[s:s + b]])
            yield data.to_device(batch.images, torch.device("cpu")), batch.targets
        epoch += 1


def measure_run(run_dir: Path, workers: int, groups: int, at_init: bool = False, seed: int = 0) -> dict:
    """B_simple of the run's final model (or, with at_init, of its initial weights) at per-worker batch x workers."""
    ckpt = run_dir / CHECKPOINT
    if not ckpt.exists():
        raise ConfigError(f"{run_dir} has no checkpoint.pt: measure a run trained with train.checkpoint = true")
    state = checkpoint.load(ckpt, to_resume=False)  # any format: only the weights and config are read
    cfg = from_dict(state["config"])
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model)
    if not at_init:
        model.load_state_dict(state["model"])
    model.train()  # batch norm over each worker's batch, as in training
    weights = "initial" if at_init else f"epoch {state['epoch']}"
    label = f"{run_dir.name} ({weights} weights)"

    def progress(done: int) -> None:
        print(f"\r{label}: {done}/{groups} groups of {workers} x {cfg.train.per_worker_batch}", end="",
              file=sys.stderr, flush=True)

    result = measure(model, nn.CrossEntropyLoss(), training_batches(cfg, seed), workers, groups,
                     cfg.train.per_worker_batch, progress)
    print(file=sys.stderr)
    return {"run": str(run_dir), "weights": weights, "seed": seed, **asdict(result)}


def report(run_dirs: list[str], workers: int, groups: int, at_init: bool, seed: int, json_path: str | None,
           update: bool = False) -> int:
    rows = [measure_run(Path(d), workers, groups, at_init, seed) for d in run_dirs]
    for r in rows:
        high = "unbounded: |G|^2 not resolved from 0" if math.isinf(r["b_simple_high"]) else f"{r['b_simple_high']:.0f}"
        print(f"{r['run']} [{r['weights']}]: B_simple {r['b_simple']:.0f} examples, 2-SE range {r['b_simple_low']:.0f} "
              f"to {high} (|G|^2 {r['grad_sq']:.3g} +- {r['grad_sq_se']:.2g}, tr Sigma {r['trace_cov']:.3g}; "
              f"batches {r['b_small']} and {r['b_big']}, {r['groups']} groups)")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        finite = [{k: (None if v == math.inf else v) for k, v in r.items()} for r in rows]  # JSON has no inf
        if update and Path(json_path).is_file():  # the other runs' rows kept, a run measured again replaced
            measured = {Path(r["run"]).name for r in finite}
            kept = [r for r in json.loads(Path(json_path).read_text()) if Path(r["run"]).name not in measured]
            finite = sorted(kept + finite, key=lambda r: Path(r["run"]).name)
        Path(json_path).write_text(json.dumps(finite, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools noise-scale", description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="run folders with a checkpoint.pt")
    p.add_argument("--workers", type=int, default=32, help="big batch = workers x the run's per-worker batch")
    p.add_argument("--groups", type=int, default=32, help="big batches to average over")
    p.add_argument("--init", action="store_true", help="measure the runs' initial weights instead of their last")
    p.add_argument("--seed", type=int, default=0, help="the order the training examples are drawn in")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--update", action="store_true", help="with --json: keep the file's rows of other runs (a study "
                                                          "measured run by run, as each finishes)")
    args = p.parse_args(argv)
    return report(args.runs, args.workers, args.groups, args.init, args.seed, args.json, args.update)
