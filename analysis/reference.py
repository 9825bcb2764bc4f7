"""The thesis's published values (analysis/reference/thesis.csv) and what the text says around them.

Table numbers follow the captions (1-9 throughput, 10-15 accuracy); the thesis's list of tables and its
running text call the accuracy tables 11-16 (``TEXT_NUMBER``).
"""
from __future__ import annotations

import math
from importlib import resources

import pandas as pd

from contract.config import THESIS_BATCH_INDEX
from contract.lr import Policy, lr_at

REFERENCE_COLUMNS = ["table", "experiment", "framework", "per_gpu_batch", "global_batch", "nodes", "gpus", "lr",
                     "warmup", "throughput", "top1", "top5", "wallclock_s"]

CAPTIONS = {
    1: "Single-node single-GPU throughput baseline, Horovod+TensorFlow per worker batch sizes 32, 64 and 128.",
    2: "Single-node single-GPU throughput baseline, PyTorch per worker batch size 128.",
    3: "Single-node single-GPU throughput baseline, Horovod+PyTorch per worker batch size 128.",
    4: "Single-node multi-GPU throughput, Horovod+TensorFlow per worker batch sizes 32, 64 and 128.",
    5: "Single-node multi-GPU throughput, PyTorch per worker batch size 128.",
    6: "Single-node multi-GPU throughput, Horovod+PyTorch per worker batch size 128.",
    7: "Multi-node multi-GPU throughput, Horovod+TensorFlow per worker batch sizes 32, 64 and 128.",
    8: "Multi-node multi-GPU throughput, PyTorch per worker batch size 128.",
    9: "Multi-node multi-GPU throughput, Horovod+PyTorch per worker batch size 128.",
    10: "Validation accuracy, naive scaling method.",
    11: "Linear learning rate scaling without warmup period. Validation accuracy and training time.",
    12: "Linear learning rate scaling with 5 epoch stepping warmup. Validation accuracy and training time.",
    13: "Linear learning rate scaling with 5 epoch stepping warmup and reduced per GPU worker batch size. "
        "Validation accuracy and training time.",
    14: "Linear learning rate scaling with 5 epoch gradual warmup. Validation accuracy and training time.",
    15: "Linear learning rate scaling with 10 epoch gradual warmup. Validation accuracy and training time.",
}
#: what the thesis's running text and list of tables call each caption-numbered accuracy table
TEXT_NUMBER = {t: t + 1 for t in range(10, 16)}
THROUGHPUT_TABLES = tuple(range(1, 10))
QUALITY_TABLES = tuple(range(10, 16))
THESIS_WORKERS = 32  # the thesis's largest run: 32 GPUs x 128 = 4,096 images a step
#: experiment -> caption table numbers
EXPERIMENT_TABLES = {1: (1, 2, 3), 2: (4, 5, 6), 3: (7, 8, 9), 4: (10,), 5: (11,), 6: (12,), 7: (13,), 8: (14,),
                     9: (15,)}
#: the 1-GPU baseline repeated in tables 12 and 14 is stored once, under table 11
BASELINE_REPEATED_IN = {12: 11, 14: 11}

#: Figures 12 and 13: time of the first training batch printed by each script (seconds)
FIRST_BATCH_S = {("pytorch", 2): 18.532, ("horovod+pytorch", 2): 9.696,
                 ("pytorch", 32): 21.925, ("horovod+pytorch", 32): 9.950}

#: quality experiments' settings (appendices 5, 7, 9, 11, 13, 15)
QUALITY_SETTINGS = {
    4: {"warmup": "none", "decay": "step", "base_lr": 0.1, "label": "naive scaling, lr 0.1, /10 every 30"},
    5: {"warmup": "none", "decay": "milestones", "label": "linear scaling, no warm-up"},
    6: {"warmup": "stepping-5", "decay": "milestones", "label": "linear scaling, 5-epoch stepping warm-up"},
    7: {"warmup": "stepping-5", "decay": "milestones", "label": "as 6, per-GPU batch 32"},
    8: {"warmup": "gradual-5", "decay": "milestones", "label": "linear scaling, 5-epoch gradual warm-up"},
    9: {"warmup": "gradual-10", "decay": "milestones", "label": "linear scaling, 10-epoch gradual warm-up"},
}
MILESTONES = (30, 60, 80)
THESIS_EPOCHS = 90  # every quality run of the thesis (Tables 10-15)


def load_reference() -> pd.DataFrame:
    """The thesis's Tables 1-15 as a frame (one row per table row; see module docstring)."""
    with resources.files("analysis").joinpath("reference/thesis.csv").open("r") as fh:
        df = pd.read_csv(fh)
    for c in ("per_gpu_batch", "global_batch", "nodes", "gpus", "table", "experiment"):
        df[c] = df[c].astype("Int64")
    return df[REFERENCE_COLUMNS]


def table_rows(ref: pd.DataFrame, table: int) -> pd.DataFrame:
    """The rows the thesis prints in a table, the repeated 1-GPU baseline included."""
    rows = ref[ref["table"] == table]
    if table in BASELINE_REPEATED_IN:
        base = ref[(ref["table"] == BASELINE_REPEATED_IN[table]) & (ref["gpus"] == 1)]
        rows = pd.concat([base, rows], ignore_index=True)
    return rows.reset_index(drop=True)


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


def rq2_steady_state(ref: pd.DataFrame | None = None) -> pd.DataFrame:
    """Tables 5/6 and 8/9 with the first batch (Figures 12-13) taken out of the thesis's 200-batch mean.

    Columns framework, gpus, thesis_images_per_s, first_batch_s, steady_images_per_s; the last two are empty
    where the thesis prints no first-batch time (4, 8, 16 and 24 GPUs).
    """
    ref = load_reference() if ref is None else ref
    t = ref[ref["table"].isin([5, 6, 8, 9])]
    rows = []
    for r in t.itertuples(index=False):
        first = FIRST_BATCH_S.get((r.framework, int(r.gpus)), math.nan)
        steady = without_first_batch(r.throughput, int(r.per_gpu_batch), int(r.gpus), first)
        rows.append({"framework": r.framework, "gpus": int(r.gpus), "thesis_images_per_s": r.throughput,
                     "first_batch_s": first, "steady_images_per_s": round(steady, 2) if math.isfinite(steady)
                     else math.nan})
    return pd.DataFrame(rows).sort_values(["gpus", "framework"], kind="stable").reset_index(drop=True)


def thesis_lr(epoch: int, target_lr: float, warmup: str = "none", per_gpu_batch: int = 128,
              decay: str = "milestones") -> float:
    """The learning rate at the start of an epoch of a thesis row ('stepping-5' warm-up), as the trainer schedules
    it (contract.lr); tests/test_analysis_numbers.py holds it against the thesis's appendix pseudocode."""
    kind, _, w = (warmup or "none").partition("-")
    policy = Policy(target=target_lr, start=per_gpu_batch / 256 * 0.1, warmup=kind,
                    warmup_epochs=int(float(w)) if w else 0, decay=decay, milestones=MILESTONES)
    return lr_at(epoch, 0, 1, policy)


def thesis_schedules() -> pd.DataFrame:
    """The planned schedules of every quality-table row of experiments 4-9 (epoch, lr per row)."""
    ref = load_reference()
    rows = []
    for r in ref[ref["experiment"] >= 4].itertuples(index=False):
        s = QUALITY_SETTINGS[int(r.experiment)]
        for e in range(THESIS_EPOCHS):
            rows.append({"experiment": int(r.experiment), "framework": r.framework, "gpus": int(r.gpus),
                         "per_gpu_batch": int(r.per_gpu_batch), "target_lr": r.lr, "warmup": r.warmup,
                         "epoch": e, "lr": thesis_lr(e, r.lr, r.warmup, int(r.per_gpu_batch), s["decay"])})
    return pd.DataFrame(rows)
