"""The report declared once: every plug-in of analysis/experiments/ (found by a loop over the package, never named)
and what each declares (analysis/entries.py: its experiments, tables, figures, findings, questions, notebooks), the
core's own entries beside them, and make_report, which writes them all (analysis/report.py) with the web pages
(analysis/page.py) and the notebooks (analysis/notebooks.py).

    TABLES, FIGURES   the entries, in the order the report writes them: each plug-in entry in its part
                      (entries.PARTS), the core's own between the parts (tables/README.md lists them so)
    FINDINGS          every plug-in's findings: the verdict table's rows (orderings)
    inputs()          what the entries are made from (entries.Inputs), with the declared findings and experiments

Adding an experiment is a folder experiments/NN_name/ and one module analysis/experiments/<name>.py that declares
what it draws; nothing here changes.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
import time

import pandas as pd

from . import cost
from . import experiments  # the plug-ins' package: its modules are found below, never named
from . import figures as fg
from . import findings as fd
from . import page as pg
from . import readings as rd
from . import reference as rf
from . import report as rp
from . import tables as tb
from .compare import load_report_study, made_from, report_comparison
from .entries import PARTS, Drawn, Figure, Inputs, Table, numbered, of_runs, runs_read
from .machines import machine_cores, machine_of, runs_label
from .smoke import diverged_runs


def first_experiment(plugin) -> float:
    """The first experiment a plug-in declares (EXPERIMENTS), else the first its FINDINGS compare."""
    numbers = [e.number for e in getattr(plugin, "EXPERIMENTS", ())] or [
        n for f in getattr(plugin, "FINDINGS", ()) for n in f.experiments()]
    return min(numbers, default=math.inf)


#: every plug-in, in the order of its first experiment, then of its module's name
PLUGINS = tuple(sorted((importlib.import_module(f"{experiments.__name__}.{m.name}")
                        for m in pkgutil.iter_modules(experiments.__path__)),
                       key=lambda plugin: (first_experiment(plugin), plugin.__name__)))


def declared(kind: str) -> tuple:
    """Every plug-in's declarations of a kind (EXPERIMENTS, FINDINGS, QUESTIONS ...), in the plug-ins' order."""
    return tuple(d for plugin in PLUGINS for d in getattr(plugin, kind, ()))


def plugged(kind: str, part: str) -> tuple:
    """Every plug-in's TABLES or FIGURES of one part of the report (entries.PARTS)."""
    assert part in PARTS, part
    return tuple(e for e in declared(kind) if e.part == part)


def plugin_exports() -> dict:
    """name -> object of every plug-in's EXPORTS (what `import analysis` offers)."""
    return {name: getattr(plugin, name) for plugin in PLUGINS for name in getattr(plugin, "EXPORTS", ())}


EXPERIMENTS = declared("EXPERIMENTS")
FINDINGS = declared("FINDINGS")
QUESTIONS = declared("QUESTIONS")
NOTEBOOKS = dict(sorted({name: cells for p in PLUGINS for name, cells in getattr(p, "NOTEBOOKS", {}).items()}.items()))
THESIS = tuple(sorted(int(e) for e in rf.load_reference()["experiment"].unique()))  # the thesis's own experiments


def inputs(df: pd.DataFrame, ref: pd.DataFrame, source: str | None = None, cores: int | None = None, runs=None,
           link_fits=None) -> Inputs:
    """What the entries are made from, with every plug-in's findings and experiments."""
    return Inputs(df, ref, source, cores, runs, link_fits, FINDINGS, EXPERIMENTS)


def orderings(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """The verdict table of every plug-in's findings (analysis.findings.orderings)."""
    return fd.orderings(df, ref, FINDINGS)


def verdict_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """orderings.md's short table of these verdicts (analysis.readings.verdict_table)."""
    return rd.verdict_table(verdicts, FINDINGS)


# ============================================================================================ the core's own entries


def quality_runs(inputs: Inputs, entry: Table) -> pd.DataFrame:
    """Best top-1 per configuration of every experiment measured by it; runs that diverged by a declared rule are
    counted, not averaged."""
    return tb.quality_summary(inputs.df, inputs.of("quality"),
                              diverged_runs(inputs.df, fd.diverging(inputs.findings)))


def extra_experiments(inputs: Inputs, entry: Table) -> pd.DataFrame | None:
    """Every run of an experiment beyond the thesis's (numbered after its last)."""
    extra = inputs.df[(inputs.df["kind"] == "run") & (inputs.df["exp"] > max(THESIS))]
    if extra.empty:
        return None
    # a wall-clock is its machine's alone: each row names it
    measured_on = {(r.experiment, r.run): machine_of(r.path) for r in extra.itertuples()}
    table = tb.run_summary(extra)
    table.insert(table.columns.get_loc("wallclock_s"), "measured_on",
                 [measured_on[(e, r)] for e, r in zip(table["experiment"], table["run"])])
    return table


def this_machine(inputs: Inputs, entry: Table) -> pd.DataFrame | None:
    """This machine's runs beside the committed reference's, by fingerprint; only in a report of this machine's."""
    mine = inputs.runs is not None and runs_label(inputs.runs) == "this machine"
    compared = inputs.df[~inputs.df["exp"].isin(inputs.of("tokens"))]  # tokens/s: their own table's, not this one's
    return report_comparison(compared, inputs.of("throughput")) if mine else None


def ordering_notes(inputs: Inputs, frame: pd.DataFrame) -> list[str]:
    return [f"What the rows say: {line}" for line in rd.finding_summary(frame, inputs.findings)] + \
        fd.notes(inputs.findings)


# ============================================================================================ the first screen


def headline_speedups(scaling: pd.DataFrame) -> pd.DataFrame:
    """The speed-up rows of the first screen: ours, one series a framework (its per-GPU batch, scale and numerics
    with the most worker counts, ties to the larger batch: one line a framework keeps the figure readable), and the
    thesis's series of the same framework at that batch (else its largest). Empty without two worker counts of ours."""
    ours = scaling[(scaling["source"] != "thesis") & (scaling["scale"] != "thesis")].dropna(subset=["speedup"])
    keys = ["framework", "per_gpu_batch", "scale", "numerics"]
    best: dict = {}
    for key, g in ours.groupby(keys, sort=True):
        rank = (g["gpus"].nunique(), key[1])
        if g["gpus"].nunique() > 1 and rank > best.get(key[0], ((0, 0), None))[0]:
            best[key[0]] = (rank, key)
    if not best:
        return ours.iloc[0:0]
    chosen = ours[ours[keys].apply(tuple, axis=1).isin([key for _, key in best.values()])]
    thesis = scaling[scaling["source"] == "thesis"].dropna(subset=["speedup"])
    parts = [chosen]
    for framework, (_, key) in best.items():
        mine = thesis[thesis["framework"] == framework]
        batch = key[1] if (mine["per_gpu_batch"] == key[1]).any() else mine["per_gpu_batch"].max()
        parts.append(mine[mine["per_gpu_batch"] == batch])
    return pd.concat(parts, ignore_index=True)


def headline_accuracy(df: pd.DataFrame, ref: pd.DataFrame, smoke: set, experiments=EXPERIMENTS) -> pd.DataFrame:
    """The accuracy rows of the first screen: per experiment with headline words (entries.Experiment.headline) and
    worker count, the mean best top-1 minus the 1-worker baseline's (the baseline experiment's at 1 worker, else the
    experiment's own), ours and, where no run is a smoke run, the thesis's the same way. Columns: source, exp, gpus,
    difference."""
    drawn = [e.number for e in experiments if e.headline]
    baseline = next((e.number for e in experiments if e.baseline), None)
    summary = tb.quality_summary(df, drawn)
    summary = summary[summary["top1_mean"].notna()]
    if len(summary):  # one scale: the one most rows ran at (a miniature's accuracy never averaged with ImageNet's)
        summary = summary[summary["scale"] == summary["scale"].value_counts().sort_index().idxmax()]
    means = summary.groupby(["exp", "gpus"])["top1_mean"].first()
    quality = df[(df["kind"] == "run") & df["exp"].isin(drawn)] if len(df) else df
    beside = len(quality) > 0 and not quality["path"].isin(smoke).any()  # a smoke run: never beside the thesis
    rows = []
    for exp in sorted(summary["exp"].unique()):
        base = means.get((baseline, 1), means.get((exp, 1)))
        for gpus, top1 in means[exp].items() if base is not None else ():
            rows.append({"source": "ours", "exp": int(exp), "gpus": int(gpus), "difference": top1 - base})
            thesis = fd.thesis_top1(ref, int(exp), int(gpus)) - fd.thesis_top1(ref, baseline, 1)
            if beside and thesis == thesis:
                rows.append({"source": "thesis", "exp": int(exp), "gpus": int(gpus), "difference": thesis})
    return pd.DataFrame(rows, columns=["source", "exp", "gpus", "difference"])


def headline(inputs: Inputs, entry: Figure) -> Drawn | str:
    """The report's first figure (fg.headline_figure): does it scale here, and does accuracy hold; a sentence saying
    what would draw it where these runs hold neither."""
    speedups = headline_speedups(inputs.scaling)
    accuracy = headline_accuracy(inputs.df, inputs.ref, inputs.smoke, inputs.experiments)
    if speedups.empty and accuracy.empty:
        baseline = next((e.number for e in inputs.experiments if e.baseline), None)
        last = max(inputs.of("throughput"))  # the throughput experiment of several worker counts
        return (f"no throughput runs at two worker counts and no quality runs: `make exp{last}` (throughput, minutes) "
                f"or `make exp{baseline}` (quality) draws it")
    scales = set(inputs.df.loc[inputs.df["kind"] == "run", "scale"].dropna()) if len(inputs.df) else set()
    margin = fd.margins().get(scales.pop(), {}).get("points") if len(scales) == 1 else None
    words = {e.number: e.headline for e in inputs.experiments if e.headline}
    return Drawn(fg.headline_figure(speedups, accuracy, cores=inputs.cores, margin=margin, words=words),
                 inputs.source)


# ============================================================================================ the catalogue

QUALITY, THROUGHPUT = numbered(EXPERIMENTS, "quality"), numbered(EXPERIMENTS, "throughput")
THESIS_QUALITY = tuple(n for n in QUALITY if n in THESIS)
READ_BY_FINDINGS = tuple(sorted(set(THESIS_QUALITY) | {n for f in FINDINGS for n in f.experiments()}))
#: an experiment whose runs others compare with without training them again -> those others
REUSED = {n: tuple(e.number for e in EXPERIMENTS if e.reuses == n)
          for n in dict.fromkeys(e.reuses for e in EXPERIMENTS if e.reuses)}
TABLES = (
    *plugged("TABLES", "thesis"), *plugged("TABLES", "derived"),
    Table("runs", "", (), of_runs(tb.run_summary), "Every run found",
          ("status 'running' with no final record: a half-written run.",)),
    Table("quality_summary", "", THESIS_QUALITY, quality_runs,
          "Best validation accuracy per configuration (all quality experiments)"),
    Table("orderings", "Tables 10-15", READ_BY_FINDINGS, lambda inputs, entry: inputs.verdicts,
          "The thesis's three quality findings: 90 % intervals against a declared margin", ordering_notes,
          verdict_table),
    Table("throughput_summary", "", THROUGHPUT, of_runs(tb.throughput_summary), "Throughput per configuration"),
    Table("study_times", "", tuple(e.number for e in EXPERIMENTS if e.measure not in ("throughput", "tokens")),
          of_runs(cost.local_study_times),
          "Local quality studies: measured run times and the study's wall-clock at JOBS=2",
          cost.study_time_notes(REUSED)),
    Table("extra_experiments", "", (), extra_experiments, "Runs of experiments beyond the thesis's nine"),
    *plugged("TABLES", "beyond"),
    Table("this_machine_vs_reference", "", (), this_machine,
          "This machine's runs, the committed reference's (by machine) and the thesis's"),
    *plugged("TABLES", "appendix"),
)
FIGURES = (
    Figure("headline", "", THROUGHPUT + tuple(e.number for e in EXPERIMENTS if e.headline), headline,
           "Speed-up and accuracy against workers, the thesis's beside them"),
    *(e for part in PARTS for e in plugged("FIGURES", part)),
)
CATALOGUE = pg.Catalogue.of(TABLES, FIGURES, runs_read, QUESTIONS, FINDINGS)


def figure(name: str) -> Figure:
    """The entry of figures/<name>."""
    return next(f for f in FIGURES if f.name == name)


def make_report(runs=None, out=None, logs=None, notebooks: bool = True, quiet: bool = False) -> dict:
    """Regenerate every table and figure, the web pages and (optionally) the executed notebooks into `out`, cleared
    first (analysis.report.prepare). Returns what was done. runs: a runs root; by default this machine's
    results/runs, or the committed reference when that is empty. out: by default report_folder(runs)."""
    t0 = time.perf_counter()
    runs, origin, out = rp.prepare(runs, out, pg.page_names(QUESTIONS))
    df = load_report_study(runs, logs)
    made = inputs(df, rf.load_reference(), made_from(df, runs), machine_cores(runs), runs, rp.link_fits_for(runs))
    info = rp.write_report(made, out, CATALOGUE, NOTEBOOKS if notebooks else {}, logs,
                           rp.frozen_for(runs, declared("FROZEN")))
    info["seconds"] = round(time.perf_counter() - t0, 2)
    if not quiet:
        rp.say(info, runs, origin)
    return info
