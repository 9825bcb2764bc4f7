"""Which runs are read apart: smoke runs, and experiment 12's study runs that diverged.

Smoke runs (QUICK=1, or capped at a number of steps): the report never places them beside the
thesis's values and never gives them a verdict, since 2 epochs of 1 seed say nothing about the thesis's findings.

A run is a smoke run when its manifest says so (`smoke`, contract/manifest.py): the trainer records it where the
run's config carries every `[quick]` train and data setting of its scale (experiments/scales.toml: what a study's
`--quick` adds) and where train.max_steps cut the run short (the ImageNet scales' QUICK runs). Fewer epochs than the
scale's default is not a test by itself: pilots and the tests' made-up runs train few epochs without being smoke runs.
A diverged run (DIVERGED_SHARE below) is labelled, left out of the means and counted on its own.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from contract import reader

LARGE_BATCH = 12
# experiment 12's study runs (lars-w256-s0; thesis-lars-w256-s0 at another scale), not its sweep's (lars-base0.5-s0)
STUDY_RUN = r"^([a-z]+-)?[a-z]+-w\d+-s\d+$"
# A reading rule, added on 2026-11-28 after experiment 12's runs had all ended (issue 50), not a change of its design:
# a study run diverged when its last epoch's training loss is not finite or still above DIVERGED_SHARE of its first
# epoch's (the first epoch's loss is close to an untrained model's, ln of the classes). Such a run measures a failed
# optimisation at its rate and warm-up, not how accurate a model that batch trains is, so it is labelled, left out of
# the means and of the rows that fail a finding, and counted on its own (`diverged`). Every study run that trained
# ended far below the share, every one that did not far above it (experiments/12_large_batch/README.md).
DIVERGED_SHARE = 0.75
SMOKE = "smoke run: no verdict"  # what a table says where a verdict or the thesis's value would stand


def is_smoke_run(run_dir: str | Path) -> bool:
    """A run folder is a smoke run (module docstring)."""
    return bool((reader.read_manifest(run_dir) or {}).get("smoke"))


def smoke_paths(df: pd.DataFrame) -> set[str]:
    """The paths of the run folders in `df` that are smoke runs (brought logs are never)."""
    if not len(df) or "path" not in df:
        return set()
    runs = df[(df["kind"] == "run") & (df["source"] == "run")] if "source" in df else df[df["kind"] == "run"]
    return {p for p in runs["path"].dropna().unique() if is_smoke_run(p)}


def diverged(losses) -> bool:
    """Whether a run's training losses, epoch by epoch, say it diverged (DIVERGED_SHARE's rule): its last one is not
    finite or above DIVERGED_SHARE of its first. Fewer than two epochs say nothing."""
    losses = [float(x) for x in losses]
    if len(losses) < 2:
        return False
    return not math.isfinite(losses[-1]) or losses[-1] > DIVERGED_SHARE * losses[0]


def diverged_runs(df: pd.DataFrame) -> set[str]:
    """The folders of experiment 12's study runs that diverged (DIVERGED_SHARE's rule; smoke runs, a check of the
    pipeline, are never read by it)."""
    if "train_loss" not in df or "run" not in df:
        return set()
    study = df[(df["kind"] == "run") & (df["exp"] == LARGE_BATCH) & df["run"].str.match(STUDY_RUN, na=False)]
    paths = set(study["path"]) - smoke_paths(df)
    epochs = df[(df["kind"] == "epoch") & df["path"].isin(paths)].sort_values("epoch")
    # a run with no training loss recorded says nothing; a NaN among recorded ones is a non-finite loss
    return {path for path, g in epochs.groupby("path")
            if g["train_loss"].notna().any() and diverged(g["train_loss"].tolist())}
