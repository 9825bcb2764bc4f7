"""The thesis's three quality findings, checked on our runs at each scale (the issue's "do the orderings hold?").

1. Naive scaling degrades as the global batch grows (experiment 4).
2. Linear scaling with warm-up beats linear scaling without it at 32 workers (experiments 6, 8, 9 against 5).
3. With warm-up, the 32-worker model is within noise of the 1-worker baseline (experiments 6, 8, 9 against 5);
   checked at every worker count with warm-up, to show where a miniature stops following it.

"Noise" is the seed-to-seed spread: two configurations differ when their means are more than two standard errors
of the difference apart (SE = sqrt(sd_a^2 / n_a + sd_b^2 / n_b)); with 3 seeds a side this is a rough screen, not
a test at a stated level, and the table says so. With a single seed there is no SE and no verdict on noise.
"""
from __future__ import annotations

import math

import pandas as pd

COLUMNS = ["scale", "finding", "ours", "difference", "se", "thesis_difference", "verdict"]
WARMUP_EXPERIMENTS = (6, 8, 9)
NOISE_SES = 2.0


def _completed(df: pd.DataFrame) -> pd.DataFrame:
    r = df[(df["kind"] == "run") & df["exp"].between(4, 9) & df["status"].isin(["completed", "log"])]
    return r.dropna(subset=["best_val_top1"])


def _stats(values: pd.Series) -> tuple[float, float, int]:
    n = int(values.count())
    return float(values.mean()), float(values.std(ddof=1)) if n > 1 else math.nan, n


def _fmt(mean: float, sd: float, n: int) -> str:
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if not math.isnan(sd) else "") + f" (n={n})"


def difference(a: pd.Series, b: pd.Series) -> tuple[float, float]:
    """mean(a) - mean(b) and its standard error (nan when either side has fewer than 2 runs)."""
    (ma, sa, na), (mb, sb, nb) = _stats(a), _stats(b)
    se = math.sqrt(sa ** 2 / na + sb ** 2 / nb) if na > 1 and nb > 1 else math.nan
    return ma - mb, se


def _thesis_top1(ref: pd.DataFrame, exp: int, gpus: int) -> float:
    rows = ref[(ref["experiment"] == exp) & (ref["gpus"] == gpus)].dropna(subset=["top1"])
    if exp == 6:  # two 32-GPU rows (Horovod and DDP): the thesis compares the Horovod runs across experiments
        rows = rows[rows["framework"] == "horovod+pytorch"]
    return float(rows["top1"].mean()) if len(rows) else math.nan


def naive_degrades(runs: pd.DataFrame, ref: pd.DataFrame) -> dict | None:
    naive = runs[runs["exp"] == 4]
    if naive["gpus"].nunique() < 2:
        return None
    by_batch = {int(b): g["best_val_top1"] for b, g in naive.groupby("global_batch")}
    batches = sorted(by_batch)
    means = [by_batch[b].mean() for b in batches]
    peak = means.index(max(means))
    monotone = peak < len(means) - 1 and all(x >= y for x, y in zip(means[peak:], means[peak + 1:]))
    diff, se = difference(by_batch[batches[-1]], by_batch[batches[0]])
    thesis = ref[ref["experiment"] == 4].sort_values("global_batch")["top1"]
    ours = ", ".join(f"{b}: {_fmt(*_stats(by_batch[b]))}" for b in batches)
    below = diff < 0 and (math.isnan(se) or -diff > NOISE_SES * se)
    verdict = "holds" if monotone and below else ("partly" if below or monotone else "does not hold")
    if math.isnan(se) and verdict != "does not hold":
        verdict += " (one seed: no noise estimate)"
    return dict(finding="naive scaling degrades as the global batch grows (largest vs smallest batch)",
                ours=f"global batch {ours}; falls monotonically from the best" + ("" if monotone else ": no"),
                difference=diff, se=se, thesis_difference=float(thesis.iloc[-1] - thesis.iloc[0]), verdict=verdict)


def _compare(finding: str, a: pd.Series, b: pd.Series, thesis_difference: float, want: str) -> dict:
    """want 'higher': a must beat b by more than the noise; 'same': a within the noise of b."""
    diff, se = difference(a, b)
    if math.isnan(se):
        verdict = "no noise estimate (fewer than 2 seeds)"
    elif want == "higher":
        verdict = "holds" if diff > NOISE_SES * se else ("within noise" if diff > -NOISE_SES * se else "does not hold")
    else:
        verdict = "holds" if abs(diff) <= NOISE_SES * se else "does not hold"
    return dict(finding=finding, ours=f"{_fmt(*_stats(a))} vs {_fmt(*_stats(b))}", difference=diff, se=se,
                thesis_difference=thesis_difference, verdict=verdict)


def warmup_findings(runs: pd.DataFrame, ref: pd.DataFrame) -> list[dict]:
    """At 32 workers, each warm-up against none; at every worker count with warm-up, against the 1-worker baseline
    (the thesis's claim is about 32; the smaller counts show where a miniature stops following it)."""
    base = runs[(runs["exp"] == 5) & (runs["gpus"] == 1)]
    none = runs[(runs["exp"] == 5) & (runs["gpus"] == 32)]
    if base.empty and none.empty:
        return []
    batch = (none if len(none) else base)["per_gpu_batch"].iloc[0]
    rows = []
    for exp in WARMUP_EXPERIMENTS:
        warm = runs[(runs["exp"] == exp) & (runs["per_gpu_batch"] == batch)]
        for gpus, g in warm.groupby("gpus", sort=True):
            label = f"exp {exp} ({g['warmup'].iloc[0]}, {int(gpus)} workers)"
            thesis_warm = _thesis_top1(ref, exp, int(gpus))
            if gpus == 32 and len(none):
                rows.append(_compare(f"warm-up beats none at 32 workers: {label} vs exp 5", g["best_val_top1"],
                                     none["best_val_top1"], thesis_warm - _thesis_top1(ref, 5, 32), "higher"))
            if len(base):
                rows.append(_compare(f"with warm-up within noise of 1 worker: {label} vs exp 5 (1 worker)",
                                     g["best_val_top1"], base["best_val_top1"],
                                     thesis_warm - _thesis_top1(ref, 5, 1), "same"))
    return rows


def orderings(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """One row per finding and scale: our mean best top-1 values, the difference, its SE, the thesis's, a verdict."""
    rows = []
    runs = _completed(df)
    for scale, g in runs.groupby(runs["scale"].fillna("unknown"), sort=True):
        found = [naive_degrades(g, ref)] + warmup_findings(g, ref)
        rows += [{"scale": scale, **row} for row in found if row]
    return pd.DataFrame(rows, columns=COLUMNS)


NOTES = [
    "difference: our mean best val top-1 (percent) of the first configuration minus the second; se: its standard "
    "error over seeds; thesis_difference: the same difference in the thesis's single runs.",
    f"verdicts: 'holds' needs the difference to exceed {NOISE_SES:g} SE (or, for 'within noise', to stay inside "
    f"{NOISE_SES:g} SE); with 3 seeds a side this is a rough screen, not a significance test.",
]


def seed_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Run folders outside the studies (e.g. results/more_steps_pilot/runs), grouped by configuration: the run name
    without its seed suffix (-sN). Best top-1 and last-epoch training loss, mean ± sd over the seeds."""
    runs = df[(df["kind"] == "run") & (df["status"] == "completed")].copy()
    last_epoch = df[df["kind"] == "epoch"].sort_values("epoch").groupby("path")["train_loss"].last()
    runs["last_train_loss"] = runs["path"].map(last_epoch)
    runs["configuration"] = runs["experiment"] + "/" + runs["run"].str.replace(r"-s\d+$", "", regex=True)
    g = runs.groupby("configuration")
    return pd.DataFrame({
        "seeds": g.size(), "best_top1_mean": g["best_val_top1"].mean(), "best_top1_sd": g["best_val_top1"].std(),
        "last_train_loss_mean": g["last_train_loss"].mean(),
    }).round(2).reset_index()
