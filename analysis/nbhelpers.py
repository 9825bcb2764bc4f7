"""Small functions the notebooks call, so that each notebook cell stays one or two lines."""
from __future__ import annotations

import functools
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from . import catalogue as ct  # noqa: E402
from . import figures as fg  # noqa: E402
from . import numbers as nb  # noqa: E402
from . import reference as rf  # noqa: E402
from . import tables as tb  # noqa: E402
from .findings import seed_summary  # noqa: E402
from .runs import load_runs  # noqa: E402


def subplots(nrows: int = 1, ncols: int = 1, width: float = 6.5, height: float = 4.2):
    """plt.subplots with a size per panel; returns (fig, axes) (axes a single Axes for 1x1)."""
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows))


def show(fig_or_ax):
    """Render a figure to PNG (fixed metadata, so reruns give identical bytes) for a notebook to display."""
    from IPython.display import Image

    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    if hasattr(fig_or_ax, "flat"):
        fig = fig_or_ax.flat[0].figure
    buf = io.BytesIO()
    fg.pin_layout(fig, dpi=80)  # a constrained layout's solve differs in its last bits between processes: pinned
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png")


def overview(df: pd.DataFrame) -> pd.DataFrame:
    """Runs per experiment, scale and status."""
    r = df[df["kind"] == "run"]
    if r.empty:
        return pd.DataFrame({"note": ["no runs found: tables show the thesis's values only"]})
    return (r.groupby(["experiment", "scale", "status"], dropna=False).size().rename("runs").reset_index())


#: Figures 14-17 as the notebooks show them: the report's figure function (the thesis's P100 row; ours at other
#: scales on a row below), as an image
@functools.wraps(fg.scaling_figure)
def scaling_figure(*args, **kwargs):
    return show(fg.scaling_figure(*args, **kwargs))


def speedup_pivot(scaling: pd.DataFrame, framework) -> pd.DataFrame:
    """Speed-up by GPUs (rows) and source/framework/batch/numerics (columns; one column per numerics, never a mean
    of fp32 and bf16)."""
    fw = [framework] if isinstance(framework, str) else list(framework)
    s = scaling[scaling["framework"].isin(fw)].copy()
    s["series"] = [f"{src} | {f} b={int(b)}{nb.numerics_suffix(n)}" + ("" if sc == "thesis" else f" [{sc}]")
                   for src, f, b, n, sc in zip(s["source"], s["framework"], s["per_gpu_batch"], s["numerics"],
                                               s["scale"])]
    return s.pivot_table(index="gpus", columns="series", values="speedup").round(2)


def batch_size_wallclock(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Experiment 6 (per-GPU batch 128) vs 7 (32) on 32 GPUs: the thesis's Horovod rows and ours (Horovod, or
    emulated workers at the local and gpu scales)."""
    rows = []
    for t in (12, 13):
        q = tb.quality_table(df, ref, t)
        q = q[q["framework"].isin(["horovod+pytorch", "emulated"]) & (q["gpus"] == 32)]
        for r in q.itertuples(index=False):
            rows.append({"table": t, "scale": r.scale, "numerics": r.numerics, "per_gpu_batch": r.per_gpu_batch,
                         "gpus": r.gpus, "thesis_top1": r.thesis_top1,
                         "thesis_wallclock": nb.format_duration(r.thesis_wallclock_s), "ours_top1": r.ours_top1, "ours_wallclock": nb.format_duration(r.ours_wallclock_s),
                         "n_runs": r.n_runs})
    return pd.DataFrame(rows)


def show_utilisation(df: pd.DataFrame):
    """The thesis's utilisation Figures 22, 23 and 27 from the runs' util records, one panel each (Figures 22 and
    23 once where emulated workers stand for both frameworks)."""
    panels, _ = ct.thesis_utilisation(df)
    if not panels:
        return pd.DataFrame({"note": ["no run recorded utilisation (util records in metrics.jsonl: runs record "
                                      "them since trainers/telemetry.py; rerun experiments 6 and 7)"]})
    fig = fg.utilisation_figure([(title, rows) for _, title, rows in panels], height=3.6)
    fig.set_layout_engine("constrained")
    return show(fig)


def rq2_verdict(rq2: pd.DataFrame) -> str:
    """One plain sentence per GPU count: who is faster with and without the first batch."""
    lines = []
    for g, grp in rq2.dropna(subset=["steady_images_per_s"]).groupby("gpus"):
        d = grp.set_index("framework")
        if not {"pytorch", "horovod+pytorch"} <= set(d.index):
            continue
        pt, hv = d.loc["pytorch"], d.loc["horovod+pytorch"]
        lines.append(
            f"{int(g)} GPUs: thesis formula Horovod {hv.thesis_images_per_s:.0f} vs PyTorch {pt.thesis_images_per_s:.0f}"
            f" images/s (Horovod {100 * (hv.thesis_images_per_s / pt.thesis_images_per_s - 1):+.1f} %); "
            f"first batch left out: Horovod {hv.steady_images_per_s:.0f} vs PyTorch {pt.steady_images_per_s:.0f}"
            f" (Horovod {100 * (hv.steady_images_per_s / pt.steady_images_per_s - 1):+.1f} %).")
    return "\n".join(lines) if lines else "no first-batch times to re-analyse"


def first_batch_penalty(ref: pd.DataFrame) -> pd.DataFrame:
    """Extra seconds per run if every epoch pays its first batch (Figures 12-13), vs the wall-clock gap."""
    rows = []
    for g in (2, 32):
        pt, hv = rf.FIRST_BATCH_S[("pytorch", g)], rf.FIRST_BATCH_S[("horovod+pytorch", g)]
        rows.append({"gpus": g, "first_batch_pytorch_s": pt, "first_batch_horovod_s": hv,
                     "extra_per_epoch_s": round(pt - hv, 3), "extra_over_90_epochs": nb.format_duration(rf.THESIS_EPOCHS * (pt - hv))})
    t12 = ref[(ref["table"] == 12) & (ref["gpus"] == 32)].set_index("framework")["wallclock_s"]
    gap = float(t12["pytorch"] - t12["horovod+pytorch"])
    out = pd.DataFrame(rows)
    out["table12_wallclock_gap_32gpus"] = nb.format_duration(gap)
    return out


def quality_overview(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for t in rf.QUALITY_TABLES:
        q = tb.quality_table(df, ref, t)
        q.insert(0, "table", t)
        parts.append(q)
    q = pd.concat(parts, ignore_index=True)
    keep = ["table", "framework", "numerics", "gpus", "global_batch", "lr", "warmup", "thesis_top1", "thesis_top5",
            "ours_top1", "ours_top1_std", "ours_top5", "n_runs", "scale", "status"]
    return q[keep]


def schedules_figure(df: pd.DataFrame):
    """The report's learning-rate schedules (its lr_schedules_exp4-9 entry), a panel per experiment, shorter."""
    experiments = ct.figure("lr_schedules_exp4-9").experiments
    return fg.lr_schedules_figure(ct.schedules_frame(df, experiments), experiments,
                                  {exp: f"experiment {exp}" for exp in experiments}, figsize=(13, 6.5))


def error_figures(df: pd.DataFrame, ref: pd.DataFrame | None = None):
    """Training and validation error of every quality experiment with runs, one row each, as one image (a notebook
    cell shows only its last value, so one figure rather than a loop of them); the thesis's best validation error
    beside each curve (ref), one legend a row beside its validation panel."""
    have = [e for e in ct.QUALITY_EXPERIMENTS if len(ct.epoch_rows(df, e))]
    if not have:
        return pd.DataFrame({"note": ["no epoch records: no error curves to draw"]})
    fig, axes = plt.subplots(len(have), 2, figsize=(16, 3.6 * len(have)), squeeze=False, layout="constrained")
    for row, exp in zip(axes, have):
        fg.plot_train_val(ct.epoch_rows(df, exp), row, reference=ref,
                          titles=(f"experiment {exp}: training error", f"experiment {exp}: validation error"))
    return show(fig)


def pilot_summary(path: str = "reference/vm-2cpu/10_more_steps_pilot"):
    """The more-steps pilot's runs by configuration, or one line on how to make them."""
    if not Path(path).is_dir():
        return f"no runs in {path}: make exp10 makes them"
    return seed_summary(load_runs(path))
