"""The report declared once: every table and figure, what draws it, from which experiments, beside which thesis
values. `python -m analysis report` writes each entry (analysis/report.py); the notebooks' helpers
(analysis/nbhelpers.py) draw with the same figure functions and read the same experiments from here.

    TABLES, FIGURES   the entries, in the order the report writes them (its index, tables/README.md, lists them so)
    Inputs            what every entry is made from: the runs' DataFrame, the thesis's values, the runs' line

An entry is a name (the file: tables/<name>.csv|md, figures/<name>.png|pdf), the thesis's table or figure it stands
beside ("" where the thesis has none), the experiments it reads, a title, and its maker: make(inputs, entry) returns
a table (a DataFrame) or a figure (Drawn), a sentence saying why it is not drawn (listed under "Not drawn"), or None
(nothing to write, nothing to say). The makers below only choose the rows; the drawing is a function of
analysis/figures.py or analysis/tables.py. The entries of the thesis's experiments are declared here; an experiment
beyond the thesis declares its own in its plug-in (analysis/experiments/<name>.py: TABLES, FIGURES), which this
catalogue lists where `plugged` stands, naming none of them. Adding a table or figure is one entry,
e.g. experiment 5's error curves at its largest worker count, a panel per configuration:

    Figure("exp5_error_max_gpus", "", (5,), errors, "Experiment 5: linear scaling, no warm-up, most GPUs",
           {"rows": most_workers, "layout": "grid"}),
"""
from __future__ import annotations

import importlib
import pkgutil
import string
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .advisor import runs as advisor_runs  # noqa: E402
from . import cost  # noqa: E402
from . import experiments  # noqa: E402 -- the plug-ins' package: its modules are found below, never named
from . import figures as fg  # noqa: E402
from . import flags as fl  # noqa: E402
from . import findings as fd  # noqa: E402
from . import link as lk  # noqa: E402
from . import reference as rf  # noqa: E402
from . import tables as tb  # noqa: E402
from .compare import report_comparison
from .machines import machine_of, runs_label  # noqa: E402
from .entries import THESIS_SOURCE, Drawn, Figure, Table, epoch_rows, thesis_source  # noqa: E402, F401
from .readings import finding_summary, verdict_table  # noqa: E402
from .smoke import smoke_paths  # noqa: E402

#: every plug-in (analysis/experiments/<name>.py), in the order of its module's name
PLUGINS = tuple(importlib.import_module(f"{experiments.__name__}.{m.name}")
                for m in sorted(pkgutil.iter_modules(experiments.__path__), key=lambda m: m.name))


def plugged(kind: str) -> tuple:
    """Every plug-in's TABLES or FIGURES, in the plug-ins' order."""
    return tuple(e for plugin in PLUGINS for e in getattr(plugin, kind, ()))


def plugin_exports() -> dict:
    """name -> object of every plug-in's EXPORTS (what `import analysis` offers)."""
    return {name: getattr(plugin, name) for plugin in PLUGINS for name in getattr(plugin, "EXPORTS", ())}


SCALE_NOTE = ("Rows whose scale is not 'thesis' come from runs at another scale (config.json \"scale\"): their "
              "numbers are not comparable with the thesis's and are not placed beside them.")
#: the quality experiments (Tables 10-15, Figures 18-30): their error curves and learning-rate schedules
QUALITY_EXPERIMENTS = tuple(rf.QUALITY_SETTINGS)
THROUGHPUT_NOTES = ("thesis_images_per_s: the thesis's value; ours_thesis_formula: per-GPU batch x GPUs / "
                    "running-mean batch time at batch 199; ours_steady: the same without the first warm-up batches; "
                    "the speed-ups divide each by our 1-GPU run's.", SCALE_NOTE)
PLACEMENT_NOTE = ("threads_per_rank, cpus_per_rank: what each rank ran with (manifest.json's per-rank placement; "
                  "empty where the ranks differed or the runs predate the record); nodes of our own rows: the hosts "
                  "their ranks ran on.")
FLAG_NOTE = ("flag: why a row's number does not measure what it claims, with the reason (analysis/flags.py): a "
             "speed-up above its processes (impossible: its baseline was slowed), a baseline of other threads a "
             "rank, a run whose timed steps did not have their CPUs alone (host busy, CPU short: docs/training.md); "
             "empty for a clean row and for runs that predate the record.")
QUALITY_NOTES = ("ours_top1/ours_top5: best validation accuracy (percent), mean over the configuration's completed "
                 "runs (seeds), ± sample std; n_runs: how many; diverged or half-written runs are counted in status, "
                 "not averaged.", SCALE_NOTE)
#: experiment -> the thesis's tables of it, turned round: table -> its experiment
TABLE_EXPERIMENT = {t: e for e, tables in rf.EXPERIMENT_TABLES.items() for t in tables}


@dataclass
class Inputs:
    """What the entries are made from; what several of them need is computed once."""
    df: pd.DataFrame  # the runs (analysis.runs.load_study)
    ref: pd.DataFrame  # the thesis's values (analysis.reference.load_reference)
    source: str | None = None  # the line saying which runs: "Made from N runs in ... (this machine)."
    cores: int | None = None  # the measuring machine's cores: a local-scale scaling row's ideal line stops there
    runs: Path | None = None  # the runs folder (whether it is this machine's)
    link_fits: Path = advisor_runs.advisor.CHECK_ROOT  # the cluster checks' link fits the predictions use

    @cached_property
    def scaling(self) -> pd.DataFrame:
        return tb.scaling_table(self.df, self.ref)

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        return fd.orderings(self.df, self.ref)

    @cached_property
    def links(self) -> pd.DataFrame:
        return lk.link_table(self.df)

    @cached_property
    def smoke(self) -> set:
        return smoke_paths(self.df)

    @cached_property
    def utilisation(self) -> tuple[list, dict[str, str]]:
        return thesis_utilisation(self.df)

    def epochs(self, exp: int) -> pd.DataFrame:
        return epoch_rows(self.df, exp)


def warmup_phrase(data: pd.DataFrame, exp: int) -> str:
    """'stepping warm-up 4 of 72 epochs (thesis: 5 of 90)': the runs' own warm-up beside the thesis's, so a title
    never says the thesis's 5 epochs over curves that warmed up for 4 of 72."""
    thesis_kind, thesis_n = rf.QUALITY_SETTINGS[exp]["warmup"].rsplit("-", 1)
    e = data[data["exp"] == exp]
    ours = {(w, ep) for w, ep in zip(e["warmup"], e["epochs"]) if isinstance(w, str) and w != "none"}
    if len(ours) == 1:
        (warmup, epochs), = ours
        kind, n = warmup.rsplit("-", 1)
        return f"{kind} warm-up {n} of {int(epochs)} epochs (thesis: {thesis_n} of {rf.THESIS_EPOCHS})"
    return f"{thesis_kind} warm-up ({thesis_n} of {rf.THESIS_EPOCHS} epochs in the thesis)"


def schedule_title(df: pd.DataFrame, exp: int) -> str:
    """An experiment's schedule in words: the thesis's label, with the runs' own warm-up where they warmed up."""
    label = rf.QUALITY_SETTINGS[exp]["label"]
    if rf.QUALITY_SETTINGS[exp]["warmup"] == "none" or df[(df["kind"] == "schedule") & (df["exp"] == exp)].empty:
        return label
    return f"linear scaling, {warmup_phrase(df[df['kind'] == 'schedule'], exp)}" + (", per-GPU batch smaller"
                                                                                    if exp == 7 else "")


def titled(inputs: Inputs, entry: Figure) -> str:
    """The entry's title with each {warmupN} filled in from experiment N's runs."""
    fields = {f for _, f, _, _ in string.Formatter().parse(entry.title) if f}
    return entry.title.format(**{f: warmup_phrase(inputs.epochs(int(f.removeprefix("warmup"))),
                                                  int(f.removeprefix("warmup"))) for f in fields})


def baseline_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Experiment 5's 1-worker runs: the baseline experiments 6-9 are compared with (the thesis's 1-GPU curve)."""
    return epoch_rows(df, 5, gpus=1)


def exp7_peers(e6: pd.DataFrame, e7: pd.DataFrame) -> pd.DataFrame:
    """Experiment 6's runs beside experiment 7's: same worker count, framework, scale and numerics (Figure 26)."""
    on = ["gpus", "framework", "scale", "numerics"]
    return e6.merge(e7[on].drop_duplicates(), on=on, how="inner")


def every_run(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    return inputs.epochs(entry.experiments[0])


def most_workers(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """The experiment's runs at its largest worker count (Figure 21)."""
    e = inputs.epochs(entry.experiments[0])
    return e[e["gpus"] == e["gpus"].max()] if len(e) else e


def beside_baseline(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """The last experiment's runs with experiment 5's 1-worker baseline as their 1-worker curve (Figures 24, 28)."""
    runs = inputs.epochs(entry.experiments[-1])
    return pd.concat([baseline_runs(inputs.df), runs]) if len(runs) else runs


def smaller_batch_beside(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """Experiment 7's runs and experiment 6's at the same workers (Figure 26); none without experiment 7's."""
    larger, smaller = (inputs.epochs(e) for e in entry.experiments)
    return pd.concat([smaller, exp7_peers(larger, smaller)]) if len(smaller) else smaller


def longer_warmup_beside(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """Experiment 8's runs at experiment 9's worker counts, and 9's (Figure 30); none without experiment 9's."""
    shorter, longer = (inputs.epochs(e) for e in entry.experiments)
    if longer.empty:
        return longer
    return pd.concat([shorter.iloc[0:0], shorter[shorter["gpus"].isin(longer["gpus"].unique())], longer])


def schedules_frame(df: pd.DataFrame, experiments=QUALITY_EXPERIMENTS) -> pd.DataFrame:
    """Schedules of the experiments: from runs' config.json resolved.schedule, else the thesis's formulas."""
    parts = []
    s = df[(df["kind"] == "schedule") & df["exp"].isin(list(experiments))]
    for exp in experiments:
        mine = s[s["exp"] == exp]
        if len(mine):
            keys = ["framework", "gpus", "global_batch", "lr", "warmup", "epochs", "scale"]
            for key, g in mine.groupby(keys, dropna=False):
                g = g.drop_duplicates("epoch")
                k = dict(zip(keys, key))  # the panel's title says the warm-up and scale: the label only the run
                lab = f"{fg.curve_label({**k, 'warmup': None, 'scale': None}).split(' (')[0]}, lr={k['lr']:g}"
                parts.append(pd.DataFrame({"experiment": exp, "label": lab, "epoch": g["epoch"],
                                           "lr": g["planned_lr"], "source": "run config"}))
        else:
            th = rf.thesis_schedules()
            th = th[th["experiment"] == exp]
            for (fw, gp, b, lr), g in th.groupby(["framework", "gpus", "per_gpu_batch", "target_lr"]):
                lab = f"exp {exp}: {fg.FRAMEWORK_NAME.get(fw, fw)} {gp} GPUs b={b} lr={lr:g} ({g['warmup'].iloc[0]})"
                parts.append(pd.DataFrame({"experiment": exp, "label": lab, "epoch": g["epoch"], "lr": g["lr"],
                                           "source": "thesis formula"}))
    return pd.concat(parts, ignore_index=True)


def scaling(inputs: Inputs, entry: Figure) -> Drawn:
    """Throughput and speed-up (fg.scaling_figure); a figure of the thesis's points alone says so, not 'N runs'."""
    drawn = len(fg.scaling_rows(inputs.scaling, **entry.options)[1])
    figure = fg.scaling_figure(inputs.scaling, entry.title, cores=inputs.cores, **entry.options)
    return Drawn(figure, inputs.source if drawn else THESIS_SOURCE)


def errors(inputs: Inputs, entry: Figure) -> Drawn | str:
    """Error curves (fg.quality_figure) of the rows options["rows"] picks; beside a smoke run's 2 epochs, never the
    thesis's 90-epoch marks."""
    data = entry.options["rows"](inputs, entry)
    if data.empty:
        return "no epoch records"
    marks = None if data["path"].isin(inputs.smoke).any() else inputs.ref
    return Drawn(fg.quality_figure(data, titled(inputs, entry), marks, entry.options.get("layout", "pair")),
                 inputs.source)


def utilisation(inputs: Inputs, entry: Figure) -> Drawn | str:
    """One of the thesis's utilisation figures from the runs' util records (fg.utilisation_panels)."""
    panels, skipped = inputs.utilisation
    for name, title, rows in panels:
        if name == entry.name:
            return Drawn(fg.utilisation_figure([(title, rows)], height=4), inputs.source)
    return skipped[entry.name]


def other_utilisation(inputs: Inputs, entry: Figure) -> Drawn | None:
    """A panel per experiment without a thesis utilisation figure; nothing without such runs."""
    panels = fg.other_utilisation_panels(inputs.df, {f.experiments[0] for f in THESIS_UTILISATION})
    return Drawn(fg.utilisation_figure(panels, height=3.0, title=entry.title), inputs.source) if panels else None


def schedules(inputs: Inputs, entry: Figure) -> Drawn:
    """The learning-rate schedules: the runs' own, or the thesis's formula for an experiment without runs."""
    sched = schedules_frame(inputs.df, entry.experiments)
    titles = {}
    for exp in entry.experiments:
        src = sched.loc[sched["experiment"] == exp, "source"]
        titles[exp] = f"Experiment {exp}: {schedule_title(inputs.df, exp)} ({src.iloc[0] if len(src) else ''})"
    figure = fg.lr_schedules_figure(sched, entry.experiments, titles, title=entry.title)
    from_runs = (sched["source"] == "run config").any()  # every panel the thesis's formula: no run drawn
    source = inputs.source
    if from_runs and (sched["source"] == "thesis formula").any() and source:
        source += " Panels marked 'thesis formula': the thesis's schedules."
    return Drawn(figure, source if from_runs else THESIS_SOURCE)


def steady_state(inputs: Inputs, entry: Figure) -> Drawn:
    """RQ2 from the thesis's values alone: the first batch left out of its throughput formula."""
    figure, ax = plt.subplots(figsize=(7, 4.2))
    fg.plot_steady_state(rf.rq2_steady_state(inputs.ref), ax=ax)
    return Drawn(figure, thesis_source(entry))


def link_rates(inputs: Inputs, entry: Figure) -> Drawn | str | None:
    """Throughput against the link's rate (make link-sweep's runs); where runs crossed hosts but none under a
    limited link, why not; nothing to say of runs on one host."""
    if len(inputs.links):
        return Drawn(lk.link_figure(inputs.links, entry.title), inputs.source)
    hosts = inputs.df["hosts"] if "hosts" in inputs.df else pd.Series(dtype=float)
    across = (inputs.df["kind"] == "run") & (hosts > 1)
    return "no link-sweep runs (make link-sweep, then make report OUT=results/link_sweep)" if across.any() else None


def throughput(inputs: Inputs, entry: Table) -> pd.DataFrame:
    return tb.throughput_table(inputs.df, inputs.ref, entry.options["table"])


def throughput_notes(inputs: Inputs, frame: pd.DataFrame) -> list[str]:
    """The throughput tables' notes, and a line for each comparison whose rows ran with different threads or
    CPUs a rank (the manifests' per-rank placement)."""
    flagged = frame["flag"].map(fl.text).ne("").sum() if "flag" in frame else 0
    count = [f"{flagged} row(s) flagged: read the flag column before the number."] if flagged else []
    return [*THROUGHPUT_NOTES, PLACEMENT_NOTE, FLAG_NOTE, *count, *tb.unlike_rows(frame)]


def predicted_beside_measured(inputs: Inputs, entry: Table) -> pd.DataFrame | None:
    """Experiment 3's throughput runs beside the advisor's prediction for each one's placement (none: no such runs)."""
    table = advisor_runs.prediction_table(inputs.df, check_root=inputs.link_fits)
    return table if len(table) else None


def quality(inputs: Inputs, entry: Table) -> pd.DataFrame:
    return tb.quality_table(inputs.df, inputs.ref, entry.options["table"])


def of_runs(summary: Callable) -> Callable:
    """A maker of a table of the runs alone: summary(df)."""
    return lambda inputs, entry: summary(inputs.df)


def extra_experiments(inputs: Inputs, entry: Table) -> pd.DataFrame | None:
    extra = inputs.df[(inputs.df["kind"] == "run") & (inputs.df["exp"] > max(TABLE_EXPERIMENT.values()))]
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
    return report_comparison(inputs.df) if mine else None


# ============================================================================================ the first screen
HEADLINE_QUALITY = tuple(fg.HEADLINE_EXPERIMENTS)  # naive, the linear rule, the rule with warm-up: the findings' core
TF_NEEDS = "`make setup-tf` (TensorFlow and Horovod with it), then"


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


def headline_accuracy(df: pd.DataFrame, ref: pd.DataFrame, smoke: set) -> pd.DataFrame:
    """The accuracy rows of the first screen: per quality experiment of HEADLINE_QUALITY and worker count, the mean
    best top-1 minus the 1-worker baseline's (experiment 5's at 1 worker, else the experiment's own), ours and, where
    no run is a smoke run, the thesis's the same way. Columns: source, exp, gpus, difference."""
    summary = tb.quality_summary(df)
    summary = summary[summary["exp"].isin(HEADLINE_QUALITY) & summary["top1_mean"].notna()]
    if len(summary):  # one scale: the one most rows ran at (a miniature's accuracy never averaged with ImageNet's)
        summary = summary[summary["scale"] == summary["scale"].value_counts().sort_index().idxmax()]
    means = summary.groupby(["exp", "gpus"])["top1_mean"].first()
    quality = df[(df["kind"] == "run") & df["exp"].isin(HEADLINE_QUALITY)] if len(df) else df
    beside = len(quality) > 0 and not quality["path"].isin(smoke).any()  # a smoke run: never beside the thesis
    rows = []
    for exp in sorted(summary["exp"].unique()):
        base = means.get((5, 1), means.get((exp, 1)))
        for gpus, top1 in means[exp].items() if base is not None else ():
            rows.append({"source": "ours", "exp": int(exp), "gpus": int(gpus), "difference": top1 - base})
            thesis = fd.thesis_top1(ref, int(exp), int(gpus)) - fd.thesis_top1(ref, 5, 1)
            if beside and thesis == thesis:
                rows.append({"source": "thesis", "exp": int(exp), "gpus": int(gpus), "difference": thesis})
    return pd.DataFrame(rows, columns=["source", "exp", "gpus", "difference"])


def headline(inputs: Inputs, entry: Figure) -> Drawn | str:
    """The report's first figure (fg.headline_figure): does it scale here, and does accuracy hold; a sentence saying
    what would draw it where these runs hold neither."""
    speedups = headline_speedups(inputs.scaling)
    accuracy = headline_accuracy(inputs.df, inputs.ref, inputs.smoke)
    if speedups.empty and accuracy.empty:
        return ("no throughput runs at two worker counts and no quality runs: `make exp3` (throughput, minutes) or "
                "`make exp5` (quality) draws it")
    scales = set(inputs.df.loc[inputs.df["kind"] == "run", "scale"].dropna()) if len(inputs.df) else set()
    margin = fd.margins().get(scales.pop(), {}).get("points") if len(scales) == 1 else None
    return Drawn(fg.headline_figure(speedups, accuracy, cores=inputs.cores, margin=margin), inputs.source)


def framework_rows(frameworks) -> Callable:
    """reads(df) of an entry that holds these frameworks' runs alone, so its runs line counts those (Table 7 holds
    the TensorFlow runs of experiment 3, never its PyTorch ones)."""
    wanted = frozenset(frameworks)
    return lambda df: df["framework"].isin(wanted)


def table_reads(table: int) -> Callable:
    """A throughput table's reads: the frameworks of its rows (tb.table_frameworks)."""
    return framework_rows(tb.table_frameworks(rf.table_rows(rf.load_reference(), table)))


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


def ordering_notes(inputs: Inputs, frame: pd.DataFrame) -> list[str]:
    return [f"What the rows say: {line}" for line in finding_summary(frame)] + fd.notes()


TABLES = (
    *(Table(f"table{t:02d}", f"Table {t}", (TABLE_EXPERIMENT[t],), throughput, f"Table {t}. {rf.CAPTIONS[t]}",
            throughput_notes, options={"table": t}, reads=table_reads(t),
            needs=TF_NEEDS if "TensorFlow" in rf.CAPTIONS[t] else "") for t in rf.THROUGHPUT_TABLES),
    *(Table(f"table{t:02d}", f"Table {t}", (TABLE_EXPERIMENT[t],), quality, f"Table {t}. {rf.CAPTIONS[t]}",
            (f"Numbered as its caption; the thesis's running text and list of tables call it Table "
             f"{rf.TEXT_NUMBER[t]}.",) + QUALITY_NOTES, options={"table": t}) for t in rf.QUALITY_TABLES),
    Table("scaling", "Tables 1-9", (1, 2, 3), lambda inputs, entry: inputs.scaling,
          "Throughput, speed-up over 1 GPU, scaling efficiency and 90-epoch wall-clock estimate"),
    Table("rq2_steady_state", "Tables 5/6 and 8/9, Figures 12-13", (), lambda inputs, entry: rf.rq2_steady_state(
          inputs.ref), "RQ2: Tables 5/6 and 8/9 with the first training batch (Figures 12-13) left out",
          ("steady_images_per_s = B*G / ((200 * B*G / thesis - first_batch_s) / 199); empty where the thesis "
           "prints no first-batch time.",), thesis_only=True),
    Table("runs", "", (), of_runs(tb.run_summary), "Every run found",
          ("status 'running' with no final record: a half-written run.",)),
    Table("quality_summary", "", QUALITY_EXPERIMENTS, of_runs(tb.quality_summary),
          "Best validation accuracy per configuration (all quality experiments)"),
    Table("orderings", "Tables 10-15", QUALITY_EXPERIMENTS + (12,), lambda inputs, entry: inputs.verdicts,
          "The thesis's three quality findings: 90 % intervals against a declared margin", ordering_notes,
          verdict_table),
    Table("throughput_summary", "", (1, 2, 3), of_runs(tb.throughput_summary), "Throughput per configuration"),
    Table("study_times", "", QUALITY_EXPERIMENTS + (10, 11, 12, 13), of_runs(cost.local_study_times),
          "Local quality studies: measured run times and the study's wall-clock at JOBS=2", cost.STUDY_TIME_NOTES),
    Table("extra_experiments", "", (), extra_experiments, "Runs of experiments beyond the thesis's nine"),
    *plugged("TABLES"),
    Table("this_machine_vs_reference", "", (), this_machine,
          "This machine's runs, the committed reference's (by machine) and the thesis's"),
    Table("exp3_predicted", "", (3,), predicted_beside_measured,
          "Experiment 3: each run's measured images/s beside the advisor's prediction for its placement",
          advisor_runs.NOTES, advisor_runs.shown),
    Table("link_rates", "", (3,), lambda inputs, entry: inputs.links if len(inputs.links) else None,
          "Experiment 3 across hosts: throughput against each host's link rate", lk.NOTES, lk.shown),
)

def warmup_figures(exp: int, n: int) -> tuple[Figure, Figure]:
    """Figure n of a warm-up experiment (beside experiment 5's 1-worker baseline) and n+1 (a panel per
    configuration), as the thesis draws experiments 6 and 8."""
    return (Figure(f"fig{n}_exp{exp}_error", f"Figure {n}", (5, exp), errors,
                   f"Figure {n}. Linear scaling + {{warmup{exp}}}; 1 worker: exp 5's baseline",
                   {"rows": beside_baseline}),
            Figure(f"fig{n + 1}_exp{exp}_error_grid", f"Figure {n + 1}", (exp,), errors,
                   f"Figure {n + 1}. Linear scaling + {{warmup{exp}}} (grid)", {"rows": every_run, "layout": "grid"}))


FIGURES = (
    Figure("headline", "", (1, 2, 3, *HEADLINE_QUALITY), headline,  # ours: the thesis's Figure 17 and Tables 10-12
           "Speed-up and accuracy against workers, the thesis's beside them"),
    *(Figure(f"fig{n}_scaling_horovod_tf_b{b}", f"Figure {n}", (1, 2, 3), scaling,
             f"Figure {n}. Scaling of Horovod+TensorFlow, per-GPU batch {b}",
             {"framework": tb.TENSORFLOW, "per_gpu_batch": b},  # ours: MultiWorkerMirroredStrategy beside it
             reads=lambda df, b=b: framework_rows(tb.TENSORFLOW)(df) & (df["per_gpu_batch"] == b), needs=TF_NEEDS)
      for n, b in ((14, 32), (15, 64), (16, 128))),
    Figure("fig17_scaling_pytorch_vs_horovod", "Figure 17", (1, 2, 3), scaling,
           "Figure 17. Scaling of PyTorch and Horovod+PyTorch", {"framework": ["pytorch", "horovod+pytorch"]},
           reads=framework_rows(["pytorch", "horovod+pytorch"])),
    Figure("fig18_exp4_error", "Figure 18", (4,), errors, "Figure 18. Naive scaling", {"rows": every_run}),
    Figure("fig19_exp4_error_grid", "Figure 19", (4,), errors, "Figure 19. Naive scaling (grid)",
           {"rows": every_run, "layout": "grid"}),
    Figure("fig20_exp5_train_error", "Figure 20", (5,), errors,
           "Figure 20. Linear scaling, no warm-up: training error", {"rows": every_run, "layout": "train"}),
    Figure("fig21_exp5_error_max_gpus", "Figure 21", (5,), errors, "Figure 21. Linear scaling, no warm-up, most GPUs",
           {"rows": most_workers, "layout": "grid"}),
    *warmup_figures(6, 24),
    Figure("fig26_exp7_vs_exp6_grid", "Figure 26", (6, 7), errors, "Figure 26. Smaller per-GPU batch (exp 7) vs the "
           "larger one (exp 6), same workers; {warmup7}", {"rows": smaller_batch_beside, "layout": "grid"}),
    *warmup_figures(8, 28),
    Figure("fig30_exp9_vs_exp8_grid", "Figure 30", (8, 9), errors, "Figure 30. Exp 8's {warmup8} vs exp 9's "
           "{warmup9}", {"rows": longer_warmup_beside, "layout": "grid"}),
    Figure("fig22_util_exp6_pytorch", "Figure 22", (6,), utilisation,
           "Figure 22. Utilisation, PyTorch, experiment 6", {"framework": "pytorch"}),
    Figure("fig23_util_exp6_horovod", "Figure 23", (6,), utilisation,
           "Figure 23. Utilisation, Horovod+PyTorch, experiment 6", {"framework": "horovod+pytorch"}),
    Figure("fig27_util_exp7_horovod", "Figure 27", (7,), utilisation,
           "Figure 27. Utilisation, Horovod+PyTorch, experiment 7", {"framework": "horovod+pytorch"}),
    Figure("util_other_runs", "", (), other_utilisation,
           "Utilisation of the other experiments' runs, each at its largest worker count"),
    Figure("lr_schedules_exp4-9", "", QUALITY_EXPERIMENTS, schedules, "Learning-rate schedules of experiments 4-9"),
    *plugged("FIGURES"),
    Figure("rq2_steady_state", "Tables 5/6 and 8/9 and Figures 12-13", (), steady_state),
    Figure("link_rates", "", (3,), link_rates, "Experiment 3 across hosts: throughput against each host's link"),
)
#: the thesis's utilisation figures (22, 23, 27): drawn together, since emulated runs stand for both frameworks
THESIS_UTILISATION = tuple(f for f in FIGURES if f.make is utilisation)


def thesis_utilisation(df: pd.DataFrame) -> tuple[list, dict[str, str]]:
    """fg.utilisation_panels of the thesis's utilisation figures: (name, title, rows) drawn, {name: why} not."""
    return fg.utilisation_panels(df, [(f.name, f.title, f.experiments[0], f.options["framework"])
                                      for f in THESIS_UTILISATION])


def figure(name: str) -> Figure:
    """The entry of figures/<name>."""
    return next(f for f in FIGURES if f.name == name)
