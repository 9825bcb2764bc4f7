"""What the quality experiments (4-9, quality.py) are read for: the thesis's three findings declared as equivalence
tests against experiment 5's 1-worker baseline (the verdict table, analysis/findings.py), and the pages, notebooks
and readings of its two questions on them: model quality (RQ3) and batch size (RQ1: what a smaller per-GPU batch
costs in scaling and wall-clock, experiment 7 against 6).
"""
from __future__ import annotations

import math

import pandas as pd

from contract import reader

from .. import numbers as nb
from .. import readings as rd
from .. import reference as rf
from .. import tables as tb
from ..entries import Comparison, Finding, Runs
from ..page import Question

BASELINE = 5  # experiment 5's 1-worker runs: the baseline the warm-ups are compared with


def batch_at_most_tuned(runs: pd.DataFrame) -> bool:
    """Whether the runs' global batch is at most lr.base_batch, the batch their base rate is tuned for (the first's
    config.json): the rate there is the linear rule's or above, and the thesis claims no fall (its 2 GPUs at 0.1 per
    256 images were its best run)."""
    config = reader.read_config(str(runs["path"].iloc[0]))
    try:
        return config["resolved"]["global_batch"] <= config["lr"]["base_batch"]
    except (KeyError, TypeError, ValueError):
        return False


WARMED = (6, 8, 9)  # the warm-ups of the linear rule: stepping, gradual, the longer gradual
FINDINGS = (
    Finding("naive_degrades", "Naive scaling (learning rate fixed) degrades as the global batch grows", "worse",
            (Comparison(Runs(4, "more"), Runs(4, "fewest"), "exp 4, {workers} worker(s)"),),
            claims_nothing=batch_at_most_tuned,
            claims_nothing_where="where the global batch is at most the one the rate is tuned for"),
    Finding("warmup_not_worse", "Linear scaling with warm-up is not worse than without it at 32 workers", "not worse",
            tuple(Comparison(Runs(n, rf.THESIS_WORKERS), Runs(BASELINE, rf.THESIS_WORKERS),
                             "exp 5, 32 workers (no warm-up)") for n in WARMED),
            by=("gpus", "per_gpu_batch"), match=("per_gpu_batch",), family="warm-up"),
    Finding("warmup_matches_baseline", "With warm-up, the multi-worker model matches the 1-worker baseline",
            "equivalent", tuple(Comparison(Runs(n), Runs(BASELINE, 1), "exp 5, 1 worker") for n in WARMED),
            by=("gpus", "per_gpu_batch"), match=("per_gpu_batch",), family="warm-up"),
    # the thesis's sections 5.8-5.9: a gradual warm-up gains nothing over a stepping one of the same length (8
    # against 6), nor a longer gradual one over the shorter (9 against 8), at each worker count both sides ran
    Finding("warmup_schemes_alike", "The warm-up schemes give alike models: gradual as stepping, the longer gradual "
            "as the shorter", "equivalent",
            (Comparison(Runs(8), Runs(6), "exp 6, {workers} workers (stepping warm-up)"),
             Comparison(Runs(9), Runs(8), "exp 8, {workers} workers (gradual warm-up, the shorter)")),
            by=("gpus", "per_gpu_batch"), match=("gpus", "per_gpu_batch")),
)


# ============================================================================================ the readings


def thesis_claim(finding: str, ref: pd.DataFrame) -> str:
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
    for finding in FINDINGS:
        lines.append(f"*{finding.claim}* — {thesis_claim(finding.name, ref)}.")
        rows = v[v["finding"] == finding.name]
        if rows.empty:
            lines += ["- our runs: no comparison (the runs it needs are missing).", ""]
            continue
        for where, g in rows.groupby("where", sort=True):
            g = rd.in_order(g)
            said = rd.said(g)
            parts = []
            for word, label in (("yes", "holds"), ("no", "**fails**"), ("undecided", "no verdict (interval too wide)"),
                                ("n/a", "claims nothing (the batch the rate is tuned for, or smaller)")):
                hit = [rd.row_text(r, FINDINGS) for r, s in zip(g.itertuples(), said) if s == word]
                if hit:
                    parts.append(f"{label} for " + "; ".join(hit))
            overall = {frozenset({"yes"}): "holds everywhere", frozenset({"no"}): "fails everywhere",
                       frozenset({"undecided"}): "undecided"}.get(frozenset(said) - set(rd.NO_CLAIM), "mixed")
            lines.append(f"- {where} — {overall}: " + ". ".join(parts) + "." + rd.holm_words(g, said, FINDINGS))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


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


def wallclock_rows(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
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
    text = f"top-1 {a7:.1f} against {a6:.1f} % ({rd.pts(a7 - a6)} points"
    if not math.isnan(thesis_gap):
        text += f"; the thesis: {rd.pts(thesis_gap)}, 'on par'"
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
    scaling, wallclock = tb.scaling_table(df, ref), wallclock_rows(df, ref)
    lines = ["**Reading, computed from the tables above.** The thesis: a smaller per-GPU batch scales worse and "
             "takes longer for the same 90 epochs, at the same accuracy.", "", "*Scaling by per-GPU batch*"]
    lines += _speedups_by_batch(scaling, tb.repeat_spread(df)[0]) or [
        "- no framework has runs at two per-GPU batches on several workers."]
    lines += ["", "*Wall-clock, experiment 7 (smaller per-GPU batch) against experiment 6, 32 workers*"]
    lines += _wallclock(wallclock) or ["- no rows."]
    return "\n".join(lines) + "\n"


def batch_size_wallclock(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Experiment 6 (per-GPU batch 128) vs 7 (32) on 32 GPUs: the thesis's Horovod rows and ours (Horovod, or
    emulated workers at the local and gpu scales), the wall-clocks in words."""
    rows = [{"table": r.table, "scale": r.scale, "numerics": r.numerics, "per_gpu_batch": r.per_gpu_batch,
             "gpus": r.gpus, "thesis_top1": r.thesis_top1, "thesis_wallclock": nb.format_duration(r.thesis_wallclock_s),
             "ours_top1": r.ours_top1, "ours_wallclock": nb.format_duration(r.ours_wallclock_s), "n_runs": r.n_runs}
            for r in wallclock_rows(df, ref).itertuples(index=False)]
    return pd.DataFrame(rows)


# ============================================================================================ the declarations

QUESTIONS = (
    Question("batch_size", "Batch size", "What does a smaller per-GPU batch mean for scaling, training time and "
             "utilisation?", "rq1_batch_size", ("fig1[456]_*", "table0[147]", "fig2[237]_util_*", "util_other_runs")),
    Question("quality", "Model quality", "Does accuracy hold as workers are added: naive scaling, the linear scaling "
             "rule, warm-up?", "rq3_model_quality",
             ("table1[0-5]", "orderings", "quality_summary", "study_times", "fig1[89]_*", "fig2[0145689]_*",
              "fig30_*", "lr_schedules_*")),
)
RQ1 = [
    ("md", "# RQ1 — smaller vs larger per-GPU batch size\n\n"
           "*What are the implications of using smaller per GPU worker batch sizes vs. larger ones in terms of "
           "scaling performance, training time (wall clock) and efficient resource utilisation?* (thesis, 6.1)\n\n"
           "Evidence: Horovod+TensorFlow throughput at per-GPU batch 32/64/128 (Tables 1, 4, 7; Figures 14-16: the "
           "thesis's values, and ours where TensorFlow ran: Horovod+TensorFlow and TensorFlow's "
           "MultiWorkerMirroredStrategy, `make setup-tf`), "
           "experiment 7 (batch 32) against experiment 6 (batch 128) on 32 GPUs (Tables 12-13, Figure 27). "
           "This notebook is executed by `make report`; it only calls `analysis`."),
    ("code", None),
    ("md", "## Throughput and speed-up by per-GPU batch size (thesis data, and ours where present)"),
    ("code", "scaling = an.tables.scaling_table(df, ref)\n"
             "an.speedup_pivot(scaling, an.tables.TENSORFLOW)"),
    ("code", "an.scaling_figure(scaling, 'Horovod+TensorFlow by per-GPU batch (Figures 14-16)', "
             "an.tables.TENSORFLOW)"),
    ("md", "## Our throughput runs by per-GPU batch size"),
    ("code", "an.tables.throughput_summary(df)"),
    ("md", "## Wall-clock: per-GPU batch 32 (experiment 7) vs 128 (experiment 6), 32 GPUs"),
    ("code", "an.batch_size_wallclock(df, ref)"),
    ("md", "## Utilisation over time (thesis Figures 22, 23 and 27), from the runs' telemetry"),
    ("code", "an.show_utilisation(df)"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq1_reading(df, ref))"),
]
RQ3 = [
    ("md", "# RQ3 — model quality under large global batches\n\n"
           "Does training on up to 32 GPUs (global batch up to 4096) keep ResNet-50's accuracy, with the linear "
           "scaling rule and warm-up? Experiments 4-9, Tables 10-15 (the text calls them 11-16), Figures 18-30."),
    ("code", None),
    ("md", "## Best validation accuracy: thesis and ours (mean ± std over seeds)"),
    ("code", "an.quality_overview(df, ref)"),
    ("md", "## Do the thesis's three findings hold in our runs? (90 % intervals of the difference in best top-1 "
           "against the scale's declared margin: equivalent, worse, better or inconclusive)"),
    ("md", "One line a comparison: how its interval was computed (paired by seed or Welch), whether it supports the "
           "finding on its own and after Holm's correction over the finding's rows, and whether it gained seeds "
           "after a look (every column: `verdicts`, results/tables/orderings.csv)."),
    ("code", "verdicts = an.orderings(df, ref)\nan.verdict_table(verdicts)"),
    ("md", "## The local 32-worker gap and optimizer steps\n\n"
           "The miniature at 72 epochs instead of 18 (experiment 10, `experiments/10_more_steps_pilot`): the 32-worker "
           "runs take "
           "4,500 steps instead of 1,125. Best top-1 and last-epoch training loss, mean ± sd over seeds."),
    ("code", "an.pilot_summary(RUNS + \"/10_more_steps_pilot\")"),
    ("md", "## Learning-rate schedules of experiments 4-9"),
    ("code", "fig = an.schedules_figure(df)\nan.show(fig)"),
    ("md", "## Training and validation error per epoch (only experiments with runs)"),
    ("code", "an.error_figures(df, ref)"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq3_reading(verdicts, ref))"),
    ("code", "an.markdown(an.baseline_rate_note(df) or 'The 1-worker baseline runs at the best rate of its sweep "
             "(experiment 11), where there is one.')"),
]
NOTEBOOKS = {"rq1_batch_size.ipynb": RQ1, "rq3_model_quality.ipynb": RQ3}
EXPORTS = ("batch_size_wallclock", "rq1_reading", "rq3_reading")
