"""A tuned study's plan as data: rate grids, seeds, budgets and evaluation steps in one file, step 1's decisions in
another, turned here into the [study] rows the planner expands (experiment 13's second edition).

    [study] tuned = "edition2.toml"        in an experiment's config.toml

The plan file's [tuned] table declares the workers, each optimizer's initial rate grid, the selection seeds (every
rate of every (optimizer, workers) pair, on the held-out split), the study seeds, the budget (train.epochs) and the
evaluation steps (train.eval_every) per workers. Its decisions file holds what step 1's rules decided, as data:
`extend` (one more rate beyond a grid edge) and `choose` (the pair's chosen rate: its study rows). A tool writes the
decisions (tools/exp13_next.py) and never the config's text; this module only reads them, so that every run the
study plans is declared by a committed file before it starts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.config import ConfigError, read_toml

PLAN_KEYS = ("prefix", "decisions", "per_worker_batch", "workers", "selection_seeds", "first_selection_seed",
             "study_seeds", "first_study_seed", "holdout_share", "max_extensions", "grid", "epochs", "eval_every")
DECISION_KEYS = ("optimizer", "workers", "base", "at", "runs_done")


@dataclass(frozen=True)
class TunedPlan:
    prefix: str
    scale: str  # "": planned at every scale; else the one scale its rows are planned at
    decisions: Path
    per_worker_batch: int
    workers: tuple[int, ...]
    selection_seeds: int
    first_selection_seed: int
    study_seeds: int
    first_study_seed: int
    holdout_share: float
    max_extensions: int
    grid: dict[str, tuple[float, ...]]
    epochs: dict[int, int]
    eval_every: dict[int, int]


def per_workers(where: str, table: Any, workers: tuple[int, ...]) -> dict[int, int]:
    """A {workers: whole number} table (TOML keys are strings); every planned workers count needs its entry."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table of workers = number, e.g. {{ 1 = 30 }}")
    values = {int(k): int(v) for k, v in table.items()}
    missing = [w for w in workers if w not in values]
    if missing or any(v < 1 for v in values.values()):
        raise ConfigError(f"{where} needs a whole number >= 1 for every planned workers count (missing: {missing})")
    return values


def load_plan(path: Path) -> TunedPlan:
    """The plan file's [tuned] table, checked: one clear line for a missing or wrong entry."""
    if not path.is_file():
        raise ConfigError(f"the tuned study's plan {path} does not exist: [study] tuned names a file beside config.toml")
    table = read_toml(path).get("tuned")
    if not isinstance(table, dict):
        raise ConfigError(f"{path} has no [tuned] table")
    missing = [k for k in PLAN_KEYS if k not in table]
    if missing:
        raise ConfigError(f"{path} [tuned] lacks {', '.join(missing)}")
    workers = tuple(int(w) for w in table["workers"])
    grid = {name: tuple(float(b) for b in rates) for name, rates in table["grid"].items()}
    if any(len(rates) < 3 or list(rates) != sorted(set(rates)) for rates in grid.values()):
        raise ConfigError(f"{path} [tuned.grid]: each optimizer needs at least 3 rates, rising, none twice")
    if int(table["selection_seeds"]) < 2 or int(table["study_seeds"]) < 1:
        raise ConfigError(f"{path} [tuned]: selection_seeds must be >= 2 and study_seeds >= 1")
    first_study, first_sel = int(table["first_study_seed"]), int(table["first_selection_seed"])
    if first_study < first_sel + int(table["selection_seeds"]) and first_study + int(table["study_seeds"]) > first_sel:
        raise ConfigError(f"{path} [tuned]: the study seeds overlap the selection seeds; a study seed must be new")
    return TunedPlan(str(table["prefix"]), str(table.get("scale", "")), path.parent / str(table["decisions"]),
                     int(table["per_worker_batch"]), workers, int(table["selection_seeds"]), first_sel,
                     int(table["study_seeds"]), first_study,
                     float(table["holdout_share"]), int(table["max_extensions"]), grid,
                     per_workers(f"{path} [tuned.epochs]", table["epochs"], workers),
                     per_workers(f"{path} [tuned.eval_every]", table["eval_every"], workers))


def load_decisions(plan: TunedPlan) -> dict[str, list[dict]]:
    """The decisions file's `extend` and `choose` entries (none yet when the file is absent)."""
    if not plan.decisions.is_file():
        return {"extend": [], "choose": []}
    document = read_toml(plan.decisions)
    found = {kind: list(document.get(kind, [])) for kind in ("extend", "choose")}
    for kind, entries in found.items():
        for entry in entries:
            lacking = [k for k in DECISION_KEYS if k not in entry]
            if lacking or entry["optimizer"] not in plan.grid or int(entry["workers"]) not in plan.workers:
                raise ConfigError(f"{plan.decisions}: a `{kind}` entry {entry} lacks {lacking or 'a planned pair'}")
    return found


def rates(plan: TunedPlan, decisions: dict[str, list[dict]], optimizer: str, workers: int) -> list[float]:
    """A pair's rates: its optimizer's grid and the extensions decided for it, rising."""
    extra = [float(e["base"]) for e in decisions["extend"]
             if e["optimizer"] == optimizer and int(e["workers"]) == workers]
    return sorted(set(plan.grid[optimizer]) | set(extra))


def pair_row(plan: TunedPlan, optimizer: str, workers: int, base: float) -> dict[str, Any]:
    """What every row of a pair holds: the plan's scale where it names one (the planner plans it there alone), the
    optimizer, rate, workers, budget and evaluation steps."""
    return {**({"scale": plan.scale} if plan.scale else {}), "optim.name": optimizer, "lr.base": base,
            "train.workers": workers, "train.epochs": plan.epochs[workers],
            "train.eval_every": plan.eval_every[workers]}


def rows(path: Path) -> list[dict[str, Any]]:
    """Every row the plan and its decisions make: each pair's selection runs (grid and extensions), then the study
    rows of the pairs whose rate is chosen. A pair chosen twice is refused (one choice a pair)."""
    plan = load_plan(path)
    decisions = load_decisions(plan)
    chosen = {pair: study_name(plan, *pair, entry) for pair, entry in current_choices(plan, decisions).items()}
    found = [{"run": f"{plan.prefix}tune-{opt}-w{w}-base{base:g}", **pair_row(plan, opt, w, base),
              "data.holdout_share": plan.holdout_share, "seeds": plan.selection_seeds,
              "first_seed": plan.first_selection_seed}
             for opt in plan.grid for w in plan.workers for base in rates(plan, decisions, opt, w)]
    return found + [{"run": name, **pair_row(plan, opt, w, base), "seeds": plan.study_seeds,
                     "first_seed": plan.first_study_seed} for (opt, w), (name, base) in chosen.items()]


def current_choices(plan: TunedPlan, decisions: dict[str, list[dict]]) -> dict[tuple[str, int], dict]:
    """Each chosen pair's standing `choose` entry. A pair is chosen once, unless a later entry `replaces` the
    earlier (its `at`): a decision the declared rule, read again, does not give (issue 62's re-read). The replaced
    entry's runs stay where they are, read as superseded; any other second choice is refused."""
    chosen: dict[tuple[str, int], dict] = {}
    for entry in decisions["choose"]:
        pair = (entry["optimizer"], int(entry["workers"]))
        if pair in chosen and entry.get("replaces") != chosen[pair]["at"]:
            raise ConfigError(f"{plan.decisions}: {pair[0]} at {pair[1]} workers is chosen twice; one choice a pair "
                              f"(a later choice names the one it replaces: replaces = \"{chosen[pair]['at']}\")")
        if pair not in chosen and "replaces" in entry:
            raise ConfigError(f"{plan.decisions}: {pair[0]} at {pair[1]} workers replaces {entry['replaces']!r}, "
                              "which chose nothing for it")
        chosen[pair] = entry
    return chosen


def study_name(plan: TunedPlan, optimizer: str, workers: int, entry: dict) -> tuple[str, float]:
    """A chosen pair's study row name and rate: <prefix><opt>-w<W>; a replacing choice's carries its rate
    (<prefix><opt>-w<W>-base<b>), so that its runs never share a folder name with the replaced choice's."""
    base = float(entry["base"])
    return f"{plan.prefix}{optimizer}-w{workers}" + (f"-base{base:g}" if "replaces" in entry else ""), base
