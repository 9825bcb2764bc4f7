"""Experiment 13, second edition: the reading rules of experiments/13_steps_to_target/declared_2026-11-28-edition2.txt,
computed in the order the declaration states them (the first edition, superseded, keeps its own in
steps_to_target.py and is read as it was).
"""
from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from contract import tuned  # noqa: E402
from contract.config import ConfigError, load_config  # noqa: E402
from contract.reader import read_config  # noqa: E402

from .. import figures as fg  # noqa: E402
from ..entries import Drawn, Experiment, Figure, Table  # noqa: E402
from ..machines import one_machine  # noqa: E402
from ..noise import fit_noise_model, percentile_interval  # noqa: E402
from ..page import Question  # noqa: E402
from ..smoke import smoke_paths  # noqa: E402

EXPERIMENT = 13
EXPERIMENTS = (Experiment(EXPERIMENT, "own"),)  # its measure is the steps to the target: read by its own tables alone
CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "13_steps_to_target" / "config.toml"  # this edition's
PREFIX = "e2-"
TUNE_RUN = re.compile(r"^e2-tune-(?P<optimizer>[a-z]+)-w(?P<workers>\d+)-base(?P<base>[0-9.e-]+)-s(?P<seed>\d+)$")
# a replacing choice's study runs carry their rate (contract/tuned.py study_name): e2-sgd-w64-base0.1-s2
STUDY_RUN = re.compile(r"^e2-(?P<optimizer>[a-z]+)-w(?P<workers>\d+)(?:-base[0-9.e-]+)?-s(?P<seed>\d+)$")
RESOLUTION_SHARE = 0.05   # declared: k no more than 5 % of the steps to the target at every seed
TIE_SHARE, TIE_EVALS = 0.10, 2  # declared: tied within max(10 %, 2 k / score) of the best score
BOOTSTRAPS = 2000
MIN_BATCHES = 3           # declared: a bootstrap draw with fewer distinct batches is redrawn
FIT_WITHIN_NOISE, MISFIT_NO_REGIMES, POWER_LAW_AS_WELL = 1.5, 2.0, 1.1  # declared goodness-of-fit words
REGIME_STREAMS = 5       # dated rule (2026-12-01): a regime word only where 5 seeded bootstrap streams agree
AGREE_FACTOR = 3.0        # declared: B_simple agrees with B_crit within this factor of its interval
STEP_COLUMNS = ["optimizer", "workers", "global_batch", "seed", "base", "tuning", "status", "reached", "steps",
                "resolution", "eval_every", "best_top1", "warmup_steps", "path"]


def curve(evals: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """Every evaluation of a run in step order, each at the step it evaluated: its eval records' and its epoch
    ends' (the epoch row's `step`, the epoch's last step trained: contract/invariants.py). Never from an epoch's
    images: a cut-short epoch's end is the evaluation that cut it, at that evaluation's step."""
    points = pd.concat([frame[["step", "val_top1"]] for frame in (evals, epochs) if len(frame)],
                       ignore_index=True) if len(evals) or len(epochs) else pd.DataFrame(columns=["step", "val_top1"])
    points = points.rename(columns={"val_top1": "top1"}).dropna().astype(float)
    return points.sort_values("step", kind="stable").drop_duplicates("step").reset_index(drop=True)


def first_reach(points: pd.DataFrame, target: float) -> dict:
    """Steps to the first evaluation at or above the target, and its resolution: the steps since the evaluation
    before it (the crossing lies in that stretch; no interpolation). reached False: none did (steps NaN)."""
    hit = points["top1"].to_numpy() >= target
    if not hit.any():
        return {"reached": False, "steps": math.nan, "resolution": math.nan}
    at = int(np.argmax(hit))
    steps = float(points["step"].iloc[at])
    before = float(points["step"].iloc[at - 1]) if at else 0.0
    return {"reached": True, "steps": steps, "resolution": steps - before}


def declared_target(scale: str) -> float:
    """The edition's target at a scale: its config's train.stop_at_top1 (the declared value, read, not typed)."""
    try:
        return float(load_config(CONFIG, scale, need_data=False).train.stop_at_top1)
    except ConfigError:
        return math.nan


def second_edition(df: pd.DataFrame) -> pd.Series:
    """The rows of the second edition's runs (its names start e2-): its entries' runs line counts them alone, and the
    first edition's counts every other row (both editions lie in 13_steps_to_target/, on two machines)."""
    return (df["exp"] == EXPERIMENT) & df["run"].astype(str).str.startswith(PREFIX)


def run_base(path) -> float:
    """The base rate a run ran with, from its own config.json (a study run's name does not carry it); NaN without."""
    base = ((read_config(path) or {}).get("lr") or {}).get("base")
    return float(base) if base is not None else math.nan


def run_steps(df: pd.DataFrame) -> pd.DataFrame:
    """One row per finished second-edition run (local scale): its steps to the declared target. A smoke run, a
    running or failed one is left out; a diverged run counts as not reaching the target."""
    if df.empty or not (df["exp"] == EXPERIMENT).any():
        return pd.DataFrame(columns=STEP_COLUMNS)
    runs = df[(df["kind"] == "run") & (df["exp"] == EXPERIMENT) & df["status"].isin(["completed", "diverged"])]
    runs = runs[second_edition(runs) & (runs["scale"] == "local")]
    runs = runs[~runs["path"].isin(smoke_paths(runs))]
    target = declared_target("local")
    rows = []
    for r in runs.itertuples():
        name = TUNE_RUN.match(r.run) or STUDY_RUN.match(r.run)
        if name is None:
            continue
        mine = df[df["path"] == r.path]
        reach = first_reach(curve(mine[mine["kind"] == "eval"], mine[mine["kind"] == "epoch"]), target)
        base = name.groupdict().get("base")
        rows.append(dict(optimizer=name["optimizer"], workers=int(name["workers"]), global_batch=int(r.global_batch),
                         seed=int(name["seed"]), base=float(base) if base else run_base(r.path),
                         tuning=base is not None,
                         status=r.status, eval_every=int(r.eval_every),
                         best_top1=float(r.best_val_top1) if pd.notna(r.best_val_top1) else math.nan,
                         warmup_steps=warmup_steps(r.path, mine[mine["kind"] == "epoch"]), path=r.path, **reach))
    one_machine([row["path"] for row in rows], "experiment 13's second edition")
    return standing(pd.DataFrame(rows, columns=STEP_COLUMNS))


def superseded(steps: pd.DataFrame, plan: tuned.TunedPlan | None = None) -> pd.Series:
    """The study runs of a choice another replaced (contract/tuned.py current_choices): not the pair's standing
    rate, so no cell of it counts them; they stay in the reference (run_steps' attrs["superseded"] counts them;
    the tables' "Made from" line still counts every run folder read)."""
    plan = tuned.load_plan(CONFIG.parent / "edition2.toml") if plan is None else plan
    rate = {pair: float(entry["base"]) for pair, entry in tuned.current_choices(plan, tuned.load_decisions(plan)).items()}
    study = ~steps["tuning"].astype(bool)
    return study & pd.Series([(o, int(w)) in rate and b != rate[(o, int(w))] for o, w, b in
                              zip(steps["optimizer"], steps["workers"], steps["base"])], index=steps.index, dtype=bool)


def standing(steps: pd.DataFrame) -> pd.DataFrame:
    """The runs the reading counts: every selection run, and the study runs of each pair's standing choice; the
    superseded study runs' count in attrs["superseded"]."""
    gone = superseded(steps) if len(steps) else pd.Series(dtype=bool)
    kept = steps[~gone].reset_index(drop=True) if len(steps) else steps
    kept.attrs["superseded"] = int(gone.sum()) if len(steps) else 0
    return kept


def warmup_steps(path, epochs: pd.DataFrame) -> float:
    """The steps of a run's warm-up: its config's lr.warmup_epochs times its epoch's steps (epoch 0's end, which
    every run that reaches the target after its first epoch trains whole); NaN where either is unknown."""
    first = epochs.loc[epochs["epoch"] == 0, "step"].dropna()
    warmup = ((read_config(path) or {}).get("lr") or {}).get("warmup_epochs")
    return float(warmup) * float(first.iloc[0]) if len(first) and isinstance(warmup, (int, float)) else math.nan


def resolution_met(eval_every: int, steps) -> bool:
    """The declared resolution: k <= 5 % of the steps of every seed that reached the target (none reached: not met)."""
    reached = [float(s) for s in steps if np.isfinite(s)]
    return bool(reached) and all(eval_every <= RESOLUTION_SHARE * s for s in reached)


@dataclass(frozen=True)
class Choice:
    winner: float            # the chosen base rate (the middle of the tied ones)
    tied: tuple[float, ...]  # the rates tied with the best score, rising
    edges: tuple[str, ...]   # "low" / "high": a tied rate at that edge of the grid: the grid extends there
    reached: bool            # the winner reached the target on every seed


def score(steps) -> float:
    """A rate's selection score: the geometric mean of its seeds' steps; inf if a seed did not reach the target."""
    s = np.asarray(steps, float)
    return float(np.exp(np.log(s).mean())) if len(s) and np.isfinite(s).all() else math.inf


def choose(per_rate: dict[float, list[float]], best_top1: dict[float, float], eval_every: int) -> Choice:
    """The declared rule over one (optimizer, batch)'s rates: per_rate maps a base rate to its seeds' steps (NaN
    where a seed did not reach), best_top1 a rate to its seeds' mean best held-out top-1. Tied: a score within
    max(10 %, 2 k / score) of the best; the winner the middle of the tied rates (an even count: the lower middle);
    none reaching on every seed: the highest mean best top-1 alone. A tied rate at a grid edge names that edge."""
    grid = sorted(per_rate)
    scores = {rate: score(per_rate[rate]) for rate in grid}
    best = min(scores.values())
    if math.isinf(best):
        tied = [max(grid, key=lambda rate: best_top1[rate])]
    else:
        margin = max(TIE_SHARE, TIE_EVALS * eval_every / best)
        tied = [rate for rate in grid if scores[rate] <= best * (1 + margin)]
    winner = tied[(len(tied) - 1) // 2]
    edges = tuple(edge for edge, rate in (("low", grid[0]), ("high", grid[-1])) if rate in tied)
    return Choice(winner, tuple(tied), edges, not math.isinf(scores[winner]))


def fit_with_misfit(cells: dict[int, list[float]], draws: int = BOOTSTRAPS, seed: int = 0) -> dict:
    """S_min and B_noise (= B_crit) fitted to every seed of the cells (batch -> seeds' steps), with 90 % percentile
    intervals from a bootstrap over batches AND seeds: the cells drawn with replacement, then each drawn cell's
    seeds; a draw with fewer than MIN_BATCHES distinct batches is redrawn. A batch that fits the curve badly moves
    the draws that leave it out or take it twice: the interval holds the misfit as well as the seed noise."""
    batches = sorted(cells)
    if len(batches) < MIN_BATCHES:
        return {"s_min": math.nan, "b_noise": math.nan, "s_min_ci": (math.nan, math.nan),
                "b_noise_ci": (math.nan, math.nan)}
    b_all = np.repeat(batches, [len(cells[b]) for b in batches])
    s_min, b_noise = fit_noise_model(b_all, np.concatenate([cells[b] for b in batches]))
    rng = np.random.default_rng(seed)
    fits = []
    while len(fits) < draws:
        drawn = rng.choice(batches, size=len(batches), replace=True)
        if len(set(drawn)) < MIN_BATCHES:
            continue
        samples = [rng.choice(cells[b], size=len(cells[b]), replace=True) for b in drawn]
        fits.append(fit_noise_model(np.repeat(drawn, [len(s) for s in samples]), np.concatenate(samples)))
    return {"s_min": s_min, "b_noise": b_noise, "s_min_ci": percentile_interval([f[0] for f in fits]),
            "b_noise_ci": percentile_interval([f[1] for f in fits]), "b_noise_draws": [f[1] for f in fits]}


def power_law(batches, steps) -> tuple[float, float]:
    """(a, b) of S = a B^-b, least squares on log S (the alternative the goodness-of-fit line compares with)."""
    slope, intercept = np.polyfit(np.log(np.asarray(batches, float)), np.log(np.asarray(steps, float)), 1)
    return float(math.exp(intercept)), float(-slope)


def leave_one_out(cells: dict[int, list[float]], gone: int) -> float:
    """B_noise fitted without batch `gone`."""
    kept = [b for b in sorted(cells) if b != gone]
    return fit_noise_model(np.repeat(kept, [len(cells[b]) for b in kept]), np.concatenate([cells[b] for b in kept]))[1]


def goodness(cells: dict[int, list[float]]) -> dict:
    """The fit's RMS of log residuals of the cells' geometric means; the RMS seed noise alone would give those
    means (pooled within-cell SD of log S / sqrt(seeds)); a power law's RMS fitted the same way; and the range of
    B_noise with one batch left out."""
    batches = sorted(cells)
    logs = {b: np.log(np.asarray(cells[b], float)) for b in batches}
    b_all = np.repeat(batches, [len(cells[b]) for b in batches])
    s_all = np.concatenate([cells[b] for b in batches])
    means = np.array([logs[b].mean() for b in batches])
    s_min, b_noise = fit_noise_model(b_all, s_all)
    model = np.log(s_min) + np.log1p(b_noise / np.asarray(batches, float))
    a, slope = power_law(b_all, s_all)
    law = math.log(a) - slope * np.log(np.asarray(batches, float))
    within = np.concatenate([logs[b] - logs[b].mean() for b in batches])
    dof = sum(len(logs[b]) - 1 for b in batches)
    seed_rms = math.sqrt(float(np.sum(within ** 2)) / dof) / math.sqrt(np.mean([len(logs[b]) for b in batches])) \
        if dof > 0 else math.nan
    out = [leave_one_out(cells, gone) for gone in batches]
    return {"rms": float(np.sqrt(np.mean((means - model) ** 2))), "seed_rms": seed_rms,
            "power_law_rms": float(np.sqrt(np.mean((means - law) ** 2))), "power_law_slope": slope,
            "b_noise_leave_one_out": (float(np.nanmin(out)), float(np.nanmax(out)))}


def goodness_words(g: dict) -> str:
    """The declared goodness-of-fit sentence."""
    ratio = g["rms"] / g["seed_rms"] if g["seed_rms"] > 0 else math.inf
    fit = ("the model fits within seed noise" if ratio <= FIT_WITHIN_NOISE
           else f"the model misfits by a factor {ratio:.1f} over seed noise")
    law = ("a power law fits as well" if g["power_law_rms"] <= POWER_LAW_AS_WELL * g["rms"]
           else "the model fits better than a power law")
    low, high = g["b_noise_leave_one_out"]
    return (f"{fit} (log RMS {g['rms']:.3f}, seed noise {g['seed_rms']:.3f}); {law} (log RMS "
            f"{g['power_law_rms']:.3f}, slope {g['power_law_slope']:.2f}); B_noise with one batch left out "
            f"{low:.0f}-{high:.0f}")


def names_regimes(g: dict) -> bool:
    """Regime words are withdrawn where the model misfits by more than MISFIT_NO_REGIMES x seed noise."""
    return g["seed_rms"] > 0 and g["rms"] <= MISFIT_NO_REGIMES * g["seed_rms"]


def regime_word(batch: float, b_noise_ci: tuple[float, float]) -> str:
    """A batch's regime from the fit: under S = S_min (1 + B_noise/B) a doubling saves >= 40 % exactly where
    B <= B_noise / 4 and < 10 % exactly where B >= 4 B_noise; a word only where the whole interval agrees."""
    low, high = b_noise_ci
    if not (np.isfinite(low) and low > 0):
        return "between regimes: the interval allows both"
    if batch <= low / 4:
        return "perfect scaling"
    if np.isfinite(high) and batch >= 4 * high:
        return "maximal data parallelism"
    if np.isfinite(high) and high / 4 < batch < 4 * low:
        return "diminishing returns"
    return "between regimes: the interval allows both"


def draw_regime(batch: float, b_noise: float) -> str:
    """The regime one bootstrap draw's B_noise puts a batch in (the declared thresholds, B_noise / 4 and 4 B_noise)."""
    if not (np.isfinite(b_noise) and b_noise > 0):
        return "between regimes: the interval allows both"
    return ("perfect scaling" if batch <= b_noise / 4 else "maximal data parallelism" if batch >= 4 * b_noise
            else "diminishing returns")


def stable_regimes(cells: dict[int, list[float]], first: dict, draws: int = BOOTSTRAPS) -> str:
    """Every fitted batch's regime word, given only where REGIME_STREAMS seeded bootstrap streams (the declared
    stream 0, `first`, and the next ones) all give it, with the share of all their draws behind it; the word of
    the largest batch run is never given (it speaks of a doubling that was not run). Dated rule, 2026-12-01."""
    streams = [first] + [fit_with_misfit(cells, draws, seed) for seed in range(1, REGIME_STREAMS)]
    pooled = [b for fit in streams for b in fit["b_noise_draws"]]
    largest, words = max(cells), []
    for batch in sorted(cells):
        if batch == largest:
            words.append(f"{batch}: not named (its doubling, {2 * batch}, was not run)")
            continue
        said = [regime_word(batch, fit["b_noise_ci"]) for fit in streams]
        word = said[0]
        if len(set(said)) > 1:
            common = max(set(said), key=said.count)
            words.append(f"{batch}: between regimes (the word depends on the bootstrap's stream: {common} in "
                         f"{said.count(common)} of {len(said)})")
            continue
        if word.startswith("between"):  # every stream's interval allows both: no share behind a word
            words.append(f"{batch}: {word}")
            continue
        share = sum(draw_regime(batch, b) == word for b in pooled) / len(pooled)
        words.append(f"{batch}: {word} ({len(said)} of {len(said)} streams; {100 * share:.0f} % of "
                     f"{len(pooled):,} draws)")
    return "; ".join(words)


def b_simple_verdict(b_simple_ci: tuple[float, float], b_crit_ci: tuple[float, float]) -> str:
    """B_simple at the target against B_crit: agrees only where B_simple's interval lies wholly within
    [B_crit low / 3, B_crit high x 3], disagrees where it lies wholly outside, else cannot tell."""
    low, high = b_crit_ci[0] / AGREE_FACTOR, b_crit_ci[1] * AGREE_FACTOR
    s_low, s_high = b_simple_ci
    if not all(np.isfinite([low, s_low])) or math.isnan(high) or math.isnan(s_high):
        return "the intervals cannot tell"
    if low <= s_low and s_high <= high:
        return "B_simple at the target agrees with B_crit"
    if s_high < low or s_low > high:
        return "B_simple disagrees with B_crit"
    return "the intervals cannot tell"


def b_simple_interval(values: dict[int, list[float]], draws: int = BOOTSTRAPS, seed: int = 0) -> tuple[float, float]:
    """The median B_simple of an optimizer's study runs (batch -> its runs' B_simple), with a 90 % interval from a
    bootstrap over batches and seeds, as the fit's."""
    batches = sorted(values)
    rng = np.random.default_rng(seed)
    medians = []
    for _ in range(draws if batches else 0):
        drawn = rng.choice(batches, size=len(batches), replace=True)
        medians.append(float(np.median(np.concatenate([rng.choice(values[b], size=len(values[b])) for b in drawn]))))
    return percentile_interval(medians)


def b_simple_cells(measured: list[dict], optimizer: str, reached: set[str] | None = None) -> dict[int, list[float]]:
    """`python -m tools noise-scale --json`'s rows for the second edition's study runs, as batch -> the B_simple of
    its runs (one per seed) for one optimizer; a row of another run, of a run not in `reached` (its weights are its
    budget's end, not the target's), or an unresolved B_simple (inf or None), is left out."""
    cells: dict[int, list[float]] = {}
    for row in measured:
        run = str(row["run"]).rstrip("/").rsplit("/", 1)[-1]
        name = STUDY_RUN.match(run)
        value = row.get("b_simple")
        if name is None or name["optimizer"] != optimizer or value is None or not math.isfinite(value) \
                or (reached is not None and run not in reached):
            continue
        cells.setdefault(4 * int(name["workers"]), []).append(float(value))
    return cells


CELL_COLUMNS = ["optimizer", "global_batch", "workers", "base", "seeds", "reached", "steps", "steps_low", "steps_high",
                "eval_every", "resolution_share", "resolution_met", "warmup_share"]


def cells_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Step 2 per (optimizer, batch): seeds, how many reached the target, their steps' geometric mean and range, k
    and k over the fewest steps (the resolution column: met where <= 5 % for every seed), and the warm-up's share
    of the steps (its steps over the geometric mean: a small batch spends most of its steps warming up)."""
    study = steps[~steps["tuning"].astype(bool)]
    rows = []
    for (optimizer, batch), g in study.groupby(["optimizer", "global_batch"], sort=True):
        hit = g[g["reached"].astype(bool)]
        k = int(g["eval_every"].max())
        rows.append(dict(optimizer=optimizer, global_batch=int(batch), workers=int(g["workers"].iloc[0]),
                         base=float(g["base"].iloc[0]) if g["base"].notna().any() else math.nan, seeds=len(g),
                         reached=len(hit), steps=score(g["steps"]) if len(hit) == len(g) else math.nan,
                         steps_low=float(hit["steps"].min()) if len(hit) else math.nan,
                         steps_high=float(hit["steps"].max()) if len(hit) else math.nan, eval_every=k,
                         resolution_share=k / float(hit["steps"].min()) if len(hit) else math.nan,
                         resolution_met=resolution_met(k, g["steps"]) and len(hit) == len(g),
                         warmup_share=float(g["warmup_steps"].median()) / score(g["steps"])
                         if len(hit) == len(g) else math.nan))
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


SELECTION_COLUMNS = ["optimizer", "global_batch", "workers", "base", "seeds", "reached", "steps", "steps_low",
                     "steps_high", "best_top1", "rule", "decision"]


@dataclass(frozen=True)
class PairReading:
    rates: list[float]     # the pair's grid with the extensions decided for it, rising
    waiting: int           # its planned selection runs (rate, seed) not finished yet
    planned: int
    choice: Choice | None  # the declared rule's, once none is waiting


def read_pair(plan: tuned.TunedPlan, decisions: dict, steps: pd.DataFrame, optimizer: str,
              workers: int) -> PairReading:
    """One (optimizer, workers) pair's step 1, read by the declared rule from its finished selection runs: what
    `exp13-next` writes its decisions by and the report's step-1 table replays."""
    rates = tuned.rates(plan, decisions, optimizer, workers)
    mine = steps[steps["tuning"].astype(bool) & (steps["optimizer"] == optimizer) & (steps["workers"] == workers)]
    done = {(float(r.base), int(r.seed)) for r in mine.itertuples()}
    seeds = range(plan.first_selection_seed, plan.first_selection_seed + plan.selection_seeds)
    waiting = sum((rate, seed) not in done for rate in rates for seed in seeds)
    if waiting:
        return PairReading(rates, waiting, len(rates) * len(seeds), None)
    per_rate = {rate: mine[mine["base"] == rate].sort_values("seed")["steps"].tolist() for rate in rates}
    top1 = {rate: float(mine.loc[mine["base"] == rate, "best_top1"].mean()) for rate in rates}
    return PairReading(rates, 0, len(rates) * len(seeds), choose(per_rate, top1, plan.eval_every[workers]))


def rule_word(reading: PairReading, rate: float) -> str:
    """A rate's word in the step-1 table: winner, tied (with the winner), none, or the pair still waiting."""
    if reading.choice is None:
        return f"waiting: {reading.waiting} of {reading.planned} selection runs unfinished"
    return "winner" if rate == reading.choice.winner else "tied" if rate in reading.choice.tied else ""


def selection_table(steps: pd.DataFrame, plan: tuned.TunedPlan | None = None,
                    decisions: dict | None = None) -> pd.DataFrame:
    """Step 1 per (optimizer, batch, rate): its selection seeds' steps (geometric mean, NaN where a seed missed the
    target, and range), mean best held-out top-1, the declared rule's word read again from these runs, and the
    committed decision (edition2_decisions.toml): chosen, or added as a grid extension. The plan and decisions
    default to edition2.toml's."""
    plan = tuned.load_plan(CONFIG.parent / "edition2.toml") if plan is None else plan
    decisions = tuned.load_decisions(plan) if decisions is None else decisions
    tune = steps[steps["tuning"].astype(bool)]
    rows = []
    for (optimizer, workers), g in tune.groupby(["optimizer", "workers"], sort=True):
        reading = read_pair(plan, decisions, steps, optimizer, int(workers))
        extended = set(reading.rates) - set(plan.grid[optimizer])
        standing = tuned.current_choices(plan, decisions).get((optimizer, int(workers)))
        chosen = {float(standing["base"])} if standing else set()
        replaced = {float(d["base"]) for d in decisions["choose"] if d["optimizer"] == optimizer
                    and int(d["workers"]) == workers and d is not standing} - chosen
        for base, r in g.groupby("base", sort=True):
            hit = r[r["reached"].astype(bool)]
            rows.append(dict(optimizer=optimizer, global_batch=int(r["global_batch"].iloc[0]), workers=int(workers),
                             base=float(base), seeds=len(r), reached=len(hit),
                             steps=score(r["steps"]) if len(hit) == len(r) else math.nan,
                             steps_low=float(hit["steps"].min()) if len(hit) else math.nan,
                             steps_high=float(hit["steps"].max()) if len(hit) else math.nan,
                             best_top1=float(r["best_top1"].mean()), rule=rule_word(reading, float(base)),
                             decision="chosen" if base in chosen else "chosen, then replaced (counting fault)"
                             if base in replaced else "added (grid extension)" if base in extended else ""))
    return pd.DataFrame(rows, columns=SELECTION_COLUMNS)


@functools.cache
def declared_seeds() -> int:
    """The study seeds a cell has when its runs have all finished (edition2.toml's study_seeds)."""
    return tuned.load_plan(CONFIG.parent / "edition2.toml").study_seeds


def fitted_cells(steps: pd.DataFrame, optimizer: str) -> dict[int, list[float]]:
    """The cells the fit uses: every declared seed finished and reached the target, and the resolution is met."""
    study = steps[~steps["tuning"].astype(bool) & (steps["optimizer"] == optimizer)]
    cells = {}
    for batch, g in study.groupby("global_batch", sort=True):
        if len(g) >= declared_seeds() and g["reached"].astype(bool).all() \
                and resolution_met(int(g["eval_every"].max()), g["steps"]):
            cells[int(batch)] = g["steps"].astype(float).tolist()
    return cells


def fit_table(steps: pd.DataFrame, b_simple: dict[str, list[dict]] | None = None,
              draws: int = BOOTSTRAPS) -> pd.DataFrame:
    """Per optimizer: the fit with its interval (over batches and seeds), the goodness-of-fit sentence, the regime
    of every fitted batch (or why none is named) and B_simple at the target beside B_crit with the declared verdict."""
    rows = []
    for optimizer in sorted(steps["optimizer"].unique()):
        cells = fitted_cells(steps, optimizer)
        if len(cells) < MIN_BATCHES:
            continue
        fit, g = fit_with_misfit(cells, draws), goodness(cells)
        regimes = (stable_regimes(cells, fit, draws) if names_regimes(g)
                   else "the model does not describe the curve well enough to name regimes")
        at_target = {str(p).rsplit("/", 1)[-1] for p in steps.loc[steps["reached"].astype(bool), "path"]}
        measured = b_simple_cells((b_simple or {}).get(optimizer, []), optimizer, at_target)
        ci = b_simple_interval(measured, draws) if measured else (math.nan, math.nan)
        rows.append(dict(optimizer=optimizer, batches=len(cells), s_min=fit["s_min"], s_min_low=fit["s_min_ci"][0],
                         s_min_high=fit["s_min_ci"][1], b_noise=fit["b_noise"], b_noise_low=fit["b_noise_ci"][0],
                         b_noise_high=fit["b_noise_ci"][1], goodness=goodness_words(g), regimes=regimes,
                         b_simple_low=ci[0], b_simple_high=ci[1],
                         b_simple=(b_simple_verdict(ci, fit["b_noise_ci"]) if measured else "not measured yet")))
    return pd.DataFrame(rows)


B_SIMPLE_FILES = {optimizer: Path(__file__).resolve().parents[2] / "results" / "noise_scale" / f"exp13_e2_{optimizer}.json"
                  for optimizer in ("sgd", "lamb")}  # `python -m tools noise-scale ... --json` (the README's command)


def measured_b_simple(files: dict[str, Path] = B_SIMPLE_FILES) -> dict[str, list[dict]]:
    """The noise-scale tool's rows per optimizer, where its file exists (none before the study's runs are measured)."""
    return {optimizer: json.loads(path.read_text()) for optimizer, path in files.items() if path.is_file()}


def lamb_beside_sgd(steps: pd.DataFrame) -> list[str]:
    """The declared comparison per batch where both optimizers' cells are fitted: "LAMB fewer" (or "more") only
    where every seed of one took fewer steps than every seed of the other, else "overlapping"."""
    sgd, lamb = fitted_cells(steps, "sgd"), fitted_cells(steps, "lamb")
    words = []
    for batch in sorted(set(sgd) & set(lamb)):
        fewer = max(lamb[batch]) < min(sgd[batch])
        more = min(lamb[batch]) > max(sgd[batch])
        words.append(f"batch {batch}: " + ("LAMB fewer" if fewer else "LAMB more" if more else "overlapping"))
    return words


def rq5_reading_e2(df: pd.DataFrame, steps: pd.DataFrame | None = None, b_simple: dict | None = None,
                   draws: int = BOOTSTRAPS) -> str:
    """RQ5's reading of the second edition, every sentence from the fit and its declared words: what has run until
    an optimizer has three fitted batches; then S_min, B_noise = B_crit with their intervals, the goodness of fit,
    the regimes the interval allows, B_simple beside B_crit, and LAMB beside SGD."""
    steps = run_steps(df) if steps is None else steps
    if steps.empty:
        # a study still running commits its runs to results/in_progress/, which no report reads (a cell's seeds
        # would otherwise enter the reading one by one): say where they are rather than that none exist
        return ("- Second edition: none of its runs is among these runs yet (`make exp13` runs its declared plan; "
                "a study in progress commits its finished runs to `results/in_progress/`, read here once it ends).")
    study = steps[~steps["tuning"].astype(bool)]
    fits = fit_table(steps, measured_b_simple() if b_simple is None else b_simple, draws)
    if fits.empty:
        return (f"- Second edition: {int(steps['tuning'].astype(bool).sum())} selection runs and {len(study)} study "
                f"runs finished; the fit waits for three batches of an optimizer with all {declared_seeds()} seeds "
                "at the target at the declared resolution.")
    lines = [f"- **{r.optimizer.upper()}**, second edition ({r.batches} batches fitted, {declared_seeds()} seeds "
             f"each): S_min {r.s_min:.0f} steps [{r.s_min_low:.0f}, {r.s_min_high:.0f}], B_noise = B_crit "
             f"{r.b_noise:.0f} examples [{r.b_noise_low:.0f}, {r.b_noise_high:.0f}] (90 % intervals over batches "
             f"and seeds). Goodness of fit: {r.goodness}. Regimes by batch: {r.regimes}. B_simple at the target: "
             f"{r.b_simple}" + (f" ([{r.b_simple_low:.0f}, {r.b_simple_high:.0f}] examples)."
                                if np.isfinite(r.b_simple_low) else ".") for r in fits.itertuples()]
    warmup = warmup_sentence(cells_table(steps))
    if warmup:
        lines.append(warmup)
    beside = lamb_beside_sgd(steps)
    if beside:
        lines.append("- LAMB beside SGD, both tuned (fewer or more only where every seed of one lies beyond every "
                     "seed of the other): " + "; ".join(beside) + ".")
    return "\n".join(lines)


def warmup_sentence(cells: pd.DataFrame) -> str | None:
    """The warm-up's share of the steps to the target, at each optimizer's smallest and largest cell: the steps a
    small batch spends warming up are part of what it is counted (the cells table has every batch's)."""
    said = []
    for optimizer, g in cells.dropna(subset=["warmup_share"]).groupby("optimizer", sort=True):
        g = g.sort_values("global_batch")
        low, high = g.iloc[0], g.iloc[-1]
        said.append(f"{optimizer.upper()} {100 * low.warmup_share:.0f} % at batch {int(low.global_batch):,} and "
                    f"{100 * high.warmup_share:.0f} % at {int(high.global_batch):,}")
    if not said:
        return None
    return ("- The warm-up's share of the steps to the target (its epochs' steps over the cell's geometric mean; "
            "every batch's in the cells table): " + "; ".join(said) + ". A small batch's count is mostly warm-up, "
            "so its steps measure the schedule as much as the batch.")


def steps_cells_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """The report's exp13_e2_steps_to_target: None until second-edition study runs exist."""
    steps = run_steps(df)
    table = cells_table(steps) if len(steps) else pd.DataFrame()
    return None if table.empty else table


def fit_report_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """The report's exp13_e2_fit: None until three batches of an optimizer have every seed at the target."""
    steps = run_steps(df)
    table = fit_table(steps, measured_b_simple()) if len(steps) else pd.DataFrame()
    return None if table.empty else table


def plot_optimizer(ax, study: pd.DataFrame, cells: dict[int, list[float]], fit: dict, title: str) -> None:
    """One optimizer's panel, log-log as Shallue et al.'s Fig. 1: every seed, the cells' geometric means (hollow:
    left out of the fit), perfect scaling from the smallest batch, the fit and B_noise's interval as a band."""
    means = study.groupby("global_batch")["steps"].apply(score).replace(math.inf, math.nan).dropna()
    kept = means[means.index.isin(list(cells))]
    out = means[~means.index.isin(list(cells))]
    ax.scatter(study["global_batch"], study["steps"], s=12, alpha=0.5, color=fg.PALETTE[0], label="a seed")
    ax.plot(kept.index, kept.to_numpy(), "o-", color=fg.PALETTE[1], label="geometric mean of the seeds (fitted)")
    if len(out):
        ax.plot(out.index, out.to_numpy(), "o", mfc="none", color=fg.PALETTE[3],
                label="geometric mean, left out of the fit (a seed unfinished or missing the target, or k > 5 %)")
    xs = np.geomspace(float(study["global_batch"].min()), float(study["global_batch"].max()), 100)
    if len(means):
        ax.plot(xs, means.iloc[0] * means.index[0] / xs, "--", color="grey", label="perfect scaling (slope -1)")
    if np.isfinite(fit["b_noise"]):
        ax.plot(xs, fit["s_min"] * (1 + fit["b_noise"] / xs), ":", color=fg.PALETTE[2],
                label=f"fit: S_min {fit['s_min']:,.0f} x (1 + {fit['b_noise']:,.0f} / B)")
        low, high = fit["b_noise_ci"]
        ax.axvspan(low, high, color=fg.PALETTE[2], alpha=0.15,
                   label=f"B_noise interval (90 %, batches and seeds): {low:,.0f}-{high:,.0f}")
    ax.set(xscale="log", yscale="log", xlabel="global batch (images a step)", ylabel="steps to the target",
           title=title)
    ax.legend(fontsize=7)


def steps_figure_e2(df: pd.DataFrame, steps: pd.DataFrame | None = None, draws: int = BOOTSTRAPS):
    """A panel per optimizer with second-edition study runs (SGD first); None without any."""
    steps = run_steps(df) if steps is None else steps
    if steps.empty:
        return None
    study = steps[~steps["tuning"].astype(bool)]
    optimizers = sorted(study["optimizer"].unique(), key=lambda o: (o != "sgd", o))
    if not optimizers:
        return None
    fig, axes = plt.subplots(len(optimizers), 1, figsize=(9, 4.6 * len(optimizers)), squeeze=False,
                             layout="constrained")
    for ax, optimizer in zip(axes[:, 0], optimizers):
        cells = fitted_cells(steps, optimizer)
        fit = fit_with_misfit(cells, draws) if len(cells) >= MIN_BATCHES else fit_with_misfit({})
        plot_optimizer(ax, study[study["optimizer"] == optimizer], cells, fit,
                       f"Experiment 13 (second edition), {optimizer.upper()}: steps to "
                       f"{declared_target('local'):g} % top-1, counted every k steps")
    return fig


def steps_to_target_e2(inputs, entry: Figure) -> Drawn | None:
    """The report's exp13_e2_steps_to_target figure: nothing until second-edition study runs exist."""
    figure = steps_figure_e2(inputs.df)
    return None if figure is None else Drawn(figure, inputs.source)


def rate_selection_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """The report's exp13_e2_rate_selection: None until second-edition selection runs exist."""
    steps = run_steps(df)
    table = selection_table(steps) if steps["tuning"].astype(bool).any() else pd.DataFrame()
    return None if table.empty else table


TABLES = (
    Table("exp13_e2_steps_to_target", "", (13,), lambda inputs, entry: steps_cells_table(inputs.df),
          "Experiment 13, second edition: steps to the target per global batch, counted every k steps",
          ("steps: geometric mean over the 5 study seeds (NaN where any did not reach the target), steps_low/high "
           "their range; eval_every: k, the count's resolution; resolution_share: k over the fewest steps, met "
           "where k <= 5 % for every seed (a cell that misses it is left out of the fit); declared in "
           "experiments/13_steps_to_target/declared_2026-11-28-edition2.txt.",), reads=second_edition),
    Table("exp13_e2_fit", "", (13,), lambda inputs, entry: fit_report_table(inputs.df),
          "Experiment 13, second edition: S_min, B_noise (= B_crit) with intervals over batches and seeds, the fit's "
          "goodness, the regimes it allows, B_simple at the target beside B_crit",
          ("intervals: 90 % percentile, 2,000 bootstrap draws over batches and seeds; goodness: the fit's log RMS "
           "against seed noise and a power law's, and B_noise with one batch left out; regimes: only where B_noise's "
           "whole interval puts the batch in one; b_simple: the declared factor-3 rule.",), reads=second_edition),
    Table("exp13_e2_rate_selection", "", (13,), lambda inputs, entry: rate_selection_table(inputs.df),
          "Experiment 13, second edition, step 1: every rate on its selection seeds (held-out split), the declared "
          "rule's tie and winner, and the committed decision",
          ("steps: geometric mean over the selection seeds (NaN where any did not reach the target), steps_low/high "
           "their range; rule: the declared rule read again from these runs (tied: within max(10 %, 2 k / steps) of "
           "the best; winner: the lower middle of the tied rates); decision: edition2_decisions.toml, written with a "
           "dated line before the runs it added started (`python -m tools exp13-next --audit` replays them).",),
          reads=second_edition),
)
FIGURES = (Figure("exp13_e2_steps_to_target", "", (13,), steps_to_target_e2, reads=second_edition),)
QUESTIONS = (Question("critical_batch", "Critical batch", "Where linear scaling really stops: steps to a target "
                      "accuracy per batch, each batch's rate tuned", "rq5_critical_batch", experiments=(EXPERIMENT,)),)
RQ5 = [
    ("md", "# RQ5 — where linear scaling really stops: steps to a target accuracy per batch, each batch tuned\n\n"
           "The thesis takes RQ3's upper bound on the global batch from the literature (8,192 for ILSVRC-2012, "
           "Goyal et al.). Experiment 13 (`experiments/13_steps_to_target`, declared before any run) measures the "
           "miniature's: the optimizer steps until the validation top-1 first reaches the declared target, for "
           "global batches from the 1-worker batch to 16x the thesis's 4k stand-in, SGD with momentum and LAMB, "
           "each batch at the rate chosen for it on a held-out split of the training set; McCandlish et al.'s "
           "S = S_min (1 + B_noise / B) is fitted to the curve. Its second edition "
           "(`declared_2026-11-28-edition2.txt`) counts steps every k steps (k <= 5 % of the steps), on 5 seeds a "
           "batch, with intervals that hold the fit's misfit, and names regimes only where they allow it; the first "
           "edition (whole epochs, 3 seeds) is superseded by it and shown below as it was last drawn (kept as files: "
           "results/frozen/exp13_edition1/SUPERSEDED.md)."),
    ("code", None),
    ("md", "## Second edition: steps to the target per optimizer and batch, counted every k steps"),
    ("code", "cells = an.steps_cells_table(df)\n"
             "an.markdown('No second-edition study run has finished yet.') if cells is None else cells"),
    ("code", "fig = an.steps_figure_e2(df)\n"
             "an.show(fig) if fig is not None else an.markdown('Not drawn: no second-edition study run yet.')"),
    ("md", "## Second edition: reading, from the fit"),
    ("code", "an.markdown(an.rq5_reading_e2(df))"),
    ("md", "## Second edition, step 1: every rate on its selection seeds, the declared tie rule and the decision"),
    ("code", "rates = an.rate_selection_table(df)\n"
             "an.markdown('No second-edition selection run has finished yet.') if rates is None else rates"),
    ("md", "## First edition (superseded by the second): step 1, the rate chosen for each batch on the held-out "
           "split (never the validation set)"),
    ("code", "an.exp13_first_edition.show('tables/exp13_rate_selection.md')"),
    ("md", "## First edition (superseded): steps to the target per optimizer and global batch, in whole epochs"),
    ("code", "an.exp13_first_edition.show('tables/exp13_steps_to_target.md')"),
    ("code", "an.exp13_first_edition.show('figures/exp13_steps_to_target.png')"),
    ("md", "## First edition (superseded): reading, by its own rules as declared then"),
    ("code", "an.exp13_first_edition.show('readings/rq5_reading.md')"),
]
NOTEBOOKS = {"rq5_critical_batch.ipynb": RQ5}
EXPORTS = ("rate_selection_table", "rq5_reading_e2", "steps_cells_table", "steps_figure_e2")
