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
import pandas as pd  # noqa: E402


#: Okabe & Ito (2008), colour-blind safe
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
FRAMEWORK_NAME = {"pytorch": "PyTorch", "horovod+pytorch": "Horovod+PyTorch", "horovod+tensorflow": "Horovod+TF",
                  "tensorflow": "TF (MWMS)", "emulated": "emulated"}


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


def legend_beside(ax, last: str | None = None) -> None:
    """The axes' legend moved right of it, off the data (the constrained layout makes room); the entry labelled
    `last` (a reference's marker) after the curves, which keep their order."""
    pairs = list(zip(*ax.get_legend_handles_labels()))
    pairs.sort(key=lambda hl: hl[1] == last)
    if pairs:
        handles, labels = zip(*pairs)
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


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


def plot_headline_accuracy(rows: pd.DataFrame, ax=None, margin: float | None = None, words: dict | None = None):
    """Accuracy against workers: each quality experiment's best top-1 minus its 1-worker baseline's (points), ours
    (solid) and the thesis's (dashed, the same colour); ideal: no loss (0), the declared margin shaded where given.
    rows: headline_accuracy's; words: experiment -> what it is, in a few words (its label)."""
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
                label=f"exp {int(exp)}: {(words or {}).get(int(exp), '')} — {'thesis' if thesis else 'ours'}")
    ax.set_xscale("log", base=2)
    log2_ticks(ax, "x")
    _finish(ax, "workers", "best top-1 minus 1 worker's (points)", "Does accuracy hold? Best top-1 against workers",
            legend_size=6)
    legend_below(ax)
    return ax


def legend_below(ax) -> None:
    """The legend under the axes, two columns: off every line and point (the constrained layout makes room)."""
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)


def headline_figure(speedups: pd.DataFrame, accuracy: pd.DataFrame, cores: int | None = None,
                    margin: float | None = None, words: dict | None = None):
    """The report's first figure: a panel for speed-up against workers and one for accuracy against workers, each
    drawn where its rows are (neither empty: the maker says why not instead)."""
    panels = [p for p, rows in (("speedup", speedups), ("accuracy", accuracy)) if len(rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.6 * len(panels), 5.0), squeeze=False, layout="constrained")
    for ax, panel in zip(axes[0], panels):
        if panel == "speedup":
            plot_headline_speedup(speedups, ax=ax, cores=cores)
        else:
            plot_headline_accuracy(accuracy, ax=ax, margin=margin, words=words)
    return fig
