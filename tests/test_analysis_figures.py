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
from analysis import tables as tb  # noqa: E402
from analysis.experiments import quality, throughput  # noqa: E402


def epochs(exp, gpus, err0, framework="emulated", scale="local", per_gpu_batch=4, seeds=2, n=6, warmup="none",
           numerics="fp32"):
    """Epoch rows of one configuration: error falling from err0 by 5 points an epoch."""
    rows = []
    for seed in range(seeds):
        for e in range(n):
            top1 = 100 - (err0 - 5 * e) + seed
            rows.append({"kind": "epoch", "exp": exp, "framework": framework, "gpus": gpus,
                         "per_gpu_batch": per_gpu_batch, "global_batch": gpus * per_gpu_batch, "lr": 0.1 * gpus,
                         "warmup": warmup, "epochs": n, "scale": scale, "numerics": numerics, "run": f"w{gpus}-s{seed}",
                         "epoch": e,
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
    axes = quality.plot_error_grid(df)
    shown = [ax for ax in axes.flat if ax.get_visible()]
    assert len(shown) == 2
    assert shown[0].get_ylim() == shown[1].get_ylim()
    lo, hi = shown[0].get_ylim()
    curves = quality.error_curves(df)
    assert lo <= curves["train_err"].min() and hi >= curves["val_err"].max()  # both panels' curves fit in it
    assert all(legend_texts(ax) == ["train", "validation"] for ax in shown)
    assert [len(ax.get_lines()) for ax in shown] == [2, 2]


def test_grid_of_two_experiments_names_them_per_panel():
    axes = quality.plot_error_grid(pd.concat([epochs(6, 32, 90), epochs(7, 32, 80, per_gpu_batch=2)]))
    titles = sorted(ax.get_title() for ax in axes.flat if ax.get_visible())
    assert titles[0].startswith("exp 6: 32 emulated workers (bs=128") and titles[1].startswith("exp 7: 32 emulated")


def test_error_curves_label_emulated_workers_the_baseline_warm_up_and_seeds():
    fig, ax = plt.subplots()
    quality.plot_error_curves(pd.concat([epochs(5, 1, 60), epochs(6, 8, 70, warmup="stepping-1", seeds=3)]), ax=ax,
                         which="val")
    labels = legend_texts(ax)
    assert len(ax.get_lines()) == 2 and len(labels) == 2
    assert labels[0] == "1 emulated worker (bs=4, lr=0.1; 2 seeds) [local scale]"
    # the miniature's warm-up as a share of its own epochs, never the thesis's '5-epoch'
    assert labels[1] == "8 emulated workers (bs=32, lr=0.8, stepping warm-up 1 of 6 epochs; 3 seeds) [local scale]"


def test_the_thesis_best_error_is_marked_beside_every_fp32_curve_it_has_a_row_for():
    ref = rf.load_reference()
    thesis_run = epochs(6, 32, 90, framework="horovod+pytorch", scale="thesis", per_gpu_batch=128)
    local_run = epochs(6, 32, 90, scale="local")
    for run, filled in ((thesis_run, True), (local_run, False)):
        fig, ax = plt.subplots()
        quality.plot_error_curves(run, ax=ax, which="val", reference=ref)
        markers = [line for line in ax.get_lines() if line.get_label() == quality.THESIS_MARK]
        assert len(markers) == 1
        assert markers[0].get_ydata()[0] == pytest.approx(100 - 74.662)  # Table 12, Horovod, 32 GPUs
        assert markers[0].get_xdata()[0] > 5  # beside the curve's last epoch, not on it
        assert (markers[0].get_markerfacecolor() != "none") is filled  # hollow beside another scale's curve
        assert quality.THESIS_MARK in legend_texts(ax)
    fig, ax = plt.subplots()
    quality.plot_error_curves(epochs(6, 32, 90, numerics="bf16+cl"), ax=ax, which="val", reference=ref)
    assert len(ax.get_lines()) == 1  # the thesis ran fp32 only
    fig, ax = plt.subplots()
    quality.plot_error_curves(epochs(6, 2, 90), ax=ax, which="val", reference=ref)
    assert len(ax.get_lines()) == 1  # no thesis row for experiment 6 at 2 GPUs


def test_titles_name_the_runs_warm_up_beside_the_thesiss():
    six = epochs(6, 32, 90, warmup="stepping-4").assign(epochs=72)
    assert quality.warmup_phrase(six, 6) == "stepping warm-up 4 of 72 epochs (thesis: 5 of 90)"
    assert quality.warmup_phrase(six.iloc[0:0], 9) == "gradual warm-up (10 of 90 epochs in the thesis)"


def test_utilisation_legend_sits_beside_the_axes_and_short_series_show():
    util = pd.DataFrame({"kind": "util", "run": ["a", "a", "b"], "device": ["cpu process", "cpu system", "cpu process"],
                         "t": [0.0, 0.0, 0.0], "util_pct": [50.0, 90.0, 40.0]})
    ax = quality.plot_utilisation(util)
    anchor = ax.get_legend().get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    assert anchor.x0 > 1.0  # right of the axes, off the data
    assert all(line.get_marker() == "o" for line in ax.get_lines())  # one sample each: markers, not invisible lines
    assert ax.get_ylabel() == "utilisation (%)"


# ============================================================================================ scaling


def scaling_frame():
    ref = rf.load_reference()
    t = tb.throughput_reference(ref)
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
    throughput.plot_throughput(scaling_frame()[lambda d: d["scale"] == "thesis"], ax=ax,
                       framework=["pytorch", "horovod+pytorch"])
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert {"256", "512", "1024", "2048", "4096"} <= set(labels)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16", "24", "32"]
    assert legend_texts(ax) == ["Horovod+PyTorch b=128 — thesis", "PyTorch b=128 — thesis"]


def test_figure17_puts_cpu_runs_on_their_own_row_and_legends_only_drawn_series():
    fig = throughput.draw_scaling(scaling_frame(), "Figure 17", framework=["pytorch", "horovod+pytorch"])
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


def test_a_series_without_a_1_gpu_run_is_named_in_the_speed_up_panel():
    frame = scaling_frame()
    horovod = frame[frame["scale"] == "local scale"].assign(framework="horovod+pytorch", speedup=np.nan)
    horovod = horovod[horovod["gpus"] > 1]
    fig = throughput.draw_scaling(pd.concat([frame, horovod], ignore_index=True), "Figure 17",
                            framework=["pytorch", "horovod+pytorch"])
    ax = np.array(fig.axes).reshape(2, 2)[1, 1]
    assert ax.get_xlabel() == "CPU processes\nno speed-up (no 1-process run): Horovod+PyTorch b=128"


def test_each_numerics_is_a_line_of_its_own_named_unless_fp32():
    frame = scaling_frame()
    ours = frame[frame["scale"] == "local scale"]
    bf16 = ours.assign(numerics="bf16+cl", images_per_s=3 * ours["images_per_s"])
    fig = throughput.draw_scaling(pd.concat([frame, bf16], ignore_index=True), "Figure 17",
                            framework=["pytorch", "horovod+pytorch"])
    ax = np.array(fig.axes).reshape(2, 2)[1, 0]
    assert legend_texts(ax) == ["PyTorch b=128 bf16+cl — ours, local scale (steady state)",
                                "PyTorch b=128 — ours, local scale (steady state)"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    bf16_line, fp32_line = (lines[f"PyTorch b=128{n} — ours, local scale (steady state)"] for n in (" bf16+cl", ""))
    assert list(bf16_line.get_ydata()) == [120.0, 210.0, 300.0] and list(fp32_line.get_ydata()) == [40.0, 70.0, 100.0]
    assert list(fp32_line.get_xdata()) == [1.0, 2.0, 4.0]  # one point a GPU count, not a zig-zag through both
    fig, ax = plt.subplots()
    quality.plot_error_curves(pd.concat([epochs(5, 1, 60), epochs(5, 1, 50, numerics="bf16+cl")]), ax=ax, which="val")
    labels = legend_texts(ax)
    assert len(ax.get_lines()) == 2 and labels[0].startswith("1 emulated worker (bs=4, lr=0.1, bf16+cl; 2 seeds)")
    assert labels[1].startswith("1 emulated worker (bs=4, lr=0.1; 2 seeds)")


def test_scaling_figure_without_other_scales_is_one_row():
    fig = throughput.draw_scaling(scaling_frame(), "Figure 14", framework="horovod+tensorflow", per_gpu_batch=32)
    assert len(fig.axes) == 2
    assert legend_texts(fig.axes[0]) == ["Horovod+TF b=32 — thesis"]


def test_rq2_bars_are_absolute_per_gpu_from_zero():
    rq2 = throughput.rq2_steady_state(rf.load_reference())
    ax = throughput.plot_steady_state(rq2)
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
    peers = quality.same_workers(e6, e7)
    assert set(peers["gpus"]) == {32} and set(peers["exp"]) == {6} and len(peers) == len(e6[e6["gpus"] == 32])
    axes = quality.plot_error_grid(pd.concat([e7, peers]))
    assert sum(ax.get_visible() for ax in axes.flat) == 2


def test_figures_24_and_28_get_the_one_worker_baseline():
    df = pd.concat([epochs(5, 1, 60), epochs(5, 32, 80), epochs(6, 8, 70)])
    base = quality.baseline_runs(df)
    assert set(base["exp"]) == {5} and set(base["gpus"]) == {1}
    fig = quality.quality_figure(pd.concat([base, df[df["exp"] == 6]]), "Figure 24")
    train, val = fig.axes[:2]
    # one legend for both panels, beside the validation panel (off the data)
    assert not legend_texts(train)
    assert [t.split(" (")[0] for t in legend_texts(val)] == ["1 emulated worker", "8 emulated workers"]
    assert val.get_legend().get_bbox_to_anchor().transformed(val.transAxes.inverted()).x0 > 1.0
    assert train.get_ylim() == val.get_ylim()


def test_figure17_names_local_workers_cpu_processes_and_stops_the_ideal_line_at_the_core_count():
    fig = throughput.draw_scaling(scaling_frame(), "Figure 17", framework=["pytorch", "horovod+pytorch"], cores=2)
    axes = np.array(fig.axes).reshape(2, 2)
    assert all(ax.get_xlabel() == "CPU processes on 2 cores" for ax in axes[1])
    assert all("GPUs" in ax.get_xlabel() for ax in axes[0])  # the thesis's row: P100 GPUs
    ideal = [line for line in axes[1, 1].get_lines() if line.get_label() == "ideal"][0]
    assert max(ideal.get_xdata()) == 2 and max(axes[0, 1].get_lines()[-1].get_xdata()) == 32
    plt.close(fig)


# ============================================================================================ saved files


def with_noisy_solve(fig, ulps: int):
    """The figure, its constrained layout's solve moved by `ulps` units in the last place of every axes' height: how
    kiwisolver's solve of the same layout differs from one process to the next."""
    fig.set_layout_engine("constrained")
    engine = fig.get_layout_engine()
    solve = engine.execute

    def noisy_execute(f):
        solve(f)
        for ax in f.axes:
            x, y, w, h = ax.get_position().bounds
            ax._set_position([x, y, w, h + ulps * np.spacing(h)])  # as the layout engine moves axes

    engine.execute = noisy_execute
    return fig


def test_saved_files_do_not_move_with_the_last_bits_of_the_layout_solve(tmp_path):
    """3 ulps more height for every axes changed the PNG's bytes when it was drawn at the solve as it came."""
    df = pd.concat([epochs(6, 1, 60), epochs(6, 32, 90)])
    files = []
    for ulps in (0, 3):
        fig = with_noisy_solve(quality.plot_error_grid(df).flat[0].figure, ulps)
        files.append([p.read_bytes() for p in fg.save(fig, tmp_path / f"ulps{ulps}", "grid", "made from 4 runs")])
    assert files[0] == files[1]
