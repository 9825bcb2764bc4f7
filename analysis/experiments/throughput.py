"""Experiments 1-3, the thesis's throughput (its Tables 1-9 and Figures 14-17): images/s and speed-up against
workers, per framework and per-GPU batch, our runs beside the thesis's; the first batch left out of its formula
(RQ2); the frameworks side by side in our runs; experiment 3's runs beside the scaling advisor's predictions and
across hosts under a limited link. Its question's page and notebook: "Does Horovod speed up PyTorch's distributed
training?" (RQ2).
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from contract.config import THESIS_BATCH_INDEX  # noqa: E402

from .. import figures as fg  # noqa: E402
from .. import flags as fl  # noqa: E402
from .. import link as lk  # noqa: E402
from .. import numbers as nb  # noqa: E402
from .. import reference as rf  # noqa: E402
from .. import tables as tb  # noqa: E402
from ..advisor import runs as advisor_runs  # noqa: E402
from ..entries import (THESIS_SOURCE, Drawn, Experiment, Figure, Inputs, Table, framework_rows,  # noqa: E402
                       thesis_source)
from ..nbhelpers import show  # noqa: E402
from ..page import Question  # noqa: E402

EXPERIMENTS = tuple(Experiment(n, "throughput") for n in (1, 2, 3))
REF = rf.load_reference()
THESIS_TABLES = rf.tables_of(REF, [e.number for e in EXPERIMENTS])
THROUGHPUT_NOTES = ("thesis_images_per_s: the thesis's value; ours_thesis_formula: per-GPU batch x GPUs / "
                    "running-mean batch time at batch 199; ours_steady: the same without the first warm-up batches; "
                    "the speed-ups divide each by our 1-GPU run's.", tb.SCALE_NOTE)
PLACEMENT_NOTE = ("threads_per_rank, cpus_per_rank: what each rank ran with (manifest.json's per-rank placement; "
                  "empty where the ranks differed or the runs predate the record); nodes of our own rows: the hosts "
                  "their ranks ran on.")
FLAG_NOTE = ("flag: why a row's number does not measure what it claims, with the reason (analysis/flags.py): a "
             "speed-up above its processes (impossible: its baseline was slowed), a baseline of other threads a "
             "rank, a run whose timed steps did not have their CPUs alone (host busy, CPU short: docs/training.md); "
             "empty for a clean row and for runs that predate the record.")
TF_NEEDS = "`make setup-tf` (TensorFlow and Horovod with it), then"
#: Figures 12 and 13: time of the first training batch printed by each script (seconds)
FIRST_BATCH_S = {("pytorch", 2): 18.532, ("horovod+pytorch", 2): 9.696,
                 ("pytorch", 32): 21.925, ("horovod+pytorch", 32): 9.950}


# ============================================================================================ makers


def throughput(inputs: Inputs, entry: Table) -> pd.DataFrame:
    return throughput_table(inputs.df, inputs.ref, entry.options["table"])


def throughput_notes(inputs: Inputs, frame: pd.DataFrame) -> list[str]:
    """The throughput tables' notes, and a line for each comparison whose rows ran with different threads or
    CPUs a rank (the manifests' per-rank placement)."""
    flagged = frame["flag"].map(fl.text).ne("").sum() if "flag" in frame else 0
    count = [f"{flagged} row(s) flagged: read the flag column before the number."] if flagged else []
    return [*THROUGHPUT_NOTES, PLACEMENT_NOTE, FLAG_NOTE, *count, *tb.unlike_rows(frame)]


def predicted_beside_measured(inputs: Inputs, entry: Table) -> pd.DataFrame | None:
    """Experiment 3's throughput runs beside the advisor's prediction for each one's placement (none: no such runs)."""
    fits = inputs.link_fits or advisor_runs.advisor.CHECK_ROOT
    table = advisor_runs.prediction_table(inputs.df, check_root=fits)
    return table if len(table) else None


def links(inputs: Inputs) -> pd.DataFrame:
    """The link sweep's runs against each host's link rate (analysis.link), made once for its table and figure."""
    return lk.link_table(inputs.df)


def link_rate_rows(inputs: Inputs, entry: Table) -> pd.DataFrame | None:
    table = inputs.once(links)
    return table if len(table) else None


def scaling(inputs: Inputs, entry: Figure) -> Drawn:
    """Throughput and speed-up (draw_scaling); a figure of the thesis's points alone says so, not 'N runs'."""
    drawn = len(scaling_rows(inputs.scaling, **entry.options)[1])
    figure = draw_scaling(inputs.scaling, entry.title, cores=inputs.cores, **entry.options)
    return Drawn(figure, inputs.source if drawn else THESIS_SOURCE)


def steady_state(inputs: Inputs, entry: Figure) -> Drawn:
    """RQ2 from the thesis's values alone: the first batch left out of its throughput formula."""
    figure, ax = plt.subplots(figsize=(7, 4.2))
    plot_steady_state(rq2_steady_state(inputs.ref), ax=ax)
    return Drawn(figure, thesis_source(entry))


def link_rates(inputs: Inputs, entry: Figure) -> Drawn | str | None:
    """Throughput against the link's rate (make link-sweep's runs); where runs crossed hosts but none under a
    limited link, why not; nothing to say of runs on one host."""
    if len(inputs.once(links)):
        return Drawn(lk.link_figure(inputs.once(links), entry.title), inputs.source)
    hosts = inputs.df["hosts"] if "hosts" in inputs.df else pd.Series(dtype=float)
    across = (inputs.df["kind"] == "run") & (hosts > 1)
    return "no link-sweep runs (make link-sweep, then make report OUT=results/link_sweep)" if across.any() else None


def table_reads(table: int) -> Callable:
    """A throughput table's reads: the frameworks of its rows (table_frameworks)."""
    return framework_rows(table_frameworks(rf.table_rows(REF, table)))


# ============================================================================================ the thesis's tables


def table_frameworks(thesis: pd.DataFrame) -> set[str]:
    """The frameworks whose runs a throughput table holds: its thesis rows', and beside the thesis's
    Horovod+TensorFlow rows (Tables 1, 4, 7) also TensorFlow's own MultiWorkerMirroredStrategy."""
    frameworks = set(thesis["framework"])
    return frameworks | (set(tb.TENSORFLOW) if "horovod+tensorflow" in frameworks else set())


def throughput_table(df: pd.DataFrame, ref: pd.DataFrame, table: int) -> pd.DataFrame:
    """Thesis Table 1-9 with our thesis-formula and steady-state images/s, speed-up over our 1-GPU run of the same
    numerics; only our fp32 runs at the thesis scale sit beside the thesis's rows."""
    thesis = rf.table_rows(ref, table)
    exp = int(thesis["experiment"].iloc[0])
    summary = tb.throughput_summary(df)
    # the baseline is the experiment's own 1-GPU run; an experiment that timed none takes the thesis's 1-GPU
    # baseline experiment's (rf.baseline_experiment), never another multi-GPU experiment's
    ones = summary[(summary["gpus"] == 1) & summary["exp"].isin([exp, rf.baseline_experiment(ref)])].sort_values(
        "exp", key=lambda e: e != exp, kind="stable")
    base: dict = {}
    for o in ones.itertuples(index=False):
        base.setdefault((o.framework, o.numerics, o.per_gpu_batch, o.scale), o)
    ours = summary[(summary["exp"] == exp) & summary["framework"].isin(table_frameworks(thesis))]

    def row_from(o, row):
        one = base.get((o.framework, o.numerics, o.per_gpu_batch, o.scale))
        base_thesis, base_steady = (one.thesis_images_per_s, one.steady_images_per_s) if one else (math.nan, math.nan)
        steady_speedup = nb.speedup(o.steady_images_per_s, base_steady)
        row.update(ours_thesis_formula=o.thesis_images_per_s, ours_steady=o.steady_images_per_s,
                   ours_data_wait_pct=100 * o.data_share,
                   n_runs=int(o.n_runs), ours_speedup=nb.speedup(o.thesis_images_per_s, base_thesis),
                   ours_steady_speedup=steady_speedup, backend=o.backend,
                   numerics=o.numerics, processes=o.processes, threads_per_rank=o.threads_per_rank,
                   cpus_per_rank=o.cpus_per_rank, flag=tb.row_flag(o, one, steady_speedup))
        return row

    rows, used = [], set()
    for r in thesis.itertuples(index=False):
        row = {"framework": r.framework, "numerics": nb.FP32, "per_gpu_batch": r.per_gpu_batch, "nodes": r.nodes,
               "gpus": r.gpus, "thesis_images_per_s": r.throughput, "ours_thesis_formula": math.nan,
               "ours_steady": math.nan, "ours_speedup": math.nan, "ours_steady_speedup": math.nan,
               "ours_data_wait_pct": math.nan, "n_runs": 0, "scale": "thesis"}
        for i, o in zip(ours.index, ours.itertuples(index=False)):
            if (o.framework, o.numerics, o.per_gpu_batch, o.gpus, o.scale) == \
                    (r.framework, nb.FP32, r.per_gpu_batch, r.gpus, "thesis"):
                used.add(i)
                row_from(o, row)
        rows.append(row)
    for i, o in zip(ours.index, ours.itertuples(index=False)):
        if i not in used:
            rows.append(row_from(o, {"framework": o.framework, "per_gpu_batch": o.per_gpu_batch, "nodes": o.hosts,
                                     "gpus": o.gpus, "thesis_images_per_s": math.nan,
                                     "scale": tb.scale_label(o.scale)}))
    cols = ["framework", "backend", "numerics", "per_gpu_batch", "nodes", "gpus", "processes", "thesis_images_per_s",
            "ours_thesis_formula", "ours_steady", "threads_per_rank", "cpus_per_rank", "ours_speedup",
            "ours_steady_speedup", "ours_data_wait_pct", "n_runs", "scale", "flag"]
    return pd.DataFrame(rows, columns=cols)


def without_first_batch(thesis_images_per_s: float, per_gpu_batch: float, gpus: float,
                        first_batch_s: float, n_batches: int = THESIS_BATCH_INDEX + 1) -> float:
    """Re-estimate a thesis throughput with the first batch taken out of the 200-batch mean.

    The thesis's mean at batch 199 covers n = 200 batches: sum = n * B*G / T. Removing the first
    batch's time t0 leaves (sum - t0) / (n - 1) per batch, and B*G over that is the estimate.
    """
    if not (thesis_images_per_s > 0 and math.isfinite(first_batch_s)):
        return math.nan
    total = n_batches * per_gpu_batch * gpus / thesis_images_per_s
    rest = (total - first_batch_s) / (n_batches - 1)
    return per_gpu_batch * gpus / rest if rest > 0 else math.nan


def rq2_steady_state(ref: pd.DataFrame | None = None) -> pd.DataFrame:
    """Tables 5/6 and 8/9 with the first batch (Figures 12-13) taken out of the thesis's 200-batch mean.

    Columns framework, gpus, thesis_images_per_s, first_batch_s, steady_images_per_s; the last two are empty
    where the thesis prints no first-batch time (4, 8, 16 and 24 GPUs).
    """
    ref = REF if ref is None else ref
    t = ref[ref["table"].isin([5, 6, 8, 9])]
    rows = []
    for r in t.itertuples(index=False):
        first = FIRST_BATCH_S.get((r.framework, int(r.gpus)), math.nan)
        steady = without_first_batch(r.throughput, int(r.per_gpu_batch), int(r.gpus), first)
        rows.append({"framework": r.framework, "gpus": int(r.gpus), "thesis_images_per_s": r.throughput,
                     "first_batch_s": first, "steady_images_per_s": round(steady, 2) if math.isfinite(steady)
                     else math.nan})
    return pd.DataFrame(rows).sort_values(["gpus", "framework"], kind="stable").reset_index(drop=True)


# ============================================================================================ scaling figures


def gpu_ticks(ax, gpus) -> None:
    """x ticks at the GPU counts measured (1, 2, 4, 8, 16, 24, 32), not at matplotlib's 0, 5, 10..."""
    xs = sorted({int(g) for g in gpus if g == g})
    if xs:
        ax.set_xticks(xs, [str(x) for x in xs], fontsize=7)


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
    colours = {k: fg._colour(i) for i, k in enumerate(keys)}

    def style(src, sc, fw, b, n):
        ls, mk = _SOURCE_STYLE.get(src, ("-", "o"))
        return colours[(fw, b, n, "thesis" if sc == "thesis" else "other")], ls, mk

    return style


def _label(source, scale, fw, b, n) -> str:
    tag = "thesis" if source == "thesis" else source.replace("ours", "ours" + ("" if scale == "thesis"
                                                                                 else f", {scale}"))
    return f"{fg.FRAMEWORK_NAME.get(fw, fw)} b={int(b)}{nb.numerics_suffix(n)} — {tag}"


def plot_throughput(scaling: pd.DataFrame, ax=None, framework=None, per_gpu_batch=None, ideal: bool = True,
                    ideal_max: float | None = None):
    """Images/s vs GPUs (thesis Figures 14-17, left), with the ideal line from each series' 1-GPU point, up to
    ideal_max workers (a machine's core count: past it, linear scaling is not what ideal means)."""
    ax = fg._ax(ax)
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
        fg.log2_ticks(ax, "y")
        gpu_ticks(ax, np.concatenate([line.get_xdata() for line in ax.get_lines()]))
    return fg._finish(ax, "GPUs (workers)", "images / s (log scale)", "Throughput (dotted: ideal linear scaling)")


def plot_speedup(scaling: pd.DataFrame, ax=None, framework=None, per_gpu_batch=None,
                 ideal_max: float | None = None):
    """Speed-up over the 1-GPU baseline vs GPUs, with the ideal line y = x up to ideal_max workers (a machine's
    core count) when given."""
    ax = fg._ax(ax)
    xmax = 1.0
    style = _styles(scaling, framework, per_gpu_batch)
    for key, g in _series(scaling, framework, per_gpu_batch):
        g = g.dropna(subset=["speedup"]).sort_values("gpus")
        if g.empty:
            continue
        xmax = max(xmax, float(g["gpus"].max()))
        colour, ls, mk = style(*key)
        ax.plot(g["gpus"], g["speedup"], ls, marker=mk, color=colour, label=_label(*key))
        fg.flagged_points(ax, g)
    top = min(xmax, ideal_max) if ideal_max else xmax
    ax.plot([1, top], [1, top], color="grey", linewidth=1, label="ideal")
    gpu_ticks(ax, np.concatenate([line.get_xdata() for line in ax.get_lines()]))
    fg._finish(ax, "GPUs (workers)", "speed-up over 1 GPU", "Speed-up")
    missing = _without_baseline(scaling, framework, per_gpu_batch)
    if missing:  # measured, but with no 1-GPU run to divide by: said under the axis, off the data, not dropped silently
        ax.set_xlabel("GPUs (workers)\nno speed-up (no 1-GPU run): " + ", ".join(missing))
    return ax


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


def draw_scaling(scaling: pd.DataFrame, title: str, framework, per_gpu_batch=None, cores: int | None = None):
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


def plot_steady_state(rq2: pd.DataFrame, ax=None):
    """RQ2: PyTorch beside Horovod+PyTorch in images/s per GPU, by the thesis's formula and with the first batch
    left out, for the GPU counts where the thesis prints the first batch. Bars start at 0 (absolute values)."""
    ax = fg._ax(ax)
    d = rq2.dropna(subset=["steady_images_per_s"])
    counts = sorted(d["gpus"].unique())
    bars = [("pytorch", "thesis_images_per_s", "", "PyTorch — thesis formula (first batch included)"),
            ("horovod+pytorch", "thesis_images_per_s", "", "Horovod+PyTorch — thesis formula"),
            ("pytorch", "steady_images_per_s", "//", "PyTorch — first batch left out"),
            ("horovod+pytorch", "steady_images_per_s", "//", "Horovod+PyTorch — first batch left out")]
    width = 0.8 / len(bars)
    colour = {"pytorch": fg.PALETTE[0], "horovod+pytorch": fg.PALETTE[1]}
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


# ============================================================================================ the frameworks


FRAMEWORKS = ["pytorch", "horovod+pytorch", *tb.TENSORFLOW]
KEYS = ["scale", "exp", "per_gpu_batch", "gpus"]  # one experiment's configuration: runs of two are never averaged


def framework_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per scale, experiment, per-GPU batch and worker count with our fp32 throughput runs (DataParallel left
    out: the thesis's PyTorch is DDP); a column of images/s, its ratio to PyTorch's and its speed-up per framework
    over the same experiment's 1-worker run (else the thesis's 1-GPU baseline experiment's, rf.baseline_experiment,
    as its Table 5 does)."""
    s = tb.throughput_summary(df)
    s = s[s["framework"].isin(FRAMEWORKS) & (s["backend"] != "dp") & (s["numerics"] == nb.FP32)]
    columns = KEYS + [f"{fw}{suffix}" for fw in FRAMEWORKS for suffix in ("", "_vs_pytorch", "_speedup")] + ["flag"]
    if s.empty:
        return pd.DataFrame(columns=columns)
    s = s.assign(scale=s["scale"].map(tb.scale_label))
    wide = s.pivot_table(index=KEYS, columns="framework", values="steady_images_per_s", aggfunc="mean")
    wide = wide.reindex(columns=FRAMEWORKS)
    disturbed = s.pivot_table(index=KEYS, columns="framework", values="disturbed", aggfunc=tb.joined).reindex(
        index=wide.index, columns=FRAMEWORKS)
    rows, baseline = [], rf.baseline_experiment(rf.load_reference())
    for (scale, exp, batch, gpus), r in wide.iterrows():
        own = (scale, exp, batch, 1) if (scale, exp, batch, 1) in wide.index else (scale, baseline, batch, 1)
        row = {"scale": scale, "exp": exp, "per_gpu_batch": batch, "gpus": gpus}
        for fw in FRAMEWORKS:
            base = wide.loc[own, fw] if own in wide.index else math.nan
            row.update({fw: r[fw], f"{fw}_vs_pytorch": nb.speedup(r[fw], r["pytorch"]),
                        f"{fw}_speedup": nb.speedup(r[fw], base)})
        row["flag"] = fl.join(f"{fg.FRAMEWORK_NAME[fw]}: {why}" for fw in FRAMEWORKS for why in
                              (fl.above_ideal(row[f"{fw}_speedup"], gpus), fl.text(disturbed.loc[(scale, exp, batch,
                                                                                                  gpus), fw])) if why)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _line(r, spread: float) -> str | None:
    present = [fw for fw in FRAMEWORKS if not math.isnan(r[fw])]
    if len(present) < 2:
        return None

    def words(fw: str) -> str:
        notes = [f"{r[f'{fw}_vs_pytorch']:.2f}x PyTorch's"] if fw != "pytorch" and not math.isnan(
            r[f"{fw}_vs_pytorch"]) else []
        notes += [f"speed-up {r[f'{fw}_speedup']:.2f} over 1 worker"] if r["gpus"] > 1 and not math.isnan(
            r[f"{fw}_speedup"]) else []
        return f"{fg.FRAMEWORK_NAME[fw]} {r[fw]:.0f} images/s" + (f" ({', '.join(notes)})" if notes else "")

    first, second = sorted(present, key=lambda fw: -r[fw])[:2]
    verdict = (f"fastest: {fg.FRAMEWORK_NAME[first]}" if r[first] / r[second] > spread else
               "none ahead by more than the repeats' spread" if not math.isnan(spread) else "none named fastest")
    return (f"- experiment {int(r['exp'])}, {r['scale']}, per-GPU batch {int(r['per_gpu_batch'])}, "
            f"{int(r['gpus'])} worker(s): " + "; ".join(map(words, present)) + f" — {verdict}.")


def frameworks_reading(df: pd.DataFrame) -> str:
    """RQ2 over the three frameworks: where our runs measured two or more of them at one configuration. A framework
    is named fastest only where it leads the next by more than one configuration's repeats differ
    (tables.repeat_spread)."""
    table = framework_table(df)
    spread, repeated = tb.repeat_spread(df)
    noise = (f"The same configuration measured twice ({repeated} configuration(s), equal config fingerprints on as "
             f"many nodes) differed by up to {spread:.2f}x, so a framework is named fastest only where it leads the "
             "next by more."
             if repeated else "No configuration was measured twice, so no measurement's noise is known and no "
             "framework is named fastest.")
    lines = ["**Reading, computed from our runs (steady state, images/s).** The thesis compared Horovod+TensorFlow "
             "(tf_cnn_benchmarks) with PyTorch and Horovod+PyTorch (Tables 1-9); here each framework trains the same "
             "model on the same synthetic batches, TensorFlow in processes of its own (`make setup-tf`). " + noise, ""]
    lines += [line for line in (_line(r, spread) for _, r in table.iterrows()) if line] or [
        "- no configuration was measured with two or more frameworks (TensorFlow's rows need `make setup-tf`)."]
    return "\n".join(lines) + "\n"


# ============================================================================================ the notebook's helpers


#: Figures 14-17 as the notebooks show them: the report's figure function (the thesis's P100 row; ours at other
#: scales on a row below), as an image
@functools.wraps(draw_scaling)
def scaling_figure(*args, **kwargs):
    return show(draw_scaling(*args, **kwargs))


def speedup_pivot(scaling: pd.DataFrame, framework) -> pd.DataFrame:
    """Speed-up by GPUs (rows) and source/framework/batch/numerics (columns; one column per numerics, never a mean
    of fp32 and bf16)."""
    fw = [framework] if isinstance(framework, str) else list(framework)
    s = scaling[scaling["framework"].isin(fw)].copy()
    s["series"] = [f"{src} | {f} b={int(b)}{nb.numerics_suffix(n)}" + ("" if sc == "thesis" else f" [{sc}]")
                   for src, f, b, n, sc in zip(s["source"], s["framework"], s["per_gpu_batch"], s["numerics"],
                                               s["scale"])]
    return s.pivot_table(index="gpus", columns="series", values="speedup").round(2)


def rq2_verdict(rq2: pd.DataFrame) -> str:
    """One plain sentence per GPU count: who is faster with and without the first batch."""
    lines = []
    for g, grp in rq2.dropna(subset=["steady_images_per_s"]).groupby("gpus"):
        d = grp.set_index("framework")
        if not {"pytorch", "horovod+pytorch"} <= set(d.index):
            continue
        pt, hv = d.loc["pytorch"], d.loc["horovod+pytorch"]
        lines.append(
            f"{int(g)} GPUs: thesis formula Horovod {hv.thesis_images_per_s:.0f} vs PyTorch "
            f"{pt.thesis_images_per_s:.0f}"
            f" images/s (Horovod {100 * (hv.thesis_images_per_s / pt.thesis_images_per_s - 1):+.1f} %); "
            f"first batch left out: Horovod {hv.steady_images_per_s:.0f} vs PyTorch {pt.steady_images_per_s:.0f}"
            f" (Horovod {100 * (hv.steady_images_per_s / pt.steady_images_per_s - 1):+.1f} %).")
    return "\n".join(lines) if lines else "no first-batch times to re-analyse"


def first_batch_penalty(ref: pd.DataFrame) -> pd.DataFrame:
    """Extra seconds per run if every epoch pays its first batch (Figures 12-13), vs the wall-clock gap."""
    rows = []
    for g in (2, 32):
        pt, hv = FIRST_BATCH_S[("pytorch", g)], FIRST_BATCH_S[("horovod+pytorch", g)]
        rows.append({"gpus": g, "first_batch_pytorch_s": pt, "first_batch_horovod_s": hv,
                     "extra_per_epoch_s": round(pt - hv, 3),
                     "extra_over_90_epochs": nb.format_duration(rf.THESIS_EPOCHS * (pt - hv))})
    t12 = ref[(ref["table"] == 12) & (ref["gpus"] == 32)].set_index("framework")["wallclock_s"]
    gap = float(t12["pytorch"] - t12["horovod+pytorch"])
    out = pd.DataFrame(rows)
    out["table12_wallclock_gap_32gpus"] = nb.format_duration(gap)
    return out


# ============================================================================================ the declarations

QUESTIONS = (Question("throughput", "Throughput", "Does Horovod speed up PyTorch's distributed training, and how does "
                      "throughput scale with workers?", "rq2_horovod_speedup",
                      ("fig17_*", "table0[235689]", "scaling", "throughput_summary", "rq2_steady_state",
                       "exp3_predicted", "link_rates")),)
RQ2 = [
    ("md", "# RQ2 — does Horovod speed up PyTorch's distributed training?\n\n"
           "The thesis answers yes: Horovod+PyTorch reached 6104 images/s on 32 GPUs (29.4x) against PyTorch's "
           "5697 (27.5x) (Tables 8-9, Figure 17). Its throughput formula divides by the running-mean batch time at "
           "batch 199, so the first batch — 18.5 s (PyTorch) vs 9.7 s (Horovod) on 2 GPUs, 21.9 s vs 9.95 s on "
           "32 GPUs (Figures 12-13), mostly data loading — is averaged into the 200-batch mean."),
    ("code", None),
    ("md", "## The thesis's numbers (Tables 2/3, 5/6, 8/9) and speed-ups"),
    ("code", "scaling = an.tables.scaling_table(df, ref)\n"
             "an.speedup_pivot(scaling, ['pytorch', 'horovod+pytorch'])"),
    ("code", "an.scaling_figure(scaling, 'PyTorch and Horovod+PyTorch (Figure 17)', ['pytorch', 'horovod+pytorch'])"),
    ("md", "## Re-analysis: the same tables without the first batch\n\n"
           "With n = 200 batches and thesis throughput T, the summed batch time is 200·B·G/T; removing the first "
           "batch t₀ leaves (200·B·G/T − t₀)/199 per batch. The thesis prints t₀ only for 2 and 32 GPUs."),
    ("code", "rq2 = an.rq2_steady_state(ref)\nrq2"),
    ("code", "fig, ax = an.subplots(1, 1)\nan.plot_steady_state(rq2, ax=ax)\nan.show(fig)"),
    ("code", "print(an.rq2_verdict(rq2))"),
    ("md", "## What this does to the thesis's answer\n\n"
           "Left out of the mean, the first batch no longer favours Horovod: at 2 and at 32 GPUs — the only GPU "
           "counts for which the thesis prints the first batch — the PyTorch script's throughput is about 2 % "
           "*higher* than Horovod's (figure and lines above), where the thesis's formula has it 5-7 % lower. The "
           "thesis's 'Horovod scales better' (29.4x vs 27.5x on 32 GPUs) measures how long each script takes to "
           "start an epoch (the data-loader start-up in its first batch), not how fast gradients are exchanged. "
           "So the evidence for RQ2 becomes: no difference in steady-state training throughput was shown; the "
           "PyTorch script's slower epoch start-up costs time once per epoch. Over 90 epochs that start-up gap is "
           "about 18 minutes at 32 GPUs (table below), part of the 42-minute gap between the two scripts' 90-epoch "
           "wall-clock in Table 12 (experiment 6). Caveat: the first-batch times come from one log excerpt each "
           "(Figures 12-13); for 4-24 GPUs the thesis gives none, so those rows are not re-estimated."),
    ("code", "an.first_batch_penalty(ref)"),
    ("md", "## Our runs (same formula and the steady-state estimate from per-iteration records)"),
    ("code", "an.tables.throughput_summary(df)"),
    ("md", "## The frameworks in our runs: PyTorch DDP, Horovod+PyTorch, Horovod+TensorFlow and TensorFlow's "
           "MultiWorkerMirroredStrategy, each where it ran (the 'Made from' line above names the runs)"),
    ("code", "an.framework_table(df)"),
    ("code", "an.markdown(an.frameworks_reading(df))"),
]
NOTEBOOKS = {"rq2_horovod_speedup.ipynb": RQ2}
TABLES = (
    *(Table(f"table{t:02d}", f"Table {t}", (rf.experiment_of(REF, t),), throughput, f"Table {t}. {rf.CAPTIONS[t]}",
            throughput_notes, options={"table": t}, reads=table_reads(t),
            needs=TF_NEEDS if "TensorFlow" in rf.CAPTIONS[t] else "", part="thesis") for t in THESIS_TABLES),
    Table("scaling", "Tables 1-9", (1, 2, 3), lambda inputs, entry: inputs.scaling,
          "Throughput, speed-up over 1 GPU, scaling efficiency and 90-epoch wall-clock estimate", part="derived"),
    Table("rq2_steady_state", "Tables 5/6 and 8/9, Figures 12-13", (), lambda inputs, entry: rq2_steady_state(
          inputs.ref), "RQ2: Tables 5/6 and 8/9 with the first training batch (Figures 12-13) left out",
          ("steady_images_per_s = B*G / ((200 * B*G / thesis - first_batch_s) / 199); empty where the thesis "
           "prints no first-batch time.",), thesis_only=True, part="derived"),
    Table("exp3_predicted", "", (3,), predicted_beside_measured,
          "Experiment 3: each run's measured images/s beside the advisor's prediction for its placement",
          advisor_runs.NOTES, advisor_runs.shown, part="appendix"),
    Table("link_rates", "", (3,), link_rate_rows, "Experiment 3 across hosts: throughput against each host's link rate",
          lk.NOTES, lk.shown, part="appendix"),
)
FIGURES = (
    *(Figure(f"fig{n}_scaling_horovod_tf_b{b}", f"Figure {n}", (1, 2, 3), scaling,
             f"Figure {n}. Scaling of Horovod+TensorFlow, per-GPU batch {b}",
             {"framework": tb.TENSORFLOW, "per_gpu_batch": b},  # ours: MultiWorkerMirroredStrategy beside it
             reads=lambda df, b=b: framework_rows(tb.TENSORFLOW)(df) & (df["per_gpu_batch"] == b), needs=TF_NEEDS,
             part="thesis")
      for n, b in ((14, 32), (15, 64), (16, 128))),
    Figure("fig17_scaling_pytorch_vs_horovod", "Figure 17", (1, 2, 3), scaling,
           "Figure 17. Scaling of PyTorch and Horovod+PyTorch", {"framework": ["pytorch", "horovod+pytorch"]},
           reads=framework_rows(["pytorch", "horovod+pytorch"]), part="thesis"),
    Figure("rq2_steady_state", "Tables 5/6 and 8/9 and Figures 12-13", (), steady_state, part="appendix"),
    Figure("link_rates", "", (3,), link_rates, "Experiment 3 across hosts: throughput against each host's link",
           part="appendix"),
)
EXPORTS = ("first_batch_penalty", "framework_table", "frameworks_reading", "plot_steady_state", "rq2_steady_state",
           "rq2_verdict", "scaling_figure", "speedup_pivot")
