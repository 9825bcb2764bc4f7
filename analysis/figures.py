"""Plot functions: each takes a DataFrame and an optional axis and returns the axis (no plt.show()).

Colours are the Okabe-Ito colour-blind-safe palette; line styles tell thesis (dashed) from ours (solid). Runs of
other numerics than fp32 (bf16+cl, compiled, ...) are lines of their own, named in their label; fp32 lines are not
named, as the thesis's are not.
``save`` writes PNG and PDF with fixed metadata so the same data gives the same files.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.layout_engine
import matplotlib.lines
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from . import numbers as nb  # noqa: E402

#: Okabe & Ito (2008), colour-blind safe
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
FRAMEWORK_NAME = {"pytorch": "PyTorch", "horovod+pytorch": "Horovod+PyTorch", "horovod+tensorflow": "Horovod+TF",
                  "tensorflow": "TF (MWMS)", "emulated": "emulated"}
CURVE_KEYS = ["exp", "framework", "gpus", "per_gpu_batch", "global_batch", "lr", "warmup", "epochs", "scale",
              "numerics"]


def _ax(ax, figsize=(6.4, 4.2)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _finish(ax, xlabel: str, ylabel: str, title: str | None = None, legend_size: int = 7, title_size: int = 9):
    """Labels, an optional title, a legend when anything was drawn, and a light grid: every line plot ends so."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=title_size)
    if any(not line.get_label().startswith("_") for line in ax.get_lines()):
        ax.legend(fontsize=legend_size)
    ax.grid(True, alpha=0.3)
    return ax


def legend_beside(ax) -> None:
    """The axes' legend moved right of it, off the data (the constrained layout makes room)."""
    pairs = list(zip(*ax.get_legend_handles_labels()))
    pairs.sort(key=lambda hl: hl[1] == THESIS_MARK)  # the curves first, in their order; the thesis's marker last
    if pairs:
        handles, labels = zip(*pairs)
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def share_y(axes) -> None:
    """One y-range for all visible panels, so that heights compare across them (grids, train beside val)."""
    shown = [ax for ax in np.ravel(axes) if ax.get_visible() and ax.has_data()]
    if not shown:
        return
    lo = min(ax.get_ylim()[0] for ax in shown)
    hi = max(ax.get_ylim()[1] for ax in shown)
    for ax in shown:
        ax.set_ylim(lo, hi)


def log2_ticks(ax, axis: str = "y") -> None:
    """A log axis with plain numbers at every power of two in range (matplotlib shows one 10^k tick otherwise)."""
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    lo, hi = max(lo, 1e-9), max(hi, 1e-9)
    ticks = [2.0 ** k for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    if sum(lo <= t <= hi for t in ticks) < 3:  # a range under 4x: round numbers instead of powers of two
        ticks = list(matplotlib.ticker.MaxNLocator(nbins=5).tick_values(lo, hi))
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    target.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(matplotlib.ticker.NullFormatter())
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo, hi)


def gpu_ticks(ax, gpus) -> None:
    """x ticks at the GPU counts measured (1, 2, 4, 8, 16, 24, 32), not at matplotlib's 0, 5, 10..."""
    xs = sorted({int(g) for g in gpus if g == g})
    if xs:
        ax.set_xticks(xs, [str(x) for x in xs], fontsize=7)


SOURCE_STRIP_PX = 16  # the strip along the bottom that the "Made from ..." line gets, below everything else
PNG_DPI = 100
LAYOUT_DIGITS = 4  # axes positions are pinned to 1e-4 of the figure: far coarser than the solver's noise, < 0.2 px


def pin_layout(fig, dpi: float = PNG_DPI) -> None:
    """Solve the figure's layout once (at the dpi it is drawn at), then pin every axes at its solved position rounded
    to LAYOUT_DIGITS and turn the layout engine off, so that whatever is drawn next (PNG, PDF) draws the pinned layout.

    Why: the constrained layout's solver (kiwisolver) gives results that differ in their last bits from process to
    process for the same inputs, and the axes drawn at the unrounded result moved with them: one ulp of an axes'
    height moved a line's step in Figure 25 by a pixel in about 1 draw of 10 (the PNG's bytes changed with nothing
    else changed). Rounded, every process draws the same layout (unless a position lies within that noise, 1e-16 of
    the figure here, of a rounding boundary)."""
    fig.set_dpi(dpi)
    fig.draw_without_rendering()  # runs the layout engine, as savefig would
    fig.set_layout_engine("none")
    for ax in fig.axes:
        ax.set_position([round(v, LAYOUT_DIGITS) for v in ax.get_position().bounds])


def save(fig, out_dir: str | Path, name: str, source: str | None = None) -> list[Path]:
    """Write <name>.png and <name>.pdf (deterministic metadata) and close the figure. source: which runs it was made
    from, a grey line in a strip of its own along the bottom (the constrained layout fills the rest, so the line
    never sits on a label, or on a legend beside the axes; legends go beside axes, not below the figure)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    if not isinstance(fig.get_layout_engine(), matplotlib.layout_engine.ConstrainedLayoutEngine):
        fig.set_layout_engine("constrained")
    if source:
        # wrapped to the figure's width (a 7-point character takes up to about 5.2 px at 100 dpi), a strip line each
        lines = textwrap.wrap(source, width=max(40, int(fig.get_figwidth() * 100 / 5.2)))
        strip = SOURCE_STRIP_PX * len(lines) / (fig.get_figheight() * 100)
        fig.get_layout_engine().set(rect=(0, strip, 1, 1 - strip))
        fig.text(0.005, strip / 2, "\n".join(lines), fontsize=7, color="dimgray", ha="left", va="center")
    pin_layout(fig)  # one layout for both files, the same in every process
    fig.savefig(paths[0], dpi=PNG_DPI, metadata={"Software": None})
    fig.savefig(paths[1], metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None})
    plt.close(fig)
    return paths


def _series(scaling: pd.DataFrame, framework=None, per_gpu_batch=None):
    s = scaling
    if framework is not None:
        s = s[s["framework"].isin([framework] if isinstance(framework, str) else framework)]
    if per_gpu_batch is not None:
        s = s[s["per_gpu_batch"] == per_gpu_batch]
    # numerics: a bf16 point and an fp32 one at the same GPU count are two lines, never one zig-zag
    return s.groupby(["source", "scale", "framework", "per_gpu_batch", "numerics"], dropna=False, sort=True)


_SOURCE_STYLE = {"thesis": ("--", "o"), "ours (thesis formula)": ("-", "s"), "ours (steady state)": ("-", "^")}


def _styles(scaling: pd.DataFrame, framework=None, per_gpu_batch=None):
    """Colour by (framework, per-GPU batch, numerics, scale), line and marker by source: same in every panel."""
    keys = sorted({(f, b, n, "thesis" if sc == "thesis" else "other") for _, sc, f, b, n in
                   (k for k, _ in _series(scaling, framework, per_gpu_batch))}, key=str)
    colours = {k: _colour(i) for i, k in enumerate(keys)}

    def style(src, sc, fw, b, n):
        ls, mk = _SOURCE_STYLE.get(src, ("-", "o"))
        return colours[(fw, b, n, "thesis" if sc == "thesis" else "other")], ls, mk

    return style


def _label(source, scale, fw, b, n) -> str:
    tag = "thesis" if source == "thesis" else source.replace("ours", "ours" + ("" if scale == "thesis"
                                                                                 else f", {scale}"))
    return f"{FRAMEWORK_NAME.get(fw, fw)} b={int(b)}{nb.numerics_suffix(n)} — {tag}"


def plot_throughput(scaling: pd.DataFrame, ax=None, framework=None, per_gpu_batch=None, ideal: bool = True,
                    ideal_max: float | None = None):
    """Images/s vs GPUs (thesis Figures 14-17, left), with the ideal line from each series' 1-GPU point, up to
    ideal_max workers (a machine's core count: past it, linear scaling is not what ideal means)."""
    ax = _ax(ax)
    style = _styles(scaling, framework, per_gpu_batch)
    for key, g in _series(scaling, framework, per_gpu_batch):
        src = key[0]
        g = g.dropna(subset=["images_per_s"]).sort_values("gpus")
        if g.empty:  # a configuration measured by one estimate only: no empty legend entry for the other
            continue
        colour, ls, mk = style(*key)
        ax.plot(g["gpus"], g["images_per_s"], ls, marker=mk, color=colour, label=_label(*key))
        one = g.loc[g["gpus"] == 1, "images_per_s"]
        if ideal and len(one) and src != "ours (steady state)":
            xs = np.array(sorted(g["gpus"].unique()), dtype=float)
            xs = xs[xs <= ideal_max] if ideal_max else xs
            ax.plot(xs, float(one.iloc[0]) * xs, ":", color=colour, alpha=0.6, linewidth=1)
    if ax.get_lines():
        ax.set_yscale("log")
        log2_ticks(ax, "y")
        gpu_ticks(ax, np.concatenate([line.get_xdata() for line in ax.get_lines()]))
    return _finish(ax, "GPUs (workers)", "images / s (log scale)", "Throughput (dotted: ideal linear scaling)")


def plot_speedup(scaling: pd.DataFrame, ax=None, framework=None, per_gpu_batch=None,
                 ideal_max: float | None = None):
    """Speed-up over the 1-GPU baseline vs GPUs, with the ideal line y = x up to ideal_max workers (a machine's
    core count) when given."""
    ax = _ax(ax)
    xmax = 1.0
    style = _styles(scaling, framework, per_gpu_batch)
    for key, g in _series(scaling, framework, per_gpu_batch):
        g = g.dropna(subset=["speedup"]).sort_values("gpus")
        if g.empty:
            continue
        xmax = max(xmax, float(g["gpus"].max()))
        colour, ls, mk = style(*key)
        ax.plot(g["gpus"], g["speedup"], ls, marker=mk, color=colour, label=_label(*key))
        flagged_points(ax, g)
    top = min(xmax, ideal_max) if ideal_max else xmax
    ax.plot([1, top], [1, top], color="grey", linewidth=1, label="ideal")
    gpu_ticks(ax, np.concatenate([line.get_xdata() for line in ax.get_lines()]))
    _finish(ax, "GPUs (workers)", "speed-up over 1 GPU", "Speed-up")
    missing = _without_baseline(scaling, framework, per_gpu_batch)
    if missing:  # measured, but with no 1-GPU run to divide by: said under the axis, off the data, not dropped silently
        ax.set_xlabel("GPUs (workers)\nno speed-up (no 1-GPU run): " + ", ".join(missing))
    return ax


FLAGGED = "flagged: above ideal, unlike or disturbed (the table's flag column says why)"


def flagged_points(ax, series: pd.DataFrame) -> None:
    """A red ring around each point whose row is flagged (analysis/flags.py), labelled once an axis."""
    if "flag" not in series:
        return
    hit = series[series["flag"].map(lambda f: bool(f) if isinstance(f, str) else False)]
    if hit.empty:
        return
    said = FLAGGED in ax.get_legend_handles_labels()[1]
    ax.scatter(hit["gpus"], hit["speedup"], s=180, facecolors="none", edgecolors="red", linewidths=1.6, zorder=5,
               label=None if said else FLAGGED)


def _without_baseline(scaling: pd.DataFrame, framework=None, per_gpu_batch=None) -> list[str]:
    """Series with throughput but no speed-up (no 1-GPU run of their own), by label."""
    out = []
    for key, g in _series(scaling, framework, per_gpu_batch):
        if g["images_per_s"].notna().any() and g["speedup"].isna().all():
            out.append(_label(*key).split(" — ")[0])  # the series, not its source: the line must fit the axis
    return sorted(set(out))


def scaling_rows(scaling: pd.DataFrame, framework, per_gpu_batch=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the thesis's points, ours at any other scale) that a scaling figure of `framework` draws."""
    thesis = scaling[scaling["scale"] == "thesis"]
    other = scaling[(scaling["scale"] != "thesis")
                    & scaling["framework"].isin([framework] if isinstance(framework, str) else framework)]
    other = other.dropna(subset=["images_per_s"])
    if per_gpu_batch is not None:
        other = other[other["per_gpu_batch"] == per_gpu_batch]
    return thesis, other


def scaling_figure(scaling: pd.DataFrame, title: str, framework, per_gpu_batch=None, cores: int | None = None):
    """Throughput and speed-up (Figures 14-17): the thesis's scale on the top row; ours at any other scale (CPU
    cores) on a row of its own below, since its images/s are not comparable with the P100 numbers. cores: the
    measuring machine's, which a local-scale row's axis names and its ideal line stops at."""
    kw = {"framework": framework, "per_gpu_batch": per_gpu_batch}
    thesis, other = scaling_rows(scaling, framework, per_gpu_batch)
    rows = [thesis] + ([other] if len(other) else [])
    fig, axes = plt.subplots(len(rows), 2, figsize=(13, 4.4 * len(rows)), squeeze=False, layout="constrained")
    plot_throughput(thesis, ax=axes[0][0], **kw)
    plot_speedup(thesis, ax=axes[0][1], **kw)
    if len(rows) > 1:
        _our_row(axes, other, cores, kw)
    fig.suptitle(title, fontsize=10)
    return fig


def _our_row(axes, other: pd.DataFrame, cores: int | None, kw: dict) -> None:
    """The lower row: ours at another scale. At the local scale the workers are CPU processes, not GPUs: the axis
    says so and how many cores they shared, and the ideal line stops at that count."""
    cpu = set(other["scale"]) == {"local scale"}
    limit = cores if cpu else None
    plot_throughput(other, ax=axes[1][0], ideal_max=limit, **kw)
    plot_speedup(other, ax=axes[1][1], ideal_max=limit, **kw)
    scales = ", ".join(sorted(other["scale"].unique()))
    for ax, what in zip(axes[0], ("Throughput (dotted: ideal linear scaling)", "Speed-up")):
        ax.set_title(f"{what}, the thesis (P100 GPUs)", fontsize=9)
    for ax, what in zip(axes[1], ("Throughput", "Speed-up")):
        ax.set_title(f"{what}, ours at the {scales} (not comparable with the P100 row above)", fontsize=9)
        if cpu:
            on = f" on {cores} core{'' if cores == 1 else 's'}" if cores else ""
            ax.set_xlabel(ax.get_xlabel().replace("GPUs (workers)", f"CPU processes{on}")
                          .replace("1-GPU run", "1-process run"))


# ============================================================================================ the first screen


def plot_headline_speedup(rows: pd.DataFrame, ax=None, cores: int | None = None):
    """Speed-up against workers, log-log: this report's runs (solid, a series a framework), the thesis's (dashed, the
    same colour), the ideal y = x, flagged points ringed red (flagged_points). rows: headline_speedups' (source
    "thesis" or ours); cores: the measuring machine's, which the x axis names (its processes shared them)."""
    ax = _ax(ax)
    colours = {fw: _colour(i) for i, fw in enumerate(sorted(rows["framework"].unique()))}
    for (source, fw, b, scale), g in rows.groupby(["source", "framework", "per_gpu_batch", "scale"], sort=True):
        g = g.sort_values("gpus")
        thesis = source == "thesis"
        tag = "thesis, P100 GPUs" if thesis else f"ours, {scale}"
        ax.plot(g["gpus"], g["speedup"], "--" if thesis else "-", marker="o" if thesis else "^",
                color=colours[fw], alpha=0.6 if thesis else 1.0, label=f"{FRAMEWORK_NAME.get(fw, fw)} b={int(b)} — {tag}")
        if not thesis:
            flagged_points(ax, g)
    top = float(rows["gpus"].max())
    ax.plot([1, top], [1, top], color="grey", linewidth=1, label="ideal (speed-up = workers)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    log2_ticks(ax, "x")
    log2_ticks(ax, "y")
    on = f" on {cores} cores" if cores else ""
    _finish(ax, f"workers (ours: processes{on}; the thesis: GPUs)", "speed-up over 1 worker (log scale)",
            "Does it scale? Speed-up against workers", legend_size=6)
    legend_below(ax)
    return ax


def plot_headline_accuracy(rows: pd.DataFrame, ax=None, margin: float | None = None):
    """Accuracy against workers: each quality experiment's best top-1 minus its 1-worker baseline's (points), ours
    (solid) and the thesis's (dashed, the same colour); ideal: no loss (0), the declared margin shaded where given.
    rows: headline_accuracy's."""
    ax = _ax(ax)
    colours = {exp: _colour(i) for i, exp in enumerate(sorted(rows["exp"].unique()))}
    if margin:
        ax.axhspan(-margin, margin, color="grey", alpha=0.12, label=f"± the declared margin ({margin:g} points)")
    ax.axhline(0, color="grey", linewidth=1, label="ideal (no loss)")
    for (source, exp), g in rows.groupby(["source", "exp"], sort=True):
        g = g.sort_values("gpus")
        thesis = source == "thesis"
        ax.plot(g["gpus"], g["difference"], "--" if thesis else "-", marker="o" if thesis else "^",
                color=colours[exp], alpha=0.6 if thesis else 1.0,
                label=f"exp {int(exp)}: {HEADLINE_EXPERIMENTS.get(int(exp), '')} — {'thesis' if thesis else 'ours'}")
    ax.set_xscale("log", base=2)
    log2_ticks(ax, "x")
    _finish(ax, "workers", "best top-1 minus 1 worker's (points)", "Does accuracy hold? Best top-1 against workers",
            legend_size=6)
    legend_below(ax)
    return ax


def legend_below(ax) -> None:
    """The legend under the axes, two columns: off every line and point (the constrained layout makes room)."""
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)


HEADLINE_EXPERIMENTS = {4: "naive scaling", 5: "linear scaling rule", 6: "linear rule + warm-up"}


def headline_figure(speedups: pd.DataFrame, accuracy: pd.DataFrame, cores: int | None = None,
                    margin: float | None = None):
    """The report's first figure: a panel for speed-up against workers and one for accuracy against workers, each
    drawn where its rows are (neither empty: the maker says why not instead)."""
    panels = [p for p, rows in (("speedup", speedups), ("accuracy", accuracy)) if len(rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.6 * len(panels), 5.0), squeeze=False, layout="constrained")
    for ax, panel in zip(axes[0], panels):
        if panel == "speedup":
            plot_headline_speedup(speedups, ax=ax, cores=cores)
        else:
            plot_headline_accuracy(accuracy, ax=ax, margin=margin)
    return fig


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
    fw = FRAMEWORK_NAME.get(key.get("framework"), key.get("framework"))
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
    ax = _ax(ax)
    curves = df if "train_err" in df.columns else error_curves(df)
    col = f"{which}_err"
    marked = False
    for i, (key, g) in enumerate(curves.groupby(CURVE_KEYS, dropna=False, sort=True)):
        g = g.sort_values("epoch")
        if g[col].isna().all():
            continue
        k = dict(zip(CURVE_KEYS, key))
        ax.plot(g["epoch"], g[col], color=_colour(i), label=curve_label(k, int(g["n"].max())))
        std = g[f"{col}_std"]
        if std.notna().any():
            ax.fill_between(g["epoch"], g[col] - std, g[col] + std, color=_colour(i), alpha=0.2, linewidth=0)
        if which == "val":  # beside the curve's end, not on it
            x = float(g["epoch"].max()) + 0.02 * max(1.0, float(g["epoch"].max()))
            marked |= mark_thesis_best(ax, reference, k, x, _colour(i), not marked)
    kind = "training" if which == "train" else "validation"
    return _finish(ax, "epoch", f"top-1 {kind} error (%)", title or f"top-1 {kind} error")


def plot_error_panel(df: pd.DataFrame, ax=None, title: str | None = None, reference: pd.DataFrame | None = None):
    """One configuration's training (solid) and validation (dashed) top-1 error on one axis, with the thesis's best
    validation error for it (a diamond) where the thesis has one."""
    ax = _ax(ax)
    curves = df if "train_err" in df.columns else error_curves(df)
    for i, (key, g) in enumerate(curves.groupby(CURVE_KEYS, dropna=False, sort=True)):
        g = g.sort_values("epoch")
        k = dict(zip(CURVE_KEYS, key))
        ax.plot(g["epoch"], g["train_err"], "-", color=_colour(i), label="train")
        ax.plot(g["epoch"], g["val_err"], "--", color=_colour(i), label="validation")
        mark_thesis_best(ax, reference, k, float(g["epoch"].max()) * 1.02, _colour(i), True)
    return _finish(ax, "epoch", "top-1 error (%)", title, legend_size=7, title_size=8)


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
    legend_beside(axes[1])
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
        legend_beside(ax)
    return fig


def plot_lr_schedules(schedules: pd.DataFrame, ax=None, experiment: int | None = None):
    """Learning rate per epoch; schedules has columns label, epoch, lr (and optionally experiment)."""
    ax = _ax(ax)
    s = schedules if experiment is None else schedules[schedules["experiment"] == experiment]
    for i, (lab, g) in enumerate(s.groupby("label", sort=False)):  # in the order of the runs (1, 2, 16 workers)
        g = g.sort_values("epoch")
        ax.step(g["epoch"], g["lr"], where="post", color=_colour(i), label=lab)
    return _finish(ax, "epoch", "learning rate", legend_size=6)


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
    ax = _ax(ax, figsize=(9, 3.6))
    u = df[df["kind"] == "util"] if "kind" in df.columns else df
    runs = sorted(u["run"].dropna().unique(), key=str)
    colours = {run: _colour(i) for i, run in enumerate(runs)}
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


def plot_steady_state(rq2: pd.DataFrame, ax=None):
    """RQ2: PyTorch beside Horovod+PyTorch in images/s per GPU, by the thesis's formula and with the first batch
    left out, for the GPU counts where the thesis prints the first batch. Bars start at 0 (absolute values)."""
    ax = _ax(ax)
    d = rq2.dropna(subset=["steady_images_per_s"])
    counts = sorted(d["gpus"].unique())
    bars = [("pytorch", "thesis_images_per_s", "", "PyTorch — thesis formula (first batch included)"),
            ("horovod+pytorch", "thesis_images_per_s", "", "Horovod+PyTorch — thesis formula"),
            ("pytorch", "steady_images_per_s", "//", "PyTorch — first batch left out"),
            ("horovod+pytorch", "steady_images_per_s", "//", "Horovod+PyTorch — first batch left out")]
    width = 0.8 / len(bars)
    colour = {"pytorch": PALETTE[0], "horovod+pytorch": PALETTE[1]}
    for j, (fw, col, hatch, label) in enumerate(bars):
        xs, ys = [], []
        for i, g in enumerate(counts):
            row = d[(d["gpus"] == g) & (d["framework"] == fw)]
            if len(row):
                xs.append(i - 0.4 + (j + 0.5) * width)
                ys.append(float(row[col].iloc[0]) / g)
        ax.bar(xs, ys, width, color=colour[fw], hatch=hatch, edgecolor="white" if not hatch else "black",
               linewidth=0.5, label=label)
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(counts)), [f"{int(g)} GPUs" for g in counts])
    ax.set_ylim(0, max([1.0] + [float(v) / g for g, v in zip(d["gpus"], d[["thesis_images_per_s",
                                                                             "steady_images_per_s"]].max(axis=1))])
                * 1.25)
    ax.set_ylabel("images / s per GPU")
    ax.legend(fontsize=7, loc="upper center", ncols=2)
    ax.set_title("RQ2: PyTorch vs Horovod+PyTorch, thesis formula vs first batch left out (Tables 5/6, 8/9)",
                 fontsize=9)
    return ax
