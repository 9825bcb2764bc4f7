"""The plug-in API: what an experiment's plug-in (analysis/experiments/<name>.py) declares, and what its makers are
handed. The catalogue (analysis/catalogue.py) finds every plug-in, lists what each declares beside the core's own
entries, and builds the Inputs the makers read; nothing here names an experiment.

A plug-in module may declare
    EXPERIMENTS  its experiments (Experiment: how the core reads their runs)
    TABLES, FIGURES  its catalogue entries (Table, Figure), placed in the report by their `part`
    FINDINGS     its findings (Finding): the verdict table's rows, each a comparison of two sides' runs (Runs)
    QUESTIONS    its research questions' pages (analysis.page.Question)
    NOTEBOOKS    its notebooks: file name -> cells (analysis.notebooks)
    EXPORTS      the names `import analysis as an` offers (an.<name>), e.g. for the notebooks' cells

    Entry makers: make(inputs, entry) returns a table (a DataFrame) or a figure (Drawn), a sentence saying why it
    is not drawn (listed under "Not drawn"), or None (nothing to write, nothing to say).
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pandas as pd

from . import findings as fd
from . import tables as tb
from .smoke import smoke_paths

#: the line a figure carries when it draws the thesis's values only: never "Made from N runs (this machine)"
THESIS_SOURCE = "Made from the thesis's values (no runs)."
#: the parts of the report a plug-in's entry goes in, in the order the report writes them (the catalogue places its
#: own entries between them): the thesis's tables and figures redrawn; what re-derives them; an experiment beyond
#: the thesis's; what re-reads the thesis's experiments beyond what it drew
PARTS = ("thesis", "derived", "beyond", "appendix")


def thesis_source(entry) -> str:
    """The line of an entry made from the thesis's own tables alone, naming them."""
    return f"Made from the thesis's {entry.thesis} (no runs)."


# ============================================================================================ declarations


@dataclass(frozen=True)
class Experiment:
    """What the core needs to know of one experiment: how its runs are measured, and its place in the headline."""
    number: int  # NN of experiments/NN_name/
    # "throughput" (images/s: the thesis's throughput tables, the scaling table and its figure read these runs),
    # "quality" (best top-1), "tokens" (a plug-in workload's tokens/s, read by its own entries alone: its samples
    # are no images, so no images/s table may average them in) or "own" (read by its own entries alone)
    measure: str
    headline: str = ""  # its words in the headline's accuracy panel ("": not drawn there)
    baseline: bool = False  # its 1-worker runs are the baseline every quality experiment's loss is measured from
    reuses: int | None = None  # the experiment whose runs it compares with but does not train again (its baseline)


@dataclass(frozen=True)
class Divergence:
    """A reading rule: a run diverged when its last epoch's training loss is not finite or above `share` of its
    first epoch's; such a run is labelled, left out of the means and counted on its own (`diverged`)."""
    share: float
    declared: str  # when and how the rule came, as the verdict table's note says it


@dataclass(frozen=True)
class Runs:
    """One side of a comparison: an experiment's runs (those of its name pattern), at a worker count."""
    experiment: int
    workers: int | str = "each"  # a count; "each": every count; "fewest"; "more": each count above the fewest
    names: str = ""  # a regular expression the run names match ("": every run)
    diverged: Divergence | None = None  # the rule its runs are read by, if one was declared


@dataclass(frozen=True)
class Comparison:
    treated: Runs
    control: Runs
    against: str  # the row's `against` column; {workers}: the control's worker count


@dataclass(frozen=True)
class Measure:
    """What a finding's rows compare: a number a run, which way is better, and the margin it is read against."""
    name: str  # in words, as the notes say it
    unit: str  # of its differences and margin
    column: str  # the run's number the verdict reads (analysis/findings.py RUN_MEASURES: a column a run)
    final_column: str  # the run's last epoch's, compared beside it (final_*)
    higher_is_better: bool = True
    margins: dict | None = None  # {scale: margin in unit}, declared with the finding; None: experiments/scales.toml's
    margin_reason: str = ""  # why that margin, as the notes say it (with margins)
    decimals: int = 2  # of the differences the verdict table prints


#: the thesis's findings' measure: best validation top-1, percentage points, the scale's margin (scales.toml)
BEST_TOP1 = Measure("best validation top-1 (percent)", "points", "best_val_top1", "final_top1")


@dataclass(frozen=True)
class Finding:
    """A finding the verdict table tests: a row per comparison and group of its treated runs, the mean of its
    measure over the treated runs minus the control's with a 90 % interval, against the declared margin."""
    name: str  # the `finding` column
    claim: str  # the finding in words
    holds: str  # when a row supports it: "worse", "not worse" (the interval's low end above -margin), "equivalent"
    comparisons: tuple[Comparison, ...]
    by: tuple[str, ...] = ("gpus",)  # the treated runs' groups, a row each
    match: tuple[str, ...] = ()  # the columns the control's runs share with the row's
    family: str = ""  # the rows of a family's findings are ordered together, by experiment, then `by`
    claims_nothing: Callable[[pd.DataFrame], bool] | None = None  # true of a row's treated runs: its holds is n/a
    claims_nothing_where: str = ""  # where that is, in words
    measure: Measure = BEST_TOP1
    # a row any of whose treated runs diverged does not support it (holds `no`, p 1 in its Holm family), whatever
    # the other runs' interval says: for a rule whose every seed must train
    fails_where_diverged: bool = False

    def experiments(self) -> set[int]:
        return {side.experiment for c in self.comparisons for side in (c.treated, c.control)}


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
    part: str = "beyond"  # where the report writes it (PARTS)


@dataclass(frozen=True)
class Figure:
    name: str  # figures/<name>.png and .pdf
    thesis: str  # the thesis's figure (or values) it redraws, "" for ours
    experiments: tuple[int, ...]  # the experiments whose runs it draws
    make: Callable  # make(inputs, entry) -> Drawn, a sentence why not drawn, or None
    title: str = ""  # may hold {fields}, each filled by fill(inputs, field) (titled)
    options: dict = field(default_factory=dict)  # the maker's own settings: layout, rows, framework ...
    reads: Callable | None = None  # as Table's: the rows of one edition, so its runs line counts those alone
    needs: str = ""  # as Table's
    part: str = "beyond"  # as Table's
    fill: Callable[[Any, str], str] | None = None  # fill(inputs, field) -> the words of a {field} of the title


# ============================================================================================ what makers read


@dataclass
class Inputs:
    """What the entries are made from; what several of them need is computed once."""
    df: pd.DataFrame  # the runs (analysis.runs.load_study)
    ref: pd.DataFrame  # the thesis's values (analysis.reference.load_reference)
    source: str | None = None  # the line saying which runs: "Made from N runs in ... (this machine)."
    cores: int | None = None  # the measuring machine's cores: a local-scale scaling row's ideal line stops there
    runs: Path | None = None  # the runs folder (whether it is this machine's)
    link_fits: Path | None = None  # the cluster checks' link fits the predictions use (None: the advisor's own)
    findings: tuple[Finding, ...] = ()  # every plug-in's, the verdicts' rows
    experiments: tuple[Experiment, ...] = ()  # every plug-in's
    made: dict = field(default_factory=dict, repr=False)  # once()'s

    @cached_property
    def scaling(self) -> pd.DataFrame:
        """The thesis's images/s beside ours: the runs of the experiments measured in images/s alone."""
        return tb.scaling_table(self.df[self.df["exp"].isin(self.of("throughput"))], self.ref)

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        return fd.orderings(self.df, self.ref, self.findings)

    @cached_property
    def smoke(self) -> set:
        return smoke_paths(self.df)

    def epochs(self, exp: int) -> pd.DataFrame:
        return epoch_rows(self.df, exp)

    def once(self, make: Callable[[Inputs], Any]) -> Any:
        """make(self), made once however many of a plug-in's entries ask for it."""
        if make not in self.made:
            self.made[make] = make(self)
        return self.made[make]

    def of(self, measure: str) -> tuple[int, ...]:
        return numbered(self.experiments, measure)


def numbered(experiments, measure: str) -> tuple[int, ...]:
    """The numbers of the experiments whose runs are measured so (Experiment.measure), in their order."""
    return tuple(e.number for e in experiments if e.measure == measure)


def titled(inputs: Inputs, entry: Figure) -> str:
    """The entry's title with each {field} filled in (Figure.fill)."""
    fields = {f for _, f, _, _ in string.Formatter().parse(entry.title) if f}
    return entry.title.format(**{f: entry.fill(inputs, f) for f in fields}) if fields else entry.title


# ============================================================================================ row selectors, makers


def epoch_rows(df: pd.DataFrame, exp: int, **where) -> pd.DataFrame:
    """Experiment exp's epoch records, where each column named in `where` has the value given."""
    e = df[(df["kind"] == "epoch") & (df["exp"] == exp)]
    for k, v in where.items():
        e = e[e[k] == v]
    return e


def every_run(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    return inputs.epochs(entry.experiments[0])


def most_workers(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """The experiment's runs at its largest worker count."""
    e = inputs.epochs(entry.experiments[0])
    return e[e["gpus"] == e["gpus"].max()] if len(e) else e


def framework_rows(frameworks) -> Callable:
    """reads(df) of an entry that holds these frameworks' runs alone, so its runs line counts those."""
    wanted = frozenset(frameworks)
    return lambda df: df["framework"].isin(wanted)


def of_runs(summary: Callable) -> Callable:
    """A maker of a table of the runs alone: summary(df), of the entry's experiments' runs where it names some
    (so a table of images/s never reads a run measured in another unit), of every run where it names none."""
    def make(inputs: Inputs, entry: Table) -> pd.DataFrame:
        df = inputs.df
        if entry.experiments and len(df):
            df = df[df["exp"].isin(entry.experiments)]
        return summary(df)
    return make


def runs_read(df: pd.DataFrame, entry) -> int:
    """How many runs an entry holds: of its experiments, and of its edition or frameworks (its reads); every run for
    an entry of no experiment; none for one of the thesis's values alone. The web page draws an entry that holds
    none as a line saying what would fill it."""
    if getattr(entry, "thesis_only", False) or not len(df):
        return 0
    runs = df[df["kind"] == "run"]
    if entry.experiments:
        runs = runs[runs["exp"].isin(entry.experiments)]
    if entry.reads and len(runs):
        runs = runs[entry.reads(runs)]
    return int(len(runs))
