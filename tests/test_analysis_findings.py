"""The thesis's three quality findings checked on runs: differences, standard errors over seeds, verdicts."""
import math

import pandas as pd
import pytest

from analysis import reference as rf
from analysis.findings import difference, orderings


def runs(rows):
    """rows: (exp, workers, warmup, [best top-1 of each seed]) at per-worker batch 4."""
    out = []
    for exp, gpus, warmup, tops in rows:
        for top1 in tops:
            out.append(dict(kind="run", exp=exp, gpus=gpus, per_gpu_batch=4, global_batch=4 * gpus, warmup=warmup,
                            scale="local", status="completed", best_val_top1=top1))
    return pd.DataFrame(out)


def test_difference_and_its_standard_error():
    diff, se = difference(pd.Series([3.0, 5.0]), pd.Series([1.0, 1.0, 1.0]))
    assert diff == 3.0 and se == pytest.approx(math.sqrt(2.0 / 2 + 0.0 / 3))
    assert math.isnan(difference(pd.Series([3.0]), pd.Series([1.0, 2.0]))[1])


def test_the_thesis_findings_hold_on_runs_built_to_show_them():
    df = runs([(4, 1, "none", [60, 61, 59]), (4, 2, "none", [61, 62, 60]), (4, 32, "none", [40, 41, 39]),
               (5, 1, "none", [62, 63, 61]), (5, 32, "none", [55, 56, 54]),
               (6, 32, "stepping-1", [61.5, 62.5, 60.5])])
    table = orderings(df, rf.load_reference()).set_index("finding")
    naive = table.filter(like="naive", axis=0).iloc[0]
    assert naive["verdict"] == "holds" and naive["difference"] == pytest.approx(-20.0)
    assert naive["thesis_difference"] == pytest.approx(69.006 - 73.286)
    beats = table.filter(like="beats", axis=0).iloc[0]
    assert beats["verdict"] == "holds" and beats["difference"] == pytest.approx(6.5)
    assert beats["thesis_difference"] == pytest.approx(74.662 - 73.078)
    near = table.filter(like="within noise of 1 worker", axis=0).iloc[0]
    assert near.name.endswith("exp 6 (stepping-1, 32 workers) vs exp 5 (1 worker)")
    assert near["verdict"] == "holds" and near["difference"] == pytest.approx(-0.5)


def test_the_findings_fail_on_runs_that_contradict_them():
    df = runs([(4, 1, "none", [50, 51, 49]), (4, 32, "none", [60, 61, 59]),
               (5, 1, "none", [62, 63, 61]), (5, 32, "none", [58, 59, 57]),
               (8, 16, "gradual-1", [61.5, 63, 62]), (8, 32, "gradual-1", [52, 53, 51])])
    verdicts = orderings(df, rf.load_reference()).set_index("finding")["verdict"]
    assert list(verdicts) == ["does not hold", "holds", "does not hold", "does not hold"], verdicts
    assert verdicts.index[1].endswith("exp 8 (gradual-1, 16 workers) vs exp 5 (1 worker)")
    thesis = orderings(df, rf.load_reference())["thesis_difference"]
    assert thesis.iloc[1] == pytest.approx(74.736 - 75.028)


def test_one_seed_gives_no_verdict_on_noise():
    df = runs([(5, 1, "none", [62]), (5, 32, "none", [58]), (6, 32, "stepping-1", [60])])
    assert set(orderings(df, rf.load_reference())["verdict"]) == {"no noise estimate (fewer than 2 seeds)"}


def test_seed_summary_groups_runs_by_name_without_the_seed():
    from analysis.findings import seed_summary

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
