"""Experiment 13's next rows, read from its finished tuning runs by the declared rules (its README): per (optimizer,
workers), wait while a tuning run of that pair is unfinished; a winner at an edge of its rates gets one more rate a
factor 2 beyond that edge (at most EDGE_EXTENSIONS per pair); otherwise the pair's study rows (its chosen rate,
seeds 1-3) are due. `--write` adds the due rows to config.toml and a dated line to the declared file, so that both
are committed before any of those runs starts; rows already in config.toml are never written twice.

    python -m tools exp13-next [--runs results/runs] [--write]      (make exp13-next [WRITE=1])
"""
from __future__ import annotations

import argparse
import sys
import datetime as dt
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import steps_to_target as st
from contract.config import SCALES
from analysis.runs import load_runs
from analysis.smoke import smoke_paths

REPO = Path(__file__).resolve().parents[1]
DECLARED = REPO / "experiments" / "13_steps_to_target" / "declared_2026-11-25-exp13.txt"
TUNING_KEYS = ("optim.name", "lr.base", "train.workers", "train.epochs", "data.holdout_share")
STUDY_KEYS = ("optim.name", "lr.base", "train.workers", "train.epochs")


@dataclass(frozen=True)
class Step:
    """What one (optimizer, workers) pair needs next: its action, the rows that action adds, and why."""
    optimizer: str
    workers: int
    action: str             # "wait", "edge", "study" (rows due), "written" (its study rows are in the config)
    rows: tuple[dict, ...]  # config rows to add (edge: one tuning row; study: one row of seeds)
    why: str


def tuning_name(optimizer: str, workers: int, base: float) -> str:
    return f"tune-{optimizer}-w{workers}-base{base:g}"


def study_name(optimizer: str, workers: int) -> str:
    return f"{optimizer}-w{workers}"


def edge_row(template: dict, chosen: pd.Series, scale: str) -> dict:
    """One more tuning rate a factor 2 beyond the edge the winner sits on (the declared edge rule), planned at the
    scale whose runs asked for it."""
    base = float(chosen["chosen_base"]) / 2 if chosen["at_edge"] == "low" else float(chosen["chosen_base"]) * 2
    row = {key: template[key] for key in TUNING_KEYS if key in template}
    row["lr.base"] = base
    return {"run": tuning_name(template["optim.name"], int(template["train.workers"]), base), "scale": scale, **row}


def study_row(template: dict, chosen: pd.Series, scale: str) -> dict:
    """The pair's study: its chosen rate on the whole training set, seeds 1-3 (never the tuning seed 0), planned
    at the scale whose step 1 chose that rate alone."""
    row = {key: template[key] for key in STUDY_KEYS}
    row["lr.base"] = float(chosen["chosen_base"])
    return {"run": study_name(template["optim.name"], int(template["train.workers"])), "scale": scale, **row,
            "seeds": st.STUDY_SEEDS, "first_seed": st.FIRST_STUDY_SEED}


def next_step(pair: tuple[str, int], rows: list[dict], finished: pd.DataFrame, written: set[str],
              scale: str) -> Step:
    """The declared rule for one pair, read over its finished tuning runs at `scale`."""
    optimizer, workers = pair
    if study_name(optimizer, workers) in written:
        return Step(optimizer, workers, "written", (), "its study rows are in config.toml")
    done = finished[(finished["optimizer"] == optimizer) & (finished["workers"] == workers)]
    waiting = [r["run"] for r in rows if float(r["lr.base"]) not in set(done["base"])]
    if waiting:
        return Step(optimizer, workers, "wait", (), f"{len(waiting)} of {len(rows)} tuning runs unfinished")
    chosen = st.selection(done).iloc[0]
    reached = (f"{chosen['steps']:,.0f} steps to the target" if chosen["reached"]
               else "none reached the target: the best held-out top-1")
    why = f"base {chosen['chosen_base']:g} of {len(rows)} rates ({reached})"
    extensions = len(rows) - st.GRID_RATES
    if chosen["at_edge"] and extensions < st.EDGE_EXTENSIONS:
        return Step(optimizer, workers, "edge", (edge_row(rows[0], chosen, scale),),
                    f"{why}: at the grid's {chosen['at_edge']} edge, extension {extensions + 1} of "
                    f"{st.EDGE_EXTENSIONS}")
    if chosen["at_edge"]:
        why += f", still at the {chosen['at_edge']} edge after {extensions} extensions (possibly under-tuned)"
    return Step(optimizer, workers, "study", (study_row(rows[0], chosen, scale),), why)


def next_steps(runs: pd.DataFrame, rows: list[dict], scale: str = "local") -> list[Step]:
    """Every planned pair's next step at `scale`, from the runs' frame (analysis.runs) and the config's extra rows
    (those another scale's step 1 wrote are not this scale's)."""
    rows = [r for r in rows if r.get("scale", scale) == scale]
    written = {r["run"] for r in rows if not r["run"].startswith("tune-")}
    steps = st.run_steps(runs)
    finished = steps[steps["tuning"].astype(bool) & (steps["scale"] == scale)] if len(steps) else steps
    return [next_step(pair, pair_rows, finished, written, scale)
            for pair, pair_rows in st.tuning_pairs(rows).items()]


def toml_value(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return repr(float(value)) if isinstance(value, float) else repr(int(value))


def toml_row(row: dict) -> str:
    cells = ", ".join(f'{key if key.isidentifier() else chr(34) + key + chr(34)} = {toml_value(value)}'
                      for key, value in row.items())
    return f"    {{ {cells} }},"


def insert_rows(text: str, rows: list[dict], heading: str) -> str:
    """config.toml's text with the rows added at the end of [study] extra, under a comment line."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("extra = ["))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip() == "]")
    block = [f"    # {heading}\n"] + [toml_row(row) + "\n" for row in rows]
    return "".join(lines[:end] + block + lines[end:])


def commit_of_tree() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def write_due(due: list[Step], config: Path, declared: Path, runs: Path) -> str:
    """Add the due rows to config.toml and say so, with when and from what, in the declared file."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    rows = [row for step in due for row in step.rows]
    heading = f"added {now} by `python -m tools exp13-next --write` from step 1's finished runs (declared file)"
    config.write_text(insert_rows(config.read_text(), rows, heading))
    said = "; ".join(f"{s.optimizer} w{s.workers}: {s.action} row {', '.join(r['run'] for r in s.rows)}, {s.why}"
                     for s in due)
    line = (f"{now}, step 1 read by `python -m tools exp13-next --write` (tree at {commit_of_tree()}, runs in "
            f"{runs}): {said}. Written into config.toml before any of these runs started.\n")
    with open(declared, "a") as f:
        f.write(line)
    return line


def show(steps: list[Step]) -> str:
    lines = [f"{'optimizer':9} {'workers':>7}  {'next':7}  why"]
    for s in steps:
        names = ", ".join(r["run"] for r in s.rows)
        lines.append(f"{s.optimizer:9} {s.workers:>7}  {s.action:7}  {s.why}" + (f" -> {names}" if names else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools exp13-next", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=Path("results/runs"), help="the run folders step 1 wrote")
    p.add_argument("--config", type=Path, default=st.CONFIG, help="experiment 13's config.toml")
    p.add_argument("--declared", type=Path, default=DECLARED, help="the declared file a --write line goes to")
    p.add_argument("--write", action="store_true", help="add the due rows to the config and a line to the declared file")
    p.add_argument("--scale", default="local", choices=SCALES, help="the scale whose step 1 is read (its rows carry it)")
    args = p.parse_args(argv)
    if not args.runs.is_dir():
        print(f"error: {args.runs} is no folder: give the runs folder `make exp13` wrote (OUT=, default results/runs)",
              file=sys.stderr)
        return 2
    runs = load_runs(args.runs)
    for problem in runs.attrs["problems"]:  # a folder left out (no identity, a copy) is said, never skipped silently
        print(f"problem: {problem}")
    if not len(runs) or not (runs["exp"] == st.EXPERIMENT).any():
        print(f"exp13-next: no experiment-13 runs under {args.runs} yet: `make exp13` writes them")
    steps = next_steps(runs, st.planned_rows(args.config, args.scale), args.scale)
    print(show(steps))
    smoke = smoke_paths(runs[runs["exp"] == st.EXPERIMENT]) if len(runs) else set()
    if smoke:
        print(f"exp13-next: {len(smoke)} smoke run(s) (QUICK=1) left out: a smoke run never chooses a rate")
    due = [s for s in steps if s.action in ("edge", "study")]
    if args.write and due:
        print(write_due(due, args.config, args.declared, args.runs), end="")
        print(f"exp13-next: {sum(len(s.rows) for s in due)} row(s) written; commit config.toml and the declared "
              "file before they run")
    elif due:
        print(f"exp13-next: {len(due)} pair(s) have rows due; `--write` (make exp13-next WRITE=1) adds them")
    return 0
