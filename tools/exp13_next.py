"""Experiment 13's next decisions (second edition), read from its finished selection runs by the declared rules
(experiments/13_steps_to_target/declared_2026-11-28-edition2.txt): per (optimizer, workers), wait while a selection
run is unfinished; where a rate tied with the best sits at an edge of the grid, one more rate a factor 2 beyond it
(`extend`); otherwise the pair's chosen rate (`choose`). `--write` adds the due decisions to edition2_decisions.toml
(data the planner reads) and a dated line to the declared file, to be committed before any run they add starts.

    python -m tools exp13-next [--runs results/runs] [--write]      (make exp13-next [WRITE=1])
    python -m tools exp13-next --runs results/in_progress --audit    each committed decision read again

`--audit` replays every committed decision over the finished selection runs (after runs were lost and rerun, the
decisions must come out again); it exits 1 when one differs. `--audit --write` replaces a committed choice the runs
do not give by the one they give (a `choose` entry naming the entry it replaces) and says so in a dated line.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.experiments import steps_to_target_e2 as e2
from analysis.runs import load_runs
from analysis.smoke import smoke_paths
from contract import tuned
from contract.config import ConfigError, read_toml
from contract.runfolder import MANIFEST

REPO = Path(__file__).resolve().parents[1]
EXP13 = REPO / "experiments" / "13_steps_to_target"
PLAN = EXP13 / "edition2.toml"
DECLARED = EXP13 / "declared_2026-11-28-edition2.txt"


@dataclass(frozen=True)
class Step:
    """What one (optimizer, workers) pair needs next: its action, the decisions it adds, and why."""
    optimizer: str
    workers: int
    action: str                 # "wait", "extend" or "choose" (decisions due), "chosen" (its rate is decided)
    decisions: tuple[dict, ...]  # {kind, optimizer, workers, base}
    why: str


def next_step(plan: tuned.TunedPlan, decisions: dict, runs: pd.DataFrame, optimizer: str, workers: int) -> Step:
    """The declared rule for one pair, read over its finished selection runs."""
    chosen = [d for d in decisions["choose"] if d["optimizer"] == optimizer and int(d["workers"]) == workers]
    if chosen:
        return Step(optimizer, workers, "chosen", (), f"base {float(chosen[0]['base']):g} chosen")
    reading = e2.read_pair(plan, decisions, runs, optimizer, workers)
    if reading.choice is None:
        return Step(optimizer, workers, "wait", (), f"{reading.waiting} of {reading.planned} selection runs "
                                                    "unfinished")
    grid, choice = reading.rates, reading.choice
    why = (f"tied {', '.join(f'{b:g}' for b in choice.tied)} of {len(grid)} rates; middle {choice.winner:g}"
           + ("" if choice.reached else " (none reached the target on both seeds: the best held-out top-1)"))
    extensions = len(grid) - len(plan.grid[optimizer])
    if choice.edges and extensions < plan.max_extensions:
        beyond = [grid[0] / 2 if edge == "low" else grid[-1] * 2 for edge in choice.edges]
        return Step(optimizer, workers, "extend", tuple({"kind": "extend", "optimizer": optimizer, "workers": workers,
                                                         "base": b} for b in beyond),
                    f"{why}: a tied rate at the grid's {' and '.join(choice.edges)} edge")
    if choice.edges:
        why += f", still at the {' and '.join(choice.edges)} edge after {extensions} extensions (possibly under-tuned)"
    return Step(optimizer, workers, "choose", ({"kind": "choose", "optimizer": optimizer, "workers": workers,
                                               "base": choice.winner},), why)


def next_steps(runs: pd.DataFrame, plan_path: Path = PLAN) -> list[Step]:
    """Every planned pair's next step, from the second edition's finished runs (analysis.steps_to_target_e2)."""
    plan = tuned.load_plan(plan_path)
    decisions = tuned.load_decisions(plan)
    steps = e2.run_steps(runs)
    return [next_step(plan, decisions, steps, optimizer, workers) for optimizer in plan.grid
            for workers in plan.workers]


@dataclass(frozen=True)
class Replay:
    """One committed decision read again from the finished selection runs: what was written, what they give now."""
    optimizer: str
    workers: int
    at: str
    written: str   # "extend 0.0125", "choose 0.025"
    read: str      # the same words, or "wait: ..." while the pair's runs of that moment are unfinished
    replaced_by: str | None = None  # the `at` of a later choice that replaces this one (it differed)

    @property
    def reproduced(self) -> bool:
        return self.read == self.written

    @property
    def differs(self) -> bool:
        """The runs give another decision, and no later choice has replaced it by theirs."""
        return not self.reproduced and not self.read.startswith("wait") and self.replaced_by is None


def audit(runs: pd.DataFrame, plan_path: Path = PLAN) -> list[Replay]:
    """Each committed decision replayed over the finished selection runs, its pair's rule read with only the
    decisions made before it (the grid as it stood then): runs lost and rerun must give the decisions again."""
    plan = tuned.load_plan(plan_path)
    decisions = tuned.load_decisions(plan)
    steps = e2.run_steps(runs)
    entries = [{**d, "kind": kind} for kind in ("extend", "choose") for d in decisions[kind]]
    moments = sorted({(d["at"], d["optimizer"], int(d["workers"])) for d in entries},
                     key=lambda m: (m[0], list(plan.grid).index(m[1]), m[2]))
    replays = []
    for at, optimizer, workers in moments:
        written = [d for d in entries if (d["at"], d["optimizer"], int(d["workers"])) == (at, optimizer, workers)]
        replaced = {d["replaces"] for d in written if "replaces" in d}  # a replacing choice is read without them
        before = {kind: [d for d in decisions[kind] if d["at"] < at and not (
            kind == "choose" and d["at"] in replaced and (d["optimizer"], int(d["workers"])) == (optimizer, workers))]
            for kind in ("extend", "choose")}
        step = next_step(plan, before, steps, optimizer, workers)
        read = decision_words(step.decisions) if step.decisions else f"{step.action}: {step.why}"
        later = next((d["at"] for d in decisions["choose"] if d.get("replaces") == at and d["optimizer"] == optimizer
                      and int(d["workers"]) == workers), None)
        replays.append(Replay(optimizer, workers, at, decision_words(written), read, later))
    return replays


def write_replacements(replays: list[Replay], plan_path: Path, declared: Path, runs_dir: Path) -> str | None:
    """Each committed choice the runs, read again, do not give (Replay.differs): a `choose` entry of the rate they
    give, replacing it (contract/tuned.py current_choices), and a dated line saying so. An extension that differs
    is not replaced here: its runs were run and read (the rule's own edge extension), and a line names it."""
    due = [r for r in replays if r.differs and r.written.startswith("choose") and r.read.startswith("choose ")]
    if not due:
        return None
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    plan = tuned.load_plan(plan_path)
    decisions = tuned.load_decisions(plan)
    started = runs_started(runs_dir)
    for r in due:
        decisions["choose"].append({"optimizer": r.optimizer, "workers": r.workers,
                                    "base": float(r.read.split()[1]), "at": now, "runs_done": started,
                                    "replaces": r.at})
    text = plan.decisions.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    plan.decisions.write_text(decisions_text(decisions, header))
    tuned.rows(plan_path)  # the file just written must plan
    said = "; ".join(f"{r.optimizer} w{r.workers}: {r.read} replaces {r.written} of {r.at}" for r in due)
    line = (f"{now}, step 1 replayed by `python -m tools exp13-next --audit --write` (tree at {commit_of_tree()}, "
            f"runs in {runs_dir}): {said}; its study runs are planned as <pair>-base<rate>, the replaced choice's "
            f"read as superseded. {started} second-edition runs started at this moment; written into "
            f"{plan.decisions.name} before any run it adds started.\n")
    with open(declared, "a") as f:
        f.write(line)
    return line


def decision_words(decisions) -> str:
    return "; ".join(f"{d['kind']} {float(d['base']):g}" for d in sorted(decisions, key=lambda d: (d["kind"],
                                                                                                     d["base"])))


def decisions_text(decisions: dict, header: str) -> str:
    """The decisions file regenerated from its data (its header comment kept): never an edit of a config's text."""
    lines = [header.rstrip("\n")]
    for kind in ("extend", "choose"):
        entries = decisions[kind]
        lines.append(f"{kind} = [" + ("" if entries else "]"))
        lines += ["    { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in e.items()) + " },"
                  for e in entries] + (["]"] if entries else [])
    return "\n".join(lines) + "\n"


def runs_started(runs_dir: Path) -> int:
    """Second-edition run folders with a manifest (each started once) under the runs root or the study's folder."""
    found = set(runs_dir.glob(f"{e2.PREFIX}*")) | set(runs_dir.glob(f"*/{e2.PREFIX}*"))  # a study's folder or its root
    return sum(1 for p in found if (p / MANIFEST).is_file())


def commit_of_tree() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def write_due(due: list[Step], plan_path: Path, declared: Path, runs_dir: Path) -> str:
    """Add the due decisions to the decisions file and a line saying so to the declared file."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    plan = tuned.load_plan(plan_path)
    decisions = tuned.load_decisions(plan)
    started = runs_started(runs_dir)
    for step in due:
        for d in step.decisions:
            decisions[d["kind"]].append({"optimizer": d["optimizer"], "workers": d["workers"], "base": d["base"],
                                         "at": now, "runs_done": started})
    text = plan.decisions.read_text() if plan.decisions.is_file() else ""
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    plan.decisions.write_text(decisions_text(decisions, header))
    tuned.rows(plan_path)  # the file just written must plan: a mistake fails here, not in the study
    said = "; ".join(f"{s.optimizer} w{s.workers}: {s.action} {bases(s)} ({s.why})" for s in due)
    line = (f"{now}, step 1 read by `python -m tools exp13-next --write` (tree at {commit_of_tree()}, runs in "
            f"{runs_dir}): {said}. {started} second-edition runs started at this moment; written into "
            f"{plan.decisions.name} before any run it adds started.\n")
    with open(declared, "a") as f:
        f.write(line)
    return line


def bases(step: Step) -> str:
    return ", ".join(f"{d['base']:g}" for d in step.decisions)


def show(steps: list[Step]) -> str:
    lines = [f"{'optimizer':9} {'workers':>7}  {'next':7}  why"]
    for s in steps:
        lines.append(f"{s.optimizer:9} {s.workers:>7}  {s.action:7}  {s.why}" + (f" -> {bases(s)}" if s.decisions else ""))
    return "\n".join(lines)


def show_audit(replays: list[Replay]) -> int:
    """One line a committed decision; 1 when the runs give any decision other than the one written."""
    for r in replays:
        said = "reproduced" if r.reproduced else (f"DIFFERS: the runs give {r.read}" if r.differs else
                                                  f"replaced by the choice of {r.replaced_by}: the runs give {r.read}"
                                                  if r.replaced_by else r.read)
        print(f"{r.optimizer} w{r.workers} {r.at}: {r.written}: {said}")
    differ = sum(r.differs for r in replays)
    replaced = sum(r.replaced_by is not None for r in replays)
    print(f"exp13-next --audit: {sum(r.reproduced for r in replays)} of {len(replays)} decision(s) reproduced, "
          f"{replaced} replaced by the rule's reading, {differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools exp13-next", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=Path("results/runs"), help="the run folders `make exp13` wrote")
    p.add_argument("--plan", type=Path, default=PLAN, help="the second edition's plan (edition2.toml)")
    p.add_argument("--declared", type=Path, default=DECLARED, help="the declared file a --write line goes to")
    p.add_argument("--write", action="store_true", help="add the due decisions and a line to the declared file "
                   "(with --audit: a choice replacing each committed choice the runs do not give)")
    p.add_argument("--audit", action="store_true", help="replay every committed decision over the finished runs")
    p.add_argument("--scale", default="local", choices=["local"], help="the second edition runs at the local scale")
    args = p.parse_args(argv)
    if not args.runs.is_dir():
        print(f"error: {args.runs} is no folder: give the runs folder `make exp13` wrote (OUT=, default results/runs)",
              file=sys.stderr)
        return 2
    try:
        read_toml(args.plan)
        runs = load_runs(args.runs)
        for problem in runs.attrs["problems"]:  # a folder left out (no identity, a copy) is said, never skipped
            print(f"problem: {problem}")
        if not len(runs) or not (runs["exp"] == e2.EXPERIMENT).any():
            print(f"exp13-next: no experiment-13 runs under {args.runs} yet: `make exp13` writes them")
        if args.audit:  # the decisions replayed instead of the next steps read (each reads the runs' steps)
            replays = audit(runs, args.plan)
            written = write_replacements(replays, args.plan, args.declared, args.runs) if args.write else None
            if written:
                print(written, end="")
                replays = audit(runs, args.plan)
            return show_audit(replays)
        steps = next_steps(runs, args.plan)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(show(steps))
    smoke = smoke_paths(runs[runs["exp"] == e2.EXPERIMENT]) if len(runs) else set()
    if smoke:
        print(f"exp13-next: {len(smoke)} smoke run(s) (QUICK=1) left out: a smoke run never chooses a rate")
    due = [s for s in steps if s.action in ("extend", "choose")]
    if args.write and due:
        print(write_due(due, args.plan, args.declared, args.runs), end="")
        print(f"exp13-next: {sum(len(s.decisions) for s in due)} decision(s) written; commit the decisions file and "
              "the declared file before `make exp13` runs them")
    elif due:
        print(f"exp13-next: {len(due)} pair(s) have decisions due; `--write` (make exp13-next WRITE=1) adds them")
    return 0
