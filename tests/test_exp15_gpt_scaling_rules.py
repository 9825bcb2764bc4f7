"""Experiment 15 (issue 66): its plan as declared (15 configurations, one token budget, the rules' rates) and its
plug-in (analysis/experiments/gpt_scaling_rules.py) read on tiny real runs the trainer wrote: the final validation
loss per rule and worker count, the differences from the 1-worker baseline in loss, the verdicts against the
declared margin, a diverged configuration failing its rule, Holm's correction over each rule's rows."""
import math
import statistics
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from analysis import catalogue
from analysis.experiments import gpt_scaling_rules as e15
from analysis.reference import load_reference
from analysis.runs import load_runs, load_study
from contract.plan import study_plan
from tests.helpers import REPO, records, train_in_process, write_config
from tests.test_gpt_trainer import tiny_corpus

EXPERIMENT = REPO / "experiments" / "15_gpt_scaling_rules"


# ---- the plan ------------------------------------------------------------------------------------------------------
def test_the_local_plan_is_the_declared_one_15_configurations_of_3_seeds_on_one_token_budget():
    runs = study_plan(EXPERIMENT, "local", False, None, []).runs
    assert len(runs) == 45 and [runs[i].name for i in (0, 3, 6, 9)] == ["base0.00015-s0", "base0.0006-s0", "w1-s0",
                                                                          "none-w32-s0"]
    rates = {}
    for run in runs:
        cfg = run.cfg
        tokens = cfg.train.epochs * cfg.data.train_tokens
        assert (tokens, cfg.data.val_tokens, cfg.train.per_worker_batch) == (1_572_864, 131_072, 2)
        assert (cfg.optim.name, cfg.optim.weight_decay, cfg.optim.beta2, cfg.model.name) == ("adamw", 0.1, 0.95,
                                                                                               "gpt_local")
        assert (cfg.lr.warmup, cfg.lr.warmup_epochs, cfg.lr.decay, cfg.lr.power) == ("goyal", 1, "poly", 1.0)
        rates[run.name.rsplit("-s", 1)[0]] = cfg.lr_policy().target
        assert cfg.lr_policy().start == pytest.approx(rates[run.name.rsplit("-s", 1)[0]] if run.workers == 1
                                                      else 3e-4)  # a warm-up starts from the 1-worker rate
    assert (rates["w1"], rates["base0.00015"], rates["base0.0006"]) == pytest.approx((3e-4, 1.5e-4, 6e-4))
    for workers in (4, 8, 16, 32):
        assert rates[f"none-w{workers}"] == pytest.approx(3e-4)
        assert rates[f"linear-w{workers}"] == pytest.approx(3e-4 * workers)
        assert rates[f"sqrt-w{workers}"] == pytest.approx(3e-4 * math.sqrt(workers))


def test_the_declaration_names_the_margin_the_plug_in_reads():
    declared = (REPO / e15.DECLARED).read_text()
    assert "MARGIN: 0.05 nats" in declared and e15.MARGINS == {"local": 0.05}


# ---- the plug-in on tiny real runs ---------------------------------------------------------------------------------
# a rate no model survives (its loss is not finite at once), and the rate check's neighbour at twice the base
OWN_SETTINGS = {"none-w4": {"lr": {"base": 1e30}}, "base0.002": {"lr": {"base": 2e-3}}}


def tiny_study(tmp_path: Path) -> Path:
    """Experiment 15's runs in miniature, written by the trainer: the baseline (w1), its rate check at twice the
    base, and sqrt and linear at 4 workers on seeds 0 and 1, and none at 4 workers at a rate that diverges, one
    epoch of the tiny corpus."""
    corpus = tiny_corpus(tmp_path)
    config = write_config(tmp_path / "15_gpt_scaling_rules.toml", {
        "model": {"name": "gpt_local"}, "data": {"kind": "tokens", "path": corpus},
        "train": {"per_worker_batch": 2, "backend": "emulated", "epochs": 1},
        "optim": {"name": "adamw", "weight_decay": 0.1}, "lr": {"base": 1e-3, "base_batch": 2}})
    for name, workers, scaling, seeds in (("w1", 1, "none", (0, 1)), ("base0.002", 1, "none", (0, 1)),
                                          ("sqrt-w4", 4, "sqrt", (0, 1)), ("linear-w4", 4, "linear", (0, 1)),
                                          ("none-w4", 4, "none", (0,))):
        for seed in seeds:
            extra = [f"{section}.{key}={value}" for section, values in OWN_SETTINGS.get(name, {}).items()
                     for key, value in values.items()]
            sets = [f"train.workers={workers}", f"lr.scaling={scaling}", f"train.seed={seed}", *extra]
            code = train_in_process(config, tmp_path / "runs", f"{name}-s{seed}", *(x for s in sets
                                                                                   for x in ("--set", s)))
            assert code == (3 if name == "none-w4" else 0), name  # 3: diverged
    return tmp_path / "runs"


def loss_verdict(low: float, high: float, margin: float = 0.05) -> str:
    """The declared verdict of a loss difference's interval: above 0 is worse."""
    if high < -margin:
        return "better"
    if low > margin:
        return "worse"
    return "equivalent" if -margin < low and high < margin else "inconclusive"


def test_the_plug_in_reads_tiny_runs_into_losses_verdicts_and_holms_line(tmp_path):
    root = tiny_study(tmp_path)
    df = load_runs(root)
    final = {name: records(root / "15_gpt_scaling_rules" / f"{name}", "epoch")[-1]["val_loss"]
             for name in ("w1-s0", "w1-s1", "base0.002-s0", "base0.002-s1", "sqrt-w4-s0", "sqrt-w4-s1")}
    baseline = (final["w1-s0"] + final["w1-s1"]) / 2
    from studies.progress import epoch_words, summary  # what a study says of these runs: loss, never top-1

    sqrt_dir = root / "15_gpt_scaling_rules" / "sqrt-w4-s0"
    assert summary(sqrt_dir) == f"completed: final val loss {final['sqrt-w4-s0']:.3f}"
    assert epoch_words(records(sqrt_dir, "epoch")[-1], "gpt_local") == f"val loss {final['sqrt-w4-s0']:.3f}"
    assert summary(root / "15_gpt_scaling_rules" / "none-w4-s0").startswith("diverged")
    from analysis.compare import report_comparison  # the closing table's measure too

    closing = report_comparison(load_study(root)).set_index("configuration")
    sqrt_losses = [final["sqrt-w4-s0"], final["sqrt-w4-s1"]]
    assert closing.loc["sqrt-w4", "measure"] == "final val loss"
    assert closing.loc["sqrt-w4", "this machine"] == (f"{statistics.mean(sqrt_losses):.2f} ± "
                                                      f"{statistics.stdev(sqrt_losses):.2f} (n=2)")
    assert closing.loc["none-w4", "this machine"] == "-"  # its one run diverged: counted elsewhere, never averaged

    table = e15.loss_table(df).set_index(["rule", "gpus"])
    assert table.loc[("baseline", 1), "final_val_loss_mean"] == pytest.approx(baseline)
    assert table.loc[("none", 4), ["n", "diverged"]].tolist() == [0, 1]
    sqrt_mean = (final["sqrt-w4-s0"] + final["sqrt-w4-s1"]) / 2
    assert table.loc[("sqrt", 4), "minus_baseline"] == pytest.approx(sqrt_mean - baseline)

    (check,) = e15.rate_check(df).itertuples()
    neighbour = (final["base0.002-s0"] + final["base0.002-s1"]) / 2
    assert (check.lr, check.n, check.difference, check.method) == (2e-3, 2, pytest.approx(neighbour - baseline),
                                                                   "paired by seed")
    assert check.verdict == loss_verdict(check.ci_low, check.ci_high)
    assert check.provisional == (check.verdict == "better")  # declared: the neighbour better beyond the margin

    inputs = catalogue.inputs(df, load_reference())
    v = inputs.verdicts[inputs.verdicts["experiment"] == 15].set_index("finding")  # orderings.csv's rows
    sqrt = v.loc[e15.finding_name("sqrt")]
    differences = pd.Series([final["sqrt-w4-s0"] - final["w1-s0"], final["sqrt-w4-s1"] - final["w1-s1"]])
    half = stats.t.ppf(0.95, 1) * differences.std(ddof=1) / math.sqrt(2)  # paired by seed, in loss
    assert (sqrt.difference, sqrt.method, sqrt.unit) == (pytest.approx(differences.mean()), "paired by seed", "nats")
    assert (sqrt.ci_low, sqrt.ci_high) == (pytest.approx(differences.mean() - half),
                                           pytest.approx(differences.mean() + half))
    assert (sqrt.final_difference, sqrt.final_ci_high) == (pytest.approx(sqrt.difference), pytest.approx(sqrt.ci_high))
    expected = "yes" if sqrt.ci_high < 0.05 else ("no" if sqrt.ci_low > 0.05 else "undecided")
    assert (sqrt.margin, sqrt.holds) == (0.05, expected)  # not worse: the loss interval's high end below +margin
    assert sqrt.verdict == loss_verdict(sqrt.ci_low, sqrt.ci_high)
    assert math.isnan(sqrt.thesis_difference)  # the thesis printed top-1 alone
    none = v.loc[e15.finding_name("none")]
    assert (none.verdict, none.holds, none.holds_holm, none.diverged) == ("diverged", "no", "no", 1)

    reach = e15.rule_reach(inputs.verdicts).set_index("rule")  # the declared reach, read from these rows
    assert (reach.loc["none", "reach"], reach.loc["none", "stops_at"]) == (0, 4)  # diverged at its only W
    assert reach.loc["sqrt", "reach"] == (4 if sqrt.holds_holm == "yes" else 0)

    shown = catalogue.verdict_table(inputs.verdicts)  # orderings.md's
    mine = shown[shown["finding"].str.startswith("adamw_")]
    assert len(mine) == 3 and mine["seeds"].tolist()[0].endswith("vs 2 seeds")
    sqrt_shown = mine[mine["finding"] == e15.finding_name("sqrt")]["difference [90 % interval]"].iloc[0]
    assert sqrt_shown == f"{sqrt.difference:+.3f} [{sqrt.ci_low:+.3f}, {sqrt.ci_high:+.3f}] nats"
    notes = catalogue.ordering_notes(inputs, inputs.verdicts)
    assert any("adamw_none_keeps_loss (local scale): does not hold" in line and "After Holm's correction over its 1 "
               "rows: 0 of 1 support it" in line for line in notes)
    assert any("0.05 nats" in line and "lower is better" in line for line in notes)
    loss_notes = e15.loss_notes(inputs, e15.loss_table(df))
    assert any(line.startswith("The baseline's rate checked (local scale, fp32") and "lr 0.002: " in line
               for line in loss_notes)
    assert e15.final_loss_figure(inputs, e15.FIGURES[0]) is not None


@pytest.mark.parametrize("holds_holm, reach, stops_at", [
    (["yes", "yes", "undecided", "yes"], 8, 16),  # a row that holds past the first that does not extends nothing
    (["yes", "yes", "yes", "yes"], 32, math.nan),
    (["no", "yes", "yes", "yes"], 0, 4),
])
def test_a_rules_reach_is_the_largest_w_up_to_which_every_row_holds_after_holm(holds_holm, reach, stops_at):
    verdicts = pd.DataFrame({"scale": "local", "numerics": "fp32", "finding": e15.finding_name("linear"),
                             "experiment": 15, "workers": [4, 8, 16, 32], "holds_holm": holds_holm})
    (row,) = e15.rule_reach(verdicts).itertuples()
    assert (row.rule, row.reach) == ("linear", reach)
    assert row.stops_at == stops_at or (math.isnan(stops_at) and math.isnan(row.stops_at))
    line = e15.reach_lines(verdicts)[0]
    assert (f"up to {reach} workers" if reach else "none (not at 4 workers, its smallest)") in line
