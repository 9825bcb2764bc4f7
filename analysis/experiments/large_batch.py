"""Experiment 12 (beyond the thesis): where linear scaling with warm-up stops matching the 1-worker baseline, and
whether LARS, LAMB or RAdam carry it further. Only the study's runs are read (the base-rate sweep's chose the rates);
diverged runs (DIVERGED_SHARE below, a rule added after the runs) are counted, not averaged; the critical
batch drawn is B_simple measured on the study's own runs by `make noise-scale`, never a constant.
"""
from __future__ import annotations

import re
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from contract.reader import read_config  # noqa: E402

from .. import figures as fg  # noqa: E402
from .. import findings as fd  # noqa: E402
from ..entries import Comparison, Divergence, Drawn, Experiment, Figure, Finding, Runs  # noqa: E402
from ..findings import CONFIDENCE, OPTIMIZERS  # noqa: E402
from ..machines import REPO  # noqa: E402
from ..noise import examples_words, noise_text  # noqa: E402
from ..noise import noise_scales as measured_noise  # noqa: E402
from ..page import Question  # noqa: E402
from ..reference import THESIS_WORKERS  # noqa: E402
from ..smoke import diverged_runs  # noqa: E402

LARGE_BATCH, BASELINE = 12, 5  # against experiment 5's 1-worker runs, the thesis's findings' baseline
EXPERIMENTS = (Experiment(LARGE_BATCH, "quality"),)
# the study's runs (lars-w256-s0; thesis-lars-w256-s0 at another scale), not its sweep's (lars-base0.5-s0)
STUDY_RUN = r"^([a-z]+-)?[a-z]+-w\d+-s\d+$"
# A reading rule, added on 2026-11-28 after experiment 12's runs had all ended (issue 50), not a change of its design:
# a study run diverged when its last epoch's training loss is not finite or still above DIVERGED_SHARE of its first
# epoch's (the first epoch's loss is close to an untrained model's, ln of the classes). Such a run measures a failed
# optimisation at its rate and warm-up, not how accurate a model that batch trains is, so it is labelled, left out of
# the means and of the rows that fail a finding, and counted on its own (`diverged`). Every study run that trained
# ended far below the share, every one that did not far above it (experiments/12_large_batch/README.md).
DIVERGED_SHARE = 0.75
STUDY = Runs(LARGE_BATCH, names=STUDY_RUN,
             diverged=Divergence(DIVERGED_SHARE, "a reading rule added on 2026-11-28, after the runs"))
FINDING = "large_batch_matches_baseline"
# the base-rate sweep's runs chose the rates and are no verdicts; the thesis ran no such study (no thesis_difference)
FINDINGS = (Finding(FINDING, "Past the thesis's batch, each optimizer matches the 1-worker baseline", "equivalent",
                    (Comparison(STUDY, Runs(BASELINE, 1), "exp 5, 1 worker"),), by=("optimizer", "gpus")),)
#: the committed measurements `make noise-scale` writes: the study's 32-worker run, initial and final weights
NOISE_FILES = tuple(REPO / "results" / "noise_scale" / f"large_batch_{weights}.json"
                    for weights in ("initial", "final"))
NAMES = {"sgd": "SGD + linear scaling + warm-up", "lars": "LARS", "lamb": "LAMB", "radam": "RAdam"}
POINT_COLUMNS = ["scale", "numerics", "optimizer", "workers", "global_batch", "n", "best_top1", "ci_low", "ci_high",
                 "diverged", "worst_loss", "worst_epoch", "sweep_seeds", "decay"]
# A row whose interval ends this close to a margin (a share of the margin) is called borderline in the reading.
BORDERLINE = 0.1


def noise_scales(paths=NOISE_FILES) -> pd.DataFrame:
    """The noise-scale measurements of the study's runs (analysis.noise.noise_scales of NOISE_FILES)."""
    return measured_noise(paths)


def _mean_interval(values: pd.Series) -> tuple[float, float, float]:
    """Mean and its 90 % t interval (NaN bounds with fewer than two values)."""
    values = values.dropna().astype(float)
    mean = float(values.mean()) if len(values) else math.nan
    if len(values) < 2 or values.std(ddof=1) == 0:
        return mean, (mean if len(values) > 1 else math.nan), (mean if len(values) > 1 else math.nan)
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def study_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Experiment 12's completed study runs (one row each)."""
    runs = df[(df["kind"] == "run") & (df["exp"] == LARGE_BATCH) & (df["status"] == "completed")]
    return runs[runs["run"].str.match(STUDY_RUN, na=False)].dropna(subset=["best_val_top1"])


def study_points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per scale, numerics, optimizer and worker count: mean best top-1 of the runs that did not diverge,
    the diverged ones counted apart, and the seeds that repeat the sweep's run that selected the rate."""
    rows = []
    rank = {name: i for i, name in enumerate(OPTIMIZERS)}
    failures, swept = failed_trainings(df), sweep_runs(df)
    for key, g in study_runs(df).groupby(["scale", "numerics", "optimizer", "gpus"], sort=True):
        gone = g["path"].isin(set(failures))
        mean, low, high = _mean_interval(g.loc[~gone, "best_val_top1"])
        worst = max((failures[p] for p in g.loc[gone, "path"]), default=(math.nan, math.nan))
        rows.append(dict(zip(["scale", "numerics", "optimizer", "workers"], key), n=int((~gone).sum()),
                         best_top1=mean, global_batch=int(g["global_batch"].iloc[0]), ci_low=low, ci_high=high,
                         diverged=int(gone.sum()),
                         worst_loss=worst[0], worst_epoch=worst[1],
                         sweep_seeds=",".join(str(int(sd)) for sd, fp in zip(g["seed"], g.get("fingerprint", g["seed"]))
                                              if (fp, int(sd)) in swept), decay=_decay(g["path"].iloc[0])))
    points = pd.DataFrame(rows, columns=POINT_COLUMNS)
    order = points["optimizer"].map(lambda o: rank.get(o, len(rank)))
    return points.assign(_o=order).sort_values(["scale", "numerics", "_o", "workers"]).drop(columns="_o") \
        .reset_index(drop=True)


def _decay(run_dir: str) -> str:
    """The learning-rate decay a run's config.json says it ran with ("" where it cannot be read)."""
    config = read_config(run_dir) or {}
    return str((config.get("lr") or {}).get("decay", ""))


def failed_trainings(df: pd.DataFrame) -> dict[str, tuple[float, int]]:
    """Study run folder -> (its worst training loss, that epoch) of each diverged run: a failed optimisation at that
    rate and warm-up, not the batch at which accuracy stops keeping up, so it is left out of the means."""
    gone = diverged_runs(df, [STUDY]) & set(study_runs(df)["path"])
    epochs = df[(df["kind"] == "epoch") & df["path"].isin(gone)]
    failed = {}
    for path, g in epochs.groupby("path"):
        losses = g.sort_values("epoch")[["epoch", "train_loss"]].astype(float)
        worst = losses.loc[losses["train_loss"].fillna(math.inf).idxmax()]
        failed[path] = (float(worst["train_loss"]), int(worst["epoch"]))
    return failed


def sweep_runs(df: pd.DataFrame) -> set[tuple[str, int]]:
    """(config fingerprint, seed) of each of experiment 12's base-rate sweep runs (its runs outside the study's
    names). A study run with both is the same run as the sweep's (the fingerprint leaves the seed out)."""
    runs = df[(df["kind"] == "run") & (df["exp"] == LARGE_BATCH)]
    if "fingerprint" not in runs:  # a frame not read from run folders: no identity to compare
        return set()
    # a sweep run the study trained again counts once, as the study's (analysis/runs.py count_runs_once): its copy
    # is gone from the frame, its kept folder stands for both
    repeated = {kept for copy, kept in df.attrs.get("copies", {}).items() if not re.match(STUDY_RUN, Path(copy).name)}
    sweep = runs[~runs["run"].str.match(STUDY_RUN, na=False) | (runs["path"].isin(repeated) if repeated else False)]
    sweep = sweep.dropna(subset=["fingerprint", "seed"])
    return set(zip(sweep["fingerprint"], sweep["seed"].astype(int)))


def baseline_band(df: pd.DataFrame, scale: str, numerics: str) -> dict:
    """Experiment 5's 1-worker runs at a scale and numerics: seeds and mean best top-1."""
    base = df[(df["kind"] == "run") & (df["exp"] == BASELINE) & (df["gpus"] == 1) & (df["status"] == "completed")
              & (df["scale"] == scale) & (df["numerics"] == numerics)]
    mean, low, high = _mean_interval(base["best_val_top1"])
    return {"n": len(base), "mean": mean, "ci_low": low, "ci_high": high}


def plot_large_batch(points: pd.DataFrame, band: dict, margin: float, noise: pd.DataFrame, ax=None,
                     title: str | None = None):
    """Best top-1 (mean, 90 % interval over seeds) against the global batch, a line per optimizer."""
    ax = fg._ax(ax, figsize=(8.5, 4.8))
    for i, (optimizer, g) in enumerate(points.groupby("optimizer", sort=False)):
        g = g.sort_values("global_batch")
        err = [g["best_top1"] - g["ci_low"], g["ci_high"] - g["best_top1"]]
        seeds = "-".join(str(n) for n in sorted({int(n) for n in g["n"] if n}))
        ax.errorbar(g["global_batch"], g["best_top1"], yerr=err, marker="o", capsize=3, color=fg._colour(i),
                    label=f"{NAMES.get(optimizer, optimizer)} ({seeds} seeds)")
        gone = g[(g["n"] == 0) & (g["diverged"] > 0)]  # every run diverged: no mean, a cross on the axis
        if len(gone):
            ax.plot(gone["global_batch"], [0.0] * len(gone), marker="x", ls="", ms=9, color=fg._colour(i),
                    label=f"{NAMES.get(optimizer, optimizer)}: every run diverged (no mean)")
    if band["n"]:
        ax.axhline(band["mean"], color="black", lw=1, label=f"exp 5, 1 worker ({band['n']} seeds)")
        if not math.isnan(margin):
            ax.axhspan(band["mean"] - margin, band["mean"] + margin, color="grey", alpha=0.15,
                       label=f"baseline ± {margin:g} points (the margin)")
    per_worker = (points["global_batch"] / points["workers"]).iloc[0] if len(points) else None
    if per_worker:
        ax.axvline(THESIS_WORKERS * per_worker, color="black", ls=":", lw=1,
                   label="32 workers: the thesis's 4,096 (32 GPUs x 128)")
    ax.set_xscale("log", base=2)
    ax.set_xlim(*_batch_range(points, noise))
    for _, row in noise.iterrows():
        _draw_noise_scale(ax, row)
    fg.log2_ticks(ax, "x")
    fg._finish(ax, "global batch (images a step)", "best validation top-1 (%)", title)
    fg.legend_beside(ax)
    return ax


def _batch_range(points: pd.DataFrame, noise: pd.DataFrame) -> tuple[float, float]:
    """The x range: every batch drawn and every noise-scale value, with a margin on the log axis."""
    limits = ("b_simple", "b_simple_low", "b_simple_high")
    xs = [float(x) for x in points["global_batch"]] + [float(x) for col in limits for x in noise[col]
                                                       if x is not None and not pd.isna(x)]
    return (min(xs) / 1.3, max(xs) * 1.3) if xs else (1.0, 2.0)


def _draw_noise_scale(ax, row) -> None:
    """B_simple and its 2-SE range; a lower bound alone (|G|^2 not resolved from zero) hatched to the axis's end."""
    colour = "#D55E00"
    if row.b_simple_high is None or pd.isna(row.b_simple_high) or pd.isna(row.b_simple):
        ax.axvline(row.b_simple_low, color=colour, ls="-.", lw=1,
                   label=f"B_simple, {row.weights} weights: ≥ {examples_words(row.b_simple_low)} (hatched: beyond)")
        ax.axvspan(row.b_simple_low, ax.get_xlim()[1], facecolor="none", edgecolor=colour, hatch="//", alpha=0.25,
                   lw=0)
        return
    ax.axvspan(row.b_simple_low, row.b_simple_high, alpha=0.08, color=colour)
    ax.axvline(row.b_simple, color=colour, ls="--", lw=1,
               label=f"B_simple, {row.weights} weights: {noise_text(row)}")


def large_batch_figure(df: pd.DataFrame, margins: dict, noise: pd.DataFrame | None = None):
    """One panel per scale and numerics with study runs; None without any."""
    points = study_points(df)
    if points.empty:
        return None
    noise = noise_scales() if noise is None else noise
    groups = list(points.groupby(["scale", "numerics"], sort=True))
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 4.8 * len(groups)), squeeze=False, layout="constrained")
    for ax, ((scale, numerics), g) in zip(axes[:, 0], groups):
        margin = float(margins.get(scale, {}).get("points", math.nan))
        plot_large_batch(g, baseline_band(df, scale, numerics), margin, noise if scale == "local" else noise.iloc[0:0],
                         ax=ax, title=f"Experiment 12 at the {scale} scale ({numerics}): best top-1 against the "
                                      "global batch, per optimizer (90 % intervals over seeds)")
    return fig


def plot_differences(v: pd.DataFrame, batch: dict, margin: float, ax=None, title: str | None = None):
    """Each row's difference from experiment 5's 1-worker baseline, its 90 % interval and verdict, against the
    global batch; rows beyond the axis are drawn at its edge with their value, so the margin's band stays readable."""
    ax = fg._ax(ax, figsize=(8.5, 4.8))
    low, high = -5 * margin, 3 * margin
    ax.axhspan(-margin, margin, color="grey", alpha=0.15, label=f"± {margin:g} points (the margin)")
    ax.axhline(0, color="black", lw=1)
    optimizers = [o for o in OPTIMIZERS if o in set(v["optimizer"])]
    for i, optimizer in enumerate(optimizers):
        rows = v[v["optimizer"] == optimizer].sort_values("workers")
        x = [batch.get(int(w), math.nan) * 1.06 ** (i - (len(optimizers) - 1) / 2) for w in rows["workers"]]
        for xi, r in zip(x, rows.itertuples()):
            _draw_difference(ax, xi, r, fg._colour(i), low, high)
        ax.plot([], [], marker="o", color=fg._colour(i), ls="", label=NAMES.get(optimizer, optimizer))
    ax.plot([], [], marker="o", color="grey", ls="", mfc="none", label="open: inconclusive")
    ax.plot([], [], marker="X", color="grey", ls="", label="cross: worse or better")
    ax.set_xscale("log", base=2)
    ax.set_ylim(low, high)
    fg.log2_ticks(ax, "x")
    fg._finish(ax, "global batch (images a step)", "best top-1 minus the 1-worker baseline (points)", title)
    fg.legend_beside(ax)
    return ax


def _draw_difference(ax, x: float, r, colour: str, low: float, high: float) -> None:
    if r.verdict == "diverged":  # every run diverged: no difference, a cross at the axis's foot, said in words
        ax.plot([x], [low], marker="x", ms=9, color=colour, ls="")
        ax.annotate("diverged", (x, low), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7,
                    color=colour)
        return
    marker = "o" if r.verdict in ("equivalent", "inconclusive") else "X"
    face = colour if r.verdict != "inconclusive" else "none"
    if r.difference < low or r.difference > high:  # off the axis: at its edge, with the value
        edge = low if r.difference < low else high
        ax.plot([x], [edge], marker="v" if edge == low else "^", color=colour, ls="")
        ax.annotate(f"{r.difference:+.0f}", (x, edge), textcoords="offset points",
                    xytext=(0, 6 if edge == low else -12), ha="center", fontsize=7, color=colour)
        return
    ax.errorbar([x], [r.difference], yerr=[[r.difference - r.ci_low], [r.ci_high - r.difference]], color=colour,
                marker=marker, mfc=face, capsize=3, ls="")


def differences_figure(verdicts: pd.DataFrame, points: pd.DataFrame, margins: dict):
    """One panel per scale and numerics of experiment 12's verdict rows (plot_differences); None without any."""
    v = verdicts[verdicts["finding"] == FINDING] if "finding" in verdicts else verdicts.iloc[0:0]
    if v.empty:
        return None
    groups = list(v.groupby(["scale", "numerics"], sort=True))
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 4.8 * len(groups)), squeeze=False, layout="constrained")
    for ax, ((scale, numerics), g) in zip(axes[:, 0], groups):
        mine = points[(points["scale"] == scale) & (points["numerics"] == numerics)]
        margin = float(margins.get(scale, {}).get("points", math.nan))
        plot_differences(g, dict(zip(mine["workers"].astype(int), mine["global_batch"])), margin, ax=ax,
                         title=f"Experiment 12 at the {scale} scale ({numerics}): each row's difference from the "
                               "1-worker baseline, its 90 % interval and verdict")
    return fig


def _verdict_text(r, point=None) -> str:
    """One row of the reading, with what qualifies it (point: its row of study_points)."""
    seeds = f", {int(r.n)} vs {int(r.n_against)} seeds" if hasattr(r, "n") and not pd.isna(r.n) else ""
    if r.verdict == "diverged":  # every run diverged: nothing to average, no verdict
        return f"{int(r.workers)} workers: no verdict" + "".join(f"; {q}" for q in qualifiers(r, point))
    if pd.isna(r.ci_low):
        return f"{int(r.workers)} workers: {r.verdict} (no interval{seeds})"
    interval = f"[{r.ci_low:+.1f}, {r.ci_high:+.1f}]"
    # an interval above -margin that reaches past +margin: not `equivalent`, but not worse by the margin either
    not_worse = f" (not worse: the interval clears -{r.margin:g})" if (
        r.verdict == "inconclusive" and r.ci_low > -r.margin) else ""
    return (f"{int(r.workers)} workers: {r.difference:+.1f} points {interval}, {r.verdict}{not_worse}{seeds}"
            + "".join(f"; {q}" for q in qualifiers(r, point)))


def qualifiers(r, point=None) -> list[str]:
    """What a reader must know before leaning on a row: an interval end within BORDERLINE of a margin, a last-epoch
    verdict that differs from the best epoch's, runs whose training failed, seeds that repeat the sweep's runs."""
    out = []
    ends = [(r.ci_low, -r.margin, "low"), (r.ci_high, r.margin, "high")]
    close = [(end, m, name) for end, m, name in ends if abs(end - m) < BORDERLINE * r.margin]
    if close and r.verdict in ("equivalent", "inconclusive"):
        end, m, name = close[0]
        out.append(f"borderline: its {name} end {end:+.2f} against {m:+g}")
    final = getattr(r, "final_verdict", None)
    if isinstance(final, str) and final and final != r.verdict:
        out.append(f"at the last epoch {final}")
    if point is not None and point.diverged:
        out.append(f"{int(point.diverged)} of {int(point.diverged + point.n)} runs diverged (training loss up to "
                   f"{point.worst_loss:.0f} at epoch {int(point.worst_epoch)}, their last above {DIVERGED_SHARE:g} of "
                   "the first epoch's): left out, a failed optimisation at this rate and warm-up, not a measure of "
                   "the batch")
    if point is not None and point.sweep_seeds:
        out.append(f"seed {point.sweep_seeds} repeats the sweep's run that chose this rate (selected as the best "
                   "of its grid)")
    return out


def where_it_stops(rows: pd.DataFrame) -> tuple[int | None, int | None]:
    """(the largest worker count up to which every row is `equivalent`, the first that is not), by workers."""
    last, first_not = None, None
    for r in rows.sort_values("workers").itertuples():
        if r.verdict != "equivalent":
            first_not = int(r.workers)
            break
        last = int(r.workers)
    return last, first_not


def rq4_reading(verdicts: pd.DataFrame, points: pd.DataFrame, noise: pd.DataFrame | None = None) -> str:
    """Per scale: each optimizer's verdicts by batch, where SGD + warm-up stops being `equivalent`, which optimizers
    are `equivalent` beyond it (count by count), and where the noise scale's critical batch lies against that."""
    v = verdicts[verdicts["finding"] == FINDING] if "finding" in verdicts else verdicts.iloc[0:0]
    if v.empty:
        return ("**Reading:** no experiment 12 verdicts yet: its study runs (`make exp12`, step 2) have not run "
                "on these runs' machine, or experiment 5's 1-worker baseline is missing.")
    noise = noise_scales() if noise is None else noise
    lines = ["**Reading, computed from the runs above** (each row: mean best top-1 minus experiment 5's 1-worker "
             "baseline, its 90 % interval, the verdict against the scale's margin; rows are not corrected for their "
             "number" + _holm_clause(v) + ").", ""]
    for (scale, numerics), g in v.groupby(["scale", "numerics"], sort=True):
        mine = points[(points["scale"] == scale) & (points["numerics"] == numerics)]
        lines += _scale_reading(scale, numerics, g, mine, noise if scale == "local" else noise.iloc[0:0]) + [""]
    return "\n".join(lines).rstrip() + "\n"


def _holm_clause(v: pd.DataFrame) -> str:
    """'; after Holm's correction over each scale's N rows, K stay `equivalent`' when the verdicts carry holds_holm."""
    if "holds_holm" not in v:
        return ""
    claimed = v[~v["holds_holm"].isin(["n/a", "diverged"])]
    return (f"; after Holm's correction over each scale's rows, {int((claimed['holds_holm'] == 'yes').sum())} of "
            f"{len(claimed)} stay `equivalent` (the verdict table's `holds after Holm`)")


def _scale_reading(scale: str, numerics: str, g: pd.DataFrame, mine: pd.DataFrame, noise: pd.DataFrame) -> list[str]:
    """mine: this scale's study_points."""
    batch = dict(zip(mine["workers"], mine["global_batch"]))
    point = {(p.optimizer, int(p.workers)): p for p in mine.itertuples()}
    lines = [f"*{scale} scale, {numerics}*", "- What is compared: " + _what_ran(mine)]
    for optimizer, rows in _by_optimizer(g):
        lines.append(f"- {optimizer}: " + " | ".join(_verdict_text(r, point.get((optimizer, int(r.workers))))
                                                     for r in rows.sort_values("workers").itertuples()) + ".")
    sgd = g[g["optimizer"] == "sgd"]
    sgd_last, sgd_first_not = where_it_stops(sgd)
    if not sgd.empty:
        lines.append("- SGD with linear scaling and gradual warm-up " + (
            f"is `equivalent` at every worker count run (up to {sgd_last})." if sgd_first_not is None else
            f"stops being `equivalent` at {sgd_first_not} workers" + (f" (equivalent up to {sgd_last})."
                                                                     if sgd_last else " (and at no count below).")))
        if sgd_first_not is not None:
            lines.append("- Beyond that, " + _beyond_sgd(g, sgd_first_not))
    broke = batch.get(sgd_first_not) if sgd_first_not is not None else None
    largest = max(batch.values()) if batch else None
    for r in noise.itertuples():
        where = (f"; SGD's first batch that is not `equivalent`, {broke:,}, lies {_against_noise(broke, r)} it"
                 if broke else f"; the largest batch run, {largest:,}, lies {_against_noise(largest, r)} it"
                 if largest else "")
        lines.append(f"- Gradient noise scale ({r.weights} weights of {r.run}): B_simple {noise_text(r)} "
                     f"images{where}.")
    if len(noise):
        lines.append("- What the noise scale predicts: McCandlish et al. (2018) model the cost of a batch B as "
                     "about 1 + B_noise/B times the optimizer steps a small batch needs to reach the same loss -- a "
                     "gradual cost in steps, not a batch at which accuracy after a fixed number of epochs collapses. "
                     "These runs train a fixed number of epochs, so they do not test it; steps to a target accuracy "
                     "at each batch would.")
    if noise.empty:
        lines.append("- No noise-scale measurement of this experiment's runs (`make noise-scale` after its SGD "
                     "runs): the critical batch is not drawn.")
    return lines


def _what_ran(mine: pd.DataFrame) -> str:
    """Each optimizer's recipe as its runs' config.json say it, and whether the sweep chose its rate (a study run
    repeats a sweep run) -- so a tuned recipe is never read as the optimizer alone against an untuned one."""
    parts = []
    for optimizer, rows in _by_optimizer(mine):
        tuned = rows[rows["sweep_seeds"] != ""]
        how = (f"its rate chosen by the base-rate sweep at {int(tuned['workers'].iloc[0])} workers"
               if len(tuned) else "its rate not swept")
        decays = sorted(set(rows["decay"]) - {""})
        parts.append(f"{optimizer} ({how}{', ' + '/'.join(decays) + ' decay' if decays else ''})")
    return ("; ".join(parts) + ". An optimizer whose rate was tuned against one that was not: a gap between "
            "them is the recipe's, not the optimizer's alone.")


def _beyond_sgd(g: pd.DataFrame, sgd_first_not: int) -> str:
    """Which other optimizers are `equivalent` where SGD no longer is, count by count, naming what has run there so
    far (a study in progress reads as such)."""
    there = g[(g["optimizer"] != "sgd") & (g["workers"] >= sgd_first_not)].sort_values("workers")
    if there.empty:
        return "no other optimizer has run there yet."
    ran = "; ".join(f"{o} at {', '.join(str(int(w)) for w in rows['workers'])}"
                    for o, rows in _by_optimizer(there))
    held = [(o, [int(w) for w in rows.loc[rows["verdict"] == "equivalent", "workers"]])
            for o, rows in _by_optimizer(there)]
    held = [(o, counts) for o, counts in held if counts]
    if not held:
        return f"none of the optimizers run there is `equivalent` (run there, in workers: {ran})."
    said = "; ".join(f"{o} {'is `equivalent` at ' if i == 0 else 'at '}{', '.join(map(str, counts))}"
                     for i, (o, counts) in enumerate(held))
    return f"{said} workers (run there, in workers: {ran})."


def _by_optimizer(rows: pd.DataFrame):
    """(optimizer, its rows) in the study's optimizer order."""
    return [(o, rows[rows["optimizer"] == o]) for o in OPTIMIZERS if o in set(rows["optimizer"])]


def _against_noise(images: int, r) -> str:
    """Where a batch lies against a B_simple measurement: below, inside or above its range."""
    if images < r.b_simple_low:
        return "below"
    if r.b_simple_high is None or pd.isna(r.b_simple_high) or images <= r.b_simple_high:
        return "inside the range of"
    return "above"


def large_batch(inputs, entry: Figure) -> Drawn | str:
    figure = large_batch_figure(inputs.df, fd.margins())
    return "no experiment 12 study runs" if figure is None else Drawn(figure, inputs.source)


def large_batch_differences(inputs, entry: Figure) -> Drawn | None:
    points = study_points(inputs.df)
    if points.empty:  # no study runs: large_batch says so
        return None
    figure = differences_figure(inputs.verdicts, points, fd.margins())
    return None if figure is None else Drawn(figure, inputs.source)


FIGURES = (
    Figure("exp12_large_batch", "", (5, 12), large_batch),
    Figure("exp12_differences", "", (5, 12), large_batch_differences),
)
QUESTIONS = (Question("large_batch", "Large batch", "Past the thesis's 4k batch: where linear scaling with warm-up "
                      "breaks, and LARS, LAMB, RAdam", "rq4_large_batch", experiments=(LARGE_BATCH,)),)
RQ4 = [
    ("md", "# RQ4 — past the thesis's 4k batch: where linear scaling with warm-up breaks, and LARS, LAMB, RAdam\n\n"
           "The thesis stops at 32 GPUs x 128 = 4,096 images a step. Experiment 12 (`experiments/12_large_batch`) "
           "runs SGD with linear scaling and gradual warm-up, LARS, LAMB and RAdam at 32-256 workers (locally "
           "x 4 images: 128-1,024; 4k-32k at the thesis and gpu scales), each optimizer at the base rate its "
           "declared seed-0 sweep chose, 3 seeds, against experiment 5's 1-worker baseline with the findings' "
           "equivalence test. What is compared is each optimizer's recipe (the reading says which rates were "
           "tuned); the gradient noise scale (`make noise-scale`) is drawn beside it."),
    ("code", None),
    ("md", "## Best top-1 per optimizer and global batch (mean and 90 % interval over seeds)"),
    ("code", "points = an.study_points(df)\npoints"),
    ("md", "## Verdicts against experiment 5's 1-worker baseline"),
    ("code", "verdicts = an.orderings(df, ref)\n"
             "an.verdict_table(verdicts[verdicts['experiment'] == 12])"),
    ("code", "fig = an.differences_figure(verdicts, points, an.findings.margins())\n"
             "an.show(fig) if fig is not None else print('no experiment 12 verdicts')"),
    ("md", "## The gradient noise scale of the same model and data, measured on the study's runs"),
    ("code", "noise = an.noise_scales()\nnoise"),
    ("code", "fig = an.large_batch_figure(df, an.findings.margins(), noise)\n"
             "an.show(fig) if fig is not None else print('no experiment 12 study runs')"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq4_reading(verdicts, points, noise))"),
    ("md", "## Once SGD is tuned: experiment 13's SGD (its first edition, frozen), each batch at its own rate, beside "
           "these recipes\n\n"
           "Steps to experiment 13's target (50 % top-1), the measure of `rq5_critical_batch.ipynb`: experiment 12's "
           "runs read at that target, beside SGD tuned per batch (no decay)."),
    ("code", "an.exp13_first_edition.show('readings/tuned_beside_recipes.md')"),
    ("md", "## Once both are tuned: experiment 13's LAMB beside its SGD (its first edition, frozen), each batch at "
           "its own rate (Nado et al.)"),
    ("code", "an.exp13_first_edition.show('readings/tuned_optimizers.md')"),
]
NOTEBOOKS = {"rq4_large_batch.ipynb": RQ4}
EXPORTS = ("differences_figure", "large_batch_figure", "noise_scales", "rq4_reading", "study_points")
