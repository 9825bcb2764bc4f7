"""The notebooks' reading cells are computed from the runs: their text follows the runs and the verdicts (the verdict
table's words, analysis/readings.py; the thesis's experiments' readings, their plug-ins')."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import catalogue as ct
from analysis import readings as rd
from analysis import reference as rf
from analysis.experiments import pilots
from analysis.experiments import quality_readings as qa
from analysis.findings import COLUMNS as FINDING_COLUMNS
from analysis.findings import holds
from analysis.runs import COLUMNS

REF = rf.load_reference()


def verdict_table(**change):
    """A verdict table in orderings.csv's interface; `change` replaces the verdict of (finding, exp, workers)."""
    rows = [("naive_degrades", 4, 32, -24.9, -27.0, -22.8, "worse"),
            ("warmup_not_worse", 6, 32, 0.6, -1.5, 2.6, "inconclusive"),
            ("warmup_matches_baseline", 6, 8, -0.1, -0.8, 0.6, "equivalent"),
            ("warmup_matches_baseline", 6, 32, -4.4, -5.9, -2.9, "worse")]
    df = pd.DataFrame(rows, columns=["finding", "experiment", "workers", "difference", "ci_low", "ci_high",
                                     "verdict"])
    df["margin"], df["scale"] = 1.0, "local"
    for (finding, exp, workers), v in change.get("verdicts", {}).items():
        df.loc[(df["finding"] == finding) & (df["experiment"] == exp) & (df["workers"] == workers), "verdict"] = v
    return as_orderings(df)


def as_orderings(df: pd.DataFrame) -> pd.DataFrame:
    """The rows in analysis.findings.orderings' interface: every column, fp32, `holds` as orderings sets it."""
    df = df.assign(numerics="fp32")
    direction = {f.name: f.holds for f in ct.FINDINGS}
    df["holds"] = [holds(direction[r.finding], r.ci_low, r.verdict, r.margin) for r in df.itertuples()]
    return df.reindex(columns=FINDING_COLUMNS)


def test_rq3_reading_says_where_a_finding_fails_locally():
    text = qa.rq3_reading(verdict_table(), REF)
    assert "thesis: 73.3 % at 1 GPU, 69.0 % at 32" in text
    matches = next(line for line in text.splitlines() if line.startswith("- local") and "exp 6 at 8" in line)
    assert "mixed" in matches and "holds for exp 6 at 8 workers" in matches
    assert ("**fails** for exp 6 at 32 workers: -4.4 points, 90 % CI -5.9 to -2.9 (excludes 0: measurably below), "
            "worse beyond -1") in matches
    assert "exp 6 at 8 workers: -0.1 points, 90 % CI -0.8 to +0.6 (0 inside), equivalent within ±1" in matches
    naive = text.split("*Naive")[1].split("*Linear")[0]
    assert "holds everywhere" in naive
    # warmup_not_worse: the interval's low end (-1.5) is below -margin: undecided, not a pass
    assert "undecided: no verdict (interval too wide) for exp 6 at 32 workers" in text.split("*Linear scaling with warm-up")[1].split("*With")[0]


def test_rq3_reading_changes_when_the_verdicts_change():
    before = qa.rq3_reading(verdict_table(), REF)
    after = qa.rq3_reading(verdict_table(verdicts={("warmup_matches_baseline", 6, 32): "equivalent"}), REF)
    assert before != after
    line = next(x for x in after.splitlines() if x.startswith("- local") and "exp 6 at 8" in x)
    assert "holds everywhere" in line and "fails" not in line


def test_rq3_reading_prefers_the_tables_own_holds_column_and_shows_the_thesis_difference():
    v = verdict_table()
    v["holds"], v["thesis_difference"] = "no", -4.28
    naive = qa.rq3_reading(v, REF).split("*Naive")[1].split("*Linear")[0]
    assert "fails everywhere" in naive and "worse beyond -1; thesis -4.3" in naive


def test_rq3_reading_counts_a_row_that_claims_nothing_apart():
    v = verdict_table()
    two = pd.DataFrame([dict(v.iloc[0], workers=2, difference=-0.9, ci_low=-1.0, ci_high=-0.7, verdict="equivalent")])
    v = pd.concat([v, two], ignore_index=True)
    v["holds"] = ["yes", "undecided", "yes", "no", "n/a"]
    naive = qa.rq3_reading(v, REF).split("*Naive")[1].split("*Linear")[0]
    assert "holds everywhere" in naive  # the 2-worker row is no evidence either way
    assert "claims nothing (the batch the rate is tuned for, or smaller) for exp 4 at 2 workers" in naive


def quality_runs(wall6: float, wall7: float, top6: float = 58.0, top7: float = 56.0) -> pd.DataFrame:
    """Three completed 32-worker runs each of experiments 6 and 7 at the local scale (run rows only)."""
    rows = []
    for exp, batch, wall, top in ((6, 4, wall6, top6), (7, 2, wall7, top7)):
        for seed in range(3):
            rows.append({"kind": "run", "exp": exp, "experiment": f"0{exp}_x", "run": f"w32-s{seed}",
                         "framework": "emulated", "backend": "emulated", "scale": "local", "gpus": 32,
                         "per_gpu_batch": batch, "global_batch": 32 * batch, "lr": 0.2 * batch,
                         "warmup": "stepping-1", "seed": seed, "status": "completed", "diverged": False,
                         "best_val_top1": top + seed, "best_val_top5": 90.0, "wallclock_s": wall})
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def test_rq1_reading_follows_the_runs():
    faster = qa.rq1_reading(quality_runs(224.0, 200.0), REF)
    slower = qa.rq1_reading(quality_runs(200.0, 260.0), REF)
    local = [x for x in faster.splitlines() if x.startswith("- local scale")]
    assert len(local) == 1 and "(0.89x)" in local[0] and "smaller batch slower: **fails**" in local[0]
    local_slower = slower.split("- local scale")[1]
    # our runs' durations are not a throughput measurement (they ran side by side), and the accuracy gap is shown
    # beside the thesis's 'on par'
    assert "(1.30x)" in local_slower and "smaller batch slower: as timed, but" in local_slower
    assert "not a throughput measurement" in local_slower
    assert "top-1 57.0 against 59.0 % (-2.0 points; the thesis: +0.1, 'on par')" in local_slower
    thesis = next(x for x in faster.splitlines() if x.startswith("- thesis: per-GPU batch 32"))
    assert "(1.21x)" in thesis and "holds" in thesis  # 8 h against 6 h 36 min (Tables 12-13)
    assert "22.7x at batch 32, 26.5x at batch 64, 26.7x at batch 128" in faster


def test_reading_cells_are_computed_not_prose():
    for cells in (qa.RQ1, qa.RQ3):
        i = next(i for i, (kind, src) in enumerate(cells) if kind == "md" and src and src.startswith("## Reading"))
        assert cells[i][1] == "## Reading" and cells[i + 1][0] == "code" and "_reading(" in cells[i + 1][1]


def test_rq1_speedups_by_batch_compare_runs_of_one_numerics():
    rows = [("fp32", 32, 1.5), ("fp32", 64, 1.8), ("bf16+cl", 32, 1.9), ("bf16+cl", 64, 1.7)]
    scaling = pd.DataFrame([{"source": "ours (steady state)", "scale": "local scale", "framework": "pytorch",
                             "numerics": n, "per_gpu_batch": b, "gpus": g, "speedup": sp if g > 1 else 1.0}
                            for n, b, sp in rows for g in (1, 2)])
    lines = qa._speedups_by_batch(scaling, 1.05)  # repeats 1.05x apart: speed-ups may differ by 1.1025x alone
    assert lines == [
        "- ours, local scale, pytorch bf16+cl, 2 GPUs/workers: speed-up 1.9x at batch 32, 1.7x at batch 64 — smaller "
        "batch scales worse: **fails**.",
        "- ours, local scale, pytorch, 2 GPUs/workers: speed-up 1.5x at batch 32, 1.8x at batch 64 — smaller batch "
        "scales worse: holds."]


@pytest.mark.parametrize("spread, said", [
    (1.2, "not shown (the speed-ups differ by less than 1.44x, the repeats' spread squared"),  # 1.8/1.5 = 1.2
    (1.05, "holds"),
    (float("nan"), "not tested (no configuration was measured twice, so no noise is known)")])
def test_rq1_calls_a_rise_in_speed_up_only_beyond_what_single_measurements_differ_by(spread, said):
    scaling = pd.DataFrame([{"source": "ours (steady state)", "scale": "local scale", "framework": "pytorch",
                             "numerics": "fp32", "per_gpu_batch": b, "gpus": g, "speedup": sp if g > 1 else 1.0}
                            for b, sp in ((32, 1.5), (64, 1.8)) for g in (1, 2)])
    [line] = qa._speedups_by_batch(scaling, spread)
    assert f"smaller batch scales worse: {said}" in line


def run_rows(rows):
    """Run rows (one per run) in the loader's interface: (exp, gpus, lr, seed, epochs, best top-1)."""
    df = pd.DataFrame(rows, columns=["exp", "gpus", "lr", "seed", "epochs", "best_val_top1"])
    df["kind"], df["status"], df["scale"] = "run", "completed", "local"
    return df


def test_baseline_rate_note_flags_a_baseline_below_the_sweeps_best_rate():
    baseline = [(5, 1, 0.025, s, 72, top1) for s, top1 in ((0, 74.25), (1, 76.85))]
    sweep = [(11, 1, 0.0125, 0, 72, 74.65), (11, 1, 0.05, 0, 72, 78.2), (11, 1, 0.05, 1, 72, 76.55),
             (11, 1, 0.1, 0, 72, 77.5)]
    note = pilots.baseline_rate_note(run_rows(baseline + sweep + [(5, 32, 0.8, 0, 72, 73.0)]))
    assert "local scale" in note and "lr 0.05 (78.20 %)" in note and "lr 0.025 (74.25 %)" in note
    assert "provisional" in note
    # the baseline's own rate best at seed 0 (its run counts as the sweep's point): nothing to flag
    assert pilots.baseline_rate_note(run_rows(baseline + [(11, 1, 0.0125, 0, 72, 70.0)])) == ""
    # a sweep at another epoch count (the 18-epoch scale of the time) is not this baseline's sweep
    assert pilots.baseline_rate_note(run_rows(baseline + [(11, 1, 0.05, 0, 18, 90.0)])) == ""
    assert pilots.baseline_rate_note(run_rows(baseline)) == ""


def test_the_summary_says_how_far_each_finding_holds():
    v = verdict_table()
    v["n"], v["n_against"] = 3, 7
    extra = pd.DataFrame([dict(v.iloc[2], workers=32, experiment=8, difference=-1.07, ci_low=-1.83, ci_high=-0.31,
                               verdict="equivalent")])
    lines = rd.finding_summary(pd.concat([v, extra], ignore_index=True), ct.FINDINGS)
    match = next(x for x in lines if x.startswith("warmup_matches_baseline"))
    # one row equivalent, one worse, one equivalent only by the margin (its interval excludes 0): mixed, not 'holds'
    assert match.startswith("warmup_matches_baseline (local scale): mixed -- 2 of 3 rows support it")
    assert "fails in 1 (exp 6 at 32)" in match
    assert "equivalent only by the margin, its interval excluding 0, at exp 8 at 32 (-1.1 [-1.8, -0.3])" in match
    naive = next(x for x in lines if x.startswith("naive_degrades"))
    assert naive.startswith("naive_degrades (local scale): holds -- 1 of 1 rows support it")
    reading = qa.rq3_reading(v, REF)
    assert "3 vs 7 seeds" in reading and "not corrected" in reading


def test_the_summary_names_experiment_12s_optimizer_in_the_tables_order():
    rows = [("large_batch_matches_baseline", 12, workers, optimizer, diff, diff - 1, diff + 1, verdict)
            for optimizer, workers, diff, verdict in (("lars", 256, -0.3, "equivalent"), ("sgd", 256, -9.0, "worse"),
                                                      ("sgd", 32, 0.2, "equivalent"))]
    v = pd.DataFrame(rows, columns=["finding", "experiment", "workers", "optimizer", "difference", "ci_low",
                                    "ci_high", "verdict"])
    v["margin"], v["scale"] = 2.0, "local"
    line, = rd.finding_summary(as_orderings(v), ct.FINDINGS)
    assert line.startswith("large_batch_matches_baseline (local scale): mixed -- 2 of 3 rows support it "
                           "(exp 12 sgd at 32, exp 12 lars at 256)")
    assert "fails in 1 (exp 12 sgd at 256)" in line
    assert "exp 6 at 32" in rd.finding_summary(verdict_table().assign(optimizer="sgd"), ct.FINDINGS)[-1]  # thesis rows unnamed


def test_the_summary_and_the_short_table_say_both_per_row_and_after_holm():
    v = verdict_table()
    v["holds"] = ["yes", "undecided", "yes", "no"]
    v["holds_holm"] = ["yes", "undecided", "undecided", "no"]
    v["n"], v["n_against"], v["numerics"], v["method"] = 3, 7, "fp32", "Welch (unpaired)"
    v["against"] = "exp 5, 1 worker"
    v["after_a_look"] = [None, None, None, "seeds added after a look: declared 5 vs 5 give -4.00 [-6.00, -2.00]"]
    match = next(x for x in rd.finding_summary(v, ct.FINDINGS) if x.startswith("warmup_matches_baseline"))
    assert match.endswith("After Holm's correction over its 2 rows: 0 of 2 support it.")
    table = ct.verdict_table(v)
    assert list(table.columns) == ["finding", "comparison", "seeds", "difference [90 % interval]", "method",
                                   "verdict", "holds", "holds after Holm", "flag"]  # one scale: no scale column
    last = table.iloc[-1]
    assert (last["comparison"], last["difference [90 % interval]"]) == ("exp 6 at 32 vs exp 5, 1 worker",
                                                                         "-4.40 [-5.90, -2.90]")
    assert last["flag"].startswith("seeds added after a look") and table.iloc[0]["flag"] == ""
    assert "scale" in ct.verdict_table(v.assign(scale=["local", "local", "gpu", "gpu"])).columns
    reading = qa.rq3_reading(v, REF)
    assert "After Holm's correction over its 2 rows: 0 of 2 support it." in reading


def test_the_summary_says_which_rows_hold_only_with_seeds_added_after_a_look():
    v = verdict_table()
    v["holds"] = ["yes", "yes", "yes", "yes"]
    v.loc[3, ["ci_low", "ci_high", "verdict"]] = [-0.8, -0.2, "equivalent"]  # holds with every seed
    v["after_a_look"] = [None, None, "seeds added after a look: declared 5 vs 5 give -0.30 [-0.70, +0.10]",
                         "seeds added after a look: declared 5 vs 5 give -1.07 [-2.17, +0.03]"]
    v["declared_difference"] = [math.nan, math.nan, -0.3, -1.07]
    v["declared_ci_low"], v["declared_ci_high"] = [math.nan, math.nan, -0.7, -2.17], [math.nan, math.nan, 0.1, 0.03]
    v["declared_verdict"] = [None, None, "equivalent", "inconclusive"]
    match = next(x for x in rd.finding_summary(v, ct.FINDINGS) if x.startswith("warmup_matches_baseline"))
    # exp 6 at 8 holds with its declared seeds alone; exp 6 at 32 only with the seeds added after the look
    assert "holds only with seeds added after a look at exp 6 at 32 (its declared seeds alone: -1.07 " \
           "[-2.17, +0.03], inconclusive)" in match
    assert "at exp 6 at 8" not in match
    v["declared_verdict"] = [None, None, "equivalent", "equivalent"]  # both hold on their declared seeds
    assert not any("seeds added after a look" in x for x in rd.finding_summary(v, ct.FINDINGS))
