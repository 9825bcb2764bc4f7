"""Experiment 13's next decisions, second edition (tools/exp13_next.py): a pair waits for its unfinished selection
runs (every rate on seeds 0 and 1), a tied rate at a grid edge extends the grid a factor 2 beyond it, an interior
winner is chosen (the middle of the tied rates), and --write adds the decisions to the decisions file (data the
planner reads, never the config's text) with a dated line, and the run count, in the declared file."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from contract import tuned
from contract.plan import expand
from tests.helpers import REPO
from tools import exp13_next as nx

EXP13 = REPO / "experiments" / "13_steps_to_target"


def run(name: str, batch: int, top1_at: dict[int, float], images: int = 6400) -> list[dict]:
    """A finished run's rows, as load_runs makes them of the trainer's records (tests/test_steps_to_target_runs.py
    reads a real run's): its run row, its eval records (step -> top-1) and one epoch end, at its last step."""
    path = f"runs/13/{name}"
    row = dict(kind="run", exp=13, run=name, path=path, scale="local", status="completed", global_batch=batch,
               best_val_top1=max(top1_at.values()), eval_every=8)
    evals = [dict(kind="eval", exp=13, run=name, path=path, step=s, val_top1=v) for s, v in sorted(top1_at.items())]
    return [row] + evals + [dict(kind="epoch", exp=13, run=name, path=path, epoch=0, images=images, step=-(-images // batch),
                              val_top1=1.0)]


def selection(workers: int, hits: dict[float, int | None], optimizer: str = "sgd") -> list[dict]:
    """Both selection seeds of each rate, reaching 50 % at the step given (None: never)."""
    rows = []
    for base, hit in hits.items():
        for seed in (0, 1):
            curve = {8: 10.0, (hit or 400) + 8 * seed: 55.0 if hit else 30.0}
            rows += run(f"e2-tune-{optimizer}-w{workers}-base{base:g}-s{seed}", 4 * workers, curve,
                        images=10 ** 6)
    return rows


def plan_copy(tmp_path):
    """The declared plan before any decision: edition2.toml, and the decisions file's header with no entries (the
    committed file gains entries as the study goes)."""
    shutil.copy(EXP13 / "edition2.toml", tmp_path / "edition2.toml")
    header = [line for line in (EXP13 / "edition2_decisions.toml").read_text().splitlines() if line.startswith("#")]
    (tmp_path / "edition2_decisions.toml").write_text("\n".join(header) + "\nextend = []\nchoose = []\n")
    return tmp_path / "edition2.toml"


def step(runs, plan, optimizer="sgd", workers=8) -> nx.Step:
    return next(s for s in nx.next_steps(pd.DataFrame(runs), plan) if (s.optimizer, s.workers) == (optimizer, workers))


def test_a_pair_waits_while_any_selection_run_is_unfinished(tmp_path):
    runs = selection(8, {0.025: 800, 0.05: 400, 0.1: 320})  # 0.2 not yet
    assert step(runs, plan_copy(tmp_path)).action == "wait"
    assert step(runs, plan_copy(tmp_path)).why == "2 of 8 selection runs unfinished"


def test_an_interior_winner_is_chosen_and_a_tied_edge_extends_the_grid(tmp_path):
    plan = plan_copy(tmp_path)
    s = step(selection(8, {0.025: 800, 0.05: 320, 0.1: 330, 0.2: 900}), plan)
    assert s.action == "choose" and s.decisions[0]["base"] == 0.05 and "tied 0.05, 0.1" in s.why
    s = step(selection(8, {0.025: 300, 0.05: 320, 0.1: 600, 0.2: 900}), plan)
    assert s.action == "extend" and [d["base"] for d in s.decisions] == [0.0125] and "low edge" in s.why


def test_write_adds_decisions_as_data_the_planner_reads_and_a_dated_line_with_the_run_count(tmp_path):
    plan = plan_copy(tmp_path)
    declared = tmp_path / "declared.txt"
    declared.write_text("Declared.\n")
    runs_dir = tmp_path / "runs"
    (runs_dir / "13_steps_to_target" / "e2-tune-sgd-w8-base0.05-s0").mkdir(parents=True)
    (runs_dir / "13_steps_to_target" / "e2-tune-sgd-w8-base0.05-s0" / "manifest.json").write_text("{}")
    runs = selection(8, {0.025: 300, 0.05: 320, 0.1: 600, 0.2: 900}) + selection(4, {0.025: 800, 0.05: 420,
                                                                                   0.1: 430, 0.2: 900})
    due = [s for s in nx.next_steps(pd.DataFrame(runs), plan) if s.action in ("extend", "choose")]
    line = nx.write_due(due, plan, declared, runs_dir)
    decisions = tuned.load_decisions(tuned.load_plan(plan))
    assert [(d["optimizer"], d["workers"], d["base"]) for d in decisions["extend"]] == [("sgd", 8, 0.0125)]
    assert [(d["optimizer"], d["workers"], d["base"]) for d in decisions["choose"]] == [("sgd", 4, 0.05)]
    assert all(d["runs_done"] == 1 for d in decisions["extend"] + decisions["choose"])
    assert "1 second-edition runs started at this moment" in line and declared.read_text().endswith(line)
    names = {r["run"] for r in tuned.rows(plan)}
    assert "e2-tune-sgd-w8-base0.0125" in names and "e2-sgd-w4" in names
    assert (tmp_path / "edition2_decisions.toml").read_text().startswith("# Experiment 13, second edition")
    assert step(runs, plan, workers=4).action == "chosen"  # never decided twice


def test_the_declared_plan_is_every_rate_of_every_pair_on_two_seeds_before_any_decision(tmp_path):
    rows = tuned.rows(plan_copy(tmp_path))
    assert sum(r["seeds"] for r in rows) == 2 * 10 * 4 * 2 and all(r["run"].startswith("e2-tune-") for r in rows)
    assert {r["train.eval_every"] for r in rows} == {128, 64, 32, 16, 8, 4, 2}


def test_every_committed_decision_adds_its_rows_to_the_committed_plan():
    """What exp13-next --write committed is what the study runs: an edge rate's two selection seeds, a chosen
    rate's five study seeds."""
    decisions = tuned.load_decisions(tuned.load_plan(EXP13 / "edition2.toml"))
    runs = {r.name for r in expand(EXP13 / "config.toml", "local", need_data=False)}
    for d in decisions["extend"]:
        stem = f"e2-tune-{d['optimizer']}-w{d['workers']}-base{d['base']:g}"
        assert {f"{stem}-s0", f"{stem}-s1"} <= runs, stem
    plan = tuned.load_plan(EXP13 / "edition2.toml")
    standing = tuned.current_choices(plan, decisions)
    for d in decisions["choose"]:
        name, _ = tuned.study_name(plan, d["optimizer"], int(d["workers"]), d)
        planned = {f"{name}-s{seed}" for seed in range(2, 7)}
        if standing[(d["optimizer"], int(d["workers"]))] is d:
            assert planned <= runs, d
        else:  # a replaced choice (issue 62's re-read): its runs are no longer planned; the replacing one's are
            assert not planned & runs, d


def test_a_second_choice_of_a_pair_is_refused_unless_it_names_the_choice_it_replaces(tmp_path):
    from contract.config import ConfigError

    plan = tuned.load_plan(plan_copy(tmp_path))
    first = {"optimizer": "sgd", "workers": 64, "base": 0.2, "at": "2026-11-28T08:10Z", "runs_done": 86}
    again = {**first, "base": 0.1, "at": "2026-12-01T23:14Z", "runs_done": 280}
    with pytest.raises(ConfigError, match="chosen twice"):
        tuned.current_choices(plan, {"extend": [], "choose": [first, again]})
    replacing = {**again, "replaces": first["at"]}
    assert tuned.current_choices(plan, {"extend": [], "choose": [first, replacing]})[("sgd", 64)] is replacing
    assert tuned.study_name(plan, "sgd", 64, replacing) == ("e2-sgd-w64-base0.1", 0.1)
    assert tuned.study_name(plan, "sgd", 64, first) == ("e2-sgd-w64", 0.2)
    with pytest.raises(ConfigError, match="which chose nothing"):
        tuned.current_choices(plan, {"extend": [], "choose": [replacing]})


def test_a_runs_folder_that_is_not_there_is_one_line_and_an_empty_one_says_what_writes_it(tmp_path, capsys):
    """A typo in OUT= would otherwise print every pair as waiting, as if nothing had run."""
    assert nx.main(["--runs", str(tmp_path / "nosuch")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {tmp_path / 'nosuch'} is no folder: give the runs folder `make exp13` wrote (OUT=, default "
        "results/runs)"]
    assert nx.main(["--runs", str(tmp_path)]) == 0
    assert f"exp13-next: no experiment-13 runs under {tmp_path} yet: `make exp13` writes them" in capsys.readouterr().out


def decided(plan, entries: list[tuple[str, int, float, str]]) -> None:
    """Write decisions (kind, workers, base, at) for sgd into the plan's decisions file, as --write would."""
    decisions = {"extend": [], "choose": []}
    for kind, workers, base, at in entries:
        decisions[kind].append({"optimizer": "sgd", "workers": workers, "base": base, "at": at, "runs_done": 0})
    path = plan.parent / "edition2_decisions.toml"
    header = "".join(line + "\n" for line in path.read_text().splitlines() if line.startswith("#"))
    path.write_text(nx.decisions_text(decisions, header))


def test_audit_replays_each_decision_with_only_the_decisions_before_it_and_names_one_the_runs_do_not_give(tmp_path):
    """After the runs a decision was read from are lost and rerun: each committed decision is read again from the
    finished selection runs, with the grid as it stood then; one the reruns do not give is said, and fails."""
    plan = plan_copy(tmp_path)
    runs = selection(8, {0.0125: 700, 0.025: 300, 0.05: 320, 0.1: 600, 0.2: 900}) + selection(4, {0.025: 800})
    decided(plan, [("extend", 8, 0.0125, "2026-11-28T06:04Z"), ("choose", 8, 0.025, "2026-11-28T08:10Z")])
    replays = nx.audit(pd.DataFrame(runs), plan)
    assert [(r.workers, r.at, r.written, r.read, r.reproduced) for r in replays] == [
        (8, "2026-11-28T06:04Z", "extend 0.0125", "extend 0.0125", True),
        (8, "2026-11-28T08:10Z", "choose 0.025", "choose 0.025", True)]
    decided(plan, [("extend", 8, 0.0125, "2026-11-28T06:04Z"), ("choose", 8, 0.05, "2026-11-28T08:10Z"),
                   ("choose", 4, 0.05, "2026-11-28T08:10Z")])
    replays = {(r.workers, r.at): r for r in nx.audit(pd.DataFrame(runs), plan)}
    assert not replays[8, "2026-11-28T08:10Z"].reproduced
    assert replays[8, "2026-11-28T08:10Z"].read == "choose 0.025"
    assert replays[4, "2026-11-28T08:10Z"].read == "wait: 6 of 8 selection runs unfinished"
    assert not replays[4, "2026-11-28T08:10Z"].reproduced and not replays[4, "2026-11-28T08:10Z"].differs


def test_every_committed_decision_is_given_again_by_the_committed_selection_runs():
    """The second edition's decisions against its committed selection runs (the study's, committed as they finish,
    and the reference's): none differs. A pair whose runs are not all committed yet waits."""
    from analysis.runs import load_runs

    roots = [p for p in (REPO / "results" / "in_progress" / "13_steps_to_target",
                         *(REPO / "results" / "reference").glob("*/13_steps_to_target")) if p.is_dir()]
    frames = [load_runs(root) for root in roots]
    runs = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
    if runs is None or not (runs["run"].astype(str).str.startswith("e2-tune-")).any():
        pytest.skip("no second-edition selection run committed yet")
    differ = [f"{r.optimizer} w{r.workers} {r.at}: wrote {r.written}, the runs give {r.read}"
              for r in nx.audit(runs) if r.differs]
    assert differ == []
