"""The thesis's published values (analysis/reference/thesis.csv) and what the text says around them.

Table numbers follow the captions (1-9 throughput, 10-15 accuracy); the thesis's list of tables and its
running text call the accuracy tables 11-16 (``TEXT_NUMBER``).
"""
from __future__ import annotations

from importlib import resources

import pandas as pd

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
THESIS_WORKERS = 32  # the thesis's largest run: 32 GPUs x 128 = 4,096 images a step
#: the 1-GPU baseline repeated in tables 12 and 14 is stored once, under table 11
BASELINE_REPEATED_IN = {12: 11, 14: 11}

MILESTONES = (30, 60, 80)
THESIS_EPOCHS = 90  # every quality run of the thesis (Tables 10-15)


def load_reference() -> pd.DataFrame:
    """The thesis's Tables 1-15 as a frame (one row per table row; see module docstring)."""
    with resources.files("analysis").joinpath("reference/thesis.csv").open("r") as fh:
        df = pd.read_csv(fh)
    for c in ("per_gpu_batch", "global_batch", "nodes", "gpus", "table", "experiment"):
        df[c] = df[c].astype("Int64")
    return df[REFERENCE_COLUMNS]


def tables_of(ref: pd.DataFrame, experiments) -> tuple[int, ...]:
    """The thesis's tables (caption numbers) that hold these experiments' rows, in order."""
    return tuple(int(t) for t in sorted(ref.loc[ref["experiment"].isin(list(experiments)), "table"].unique()))


def experiment_of(ref: pd.DataFrame, table: int) -> int:
    """The experiment a table of the thesis is of."""
    return int(ref.loc[ref["table"] == table, "experiment"].iloc[0])


def baseline_experiment(ref: pd.DataFrame) -> int:
    """The experiment the thesis measured its 1-GPU throughput baseline in: the one all of whose rows ran on one GPU
    (its Tables 1-3), whose runs divide the other experiments' speed-ups where those timed no 1-GPU run."""
    ones = ref.dropna(subset=["throughput"]).groupby("experiment")["gpus"].max()
    return int(ones[ones == 1].index.min())


def table_rows(ref: pd.DataFrame, table: int) -> pd.DataFrame:
    """The rows the thesis prints in a table, the repeated 1-GPU baseline included."""
    rows = ref[ref["table"] == table]
    if table in BASELINE_REPEATED_IN:
        base = ref[(ref["table"] == BASELINE_REPEATED_IN[table]) & (ref["gpus"] == 1)]
        rows = pd.concat([base, rows], ignore_index=True)
    return rows.reset_index(drop=True)


def thesis_lr(epoch: int, target_lr: float, warmup: str = "none", per_gpu_batch: int = 128,
              decay: str = "milestones") -> float:
    """The learning rate at the start of an epoch of a thesis row ('stepping-5' warm-up), as the trainer schedules
    it (contract.lr); tests/test_analysis_numbers.py holds it against the thesis's appendix pseudocode."""
    kind, _, w = (warmup or "none").partition("-")
    policy = Policy(target=target_lr, start=per_gpu_batch / 256 * 0.1, warmup=kind,
                    warmup_epochs=int(float(w)) if w else 0, decay=decay, milestones=MILESTONES)
    return lr_at(epoch, 0, 1, policy)
