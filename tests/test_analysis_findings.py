"""The findings the plug-ins declare (the thesis's three quality findings, experiment 12's) as equivalence tests: 90 %
intervals against a declared margin, verdicts."""
import json
import math

import pandas as pd
import pytest
from scipy import stats

from analysis import findings as fd
from analysis import reference as rf
from analysis.runs import COLUMNS
from analysis.catalogue import orderings
from analysis.entries import BEST_TOP1, Comparison, Finding, Measure, Runs
from analysis.findings import claim_p, holm, interval, look, margins, seeds_needed, verdict, with_holm


def runs(rows, final_drop=1.0, numerics="fp32"):
    """rows: (exp, workers, warmup, [best top-1 of seed 0, 1, ...]) at per-worker batch 4; each run's last epoch
    ends `final_drop` points below its best."""
    out = []
    for exp, gpus, warmup, tops in rows:
        for seed, top1 in enumerate(tops):
            path = f"runs/{exp:02d}/w{gpus}-{warmup}-{numerics}-s{seed}"
            ident = dict(exp=exp, gpus=gpus, per_gpu_batch=4, global_batch=4 * gpus, warmup=warmup, seed=seed,
                         scale="local", numerics=numerics, status="completed", path=path, run=path.rsplit("/", 1)[1])
            out.append(dict(ident, kind="run", best_val_top1=top1))
            out.append(dict(ident, kind="epoch", epoch=0, val_top1=top1 - final_drop - 5))
            out.append(dict(ident, kind="epoch", epoch=1, val_top1=top1 - final_drop))
    return pd.DataFrame(out).reindex(columns=COLUMNS)  # the columns of a loaded study


# ---- the verdict: where the 90 % interval lies against the margin --------------------------------------------------
@pytest.mark.parametrize("low, high, expected", [
    (-1.9, 1.9, "equivalent"),     # inside (-2, 2)
    (-2.0, 1.0, "inconclusive"),   # touches -2: not inside the open interval
    (-1.0, 2.5, "inconclusive"),
    (-5.0, -2.1, "worse"),         # entirely beyond -2
    (-5.0, -2.0, "inconclusive"),  # reaches -2
    (2.1, 4.0, "better"),
    (-3.0, 3.0, "inconclusive"),   # wider than the margin on both sides
    (-3.0, -1.0, "inconclusive"),  # below zero, but a difference inside the margin is not excluded
    (math.nan, math.nan, "inconclusive"),
])
def test_verdict_from_the_interval_and_the_margin(low, high, expected):
    assert verdict(low, high, 2.0) == expected


def test_experiment_8_at_24_workers_is_not_equivalent_to_the_baseline():
    # the case: 6.02 points below the baseline, SE 3.01 over 3 seeds a side (one seed at 52.45)
    warm = pd.Series([61.95, 52.45, 55.10], index=[0, 1, 2])
    base = pd.Series([63.70, 60.45, 63.40], index=[0, 1, 2])
    for paired in (True, False):
        got = interval(warm, base, paired=paired)
        assert got["difference"] == pytest.approx(-6.02, abs=0.005)
        assert verdict(got["ci_low"], got["ci_high"], 2.0) == "inconclusive"
        assert verdict(got["ci_low"], got["ci_high"], 1.0) == "inconclusive"
    welch = interval(warm, base, paired=False)
    assert welch["se"] == pytest.approx(3.01, abs=0.005) and welch["method"] == "Welch (unpaired)"


def test_intervals_are_scipys_t_intervals():
    a, b = pd.Series([61.0, 63.0, 62.0]), pd.Series([60.0, 61.0, 61.5])
    d = a - b
    half = stats.t.ppf(0.95, 2) * d.std(ddof=1) / math.sqrt(3)
    paired = interval(a, b, paired=True)
    assert (paired["ci_low"], paired["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    welch = interval(a, b, paired=False)
    expected = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.90)
    assert (welch["ci_low"], welch["ci_high"]) == pytest.approx((expected.low, expected.high))
    one = interval(pd.Series([61.0]), b, paired=False)
    assert math.isnan(one["ci_low"]) and one["method"] == "fewer than 2 runs a side"


def test_seeds_needed_at_the_measured_spread():
    # equal spread sd 1 a side (Welch), difference 0.5, margin 2: the interval must fit inside 1.5 of it
    n, target = seeds_needed(0.5, 1.0, 1.0, None, 2.0)
    assert target == "equivalent"
    half = lambda k: stats.t.ppf(0.95, 2 * (k - 1)) * math.sqrt(2 / k)  # noqa: E731
    assert half(n) < 1.5 <= half(n - 1)
    n, target = seeds_needed(-6.02, 4.90, 1.80, None, 2.0)  # experiment 8 at 24 workers, unpaired
    assert target == "worse" and n > 3
    assert seeds_needed(2.0, 1.0, 1.0, None, 2.0)[0] is None  # a difference on the margin: no number of seeds
    n_paired, _ = seeds_needed(0.5, None, None, 1.0, 2.0)  # paired: the spread of the differences
    assert n_paired >= 2


def test_margins_are_declared_per_scale_with_a_reason():
    declared = margins()
    assert declared["local"]["points"] == 2.0 and declared["thesis"]["points"] == 1.0
    assert all(m["reason"] for m in declared.values())


def test_the_thesis_findings_hold_on_runs_built_to_show_them():
    df = runs([(4, 1, "none", [60, 61, 59]), (4, 2, "none", [61, 62.2, 60.1]), (4, 32, "none", [40, 41.2, 38.9]),
               (5, 1, "none", [62, 63, 61]), (5, 32, "none", [55, 56, 54]),
               (6, 32, "stepping-1", [61.5, 62.5, 60.6])])
    table = orderings(df, rf.load_reference())
    assert {"scale", "finding", "experiment", "workers", "difference", "ci_low", "ci_high", "margin",
            "verdict"} <= set(table.columns)
    naive = table[(table["finding"] == "naive_degrades") & (table["workers"] == 32)].iloc[0]
    assert naive["verdict"] == "worse" and naive["difference"] == pytest.approx(-20.0, abs=0.1) and naive["holds"] == "yes"
    assert naive["thesis_difference"] == pytest.approx(69.006 - 73.286)
    assert table[(table["finding"] == "naive_degrades") & (table["workers"] == 2)].iloc[0]["verdict"] == "equivalent"
    beats = table[table["finding"] == "warmup_not_worse"].iloc[0]
    assert beats["verdict"] == "better" and beats["difference"] == pytest.approx(6.53, abs=0.01)
    assert beats["thesis_difference"] == pytest.approx(74.662 - 73.078)
    near = table[table["finding"] == "warmup_matches_baseline"].iloc[0]
    assert (near["experiment"], near["workers"], near["margin"]) == (6, 32, 2.0)
    assert near["verdict"] == "equivalent" and near["holds"] == "yes" and near["method"] == "paired by seed"
    assert near["final_difference"] == pytest.approx(near["difference"])  # every run ends 1 point below its best


def test_naive_scaling_claims_nothing_at_or_below_the_batch_its_rate_is_tuned_for(tmp_path):
    """At 2 workers x 4 = 8 images (lr.base_batch) the naive rate is the linear one: the row's holds is n/a."""
    df = runs([(4, 1, "none", [60, 61, 59]), (4, 2, "none", [61, 62.2, 60.1]), (4, 16, "none", [50, 51.5, 49])])
    for gpus in (1, 2, 16):
        for seed in range(3):
            run_dir = tmp_path / f"w{gpus}-s{seed}"
            run_dir.mkdir()
            (run_dir / "config.json").write_text(json.dumps(
                {"lr": {"base": 0.1, "base_batch": 8}, "resolved": {"global_batch": 4 * gpus}}))
            df.loc[(df["gpus"] == gpus) & (df["seed"] == seed), "path"] = str(run_dir)
    table = orderings(df, rf.load_reference()).set_index("workers")
    assert (table.loc[2, "verdict"], table.loc[2, "holds"]) == ("equivalent", "n/a")
    assert (table.loc[16, "verdict"], table.loc[16, "holds"]) == ("worse", "yes")


def test_the_findings_fail_on_runs_that_contradict_them():
    df = runs([(4, 1, "none", [50, 51, 49]), (4, 32, "none", [60, 61.3, 59]),
               (5, 1, "none", [62, 63, 61]), (5, 32, "none", [58, 59, 57]),
               (8, 16, "gradual-1", [61.5, 63, 62]), (8, 32, "gradual-1", [52, 53.4, 51])])
    table = orderings(df, rf.load_reference())
    got = list(zip(table["finding"], table["workers"], table["verdict"], table["holds"]))
    assert got == [("naive_degrades", 32, "better", "no"),
                   ("warmup_matches_baseline", 16, "equivalent", "yes"),
                   ("warmup_not_worse", 32, "worse", "no"),
                   ("warmup_matches_baseline", 32, "worse", "no")], got
    assert table["thesis_difference"].iloc[1] == pytest.approx(74.736 - 75.028)


def test_one_seed_gives_no_interval_and_an_inconclusive_verdict():
    df = runs([(5, 1, "none", [62]), (5, 32, "none", [58]), (6, 32, "stepping-1", [60])])
    table = orderings(df, rf.load_reference())
    assert set(table["verdict"]) == {"inconclusive"} and table["ci_low"].isna().all()


def test_experiment_12_compares_each_optimizer_and_worker_count_with_the_baseline_and_not_the_sweep():
    base = runs([(5, 1, "none", [77.0, 76.0, 78.0])])
    def group(optimizer, workers, tops, name=None):
        g = runs([(12, workers, "gradual-4", tops)])
        g["optimizer"] = optimizer
        # the study's runs are <optimizer>-w<workers>-s<seed>; the sweep's (one seed, another rate) its own name
        g["run"] = name or g["seed"].map(lambda seed: f"{optimizer}-w{workers}-s{seed}")
        g["path"] = g["path"] + "-" + optimizer + (name or "")
        return g

    study = pd.concat([group("sgd", 32, [76.5, 77.0, 77.5]), group("sgd", 256, [60.0, 62.0, 61.0]),
                       group("lars", 256, [77.2, 76.1, 77.9]), group("lars", 128, [30.0], name="lars-base2-s0")])
    v = orderings(pd.concat([base, study], ignore_index=True), rf.load_reference())
    v = v[v["experiment"] == 12]
    assert list(zip(v["optimizer"], v["workers"])) == [("sgd", 32), ("sgd", 256), ("lars", 256)]  # no sweep row
    assert list(v["verdict"]) == ["equivalent", "worse", "equivalent"]
    assert set(v["finding"]) == {"large_batch_matches_baseline"} and v["thesis_difference"].isna().all()
    assert list(v["holds"]) == ["yes", "no", "yes"] and set(v["against"]) == {"exp 5, 1 worker"}


def test_runs_of_different_configs_are_not_compared():
    df = runs([(5, 1, "none", [62, 63, 61]), (6, 32, "stepping-1", [61.5, 62.5, 60.5])])
    df["fingerprint"] = "aaa"
    df.loc[df["path"].str.endswith("-s2") & (df["exp"] == 6), "fingerprint"] = "bbb"
    row = orderings(df, rf.load_reference()).iloc[0]
    assert row["verdict"] == "inconclusive" and "configs differ" in row["method"]


def test_runs_of_other_numerics_are_compared_among_themselves():
    fp32 = runs([(4, 1, "none", [60, 61, 59]), (4, 32, "none", [40, 41, 39])])
    bf16 = runs([(4, 1, "none", [58, 59, 57]), (4, 32, "none", [57, 58, 56])], numerics="bf16+cl")
    table = orderings(pd.concat([fp32, bf16], ignore_index=True), rf.load_reference()).set_index("numerics")
    assert len(table) == 2 and (table["n"] == 3).all() and (table["n_against"] == 3).all()
    assert table.loc["fp32", "difference"] == pytest.approx(-20.0) and table.loc["fp32", "verdict"] == "worse"
    assert table.loc["bf16+cl", "difference"] == pytest.approx(-1.0)  # not -10.5, the two numerics pooled


def test_seed_summary_groups_runs_by_name_without_the_seed():
    from analysis.experiments.pilots import seed_summary

    rows = []
    for run, top1, loss in [("base-w1-s0", 70.0, 1.0), ("base-w1-s1", 74.0, 0.8), ("wide-w32-s0", 60.0, 1.5)]:
        path = f"runs/e/{run}"
        rows.append(dict(kind="run", experiment="e", run=run, path=path, status="completed", best_val_top1=top1))
        rows += [dict(kind="epoch", path=path, epoch=0, train_loss=9.0), dict(kind="epoch", path=path, epoch=1,
                                                                               train_loss=loss)]
    rows.append(dict(kind="run", experiment="e", run="base-w1-s2", path="runs/e/base-w1-s2", status="running",
                     best_val_top1=10.0))  # unfinished: left out
    table = seed_summary(pd.DataFrame(rows)).set_index("configuration")
    assert table.loc["e/base-w1"].tolist() == [2, 72.0, pytest.approx(2.83), 0.9]
    assert table.loc["e/wide-w32", "seeds"] == 1 and math.isnan(table.loc["e/wide-w32", "best_top1_sd"])


# ---- the family-wise view: Holm's correction over each finding's rows ------------------------------------------------
def test_holm_adjusts_a_hand_computed_example():
    # sorted 0.01, 0.03, 0.04 of 3: x3 = 0.03, x2 = 0.06, x1 = 0.04 -> 0.06 (never below the one before)
    assert holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert holm([0.5, math.nan]) == pytest.approx([1.0, 1.0])  # a row with no interval counts, as p = 1
    assert holm([]) == []


def test_the_claims_p_value_agrees_with_the_90_percent_interval():
    a, b = pd.Series([61.0, 63.0, 62.0, 62.5]), pd.Series([61.5, 62.0, 61.0, 62.5])
    for paired in (True, False):
        got = interval(a, b, paired)
        for margin in (0.5, 1.0, 2.0, 3.0):
            p = claim_p("equivalent", a, b, paired, margin)
            assert (p < 0.05) == (verdict(got["ci_low"], got["ci_high"], margin) == "equivalent")
            assert (claim_p("not worse", a, b, paired, margin) < 0.05) == (got["ci_low"] > -margin)
    low = pd.Series([50.0, 51.0, 49.5])
    assert claim_p("worse", low, b.iloc[:3], False, 2.0) < 0.05  # worse beyond -2


def test_holm_keeps_a_row_only_where_its_adjusted_p_stays_below_5_percent():
    rows = [dict(finding="f", holds="yes", p=0.01), dict(finding="f", holds="yes", p=0.03),
            dict(finding="f", holds="no", p=0.9), dict(finding="f", holds="n/a", p=0.001),
            dict(finding="g", holds="yes", p=0.04)]
    got = with_holm(rows)
    assert [r["holds_holm"] for r in got] == ["yes", "undecided", "no", "n/a", "yes"]
    assert got[0]["p_holm"] == pytest.approx(0.03) and got[1]["p_holm"] == pytest.approx(0.06)  # 3 rows claim


def test_a_row_that_gained_seeds_after_a_look_is_flagged_with_its_declared_interval(tmp_path):
    (tmp_path / "machine.toml").write_text('label = "m"\n[look]\nat = "t"\n'
                                           'declared = ["05/w1-s[0-2]", "06/w32-s[0-2]"]\n'
                                           'added = ["05/w1-s[3-4]", "06/w32-s[3-4]"]\n')
    df = runs([(5, 1, "none", [62, 63, 61, 62.5, 62]), (6, 32, "stepping-1", [61.5, 62.5, 60.6, 62, 61.8]),
               (6, 16, "stepping-1", [61.5, 62.5, 60.6])])
    df["path"] = str(tmp_path) + "/" + df["path"].str.replace(r"runs/(\d+)/w(\d+)-.*-fp32-", r"\1/w\2-",
                                                                regex=True)
    look.cache_clear()
    table = orderings(df, rf.load_reference()).set_index("workers")
    assert table.loc[32, "n"] == 5 and table.loc[32, "declared_n"] == 3 and table.loc[32, "declared_n_against"] == 3
    declared = interval(pd.Series([61.5, 62.5, 60.6]), pd.Series([62.0, 63.0, 61.0]), True)
    assert table.loc[32, "declared_ci_low"] == pytest.approx(declared["ci_low"])
    assert table.loc[32, "after_a_look"].startswith("seeds added after a look: declared 3 vs 3")
    assert pd.isna(table.loc[16, "after_a_look"])  # its treated runs were planned after the look: not flagged


# ---- issue 50: the thesis's gradual-against-stepping reading, a family of its own with Holm's line ------------------
def test_the_warmup_schemes_are_compared_gradual_against_stepping_and_longer_against_shorter():
    df = runs([(6, 32, "stepping-4", [61.0, 62.0, 60.5]), (8, 32, "gradual-4", [61.2, 62.1, 60.4]),
               (9, 32, "gradual-8", [58.0, 59.1, 57.5]), (8, 24, "gradual-4", [62.0, 63.0, 61.0])])
    table = orderings(df, rf.load_reference())
    schemes = table[table["finding"] == "warmup_schemes_alike"]
    got = list(zip(schemes["experiment"], schemes["workers"], schemes["against"], schemes["verdict"],
                   schemes["holds"]))
    assert got == [(8, 32, "exp 6, 32 workers (stepping warm-up)", "equivalent", "yes"),
                   (9, 32, "exp 8, 32 workers (gradual warm-up, the shorter)", "worse", "no")], got
    assert schemes["p_holm"].notna().all()  # one family: Holm's correction over its two rows
    assert schemes["thesis_difference"].iloc[0] == pytest.approx(rf_top1(8, 32) - rf_top1(6, 32))


def rf_top1(exp: int, gpus: int) -> float:
    ref = rf.load_reference().dropna(subset=["top1"])
    rows = ref[(ref["experiment"] == exp) & (ref["gpus"] == gpus)]
    if exp == 6:
        rows = rows[rows["framework"] == "horovod+pytorch"]
    return float(rows["top1"].mean())


# ---- experiment 12's diverged runs (issue 50): a reading rule, added after its runs -------------------------------
@pytest.mark.parametrize("losses, expected", [
    ([3.9, 2.0, 0.9], False),           # trained: its last loss far below the first epoch's
    ([3.9, 3.5, 3.3], True),            # stuck near an untrained model's loss: above 3/4 of the first
    ([3.9, 2.0, float("nan")], True),   # non-finite
    ([3.9, 90.0, 2.9], False),          # blew up on the way and came back below 3/4 of the first: it trained
    ([3.9, 2.9251], True), ([3.9, 2.925], False),  # the share's edge: strictly above 3/4
    ([3.9], False), ([], False),        # one epoch or none: nothing to read
])
def test_a_run_diverged_when_its_last_training_loss_is_non_finite_or_above_three_quarters_of_its_first(
        losses, expected):
    from analysis.experiments.large_batch import DIVERGED_SHARE
    from analysis.smoke import diverged

    assert diverged(losses, DIVERGED_SHARE) is expected


def study_group(optimizer, workers, tops, losses):
    """Experiment 12's study runs at one optimizer and worker count; losses: per seed, its training loss by epoch."""
    out = []
    for seed, (top1, by_epoch) in enumerate(zip(tops, losses)):
        name = f"{optimizer}-w{workers}-s{seed}"
        ident = dict(exp=12, gpus=workers, per_gpu_batch=4, global_batch=4 * workers, warmup="gradual-4", seed=seed,
                     scale="local", numerics="fp32", status="completed", path=f"runs/12/{name}", run=name,
                     optimizer=optimizer)
        out.append(dict(ident, kind="run", best_val_top1=top1))
        out += [dict(ident, kind="epoch", epoch=e, val_top1=top1 - 1, train_loss=v) for e, v in enumerate(by_epoch)]
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def test_diverged_runs_are_labelled_left_out_of_the_mean_and_of_the_fails_and_counted_apart():
    from analysis.catalogue import FINDINGS, verdict_table
    from analysis.readings import finding_summary

    trained, stuck, blew_up = [3.9, 2.0, 0.9], [3.9, 3.6, 3.3], [3.9, 90.0, float("nan")]
    base = runs([(5, 1, "none", [77.0, 76.0, 78.0])])
    study = [study_group("sgd", 32, [76.5, 77.0, 77.5], [trained] * 3),
             study_group("sgd", 256, [8.0, 11.0, 6.0], [stuck] * 3),                    # all three diverged
             study_group("lars", 256, [76.9, 77.1, 12.0], [trained, trained, blew_up]),  # one of three diverged
             study_group("radam", 256, [60.0, 62.0, 61.0], [trained] * 3)]               # trained, and worse
    v = orderings(pd.concat([base, *study], ignore_index=True), rf.load_reference())
    v = v[v["experiment"] == 12].set_index(["optimizer", "workers"])
    assert list(v["diverged"]) == [0, 3, 1, 0]
    sgd = v.loc[("sgd", 256)]  # nothing left to average: no difference, no verdict, no claim
    assert (sgd["n"], sgd["verdict"], sgd["holds"], sgd["holds_holm"]) == (0, "diverged", "diverged", "diverged")
    assert math.isnan(sgd["difference"])
    lars = v.loc[("lars", 256)]  # the mean of the two runs that trained
    assert lars["n"] == 2 and lars["difference"] == pytest.approx(77.0 - 77.0) and lars["verdict"] == "equivalent"
    assert v.loc[("radam", 256), "holds"] == "no"
    # Holm's family: the three rows that claim something, not the diverged one
    assert v["p_holm"].notna().sum() == 3
    line = finding_summary(v.reset_index(), FINDINGS)[0]
    assert "3 of 3 rows support it" not in line and "of 3 rows support it" in line
    assert "fails in 1 (exp 12 radam at 256)" in line and "diverged in 1 (exp 12 sgd at 256)" in line
    assert "over its 3 rows" in line
    flags = list(verdict_table(v.reset_index())["flag"])
    assert flags[1].startswith("diverged: 3 of 3 runs left out") and flags[2].startswith("diverged: 1 of 3")
    assert flags[0] == flags[3] == ""


def test_a_findings_margin_is_its_measures_own_where_declared_else_the_scales_points():
    side = Runs(1, 1)
    loss = Measure("loss", "nats", "final_val_loss", "final_val_loss", higher_is_better=False, margins={"local": 0.05})
    declared = {"local": {"points": 2.0}, "gpu": {"points": 1.0}}
    own, thesis = (Finding("f", "", "not worse", (Comparison(side, side, ""),), measure=m) for m in (loss, BEST_TOP1))
    assert (fd.margin_of(own, "local", declared), fd.margin_of(thesis, "gpu", declared)) == (0.05, 1.0)
    assert math.isnan(fd.margin_of(own, "gpu", declared))  # no margin declared there: its rows are inconclusive


def test_a_lower_is_better_measure_is_compared_turned_and_given_back_in_its_own_direction():
    loss = Measure("loss", "nats", "l", "l", higher_is_better=False)
    row = {"difference": -0.3, "ci_low": -0.5, "ci_high": -0.1, "final_difference": -0.2, "final_ci_low": -0.4,
           "final_ci_high": 0.0, "verdict": "worse"}  # compared negated: the treated's loss 0.3 higher
    assert fd.as_measured(row, loss) == {**row, "difference": 0.3, "ci_low": 0.1, "ci_high": 0.5,
                                         "final_difference": 0.2, "final_ci_low": -0.0, "final_ci_high": 0.4}
    runs = pd.DataFrame({"seed": [0, 1], "l": [2.0, 3.0]})
    assert fd.oriented(runs, "l", loss).tolist() == [-2.0, -3.0]
