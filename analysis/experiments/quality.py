"""Experiments 4-9, the thesis's model quality (its Tables 10-15 and Figures 18-30): best top-1 as workers are
added -- naive scaling, the linear scaling rule and its warm-ups -- as error curves per configuration beside the
thesis's best, the learning-rate schedules, and utilisation over time (Figures 22, 23, 27). What they are read for,
the thesis's findings and the notebooks of RQ1 and RQ3, is quality_readings.py.
"""
from __future__ import annotations

import math
import textwrap

import matplotlib
import matplotlib.lines

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import figures as fg  # noqa: E402
from .. import numbers as nb  # noqa: E402
from .. import reference as rf  # noqa: E402
from .. import tables as tb  # noqa: E402
from ..entries import (THESIS_SOURCE, Drawn, Experiment, Figure, Inputs, Table, epoch_rows, every_run,  # noqa: E402
                       most_workers, titled)
from ..nbhelpers import show  # noqa: E402

BASELINE = 5  # its 1-worker runs: the baseline the others' accuracy is measured from (the thesis's 1-GPU curve)
EXPERIMENTS = (Experiment(4, "quality", headline="naive scaling"),
               Experiment(BASELINE, "quality", headline="linear scaling rule", baseline=True),
               Experiment(6, "quality", headline="linear rule + warm-up", reuses=BASELINE),
               *(Experiment(n, "quality", reuses=BASELINE) for n in (7, 8, 9)))
NUMBERS = tuple(e.number for e in EXPERIMENTS)
REF = rf.load_reference()
#: each experiment's settings (the thesis's appendices 5, 7, 9, 11, 13, 15)
SETTINGS = {
    4: {"warmup": "none", "decay": "step", "base_lr": 0.1, "label": "naive scaling, lr 0.1, /10 every 30"},
    5: {"warmup": "none", "decay": "milestones", "label": "linear scaling, no warm-up"},
    6: {"warmup": "stepping-5", "decay": "milestones", "label": "linear scaling, 5-epoch stepping warm-up"},
    7: {"warmup": "stepping-5", "decay": "milestones", "label": "as 6, per-GPU batch 32"},
    8: {"warmup": "gradual-5", "decay": "milestones", "label": "linear scaling, 5-epoch gradual warm-up"},
    9: {"warmup": "gradual-10", "decay": "milestones", "label": "linear scaling, 10-epoch gradual warm-up"},
}
QUALITY_NOTES = ("ours_top1/ours_top5: best validation accuracy (percent), mean over the configuration's completed "
                 "runs (seeds), ± sample std; n_runs: how many; diverged or half-written runs are counted in status, "
                 "not averaged.", tb.SCALE_NOTE)


# ============================================================================================ rows and titles


def warmup_phrase(data: pd.DataFrame, exp: int) -> str:
    """'stepping warm-up 4 of 72 epochs (thesis: 5 of 90)': the runs' own warm-up beside the thesis's, so a title
    never says the thesis's 5 epochs over curves that warmed up for 4 of 72."""
    thesis_kind, thesis_n = SETTINGS[exp]["warmup"].rsplit("-", 1)
    e = data[data["exp"] == exp]
    ours = {(w, ep) for w, ep in zip(e["warmup"], e["epochs"]) if isinstance(w, str) and w != "none"}
    if len(ours) == 1:
        (warmup, epochs), = ours
        kind, n = warmup.rsplit("-", 1)
        return f"{kind} warm-up {n} of {int(epochs)} epochs (thesis: {thesis_n} of {rf.THESIS_EPOCHS})"
    return f"{thesis_kind} warm-up ({thesis_n} of {rf.THESIS_EPOCHS} epochs in the thesis)"


def schedule_title(df: pd.DataFrame, exp: int) -> str:
    """An experiment's schedule in words: the thesis's label, with the runs' own warm-up where they warmed up."""
    label = SETTINGS[exp]["label"]
    if SETTINGS[exp]["warmup"] == "none" or df[(df["kind"] == "schedule") & (df["exp"] == exp)].empty:
        return label
    return f"linear scaling, {warmup_phrase(df[df['kind'] == 'schedule'], exp)}" + (", per-GPU batch smaller"
                                                                                    if exp == 7 else "")


def warmup_field(inputs: Inputs, field: str) -> str:
    """A title's {warmupN}: experiment N's warm-up in words, the runs' own beside the thesis's (warmup_phrase)."""
    exp = int(field.removeprefix("warmup"))
    return warmup_phrase(inputs.epochs(exp), exp)


def baseline_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The baseline's 1-worker runs: what experiments 6-9 are compared with (the thesis's 1-GPU curve)."""
    return epoch_rows(df, BASELINE, gpus=1)


def same_workers(e6: pd.DataFrame, e7: pd.DataFrame) -> pd.DataFrame:
    """Experiment 6's runs beside experiment 7's: same worker count, framework, scale and numerics (Figure 26)."""
    on = ["gpus", "framework", "scale", "numerics"]
    return e6.merge(e7[on].drop_duplicates(), on=on, how="inner")


def beside_baseline(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """The last experiment's runs with experiment 5's 1-worker baseline as their 1-worker curve (Figures 24, 28)."""
    runs = inputs.epochs(entry.experiments[-1])
    return pd.concat([baseline_runs(inputs.df), runs]) if len(runs) else runs


def smaller_batch_beside(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """Experiment 7's runs and experiment 6's at the same workers (Figure 26); none without experiment 7's."""
    larger, smaller = (inputs.epochs(e) for e in entry.experiments)
    return pd.concat([smaller, same_workers(larger, smaller)]) if len(smaller) else smaller


def longer_warmup_beside(inputs: Inputs, entry: Figure) -> pd.DataFrame:
    """Experiment 8's runs at experiment 9's worker counts, and 9's (Figure 30); none without experiment 9's."""
    shorter, longer = (inputs.epochs(e) for e in entry.experiments)
    if longer.empty:
        return longer
    return pd.concat([shorter.iloc[0:0], shorter[shorter["gpus"].isin(longer["gpus"].unique())], longer])


def schedules_frame(df: pd.DataFrame, experiments=NUMBERS) -> pd.DataFrame:
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
                lab = f"{curve_label({**k, 'warmup': None, 'scale': None}).split(' (')[0]}, lr={k['lr']:g}"
                parts.append(pd.DataFrame({"experiment": exp, "label": lab, "epoch": g["epoch"],
                                           "lr": g["planned_lr"], "source": "run config"}))
        else:
            th = thesis_schedules()
            th = th[th["experiment"] == exp]
            for (fw, gp, b, lr), g in th.groupby(["framework", "gpus", "per_gpu_batch", "target_lr"]):
                lab = f"exp {exp}: {fg.FRAMEWORK_NAME.get(fw, fw)} {gp} GPUs b={b} lr={lr:g} ({g['warmup'].iloc[0]})"
                parts.append(pd.DataFrame({"experiment": exp, "label": lab, "epoch": g["epoch"], "lr": g["lr"],
                                           "source": "thesis formula"}))
    return pd.concat(parts, ignore_index=True)


def thesis_schedules() -> pd.DataFrame:
    """The planned schedules of every quality-table row of these experiments (epoch, lr per row)."""
    rows = []
    for r in REF[REF["experiment"].isin(NUMBERS)].itertuples(index=False):
        s = SETTINGS[int(r.experiment)]
        for e in range(rf.THESIS_EPOCHS):
            rows.append({"experiment": int(r.experiment), "framework": r.framework, "gpus": int(r.gpus),
                         "per_gpu_batch": int(r.per_gpu_batch), "target_lr": r.lr, "warmup": r.warmup,
                         "epoch": e, "lr": rf.thesis_lr(e, r.lr, r.warmup, int(r.per_gpu_batch), s["decay"])})
    return pd.DataFrame(rows)


# ============================================================================================ makers


def quality(inputs: Inputs, entry: Table) -> pd.DataFrame:
    return tb.quality_table(inputs.df, inputs.ref, entry.options["table"])


def errors(inputs: Inputs, entry: Figure) -> Drawn | str:
    """Error curves (quality_figure) of the rows options["rows"] picks; beside a smoke run's 2 epochs, never the
    thesis's 90-epoch marks."""
    data = entry.options["rows"](inputs, entry)
    if data.empty:
        return "no epoch records"
    marks = None if data["path"].isin(inputs.smoke).any() else inputs.ref
    return Drawn(quality_figure(data, titled(inputs, entry), marks, entry.options.get("layout", "pair")),
                 inputs.source)


def utilisation(inputs: Inputs, entry: Figure) -> Drawn | str:
    """One of the thesis's utilisation figures from the runs' util records (utilisation_panels)."""
    panels, skipped = inputs.once(drawn_utilisation)
    for name, title, rows in panels:
        if name == entry.name:
            return Drawn(utilisation_figure([(title, rows)], height=4), inputs.source)
    return skipped[entry.name]


def other_utilisation(inputs: Inputs, entry: Figure) -> Drawn | None:
    """A panel per experiment without a thesis utilisation figure; nothing without such runs."""
    panels = other_utilisation_panels(inputs.df, {f.experiments[0] for f in THESIS_UTILISATION})
    return Drawn(utilisation_figure(panels, height=3.0, title=entry.title), inputs.source) if panels else None


def schedules(inputs: Inputs, entry: Figure) -> Drawn:
    """The learning-rate schedules: the runs' own, or the thesis's formula for an experiment without runs."""
    sched = schedules_frame(inputs.df, entry.experiments)
    titles = {}
    for exp in entry.experiments:
        src = sched.loc[sched["experiment"] == exp, "source"]
        titles[exp] = f"Experiment {exp}: {schedule_title(inputs.df, exp)} ({src.iloc[0] if len(src) else ''})"
    figure = lr_schedules_figure(sched, entry.experiments, titles, title=entry.title)
    from_runs = (sched["source"] == "run config").any()  # every panel the thesis's formula: no run drawn
    source = inputs.source
    if from_runs and (sched["source"] == "thesis formula").any() and source:
        source += " Panels marked 'thesis formula': the thesis's schedules."
    return Drawn(figure, source if from_runs else THESIS_SOURCE)


def drawn_utilisation(inputs: Inputs) -> tuple[list, dict[str, str]]:
    """thesis_utilisation of the inputs' runs, made once for the three figures."""
    return thesis_utilisation(inputs.df)


def thesis_utilisation(df: pd.DataFrame) -> tuple[list, dict[str, str]]:
    """utilisation_panels of the thesis's utilisation figures: (name, title, rows) drawn, {name: why} not."""
    return utilisation_panels(df, [(f.name, f.title, f.experiments[0], f.options["framework"])
                                      for f in THESIS_UTILISATION])


# ============================================================================================ error curves


CURVE_KEYS = ["exp", "framework", "gpus", "per_gpu_batch", "global_batch", "lr", "warmup", "epochs", "scale",
              "numerics"]


def share_y(axes) -> None:
    """One y-range for all visible panels, so that heights compare across them (grids, train beside val)."""
    shown = [ax for ax in np.ravel(axes) if ax.get_visible() and ax.has_data()]
    if not shown:
        return
    lo = min(ax.get_ylim()[0] for ax in shown)
    hi = max(ax.get_ylim()[1] for ax in shown)
    for ax in shown:
        ax.set_ylim(lo, hi)


def warmup_text(warmup, epochs) -> str:
    """'stepping-4' of a 72-epoch run -> 'stepping warm-up 4 of 72 epochs' (the miniature's 4 of 72 stands for the
    thesis's 5 of 90); '' for none."""
    if not warmup or warmup == "none" or "-" not in str(warmup):
        return ""
    kind, n = str(warmup).rsplit("-", 1)
    return f"{kind} warm-up {n} of {nb.int_text(epochs)} epochs" if epochs == epochs and epochs \
        else f"{kind} warm-up {n} epochs"


def curve_label(key: dict, seeds: int | None = None) -> str:
    """'Horovod+PyTorch 32 GPUs (bs=4096, lr=1.6, stepping warm-up 5 of 90 epochs)'; emulated runs say what they
    emulate: '32 emulated workers (bs=128, ...)' (synchronous data-parallel SGD in one process); seeds: how many runs
    the curve averages."""
    fw = fg.FRAMEWORK_NAME.get(key.get("framework"), key.get("framework"))
    n = nb.int_text(key.get("gpus"))
    who = (f"{n} emulated worker{'' if n == '1' else 's'}" if key.get("framework") == "emulated"
           else f"{fw} {n} GPU{'' if n == '1' else 's'}")
    s = f"{who} (bs={nb.int_text(key.get('global_batch'))}, lr={key.get('lr'):g}"
    warm = warmup_text(key.get("warmup"), key.get("epochs"))
    if warm:
        s += f", {warm}"
    s += nb.numerics_suffix(key.get("numerics"), ", ")  # fp32, the thesis's, goes unnamed
    if seeds:
        s += f"; {seeds} seed{'' if seeds == 1 else 's'}"
    s += ")"
    if key.get("scale") not in (None, "thesis"):
        s += f" [{key['scale']} scale]"
    return s


def error_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and epoch: mean and std over seeds of train and validation top-1 error (percent)."""
    e = df[df["kind"] == "epoch"].copy()
    if e.empty:
        return pd.DataFrame(columns=CURVE_KEYS + ["epoch", "train_err", "train_err_std", "val_err", "val_err_std",
                                                  "n"])
    e["scale"] = e["scale"].fillna("unknown")
    e["train_err"] = 100.0 - e["train_top1"]
    e["val_err"] = 100.0 - e["val_top1"]
    g = e.groupby(CURVE_KEYS + ["epoch"], dropna=False)
    out = g.agg(train_err=("train_err", "mean"), train_err_std=("train_err", "std"), val_err=("val_err", "mean"),
                val_err_std=("val_err", "std"), n=("run", "nunique")).reset_index()
    return out


def thesis_best_error(reference: pd.DataFrame | None, key: dict) -> float:
    """100 - the thesis's best validation top-1 for a curve's experiment and GPU count (Tables 10-15 give the best
    epoch's, not the last's); a thesis-scale curve needs the same framework and per-GPU batch too, a curve at
    another scale or of emulated workers takes the thesis's Horovod row where there are two (as the thesis compares
    them). nan in other numerics than fp32, or where the thesis has no such row."""
    if reference is None or nb.numerics_suffix(key.get("numerics")):
        return math.nan
    r = reference[(reference["experiment"] == key.get("exp")) & (reference["gpus"] == key.get("gpus"))]
    r = r.dropna(subset=["top1"])
    if key.get("scale") == "thesis" and key.get("framework") != "emulated":
        r = r[(r["framework"] == key.get("framework")) & (r["per_gpu_batch"] == key.get("per_gpu_batch"))]
    elif (r["framework"] == "horovod+pytorch").any():
        r = r[r["framework"] == "horovod+pytorch"]
    return 100.0 - float(r["top1"].iloc[0]) if len(r) else math.nan


THESIS_MARK = "thesis's best top-1 error, same GPUs (P100, ResNet-50, 90 epochs)"


def mark_thesis_best(ax, reference, key: dict, x: float, colour: str, labelled: bool) -> bool:
    """The thesis's best validation error for the curve's configuration, a diamond at the curve's last epoch
    (filled at the thesis scale, hollow beside a miniature's curve: another task, shown for its level only).
    Returns whether one was drawn."""
    best = thesis_best_error(reference, key)
    if math.isnan(best):
        return False
    same = key.get("scale") == "thesis"
    ax.plot([x], [best], "D", markersize=7, color=colour, markeredgecolor="black" if same else colour,
            markerfacecolor=colour if same else "none", markeredgewidth=1.5, zorder=5,
            label=THESIS_MARK if labelled else "_thesis")
    return True


def plot_error_curves(df: pd.DataFrame, ax=None, which: str = "train", title: str | None = None,
                      reference: pd.DataFrame | None = None):
    """Top-1 training or validation error per epoch, one line per configuration (mean ± std band over seeds; the
    label says how many).

    df: the study frame (epoch rows are used) or the output of error_curves(). reference (the thesis's tables):
    on the validation plot, each curve gets the thesis's best validation error for its configuration as a diamond
    at its last epoch (the thesis publishes that number, not its curves).
    """
    ax = fg._ax(ax)
    curves = df if "train_err" in df.columns else error_curves(df)
    col = f"{which}_err"
    marked = False
    for i, (key, g) in enumerate(curves.groupby(CURVE_KEYS, dropna=False, sort=True)):
        g = g.sort_values("epoch")
        if g[col].isna().all():
            continue
        k = dict(zip(CURVE_KEYS, key))
        ax.plot(g["epoch"], g[col], color=fg._colour(i), label=curve_label(k, int(g["n"].max())))
        std = g[f"{col}_std"]
        if std.notna().any():
            ax.fill_between(g["epoch"], g[col] - std, g[col] + std, color=fg._colour(i), alpha=0.2, linewidth=0)
        if which == "val":  # beside the curve's end, not on it
            x = float(g["epoch"].max()) + 0.02 * max(1.0, float(g["epoch"].max()))
            marked |= mark_thesis_best(ax, reference, k, x, fg._colour(i), not marked)
    kind = "training" if which == "train" else "validation"
    return fg._finish(ax, "epoch", f"top-1 {kind} error (%)", title or f"top-1 {kind} error")


def plot_error_panel(df: pd.DataFrame, ax=None, title: str | None = None, reference: pd.DataFrame | None = None):
    """One configuration's training (solid) and validation (dashed) top-1 error on one axis, with the thesis's best
    validation error for it (a diamond) where the thesis has one."""
    ax = fg._ax(ax)
    curves = df if "train_err" in df.columns else error_curves(df)
    for i, (key, g) in enumerate(curves.groupby(CURVE_KEYS, dropna=False, sort=True)):
        g = g.sort_values("epoch")
        k = dict(zip(CURVE_KEYS, key))
        ax.plot(g["epoch"], g["train_err"], "-", color=fg._colour(i), label="train")
        ax.plot(g["epoch"], g["val_err"], "--", color=fg._colour(i), label="validation")
        mark_thesis_best(ax, reference, k, float(g["epoch"].max()) * 1.02, fg._colour(i), True)
    return fg._finish(ax, "epoch", "top-1 error (%)", title, legend_size=7, title_size=8)


def plot_error_grid(df: pd.DataFrame, reference: pd.DataFrame | None = None):
    """Grid of train/val error panels, one per configuration, on one y-range (thesis Figures 19, 25, 26, 29, 30);
    each panel's title says its configuration and seeds. Returns the axes."""
    curves = df if "train_err" in df.columns else error_curves(df)
    groups = list(curves.groupby(CURVE_KEYS, dropna=False, sort=True))
    n = max(1, len(groups))
    nrows = math.ceil(n / 2)
    _, axes = plt.subplots(nrows, 2 if n > 1 else 1, figsize=(6.4 * min(n, 2), 3.8 * nrows), squeeze=False)
    flat = np.ravel(axes)
    several = curves["exp"].nunique() > 1  # e.g. Figure 26, 30: say which experiment each panel is
    for ax, (key, g) in zip(flat, groups):
        k = dict(zip(CURVE_KEYS, key))
        plot_error_panel(g, ax=ax, title=(f"exp {nb.int_text(k['exp'])}: " if several else "")
                         + curve_label(k, int(g["n"].max())), reference=reference)
    for ax in flat[len(groups):]:
        ax.set_visible(False)
    share_y(flat)
    return axes


def plot_train_val(df: pd.DataFrame, axes, titles=("top-1 training error", "top-1 validation error"),
                   reference: pd.DataFrame | None = None):
    """Training error (axes[0]) beside validation error (axes[1], with the thesis's marks from `reference`) on one
    y-range, one legend for both beside the validation panel (off the data). Returns the axes."""
    plot_error_curves(df, ax=axes[0], which="train", title=titles[0])
    plot_error_curves(df, ax=axes[1], which="val", title=titles[1], reference=reference)
    share_y(axes)
    axes[0].get_legend().remove()
    fg.legend_beside(axes[1], THESIS_MARK)
    return axes


def quality_figure(data: pd.DataFrame, title: str, reference: pd.DataFrame | None = None, layout: str = "pair"):
    """The error curves of one quality figure (Figures 18-30). layout: 'pair' training and validation side by side,
    'grid' a panel per configuration (plot_error_grid), 'train' or 'val' that one panel."""
    if layout == "grid":
        fig = plot_error_grid(data, reference=reference).flat[0].figure
        fig.suptitle(title, fontsize=10)
    elif layout == "pair":
        fig, axes = plt.subplots(1, 2, figsize=(17, 5), layout="constrained")
        plot_train_val(data, axes, reference=reference)
        fig.suptitle(title, fontsize=10)
    else:
        fig, ax = plt.subplots(figsize=(11, 4.6), layout="constrained")
        plot_error_curves(data, ax=ax, which=layout, title=title, reference=reference)
        fg.legend_beside(ax, THESIS_MARK)
    return fig


def plot_lr_schedules(schedules: pd.DataFrame, ax=None, experiment: int | None = None):
    """Learning rate per epoch; schedules has columns label, epoch, lr (and optionally experiment)."""
    ax = fg._ax(ax)
    s = schedules if experiment is None else schedules[schedules["experiment"] == experiment]
    for i, (lab, g) in enumerate(s.groupby("label", sort=False)):  # in the order of the runs (1, 2, 16 workers)
        g = g.sort_values("epoch")
        ax.step(g["epoch"], g["lr"], where="post", color=fg._colour(i), label=lab)
    return fg._finish(ax, "epoch", "learning rate", legend_size=6)


def lr_schedules_figure(schedules: pd.DataFrame, experiments, titles: dict, figsize=(15, 7.5),
                        title: str | None = None):
    """A panel per experiment's learning-rate schedules (plot_lr_schedules), three a row; titles: experiment -> its
    panel's title (wrapped: two lines at most at three panels a row)."""
    fig, axes = plt.subplots(math.ceil(len(experiments) / 3), 3, figsize=figsize)
    for ax, exp in zip(axes.flat, experiments):
        plot_lr_schedules(schedules, ax=ax, experiment=exp)
        ax.set_title("\n".join(textwrap.wrap(titles[exp], 64)), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


# ============================================================================================ utilisation


EMULATED_NOTE = "emulated workers: one computation for the DDP and the Horovod row"


def utilisation_rows(df: pd.DataFrame, exp: int, framework: str) -> tuple[pd.DataFrame, str]:
    """The util rows one of the thesis's utilisation figures draws, and a note for its title.

    The framework's own runs of the experiment at its largest worker count; where the experiment ran emulated
    workers instead (the local scale: one process, whose computation is the DDP and the Horovod row alike),
    those runs stand for either framework and the note says so."""
    u = df[(df["kind"] == "util") & (df["exp"] == exp)]
    rows, note = u[(u["framework"] == framework) & (u["backend"] != "emulated")], ""
    if rows.empty:
        rows = u[u["backend"] == "emulated"]
        note = EMULATED_NOTE if len(rows) else ""
    if len(rows):
        rows = rows[rows["gpus"] == rows["gpus"].max()]
    return rows, note


DEVICE_STYLE = {"cpu process": ("-", "cpu process (this run's, with its loader workers)"),
                "cpu system": (":", "cpu system (the whole node)")}


def plot_utilisation(df: pd.DataFrame, ax=None, title: str | None = None):
    """Utilisation (percent) over time from util rows (thesis Figures 22, 23, 27): a colour per run, a line style
    per device (the process's CPU, the node's CPU, each GPU); the legend sits right of the axes, off the data.
    CPU percentages are of all the node's cores. Series of a few samples (a short benchmark) get markers, so
    they show."""
    ax = fg._ax(ax, figsize=(9, 3.6))
    u = df[df["kind"] == "util"] if "kind" in df.columns else df
    runs = sorted(u["run"].dropna().unique(), key=str)
    colours = {run: fg._colour(i) for i, run in enumerate(runs)}
    styles: dict[str, tuple[str, str]] = {}
    for (run, dev), g in u.groupby(["run", "device"], dropna=False, sort=True):
        g = g.sort_values("t")
        ls, name = DEVICE_STYLE.get(dev, ("--", str(dev)))
        styles[dev] = (ls, name)
        ax.plot(g["t"] / 60.0, g["util_pct"], ls, color=colours[run], linewidth=1,
                marker="o" if len(g) < 5 else None, markersize=3)
    ax.set_ylim(0, 105)
    ax.set_xlabel("minutes since start")
    ax.set_ylabel("utilisation (%)")
    if title:  # wrapped: the legend beside the axes leaves the title less than the figure's width
        ax.set_title("\n".join(textwrap.wrap(title, 100)), fontsize=9)
    ax.grid(True, alpha=0.3)
    handles = [matplotlib.lines.Line2D([], [], color=colours[r], label=str(r)) for r in runs]
    handles += [matplotlib.lines.Line2D([], [], color="black", linestyle=ls, label=name)
                for ls, name in styles.values()]
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


def utilisation_panels(df: pd.DataFrame, figures) -> tuple[list[tuple[str, str, pd.DataFrame]], dict[str, str]]:
    """(file name, title, util rows) of the thesis's utilisation figures (Figures 22, 23 and 27) as these runs can
    draw them, and {file name: why not drawn} of the others. figures: (file name, title, experiment, framework) of
    each (analysis/catalogue.py); the thesis shows one GPU of a 32-GPU run, ours every device sampled in the
    experiment's runs at its largest worker count. Where emulated workers stand for both frameworks (one process:
    the local scale), Figures 22 and 23 would be the same image under two names: it is drawn once, titled as both
    and as emulated."""
    figures = list(figures)
    drawn: list[tuple[str, str, pd.DataFrame]] = []
    skipped: dict[str, str] = {}
    emulated: dict[int, str] = {}  # experiment -> the figure its emulated runs were drawn in
    for name, title, exp, framework in figures:
        rows, note = utilisation_rows(df, exp, framework)
        if rows.empty:
            skipped[name] = "no utilisation records (runs record them since trainers/telemetry.py)"
            continue
        if note:
            if exp in emulated:
                skipped[name] = f"the same emulated runs as {emulated[exp]} (drawn once)"
                continue
            emulated[exp] = name
            numbers = [t.split(".")[0].split()[-1] for n, t, e, _ in figures if e == exp]
            which = f"Figures {' and '.join(numbers)}" if len(numbers) > 1 else f"Figure {numbers[0]}"
            title = (f"{which}. Utilisation, experiment {exp}, {int(rows['gpus'].max())} emulated workers in one "
                     "process (standing for PyTorch and Horovod alike)")
        drawn.append((name, title, rows))
    return drawn, skipped


def other_utilisation_panels(df: pd.DataFrame, drawn_experiments) -> list[tuple[str, pd.DataFrame]]:
    """(title, util rows) per experiment not in drawn_experiments (those the thesis drew utilisation for): its runs
    at its largest worker count."""
    u = df[(df["kind"] == "util") & ~df["exp"].isin(list(drawn_experiments))]
    panels = []
    for exp, g in u.groupby("exp", sort=True):
        g = g[g["gpus"] == g["gpus"].max()]
        backends = ", ".join(sorted(g["backend"].dropna().astype(str).unique()))
        panels.append((f"experiment {int(exp)}, {int(g['gpus'].max())} worker(s) ({backends}): "
                       f"{g['run'].nunique()} run(s)", g))
    return panels


def utilisation_figure(panels, height: float, title: str | None = None):
    """A utilisation panel (plot_utilisation) a row, each `height` inches; panels: (title, util rows) each."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, height * len(panels)), squeeze=False)
    for ax, (panel_title, rows) in zip(axes[:, 0], panels):
        plot_utilisation(rows, ax=ax, title=panel_title)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


# ============================================================================================ the notebooks' helpers


def show_utilisation(df: pd.DataFrame):
    """The thesis's utilisation Figures 22, 23 and 27 from the runs' util records, one panel each (Figures 22 and
    23 once where emulated workers stand for both frameworks)."""
    panels, _ = thesis_utilisation(df)
    if not panels:
        return pd.DataFrame({"note": ["no run recorded utilisation (util records in metrics.jsonl: runs record "
                                      "them since trainers/telemetry.py; rerun experiments 6 and 7)"]})
    fig = utilisation_figure([(title, rows) for _, title, rows in panels], height=3.6)
    fig.set_layout_engine("constrained")
    return show(fig)


def quality_overview(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for t in THESIS_TABLES:
        q = tb.quality_table(df, ref, t)
        q.insert(0, "table", t)
        parts.append(q)
    q = pd.concat(parts, ignore_index=True)
    keep = ["table", "framework", "numerics", "gpus", "global_batch", "lr", "warmup", "thesis_top1", "thesis_top5",
            "ours_top1", "ours_top1_std", "ours_top5", "n_runs", "scale", "status"]
    return q[keep]


def schedules_figure(df: pd.DataFrame):
    """The report's learning-rate schedules (its lr_schedules_exp4-9 entry), a panel per experiment, shorter."""
    experiments = NUMBERS
    return lr_schedules_figure(schedules_frame(df, experiments), experiments,
                                  {exp: f"experiment {exp}" for exp in experiments}, figsize=(13, 6.5))


def error_figures(df: pd.DataFrame, ref: pd.DataFrame | None = None):
    """Training and validation error of every quality experiment with runs, one row each, as one image (a notebook
    cell shows only its last value, so one figure rather than a loop of them); the thesis's best validation error
    beside each curve (ref), one legend a row beside its validation panel."""
    have = [e for e in NUMBERS if len(epoch_rows(df, e))]
    if not have:
        return pd.DataFrame({"note": ["no epoch records: no error curves to draw"]})
    fig, axes = plt.subplots(len(have), 2, figsize=(16, 3.6 * len(have)), squeeze=False, layout="constrained")
    for row, exp in zip(axes, have):
        plot_train_val(epoch_rows(df, exp), row, reference=ref,
                          titles=(f"experiment {exp}: training error", f"experiment {exp}: validation error"))
    return show(fig)


# ============================================================================================ the declarations

THESIS_TABLES = rf.tables_of(REF, NUMBERS)
TABLES = tuple(Table(f"table{t:02d}", f"Table {t}", (rf.experiment_of(REF, t),), quality,
                     f"Table {t}. {rf.CAPTIONS[t]}", (f"Numbered as its caption; the thesis's running text and list of "
                                                      f"tables call it Table {rf.TEXT_NUMBER[t]}.",) + QUALITY_NOTES,
                     options={"table": t}, part="thesis") for t in THESIS_TABLES)


def warmup_figures(exp: int, n: int) -> tuple[Figure, Figure]:
    """Figure n of a warm-up experiment (beside the 1-worker baseline) and n+1 (a panel per configuration), as the
    thesis draws experiments 6 and 8."""
    return (Figure(f"fig{n}_exp{exp}_error", f"Figure {n}", (BASELINE, exp), errors,
                   f"Figure {n}. Linear scaling + {{warmup{exp}}}; 1 worker: exp 5's baseline",
                   {"rows": beside_baseline}, part="thesis", fill=warmup_field),
            Figure(f"fig{n + 1}_exp{exp}_error_grid", f"Figure {n + 1}", (exp,), errors,
                   f"Figure {n + 1}. Linear scaling + {{warmup{exp}}} (grid)", {"rows": every_run, "layout": "grid"},
                   part="thesis", fill=warmup_field))


def thesis_figure(*args, **kwargs) -> Figure:
    return Figure(*args, part="thesis", fill=warmup_field, **kwargs)


FIGURES = (
    thesis_figure("fig18_exp4_error", "Figure 18", (4,), errors, "Figure 18. Naive scaling", {"rows": every_run}),
    thesis_figure("fig19_exp4_error_grid", "Figure 19", (4,), errors, "Figure 19. Naive scaling (grid)",
                  {"rows": every_run, "layout": "grid"}),
    thesis_figure("fig20_exp5_train_error", "Figure 20", (5,), errors,
                  "Figure 20. Linear scaling, no warm-up: training error", {"rows": every_run, "layout": "train"}),
    thesis_figure("fig21_exp5_error_max_gpus", "Figure 21", (5,), errors,
                  "Figure 21. Linear scaling, no warm-up, most GPUs", {"rows": most_workers, "layout": "grid"}),
    *warmup_figures(6, 24),
    thesis_figure("fig26_exp7_vs_exp6_grid", "Figure 26", (6, 7), errors, "Figure 26. Smaller per-GPU batch (exp 7) vs "
                  "the larger one (exp 6), same workers; {warmup7}", {"rows": smaller_batch_beside, "layout": "grid"}),
    *warmup_figures(8, 28),
    thesis_figure("fig30_exp9_vs_exp8_grid", "Figure 30", (8, 9), errors, "Figure 30. Exp 8's {warmup8} vs exp 9's "
                  "{warmup9}", {"rows": longer_warmup_beside, "layout": "grid"}),
    thesis_figure("fig22_util_exp6_pytorch", "Figure 22", (6,), utilisation,
                  "Figure 22. Utilisation, PyTorch, experiment 6", {"framework": "pytorch"}),
    thesis_figure("fig23_util_exp6_horovod", "Figure 23", (6,), utilisation,
                  "Figure 23. Utilisation, Horovod+PyTorch, experiment 6", {"framework": "horovod+pytorch"}),
    thesis_figure("fig27_util_exp7_horovod", "Figure 27", (7,), utilisation,
                  "Figure 27. Utilisation, Horovod+PyTorch, experiment 7", {"framework": "horovod+pytorch"}),
    Figure("util_other_runs", "", (), other_utilisation,
           "Utilisation of the other experiments' runs, each at its largest worker count", part="derived"),
    Figure("lr_schedules_exp4-9", "", NUMBERS, schedules, "Learning-rate schedules of experiments 4-9",
           part="derived"),
)
#: the thesis's utilisation figures (22, 23, 27): drawn together, since emulated runs stand for both frameworks
THESIS_UTILISATION = tuple(f for f in FIGURES if f.make is utilisation)
EXPORTS = ("error_figures", "quality_overview", "schedules_figure", "show_utilisation")
