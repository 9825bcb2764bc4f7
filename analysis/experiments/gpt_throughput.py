"""Experiment 14 (issue 66), a GPT-style decoder's throughput: tokens/s on 1, 2, 4 processes with DDP, FSDP and
Horovod, each process count's speed-up and efficiency over the same backend's 1-process run (as the thesis's Tables
2-9 for images/s), model FLOP/s, MFU where the device's peak is known, and the peak memory of a rank; a figure of
tokens/s, speed-up and memory against processes, a backend a line. Its question's page and notebook: "How many
tokens/s does a GPT-style decoder train at, and what does FSDP's sharding cost and save?" (RQ6).

Everything is read from the runs frame (analysis/runs.py): a bench row holds its record's workload rates
(tokens_per_s, model_flops_per_s, mfu: contract/runfolder.py workload_rates) and its run's largest peak memory a
rank (the manifest's placement entries: contract/placement.py peak_memory).
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .. import figures as fg  # noqa: E402
from .. import flags as fl  # noqa: E402
from .. import numbers as nb  # noqa: E402
from .. import tables as tb  # noqa: E402
from ..entries import Drawn, Experiment, Figure, Inputs, Table  # noqa: E402
from ..page import Question  # noqa: E402

EXPERIMENT = 14
# measured as experiments 1-3 are, by a bench record's windows/s (a window of the context's tokens is its sample):
# the report's own throughput summary and the comparison with a reference machine read its runs so
EXPERIMENTS = (Experiment(EXPERIMENT, "tokens"),)  # tokens/s: kept out of the images/s tables
RATES = ("tokens_per_s", "model_flops_per_s", "mfu")  # the bench record's workload rates (contract/runfolder.py Bench)
UNMEASURED = "unmeasured"  # an MFU cell where the device's peak is unknown (the CPU, a GPU contract/machine.py lacks)
BACKEND_NAME = {"ddp": "DDP", "fsdp": "FSDP", "hsdp": "HSDP (hybrid)", "horovod": "Horovod"}
#: a backend with no 1-process run of its own -> the backend whose 1-process run is its speed-up's denominator: hybrid
#: sharding needs two nodes or more, and on one process it is full sharding
BASELINE_OF = {"hsdp": "fsdp"}
#: one configuration: its runs are averaged
KEYS = ["scale", "backend", "framework", "numerics", "per_gpu_batch", "gpus", "processes", "nodes"]
#: one backend's series at one batch: its 1-process row is the speed-up's denominator
SERIES = ["scale", "backend", "framework", "numerics", "per_gpu_batch"]
COLUMNS = ["scale", "backend", "framework", "numerics", "per_gpu_batch", "context", "processes", "nodes",
           "tokens_per_s", "speedup", "efficiency", "model_tflops_per_s", "mfu_pct", "peak_gib_a_rank",
           "peak_memory_of", "threads_per_rank", "n_runs", "flag"]
TO_FILL = "`make exp14` (after `make setup-corpus`)"  # what fills this experiment's entries
NO_RUNS = f"no experiment 14 runs: {TO_FILL} draws it"
NEEDS = "`make setup-corpus` (root: the local corpus), then"
NOTES = (
    "tokens_per_s: the bench record's (steady-state windows/s x the context's tokens, contract/runfolder.py "
    "workload_rates), the mean over the configuration's runs; context: tokens a window; per_gpu_batch: windows a "
    "process a step; nodes: the nodes the ranks were started on (their ranks of local rank 0, as the manifest's "
    "placement records them).",
    "speedup: tokens/s over the same backend's 1-process row (same scale, framework, numerics and batch a process; "
    "hsdp, which needs two nodes or more, over fsdp's: on one process hybrid sharding is full sharding), "
    "as the thesis's Tables 2-9 divide images/s; efficiency: speedup / processes (1.0: linear scaling).",
    "model_tflops_per_s: the model's FLOPs a second (PaLM's 6N + 12LdT a token, workloads/gpt/sizes.py), in "
    "10^12; mfu_pct: those over the devices' dense peak at the run's precision (contract/machine.py), 'unmeasured' "
    "on the CPU and on a GPU of no declared peak.",
    "peak_gib_a_rank: the largest of the ranks' peaks (manifest.json's placement, peak_memory_bytes), GiB; "
    "peak_memory_of: cuda_allocated (torch's peak of allocated tensors on the GPU: what FSDP's sharding saves) or "
    "cpu_rss (the process's peak resident set on the CPU, torch's own ~800 MB included: a small model's sharding "
    "barely shows).",
    "flag: why a row's number does not measure what it claims (analysis/flags.py): a speed-up above its processes "
    "(impossible: its baseline was slowed), a baseline of other threads a rank, a run whose timed steps did not have "
    "their CPUs alone (host busy, CPU short: docs/training.md); empty for a clean row.",
)


# ============================================================================================ reading the runs


def gpt_bench(df: pd.DataFrame) -> pd.DataFrame:
    """Experiment 14's bench rows of the runs frame (each run counted once, mixed configs refused, each row with
    its record's workload rates and its run's largest peak memory a rank: analysis/runs.py)."""
    bench = df[(df["kind"] == "bench") & (df["exp"] == EXPERIMENT)] if len(df) else df
    return bench.assign(**{column: pd.to_numeric(bench[column], errors="coerce") for column in RATES
                           if column in bench})


def every_recorded(values: pd.Series) -> float:
    """The mean where every run recorded the value; NaN where any did not (an MFU half measured is unmeasured)."""
    return float(values.mean()) if values.notna().all() else math.nan


def configurations(bench: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (KEYS): its runs' mean rates, the largest peak a rank, their disturbances."""
    bench = bench.assign(scale=bench["scale"].fillna("unknown"))
    return bench.groupby(KEYS, dropna=False, sort=True).agg(
        tokens_per_s=("tokens_per_s", "mean"), windows_per_s=("steady_images_per_s", "mean"),
        model_flops_per_s=("model_flops_per_s", "mean"), mfu=("mfu", every_recorded),
        peak_memory_bytes=("peak_memory_bytes", "max"), peak_memory_of=("peak_memory_of", tb.joined),
        threads_per_rank=("threads_per_rank", tb.one_value), disturbed=("disturbed", tb.joined),
        n_runs=("path", "nunique")).reset_index()


# ============================================================================================ the table


def table_row(o, one) -> dict:
    """A configuration's row: its speed-up and efficiency over its series' 1-process row `one` (None: none ran)."""
    processes = o.processes if fl.finite(o.processes) else o.gpus
    speedup = nb.speedup(o.tokens_per_s, one.tokens_per_s if one is not None else math.nan)
    return {"scale": tb.scale_label(o.scale), "backend": o.backend, "framework": o.framework, "numerics": o.numerics,
            "per_gpu_batch": o.per_gpu_batch, "context": round(o.tokens_per_s / o.windows_per_s)
            if o.windows_per_s > 0 and fl.finite(o.tokens_per_s) else math.nan,
            "processes": processes, "nodes": o.nodes, "tokens_per_s": o.tokens_per_s, "speedup": speedup,
            "efficiency": nb.efficiency(speedup, processes), "model_tflops_per_s": o.model_flops_per_s / 1e12,
            "mfu_pct": 100 * o.mfu if fl.finite(o.mfu) else UNMEASURED,
            "peak_gib_a_rank": o.peak_memory_bytes / 2**30, "peak_memory_of": o.peak_memory_of or "unrecorded",
            "threads_per_rank": o.threads_per_rank, "n_runs": int(o.n_runs), "flag": tb.row_flag(o, one, speedup)}


def gpt_throughput_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Experiment 14's table (COLUMNS), a row per configuration, a backend's rows together in order of processes;
    None where the frame holds no experiment 14 bench record."""
    bench = gpt_bench(df)
    if bench.empty:
        return None
    configs = configurations(bench)
    rows = []
    for _, series in configs.groupby(SERIES, dropna=False, sort=True):
        one = next(series[series["gpus"] == 1].itertuples(index=False), None) or borrowed_one(configs, series)
        rows += [table_row(o, one) for o in series.sort_values(["gpus", "nodes"]).itertuples(index=False)]
    return pd.DataFrame(rows, columns=COLUMNS)


def borrowed_one(configs: pd.DataFrame, series: pd.DataFrame):
    """The 1-process row of the backend a series without one is measured against (BASELINE_OF), of the same scale,
    framework, numerics and batch; None where there is none."""
    backend = BASELINE_OF.get(series["backend"].iloc[0])
    same = [c for c in SERIES if c != "backend"]
    first = series.iloc[0]
    match = (configs["backend"] == backend) & (configs["gpus"] == 1)
    for column in same:  # NaN matches NaN: a column unrecorded on both sides
        match &= (configs[column] == first[column]) | (configs[column].isna() & pd.isna(first[column]))
    return next(configs[match].itertuples(index=False), None)


def measured(inputs: Inputs) -> pd.DataFrame | None:
    """The table, made once for the report's table and figure."""
    return gpt_throughput_table(inputs.df)


def table_notes(inputs: Inputs, frame: pd.DataFrame) -> list[str]:
    flagged = int(frame["flag"].map(fl.text).ne("").sum())
    return [*NOTES, *([f"{flagged} row(s) flagged: read the flag column before the number."] if flagged else [])]


# ============================================================================================ the figure


def series_label(key: tuple) -> str:
    scale, backend, _, numerics, batch = key
    return f"{BACKEND_NAME.get(backend, backend)} b={nb.int_text(batch)}{nb.numerics_suffix(numerics)} — {scale}"


def ideal_reach(table: pd.DataFrame, cores: int | None) -> float:
    """The largest process count an ideal line runs to: at the local scale alone, the cores the processes shared
    (past them, linear scaling is not what ideal means); else the largest count measured."""
    local = set(table["scale"]) == {tb.scale_label("local")}
    return float(min(cores, table["processes"].max()) if local and cores else table["processes"].max())


def plot_series(axes, table: pd.DataFrame, reach: float) -> None:
    """Each backend's series on the three panels: tokens/s (dotted: its 1-process rate x processes), speed-up
    (flagged points ringed), peak memory a rank; one node's rows a line, rows across nodes hollow squares beside
    it (the same processes on more nodes is another configuration, never a point of the same line)."""
    for i, (key, g) in enumerate(table.groupby(SERIES, dropna=False, sort=True)):
        g = g.sort_values("processes")
        colour, label = fg._colour(i), series_label(key)
        across = g["nodes"] > 1
        one_node, spread = g[~across], g[across]
        for ax, column in zip(axes, ("tokens_per_s", "speedup", "peak_gib_a_rank")):
            legend = ax is axes[0]  # one legend of the series: the first panel's
            if len(one_node):
                ax.plot(one_node["processes"], one_node[column], "-o", color=colour, label=label if legend else None)
            for nodes, at in spread.groupby("nodes"):
                ax.plot(at["processes"], at[column], "s", mfc="none", color=colour, markersize=8,
                        label=f"{label}, {int(nodes)} nodes" if legend else None)
        one = one_node.loc[one_node["processes"] == 1, "tokens_per_s"]
        if len(one):
            xs = [p for p in sorted(one_node["processes"]) if p <= reach]
            axes[0].plot(xs, [float(one.iloc[0]) * p for p in xs], ":", color=colour, alpha=0.6, linewidth=1)
        fg.flagged_points(axes[1], g.rename(columns={"processes": "gpus"}))


def gpt_throughput_figure(table: pd.DataFrame, title: str = "", cores: int | None = None):
    """Tokens/s (log scale), speed-up over the same backend's 1 process and the peak memory of a rank against
    processes, a backend a line (table: gpt_throughput_table's). cores: the measuring machine's, where the rows are
    of the local scale: the axes name them and the ideal lines stop there."""
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), layout="constrained")
    reach = ideal_reach(table, cores)
    plot_series(axes, table, reach)
    axes[1].plot([1, reach], [1, reach], color="grey", linewidth=1, label="ideal")
    axes[0].set_yscale("log")
    fg.log2_ticks(axes[0], "y")
    local = set(table["scale"]) == {tb.scale_label("local")}
    on = f" on {cores} core{'' if cores == 1 else 's'}" if local and cores else ""
    xlabel = f"{'CPU ' if local else ''}processes{on}"
    counts = sorted({int(p) for p in table["processes"] if fl.finite(p)})
    for ax, ylabel, what in zip(axes, ("tokens / s (log scale)", "speed-up over 1 process", "peak memory a rank (GiB)"),
                                ("Throughput (dotted: ideal linear scaling)", "Speed-up",
                                 "Peak memory of the largest rank (GPU: allocated tensors; CPU: resident set)")):
        ax.set_xticks(counts, [str(c) for c in counts])
        fg._finish(ax, xlabel, ylabel, what)
    axes[2].set_ylim(bottom=0)  # from zero: a few per cent between ranks' peaks is not drawn as a cliff
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def gpt_figure(inputs: Inputs, entry: Figure) -> Drawn | str:
    table = inputs.once(measured)
    if table is None:
        return NO_RUNS
    return Drawn(gpt_throughput_figure(table, entry.title, inputs.cores), inputs.source)


# ============================================================================================ the reading


def configuration_words(r) -> str:
    """One row in words: its tokens/s, and beyond 1 process its speed-up and efficiency."""
    scaling = (f" (speed-up {r.speedup:.2f}, efficiency {r.efficiency:.2f})"
               if r.processes > 1 and fl.finite(r.speedup) else "")
    return f"{BACKEND_NAME.get(r.backend, r.backend)} {r.tokens_per_s:,.0f} tokens/s{scaling}"


def fastest_words(g: pd.DataFrame, spread: float) -> str:
    """Which backend leads, only where it leads the next by more than one configuration's repeats differ."""
    ranked = g.sort_values("tokens_per_s", ascending=False)
    if len(ranked) < 2:
        return ""
    first, second = ranked.iloc[0], ranked.iloc[1]
    if math.isnan(spread):
        return " — none named fastest"
    if first.tokens_per_s / second.tokens_per_s > spread:
        return f" — fastest: {BACKEND_NAME.get(first.backend, first.backend)}"
    return " — none ahead by more than the repeats' spread"


def against_words(g: pd.DataFrame, ours: str, theirs: str) -> str:
    """Backend `ours` against `theirs` on the same placement: its tokens/s and its largest rank's peak memory, as
    ratios ("" where either did not run). FSDP against DDP: what sharding costs and saves; HSDP against FSDP on the
    same nodes: what replicating across nodes changes."""
    by = g.set_index("backend")
    if not {ours, theirs} <= set(by.index):
        return ""
    a, b = by.loc[ours], by.loc[theirs]
    name, other = (BACKEND_NAME.get(x, x).split(" ")[0] for x in (ours, theirs))
    memory = a.peak_gib_a_rank / b.peak_gib_a_rank if b.peak_gib_a_rank > 0 else math.nan
    memory_words = f"{memory:.2f}x {other}'s ({a.peak_memory_of})" if fl.finite(memory) else "unrecorded"
    return (f"; {name}'s tokens/s {a.tokens_per_s / b.tokens_per_s:.2f}x {other}'s, its peak memory a rank "
            f"{memory_words}")


def line_of(key: tuple, g: pd.DataFrame, spread: float) -> str:
    scale, batch, numerics, processes, nodes = key
    flagged = [BACKEND_NAME.get(b, b) for b, f in zip(g["backend"], g["flag"]) if fl.text(f)]
    said = f" Flagged: {', '.join(flagged)} (the table's flag column says why)." if flagged else ""
    across = f" on {nb.int_text(nodes)} nodes" if fl.finite(nodes) and nodes > 1 else ""
    return (f"- {scale}, {nb.int_text(batch)} windows a process{nb.numerics_suffix(numerics, ', ')}, "
            f"{nb.int_text(processes)} process(es){across}: "
            + "; ".join(configuration_words(r) for r in g.itertuples())
            + fastest_words(g, spread) + against_words(g, "fsdp", "ddp") + against_words(g, "hsdp", "fsdp")
            + "." + said)


def rq6_reading(df: pd.DataFrame) -> str:
    """RQ6 in words, computed from experiment 14's runs: each process count's backends side by side, a backend named
    fastest only where it leads the next by more than one configuration's repeats differ (tables.repeat_spread), and
    FSDP's tokens/s and memory a rank against DDP's."""
    table = gpt_throughput_table(df)
    if table is None:
        return f"No experiment 14 run here yet: {TO_FILL} fills this reading."
    spread, repeated = tb.repeat_spread(df[df["exp"] == EXPERIMENT])
    noise = (f"The same configuration measured twice ({repeated} configuration(s)) differed by up to {spread:.2f}x, "
             "so a backend is named fastest only where it leads the next by more." if repeated else
             "No configuration was measured twice, so no measurement's noise is known and no backend is named "
             "fastest.")
    lines = [f"**Reading, computed from the runs (steady state, tokens/s).** {noise}", ""]
    for key, g in table.groupby(["scale", "per_gpu_batch", "numerics", "processes", "nodes"], dropna=False,
                                sort=True):  # one placement a line: 4 processes on one node are not 2 nodes of 2
        lines.append(line_of(key, g, spread))
    if tb.scale_label("local") in set(table["scale"]):
        lines += ["", "At the local scale the processes share the machine's CPU cores (more processes than cores "
                  "oversubscribe them) and each holds ~800 MB of torch beside a 3.3M-parameter model: these rows "
                  "check that every framework trains and records the workload; they rank nothing, and FSDP's memory "
                  "saving shows only on a GPU."]
    return "\n".join(lines) + "\n"


# ============================================================================================ the declarations

TITLE = ("Experiment 14: a GPT-style decoder's tokens/s, speed-up and peak memory a rank against processes, "
         "a backend a line")
TABLES = (Table("exp14_gpt_throughput", "", (EXPERIMENT,), lambda inputs, entry: inputs.once(measured),
                "Experiment 14: a GPT-style decoder's tokens/s, speed-up and efficiency over the same backend's "
                "1 process, model FLOP/s, MFU and peak memory a rank", table_notes, needs=NEEDS),)
FIGURES = (Figure("exp14_gpt_throughput", "", (EXPERIMENT,), gpt_figure, TITLE, needs=NEEDS),)
QUESTIONS = (Question("gpt_throughput", "GPT throughput", "How many tokens/s does a GPT-style decoder train at on 1, "
                      "2 and 4 processes with DDP, FSDP and Horovod, and what does sharding cost in speed and save in "
                      "memory a rank?", "rq6_gpt_throughput", experiments=(EXPERIMENT,)),)
RQ6 = [
    ("md", "# RQ6 — a GPT-style decoder on 1, 2 and 4 processes: DDP, FSDP and Horovod\n\n"
           "The thesis timed ResNet-50, whose 25M parameters DDP replicates on every GPU. Experiment 14 "
           "(`experiments/14_gpt_throughput`, issue 66) asks RQ1 and RQ2 of today's dominant workload: a GPT-style "
           "decoder (GPT-2 small, context 1,024, bf16 on GPUs; locally `gpt_local`, 3.3M parameters, context 128, "
           "fp32 on CPU processes) trained by PyTorch DDP, FSDP (each rank holds 1/P of the parameters, gradients "
           "and optimizer state) and Horovod+PyTorch. Each run's bench record gives tokens/s (windows/s x the "
           "context), model FLOP/s and, on a GPU of known peak, MFU; its manifest gives each rank's peak memory. "
           "Speed-up and efficiency are over the same backend's 1-process run, as the thesis's Tables 2-9 for "
           "images/s."),
    ("code", None),
    ("md", "## Tokens/s, speed-up, efficiency, model FLOP/s, MFU and peak memory a rank"),
    ("code", "table = an.gpt_throughput_table(df)\n"
             "an.markdown('No experiment 14 run here yet: `make exp14`.') if table is None else table"),
    ("code", "an.show(an.gpt_throughput_figure(table)) if table is not None else an.markdown('Not drawn: no run.')"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq6_reading(df))"),
]
NOTEBOOKS = {"rq6_gpt_throughput.ipynb": RQ6}
EXPORTS = ("gpt_throughput_figure", "gpt_throughput_table", "rq6_reading")
