"""Which runs are smoke runs (QUICK=1, or capped at a number of steps): the report never places them beside the
thesis's values and never gives them a verdict, since 2 epochs of 1 seed say nothing about the thesis's findings.

A run is a smoke run when any of these says so:
  - its manifest has `capped_at_steps` (train.max_steps cut it short: the ImageNet scales' QUICK runs);
  - its config.json carries every `[quick]` train and data setting of its scale (experiments/scales.toml), which
    is what `--quick` adds to a study's runs (config.json has no quick flag of its own);
  - it lies in a runs root named `quick` (results/quick: where a QUICK study writes).
Fewer epochs than the scale's default is not a test by itself: pilots and the tests' made-up runs train few epochs
without being smoke runs.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from contract import reader
from contract.plan import quick_tables

SCALES_CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "scales.toml"
SMOKE = "smoke run: no verdict"  # what a table says where a verdict or the thesis's value would stand
QUICK_ROOT = "quick"


@functools.lru_cache(maxsize=None)
def quick_settings(scale: str) -> tuple[tuple[str, str, object], ...]:
    """(section, key, value) of every train and data setting `--quick` gives a run at `scale`."""
    try:
        tables = quick_tables(SCALES_CONFIG, scale)
    except Exception:  # an unknown scale, no scales.toml: no settings to recognise
        return ()
    return tuple((section, key, value) for section in ("train", "data")
                 for key, value in sorted(tables.get(section, {}).items()))


def carries_quick(config: dict) -> bool:
    """Whether a config.json holds every [quick] train/data setting of its scale."""
    wanted = quick_settings(str(config.get("scale") or "local"))
    return bool(wanted) and all((config.get(section) or {}).get(key) == value for section, key, value in wanted)


def is_smoke_run(run_dir: str | Path) -> bool:
    """A run folder is a smoke run (module docstring)."""
    run_dir = Path(run_dir)
    if run_dir.parent.parent.name == QUICK_ROOT:
        return True
    if (reader.read_manifest(run_dir) or {}).get("capped_at_steps"):
        return True
    return carries_quick(reader.read_config(run_dir) or {})


def smoke_paths(df: pd.DataFrame) -> set[str]:
    """The paths of the run folders in `df` that are smoke runs (brought logs are never)."""
    if not len(df) or "path" not in df:
        return set()
    runs = df[(df["kind"] == "run") & (df["source"] == "run")] if "source" in df else df[df["kind"] == "run"]
    return {p for p in runs["path"].dropna().unique() if is_smoke_run(p)}


def smoke_mask(df: pd.DataFrame) -> pd.Series:
    """True on every row (any kind) of a smoke run."""
    found = smoke_paths(df)
    return df["path"].isin(found) if found else pd.Series(False, index=df.index)
