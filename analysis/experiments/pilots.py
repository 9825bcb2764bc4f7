"""Experiments 10 and 11, beyond the thesis: the more-steps pilot (does the 32-worker gap close with four times the
optimizer steps? it set the local scale's 72 epochs) and the base-rate sweep (the base learning rate that makes the
1-worker baseline best). Both are read in the model-quality notebook (RQ3): the pilot's runs by configuration, and a
caveat on the baseline's rate where the sweep found a better one.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..entries import Experiment
from ..runs import load_runs

PILOT, SWEEP, BASELINE = 10, 11, 5  # the sweep's best rate against the baseline's (experiment 5's 1-worker runs)
EXPERIMENTS = (Experiment(PILOT, "quality"), Experiment(SWEEP, "quality"))


def baseline_rate_note(df: pd.DataFrame) -> str:
    """A caveat when experiment 11's base-rate sweep found a better 1-worker rate than experiment 5's baseline ran
    at: the linear rule scales the base rate the 1-worker run is best at, so comparisons with that baseline are
    provisional until experiments 5-9 run at the better rate. Per scale, seed 0 (the sweep's seed), the same epochs;
    the baseline's own seed-0 run counts as the sweep's point at its rate. Empty when there is nothing to flag."""
    runs = df[(df["kind"] == "run") & df["status"].isin(["completed", "log"]) & (df["gpus"] == 1)]
    runs = runs.dropna(subset=["best_val_top1"])
    lines = []
    for scale, g in runs.groupby(runs["scale"].fillna("unknown"), sort=True):
        baseline = g[(g["exp"] == BASELINE) & (g["seed"] == 0)]
        if baseline.empty:
            continue
        base = baseline.iloc[0]
        sweep = g[(g["exp"] == SWEEP) & (g["seed"] == 0) & (g["epochs"] == base["epochs"])]
        if sweep.empty:
            continue
        points = pd.concat([sweep, baseline.iloc[:1]])
        best = points.loc[points["best_val_top1"].idxmax()]
        if best["lr"] == base["lr"]:
            continue
        lines.append(f"- {scale} scale: experiment 11's best 1-worker run at seed 0 is at lr {best['lr']:g} "
                     f"({best['best_val_top1']:.2f} %), not the baseline's lr {base['lr']:g} "
                     f"({base['best_val_top1']:.2f} %): comparisons with the 1-worker baseline are provisional "
                     "until experiments 5-9 run at that rate.")
    if not lines:
        return ""
    return "**The baseline's learning rate.**\n\n" + "\n".join(lines) + "\n"


def seed_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Run folders outside the studies (e.g. experiment 10, the more-steps pilot), grouped by configuration: the run
    name without its seed suffix (-sN). Best top-1 and last-epoch training loss, mean ± sd over the seeds."""
    runs = df[(df["kind"] == "run") & (df["status"] == "completed")].copy()
    last_epoch = df[df["kind"] == "epoch"].sort_values("epoch").groupby("path")["train_loss"].last()
    runs["last_train_loss"] = runs["path"].map(last_epoch)
    runs["configuration"] = runs["experiment"] + "/" + runs["run"].str.replace(r"-s\d+$", "", regex=True)
    g = runs.groupby("configuration")
    return pd.DataFrame({
        "seeds": g.size(), "best_top1_mean": g["best_val_top1"].mean(), "best_top1_sd": g["best_val_top1"].std(),
        "last_train_loss_mean": g["last_train_loss"].mean(),
    }).round(2).reset_index()


def pilot_summary(path: str = "reference/vm-2cpu/10_more_steps_pilot"):
    """The more-steps pilot's runs by configuration, or one line on how to make them."""
    if not Path(path).is_dir():
        return f"no runs in {path}: make exp10 makes them"
    return seed_summary(load_runs(path))


EXPORTS = ("baseline_rate_note", "pilot_summary")
