"""Experiment 13's second edition (declared_2026-11-28-edition2.txt): the plan as data, the reading rules' formulas
on fabricated numbers, and the declaration's dated lines against the runs' manifests."""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.experiments import steps_to_target_e2 as e2
from contract import tuned
from contract.config import ConfigError
from contract.runfiles import read_run_file
from tests.helpers import REPO, started_before

EXP13 = REPO / "experiments" / "13_steps_to_target"
DECLARED = EXP13 / "declared_2026-11-28-edition2.txt"


# ---- a run's steps at k steps' resolution ------------------------------------------------------------------------
def test_the_first_reach_is_the_first_evaluation_at_the_target_and_its_resolution_the_gap_before_it():
    # the rows load_runs makes of the trainer's eval and epoch records (an epoch row's step: its last step trained)
    evals = pd.DataFrame({"step": [2, 4, 8, 10], "val_top1": [10.0, 20.0, 49.0, 51.0]})
    epochs = pd.DataFrame({"epoch": [0, 1], "step": [6, 12], "val_top1": [30.0, 55.0]})  # 6 steps an epoch
    points = e2.curve(evals, epochs)
    assert points["step"].tolist() == [2, 4, 6, 8, 10, 12]
    assert e2.first_reach(points, 50.0) == {"reached": True, "steps": 10.0, "resolution": 2.0}
    assert e2.first_reach(points, 60.0)["reached"] is False


def test_the_resolution_rule_can_fail():
    assert e2.resolution_met(8, [200, 160, 400])
    assert not e2.resolution_met(8, [200, 150])  # 8 > 5 % of 150
    assert not e2.resolution_met(8, [math.nan, math.nan])  # nothing reached: not met


# ---- step 1: the tie rule and the edge rule -------------------------------------------------------------------
def test_the_winner_is_the_middle_of_the_tied_rates_and_a_tied_edge_extends_the_grid():
    steps = {0.025: [1000, 1100], 0.05: [700, 720], 0.1: [690, 700], 0.2: [900, 1000]}
    top1 = dict.fromkeys(steps, 50.0)
    c = e2.choose(steps, top1, eval_every=8)
    assert c.tied == (0.05, 0.1) and c.winner == 0.05 and c.edges == () and c.reached  # even count: lower middle
    c = e2.choose({**steps, 0.2: [680, 700]}, top1, eval_every=8)
    assert c.tied == (0.05, 0.1, 0.2) and c.winner == 0.1 and c.edges == ("high",)


def test_the_tie_margin_widens_to_two_evaluations_where_they_exceed_ten_percent():
    steps = {0.1: [100, 100], 0.2: [125, 125], 0.4: [200, 200]}
    assert e2.choose(steps, dict.fromkeys(steps, 50.0), eval_every=4).tied == (0.1,)          # 10 % of 100
    assert e2.choose(steps, dict.fromkeys(steps, 50.0), eval_every=16).tied == (0.1, 0.2)    # 2 x 16 = 32 %


def test_a_rate_missing_the_target_on_one_seed_ranks_last_and_none_reaching_picks_the_best_top1():
    c = e2.choose({0.1: [100, math.nan], 0.2: [300, 300], 0.4: [900, 900]}, {0.1: 55, 0.2: 52, 0.4: 51}, 4)
    assert c.winner == 0.2 and c.tied == (0.2,)
    c = e2.choose({0.1: [math.nan] * 2, 0.2: [math.nan] * 2, 0.4: [math.nan] * 2}, {0.1: 30, 0.2: 45, 0.4: 40}, 4)
    assert c.winner == 0.2 and not c.reached and c.edges == ()


# ---- the fit with its misfit, the goodness of fit, the regime words ----------------------------------------------
def fabricated(b_noise=400.0, s_min=200.0, noise=0.02, kink=None, seeds=5, rng_seed=1):
    rng = np.random.default_rng(rng_seed)
    cells = {}
    for b in [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]:
        s = s_min * (1 + b_noise / b) * (kink.get(b, 1.0) if kink else 1.0)
        cells[b] = list(s * np.exp(rng.normal(0, noise, seeds)))
    return cells


def test_the_fit_recovers_b_noise_and_a_misfit_batch_widens_its_interval():
    clean = e2.fit_with_misfit(fabricated(), draws=300)
    assert clean["b_noise"] == pytest.approx(400, rel=0.05)
    assert clean["b_noise_ci"][0] < 400 < clean["b_noise_ci"][1]
    bent = e2.fit_with_misfit(fabricated(kink={256: 1.45}), draws=300)  # the first edition's LAMB at 256: +44 %
    width = lambda f: math.log(f["b_noise_ci"][1] / f["b_noise_ci"][0])  # noqa: E731
    assert width(bent) > 2 * width(clean)


def test_the_goodness_of_fit_line_tells_a_misfit_from_seed_noise_and_compares_a_power_law():
    g = e2.goodness(fabricated())
    assert g["rms"] < 1.5 * g["seed_rms"] and "fits within seed noise" in e2.goodness_words(g)
    assert "fits better than a power law" in e2.goodness_words(g) and e2.names_regimes(g)
    bent = e2.goodness(fabricated(kink={256: 1.45}))
    assert "misfits by a factor" in e2.goodness_words(bent) and not e2.names_regimes(bent)
    lo, hi = bent["b_noise_leave_one_out"]
    assert lo < hi
    law = {b: list(5000 * b ** -0.8 * np.ones(5) * np.exp(np.random.default_rng(b).normal(0, 0.02, 5)))
           for b in [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]}
    assert "a power law fits as well" in e2.goodness_words(e2.goodness(law))


def test_regime_words_only_where_the_whole_interval_allows_them():
    ci = (400.0, 500.0)
    assert e2.regime_word(100, ci) == "perfect scaling"          # 100 <= 400 / 4
    assert e2.regime_word(2048, ci) == "maximal data parallelism"  # 2048 >= 4 x 500
    assert e2.regime_word(256, ci) == "diminishing returns"       # 125 < 256 < 1600
    assert e2.regime_word(110, ci).startswith("between regimes")  # 100 < 110 <= 125
    assert e2.regime_word(1800, ci).startswith("between regimes")  # 1600 <= 1800 < 2000


def test_the_b_simple_rule_can_say_each_of_its_three_words():
    crit = (400.0, 500.0)  # the band: 133-1500
    assert e2.b_simple_verdict((200.0, 900.0), crit) == "B_simple at the target agrees with B_crit"
    assert e2.b_simple_verdict((20.0, 90.0), crit) == "B_simple disagrees with B_crit"
    assert e2.b_simple_verdict((100.0, 300.0), crit) == "the intervals cannot tell"
    assert e2.b_simple_verdict((200.0, math.inf), crit) == "the intervals cannot tell"
    low, high = e2.b_simple_interval({4: [300, 310, 320], 512: [290, 305, 330]}, draws=200)
    assert 290 <= low <= high <= 330


# ---- the plan as data -------------------------------------------------------------------------------------------
def plan_file(tmp_path: Path, decisions: str = "") -> Path:
    text = (EXP13 / "edition2.toml").read_text()
    (tmp_path / "edition2.toml").write_text(text)
    (tmp_path / "edition2_decisions.toml").write_text(decisions or "extend = []\nchoose = []\n")
    return tmp_path / "edition2.toml"


def test_the_declared_plan_makes_every_rate_on_two_seeds_at_every_batch_and_no_study_row_before_a_choice(tmp_path):
    rows = tuned.rows(plan_file(tmp_path))  # before any decision (the committed file gains them as the study goes)
    assert len(rows) == 2 * 10 * 4 and all(r["seeds"] == 2 and r["first_seed"] == 0 for r in rows)
    assert {r["train.workers"] for r in rows} == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
    assert all(r["run"].startswith("e2-tune-") and r["data.holdout_share"] == 0.2 for r in rows)
    w1 = next(r for r in rows if r["train.workers"] == 1)
    assert (w1["train.eval_every"], w1["train.epochs"]) == (128, 30)


def test_decisions_add_an_edge_rate_and_a_study_row_of_five_new_seeds(tmp_path):
    decisions = ('extend = [{ optimizer = "lamb", workers = 512, base = 0.0003125, at = "2026-11-28T03:00Z", '
                 'runs_done = 80 }]\nchoose = [{ optimizer = "sgd", workers = 8, base = 0.05, '
                 'at = "2026-11-28T03:00Z", runs_done = 80 }]\n')
    rows = tuned.rows(plan_file(tmp_path, decisions))
    edge = [r for r in rows if r["run"] == "e2-tune-lamb-w512-base0.0003125"]
    study = [r for r in rows if r["run"] == "e2-sgd-w8"]
    assert len(edge) == 1 and edge[0]["train.epochs"] == 256
    assert study[0]["seeds"] == 5 and study[0]["first_seed"] == 2 and "data.holdout_share" not in study[0]


def test_a_pair_chosen_twice_or_an_unplanned_pair_is_refused_in_one_line(tmp_path):
    twice = ('choose = [{ optimizer = "sgd", workers = 8, base = 0.05, at = "x", runs_done = 1 }, '
             '{ optimizer = "sgd", workers = 8, base = 0.1, at = "y", runs_done = 2 }]\n')
    with pytest.raises(ConfigError, match="chosen twice"):
        tuned.rows(plan_file(tmp_path, twice))
    with pytest.raises(ConfigError, match="lacks"):
        tuned.rows(plan_file(tmp_path, 'extend = [{ optimizer = "adam", workers = 8, base = 0.1, at = "x", '
                                       'runs_done = 1 }]\n'))


# ---- the declaration's dated lines against the runs -----------------------------------------------------------
DATED = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\dZ), .*?(?P<runs>\d+) second-edition runs? started")


def dated_lines(text: str) -> list[tuple[str, int]]:
    """Each later line's time and the run count it claims had started at that moment."""
    return [(m["at"], int(m["runs"])) for m in map(DATED.match, text.splitlines()) if m]


def started(run_dirs) -> list[pd.Timestamp]:
    """The first start of each second-edition run, from its manifest (its attempts' and its own)."""
    from contract.reader import read_manifest

    times = []
    for run in run_dirs:
        if not Path(run).name.startswith(e2.PREFIX):
            continue
        manifest = read_manifest(run) or {}
        starts = [a.get("start") for a in manifest.get("attempts", [])] + [manifest.get("start")]
        starts = [pd.Timestamp(s) for s in starts if s]
        if starts:
            times.append(min(starts))
    return sorted(times)


def claims_contradicted(lines: list[tuple[str, int]], starts: list[pd.Timestamp]) -> list[str]:
    """The dated lines that claim fewer runs had started than the manifests show started before the line."""
    found = []
    for at, count in lines:
        before = sum(s < pd.Timestamp(at) for s in starts)
        if before > count:
            found.append(f"{at}: says {count} second-edition run(s) had started; the manifests show {before}")
    return found


def test_a_dated_line_that_precedes_runs_it_followed_is_caught(tmp_path):
    lines = dated_lines("2026-11-28T03:00Z, a decision (tree at x): 2 second-edition runs started at this moment.\n")
    assert lines == [("2026-11-28T03:00Z", 2)]
    times = [pd.Timestamp(s) for s in ("2026-11-28T01:00:00Z", "2026-11-28T02:00:00Z", "2026-11-28T02:59:00Z")]
    assert claims_contradicted(lines, times[:2]) == []
    assert claims_contradicted(lines, times) == ["2026-11-28T03:00Z: says 2 second-edition run(s) had started; "
                                                 "the manifests show 3"]


def test_every_dated_line_of_the_second_edition_follows_no_run_it_claims_to_precede():
    assert claims_contradicted(dated_lines(DECLARED.read_text()), started(second_edition_runs())) == []


def second_edition_runs() -> list[Path]:
    """Every second-edition run folder here: the reference's, a study's still running (results/in_progress,
    committed as they finish) and this clone's own."""
    roots = [*(REPO / "results" / "reference").glob("*/13_steps_to_target"),
             *(REPO / "results" / where / "13_steps_to_target" for where in ("in_progress", "runs"))]
    return [p for root in roots for p in root.glob(f"{e2.PREFIX}*") if p.is_dir()]


def test_the_second_edition_was_declared_before_any_of_its_runs_started():
    import shutil
    import subprocess

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git history here to date the declaration by")
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%cI", "--", str(DECLARED.relative_to(REPO))],
                           cwd=REPO, capture_output=True, text=True, timeout=60).stdout.split()
    assert added, f"{DECLARED} is not in the git history"
    assert started_before(second_edition_runs(), added[-1]) == []


# ---- one tiny second-edition run, end to end --------------------------------------------------------------------
@pytest.mark.slow
def test_one_tiny_second_edition_run_evaluates_every_k_steps_and_exp13_next_reads_its_folder(tmp_path, capsys):
    """The declared plan's batch-4 selection run, shrunk by QUICK (2 epochs of 650 images: 163 steps an epoch),
    through the study runner: an eval record at step 128 (k at batch 4), the epochs' own ends, and exp13-next
    leaving the smoke run out of every choice."""
    import os
    import subprocess
    import sys

    from analysis.runs import load_runs
    from tools import exp13_next as nx

    name = "e2-tune-sgd-w1-base0.05-s0"
    done = subprocess.run([sys.executable, "-m", "suite", "study", str(EXP13), "--quick", "--only", name, "--out",
                           str(tmp_path), "--jobs", "1"], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    df = load_runs(tmp_path)  # the analysis's frame: the eval records kept, in step order
    evals, epochs = df[df["kind"] == "eval"], df[df["kind"] == "epoch"]
    assert df.loc[df["kind"] == "run", "eval_every"].tolist() == [128]
    assert evals["step"].tolist() == [128, 256] and len(epochs) == 2
    points = e2.curve(evals, epochs)
    assert points["step"].tolist() == [128, 163, 256, 326]
    assert nx.main(["--runs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [r for r in tuned.rows(EXP13 / "edition2.toml")  # the grid as the committed decisions left it
            if r["optim.name"] == "sgd" and r["train.workers"] == 1]
    selection = sum(r["seeds"] for r in rows if r["run"].startswith("e2-tune-"))
    chosen = next((r["run"] for r in rows if not r["run"].startswith("e2-tune-")), None)  # its study row, once chosen
    assert "1 smoke run(s) (QUICK=1) left out" in out
    # the smoke run never counts: an undecided pair still waits for every selection run; a chosen one stays chosen
    assert (f"sgd             1  wait     {selection} of {selection}" if chosen is None else
            "sgd             1  chosen   base ") in out


def test_b_simple_rows_of_the_noise_scale_tool_are_read_per_batch_for_one_optimizer():
    rows = [{"run": "results/runs/13_steps_to_target/e2-sgd-w8-s2", "b_simple": 300.0},
            {"run": "results/runs/13_steps_to_target/e2-sgd-w8-s3", "b_simple": 320.0},
            {"run": "results/runs/13_steps_to_target/e2-lamb-w8-s2", "b_simple": 900.0},
            {"run": "results/runs/13_steps_to_target/e2-sgd-w16-s2", "b_simple": None},   # |G|^2 not resolved
            {"run": "results/runs/13_steps_to_target/e2-tune-sgd-w8-base0.05-s0", "b_simple": 1.0}]
    assert e2.b_simple_cells(rows, "sgd") == {32: [300.0, 320.0]}
    assert e2.b_simple_cells(rows, "lamb") == {32: [900.0]}
    assert e2.b_simple_cells(rows, "sgd", reached={"e2-sgd-w8-s3"}) == {32: [320.0]}  # s2 ended at its budget


# ---- the tables, from fabricated step rows -----------------------------------------------------------------------
def step_rows(cells: dict[int, list[float]], optimizer="sgd", k_of=lambda b: 2) -> pd.DataFrame:
    return pd.DataFrame([dict(optimizer=optimizer, workers=b // 4, global_batch=b, seed=2 + i, base=0.05, tuning=False,
                              status="completed", reached=True, steps=s, resolution=k_of(b), eval_every=k_of(b),
                              best_top1=55.0, warmup_steps=4 * -(-8000 // b), path=f"e2-{optimizer}-w{b // 4}-s{2 + i}")
                         for b, seeds in cells.items() for i, s in enumerate(seeds)])


def test_a_study_runs_base_rate_is_read_from_its_own_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"lr": {"base": 0.025, "scaling": "sqrt"}}))
    assert e2.run_base(tmp_path) == 0.025
    assert math.isnan(e2.run_base(tmp_path / "missing"))


def test_the_cells_table_has_a_resolution_column_and_a_cell_that_misses_it_leaves_the_fit():
    cells = fabricated()
    steps = step_rows(cells, k_of=lambda b: 64 if b == 2048 else 2)  # 64 > 5 % of batch 2,048's ~240 steps
    table = e2.cells_table(steps).set_index("global_batch")
    assert table.loc[4, "resolution_met"] and not table.loc[2048, "resolution_met"]
    assert table.loc[2048, "resolution_share"] == pytest.approx(64 / min(cells[2048]))
    assert (table["seeds"] == 5).all() and 2048 not in e2.fitted_cells(steps, "sgd")
    assert table.loc[4, "warmup_share"] == pytest.approx(4 * 2000 / e2.score(cells[4]))  # 4 epochs of 2,000 steps


def test_the_fit_table_names_regimes_and_the_b_simple_verdict_from_the_declared_rules():
    steps = step_rows(fabricated())
    measured = {"sgd": [{"run": f"x/e2-sgd-w{w}-s{s}", "b_simple": 300.0 + s} for w in (1, 8, 64) for s in (2, 3)]}
    row = e2.fit_table(steps, measured, draws=200).iloc[0]
    assert row["b_noise_low"] < 400 < row["b_noise_high"] and "fits within seed noise" in row["goodness"]
    assert "4: perfect scaling (5 of 5 streams; " in row["regimes"]  # with the share of the draws behind it
    assert "2048: not named (its doubling, 4096, was not run)" in row["regimes"]  # the largest batch run
    assert row["b_simple"] == "B_simple at the target agrees with B_crit"
    assert e2.fit_table(steps, None, draws=50).iloc[0]["b_simple"] == "not measured yet"


def tune_rows(per_rate: dict[float, list[float]], workers=8, k=4) -> pd.DataFrame:
    return pd.DataFrame([dict(optimizer="sgd", workers=workers, global_batch=4 * workers, seed=seed, base=base,
                              tuning=True, status="completed", reached=math.isfinite(s), steps=s, resolution=k,
                              eval_every=k, best_top1=50.0 + base, path=f"e2-tune-sgd-w{workers}-base{base:g}-s{seed}")
                         for base, seeds in per_rate.items() for seed, s in enumerate(seeds)])


def test_the_selection_table_shows_each_rates_score_the_rules_tie_and_the_committed_decision():
    """0.05 and 0.1 tie (within 10 %) and the rule takes the lower middle of the tied rates; 0.025 was a grid
    extension; 0.2 did not reach the target on seed 1, so it scores no steps."""
    steps = tune_rows({0.025: [1300.0, 1400.0], 0.05: [1000.0, 1040.0], 0.1: [1050.0, 1100.0],
                       0.2: [900.0, math.nan]})
    decisions = {"extend": [{"optimizer": "sgd", "workers": 8, "base": 0.025}],
                 "choose": [{"optimizer": "sgd", "workers": 8, "base": 0.05}]}
    plan = replace(tuned.load_plan(EXP13 / "edition2.toml"), grid={"sgd": (0.05, 0.1, 0.2)}, selection_seeds=2,
                   first_selection_seed=0)
    table = e2.selection_table(steps, plan, decisions).set_index("base")
    assert table.loc[0.05, "steps"] == pytest.approx(math.sqrt(1000.0 * 1040.0))
    assert math.isnan(table.loc[0.2, "steps"]) and table.loc[0.2, "reached"] == 1
    assert table["rule"].to_dict() == {0.025: "", 0.05: "winner", 0.1: "tied", 0.2: ""}
    assert table["decision"].to_dict() == {0.025: "added (grid extension)", 0.05: "chosen", 0.1: "", 0.2: ""}


def test_the_selection_table_names_no_winner_while_a_pairs_runs_are_unfinished():
    steps = tune_rows({0.025: [1300.0, 1400.0], 0.05: [1000.0]})
    plan = replace(tuned.load_plan(EXP13 / "edition2.toml"), grid={"sgd": (0.025, 0.05)}, selection_seeds=2,
                   first_selection_seed=0)
    table = e2.selection_table(steps, plan, {"extend": [], "choose": []})
    assert (table["rule"] == "waiting: 1 of 4 selection runs unfinished").all()


def test_the_figure_draws_each_optimizers_seeds_its_fit_and_the_b_noise_interval_and_marks_cells_out_of_the_fit():
    cells = fabricated()
    steps = pd.concat([step_rows(cells, k_of=lambda b: 64 if b == 2048 else 2), step_rows(cells, "lamb")])
    fig = e2.steps_figure_e2(pd.DataFrame(), steps, draws=50)
    sgd, lamb = fig.axes
    assert "SGD" in sgd.get_title() and "LAMB" in lamb.get_title()
    labels = [t.get_text() for t in sgd.get_legend().get_texts()]
    assert any(t.startswith("fit: S_min") for t in labels) and any("B_noise interval" in t for t in labels)
    assert any("left out of the fit" in t for t in labels)  # batch 2,048 misses the resolution on SGD
    assert not any("left out of the fit" in t.get_text() for t in lamb.get_legend().get_texts())
    assert e2.steps_figure_e2(pd.DataFrame(), step_rows({}), draws=50) is None


def test_the_reports_second_edition_tables_are_absent_until_its_runs_exist(tmp_path):
    from analysis import catalogue as ct

    empty = ct.Inputs(df=pd.DataFrame(columns=["kind", "exp"]), ref=pd.DataFrame())
    for name in ("exp13_e2_steps_to_target", "exp13_e2_fit", "exp13_e2_rate_selection"):
        entry = next(t for t in ct.TABLES if t.name == name)
        assert entry.make(empty, entry) is None
    assert e2.measured_b_simple({"sgd": tmp_path / "none.json"}) == {}
    (tmp_path / "sgd.json").write_text('[{"run": "x/e2-sgd-w1-s2", "b_simple": 310.0}]')
    assert e2.measured_b_simple({"sgd": tmp_path / "sgd.json"}) == {"sgd": [{"run": "x/e2-sgd-w1-s2", "b_simple": 310.0}]}


# ---- the RQ5 reading, from the fit --------------------------------------------------------------------------------
def test_a_cell_without_every_declared_seed_stays_out_of_the_fit():
    """While the study runs, a batch with 3 of its 5 seeds finished is not fitted (the declared cells have all 5)."""
    cells = fabricated()
    cells[256] = cells[256][:3]
    assert 256 not in e2.fitted_cells(step_rows(cells), "sgd") and 128 in e2.fitted_cells(step_rows(cells), "sgd")


def test_the_second_edition_reads_its_own_runs_alone():
    """Both editions lie in 13_steps_to_target/: the second reads its e2- runs and no first-edition run (the first's
    files are kept as it last drew them, tests/test_exp13_edition1.py)."""
    df = pd.DataFrame({"exp": [13, 13, 12, 13], "run": ["tune-sgd-w1-base0.05-s0", "e2-sgd-w1-s2", "e2-x", None]})
    assert e2.second_edition(df).tolist() == [False, True, False, False]


def test_the_rq5_reading_says_what_has_run_until_a_fit_exists_then_reads_the_fit_and_lamb_beside_sgd():
    assert "none of its runs is among these runs yet" in e2.rq5_reading_e2(pd.DataFrame(), steps=step_rows({}))
    few = step_rows({4: fabricated()[4], 8: fabricated()[8]})
    said = e2.rq5_reading_e2(pd.DataFrame(), steps=few, draws=50)
    assert "10 study runs finished" in said and "waits for three batches" in said
    sgd, lamb = fabricated(), fabricated(s_min=100.0, rng_seed=2)
    lamb[4] = [s * 3 for s in sgd[4]]  # every LAMB seed above every SGD seed at batch 4
    steps = pd.concat([step_rows(sgd), step_rows(lamb, optimizer="lamb")], ignore_index=True)
    said = e2.rq5_reading_e2(pd.DataFrame(), steps=steps, draws=200, b_simple={})
    row = e2.fit_table(steps, {}, draws=200).set_index("optimizer").loc["sgd"]
    assert f"B_noise = B_crit {row['b_noise']:.0f} examples [{row['b_noise_low']:.0f}, {row['b_noise_high']:.0f}]" \
        in said
    assert "4: perfect scaling" in said and "fits within seed noise" in said and "not measured yet" in said
    assert "batch 4: LAMB more" in said and "batch 8: LAMB fewer" in said


def test_every_committed_cell_is_its_study_runs_first_evaluated_step_at_the_target_recomputed_from_the_folders():
    """Issue 62's check, without the reader: each cell of results/tables/exp13_e2_steps_to_target.csv is the
    geometric mean over its standing study runs of the first evaluated step at or above the target, read from the
    raw records: eval records at their step; epoch ends at (epoch + 1) x the epoch's iterations, except the epoch a
    stopping evaluation cut short (its end is that evaluation)."""
    import csv

    from contract import tuned

    root = REPO / "results" / "reference" / "vm-epyc-avx512" / "13_steps_to_target"
    if not root.is_dir():
        pytest.skip("the second edition's runs are not in the reference")
    plan = tuned.load_plan(EXP13 / "edition2.toml")
    standing = {pair: tuned.study_name(plan, *pair, entry)[0]
                for pair, entry in tuned.current_choices(plan, tuned.load_decisions(plan)).items()}
    recomputed = {}
    for (optimizer, workers), name in standing.items():
        firsts = []
        for run_dir in sorted(root.glob(f"{name}-s*")):
            lines = read_run_file(run_dir / "metrics.jsonl").splitlines()  # plain or gzip'd, as committed
            records = [json.loads(line) for line in lines if line.strip()]
            iters = next(r["iters"] for r in records if r["kind"] == "iter")
            evals = [(r["step"], r["val_top1"]) for r in records if r["kind"] == "eval"]
            epochs = [r for r in records if r["kind"] == "epoch"]
            cut = {r["epoch"] for r in records if r["kind"] == "eval" and r["val_top1"] >= 50.0}
            ends = [((e["epoch"] + 1) * iters, e["val_top1"]) for e in epochs if e["epoch"] not in cut]
            firsts.append(min(step for step, top1 in evals + ends if top1 >= 50.0))
        recomputed[(optimizer, 4 * workers)] = float(np.exp(np.log(firsts).mean()))
    with open(REPO / "results" / "tables" / "exp13_e2_steps_to_target.csv") as f:
        committed = {(r["optimizer"], int(r["global_batch"])): float(r["steps"]) for r in csv.DictReader(f)}
    assert committed.keys() == recomputed.keys()
    assert all(committed[cell] == pytest.approx(recomputed[cell], rel=1e-5) for cell in committed), \
        [(cell, committed[cell], recomputed[cell]) for cell in committed if committed[cell] != pytest.approx(
            recomputed[cell], rel=1e-5)]  # the CSV keeps 6 significant digits
