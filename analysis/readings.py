"""The notebooks' "Reading" cells, computed from the runs shown: each function returns Markdown that states the
thesis's finding (from its published numbers) and then, per scale, where our runs support it and where they don't.

rq3_reading reads the verdict table analysis.findings.orderings makes (results/tables/orderings.csv).
"""
from __future__ import annotations

import math

import pandas as pd

from . import numbers as nb
from . import tables as tb
from .findings import DIVERGED_SHARE, OPTIMIZERS, holds
from .smoke import SMOKE

# `holds` words of rows that claim nothing: n/a (nothing claimed there), diverged (every run diverged: no verdict)
NO_CLAIM = ("n/a", "diverged")
FINDINGS = {
    "naive_degrades": "Naive scaling (learning rate fixed) degrades as the global batch grows",
    "warmup_not_worse": "Linear scaling with warm-up is not worse than without it at 32 workers",
    "warmup_matches_baseline": "With warm-up, the multi-worker model matches the 1-worker baseline",
    "warmup_schemes_alike": "The warm-up schemes give alike models: gradual as stepping, the longer gradual as the "
                            "shorter",
}


def markdown(text: str):
    """Display a reading in a notebook (the cell's last line)."""
    from IPython.display import Markdown

    return Markdown(text)


def _pts(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f}"


def _thesis_claim(finding: str, ref: pd.DataFrame) -> str:
    top1 = ref.dropna(subset=["top1"])

    def one(exp, gpus, framework=None):
        r = top1[(top1["experiment"] == exp) & (top1["gpus"] == gpus)]
        if framework:
            r = r[r["framework"] == framework]
        return float(r["top1"].iloc[0]) if len(r) else math.nan

    if finding == "naive_degrades":
        return f"thesis: {one(4, 1):.1f} % at 1 GPU, {one(4, 32):.1f} % at 32 (naive, Table 10)"
    if finding == "warmup_not_worse":
        return (f"thesis: {one(6, 32, 'horovod+pytorch'):.1f} % with a 5-epoch stepping warm-up against "
                f"{one(5, 32):.1f} % without, at 32 GPUs (Tables 11-12)")
    if finding == "warmup_schemes_alike":
        return (f"thesis: at 32 GPUs {one(6, 32, 'horovod+pytorch'):.1f} % stepping, {one(8, 32):.1f} % gradual, "
                f"{one(9, 32):.1f} % the longer gradual warm-up, read as 'no additional benefits' (Tables 12, 15-16)")
    warm = top1[top1["experiment"].isin([6, 8, 9]) & (top1["gpus"] > 1)]["top1"]
    return (f"thesis: {warm.min():.1f}-{warm.max():.1f} % with warm-up on 8-32 GPUs against the 1-GPU "
            f"baseline's {one(5, 1):.1f} % (Tables 11-15)")


def _zero(r) -> str:
    """Whether 0 lies inside the interval: 'equivalent' within a margin can still be measurably below 0."""
    if pd.isna(r.ci_low) or pd.isna(r.ci_high):
        return "no interval"
    if r.ci_low <= 0 <= r.ci_high:
        return "0 inside"
    return "excludes 0: measurably " + ("below" if r.ci_high < 0 else "above")


def _against_margin(verdict: str, margin: float) -> str:
    return {"equivalent": f"equivalent within ±{margin:g}", "worse": f"worse beyond -{margin:g}",
            "better": f"better beyond +{margin:g}"}.get(verdict, f"{verdict} against ±{margin:g}")


def _seeds(r) -> str:
    n, m = r.n, r.n_against
    return "" if pd.isna(n) else f"{int(n)} vs {int(m)} seeds" if not pd.isna(m) else f"{int(n)} seeds"


def _row_name(r) -> str:
    """'exp 6 at 32', or with its optimizer where the study varies it: 'exp 12 lars at 256'."""
    named = int(r.experiment) > 9 and isinstance(r.optimizer, str)  # the thesis's experiments all ran SGD
    return f"exp {int(r.experiment)}{' ' + r.optimizer if named else ''} at {int(r.workers)}"


def _row_text(r) -> str:
    """'exp 6 at 32 workers: -1.07 points, 90 % CI -1.8 to -0.3 (excludes 0: measurably below), equivalent within
    ±2, 7 vs 7 seeds; thesis -0.4' -- everything the interval says, nothing more."""
    thesis = r.thesis_difference
    return (f"{_row_name(r)} workers: {_pts(r.difference)} points, 90 % CI "
            f"{_pts(r.ci_low)} to {_pts(r.ci_high)} ({_zero(r)}), {_against_margin(r.verdict, r.margin)}"
            + (f", {_seeds(r)}" if _seeds(r) else "")
            + ("" if pd.isna(thesis) else f"; thesis {_pts(float(thesis))}"))


def _in_order(g: pd.DataFrame) -> pd.DataFrame:
    """Rows by experiment, then optimizer (experiment 12's order: SGD first), then workers."""
    rank = g["optimizer"].map({name: i for i, name in enumerate(OPTIMIZERS)})
    return g.assign(_rank=rank).sort_values(["experiment", "_rank", "workers"], kind="stable").drop(columns="_rank")


def _said(g: pd.DataFrame) -> list[str]:
    """Per row: yes / no / undecided / n/a (the table's `holds`)."""
    return ["n/a" if pd.isna(h) else str(h) for h in g["holds"]]


def finding_summary(verdicts: pd.DataFrame) -> list[str]:
    """One line per finding and scale: in how many of its rows it holds, which rows, and where a row that holds has
    an interval excluding 0 (equivalent only by the margin). A finding holds only as far as its rows do."""
    v = verdicts.copy()
    v["where"] = v["scale"].fillna("unknown") + v["numerics"].map(lambda n: nb.numerics_suffix(n, ", "))
    smoke = v["verdict"] == SMOKE  # smoke runs' rows (never pooled with full ones): a line of their own, no verdict
    lines = [f"{finding} ({where} scale, {len(g)} rows of smoke runs): {SMOKE}."
             for (where, finding), g in v[smoke].groupby(["where", "finding"], sort=True)]
    v = v[~smoke]
    for (where, finding), g in v.groupby(["where", "finding"], sort=True):
        g = _in_order(g)
        said = _said(g)
        rows = [_row_name(r) for r in g.itertuples()]
        claimed = [s for s in said if s not in NO_CLAIM]
        yes = [row for row, s in zip(rows, said) if s == "yes"]
        word = ("holds" if claimed and set(claimed) == {"yes"} else
                "does not hold" if "yes" not in claimed else "mixed")
        parts = [f"{len(yes)} of {len(claimed)} rows support it" + (f" ({', '.join(yes)})" if yes else "")]
        for label, key in (("undecided", "undecided"), ("fails", "no"), ("claims nothing", "n/a"),
                           ("diverged", "diverged")):
            hit = [row for row, s in zip(rows, said) if s == key]
            if hit:
                parts.append(f"{label} in {len(hit)} ({', '.join(hit)})")
        below = [f"{_row_name(r)} ({_pts(r.difference)} [{_pts(r.ci_low)}, "
                 f"{_pts(r.ci_high)}])" for r, s in zip(g.itertuples(), said)
                 if s == "yes" and finding.endswith("matches_baseline") and _zero(r).startswith("excludes")]
        if below:
            parts.append("equivalent only by the margin, its interval excluding 0, at " + ", ".join(below))
        looked = _only_after_a_look(finding, g, said)
        if looked:
            parts.append("holds only with seeds added after a look at " + ", ".join(looked))
        lines.append(f"{finding} ({where} scale): {word} -- " + "; ".join(parts) + "." + _holm_words(g, said))
    return lines


def _only_after_a_look(finding: str, g: pd.DataFrame, said: list[str]) -> list[str]:
    """The rows that support the finding only with seeds added after a look at an interval: their declared seeds
    alone (orderings.csv declared_*) would not, by the same rule -- each named with that interval and verdict."""
    out = []
    for r, s in zip(g.itertuples(), said):
        declared = r.declared_verdict
        if s != "yes" or not isinstance(declared, str) or declared == SMOKE:
            continue
        if holds(finding, float(r.declared_ci_low), declared, float(r.margin)) != "yes":
            out.append(f"{_row_name(r)} (its declared seeds alone: {r.declared_difference:+.2f} "
                       f"[{r.declared_ci_low:+.2f}, {r.declared_ci_high:+.2f}], {declared})")
    return out


def _holm_words(g: pd.DataFrame, said: list[str]) -> str:
    """' After Holm's correction over its N rows: K support it (rows).'"""
    rows = [_row_name(r) for r in g.itertuples()]
    yes = [row for row, h in zip(rows, g["holds_holm"]) if h == "yes"]
    claimed = [s for s in said if s not in NO_CLAIM]
    return (f" After Holm's correction over its {len(claimed)} rows: {len(yes)} of {len(claimed)} support it"
            + (f" ({', '.join(yes)})" if yes else "") + ".")


def _interval_text(r) -> str:
    if pd.isna(r.difference):
        return ""
    ends = "" if pd.isna(r.ci_low) else f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
    return f"{r.difference:+.2f}{ends}"


def _flag(r) -> str:
    """A row's flag: its seeds added after a look, or its diverged runs (experiment 12) left out of its mean."""
    look, gone = r.after_a_look, r.diverged
    flags = [look] if isinstance(look, str) and look else []
    if gone is not None and not pd.isna(gone) and int(gone):
        flags.append(f"diverged: {int(gone)} of {int(gone) + int(r.n)} runs left out (their last training loss "
                     f"above {DIVERGED_SHARE:g} of their first epoch's, or not finite)")
    return "; ".join(flags)


def verdict_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """orderings.md's table, one short line a row: the comparison, its difference and 90 % interval, how the interval
    was computed, the per-row verdict, whether it supports the finding before and after Holm's correction, and the
    after-a-look flag (orderings.csv keeps every column). The scale, where the rows span more than one."""
    v = verdicts.reset_index(drop=True)
    out = pd.DataFrame({
        "finding": v["finding"],
        "comparison": [f"{_row_name(r)} vs {r.against}" for r in v.itertuples()],
        "seeds": [_seeds(r) for r in v.itertuples()],
        "difference [90 % interval]": [_interval_text(r) for r in v.itertuples()],
        "method": v["method"], "verdict": v["verdict"], "holds": v["holds"], "holds after Holm": v["holds_holm"],
        "flag": [_flag(r) for r in v.itertuples()],
    })
    where = v["scale"].fillna("unknown") + v["numerics"].map(lambda n: nb.numerics_suffix(n, ", "))
    return out.assign(scale=where)[["scale", *out.columns]] if where.nunique() > 1 else out


def rq3_reading(verdicts: pd.DataFrame, ref: pd.DataFrame) -> str:
    """Per finding: the thesis's numbers, then per scale the comparisons that support it, fail it, or can't tell."""
    v = verdicts.copy()
    # runs in other numerics than fp32: a line of their own
    v["where"] = v["scale"].fillna("unknown") + " scale" + v["numerics"].map(lambda n: nb.numerics_suffix(n, ", "))
    lines = ["**Reading, computed from the runs above** (each comparison: our mean best top-1 difference, its "
             "90 % interval, whether 0 lies inside it, the verdict against the scale's equivalence margin and the "
             "seeds a side; see the verdict table). A finding holds only as far as its rows do: 'mixed' when some "
             "rows support it and others can't tell. Each row is its own 90 % interval, not corrected for the "
             "number of rows (the verdict table's `holds_holm` is: Holm's correction over each finding's rows), nor "
             "for seeds added after a look at an interval (the verdict table flags those rows, with the interval "
             "over the declared seeds beside).", ""]
    for finding, title in FINDINGS.items():
        lines.append(f"*{title}* — {_thesis_claim(finding, ref)}.")
        rows = v[v["finding"] == finding]
        if rows.empty:
            lines += ["- our runs: no comparison (the runs it needs are missing).", ""]
            continue
        for where, g in rows.groupby("where", sort=True):
            g = _in_order(g)
            said = _said(g)
            parts = []
            for word, label in (("yes", "holds"), ("no", "**fails**"), ("undecided", "no verdict (interval too wide)"),
                                ("n/a", "claims nothing (the batch the rate is tuned for, or smaller)")):
                hit = [_row_text(r) for r, s in zip(g.itertuples(), said) if s == word]
                if hit:
                    parts.append(f"{label} for " + "; ".join(hit))
            overall = {frozenset({"yes"}): "holds everywhere", frozenset({"no"}): "fails everywhere",
                       frozenset({"undecided"}): "undecided"}.get(frozenset(said) - set(NO_CLAIM), "mixed")
            lines.append(f"- {where} — {overall}: " + ". ".join(parts) + "." + _holm_words(g, said))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def baseline_rate_note(df: pd.DataFrame) -> str:
    """A caveat when experiment 11's base-rate sweep found a better 1-worker rate than experiment 5's baseline ran
    at: the linear rule scales the base rate the 1-worker run is best at, so comparisons with that baseline are
    provisional until experiments 5-9 run at the better rate. Per scale, seed 0 (the sweep's seed), the same epochs;
    the baseline's own seed-0 run counts as the sweep's point at its rate. Empty when there is nothing to flag."""
    runs = df[(df["kind"] == "run") & df["status"].isin(["completed", "log"]) & (df["gpus"] == 1)]
    runs = runs.dropna(subset=["best_val_top1"])
    lines = []
    for scale, g in runs.groupby(runs["scale"].fillna("unknown"), sort=True):
        baseline = g[(g["exp"] == 5) & (g["seed"] == 0)]
        if baseline.empty:
            continue
        base = baseline.iloc[0]
        sweep = g[(g["exp"] == 11) & (g["seed"] == 0) & (g["epochs"] == base["epochs"])]
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


def _batch_verdict(values: list[float], noise: float) -> str:
    """Whether speed-ups rise with the per-GPU batch. noise: the largest ratio two speed-ups may differ by from
    measurement alone (1 for the thesis's printed values; for ours the repeats' spread squared, a speed-up being a
    ratio of two single measurements; nan without a repeat). A rise or fall within it is not shown either way."""
    if math.isnan(noise):
        return "smaller batch scales worse: not tested (no configuration was measured twice, so no noise is known)"
    steps = list(zip(values, values[1:]))
    if all(y > x * noise for x, y in steps) or (noise == 1 and all(x <= y for x, y in steps)):
        return "smaller batch scales worse: holds"
    if any(x > y * noise for x, y in steps):
        return "smaller batch scales worse: **fails**"
    return (f"smaller batch scales worse: not shown (the speed-ups differ by less than {noise:.2f}x, the repeats' "
            "spread squared: a speed-up divides two single measurements)")


def _speedups_by_batch(scaling: pd.DataFrame, spread: float) -> list[str]:
    """Per scale, framework and numerics with several per-GPU batches: speed-up at the most GPUs all batches
    reached (bf16 runs are compared with bf16 runs). spread: tables.repeat_spread of our runs."""
    out = []
    s = scaling.dropna(subset=["speedup"])
    s = s[s["source"].isin(["thesis", "ours (steady state)"])]
    for (scale, fw, numerics), g in s.groupby(["scale", "framework", "numerics"], dropna=False, sort=True):
        fw += nb.numerics_suffix(numerics)
        multi = g[g["gpus"] > 1]
        batches = sorted(multi["per_gpu_batch"].unique())
        who = "thesis" if scale == "thesis" and (g["source"] == "thesis").all() else f"ours, {scale}"
        if len(batches) < 2:
            if len(batches) == 1 and who != "thesis":
                out.append(f"- {who}, {fw}: only per-GPU batch {int(batches[0])} ran on several workers — not "
                           "tested.")
            continue
        common = set.intersection(*(set(multi.loc[multi["per_gpu_batch"] == b, "gpus"]) for b in batches))
        if not common:
            continue
        gpus = max(common)
        at = multi[multi["gpus"] == gpus].groupby("per_gpu_batch")["speedup"].mean()
        values = [at[b] for b in batches]
        verdict = _batch_verdict(values, 1.0 if who == "thesis" else spread ** 2)
        out.append(f"- {who}, {fw}, {int(gpus)} GPUs/workers: speed-up " +
                   ", ".join(f"{v:.1f}x at batch {int(b)}" for b, v in zip(batches, values)) + f" — {verdict}.")
    return out


def exp6_vs_exp7(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Tables 12 and 13 at 32 workers (the thesis's Horovod rows, ours Horovod or emulated), wall-clock in seconds."""
    parts = []
    for t in (12, 13):
        q = tb.quality_table(df, ref, t)
        q = q[q["framework"].isin(["horovod+pytorch", "emulated"]) & (q["gpus"] == 32)].copy()
        q["table"] = t
        parts.append(q)
    return pd.concat(parts, ignore_index=True)


def _thesis_gap(wall: pd.DataFrame) -> float:
    """The thesis's experiment 7 minus experiment 6 best top-1 at 32 GPUs (Tables 12-13), nan without both."""
    t = wall[wall["scale"] == "thesis"].drop_duplicates("table").set_index("table")
    if not {12, 13} <= set(t.index) or t[["thesis_top1"]].isna().any().any():
        return math.nan
    return float(t.loc[13, "thesis_top1"] - t.loc[12, "thesis_top1"])


def _accuracy(a6: float, a7: float, thesis_gap: float) -> str:
    """Experiment 7's top-1 against 6's, beside the thesis's gap (which it calls 'on par')."""
    text = f"top-1 {a7:.1f} against {a6:.1f} % ({_pts(a7 - a6)} points"
    if not math.isnan(thesis_gap):
        text += f"; the thesis: {_pts(thesis_gap)}, 'on par'"
    return text + ")"


def _wallclock(wall: pd.DataFrame) -> list[str]:
    """Experiment 7 (smaller per-GPU batch) against experiment 6 at 32 workers, per scale: time and top-1. Our
    wall-clocks are timed as the runs ran (side by side on a shared machine, as its machine.toml says), so the line
    says they are a run's duration, not a throughput measurement."""
    out = []
    thesis_gap = _thesis_gap(wall)
    for (scale, numerics), g in wall.groupby(["scale", "numerics"], dropna=False, sort=True):
        by = g.drop_duplicates("table").set_index("table")
        where = scale + nb.numerics_suffix(numerics, ", ")
        if not {12, 13} <= set(by.index):
            out.append(f"- {where}: experiment {'7' if 12 in by.index else '6'} has no 32-worker runs here.")
            continue
        key = "thesis" if where == "thesis" else "ours"  # a thesis-scale bf16 row has no thesis values beside it
        t6, t7 = by.loc[12, f"{key}_wallclock_s"], by.loc[13, f"{key}_wallclock_s"]
        a6, a7 = by.loc[12, f"{key}_top1"], by.loc[13, f"{key}_top1"]
        if any(pd.isna(x) for x in (t6, t7)):
            out.append(f"- {where}: no completed 32-worker runs of both experiments.")
            continue
        line = (f"- {where}: per-GPU batch {int(by.loc[13, 'per_gpu_batch'])} took {nb.format_duration(t7)} "
                f"against {nb.format_duration(t6)} at batch {int(by.loc[12, 'per_gpu_batch'])} ({t7 / t6:.2f}x), "
                f"{_accuracy(a6, a7, thesis_gap if key == 'ours' else math.nan)} — smaller batch slower: ")
        if t7 <= t6:
            line += "**fails**" + (" (emulated workers: one process, no communication, so fewer images per step "
                                   "cost nothing extra)." if scale != "thesis" else ".")
        elif key == "ours":
            line += ("as timed, but these are the runs' durations as they ran (how many side by side, and what "
                     "else ran, is in the runs' machine.toml), not a throughput measurement.")
        else:
            line += "holds."
        out.append(line)
    return out


def rq1_reading(df: pd.DataFrame, ref: pd.DataFrame) -> str:
    """The study frame and the thesis's tables -> the RQ1 notebook's reading."""
    scaling, wallclock = tb.scaling_table(df, ref), exp6_vs_exp7(df, ref)
    lines = ["**Reading, computed from the tables above.** The thesis: a smaller per-GPU batch scales worse and "
             "takes longer for the same 90 epochs, at the same accuracy.", "", "*Scaling by per-GPU batch*"]
    lines += _speedups_by_batch(scaling, tb.repeat_spread(df)[0]) or [
        "- no framework has runs at two per-GPU batches on several workers."]
    lines += ["", "*Wall-clock, experiment 7 (smaller per-GPU batch) against experiment 6, 32 workers*"]
    lines += _wallclock(wallclock) or ["- no rows."]
    return "\n".join(lines) + "\n"
