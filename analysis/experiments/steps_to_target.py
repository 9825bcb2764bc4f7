"""Experiment 13 (beyond the thesis), its first edition: optimizer steps to a target validation accuracy per global
batch, each batch at its own tuned rate (Shallue et al. 2019), and McCandlish et al.'s (2018) model
S = S_min (1 + B_noise / B) fitted to them. The rules are declared in experiments/13_steps_to_target/README.md
before any run; this module computes exactly those (its functions, in the order of the rules: one run's steps,
step 1's choice of rate, step 2's curve, its fit, bootstrap and regimes, and the noise scale beside it).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from contract.config import ConfigError, load_config  # noqa: E402
from contract.plan import study_table  # noqa: E402

from .. import figures as fg  # noqa: E402
from ..entries import Drawn, Figure, Table  # noqa: E402
from ..machines import one_machine  # noqa: E402
from ..smoke import smoke_paths  # noqa: E402
from ..noise import fit_noise_model, noise_scales, percentile_interval  # noqa: E402
from ..reference import THESIS_WORKERS  # noqa: E402

EXPERIMENT = 13
CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "13_steps_to_target" / "edition1.toml"  # the first
# edition (superseded by the second, declared_2026-11-28-edition2.txt): its plan as it ran, read as it was
TUNE_RUN = re.compile(r"^tune-(?P<optimizer>[a-z]+)-w(?P<workers>\d+)-base(?P<base>[0-9.e-]+)-s(?P<seed>\d+)$")
STUDY_RUN = re.compile(r"^(?P<optimizer>[a-z]+)-w(?P<workers>\d+)-s(?P<seed>\d+)$")
PERFECT_RATIO, FLAT_RATIO = 0.6, 0.9  # declared: a doubling that saves < 40 % ends perfect scaling, < 10 % ends it all
AGREEMENT_FACTOR = 10.0  # declared: B_simple "predicted" B_crit when the intervals lie within this factor
BOOTSTRAPS = 2000
GRID_RATES, EDGE_EXTENSIONS = 3, 2  # declared: three rates per (optimizer, batch), at most two more by the edge rule
STUDY_SEEDS, FIRST_STUDY_SEED = 3, 1  # declared: the study's seeds 1-3, never the tuning seed 0
GOYAL_FACTOR = 2  # Goyal et al.'s 8k against the thesis's 4k: the stand-in doubled
STEP_COLUMNS = ["exp", "scale", "optimizer", "workers", "global_batch", "seed", "base", "tuning", "status",
                "reached", "epoch", "steps", "examples", "best_top1", "epoch_steps", "path"]


def first_reach(epochs: pd.DataFrame, global_batch: int, target: float) -> dict:
    """Steps and examples until the first epoch whose val_top1 >= target. An epoch's steps are its images over the
    global batch, rounded up (the sampler's last step is a short one); no interpolation inside an epoch, so the
    count's resolution is one epoch (`epoch_steps`). reached False: no epoch did (the steps are then NaN)."""
    e = epochs.sort_values("epoch")
    steps = np.ceil(e["images"].astype(float) / global_batch).cumsum()
    hit = e["val_top1"].astype(float) >= target
    epoch_steps = float(steps.iloc[0]) if len(steps) else math.nan
    if not hit.any():
        return {"reached": False, "epoch": math.nan, "steps": math.nan, "examples": math.nan,
                "epoch_steps": epoch_steps}
    at = int(np.argmax(hit.to_numpy()))
    done = float(steps.iloc[at])
    return {"reached": True, "epoch": int(e["epoch"].iloc[at]), "steps": done, "examples": done * global_batch,
            "epoch_steps": epoch_steps}


def declared_target(scale: str) -> float:
    """Experiment 13's target at a scale: its config's train.stop_at_top1 (the declared value, read, not typed)."""
    try:
        return float(load_config(CONFIG, scale, need_data=False).train.stop_at_top1)
    except ConfigError:
        return math.nan


def run_steps(df: pd.DataFrame, exp: int = EXPERIMENT) -> pd.DataFrame:
    """One row per finished run of experiment `exp` (13, or 12 read at 13's target): its steps to the target. A smoke
    run is never a step count; a diverged run counts as not reaching it."""
    if df.empty or not (df["exp"] == exp).any():
        return pd.DataFrame(columns=STEP_COLUMNS)
    runs = df[(df["kind"] == "run") & (df["exp"] == exp) & df["status"].isin(["completed", "diverged"])]
    runs = runs[~runs["path"].isin(smoke_paths(runs))]
    epochs = df[(df["kind"] == "epoch") & (df["exp"] == exp)]
    rows = []
    for r in runs.itertuples():
        row = r.run[len(r.scale) + 1:] if r.scale != "local" and r.run.startswith(f"{r.scale}-") else r.run
        name = TUNE_RUN.match(row) or STUDY_RUN.match(row)  # another scale's runs are named <scale>-<row>
        if name is None:
            continue
        target = declared_target(r.scale)
        reach = first_reach(epochs[epochs["path"] == r.path], int(r.global_batch), target)
        base = name.groupdict().get("base")
        rows.append(dict(exp=exp, scale=r.scale, optimizer=name["optimizer"], workers=int(name["workers"]),
                         global_batch=int(r.global_batch), seed=int(name["seed"]),
                         base=float(base) if base else math.nan, tuning=base is not None, status=r.status,
                         best_top1=float(r.best_val_top1) if pd.notna(r.best_val_top1) else math.nan,
                         path=r.path, **reach))
    one_machine([row["path"] for row in rows], f"experiment {exp}'s steps to the target")
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def planned_rows(config: Path = CONFIG, scale: str = "local") -> list[dict]:
    """The [study] extra rows of experiment 13's config planned at `scale`, as written: step 1's grid (every scale),
    and the edge rows and step 2's rows that scale's own step 1 chose (each carries its `scale`)."""
    return list(study_table(config, scale).get("extra", []))


def tuning_pairs(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """The planned tuning rows grouped by (optimizer, workers), in the config's order."""
    pairs: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        if row["run"].startswith("tune-"):
            pairs.setdefault((row["optim.name"], int(row["train.workers"])), []).append(row)
    return pairs


def settled_choices(tuned: pd.DataFrame, config: Path = CONFIG) -> pd.DataFrame:
    """selection() per (optimizer, batch), with `settled`: every rate the config plans for that pair (its grid and
    any edge rows) has finished. An unsettled pair's choice is only the best so far, never the rule's."""
    chosen = selection(tuned)
    pairs = {scale: tuning_pairs(planned_rows(config, scale)) for scale in chosen["scale"].unique()}
    finished = tuned.groupby(["scale", "optimizer", "workers"])["base"].agg(set)
    settled, planned_rates = [], []
    for r in chosen.itertuples():
        planned = {float(row["lr.base"]) for row in pairs[r.scale].get((r.optimizer, r.workers), [])}
        settled.append(planned <= finished.get((r.scale, r.optimizer, r.workers), set()))
        planned_rates.append(len(planned))
    return chosen.assign(settled=settled, planned=planned_rates)


def selection_table(df: pd.DataFrame, config: Path = CONFIG) -> pd.DataFrame:
    """Step 1 in full: every finished tuning run (held-out split) with its steps to the target or best top-1, and
    per (optimizer, batch) the rate the rule chose, marked only once every rate its config plans has finished."""
    steps = run_steps(df)
    tuned = steps[steps["tuning"].astype(bool)] if len(steps) else steps
    if tuned.empty:
        return pd.DataFrame()
    marks = {(r.scale, r.optimizer, r.workers): r for r in settled_choices(tuned, config).itertuples()}

    def choice(run) -> str:
        pair = marks[(run.scale, run.optimizer, run.workers)]
        if not pair.settled:
            return f"waiting: {pair.planned - pair.rates} of {pair.planned} rates unfinished"
        if run.base != pair.chosen_base:
            return ""
        return "chosen" + (f" (at the {pair.at_edge} edge)" if pair.at_edge else "")

    rows = tuned.sort_values(["scale", "optimizer", "workers", "base"])
    return rows.assign(choice=[choice(r) for r in rows.itertuples()]).reindex(columns=[
        "scale", "optimizer", "workers", "global_batch", "base", "status", "reached", "epoch", "steps",
        "best_top1", "epoch_steps", "choice"])


def selection(steps: pd.DataFrame) -> pd.DataFrame:
    """Per scale, optimizer and workers, the tuning runs' choice: fewest steps to the target on the held-out split
    (a tie: the lower rate); none reaching: the highest best top-1. at_edge: the choice is the grid's lowest or
    highest rate run so far (the edge rule then asks for one more rate a factor 2 beyond)."""
    rows = []
    tuned = steps[steps["tuning"].astype(bool)]
    for (scale, optimizer, workers), g in tuned.groupby(["scale", "optimizer", "workers"], sort=True):
        reached = g[g["reached"]]
        if len(reached):
            best = reached.sort_values(["steps", "base"]).iloc[0]
        else:
            best = g.sort_values(["best_top1", "base"], ascending=[False, True]).iloc[0]
        edge = "low" if best["base"] == g["base"].min() else "high" if best["base"] == g["base"].max() else ""
        rows.append(dict(scale=scale, optimizer=optimizer, workers=workers, global_batch=int(best["global_batch"]),
                         rates=len(g), chosen_base=float(best["base"]), reached=bool(best["reached"]),
                         steps=float(best["steps"]), at_edge=edge))
    return pd.DataFrame(rows, columns=["scale", "optimizer", "workers", "global_batch", "rates", "chosen_base",
                                       "reached", "steps", "at_edge"])


def study_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The study's runs (seeds at the chosen rates), never the tuning runs."""
    return steps[~steps["tuning"].astype(bool)]


def curve_points(study: pd.DataFrame) -> pd.DataFrame:
    """Per scale, optimizer and batch: the seeds, how many reached the target and their steps' geometric mean."""
    rows = []
    for (scale, optimizer, batch), g in study.groupby(["scale", "optimizer", "global_batch"], sort=True):
        hit = g[g["reached"]]
        mean = float(np.exp(np.log(hit["steps"]).mean())) if len(hit) == len(g) else math.nan
        rows.append(dict(scale=scale, optimizer=optimizer, global_batch=int(batch), workers=int(g["workers"].iloc[0]),
                         seeds=len(g), reached=len(hit), steps=mean, examples=mean * batch,
                         steps_low=float(hit["steps"].min()) if len(hit) else math.nan,
                         steps_high=float(hit["steps"].max()) if len(hit) else math.nan,
                         epoch_steps=float(g["epoch_steps"].iloc[0])))
    return pd.DataFrame(rows, columns=["scale", "optimizer", "global_batch", "workers", "seeds", "reached", "steps",
                                       "examples", "steps_low", "steps_high", "epoch_steps"])


def fitted_points(study: pd.DataFrame) -> pd.DataFrame:
    """The seeds the fit uses: those of batches where every seed reached the target."""
    complete = study.groupby("global_batch")["reached"].transform("all")
    return study[complete & study["reached"]]


def doubling_ratios(points: pd.DataFrame) -> dict[int, float]:
    """S(2B) / S(B) on the geometric means, keyed by B, where both were measured (all seeds reached)."""
    steps = dict(zip(points["global_batch"], points["steps"]))
    return {b: steps[2 * b] / steps[b] for b in sorted(steps)
            if 2 * b in steps and np.isfinite(steps[b]) and np.isfinite(steps[2 * b])}


def epoch_resolution(study: pd.DataFrame) -> dict[int, tuple[float, float]]:
    """Per doubling B -> 2B (both with every seed at the target), the range its ratio of geometric means could take
    within the count's resolution: a seed that first showed the target at S steps crossed it after more than S - (one
    epoch's steps), so each mean lies between that of S - epoch and that of S. inf: a seed reached it in its first
    epoch, so the ratio is unbounded above."""
    used = fitted_points(study)
    means = {}
    for batch, g in used.groupby("global_batch", sort=True):
        before = (g["steps"] - g["epoch_steps"]).to_numpy()
        low = float(np.exp(np.log(before).mean())) if (before > 0).all() else 0.0
        means[int(batch)] = (low, float(np.exp(np.log(g["steps"]).mean())))
    return {b: (means[2 * b][0] / means[b][1], means[2 * b][1] / means[b][0] if means[b][0] > 0 else math.inf)
            for b in means if 2 * b in means}


def bootstrap(study: pd.DataFrame, draws: int = BOOTSTRAPS, seed: int = 0) -> dict:
    """90 % percentile intervals, seeds resampled with replacement within each batch: of the fit's S_min and
    B_noise, and of each doubling ratio. The random draws are seeded, one stream per batch: the same runs give the
    same intervals, and a doubling's interval moves only when its own two batches' runs do."""
    used = fitted_points(study)
    groups = [g["steps"].to_numpy() for _, g in used.groupby("global_batch", sort=True)]
    batches = sorted(used["global_batch"].unique())
    streams = [np.random.default_rng([seed, int(b)]) for b in batches]
    fits, ratios = [], {b: [] for b in batches}
    for _ in range(draws if len(groups) >= 2 else 0):
        sample = [rng.choice(s, size=len(s), replace=True) for rng, s in zip(streams, groups)]
        fits.append(fit_noise_model(np.repeat(batches, [len(s) for s in sample]), np.concatenate(sample)))
        means = {b: float(np.exp(np.log(s).mean())) for b, s in zip(batches, sample)}
        for b in batches:
            if 2 * b in means:
                ratios[b].append(means[2 * b] / means[b])
    return {"s_min": percentile_interval([f[0] for f in fits]), "b_noise": percentile_interval([f[1] for f in fits]),
            "ratios": {b: percentile_interval(v) for b, v in ratios.items() if v}}


def regimes(ratios: dict[int, float]) -> dict:
    """The declared reading of the curve: perfect scaling ends at the first batch B whose doubling saves less than
    40 % of the steps (ratio > PERFECT_RATIO); data parallelism is maximal from the first B whose doubling saves
    less than 10 % (> FLAT_RATIO). None: no doubling measured did."""
    ends = [b for b in sorted(ratios) if ratios[b] > PERFECT_RATIO]
    flat = [b for b in sorted(ratios) if ratios[b] > FLAT_RATIO]
    return {"perfect_until": ends[0] if ends else None, "flat_from": flat[0] if flat else None}


def noise_sentence(b_noise: float, interval: tuple[float, float], noise: pd.DataFrame) -> str:
    """One sentence per the declared rule: "predicted" when every value of B_simple's range lies within
    AGREEMENT_FACTOR of every value of the fit's interval, "did not" when none does, else the intervals cannot
    tell. B_simple's range is make noise-scale's (2 standard errors of |G|^2; its top infinite where unresolved)."""
    if b_noise == math.inf:
        return ("The fit does not place B_noise: the steps fell in proportion up to the largest batch where every "
                "seed reached the target, so B_crit lies above it; no comparison with B_simple is made.")
    if not np.isfinite(b_noise) or noise.empty:
        return ("No comparison with the noise scale: " + ("no fitted B_noise (fewer than two batches where every "
                "seed reached the target)." if not np.isfinite(b_noise) else "no `make noise-scale` measurement."))
    low, high = interval
    parts = []
    for r in noise.itertuples():
        s_low, s_high = float(r.b_simple_low), float(r.b_simple_high)
        s_high = s_high if np.isfinite(s_high) else math.inf  # |G|^2 not resolved from 0: no upper end
        if not (np.isfinite(low) and np.isfinite(high)):
            verdict = "the fit's interval is not defined, so cannot tell"
        elif max(high / s_low, s_high / low) <= AGREEMENT_FACTOR and np.isfinite(high):  # every value of each within F of the other's
            verdict = f"predicted B_crit within a factor of {AGREEMENT_FACTOR:g}"
        elif s_high * AGREEMENT_FACTOR < low or s_low > high * AGREEMENT_FACTOR:
            verdict = f"did not predict it within a factor of {AGREEMENT_FACTOR:g}"
        else:
            verdict = f"cannot be told from it within a factor of {AGREEMENT_FACTOR:g} by these intervals"
        top = f"{s_high:,.0f}" if np.isfinite(s_high) else "unbounded"
        of = f" of {Path(r.run).parent.name}/{Path(r.run).name}" if isinstance(getattr(r, "run", None), str) else ""
        parts.append(f"B_simple at the {r.weights} weights{of} ({s_low:,.0f}-{top}) {verdict}")
    upper = f"{high:,.0f}" if np.isfinite(high) else "unplaced"
    return (f"Fitted B_noise {b_noise:,.0f} images (90 % interval {low:,.0f}-{upper}); " + "; ".join(parts) + ".")


def stand_ins(per_gpu_batch: int) -> dict[str, int]:
    """The thesis's 4k (32 workers) and Goyal et al.'s 8k, as global batches at a scale's per-worker batch."""
    return {"thesis's 4k stand-in": THESIS_WORKERS * per_gpu_batch,
            "Goyal's 8k analogue": GOYAL_FACTOR * THESIS_WORKERS * per_gpu_batch}


def steps_table(df: pd.DataFrame) -> pd.DataFrame:
    """Experiment 13's curve per optimizer and batch, with experiment 12's recipes read at the same target beside it."""
    steps = run_steps(df)
    if steps.empty:
        return pd.DataFrame()
    chosen = selection(steps)
    frames = []
    for scale, study in study_steps(steps).groupby("scale", sort=True):
        for optimizer, s in study.groupby("optimizer", sort=True):
            points = curve_points(s)
            ratios, boot = doubling_ratios(points), bootstrap(s)
            pick = chosen[(chosen["scale"] == scale) & (chosen["optimizer"] == optimizer)]
            base = dict(zip(pick["global_batch"], pick["chosen_base"]))
            frames.append(points.assign(
                source="exp 13 (tuned per batch, no decay)", chosen_base=points["global_batch"].map(base),
                ratio_next=points["global_batch"].map(ratios),
                ratio_low=points["global_batch"].map(lambda b: boot["ratios"].get(b, (math.nan,))[0]),
                ratio_high=points["global_batch"].map(lambda b: boot["ratios"].get(b, (math.nan, math.nan))[1])))
    beside = run_steps(df, exp=12)
    if len(frames) and len(beside):
        for (scale, optimizer), s in beside.groupby(["scale", "optimizer"], sort=True):
            frames.append(curve_points(s).assign(source="exp 12 (its 72-epoch recipe, read at exp 13's target)"))
    if not frames:
        return pd.DataFrame()
    columns = ["source", "scale", "optimizer", "global_batch", "workers", "chosen_base", "seeds", "reached", "steps",
               "steps_low", "steps_high", "examples", "epoch_steps", "ratio_next", "ratio_low", "ratio_high"]
    return pd.concat(frames, ignore_index=True).reindex(columns=columns)


def plot_steps_to_target(points: pd.DataFrame, seeds: pd.DataFrame, fit: tuple[float, float], marks: dict,
                         ax=None, title: str = ""):
    """Steps to the target against the global batch, log-log, as Shallue et al.'s Fig. 1."""
    ax = ax or plt.subplots(figsize=(7, 4.5))[1]
    done = points[np.isfinite(points["steps"])]
    ax.scatter(seeds["global_batch"], seeds["steps"], s=14, alpha=0.6, color=fg.PALETTE[0], label="a seed")
    ax.plot(done["global_batch"], done["steps"], "o-", color=fg.PALETTE[1], label="geometric mean of the seeds")
    if len(done):
        b0, s0 = float(done["global_batch"].iloc[0]), float(done["steps"].iloc[0])
        xs = np.array([b0, float(points["global_batch"].max())])
        ax.plot(xs, s0 * b0 / xs, "--", color="grey", label="perfect scaling (slope -1)")
    s_min, b_noise = fit
    if np.isfinite(b_noise):
        xs = np.geomspace(float(points["global_batch"].min()), float(points["global_batch"].max()), 100)
        ax.plot(xs, s_min * (1 + b_noise / xs), ":", color=fg.PALETTE[2],
                label=f"fit: S_min {s_min:,.0f} x (1 + {b_noise:,.0f} / B)")
        ax.axvline(b_noise, color=fg.PALETTE[2], lw=0.8, label=f"fitted B_noise = B_crit ({b_noise:,.0f})")
    for (label, batch), style in zip(marks.items(), (":", "-.")):
        ax.axvline(batch, color="black", ls=style, lw=0.8, label=f"{label} ({batch:,})")
    missed = points[points["reached"] < points["seeds"]]
    for r in missed.itertuples():  # at the top of the axes whatever their limits end up
        ax.annotate("did not reach", (r.global_batch, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                    va="top", fontsize=7)
    ax.set(xscale="log", yscale="log", xlabel="global batch (images a step)", ylabel="steps to the target",
           title=title)
    ax.legend(fontsize=7)
    return ax


def steps_figure(df: pd.DataFrame):
    """A panel per scale and optimizer with experiment 13 study runs; None without any."""
    study = study_steps(run_steps(df))
    if study.empty:
        return None
    groups = list(study.groupby(["scale", "optimizer"], sort=True))
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 4.6 * len(groups)), squeeze=False, layout="constrained")
    first_of_scale = {}
    for ax, ((scale, optimizer), s) in zip(axes[:, 0], groups):
        if scale in first_of_scale:  # one scale's optimizers on the same axes, so the eye compares their curves
            ax.sharex(first_of_scale[scale])
            ax.sharey(first_of_scale[scale])
        first_of_scale.setdefault(scale, ax)
        used = fitted_points(s)
        whole = not unfinished_curve(s, optimizer)  # no fit is drawn through part of a curve
        fit = fit_noise_model(used["global_batch"], used["steps"]) if len(used) and whole else (math.nan, math.nan)
        per_worker = int(s["global_batch"].iloc[0] // s["workers"].iloc[0])
        plot_steps_to_target(curve_points(s), s[s["reached"]], fit, stand_ins(per_worker), ax=ax,
                             title=f"Experiment 13, first edition (superseded), {optimizer.upper()} at the {scale} "
                                   f"scale: steps to {declared_target(scale):g} % top-1, "
                                   + ("each batch at its tuned rate" if whole else "incomplete, no fit yet"))
    return fig


def unfinished_curve(s: pd.DataFrame, optimizer: str, config: Path = CONFIG) -> str:
    """'' when every batch the config tunes for this optimizer has all its study seeds finished; else a sentence
    saying how much of the curve has run (the declared reading, its fit and regimes, waits for the whole curve)."""
    planned = planned_rows(config, s["scale"].iloc[0])
    batches = sorted({workers for opt, workers in tuning_pairs(planned) if opt == optimizer})
    done = s.groupby("workers")["seed"].nunique()
    missing = [w for w in batches if done.get(w, 0) < STUDY_SEEDS]
    if not missing:
        return ""
    per_worker = int(s["global_batch"].iloc[0] // s["workers"].iloc[0])
    which = "batch" + (f"es {_batches([w * per_worker for w in missing])} still lack" if len(missing) > 1 else
                       f" {missing[0] * per_worker:,} still lacks")
    return (f"incomplete: {len(s)} of {STUDY_SEEDS * len(batches)} planned study runs finished; {which} seeds, so "
            "the declared reading (regimes, fit, noise scale) waits for the whole curve")


def rq5_reading(df: pd.DataFrame, noise: pd.DataFrame | None = None, config: Path = CONFIG) -> str:
    """The declared reading, per scale and optimizer, from the runs; says so when there are none, and only says
    how far a curve has got until all of it has run."""
    steps = run_steps(df)
    if steps.empty and len(df) and (df["exp"] == EXPERIMENT).any():
        return ("Only smoke runs (QUICK=1) or unfinished runs of experiment 13 here: a smoke run is never read as a "
                "step count (`make exp13` runs the declared plan).")
    if steps.empty:
        return "No experiment 13 runs: nothing to read yet (`make exp13` runs the declared plan)."
    noise = noise_scales() if noise is None else noise
    tuned = steps[steps["tuning"].astype(bool)]
    lines = [_selection_line(settled_choices(tuned))] if len(tuned) else []
    study = study_steps(steps)
    if study.empty:
        lines.append("- No study runs yet (step 2): only the rate selection has run.")
    for (scale, optimizer), s in study.groupby(["scale", "optimizer"], sort=True):
        waiting = unfinished_curve(s, optimizer, config)
        if waiting:
            lines.append(f"- {optimizer.upper()} ({scale} scale): {waiting}.")
            continue
        lines += _curve_lines(scale, optimizer, s, noise if scale == "local" else noise.iloc[0:0])
    if len(study):
        lines.append(tuned_beside_recipes(df))
    if study["optimizer"].nunique() > 1:
        lines.append(tuned_optimizers_line(study))
    return "\n".join(lines)


def tuned_optimizers(df: pd.DataFrame) -> str:
    """RQ4's question once both optimizers are tuned: experiment 13's LAMB beside its SGD, batch by batch (a line)."""
    study = study_steps(run_steps(df))
    if study.empty or study["optimizer"].nunique() < 2:
        return "- No two tuned optimizers' study runs (experiment 13's step 2) to set beside each other yet."
    return tuned_optimizers_line(study)


def tuned_beside_recipes(df: pd.DataFrame) -> str:
    """RQ4's question once SGD is tuned: experiment 13's SGD curve beside experiment 12's recipes (a line)."""
    study = study_steps(run_steps(df))
    sgd = study[(study["optimizer"] == "sgd") & (study["scale"] == "local")] if len(study) else study
    beside = run_steps(df, exp=12)
    if sgd.empty or beside.empty:
        return "- No tuned-SGD curve (experiment 13's study runs) and experiment 12 runs to set beside each other."
    return beside_recipes_line(curve_points(sgd), beside[beside["scale"] == "local"])


def beside_recipes_line(tuned: pd.DataFrame, recipes: pd.DataFrame) -> str:
    """Tuned SGD (experiment 13's curve points) beside each of experiment 12's recipes at the batches both ran:
    "fewer" only where every seed of one took fewer steps than every seed of the other (their ranges apart)."""
    said = []
    tuned = tuned.set_index("global_batch")
    for optimizer, g in recipes.groupby("optimizer", sort=True):
        counts = {"fewer": [], "more": [], "overlapping": [], "recipe did not reach": []}
        for r in curve_points(g).itertuples():
            if r.global_batch not in tuned.index or np.isnan(tuned.loc[r.global_batch, "steps"]):
                continue
            mine = tuned.loc[r.global_batch]
            if np.isnan(r.steps):
                counts["recipe did not reach"].append(r.global_batch)
            elif mine["steps_high"] < r.steps_low:
                counts["fewer"].append(r.global_batch)
            elif mine["steps_low"] > r.steps_high:
                counts["more"].append(r.global_batch)
            else:
                counts["overlapping"].append(r.global_batch)
        parts = [f"{k} at {_batches(v)}" for k, v in counts.items() if v]
        if parts:
            said.append(f"{optimizer.upper()}: " + ", ".join(parts))
    return ("- Tuned SGD (no decay) beside experiment 12's recipes (72 epochs with their decays, read at the same "
            "target; `fewer`: every tuned-SGD seed took fewer steps than every seed of the recipe): "
            + ("; ".join(said) if said else "no batch in common") + ".")


def tuned_optimizers_line(study: pd.DataFrame, first: str = "lamb", second: str = "sgd") -> str:
    """Nado et al.'s question on the miniature, per batch where both optimizers have every study seed: "fewer" only
    where the seeds' ranges lie apart, as beside experiment 12's recipes."""
    local = study[study["scale"] == "local"]
    points = {o: curve_points(local[local["optimizer"] == o]).set_index("global_batch") for o in (first, second)}
    batches = sorted(set(points[first].index) | set(points[second].index))
    whole = [b for b in batches if all(b in p.index and p.loc[b, "seeds"] >= STUDY_SEEDS for p in points.values())]
    a, b, said = first.upper(), second.upper(), {}
    for batch in whole:
        mine, other = points[first].loc[batch], points[second].loc[batch]
        if np.isnan(mine["steps"]) or np.isnan(other["steps"]):
            missed = [name for name, p in ((a, mine), (b, other)) if np.isnan(p["steps"])]
            key = ("neither reached the target" if len(missed) == 2
                   else f"not every {missed[0]} seed reached the target")
        elif mine["steps_high"] < other["steps_low"]:
            key = f"{a} fewer"
        elif mine["steps_low"] > other["steps_high"]:
            key = f"{a} more"
        else:
            key = "overlapping"
        said.setdefault(key, []).append(batch)
    order = [f"{a} fewer", f"{a} more", "overlapping"]
    parts = [f"{k} at {_batches(said[k])}" for k in order + sorted(set(said) - set(order)) if k in said]
    head = (f"- Tuned {a} beside tuned {b}, each batch at its own chosen rate (no decay; `{a} fewer`: every {a} "
            f"seed took fewer steps than every {b} seed), compared at {len(whole)} of {len(batches)} batches (those "
            f"where both have all {STUDY_SEEDS} seeds)")
    return head + (": " + "; ".join(parts) if parts else ": no batch to compare yet") + "."


def _selection_line(chosen: pd.DataFrame) -> str:
    """Step 1 in one line: pairs settled (every planned rate finished) and waiting; a settled winner at an edge."""
    settled = chosen[chosen["settled"]]
    text = (f"- Step 1 (rates chosen on the held-out split): {len(settled)} (optimizer, batch) pairs settled, "
            f"{len(chosen) - len(settled)} begun with tuning runs still unfinished")
    edge = settled[settled["at_edge"] != ""]
    if len(edge):
        text += "; settled at a grid edge: " + ", ".join(
            f"{r.optimizer} at {r.global_batch:,} ({r.at_edge}, {r.rates} rates: "
            + ("the edge rule owes it a rate beyond" if r.rates - GRID_RATES < EDGE_EXTENSIONS
               else "after both extensions, possibly under-tuned") + ")" for r in edge.itertuples())
    return text + "."


def regime_words(at: int | None, threshold: float, what: str, ratios: dict[int, float],
                 intervals: dict[int, tuple[float, float]], resolution: dict[int, tuple[float, float]] | None = None
                 ) -> str:
    """The declared regime read on the seeds' geometric means, then what the bootstrap intervals and one epoch's
    resolution allow (an earlier or later crossing, a fall in proportion again after it): the words stay within
    the intervals."""
    saves = f"{(1 - threshold) * 100:.0f} %"
    if at is None:
        text = f"no measured doubling saved less than {saves} of the steps"
        unsure = [b for b in sorted(ratios) if intervals.get(b, (math.nan, math.nan))[1] > threshold]
        return text + (f" (by the intervals the doublings from {_batches(unsure)} might)" if unsure else "")
    low, high = intervals.get(at, (math.nan, math.nan))
    text = (f"{what} at {at:,} images: the doubling to {2 * at:,} takes {ratios[at]:.2f} of the steps "
            f"(90 % interval {_ratio(low, threshold)}-{_ratio(high, threshold)}; the declared line {threshold:g})")
    earlier = [b for b in sorted(ratios) if b < at and intervals.get(b, (math.nan, math.nan))[1] > threshold]
    if earlier:
        text += f"; by the intervals it could be earlier: the doublings from {_batches(earlier)} reach above it"
    if low <= threshold:
        text += "; by its own interval it could be later"
    coarse_low, coarse_high = (resolution or {}).get(at, (math.nan, math.nan))
    if coarse_low <= threshold < coarse_high:  # within one epoch's resolution the crossing itself is not certain
        text += (f"; counted in whole epochs, the ratio could lie anywhere in {coarse_low:.2f}-"
                 f"{'unbounded' if coarse_high == math.inf else f'{coarse_high:.2f}'}, across the line")
    again = [b for b in sorted(ratios) if b > at and intervals.get(b, (math.nan, math.nan))[1] < threshold]
    if again:  # the rule reads the first crossing: say where the curve falls in proportion again after it
        text += f"; after it, doublings save more than {saves} again, their whole intervals below the line: from " \
                f"{_batches(again)}"
    return text


def _ratio(x: float, line: float) -> str:
    """A ratio to 2 decimals, or 3 where 2 would print it as the line it differs from."""
    return f"{x:.3f}" if round(x, 2) == round(line, 2) and x != line else f"{x:.2f}"


def _batches(batches: list[int]) -> str:
    return ", ".join(f"{b:,}" for b in batches)


def _curve_lines(scale: str, optimizer: str, s: pd.DataFrame, noise: pd.DataFrame) -> list[str]:
    points = curve_points(s)
    used = fitted_points(s)
    fit = fit_noise_model(used["global_batch"], used["steps"]) if len(used) else (math.nan, math.nan)
    boot = bootstrap(s)
    ratios = doubling_ratios(points)
    found = regimes(ratios)
    missed = points[points["reached"] < points["seeds"]]
    head = f"- {optimizer.upper()} ({scale} scale, target {declared_target(scale):g} % top-1): "
    coarse = epoch_resolution(s)
    head += regime_words(found["perfect_until"], PERFECT_RATIO, "perfect scaling ends", ratios, boot["ratios"],
                         coarse)
    head += "; " + regime_words(found["flat_from"], FLAT_RATIO, "steps stop falling", ratios, boot["ratios"],
                                coarse) + "."
    lines = [head]
    if len(missed):
        lines.append("  Did not reach the target (left out of the fit): " + ", ".join(
            f"{r.global_batch:,} ({r.seeds - r.reached} of {r.seeds} seeds)" for r in missed.itertuples()) + ".")
    lines.append("  " + noise_sentence(fit[1], boot["b_noise"], noise))
    return lines


def steps_to_target(inputs, entry: Figure) -> Drawn | str | None:
    """Experiment 13's curve; nothing at all without its runs (the committed report stays as it was), a line when
    only its rate selection has run."""
    if not (inputs.df["exp"] == 13).any():
        return None
    figure = steps_figure(inputs.df)
    return "no experiment 13 study runs yet (step 1 only)" if figure is None else Drawn(figure, inputs.source)


def _shown(table: pd.DataFrame) -> pd.DataFrame | None:
    return None if table.empty else table


SECOND_EDITION_PREFIX = "e2-"  # steps_to_target_e2.PREFIX, not imported: one plug-in never imports another


def first_edition(df: pd.DataFrame) -> pd.Series:
    """Every row but the second edition's runs (named e2-..., in the same folder on another machine): this edition's
    entries' runs line counts what they read."""
    return ~((df["exp"] == EXPERIMENT) & df["run"].astype(str).str.startswith(SECOND_EDITION_PREFIX))


TABLES = (
    Table("exp13_steps_to_target", "", (12, 13), lambda inputs, entry: _shown(steps_table(inputs.df)),
          "Experiment 13, first edition (superseded by the second, exp13_e2_*): steps to the target top-1 per global "
          "batch, each batch at its tuned rate",
          ("steps: geometric mean over the seeds that reached the target (NaN where any did not), steps_low/high "
           "their range; epoch_steps: one epoch's steps, the count's resolution (no interpolation); ratio_next: "
           "S(2B)/S(B) with its 90 % seed-bootstrap interval; experiment 12's rows: its fixed 72-epoch recipes "
           "read at the same target.",), reads=first_edition),
    Table("exp13_rate_selection", "", (13,), lambda inputs, entry: _shown(selection_table(inputs.df)),
          "Experiment 13, first edition (superseded by the second), step 1: every tuning run on the held-out split and "
          "the rate the declared rule chose",
          ("steps: to the target on the held-out 20 % of the training set (NaN: not reached within the budget); "
           "best_top1: its best held-out top-1; choice: the rule's pick per (optimizer, batch), fewest steps, a tie "
           "the lower rate, none reaching: the highest best_top1; named only once every planned rate has finished.",),
          reads=first_edition),
)
FIGURES = (Figure("exp13_steps_to_target", "", (13,), steps_to_target, reads=first_edition),)
EXPORTS = ("rq5_reading", "selection_table", "steps_figure", "steps_table", "tuned_beside_recipes", "tuned_optimizers")
