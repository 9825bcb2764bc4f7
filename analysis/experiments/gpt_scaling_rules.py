"""Experiment 15 (beyond the thesis, issue 66): AdamW's scaling rules on the GPT workload -- no scaling of the rate,
the linear rule and the square-root rule, each with warm-up, at 4-32 exactly synchronous workers, the final
validation loss of each against the 1-worker baseline's with a margin declared before the runs
(experiments/15_gpt_scaling_rules/declared_2026-12-07-exp15.txt).

Its findings are data (FINDINGS: the plug-in API's Finding, Comparison, Runs and Measure): the final validation
loss, lower is better, against this experiment's own margin in nats, a rule failing where any seed diverged. The
verdict table (orderings.md, analysis/findings.py) tests them as it tests the thesis's: paired or Welch 90 %
intervals, verdicts against the margin, the one-sided tests behind `holds`, Holm's correction over each rule's rows.
Here: the baseline's rate check, the final-loss table and its figure.
"""
from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import figures as fg  # noqa: E402
from .. import findings as fd  # noqa: E402
from ..entries import Comparison, Divergence, Drawn, Experiment, Figure, Finding, Measure, Runs, Table  # noqa: E402
from ..smoke import SMOKE, smoke_paths  # noqa: E402

EXPERIMENT = 15
EXPERIMENTS = (Experiment(EXPERIMENT, "own"),)  # its measure is the final validation loss: read by its own entries
DECLARED = "experiments/15_gpt_scaling_rules/declared_2026-12-07-exp15.txt"
#: the margin in nats a byte, declared before any run, at the one scale the study runs at (the others: none yet)
MARGINS = {"local": 0.05}
MARGIN_REASON = ("0.05 nats a byte (0.072 bits), 2-3 % of the final loss a run of this budget reaches, as the local "
                 "image margin (2 points) is 2.6 % of its baseline's top-1; in Kaplan et al.'s data scaling "
                 "(loss ~ tokens^-0.095) 2-3 % is what training on 70-77 % of the tokens costs")
RULES = ("none", "linear", "sqrt")
RULE_WORDS = {"none": "no scaling of the rate", "linear": "the linear scaling rule",
              "sqrt": "the square-root scaling rule"}
SCALE_PREFIX = r"((gpu|node|thesis)-)?"  # a study's run names at the other scales start with the scale
#: the trainer ends a run whose loss is not finite (status diverged); a configuration with such a seed fails
NON_FINITE = Divergence(math.inf, "a loss that is not finite: the trainer ends the run (status diverged)")
BASELINE_NAME, RATE_CHECK_NAME = rf"^{SCALE_PREFIX}w1-s\d+$", rf"^{SCALE_PREFIX}base[0-9.e-]+-s\d+$"
BASELINE_RUNS = Runs(EXPERIMENT, 1, names=BASELINE_NAME)
RATE_CHECK = "rate check"  # the 1-worker runs at half and twice the base rate (runs base<rate>-sN)


def rule_runs(rule: str) -> Runs:
    return Runs(EXPERIMENT, names=rf"^{SCALE_PREFIX}{rule}-w\d+-s\d+$", diverged=NON_FINITE)


def finding_name(rule: str) -> str:
    return f"adamw_{rule}_keeps_loss"


#: what its findings compare: the last epoch's validation loss, lower is better, against the declared margin
FINAL_LOSS = Measure("final validation loss (nats a byte, the last epoch's)", "nats", "final_val_loss",
                     "final_val_loss", higher_is_better=False, margins=MARGINS, margin_reason=MARGIN_REASON,
                     decimals=3)
#: one finding per rule, its rows the worker counts, Holm's correction over those 4 rows (one family a rule)
FINDINGS = tuple(
    Finding(finding_name(rule), f"AdamW with {RULE_WORDS[rule]} and warm-up keeps the 1-worker baseline's final "
                                "validation loss", "not worse",
            (Comparison(rule_runs(rule), BASELINE_RUNS, "1 worker"),), by=("gpus",), measure=FINAL_LOSS,
            fails_where_diverged=True)
    for rule in RULES)


# ============================================================================================ the runs


def rule_of(name: str) -> str | None:
    """A run's part of the study by its name: a rule, "baseline" (w1-sN), RATE_CHECK (base<rate>-sN), or None."""
    for label, pattern in (("baseline", BASELINE_NAME), (RATE_CHECK, RATE_CHECK_NAME),
                           *((rule, rule_runs(rule).names) for rule in RULES)):
        if re.match(pattern, str(name)):
            return label
    return None


def final_losses(df: pd.DataFrame) -> pd.DataFrame:
    """Experiment 15's runs that completed or diverged, one row each, with `final_val_loss` (their last epoch's
    validation loss, NaN where none is finite), `rule` (rule_of its name) and `diverged` (the trainer ended it on a
    non-finite loss)."""
    runs = df[(df["kind"] == "run") & (df["exp"] == EXPERIMENT) & df["status"].isin(["completed", "diverged"])]
    epochs = df[(df["kind"] == "epoch") & (df["exp"] == EXPERIMENT)].sort_values("epoch")
    runs = runs.assign(final_val_loss=runs["path"].map(epochs.groupby("path")["val_loss"].last()),
                       rule=runs["run"].map(rule_of))
    finite = np.isfinite(runs["final_val_loss"].astype(float))
    return runs.assign(diverged=(runs["status"] == "diverged") | ~finite).dropna(subset=["rule"])


# ============================================================================================ the rate check


def loss_verdict(ci_low: float, ci_high: float, margin: float) -> str:
    """The verdict of an interval of a loss difference: worse wholly above +margin, better wholly below -margin
    (analysis.findings.verdict reads higher as better: it is handed the negated interval)."""
    return fd.verdict(-ci_high, -ci_low, margin)


def losses_by_seed(runs: pd.DataFrame) -> pd.Series:
    return pd.Series(runs["final_val_loss"].to_numpy(dtype=float), index=runs["seed"].to_numpy())


def rate_check(df: pd.DataFrame) -> pd.DataFrame:
    """The baseline's rate checked, per scale and numerics (smoke runs left out): each neighbouring 1-worker rate's
    final loss minus the baseline's, its 90 % interval (paired by seed where both ran the same seeds), its verdict
    against the scale's margin, and `provisional`: the declared rule -- a neighbour whose interval lies wholly below
    -margin (better) makes every verdict of its scale provisional."""
    runs = final_losses(df)
    runs = runs[~runs["path"].isin(smoke_paths(df)) & ~runs["diverged"]]
    rows = []
    for (scale, numerics), g in runs.groupby([runs["scale"].fillna("unknown"), "numerics"], sort=True):
        base = losses_by_seed(g[g["rule"] == "baseline"])
        margin = MARGINS.get(scale, math.nan)
        for lr, neighbour in g[g["rule"] == RATE_CHECK].groupby("lr", sort=True):
            mine = losses_by_seed(neighbour)
            got = fd.interval(mine, base, paired=fd.same_seeds(mine, base))
            verdict = loss_verdict(got["ci_low"], got["ci_high"], margin)
            rows.append({"scale": scale, "numerics": numerics, "lr": lr, "n": len(mine), "n_against": len(base),
                         "difference": got["difference"], "ci_low": got["ci_low"], "ci_high": got["ci_high"],
                         "method": got["method"], "verdict": verdict, "provisional": verdict == "better"})
    return pd.DataFrame(rows, columns=["scale", "numerics", "lr", "n", "n_against", "difference", "ci_low", "ci_high",
                                       "method", "verdict", "provisional"])


def rate_check_lines(df: pd.DataFrame) -> list[str]:
    """The rate check in words, a line a scale: each neighbour's difference, and whether the verdicts stand."""
    lines = []
    for (scale, numerics), g in rate_check(df).groupby(["scale", "numerics"], sort=True):
        said = "; ".join(f"lr {r.lr:g}: {_nats(r.difference)} [{_nats(r.ci_low)}, {_nats(r.ci_high)}], {r.verdict}"
                         for r in g.itertuples())
        stands = ("PROVISIONAL: a neighbouring rate trains the 1-worker model better by more than the margin"
                  if g["provisional"].any() else
                  "the verdicts stand (no neighbouring rate is better beyond the margin)")
        lines.append(f"The baseline's rate checked ({scale} scale, {numerics}; final loss minus the baseline's, "
                     f"nats): {said} -- {stands}.")
    return lines


# ============================================================================================ each rule's reach


def rule_reach(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Each rule's reach, as declared: the largest worker count W up to which every row (4, ..., W) holds after
    Holm's correction; 0 where its smallest row does not. One row a rule, scale and numerics; `stops_at`: the first
    worker count whose row does not hold after Holm (NaN where every row holds)."""
    rows = []
    rule_of_finding = {finding_name(rule): rule for rule in RULES}
    mine = verdicts[verdicts["finding"].isin(list(rule_of_finding))]
    for (scale, numerics, finding), g in mine.groupby(["scale", "numerics", "finding"], sort=True):
        g = g.sort_values("workers")
        failing = g.loc[g["holds_holm"] != "yes", "workers"]
        stops_at = failing.iloc[0] if len(failing) else math.nan
        held = g.loc[g["workers"] < stops_at, "workers"] if len(failing) else g["workers"]
        rows.append({"scale": scale, "numerics": numerics, "rule": rule_of_finding[finding],
                     "reach": int(held.max()) if len(held) else 0, "stops_at": stops_at})
    return pd.DataFrame(rows, columns=["scale", "numerics", "rule", "reach", "stops_at"])


def reach_lines(verdicts: pd.DataFrame) -> list[str]:
    """The reach in words, a line a scale and numerics."""
    lines = []
    for (scale, numerics), g in rule_reach(verdicts).groupby(["scale", "numerics"], sort=True):
        said = "; ".join(f"{RULE_WORDS[r.rule]}: " + (f"up to {r.reach} workers" if r.reach else
                                                      f"none (not at {r.stops_at:g} workers, its smallest)")
                         for r in g.itertuples())
        lines.append(f"Each rule's reach ({scale} scale, {numerics}; the largest W up to which every row holds after "
                     f"Holm's correction, as declared): {said}.")
    return lines


def _nats(x) -> str:
    return "" if pd.isna(x) else f"{float(x):+.3f}"


# ============================================================================================ final loss per rule


def loss_table(df: pd.DataFrame) -> pd.DataFrame:
    """Final validation loss per rule and worker count at each scale and numerics (smoke runs apart): mean, sd and
    n over the finite runs, diverged runs counted, the rate and global batch in tokens, and the mean's difference
    from the baseline's at the same scale, numerics and smoke-ness (negative is better)."""
    runs = final_losses(df)
    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(smoke=runs["path"].isin(smoke_paths(df)), scale=runs["scale"].fillna("unknown"))
    keys = ["scale", "numerics", "smoke", "rule", "gpus", "lr"]  # the rate check's two rates apart
    grouped = runs.groupby(keys, dropna=False, sort=False)
    table = pd.DataFrame({
        "global_batch_windows": grouped["global_batch"].first(),
        "n": grouped["final_val_loss"].count(), "diverged": grouped["diverged"].sum().astype(int),
        "final_val_loss_mean": grouped["final_val_loss"].mean(), "final_val_loss_sd": grouped["final_val_loss"].std(),
    }).reset_index()
    base = table[table["rule"] == "baseline"].set_index(["scale", "numerics", "smoke"])["final_val_loss_mean"]
    table["minus_baseline"] = table["final_val_loss_mean"] - [base.get(k, math.nan) for k in
                                                            zip(table["scale"], table["numerics"], table["smoke"])]
    order = {rule: i for i, rule in enumerate(("baseline", RATE_CHECK, *RULES))}
    table = table.sort_values(["scale", "numerics", "smoke", "gpus", "rule", "lr"], key=lambda c: c.map(order)
                              if c.name == "rule" else c, kind="stable")
    return table.assign(smoke=table["smoke"].map({True: SMOKE, False: ""})).reset_index(drop=True)


def loss_per_rule(inputs, entry: Table) -> pd.DataFrame | None:
    table = loss_table(inputs.df)
    losses = ["final_val_loss_mean", "final_val_loss_sd", "minus_baseline"]
    return table.round({column: 4 for column in losses}) if len(table) else None


# ============================================================================================ the figure


def loss_figure(table: pd.DataFrame, margin: float):
    """Final validation loss against workers (log 2), a line per rule (mean, sd as bars), the baseline's mean as a
    line with the margin's band around it; one panel a scale and numerics."""
    panels = list(table.groupby(["scale", "numerics", "smoke"], sort=True))
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 4.6), squeeze=False, layout="constrained")
    for ax, ((scale, numerics, smoke), g) in zip(axes[0], panels):
        base = g[g["rule"] == "baseline"]["final_val_loss_mean"]
        if len(base) and not math.isnan(margin):
            ax.axhspan(base.iloc[0] - margin, base.iloc[0] + margin, color="0.85", label=f"baseline ± {margin:g}")
        if len(base):
            ax.axhline(base.iloc[0], color="black", linewidth=1, label="1-worker baseline")
        for i, rule in enumerate(RULES):
            mine = g[g["rule"] == rule].sort_values("gpus")
            ax.errorbar(mine["gpus"], mine["final_val_loss_mean"], yerr=mine["final_val_loss_sd"].fillna(0),
                        marker="o", capsize=3, color=fg._colour(i), label=RULE_WORDS[rule])
        ax.set_xscale("log", base=2)
        workers = sorted(int(w) for w in g.loc[g["rule"].isin(RULES), "gpus"].unique())
        ax.set_xticks(workers, [str(w) for w in workers])
        ax.set_xlabel("workers (global batch = workers x the per-worker batch)")
        ax.set_ylabel("final validation loss (nats a byte)")
        ax.set_title(f"{scale} scale, {numerics}" + (f" ({smoke})" if smoke else ""), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Experiment 15: AdamW's final validation loss under each scaling rule, with warm-up", fontsize=10)
    return fig


def final_loss_figure(inputs, entry: Figure) -> Drawn | None:
    table = loss_table(inputs.df)
    return Drawn(loss_figure(table, MARGINS["local"]), inputs.source) if len(table) else None


def loss_notes(inputs, shown: pd.DataFrame) -> list[str]:
    """The columns in words, where the verdicts are, and the baseline's rate check, a line a scale."""
    return [
        "final_val_loss: the last epoch's validation loss (nats a byte) of the completed runs, mean and sd over "
        "their seeds; diverged: runs the trainer ended on a non-finite loss, counted, never averaged; "
        "minus_baseline: the mean minus the 1-worker baseline's (negative is better); lr: the rule's rate after "
        "warm-up; global_batch_windows: windows of the context's tokens a step.",
        f"The verdicts (each rule against the baseline, {MARGINS['local']} nats, Holm's correction over each rule's "
        "rows) are in orderings.md, beside the thesis's findings.",
        *rate_check_lines(inputs.df),
        *reach_lines(inputs.verdicts),
    ]


TABLES = (
    Table("exp15_final_loss", "", (EXPERIMENT,), loss_per_rule,
          "Experiment 15: final validation loss per scaling rule and worker count, against the 1-worker baseline",
          loss_notes),
)
FIGURES = (Figure("exp15_final_loss", "", (EXPERIMENT,), final_loss_figure),)
EXPORTS = ("loss_table", "rate_check", "rule_reach")
