"""Which runs are read apart: smoke runs, and runs that diverged by a rule their plug-in declares.

Smoke runs (QUICK=1, or capped at a number of steps): the report never places them beside the
thesis's values and never gives them a verdict, since 2 epochs of 1 seed say nothing about the thesis's findings.

A run is a smoke run when its manifest says so (`smoke`, contract/manifest.py): the trainer records it where the
run's config carries every `[quick]` train and data setting of its scale (experiments/scales.toml: what a study's
`--quick` adds) and where train.max_steps cut the run short (the ImageNet scales' QUICK runs). Fewer epochs than the
scale's default is not a test by itself: pilots and the tests' made-up runs train few epochs without being smoke runs.
A run diverged by its side's rule (analysis.entries.Runs.diverged, a plug-in's) is labelled, left out of the means
and counted on its own.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from contract import reader

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


def diverged(losses, share: float) -> bool:
    """Whether a run's training losses, epoch by epoch, say it diverged: its last one is not finite or above `share`
    of its first. Fewer than two epochs say nothing."""
    losses = [float(x) for x in losses]
    if len(losses) < 2:
        return False
    return not math.isfinite(losses[-1]) or losses[-1] > share * losses[0]


def diverged_runs(df: pd.DataFrame, sides) -> set[str]:
    """The folders of the runs of each side (analysis.entries.Runs: an experiment's runs of its names) that
    diverged by the side's rule (Runs.diverged; smoke runs, a check of the pipeline, are never read by it)."""
    if "train_loss" not in df or "run" not in df:
        return set()
    runs = df[df["kind"] == "run"]
    rules: dict[str, float] = {}
    for side in sides:
        mine = runs[(runs["exp"] == side.experiment) & runs["run"].str.match(side.names or "", na=False)]
        rules.update(dict.fromkeys(mine["path"], side.diverged.share))
    paths = set(rules) - smoke_paths(df)
    epochs = df[(df["kind"] == "epoch") & df["path"].isin(paths)].sort_values("epoch")
    # a run with no training loss recorded says nothing; a NaN among recorded ones is a non-finite loss
    return {path for path, g in epochs.groupby("path")
            if g["train_loss"].notna().any() and diverged(g["train_loss"].tolist(), rules[path])}
