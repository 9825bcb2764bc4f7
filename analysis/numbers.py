"""The thesis's numbers as formulas with names: throughput, steady state, speed-up, wall-clock.

Every function here is pure and works on plain floats or numpy arrays, so the run loader, the log
parsers, the tables and the notebooks all compute the same thing the same way.
"""
from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

from contract.config import THESIS_BATCH_INDEX

#: Training images in ILSVRC-2012 (the thesis's dataset); one epoch at thesis scale.
IMAGENET_TRAIN_IMAGES = 1_281_167
#: Batches left out of the steady-state estimate of an upstream log unless told otherwise.
DEFAULT_WARMUP_BATCHES = 10


def thesis_throughput(per_gpu_batch: float, gpus: float, batch_time_avg_at_199: float) -> float:
    """Images/s by the thesis's formula (section 5.1).

    throughput = (per-GPU batch size * number of GPUs) / running-mean batch time at batch 199.
    Figure 11: 128 * 1 / 0.633 = 202.21 images/s.
    """
    if not batch_time_avg_at_199 or not math.isfinite(batch_time_avg_at_199) or batch_time_avg_at_199 <= 0:
        return math.nan
    return per_gpu_batch * gpus / batch_time_avg_at_199


def steady_batch_time(counts: Sequence[float], avgs: Sequence[float], vals: Sequence[float] | None = None,
                      warmup: int = DEFAULT_WARMUP_BATCHES, end_count: int | None = None) -> float:
    """Mean batch time over batches warmup+1 .. end, leaving the first `warmup` batches out.

    `counts[k]` is how many batches the running mean `avgs[k]` covers (AverageMeter.count, i.e. the
    0-based batch index + 1), `vals[k]` that batch's own time. Two ways, best first:
      1. every batch in the window was printed: the plain mean of its own times;
      2. otherwise: difference of running sums, (avg_e * n_e - avg_s * n_s) / (n_e - n_s), where
         s is the last printed batch at or before the warm-up and e the last printed batch.
    Returns NaN when the log does not reach past the warm-up.
    """
    c = np.asarray(counts, dtype=float)
    a = np.asarray(avgs, dtype=float)
    if c.size == 0:
        return math.nan
    order = np.argsort(c, kind="stable")
    c, a = c[order], a[order]
    v = None if vals is None else np.asarray(vals, dtype=float)[order]
    if end_count is not None:
        keep = c <= end_count
        c, a = c[keep], a[keep]
        v = None if v is None else v[keep]
    if c.size == 0 or c[-1] <= warmup:
        return math.nan
    window = c > warmup
    n_window = int(c[-1] - warmup)
    if v is not None and int(np.unique(c[window]).size) == n_window:
        return float(np.mean(v[window]))
    if warmup == 0:
        return float(a[-1])
    before = c <= warmup
    if not before.any():
        return math.nan
    s = np.flatnonzero(before)[-1]
    e = c.size - 1
    if c[e] <= c[s]:
        return math.nan
    return float((a[e] * c[e] - a[s] * c[s]) / (c[e] - c[s]))


def steady_throughput(per_gpu_batch: float, gpus: float, mean_batch_time: float) -> float:
    """Images/s from a steady-state mean batch time."""
    if not mean_batch_time or not math.isfinite(mean_batch_time) or mean_batch_time <= 0:
        return math.nan
    return per_gpu_batch * gpus / mean_batch_time


def without_first_batch(thesis_images_per_s: float, per_gpu_batch: float, gpus: float,
                        first_batch_s: float, n_batches: int = THESIS_BATCH_INDEX + 1) -> float:
    """Re-estimate a thesis throughput with the first batch taken out of the 200-batch mean.

    The thesis's mean at batch 199 covers n = 200 batches: sum = n * B*G / T. Removing the first
    batch's time t0 leaves (sum - t0) / (n - 1) per batch, and B*G over that is the estimate.
    """
    if not (thesis_images_per_s > 0 and math.isfinite(first_batch_s)):
        return math.nan
    total = n_batches * per_gpu_batch * gpus / thesis_images_per_s
    rest = (total - first_batch_s) / (n_batches - 1)
    return per_gpu_batch * gpus / rest if rest > 0 else math.nan


def speedup(throughput: float, baseline_1gpu: float) -> float:
    """Speed-up over the 1-GPU baseline of the same framework and per-GPU batch."""
    if not (baseline_1gpu and baseline_1gpu > 0):
        return math.nan
    return throughput / baseline_1gpu


def efficiency(speedup_value: float, gpus: float) -> float:
    """Scaling efficiency: speed-up / number of GPUs (1.0 = linear scaling)."""
    return speedup_value / gpus if gpus else math.nan


def wallclock_estimate_s(images_per_s: float, epochs: int = 90,
                         images_per_epoch: int = IMAGENET_TRAIN_IMAGES) -> float:
    """Wall-clock of `epochs` epochs of training at a given throughput (training only, no validation)."""
    if not (images_per_s and images_per_s > 0):
        return math.nan
    return epochs * images_per_epoch / images_per_s


def format_duration(seconds: float) -> str:
    """Seconds as a person reads them: '6 d 4 h 16 min', '1 h 55 min', '3 min 20 s', '14 s' ('' when unknown).
    Seconds only under an hour, where they are a visible part of the time."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    if seconds < 3600:
        m, s = divmod(int(round(seconds)), 60)
        return f"{m} min {s} s" if m else f"{s} s"
    days, rem = divmod(int(round(seconds / 60.0)), 24 * 60)
    hours, mins = divmod(rem, 60)
    return f"{days} d {hours} h {mins} min" if days else f"{hours} h {mins} min"


def natural_key(text) -> tuple:
    """Sort key that orders numbers inside names by value: w1, w2, w16, w24 (not w1, w16, w2, w24)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", str(text)) if part)


def warmup_label(kind: str | None, epochs: float | None) -> str:
    """The warm-up vocabulary of the reference data: 'none', 'stepping-5', 'gradual-10', ..."""
    if not kind or kind == "none" or not epochs:
        return "none"
    e = float(epochs)
    return f"{kind}-{int(e) if e.is_integer() else f'{e:g}'}"


#: What the thesis's P100s computed in (strict fp32), and what a run from before [train] precision existed ran.
FP32 = "fp32"


def numerics_label(precision: str | None = None, channels_last: bool | None = None,
                   compile: bool | None = None) -> str:
    """A run's numerics ([train] precision, channels_last, compile): 'fp32', 'tf32', 'bf16+cl', 'bf16+cl+compiled'.
    Missing keys read as the trainer's defaults (fp32, NCHW, eager), so config.json from before them is 'fp32'."""
    return "+".join([precision or FP32] + ["cl"] * bool(channels_last) + ["compiled"] * bool(compile))


def numerics_suffix(numerics, sep: str = " ") -> str:
    """' bf16+cl' for a label or legend; '' for fp32 (the thesis's, and most runs'), so their labels stay unmarked."""
    return f"{sep}{numerics}" if isinstance(numerics, str) and numerics != FP32 else ""
