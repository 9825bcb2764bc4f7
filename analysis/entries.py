"""What the report's catalogue is made of: a table or figure entry, a drawn figure, and an experiment's epoch rows.
The core's entries (analysis/catalogue.py) and each experiment's own (analysis/experiments/*.py, the plug-ins)
are declared with these, so a plug-in needs nothing of the catalogue that lists it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import pandas as pd

#: the line a figure carries when it draws the thesis's values only: never "Made from N runs (this machine)"
THESIS_SOURCE = "Made from the thesis's values (no runs)."


def thesis_source(entry) -> str:
    """The line of an entry made from the thesis's own tables alone, naming them."""
    return f"Made from the thesis's {entry.thesis} (no runs)."


def epoch_rows(df: pd.DataFrame, exp: int, **where) -> pd.DataFrame:
    """Experiment exp's epoch records, where each column named in `where` has the value given."""
    e = df[(df["kind"] == "epoch") & (df["exp"] == exp)]
    for k, v in where.items():
        e = e[e[k] == v]
    return e


class Drawn(NamedTuple):
    figure: object  # a matplotlib Figure
    source: str | None  # the line it carries: which runs, or THESIS_SOURCE


@dataclass(frozen=True)
class Table:
    name: str  # tables/<name>.csv and .md
    thesis: str  # the thesis's table it stands beside, "" for ours
    experiments: tuple[int, ...]  # the experiments whose runs it reads
    make: Callable  # make(inputs, entry) -> DataFrame, or None where there is nothing to write
    title: str | None = None
    notes: tuple | Callable = ()  # the lines under it, or notes(inputs, frame) -> those lines
    shown: Callable | None = None  # shown(frame): a shorter table for the .md (the .csv keeps every column)
    options: dict = field(default_factory=dict)  # the maker's own settings
    thesis_only: bool = False  # made from the thesis's values alone: its line names them, never the runs
    reads: Callable | None = None  # reads(df) -> mask of its rows, where it reads one edition of its experiments
    needs: str = ""  # what its runs need before `make expN` (e.g. make setup-tf): the page says it where none ran


@dataclass(frozen=True)
class Figure:
    name: str  # figures/<name>.png and .pdf
    thesis: str  # the thesis's figure (or values) it redraws, "" for ours
    experiments: tuple[int, ...]  # the experiments whose runs it draws
    make: Callable  # make(inputs, entry) -> Drawn, a sentence why not drawn, or None
    title: str = ""  # {warmupN}: experiment N's warm-up in words (warmup_phrase)
    options: dict = field(default_factory=dict)  # the maker's own settings: layout, rows, framework ...
    reads: Callable | None = None  # as Table's: the rows of one edition, so its runs line counts those alone
    needs: str = ""  # as Table's
