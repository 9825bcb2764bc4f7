"""Experiment 13's reading (analysis/experiments/steps_to_target.py): steps to a target from epoch records, the choice of
rate, the fit of S = S_min (1 + B_noise / B) and its seed bootstrap, the regimes, the noise-scale sentence, the
report's entries with and without runs, and the declaration committed before every run."""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from analysis.experiments import steps_to_target as st
from tests.helpers import REPO, started_before
from contract.manifest import VERSION

DECLARED = "experiments/13_steps_to_target/declared_2026-11-25-exp13.txt"


def epochs(values, images=8000):
    return pd.DataFrame({"epoch": range(len(values)), "val_top1": values, "images": [images] * len(values)})


def test_steps_to_target_are_the_first_epoch_reaching_it_in_whole_epochs_without_interpolation():
    reach = st.first_reach(epochs([10.0, 40.0, 50.0, 60.0]), 512, 50.0)  # ceil(8000 / 512) = 16 steps an epoch
    assert reach == {"reached": True, "epoch": 2, "steps": 48.0, "examples": 48.0 * 512, "epoch_steps": 16.0}
    missed = st.first_reach(epochs([10.0, 49.99]), 512, 50.0)
    assert missed["reached"] is False and math.isnan(missed["steps"]) and missed["epoch_steps"] == 16.0


def test_the_target_is_read_from_the_declared_config():
    assert st.declared_target("local") == 50.0 and st.declared_target("thesis") == 60.0


def test_the_fit_recovers_a_known_curve():
    batches = [4 * 2 ** k for k in range(10)]
    s_min, b_noise = st.fit_noise_model(batches, [300 * (1 + 700 / b) for b in batches])
    assert s_min == pytest.approx(300, rel=1e-4) and b_noise == pytest.approx(700, rel=1e-4)
    assert all(math.isnan(x) for x in st.fit_noise_model([64, 64], [10, 11]))  # one batch places nothing
    s_min, b_noise = st.fit_noise_model(batches, [1e6 / b for b in batches])  # perfect scaling throughout
    assert math.isnan(s_min) and b_noise == math.inf
    assert st.noise_sentence(b_noise, (math.inf, math.inf), pd.DataFrame()).startswith("The fit does not place")


def study_frame(noise: float = 0.0, seeds: int = 3, missing: int | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for k in range(8):
        b = 4 * 2 ** k
        for seed in range(1, seeds + 1):
            steps = 300 * (1 + 700 / b) * math.exp(noise * rng.standard_normal())
            reached = not (missing == b and seed == 1)
            rows.append(dict(scale="local", optimizer="sgd", workers=b // 4, global_batch=b, seed=seed,
                             tuning=False, reached=reached, steps=steps if reached else math.nan, epoch_steps=1.0))
    return pd.DataFrame(rows)


def test_the_bootstrap_interval_holds_the_truth_is_seeded_and_collapses_without_noise():
    noisy = st.bootstrap(study_frame(0.1), draws=200)
    assert noisy["b_noise"][0] < 700 < noisy["b_noise"][1] and noisy == st.bootstrap(study_frame(0.1), draws=200)
    exact = st.bootstrap(study_frame(0.0), draws=20)
    assert exact["b_noise"] == pytest.approx((700, 700), rel=1e-3)
    assert exact["ratios"][4] == pytest.approx(((1 + 700 / 8) / (1 + 700 / 4),) * 2)


def test_an_interval_end_among_unbounded_draws_is_unbounded_not_nan():
    """Draws whose fit found no bend have B_noise = inf; an end that falls among them is inf (the report's
    "unbounded"), never NaN; ends among finite draws are numpy's linear percentiles."""
    draws = [100.0, 200.0, 300.0, math.inf, math.inf]
    assert st.percentile_interval(draws) == (pytest.approx(120.0), math.inf)  # 5 %: 100 + 0.2 x (200 - 100)
    assert st.percentile_interval([100.0, math.inf]) == (math.inf, math.inf)  # 5 %: 0.05 of the way to inf
    assert st.percentile_interval([1.0, 2.0, 3.0]) == (pytest.approx(1.1), pytest.approx(2.9))
    assert all(math.isnan(x) for x in st.percentile_interval([]))


def test_a_doublings_interval_depends_only_on_its_two_batches_seeds():
    """Adding a run at another batch must not move an interval it takes no part in (each batch's resamples are
    drawn from a stream of its own), so a redraw after new runs changes only what the new runs touch."""
    study = study_frame(0.1)
    fewer = study[study["global_batch"] <= 64]
    assert st.bootstrap(study, draws=200)["ratios"][16] == st.bootstrap(fewer, draws=200)["ratios"][16]


def test_a_batch_where_a_seed_did_not_reach_the_target_is_left_out_of_the_fit():
    study = study_frame(0.0, missing=64)
    assert 64 not in set(st.fitted_points(study)["global_batch"])
    points = st.curve_points(study)
    row = points[points["global_batch"] == 64].iloc[0]
    assert (row["seeds"], row["reached"]) == (3, 2) and math.isnan(row["steps"])


def test_the_regimes_follow_the_declared_ratios():
    assert st.regimes({4: 0.5, 8: 0.55, 16: 0.7, 32: 0.95, 64: 1.0}) == {"perfect_until": 16, "flat_from": 32}
    assert st.regimes({4: 0.5, 8: 0.52}) == {"perfect_until": None, "flat_from": None}


def test_selection_takes_the_fewest_steps_then_the_lower_rate_and_flags_an_edge():
    rows = [dict(scale="local", optimizer="sgd", workers=8, global_batch=32, base=b, tuning=True, reached=r,
                 steps=s, best_top1=t) for b, r, s, t in
            [(0.025, True, 900.0, 55.0), (0.05, True, 600.0, 56.0), (0.1, True, 600.0, 58.0)]]
    rows += [dict(scale="local", optimizer="lamb", workers=8, global_batch=32, base=b, tuning=True, reached=False,
                  steps=math.nan, best_top1=t) for b, t in [(0.0025, 30.0), (0.005, 45.0), (0.01, 20.0)]]
    chosen = st.selection(pd.DataFrame(rows)).set_index("optimizer")
    assert chosen.loc["sgd", "chosen_base"] == 0.05 and chosen.loc["sgd", "at_edge"] == ""
    assert chosen.loc["lamb", "chosen_base"] == 0.005 and not chosen.loc["lamb", "reached"]
    rows[0]["steps"] = 500.0
    assert st.selection(pd.DataFrame(rows)).set_index("optimizer").loc["sgd", "at_edge"] == "low"


def test_the_regime_words_stay_within_the_intervals():
    ratios = {4: 0.5, 8: 0.55, 16: 0.7, 32: 0.95}
    tight = {4: (0.45, 0.55), 8: (0.5, 0.58), 16: (0.65, 0.75), 32: (0.92, 0.97)}
    said = st.regime_words(16, 0.6, "perfect scaling ends", ratios, tight)
    assert said.startswith("perfect scaling ends at 16 images: the doubling to 32 takes 0.70 of the steps")
    assert "could be earlier" not in said and "could be later" not in said
    loose = {**tight, 8: (0.5, 0.66), 16: (0.58, 0.8)}
    said = st.regime_words(16, 0.6, "perfect scaling ends", ratios, loose)
    assert "could be earlier: the doublings from 8 reach above it" in said and "could be later" in said
    assert st.regime_words(None, 0.9, "steps stop falling", {4: 0.5, 8: 0.8}, {4: (0.4, 0.6), 8: (0.7, 0.95)}) == (
        "no measured doubling saved less than 10 % of the steps (by the intervals the doublings from 8 might)")


def test_a_curve_that_falls_in_proportion_again_after_the_regime_says_where():
    """The first-crossing rule reads a regime where a doubling first crosses its line; a later doubling whose whole
    interval lies back below the line is named, so the words do not imply the curve stayed flat after it."""
    ratios = {4: 0.55, 8: 0.64, 16: 0.45, 32: 0.65, 64: 0.49}
    intervals = {4: (0.52, 0.57), 8: (0.61, 0.69), 16: (0.39, 0.53), 32: (0.56, 0.74), 64: (0.43, 0.55)}
    said = st.regime_words(8, 0.6, "perfect scaling ends", ratios, intervals)
    assert said.endswith("; after it, doublings save more than 40 % again, their whole intervals below the line: "
                         "from 16, 64"), said
    tight = {b: (r - 0.01, r + 0.01) for b, r in {4: 0.5, 8: 0.7, 16: 0.8}.items()}
    assert "again" not in st.regime_words(8, 0.6, "perfect scaling ends", {4: 0.5, 8: 0.7, 16: 0.8}, tight)


def test_a_regime_whose_crossing_lies_within_the_epoch_resolution_says_so():
    """Steps are counted in whole epochs: a seed that reached the target at S steps crossed it after S - (one
    epoch's steps). Where that range of the doubling's ratio straddles the line, the words say so; a low interval
    end that rounds to the line is printed with a third decimal, so '0.60' never reads as the line itself."""
    seeds = pd.DataFrame([dict(scale="local", optimizer="lamb", workers=b // 4, global_batch=b, seed=k + 1,
                               tuning=False, reached=True, steps=float(steps), epoch_steps=float(epoch))
                          for b, epoch, per_seed in ((8, 1000, [8000] * 3), (16, 500, [4500, 5500, 5500]))
                          for k, steps in enumerate(per_seed)])
    [(b, (low, high))] = st.epoch_resolution(seeds).items()
    gm16 = math.exp(np.mean(np.log([4500, 5500, 5500])))
    gm16_low = math.exp(np.mean(np.log([4000, 5000, 5000])))
    assert b == 8 and low == pytest.approx(gm16_low / 8000) and high == pytest.approx(gm16 / 7000)
    ratios, intervals = {8: gm16 / 8000}, {8: (0.6014, 0.6875)}
    said = st.regime_words(8, 0.6, "perfect scaling ends", ratios, intervals, st.epoch_resolution(seeds))
    assert "(90 % interval 0.601-0.69;" in said
    assert f"counted in whole epochs, the ratio could lie anywhere in {low:.2f}-{high:.2f}, across the line" in said
    far = {8: (0.70, 0.80)}
    assert "whole epochs" not in st.regime_words(8, 0.6, "perfect scaling ends", ratios, intervals, far)


def test_the_noise_sentence_says_only_what_the_intervals_support():
    noise = pd.DataFrame({"weights": ["initial"], "b_simple_low": [676.0], "b_simple_high": [2005.0]})
    assert "predicted B_crit within a factor of 10" in st.noise_sentence(1000, (500, 3000), noise)
    assert "did not predict it" in st.noise_sentence(50, (20, 60), noise)
    assert "cannot be told" in st.noise_sentence(150, (60, 400), noise)
    unresolved = pd.DataFrame({"weights": ["final"], "b_simple_low": [1793.0], "b_simple_high": [math.inf]})
    assert "cannot be told" in st.noise_sentence(1000, (500, 3000), unresolved)
    assert "no fitted B_noise" in st.noise_sentence(math.nan, (math.nan, math.nan), noise)


# ---- the report's entries -----------------------------------------------------------------------------------------
def run_rows(exp: int, name: str, batch: int, values, scale: str = "local") -> list[dict]:
    path = f"runs/{exp}/{name}"
    run = dict(kind="run", exp=exp, run=name, path=path, scale=scale, status="completed", global_batch=batch,
               gpus=batch // 4, best_val_top1=max(values))
    return [run] + [dict(kind="epoch", exp=exp, run=name, path=path, epoch=e, val_top1=v, images=8000)
                    for e, v in enumerate(values)]


def synthetic_runs() -> pd.DataFrame:
    rows = []
    for b in (4, 8, 16, 32):
        hit = max(1, int(8 * 4 / b * 8000 / 8000 * 4))  # epochs before the target: fewer as the batch grows
        for seed in (1, 2, 3):
            rows += run_rows(13, f"sgd-w{b // 4}-s{seed}", b, [10.0] * (hit + seed % 2) + [55.0])
        rows += run_rows(13, f"tune-sgd-w{b // 4}-base0.05-s0", b, [10.0] * hit + [52.0])
    rows += run_rows(12, "sgd-w8-s0", 32, [10.0, 20.0, 51.0])
    return pd.DataFrame(rows)


def test_the_report_draws_experiment_13_from_its_runs_and_says_nothing_without_them(tmp_path):
    from analysis import catalogue as ct

    empty = ct.Inputs(df=pd.DataFrame(columns=["kind", "exp"]), ref=pd.DataFrame())
    for entry in [e for e in (*ct.FIGURES, *ct.TABLES) if e.name.startswith("exp13")]:
        assert entry.make(empty, entry) is None  # the committed report without exp 13 runs stays as it was
    assert st.rq5_reading(pd.DataFrame(columns=["kind", "exp"])).startswith("No experiment 13 runs")
    inputs = ct.Inputs(df=synthetic_runs(), ref=pd.DataFrame(), source="Made from test runs.")
    drawn = ct.figure("exp13_steps_to_target").make(inputs, ct.figure("exp13_steps_to_target"))
    assert isinstance(drawn, ct.Drawn)
    table = next(t for t in ct.TABLES if t.name == "exp13_steps_to_target").make(inputs, None)
    assert set(table["source"].str[:6]) == {"exp 13", "exp 12"} and len(table) == 5
    planned = tmp_path / "config.toml"  # the plan of these runs: SGD at 1-8 workers
    planned.write_text("[study]\nextra = [\n" + ",\n".join(
        f'{{ run = "tune-sgd-w{w}-base0.05", "optim.name" = "sgd", "lr.base" = 0.05, "train.workers" = {w} }}'
        for w in (1, 2, 4, 8)) + "\n]\n")
    reading = st.rq5_reading(synthetic_runs(), noise=pd.DataFrame(), config=planned)
    assert "SGD (local scale, target 50 % top-1)" in reading and "Step 1" in reading
    one_seed_short = synthetic_runs()
    one_seed_short = one_seed_short[one_seed_short["run"] != "sgd-w8-s3"]
    reading = st.rq5_reading(one_seed_short, noise=pd.DataFrame(), config=planned)
    assert "SGD (local scale): incomplete: 11 of 12 planned study runs finished; batch 32 still lacks seeds" in reading
    assert "Fitted B_noise" not in reading
    two_short = one_seed_short[one_seed_short["run"] != "sgd-w4-s2"]
    assert "batches 16, 32 still lack seeds" in st.rq5_reading(two_short, noise=pd.DataFrame(), config=planned)


# ---- the declaration precedes every run ---------------------------------------------------------------------------
def test_a_run_that_started_before_the_declaration_is_caught(tmp_path):
    for name, start in (("early", "2026-11-25T01:00:00+00:00"), ("late", "2026-11-26T01:00:00+00:00")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "start": start, "attempts": [{"start": start}]}))
    (tmp_path / "unreadable").mkdir()
    early = started_before(sorted(tmp_path.iterdir()), "2026-11-25T22:00:00+00:00")
    assert [p.rsplit("/", 1)[1] for p in early] == ["early", "unreadable"]


def first_edition_runs():
    """The committed first-edition runs: the second edition's (e2-) are planned by edition2.toml and its decisions,
    and dated by tests/test_exp13_edition2.py."""
    runs = (REPO / "results" / "reference").glob("*/13_steps_to_target/*")
    return sorted(p for p in runs if p.is_dir() and not p.name.startswith(st.SECOND_EDITION_PREFIX))


def test_the_declaration_was_committed_before_every_committed_experiment_13_run_started():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git history here to date the declaration by")
    added = subprocess.run(["git", "log", "--follow", "--diff-filter=A", "--format=%cI", "--", DECLARED], cwd=REPO,
                           capture_output=True, text=True, timeout=60).stdout.split()
    assert added, f"{DECLARED} is not in the git history"
    runs = first_edition_runs()
    assert started_before(runs, added[-1]) == []


def test_every_committed_experiment_13_run_started_after_the_commit_that_planned_its_row():
    """Edge rows and step 2's rows are added after the declaration: each run must start after its own row landed."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git history here to date the rows by")
    config = "experiments/13_steps_to_target/config.toml"
    runs = first_edition_runs()
    for row in sorted({re.sub(r"-s\d+$", "", run.name) for run in runs}):
        added = subprocess.run(["git", "log", "--format=%cI", "-S", f'run = "{row}"', "--", config], cwd=REPO,
                               capture_output=True, text=True, timeout=60).stdout.split()
        assert added, f"no commit of {config} adds the row of {row}"
        assert started_before([r for r in runs if re.sub(r"-s\d+$", "", r.name) == row], added[-1]) == []


def test_the_selection_table_marks_the_rules_choice_only_once_every_planned_rate_has_finished(tmp_path):
    grid = [0.025, 0.05, 0.1]
    rows = [f'{{ run = "tune-sgd-w{w}-base{b:g}", "optim.name" = "sgd", "lr.base" = {b}, "train.workers" = {w} }}'
            for w in (1, 2) for b in grid]
    config = tmp_path / "config.toml"
    config.write_text("[study]\nextra = [\n" + ",\n".join(rows) + "\n]\n")
    runs = []
    for w, hits in ((1, {0.025: 4, 0.05: 2, 0.1: 3}), (2, {0.025: 3, 0.05: 1})):  # w2: base 0.1 still running
        for base, hit in hits.items():
            runs += run_rows(13, f"tune-sgd-w{w}-base{base:g}-s0", 4 * w, [10.0] * hit + [52.0])
    table = st.selection_table(pd.DataFrame(runs), config).set_index(["workers", "base"])
    assert table.loc[(1, 0.05), "choice"] == "chosen" and table.loc[(1, 0.025), "choice"] == ""
    assert (table.loc[2, "choice"] == "waiting: 1 of 3 rates unfinished").all()
    assert table.loc[(1, 0.05), "steps"] == 3 * 2000  # reached at epoch 2: 3 epochs of 8000 / 4


def test_tuned_sgd_is_fewer_than_a_recipe_only_where_the_seed_ranges_lie_apart():
    tuned = pd.DataFrame({"global_batch": [128, 256, 512], "steps": [600.0, 400.0, 300.0],
                          "steps_low": [550.0, 380.0, 250.0], "steps_high": [650.0, 420.0, 350.0]})
    recipe = pd.DataFrame([dict(scale="local", optimizer="lars", workers=b // 4, global_batch=b, seed=s,
                                tuning=False, reached=steps is not None, steps=steps if steps else math.nan,
                                epoch_steps=1.0)
                           for b, per_seed in ((128, [700, 720, 800]), (256, [410, 450, 500]), (512, [None] * 3),
                                               (1024, [100, 110, 120]))
                           for s, steps in enumerate(per_seed)])
    line = st.beside_recipes_line(tuned, recipe)
    assert "LARS: fewer at 128, overlapping at 256, recipe did not reach at 512" in line
    assert "1,024" not in line  # no tuned-SGD point there: not compared


def test_tuned_lamb_beside_tuned_sgd_only_at_batches_where_both_have_every_seed():
    def seeds(optimizer, batch, per_seed):
        return [dict(scale="local", optimizer=optimizer, workers=batch // 4, global_batch=batch, seed=s + 1,
                     tuning=False, reached=steps is not None, steps=float(steps) if steps else math.nan,
                     epoch_steps=1.0) for s, steps in enumerate(per_seed)]
    study = pd.DataFrame(seeds("sgd", 4, [1000, 1100, 1200]) + seeds("lamb", 4, [700, 800, 900])
                         + seeds("sgd", 8, [600, 650, 700]) + seeds("lamb", 8, [640, 700, 760])
                         + seeds("sgd", 16, [300, 320, 340]) + seeds("lamb", 16, [100, 110])  # a seed to come
                         + seeds("sgd", 32, [150, 160, 170]) + seeds("lamb", 32, [200, None, 210])
                         + seeds("sgd", 64, [80, 90, 100]) + seeds("lamb", 64, [120, 130, 140]))
    line = st.tuned_optimizers_line(study)
    assert ("LAMB fewer at 4; LAMB more at 64; overlapping at 8; not every LAMB seed reached the target at 32"
            in line), line
    assert "compared at 4 of 5 batches" in line and " 16" not in line  # batch 16 waits for its third LAMB seed
    assert "no batch" in st.tuned_optimizers_line(pd.DataFrame(seeds("sgd", 4, [1, 2, 3])))


def test_another_scales_runs_are_read_and_judged_by_that_scales_own_rows(tmp_path):
    """A gpu-scale run is named gpu-<row>; its choice is settled by the rows planned at the gpu scale, never by the
    local scale's edge rows."""
    runs = pd.DataFrame(run_rows(13, "gpu-tune-sgd-w1-base0.05-s0", 4, [10.0, 65.0], scale="gpu"))
    [row] = st.run_steps(runs).itertuples()
    assert (row.scale, row.optimizer, row.workers, row.base, row.tuning, row.steps) == ("gpu", "sgd", 1, 0.05, True,
                                                                                        2 * 2000)
    config = tmp_path / "config.toml"
    config.write_text('[study]\nextra = [\n{ run = "tune-sgd-w1-base0.05", "optim.name" = "sgd", "lr.base" = 0.05, '
                      '"train.workers" = 1 },\n{ run = "tune-sgd-w1-base0.1", scale = "local", "optim.name" = "sgd", '
                      '"lr.base" = 0.1, "train.workers" = 1 }]\n')
    assert [r["run"] for r in st.planned_rows(config, "gpu")] == ["tune-sgd-w1-base0.05"]
    assert len(st.planned_rows(config, "local")) == 2
    [pair] = st.settled_choices(st.run_steps(runs), config).itertuples()
    assert pair.settled and pair.planned == 1  # the local edge row is not the gpu scale's to wait for


def test_a_smoke_run_is_never_read_as_a_step_count_nor_chooses_a_rate(tmp_path):
    """QUICK's runs (results/quick) train on 800 images for a few epochs: never a point of the curve, never a choice."""
    rows = run_rows(13, "tune-sgd-w1-base0.05-s0", 4, [10.0, 55.0]) + run_rows(13, "sgd-w1-s1", 4, [10.0, 55.0])
    for run in {r["run"] for r in rows}:  # their manifests say smoke, as the trainer records a QUICK run
        (tmp_path / run).mkdir()
        (tmp_path / run / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "smoke": True}))
    quick = pd.DataFrame([{**r, "path": str(tmp_path / r["run"])} for r in rows])
    assert st.run_steps(quick).empty
    assert "smoke" in st.rq5_reading(quick) and "perfect scaling" not in st.rq5_reading(quick)
    assert len(st.run_steps(pd.DataFrame(rows))) == 2  # the same runs elsewhere are read
