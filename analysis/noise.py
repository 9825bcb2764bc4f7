"""The gradient noise scale: what `make noise-scale` (python -m tools noise-scale) measured on a run, and the noise
model S = S_min (1 + B_noise / B) of McCandlish et al. (2018) fitted to steps against batch; the readings of
experiments 12 and 13 (analysis/experiments/) both read them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

from .machines import REPO, reference_machines

CONFIDENCE = 0.90  # the bootstrap's percentile interval


def noise_scales(paths) -> pd.DataFrame:
    """The noise-scale measurements in these files (`make noise-scale`, python -m tools noise-scale's JSON):
    weights, B_simple and its range; a file that is missing or unreadable gives no rows."""
    columns = ["run", "weights", "b_simple", "b_simple_low", "b_simple_high", "b_big", "groups", "file"]
    rows = []
    for path in paths:
        try:
            found = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        rows += [{**r, "run": measured_run(r.get("run")), "file": _from_repo(Path(path))} for r in found]
    return pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns)


def _from_repo(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def measured_run(recorded) -> str:
    """Where the run a noise-scale row was measured on is now: the JSON records the folder as the measuring
    machine saw it (its results/runs/...), which on a clone is a run this machine never made. The committed
    reference's copy of that run when there is one, else the recorded path, said to be absent."""
    if not recorded:
        return ""
    name = Path(*Path(recorded).parts[-2:])  # <experiment>/<run>
    for _, folder, _ in reference_machines():
        if (folder / name).is_dir():
            return _from_repo(folder / name)
    return str(recorded) if (REPO / recorded).is_dir() else f"{recorded} (not in this clone)"


def examples_words(x) -> str:
    return "unbounded" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:,.0f}"


def noise_text(row) -> str:
    """'910 (range 667-1,433)' or 'at least 2,350 (|G|^2 not resolved from zero)'."""
    if row.b_simple_high is None or pd.isna(row.b_simple_high) or pd.isna(row.b_simple):
        return f"at least {examples_words(row.b_simple_low)} (|G|² not resolved from zero)"
    return f"{examples_words(row.b_simple)} (range {examples_words(row.b_simple_low)}–{examples_words(row.b_simple_high)})"


def fit_noise_model(batches, steps) -> tuple[float, float]:
    """(S_min, B_noise) of S = S_min (1 + B_noise / B), least squares on log S over the points given. For a given
    B_noise the best log S_min is the mean residual, so only B_noise is searched (in log space, between 1/1000 of
    the smallest batch and 1000 x the largest: a fit at a bound means the data do not place it)."""
    b, log_s = np.asarray(batches, float), np.log(np.asarray(steps, float))
    # (a fit at the top bound returns (nan, inf): no flattening in the batches measured)
    if len(np.unique(b)) < 2:
        return math.nan, math.nan

    def residual(log_noise: float) -> float:
        shape = np.log1p(np.exp(log_noise) / b)
        return float(np.sum((log_s - shape - np.mean(log_s - shape)) ** 2))

    low, high = math.log(b.min() / 1000), math.log(b.max() * 1000)
    grid = np.linspace(low, high, 121)
    start = grid[int(np.argmin([residual(x) for x in grid]))]
    found = optimize.minimize_scalar(residual, bounds=(max(low, start - 0.2), min(high, start + 0.2)),
                                     method="bounded", options={"xatol": 1e-6})
    if found.x > high - 0.01:  # steps fall in proportion throughout: B_noise lies above every batch, unplaced
        return math.nan, math.inf
    noise = math.exp(found.x)
    return float(np.exp(np.mean(log_s - np.log1p(noise / b)))), noise


def percentile_interval(draws: list[float]) -> tuple[float, float]:
    """The 90 % percentile interval (numpy's linear percentiles) of bootstrap draws, where a draw may be inf (a fit
    that found no bend): an end whose interpolation touches an inf draw is inf, where numpy would give NaN."""
    if not len(draws):
        return math.nan, math.nan
    ordered = np.sort(np.asarray(draws, dtype=float))
    tail = 100 * (1 - CONFIDENCE) / 2

    def end(q: float) -> float:
        rank = q / 100 * (len(ordered) - 1)
        below, above = ordered[math.floor(rank)], ordered[math.ceil(rank)]
        if np.isinf(above) and rank > math.floor(rank):
            return float(above)
        return float(below) if np.isinf(below) else float(np.percentile(ordered, q))

    return end(tail), end(100 - tail)
