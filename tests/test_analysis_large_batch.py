"""Experiment 12's figure and reading: best top-1 against global batch per optimizer, the baseline, the noise scale."""
import json
import math

import pandas as pd
import pytest
from scipy import stats

from analysis.experiments import large_batch as lb
from analysis import reference as rf
from analysis.catalogue import orderings

BASELINE = [77.0, 76.0, 78.0]
#: optimizer -> workers -> best top-1 of seeds 0, 1, 2 (SGD equivalent to 64 workers, then worse; LARS holds)
STUDY = {"sgd": {32: [76.9, 76.2, 77.8], 64: [77.1, 75.8, 77.9], 128: [70.0, 69.0, 71.0], 256: [50.0, 52.0, 49.0]},
         "lars": {128: [77.1, 76.2, 78.0], 256: [76.8, 75.9, 77.9]}}


def frame(study=STUDY, with_sweep=True):
    rows = []

    def run(exp, optimizer, workers, seed, top1, name):
        rows.append(dict(kind="run", exp=exp, run=name, path=f"runs/{exp:02d}/{name}", status="completed",
                         best_val_top1=top1, scale="local", numerics="fp32", optimizer=optimizer, gpus=workers,
                         per_gpu_batch=4, global_batch=4 * workers, seed=seed, warmup="gradual-4"))

    for seed, top1 in enumerate(BASELINE):
        run(5, "sgd", 1, seed, top1, f"w1-s{seed}")
    for optimizer, by_workers in study.items():
        for workers, tops in by_workers.items():
            for seed, top1 in enumerate(tops):
                run(12, optimizer, workers, seed, top1, f"{optimizer}-w{workers}-s{seed}")
    if with_sweep:  # a sweep run: another rate, one seed, named by its rate; never a point or a verdict
        run(12, "lars", 128, 0, 3.0, "lars-base2-s0")
    return pd.DataFrame(rows).assign(epoch=math.nan, val_top1=math.nan)  # no epoch records: best top-1 alone


NOISE = pd.DataFrame([
    dict(run="12_large_batch/sgd-w32-s0", weights="initial", b_simple=300.0, b_simple_low=200.0, b_simple_high=450.0,
         b_big=128, groups=32),
    dict(run="12_large_batch/sgd-w32-s0", weights="epoch 72", b_simple=None, b_simple_low=2400.0, b_simple_high=None,
         b_big=128, groups=64)])


def test_points_are_each_optimizer_and_batchs_mean_with_its_t_interval_and_leave_the_sweep_out():
    points = lb.study_points(frame())
    assert list(zip(points["optimizer"], points["workers"])) == [("sgd", 32), ("sgd", 64), ("sgd", 128),
                                                                ("sgd", 256), ("lars", 128), ("lars", 256)]
    assert list(points["global_batch"]) == [128, 256, 512, 1024, 512, 1024] and set(points["n"]) == {3}
    lars = points.iloc[4]
    tops = pd.Series(STUDY["lars"][128])
    half = stats.t.ppf(0.95, 2) * tops.std(ddof=1) / math.sqrt(3)
    assert (lars["best_top1"], lars["ci_low"], lars["ci_high"]) == pytest.approx(
        (tops.mean(), tops.mean() - half, tops.mean() + half))


def test_the_reading_says_where_sgd_stops_which_optimizer_carries_on_and_where_the_noise_scale_lies():
    df = frame()
    reading = lb.rq4_reading(orderings(df, rf.load_reference()), lb.study_points(df), NOISE)
    assert "stops being `equivalent` at 128 workers (equivalent up to 64)" in reading
    assert "after Holm's correction over each scale's rows, " in reading and "stay `equivalent`" in reading
    assert "Beyond that, lars is `equivalent` at 128, 256 workers (run there, in workers: lars at 128, 256)." in reading
    # SGD's first batch that is not equivalent: 128 x 4 = 512 images, above the initial range, below the final bound
    assert "initial weights of 12_large_batch/sgd-w32-s0): B_simple 300 (range 200–450) images; SGD's first batch " \
           "that is not `equivalent`, 512, lies above it" in reading
    assert "B_simple at least 2,400 (|G|² not resolved from zero) images; SGD's first batch that is not " \
           "`equivalent`, 512, lies below it" in reading


def test_the_reading_changes_with_the_verdicts():
    study = {"sgd": {w: BASELINE for w in (32, 64, 128, 256)}}
    df = frame(study, with_sweep=False)
    reading = lb.rq4_reading(orderings(df, rf.load_reference()), lb.study_points(df), NOISE.iloc[0:0])
    assert "is `equivalent` at every worker count run (up to 256)" in reading
    assert "No noise-scale measurement" in reading
    sgd_alone = frame({"sgd": STUDY["sgd"]}, with_sweep=False)
    assert "Beyond that, no other optimizer has run there yet." in lb.rq4_reading(
        orderings(sgd_alone, rf.load_reference()), lb.study_points(sgd_alone), NOISE)
    worse_beyond = frame({"sgd": STUDY["sgd"], "lars": {256: [10.0, 12.0, 11.0]}}, with_sweep=False)
    assert "Beyond that, none of the optimizers run there is `equivalent` (run there, in workers: lars at 256)." \
        in lb.rq4_reading(orderings(worse_beyond, rf.load_reference()), lb.study_points(worse_beyond), NOISE)
    # an optimizer inconclusive below SGD's break still counts where it is `equivalent` beyond it
    patchy = frame({"sgd": STUDY["sgd"], "lamb": {64: [70.0, 79.0, 75.0], 128: STUDY["lars"][128],
                                                  256: [10.0, 12.0, 11.0]}}, with_sweep=False)
    reading = lb.rq4_reading(orderings(patchy, rf.load_reference()), lb.study_points(patchy), NOISE)
    # lamb at 64 crosses both sides of the margin; an interval above -2 that reaches past +2 is said not worse
    assert "lamb: 64 workers: -2.3 points [-10.8, +6.2], inconclusive, 3 vs 3 seeds | " in reading
    higher = frame({"sgd": STUDY["sgd"], "lamb": {64: [79.0, 78.2, 80.0]}}, with_sweep=False)
    assert "lamb: 64 workers: +2.1 points [+1.9, +2.3], inconclusive (not worse: the interval clears -2), 3 vs 3 " \
           "seeds." in lb.rq4_reading(orderings(higher, rf.load_reference()), lb.study_points(higher), NOISE)
    assert "Beyond that, lamb is `equivalent` at 128 workers (run there, in workers: lamb at 128, 256)." in reading
    with_noise = lb.rq4_reading(orderings(df, rf.load_reference()), lb.study_points(df), NOISE)
    assert "(range 200–450) images; the largest batch run, 1,024, lies above it" in with_noise
    assert "32 workers: +0.0 points [+0.0, +0.0], equivalent, 3 vs 3 seeds" in with_noise
    assert "no experiment 12 verdicts yet" in lb.rq4_reading(pd.DataFrame(columns=["finding"]), lb.study_points(df))


def test_the_figure_draws_every_optimizer_the_baseline_and_the_noise_scale(tmp_path):
    from analysis import figures as fg

    fig = lb.large_batch_figure(frame(), {"local": {"points": 2.0}}, NOISE)
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert {"SGD + linear scaling + warm-up (3 seeds)", "LARS (3 seeds)"} <= set(labels)
    assert "exp 5, 1 worker (3 seeds)" in labels and "baseline ± 2 points (the margin)" in labels
    assert "B_simple, initial weights: 300 (range 200–450)" in labels
    assert "B_simple, epoch 72 weights: ≥ 2,400 (hatched: beyond)" in labels
    assert "32 workers: the thesis's 4,096 (32 GPUs x 128)" in labels
    assert all(p.exists() for p in fg.save(fig, tmp_path, "exp12"))
    assert lb.large_batch_figure(frame({}, with_sweep=True), {}, NOISE) is None  # the sweep alone draws nothing


def test_noise_scales_read_the_tools_json_and_a_missing_file_is_empty(tmp_path):
    path = tmp_path / "large_batch.json"
    path.write_text(json.dumps([{"run": "r", "weights": "initial", "seed": 0, "b_simple": 910.2, "b_simple_low": 667.0,
                                 "b_simple_high": 1432.8, "grad_sq": 0.02, "grad_sq_se": 0.004, "trace_cov": 20.9,
                                 "b_small": 4, "b_big": 128, "groups": 32}]))
    got = lb.noise_scales([path, tmp_path / "none.json"])
    assert list(got["b_simple"]) == [910.2] and lb.noise_text(next(got.itertuples())) == "910 (range 667–1,433)"
    assert lb.noise_scales([tmp_path / "none.json"]).empty


def test_a_noise_scale_row_names_the_run_where_it_is_not_where_the_measuring_machine_kept_it(tmp_path):
    # tools noise-scale records the run as its machine saw it (results/runs/...); a clone never made that run
    path = tmp_path / "large_batch.json"
    path.write_text(json.dumps([{"run": "results/runs/12_large_batch/sgd-w32-s0", "weights": "initial",
                                 "b_simple": 910.2, "b_simple_low": 667.0, "b_simple_high": 1432.8},
                                {"run": "results/runs/12_large_batch/never-made-s0", "weights": "initial"}]))
    got = lb.noise_scales([path])
    assert got["run"].iloc[0] == "results/reference/vm-2cpu/12_large_batch/sgd-w32-s0"
    assert got["run"].iloc[1].endswith("(not in this clone)")
    assert not any(r.startswith("results/runs/") and "not in" not in r for r in got["run"])


def test_study_runs_are_named_by_optimizer_and_workers_at_every_scale_and_sweep_runs_are_not():
    import re

    from analysis.experiments.large_batch import STUDY_RUN

    assert all(re.match(STUDY_RUN, name) for name in ("sgd-w32-s0", "radam-w256-s2", "thesis-lars-w256-s0"))
    assert not any(re.match(STUDY_RUN, name) for name in ("lars-base0.5-s0", "thesis-lamb-base0.008-s0", "w32-s0"))


def test_the_quality_summary_keeps_two_optimizers_at_the_same_rate_apart():
    from analysis.tables import quality_summary

    df = frame({"lamb": {128: [70.0]}, "radam": {128: [50.0]}}, with_sweep=False)
    df = df.assign(lr=0.008, framework="emulated", diverged=False, best_val_top5=90.0, wallclock_s=60.0)
    mine = quality_summary(df, (lb.LARGE_BATCH,))
    assert sorted(zip(mine["optimizer"], mine["top1_mean"])) == [("lamb", 70.0), ("radam", 50.0)]


# ---- the reading's rules (issue 35): what a reader must know before leaning on a row -------------------------------
def verdict_row(**change):
    row = dict(workers=128, difference=-0.75, ci_low=-1.95, ci_high=0.44, margin=2.0, verdict="equivalent", n=3,
               n_against=7, final_verdict="equivalent")
    return pd.Series({**row, **change})


def point(**change):
    p = dict(diverged=0, n=3, worst_loss=math.nan, worst_epoch=math.nan, sweep_seeds="")
    return pd.Series({**p, **change})


def test_a_row_is_borderline_only_within_a_tenth_of_the_margin_of_its_edge():
    assert lb.qualifiers(verdict_row()) == ["borderline: its low end -1.95 against -2"]
    assert lb.qualifiers(verdict_row(ci_low=-1.79)) == []  # 0.21 from the edge: more than a tenth of 2
    assert lb.qualifiers(verdict_row(ci_low=-0.5, ci_high=1.85)) == ["borderline: its high end +1.85 against +2"]
    assert lb.qualifiers(verdict_row(verdict="worse", ci_low=-9.0, ci_high=-2.1, final_verdict="worse")) == []


def test_the_reading_names_a_last_epoch_verdict_diverged_runs_and_the_sweeps_own_run():
    said = lb.qualifiers(verdict_row(ci_low=-1.5, final_verdict="inconclusive"),
                         point(diverged=1, n=2, worst_loss=86.4, worst_epoch=16, sweep_seeds="0"))
    assert said == ["at the last epoch inconclusive",
                    "1 of 3 runs diverged (training loss up to 86 at epoch 16, their last above 0.75 of the first "
                    "epoch's): left out, a failed optimisation at this rate and warm-up, not a measure of the batch",
                    "seed 0 repeats the sweep's run that chose this rate (selected as the best of its grid)"]


def test_a_study_run_diverged_when_its_last_loss_stays_above_three_quarters_of_its_first_epochs():
    def runs(losses_by_run):
        rows = []
        for name, losses in losses_by_run.items():
            path = f"runs/12/{name}"
            rows.append(dict(kind="run", exp=12, run=name, path=path, status="completed", best_val_top1=10.0))
            rows += [dict(kind="epoch", exp=12, run=name, path=path, epoch=e, train_loss=v)
                     for e, v in enumerate(losses)]
        return pd.DataFrame(rows)

    df = runs({"lars-w256-s0": [3.9, 3.5, 86.0, 3.2], "sgd-w256-s0": [3.9, 4.0, 3.95],
               "lamb-w256-s0": [3.9, 2.0, 1.5], "sgd-w32-s0": [3.9, 90.0, 1.0],  # blew up and trained: kept
               "lars-base2-s0": [3.9, 3.9, 3.9]})  # a sweep run is no study run: the rule does not read it
    assert lb.failed_trainings(df) == {"runs/12/lars-w256-s0": (86.0, 2), "runs/12/sgd-w256-s0": (4.0, 1)}


def test_diverged_runs_are_left_out_of_the_points_counted_apart_and_said_in_the_reading():
    df = frame({"sgd": {32: [76.9, 76.2, 77.8], 256: [8.0, 11.0, 6.0]}, "lars": {256: [76.8, 75.9, 12.0]}},
               with_sweep=False)
    losses = {"sgd-w256-s0": [3.9, 4.2, 3.4], "sgd-w256-s1": [3.9, 4.0, 3.5], "sgd-w256-s2": [3.9, 4.1, 3.6],
              "lars-w256-s2": [3.9, 101.0, 3.2]}
    epochs = [dict(kind="epoch", exp=12, run=name, path=f"runs/12/{name}", epoch=e,
                   train_loss=losses.get(name, [3.9, 2.0, 0.9])[e])
              for name in df.loc[df["exp"] == 12, "run"] for e in range(3)]
    df = pd.concat([df, pd.DataFrame(epochs)], ignore_index=True)
    points = lb.study_points(df).set_index(["optimizer", "workers"])
    assert list(points["diverged"]) == [0, 3, 1] and list(points["n"]) == [3, 0, 2]
    assert math.isnan(points.loc[("sgd", 256), "best_top1"])  # no mean of runs that diverged
    assert points.loc[("lars", 256), "best_top1"] == pytest.approx((76.8 + 75.9) / 2)
    reading = lb.rq4_reading(orderings(df, rf.load_reference()), lb.study_points(df), NOISE.iloc[0:0])
    assert "256 workers: no verdict; 3 of 3 runs diverged (training loss up to 4 at epoch 1" in reading
    assert "1 of 3 runs diverged (training loss up to 101 at epoch 1" in reading
    labels = lb.large_batch_figure(df, {"local": {"points": 2.0}}, NOISE.iloc[0:0]).axes[0] \
        .get_legend_handles_labels()[1]
    assert "SGD + linear scaling + warm-up: every run diverged (no mean)" in labels
    assert "SGD + linear scaling + warm-up (3 seeds)" in labels
    differences = lb.differences_figure(orderings(df, rf.load_reference()), lb.study_points(df),
                                        {"local": {"points": 2.0}})
    assert [t.get_text() for t in differences.axes[0].texts] == ["diverged"]  # SGD at 256: no difference to draw
    from analysis.smoke import diverged_runs
    from analysis.tables import quality_summary

    q = quality_summary(df.assign(lr=0.1, framework="emulated", diverged=False, best_val_top5=90.0, wallclock_s=6.0),
                        (lb.LARGE_BATCH,), diverged_runs(df, [lb.STUDY]))
    q = q.set_index(["optimizer", "gpus"])
    assert q.loc[("sgd", 256), "n"] == 0 and math.isnan(q.loc[("sgd", 256), "top1_mean"])
    assert q.loc[("sgd", 256), "status"] == "3 completed (3 diverged by the reading rule: left out)"
    assert q.loc[("lars", 256), "n"] == 2 and q.loc[("lars", 256), "top1_mean"] == pytest.approx(76.35)


def test_a_study_run_is_the_sweeps_only_with_its_config_and_its_seed():
    df = pd.DataFrame([dict(kind="run", exp=12, run=name, fingerprint=fp, seed=seed) for name, fp, seed in (
        ("lars-base0.5-s0", "A", 0), ("lars-base2-s0", "B", 0), ("lars-w128-s0", "A", 0), ("lars-w128-s1", "A", 1))])
    assert lb.sweep_runs(df) == {("A", 0), ("B", 0)}


def test_the_differences_figure_keeps_the_margin_readable_and_marks_rows_off_the_axis():
    df = frame({"sgd": STUDY["sgd"]}, with_sweep=False)
    verdicts = orderings(df, rf.load_reference())
    fig = lb.differences_figure(verdicts, lb.study_points(df), {"local": {"points": 2.0}})
    ax = fig.axes[0]
    assert ax.get_ylim() == (-10.0, 6.0)  # -5 and +3 margins: the band is a fifth of the axis
    assert [t.get_text() for t in ax.texts] == ["-27"]  # SGD at 256 workers, drawn at the edge with its value
    assert lb.differences_figure(pd.DataFrame(columns=["finding"]), lb.study_points(df), {}) is None
