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
                      warmup: int = DEFAULT_WARMUP_BATCHES) -> float:
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
    if c[-1] <= warmup:
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


def speedup(throughput: float, baseline_1gpu: float) -> float:
    """Speed-up over the 1-GPU baseline of the same framework and per-GPU batch."""
    if not (baseline_1gpu and baseline_1gpu > 0):
        return math.nan
    return throughput / baseline_1gpu


def efficiency(speedup_value: float, gpus: float) -> float:
    """Scaling efficiency: speed-up / number of GPUs (1.0 = linear scaling)."""
    return speedup_value / gpus if gpus else math.nan


def wallclock_estimate_s(images_per_s: float) -> float:
    """Wall-clock of the thesis's 90 epochs of ImageNet at a given throughput (training only, no validation)."""
    if not (images_per_s and images_per_s > 0):
        return math.nan
    return 90 * IMAGENET_TRAIN_IMAGES / images_per_s


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


def int_text(x) -> str:
    """A whole number as text, '?' where it is unknown (None or NaN)."""
    return "?" if x is None or (isinstance(x, float) and math.isnan(x)) else str(int(x))


def experiments_text(numbers) -> str:
    """{1, 2, 3, 5} -> 'experiments 1-3, 5'; {3} -> 'experiment 3'."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"experiment{'s' if len(numbers) > 1 else ''} {text}"


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


def _closest_count(counts: np.ndarray, target: int) -> int | None:
    if counts.size == 0:
        return None
    k = int(np.argmin(np.abs(counts - target) * 2 + (counts > target)))  # ties go to the earlier batch
    return k


def log_throughput(log, per_gpu_batch: float | None = None, gpus: float | None = None,
                   warmup: int = DEFAULT_WARMUP_BATCHES) -> dict:
    """Thesis-formula and steady-state images/s from a parsed log's (analysis.logs.ParsedLog) first epoch.

    * pytorch/examples logs: B*G / running mean at batch 199 (the nearest printed batch if 199 was not
      printed; ``thesis_batch`` says which), and B*G / mean time of the batches after the first `warmup`.
    * Horovod example: the same from tqdm's elapsed time (whole seconds, so a coarse estimate).
    * tf_cnn_benchmarks: the tool's own ``total images/sec`` (what the thesis reported; it already leaves
      out the tool's warm-up batches) and the last per-step mean times the number of GPUs.
    """
    out = {"path": log.path, "tool": log.tool, "format": log.fmt, "per_gpu_batch": per_gpu_batch,
           "gpus": gpus, "thesis_images_per_s": None, "steady_images_per_s": None, "thesis_batch": None,
           "batch_time_avg_at_199": None, "warmup_batches": warmup, "lines": log.lines, "bad_lines": log.bad_lines}
    g = 1 if gpus is None else gpus
    if log.tool == "tf_cnn_benchmarks":
        b = per_gpu_batch or log.info.get("per_device_batch")
        out["per_gpu_batch"] = b
        total = log.info.get("total_images_per_s")
        last = log.info.get("last_step_images_per_s")
        out["thesis_images_per_s"] = total
        out["steady_images_per_s"] = last * g if last is not None else total
        return out
    tr = log.train
    if tr.empty or not per_gpu_batch:
        if not per_gpu_batch:
            out["note"] = "per-GPU batch size needed (--per-gpu-batch)"
        return out
    first = tr[tr["epoch"] == tr["epoch"].min()]
    counts = first["count"].to_numpy(dtype=float)
    k = _closest_count(counts, THESIS_BATCH_INDEX + 1)
    if k is not None:
        avg = float(first["time_avg"].iloc[k])
        out["thesis_batch"] = int(first["batch"].iloc[k])
        out["batch_time_avg_at_199"] = avg
        t = thesis_throughput(per_gpu_batch, g, avg)
        out["thesis_images_per_s"] = None if math.isnan(t) else round(t, 2)
    vals = first["time"].to_numpy(dtype=float)
    steady_t = steady_batch_time(counts, first["time_avg"].to_numpy(dtype=float),
                                    None if np.isnan(vals).all() else vals, warmup=warmup)
    s = steady_throughput(per_gpu_batch, g, steady_t)
    out["steady_images_per_s"] = None if math.isnan(s) else round(s, 2)
    return out
