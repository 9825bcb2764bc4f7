"""Experiment 13's next rows (tools/exp13_next.py): a pair waits for its unfinished tuning runs, a winner at its
grid's edge gets a rate a factor 2 beyond (at most twice), a settled pair gets its study rows (seeds 1-3), and
--write adds them to the config, where the study plans them, with a dated line in the declared file."""
from __future__ import annotations

import shutil
import tomllib

import pandas as pd

from contract.plan import expand
from tests.test_analysis_steps_to_target import run_rows
from tools import exp13_next as nx

GRID = [0.025, 0.05, 0.1]


def tuning_rows(workers: int, bases=GRID, epochs: int = 30) -> list[dict]:
    return [{"run": nx.tuning_name("sgd", workers, b), "optim.name": "sgd", "lr.base": b, "train.workers": workers,
             "train.epochs": epochs, "data.holdout_share": 0.2} for b in bases]


def finished(workers: int, reach_epoch: dict[float, int | None]) -> list[dict]:
    """Run rows of finished tuning runs: each base reaches 50 % at the epoch given (None: never)."""
    rows = []
    for base, hit in reach_epoch.items():
        values = [10.0] * (hit if hit is not None else 6) + ([55.0] if hit is not None else [])
        rows += run_rows(13, f"{nx.tuning_name('sgd', workers, base)}-s0", 4 * workers, values)
    return rows


def step_of(planned, runs) -> nx.Step:
    [step] = nx.next_steps(pd.DataFrame(runs), planned)
    return step


def test_a_pair_waits_while_any_of_its_tuning_runs_is_unfinished():
    step = step_of(tuning_rows(8), finished(8, {0.025: 5, 0.05: 4}))
    assert (step.action, step.rows) == ("wait", ()) and "1 of 3" in step.why


def test_a_settled_pair_gets_its_study_row_at_the_chosen_rate_with_seeds_one_to_three():
    step = step_of(tuning_rows(8), finished(8, {0.025: 5, 0.05: 3, 0.1: 4}))
    assert step.action == "study"
    assert step.rows == ({"run": "sgd-w8", "scale": "local", "optim.name": "sgd", "lr.base": 0.05, "train.workers": 8,
                          "train.epochs": 30, "seeds": 3, "first_seed": 1},)


def test_a_winner_at_an_edge_gets_one_rate_beyond_it_at_most_twice():
    low = step_of(tuning_rows(8), finished(8, {0.025: 2, 0.05: 3, 0.1: 4}))
    assert low.action == "edge" and low.rows[0]["run"] == "tune-sgd-w8-base0.0125"
    assert low.rows[0]["lr.base"] == 0.0125 and low.rows[0]["data.holdout_share"] == 0.2
    assert tomllib.loads("extra = [\n" + nx.toml_row(low.rows[0]) + "\n]")["extra"] == [low.rows[0]]  # plain TOML
    high = step_of(tuning_rows(8), finished(8, {0.025: None, 0.05: None, 0.1: None}))  # none reach: best top-1
    assert high.action == "edge" and high.rows[0]["lr.base"] == 0.025 / 2  # a tie in best top-1: the lower rate
    grid = GRID + [0.2, 0.4]  # two extensions already: the winner stays, flagged
    capped = step_of(tuning_rows(8, grid), finished(8, {**{b: 5 for b in GRID}, 0.2: 4, 0.4: 3}))
    assert capped.action == "study" and capped.rows[0]["lr.base"] == 0.4 and "possibly under-tuned" in capped.why


def test_rows_already_written_are_never_due_again():
    planned = tuning_rows(8) + [{"run": "sgd-w8", "optim.name": "sgd", "lr.base": 0.05, "train.workers": 8,
                                 "train.epochs": 30, "seeds": 3, "first_seed": 1}]
    assert step_of(planned, finished(8, {0.025: 5, 0.05: 3, 0.1: 4})).action == "written"


def test_write_adds_rows_the_study_plans_and_a_dated_line_to_the_declared_file(tmp_path):
    exp = tmp_path / "experiments" / "13_steps_to_target"  # beside scales.toml, as in the repository
    shutil.copytree(nx.st.CONFIG.parent, exp)
    shutil.copy(nx.st.CONFIG.parents[1] / "scales.toml", exp.parent)
    config, declared = exp / "config.toml", tmp_path / "declared.txt"
    text = config.read_text()  # the real config with its extra rows cut to the 8-worker SGD grid, as first declared
    start, end = text.index("extra = ["), text.index("\n]\n", text.index("extra = ["))
    config.write_text(text[:start] + "extra = [\n" + "\n".join(nx.toml_row(r) for r in tuning_rows(8)) + text[end:])
    declared.write_text("declared before any run\n")
    runs = finished(8, {0.025: 5, 0.05: 3, 0.1: 4})
    due = [s for s in nx.next_steps(pd.DataFrame(runs), nx.st.planned_rows(config)) if s.action == "study"]
    assert len(due) == 1
    line = nx.write_due(due, config, declared, tmp_path / "runs")
    assert "sgd w8: study row sgd-w8, base 0.05 of 3 rates" in line and declared.read_text().endswith(line)
    names = {run.name for run in expand(exp / "config.toml", "local")}
    assert {"sgd-w8-s1", "sgd-w8-s2", "sgd-w8-s3"} <= names and "sgd-w8-s0" not in names
    again = nx.next_steps(pd.DataFrame(runs), nx.st.planned_rows(config))
    assert [s.action for s in again if s.workers == 8 and s.optimizer == "sgd"] == ["written"]


def test_rows_are_written_for_the_scale_whose_runs_chose_them_and_only_count_there(tmp_path):
    local_study = {"run": "sgd-w8", "scale": "local", "optim.name": "sgd", "lr.base": 0.05, "train.workers": 8,
                   "train.epochs": 30, "seeds": 3, "first_seed": 1}
    gpu_runs = [{**r, "scale": "gpu", "run": "gpu-" + r["run"], "path": r["path"].replace("/tune", "/gpu-tune")}
                | ({"val_top1": 65.0} if r.get("val_top1") == 55.0 else {})  # above the gpu scale's target, 60 %
                for r in finished(8, {0.025: 5, 0.05: 3, 0.1: 4})]
    [step] = nx.next_steps(pd.DataFrame(gpu_runs), tuning_rows(8), scale="gpu")  # the local row is not planned there
    assert step.action == "study" and step.rows[0]["scale"] == "gpu" and step.rows[0]["lr.base"] == 0.05
    [step] = nx.next_steps(pd.DataFrame(finished(8, {0.025: 5})), tuning_rows(8) + [local_study])
    assert step.action == "written"


def test_the_committed_configs_chosen_rows_are_the_local_scales_alone():
    """Every edge and study row exp13-next wrote came from the local scale's runs: another scale plans only the
    declared grid and chooses its own rates."""
    from contract.plan import study_table

    rows = study_table(nx.st.CONFIG, "local")["extra"]
    written = [r for r in rows if r["run"] not in {g["run"] for g in study_table(nx.st.CONFIG, "gpu")["extra"]}]
    assert written and all(r.get("scale") == "local" for r in written)
    for scale in ("gpu", "node", "thesis"):
        planned = study_table(nx.st.CONFIG, scale)["extra"]
        assert all("scale" not in r for r in planned)
        assert len(planned) == 2 * 10 * 3  # 2 optimizers x 10 batches x the grid's 3 rates


def test_a_runs_folder_that_is_not_there_is_one_line_and_an_empty_one_says_what_writes_it(tmp_path, capsys):
    """A typo in OUT= would otherwise print every pair as waiting, as if nothing had run."""
    assert nx.main(["--runs", str(tmp_path / "nosuch")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {tmp_path / 'nosuch'} is no folder: give the runs folder `make exp13` wrote (OUT=, default "
        "results/runs)"]
    assert nx.main(["--runs", str(tmp_path)]) == 0
    assert f"exp13-next: no experiment-13 runs under {tmp_path} yet: `make exp13` writes them" in capsys.readouterr().out
