"""Tables: the thesis's Tables 1-15 with our runs beside them, plus scaling and RQ2 tables.

Each builder takes the study frame (runs.load_study) and the reference frame and returns a DataFrame;
``write_table`` saves it as CSV and Markdown. A row from our runs sits beside the thesis's row only when the
run is at the thesis scale (config.json "scale" == "thesis"); runs at other scales get rows of their own,
labelled "local scale" (or "gpu scale", "unknown scale") in the ``scale`` column. Runs of other numerics (the
``numerics`` column: tf32, bf16+cl, compiled...) are rows of their own, never averaged with fp32 ones, and only fp32
runs sit beside the thesis's rows (its P100s ran strict fp32).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import flags as fl
from . import numbers as nb
from . import reference as rf


SCALE_NOTE = ("Rows whose scale is not 'thesis' come from runs at another scale (config.json \"scale\"): their "
              "numbers are not comparable with the thesis's and are not placed beside them.")


def scale_label(scale) -> str:
    s = scale if isinstance(scale, str) and scale else "unknown"
    return "thesis" if s == "thesis" else f"{s} scale"


def run_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run: identity, status, best validation accuracy, wall-clock, bad lines."""
    cols = ["experiment", "exp", "run", "source", "scale", "framework", "numerics", "gpus", "per_gpu_batch",
            "global_batch", "lr", "warmup", "seed", "epochs", "epochs_done", "status", "diverged", "best_val_top1",
            "best_val_top5", "wallclock_s", "bad_lines", "note"]
    r = df[df["kind"] == "run"][cols].copy()
    r["status_label"] = [_status_label(s, d, e) for s, d, e in zip(r["status"], r["epochs_done"], r["epochs"])]
    return r.sort_values(["experiment", "run"], kind="stable", key=lambda c: c.map(nb.natural_key)) \
        .reset_index(drop=True)


def _status_label(status, done, planned) -> str:
    if status == "running":
        return f"running (half-written, {nb.int_text(done)}/{nb.int_text(planned)} epochs)"
    return str(status)


# backend: DDP and DataParallel are both "pytorch"; numerics: fp32 and bf16 at one batch are two measurements;
# processes: W workers over P processes is another measurement for each P (NaN where a run's manifest does not say);
# nodes: P processes on one node and across two are two placements (NaN where unrecorded)
CONFIG_KEYS = ["exp", "framework", "backend", "numerics", "per_gpu_batch", "gpus", "processes", "nodes", "scale"]


def throughput_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean thesis-formula and steady-state images/s per configuration (bench rows)."""
    b = df[df["kind"] == "bench"].copy()
    if b.empty:
        return pd.DataFrame(columns=CONFIG_KEYS + ["global_batch", "thesis_images_per_s", "steady_images_per_s",
                                                   "data_share", "n_runs"])
    b["scale"] = b["scale"].fillna("unknown")
    for column in ("hosts", "threads_per_rank", "cpus_per_rank", "nodes"):  # frames made before these were recorded
        if column not in b:
            b[column] = math.nan
    if "disturbed" not in b:
        b["disturbed"] = ""
    g = b.groupby(CONFIG_KEYS, dropna=False)
    out = g.agg(global_batch=("global_batch", "first"), thesis_images_per_s=("thesis_images_per_s", "mean"),
                steady_images_per_s=("steady_images_per_s", "mean"), n_runs=("run", "nunique"),
                data_share=("data_share", "mean"),  # share of step time waiting for data
                hosts=("hosts", "max"), threads_per_rank=("threads_per_rank", one_value),
                cpus_per_rank=("cpus_per_rank", one_value), disturbed=("disturbed", joined)).reset_index()
    return out


def joined(values: pd.Series) -> str:
    """The configuration's runs' disturbance reasons (contract/hostload.py), each once; "" for none."""
    return fl.join(fl.text(v) for v in values)


def repeat_spread(df: pd.DataFrame) -> tuple[float, int]:
    """(the largest ratio between two throughput runs of one config fingerprint placed on as many nodes, how many
    configs were measured more than once): the noise of a single measurement, from the runs themselves; (nan, 0)
    without repeats. One config on one node and across two is two measurements, not a repeat (contract/reader.py's
    identity counts the nodes for the same reason)."""
    bench = df[df["kind"] == "bench"]
    if bench.empty:
        return math.nan, 0
    bench = bench.dropna(subset=["fingerprint", "steady_images_per_s"])
    placed = ["fingerprint", "nodes"] if "nodes" in bench else ["fingerprint"]
    runs = bench.groupby(placed, dropna=False)["steady_images_per_s"].agg(["count", "min", "max"])
    runs = runs[runs["count"] > 1]
    return (float((runs["max"] / runs["min"]).max()), len(runs)) if len(runs) else (math.nan, 0)


def one_value(values: pd.Series) -> float:
    """The configuration's runs' value where they agree; NaN where they differ or none recorded it."""
    found = values.dropna().unique()
    return float(found[0]) if len(found) == 1 else math.nan


def unlike_rows(frame: pd.DataFrame) -> list[str]:
    """A note for each comparison (the same GPUs, processes, batch, numerics and scale; another framework or
    backend) whose rows ran with different threads or CPUs a rank: their images/s compare two placements, not two
    frameworks. Empty when every compared row had the same (or nothing was recorded)."""
    keys = ["numerics", "per_gpu_batch", "gpus", "processes", "scale"]
    lines = []
    rows = frame.dropna(subset=["ours_steady"])
    for key, group in rows.groupby(keys, dropna=False):
        for column, what in (("threads_per_rank", "threads"), ("cpus_per_rank", "CPUs")):
            values = group[column]
            if values.nunique(dropna=False) > 1 and values.notna().any():
                said = ", ".join(f"{r.framework} ({r.backend}) {nb.int_text(v)}"
                                 for r, v in zip(group.itertuples(), values))
                lines.append(f"Not like for like: {int(key[2])} GPU(s), batch {key[1]}, {key[4]} scale ran with "
                             f"different {what} a rank: {said}.")
    return lines


QUALITY_KEYS = ["exp", "framework", "numerics", "per_gpu_batch", "global_batch", "gpus", "lr", "warmup", "optimizer",
                "scale"]


def quality_summary(df: pd.DataFrame, experiments=None, diverged=frozenset()) -> pd.DataFrame:
    """Best validation top-1/top-5 per configuration of the experiments given (None: every one the frame holds):
    mean, std and n over seeds; wall-clock; status counts.

    Completed runs make the statistics; if a configuration has none, its non-diverged runs do (marked
    'incomplete'). Diverged runs are counted, never averaged: those whose loss went non-finite, and those of
    `diverged` (folders that diverged by a reading rule, analysis.smoke.diverged_runs; said in `status`).
    """
    r = df[(df["kind"] == "run") & (df["exp"].isin(list(experiments)) if experiments is not None else True)].copy()
    cols = QUALITY_KEYS + ["top1_mean", "top1_std", "top5_mean", "top5_std", "n", "wallclock_s", "runs", "status"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    r["scale"] = r["scale"].fillna("unknown")
    rows = []

    # runs that diverged by a reading rule: counted, never averaged
    r["_gone"] = r["path"].isin(diverged)
    for key, g in r.groupby(QUALITY_KEYS, dropna=False, sort=True):
        done = g[g["status"].isin(["completed", "log"]) & ~g["_gone"]]
        note = f"{int(g['_gone'].sum())} diverged by the reading rule: left out" if g["_gone"].any() else ""
        if done.empty and not note:  # never runs of mixed configs (runs.refuse_mixed_configs): not averaged
            done = g[~g["diverged"] & (g["status"] != "mixed-config")]
            note = "incomplete" if len(done) else ""
        counts = g["status"].value_counts()
        status = ", ".join(f"{int(n)} {s}" for s, n in sorted(counts.items()))
        if note:
            status += f" ({note})"
        rows.append(dict(zip(QUALITY_KEYS, key), top1_mean=done["best_val_top1"].mean(),
                         top1_std=done["best_val_top1"].std(ddof=1) if len(done) > 1 else math.nan,
                         top5_mean=done["best_val_top5"].mean(),
                         top5_std=done["best_val_top5"].std(ddof=1) if len(done) > 1 else math.nan,
                         n=int(done["best_val_top1"].notna().sum()), wallclock_s=done["wallclock_s"].mean(),
                         runs=len(g), status=status))
    return pd.DataFrame(rows, columns=cols)


# TensorFlow's frameworks: the thesis's Horovod+TensorFlow (tf_cnn_benchmarks) and, in our runs, also TensorFlow's
# own MultiWorkerMirroredStrategy (config.py's framework names)
TENSORFLOW = ["horovod+tensorflow", "tensorflow"]


def row_flag(o, one, steady_speedup: float) -> str:
    """A throughput row's flag (analysis/flags.py): its own disturbances, and where it has a speed-up, one above its
    processes, a baseline of other threads a rank, the baseline's disturbances."""
    if one is None or o.gpus == 1:
        return fl.text(o.disturbed)
    processes = o.processes if fl.finite(o.processes) else o.gpus
    return fl.speedup_flag(steady_speedup, processes, o.threads_per_rank, one.threads_per_rank, o.disturbed,
                           one.disturbed)


def quality_table(df: pd.DataFrame, ref: pd.DataFrame, table: int) -> pd.DataFrame:
    """Thesis Table 10-15 with our best val top-1/top-5 (mean ± std over seeds, n) and wall-clock beside."""
    thesis = rf.table_rows(ref, table)
    exp = int(thesis[thesis["table"] == table]["experiment"].iloc[0])
    ours = quality_summary(df, (exp,))
    rows, used = [], set()

    def fill(row, o):
        row.update(ours_top1=o["top1_mean"], ours_top1_std=o["top1_std"], ours_top5=o["top5_mean"],
                   ours_top5_std=o["top5_std"], n_runs=int(o["n"]), ours_wallclock_s=o["wallclock_s"],
                   status=o["status"])

    for r in thesis.itertuples(index=False):
        row = {"framework": r.framework, "numerics": nb.FP32, "lr": r.lr, "per_gpu_batch": r.per_gpu_batch,
               "global_batch": r.global_batch, "gpus": r.gpus, "nodes": r.nodes, "warmup": r.warmup,
               "thesis_top1": r.top1, "thesis_top5": r.top5, "thesis_wallclock_s": r.wallclock_s,
               "ours_top1": math.nan, "ours_top1_std": math.nan, "ours_top5": math.nan, "ours_top5_std": math.nan,
               "n_runs": 0, "ours_wallclock_s": math.nan, "scale": "thesis", "status": ""}
        if r.table == table:  # the repeated baseline is matched in its own table only
            m = ours[(ours["framework"] == r.framework) & (ours["per_gpu_batch"] == r.per_gpu_batch)
                     & (ours["gpus"] == r.gpus) & (ours["scale"] == "thesis") & (ours["numerics"] == nb.FP32)]
            if len(m):
                used.add(m.index[0])
                fill(row, m.iloc[0])
        rows.append(row)
    for i, o in ours.iterrows():
        if i in used:
            continue
        row = {"framework": o["framework"], "numerics": o["numerics"], "lr": o["lr"],
               "per_gpu_batch": o["per_gpu_batch"], "global_batch": o["global_batch"], "gpus": o["gpus"],
               "nodes": math.nan, "warmup": o["warmup"],
               "thesis_top1": math.nan, "thesis_top5": math.nan, "thesis_wallclock_s": math.nan,
               "scale": scale_label(o["scale"])}
        fill(row, o)
        rows.append(row)
    return pd.DataFrame(rows)


def scaling_table(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Images/s, speed-up, efficiency and 90-epoch wall-clock vs GPUs: thesis rows and ours."""
    t = throughput_reference(ref)
    thesis = pd.DataFrame({"source": "thesis", "scale": "thesis", "framework": t["framework"], "numerics": nb.FP32,
                           "per_gpu_batch": t["per_gpu_batch"].astype(float), "gpus": t["gpus"].astype(float),
                           "images_per_s": t["throughput"], "speedup": t["speedup"], "efficiency": t["efficiency"],
                           "wallclock_90_s": t["wallclock_90_s"]})
    ours = throughput_summary(df)
    ours = ours[ours["backend"] != "dp"]  # the thesis's PyTorch is DDP; DataParallel is a row of Table 5 only
    if len(ours):  # one point per framework, numerics, batch, scale and GPU count, whichever experiment measured it
        ours = ours.groupby(["framework", "numerics", "per_gpu_batch", "scale", "gpus"], dropna=False,
                            as_index=False).agg(
            thesis_images_per_s=("thesis_images_per_s", "mean"), steady_images_per_s=("steady_images_per_s", "mean"),
            processes=("processes", one_value), threads_per_rank=("threads_per_rank", one_value),
            disturbed=("disturbed", joined))
    rows = []
    for (fw, num, b, sc), g in ours.groupby(["framework", "numerics", "per_gpu_batch", "scale"], dropna=False):
        base = g.loc[g["gpus"] == 1, "thesis_images_per_s"]
        base_v = float(base.iloc[0]) if len(base) else math.nan
        one = next(g[g["gpus"] == 1].itertuples(index=False), None)
        for o in g.itertuples(index=False):
            for src, v in (("ours (thesis formula)", o.thesis_images_per_s), ("ours (steady state)",
                                                                               o.steady_images_per_s)):
                base_s = (float(g.loc[g["gpus"] == 1, "steady_images_per_s"].iloc[0])
                          if src.endswith("state)") and (g["gpus"] == 1).any() else base_v)
                sp = nb.speedup(v, base_s)
                rows.append({"source": src, "scale": scale_label(sc) if sc != "thesis" else "thesis",
                             "framework": fw, "numerics": num, "per_gpu_batch": b, "gpus": o.gpus,
                             "images_per_s": v, "speedup": sp, "efficiency": nb.efficiency(sp, o.gpus),
                             "wallclock_90_s": nb.wallclock_estimate_s(v) if sc == "thesis" else math.nan,
                             "flag": row_flag(o, one, sp)})
    out = pd.concat([thesis, pd.DataFrame(rows)], ignore_index=True) if rows else thesis
    return out


def is_duration(col: str) -> bool:
    """A column of seconds that the markdown prints as '1 h 55 min' (the CSV keeps the seconds)."""
    return col.endswith("wallclock_s") or col == "wallclock_90_s"


def md_header(col: str) -> str:
    """A column's name in the markdown: a duration's without its '_s', since it is no longer seconds there."""
    return {"wallclock_90_s": "wallclock_90_epochs"}.get(col, col[:-2]) if is_duration(col) else col


def _fmt(v, col: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return ""
    if is_duration(col):
        return nb.format_duration(float(v))
    if isinstance(v, (float, np.floating)):
        if col == "lr":
            return f"{v:g}"
        if float(v).is_integer() and col in ("per_gpu_batch", "global_batch", "gpus", "processes", "nodes", "n_runs",
                                             "n", "exp", "epochs", "epochs_done", "seed", "bad_lines"):
            return str(int(v))
        return f"{v:.3f}" if col.startswith(("thesis_top", "ours_top", "top", "best_val")) else f"{v:.2f}" \
            if abs(v) >= 1 or v == 0 else f"{v:.4g}"
    return str(v)


def to_markdown(df: pd.DataFrame, title: str | None = None, notes: list[str] | None = None,
                source: str | None = None) -> str:
    """A plain pipe table (no extra dependency); source: the line saying which runs it was made from."""
    lines = []
    if title:
        lines += [f"### {title}", ""]
    if source:
        lines += [source, ""]
    cols = list(df.columns)
    lines.append("| " + " | ".join(md_header(c) for c in cols) + " |")
    lines.append("|" + "|".join("---" for _ in cols) + "|")
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, c).replace("|", "/") for v, c in zip(row, cols)) + " |")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def write_table(df: pd.DataFrame, out_dir: str | Path, name: str, title: str | None = None,
                notes: list[str] | None = None, source: str | None = None,
                shown: pd.DataFrame | None = None) -> list[Path]:
    """Save a table as <name>.csv and <name>.md (source: which runs it was made from, under the title; shown: a
    shorter table for the markdown, the csv keeping every column); returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, md = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    df.to_csv(csv, index=False, float_format="%.6g", lineterminator="\n")
    md.write_text(to_markdown(df if shown is None else shown, title, notes, source))
    return [csv, md]


def throughput_reference(ref: pd.DataFrame | None = None) -> pd.DataFrame:
    """Throughput rows (tables 1-9) with speed-up and efficiency over the same framework's 1-GPU row."""
    ref = rf.load_reference() if ref is None else ref
    t = ref[ref["throughput"].notna()].copy()
    base = t[t["gpus"] == 1].set_index(["framework", "per_gpu_batch"])["throughput"]
    t["baseline"] = [base.get((f, b), np.nan) for f, b in zip(t["framework"], t["per_gpu_batch"])]
    t["speedup"] = t["throughput"] / t["baseline"]
    t["efficiency"] = t["speedup"] / t["gpus"].astype(float)
    t["wallclock_90_s"] = [nb.wallclock_estimate_s(x) for x in t["throughput"]]
    return t.reset_index(drop=True)
