"""What each figure function draws, read back from the Axes: series and labels, shared y-ranges, readable ticks,
the thesis's values beside ours, and which runs the report's figures pick (small frames made here: fast)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from analysis import figures as fg  # noqa: E402
from analysis import reference as rf  # noqa: E402
from analysis import report as rp  # noqa: E402


def epochs(exp, gpus, err0, framework="emulated", scale="local", per_gpu_batch=4, seeds=2, n=6, warmup="none",
           numerics="fp32"):
    """Epoch rows of one configuration: error falling from err0 by 5 points an epoch."""
    rows = []
    for seed in range(seeds):
        for e in range(n):
            top1 = 100 - (err0 - 5 * e) + seed
            rows.append({"kind": "epoch", "exp": exp, "framework": framework, "gpus": gpus,
                         "per_gpu_batch": per_gpu_batch, "global_batch": gpus * per_gpu_batch, "lr": 0.1 * gpus,
                         "warmup": warmup, "scale": scale, "numerics": numerics, "run": f"w{gpus}-s{seed}", "epoch": e,
                         "train_top1": top1, "val_top1": top1 - 2})
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def legend_texts(ax):
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


# ============================================================================================ error curves


def test_error_grid_panels_share_one_y_range():
    df = pd.concat([epochs(4, 1, 60), epochs(4, 32, 95)])
    axes = fg.plot_error_grid(df)
    shown = [ax for ax in axes.flat if ax.get_visible()]
    assert len(shown) == 2
    assert shown[0].get_ylim() == shown[1].get_ylim()
    lo, hi = shown[0].get_ylim()
    curves = fg.error_curves(df)
    assert lo <= curves["train_err"].min() and hi >= curves["val_err"].max()  # both panels' curves fit in it
    assert all(legend_texts(ax) == ["train", "validation"] for ax in shown)
    assert [len(ax.get_lines()) for ax in shown] == [2, 2]


def test_grid_of_two_experiments_names_them_per_panel():
    axes = fg.plot_error_grid(pd.concat([epochs(6, 32, 90), epochs(7, 32, 80, per_gpu_batch=2)]))
    titles = sorted(ax.get_title() for ax in axes.flat if ax.get_visible())
    assert titles[0].startswith("exp 6: 32 emulated workers (bs=128") and titles[1].startswith("exp 7: 32 emulated")


def test_error_curves_label_emulated_workers_and_the_baseline():
    fig, ax = plt.subplots()
    fg.plot_error_curves(pd.concat([epochs(5, 1, 60), epochs(6, 8, 70, warmup="stepping-1")]), ax=ax, which="val")
    labels = legend_texts(ax)
    assert len(ax.get_lines()) == 2 and len(labels) == 2
    assert labels[0].startswith("1 emulated worker (bs=4") and "[local scale]" in labels[0]
    assert labels[1].startswith("8 emulated workers (bs=32") and "stepping-1" in labels[1]


def test_thesis_best_error_is_marked_beside_thesis_scale_curves_only():
    ref = rf.load_reference()
    thesis_run = epochs(6, 32, 90, framework="horovod+pytorch", scale="thesis", per_gpu_batch=128)
    local_run = epochs(6, 32, 90, framework="horovod+pytorch", scale="local", per_gpu_batch=128)
    fig, ax = plt.subplots()
    fg.plot_error_curves(thesis_run, ax=ax, which="val", reference=ref)
    markers = [line for line in ax.get_lines() if line.get_label().startswith("thesis best")]
    assert len(markers) == 1
    assert markers[0].get_ydata()[0] == pytest.approx(100 - 74.662)  # Table 12, Horovod, 32 GPUs
    assert markers[0].get_xdata()[0] == 5
    fig, ax = plt.subplots()
    fg.plot_error_curves(local_run, ax=ax, which="val", reference=ref)
    assert len(ax.get_lines()) == 1  # a miniature's curve gets no thesis value beside it


# ============================================================================================ scaling


def scaling_frame():
    ref = rf.load_reference()
    t = rf.throughput_reference(ref)
    thesis = pd.DataFrame({"source": "thesis", "scale": "thesis", "framework": t["framework"], "numerics": "fp32",
                           "per_gpu_batch": t["per_gpu_batch"].astype(float), "gpus": t["gpus"].astype(float),
                           "images_per_s": t["throughput"], "speedup": t["speedup"]})
    ours = pd.DataFrame({"source": ["ours (steady state)"] * 3 + ["ours (thesis formula)"] * 3,
                         "scale": "local scale", "framework": "pytorch", "numerics": "fp32", "per_gpu_batch": 128.0,
                         "gpus": [1.0, 2.0, 4.0] * 2, "images_per_s": [40.0, 70.0, 100.0] + [np.nan] * 3,
                         "speedup": [1.0, 1.75, 2.5] + [np.nan] * 3})
    return pd.concat([thesis, ours], ignore_index=True)


def test_throughput_log_axis_has_plain_power_of_two_ticks():
    fig, ax = plt.subplots()
    fg.plot_throughput(scaling_frame()[lambda d: d["scale"] == "thesis"], ax=ax,
                       framework=["pytorch", "horovod+pytorch"])
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert {"256", "512", "1024", "2048", "4096"} <= set(labels)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16", "24", "32"]
    assert legend_texts(ax) == ["Horovod+PyTorch b=128 — thesis", "PyTorch b=128 — thesis"]


def test_figure17_puts_cpu_runs_on_their_own_row_and_legends_only_drawn_series():
    fig = rp.scaling_figure(scaling_frame(), "Figure 17", framework=["pytorch", "horovod+pytorch"])
    axes = np.array(fig.axes).reshape(2, 2)
    top, bottom = legend_texts(axes[0, 0]), legend_texts(axes[1, 0])
    assert top == ["Horovod+PyTorch b=128 — thesis", "PyTorch b=128 — thesis"]
    assert bottom == ["PyTorch b=128 — ours, local scale (steady state)"]  # the all-NaN estimate is not listed
    assert legend_texts(axes[0, 1]) == top + ["ideal"] and legend_texts(axes[1, 1]) == bottom + ["ideal"]
    assert len(axes[1, 1].get_lines()) == 2  # our speed-up curve and the ideal line, nothing empty
    assert "not comparable" in axes[1, 0].get_title()
    assert max(axes[1, 0].get_lines()[0].get_ydata()) == 100.0
    fig.canvas.draw()
    assert len([t for t in axes[1, 0].get_yticklabels() if t.get_text()]) >= 3  # a narrow range still gets ticks


def test_each_numerics_is_a_line_of_its_own_named_unless_fp32():
    frame = scaling_frame()
    ours = frame[frame["scale"] == "local scale"]
    bf16 = ours.assign(numerics="bf16+cl", images_per_s=3 * ours["images_per_s"])
    fig = rp.scaling_figure(pd.concat([frame, bf16], ignore_index=True), "Figure 17",
                            framework=["pytorch", "horovod+pytorch"])
    ax = np.array(fig.axes).reshape(2, 2)[1, 0]
    assert legend_texts(ax) == ["PyTorch b=128 bf16+cl — ours, local scale (steady state)",
                                "PyTorch b=128 — ours, local scale (steady state)"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    bf16_line, fp32_line = (lines[f"PyTorch b=128{n} — ours, local scale (steady state)"] for n in (" bf16+cl", ""))
    assert list(bf16_line.get_ydata()) == [120.0, 210.0, 300.0] and list(fp32_line.get_ydata()) == [40.0, 70.0, 100.0]
    assert list(fp32_line.get_xdata()) == [1.0, 2.0, 4.0]  # one point a GPU count, not a zig-zag through both
    fig, ax = plt.subplots()
    fg.plot_error_curves(pd.concat([epochs(5, 1, 60), epochs(5, 1, 50, numerics="bf16+cl")]), ax=ax, which="val")
    labels = legend_texts(ax)
    assert len(ax.get_lines()) == 2 and labels[0].startswith("1 emulated worker (bs=4, lr=0.1, bf16+cl)")
    assert labels[1].startswith("1 emulated worker (bs=4, lr=0.1)")


def test_scaling_figure_without_other_scales_is_one_row():
    fig = rp.scaling_figure(scaling_frame(), "Figure 14", framework="horovod+tensorflow", per_gpu_batch=32)
    assert len(fig.axes) == 2
    assert legend_texts(fig.axes[0]) == ["Horovod+TF b=32 — thesis"]


def test_rq2_bars_are_absolute_per_gpu_from_zero():
    rq2 = rf.rq2_steady_state(rf.load_reference())
    ax = fg.plot_steady_state(rq2)
    assert ax.get_ylim()[0] == 0
    assert len(ax.patches) == 8  # 2 GPU counts x (PyTorch, Horovod) x (thesis formula, first batch left out)
    known = rq2.dropna(subset=["steady_images_per_s"]).set_index(["framework", "gpus"])
    expected = sorted(np.r_[known["thesis_images_per_s"] / known.index.get_level_values("gpus"),
                            known["steady_images_per_s"] / known.index.get_level_values("gpus")])
    assert sorted(p.get_height() for p in ax.patches) == pytest.approx(expected)
    assert len({round(p.get_height(), 6) for p in ax.patches}) == 8  # no bar normalised to 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2 GPUs", "32 GPUs"]


# ============================================================================================ the report's choices


def test_figure26_draws_exp6_beside_exp7_at_the_same_workers():
    e6 = pd.concat([epochs(6, w, 90) for w in (8, 16, 32)])
    e7 = epochs(7, 32, 85, per_gpu_batch=2)
    peers = rp.exp7_peers(e6, e7)
    assert set(peers["gpus"]) == {32} and set(peers["exp"]) == {6} and len(peers) == len(e6[e6["gpus"] == 32])
    axes = fg.plot_error_grid(pd.concat([e7, peers]))
    assert sum(ax.get_visible() for ax in axes.flat) == 2


def test_figures_24_and_28_get_the_one_worker_baseline():
    df = pd.concat([epochs(5, 1, 60), epochs(5, 32, 80), epochs(6, 8, 70)])
    base = rp.baseline_runs(df)
    assert set(base["exp"]) == {5} and set(base["gpus"]) == {1}
    fig = rp._two_panel(pd.concat([base, df[df["exp"] == 6]]), "Figure 24")
    train, val = fig.axes[:2]
    assert [t.split(" (")[0] for t in legend_texts(train)] == ["1 emulated worker", "8 emulated workers"]
    assert train.get_ylim() == val.get_ylim()
