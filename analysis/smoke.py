"""Which runs are smoke runs (QUICK=1, or capped at a number of steps): the report never places them beside the
thesis's values and never gives them a verdict, since 2 epochs of 1 seed say nothing about the thesis's findings.

A run is a smoke run when its manifest says so (`smoke`, contract/manifest.py): the trainer records it where the
run's config carries every `[quick]` train and data setting of its scale (experiments/scales.toml: what a study's
`--quick` adds) and where train.max_steps cut the run short (the ImageNet scales' QUICK runs). Fewer epochs than the
scale's default is not a test by itself: pilots and the tests' made-up runs train few epochs without being smoke runs.
"""
from __future__ import annotations

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
