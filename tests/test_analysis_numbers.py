"""The thesis's formulas and the reference data, spot-checked against the thesis's text."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from analysis import numbers as nb
from analysis import reference as rf
from analysis import tables as tb
from analysis.experiments import throughput

#: speed-ups at 32 GPUs the thesis's text states (section 5.3)
STATED_SPEEDUP_32 = {("horovod+tensorflow", 32): 22.7, ("horovod+tensorflow", 64): 26.5,
                     ("horovod+tensorflow", 128): 26.7, ("horovod+pytorch", 128): 29.4, ("pytorch", 128): 27.5}
SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "003_e4cc0acb46d707f1.txt"


def test_thesis_formula_figure_11():
    assert round(nb.thesis_throughput(128, 1, 0.633), 2) == 202.21
    assert math.isnan(nb.thesis_throughput(128, 1, 0.0))


def test_steady_batch_time_both_ways():
    vals = [10.0] + [0.5] * 199
    counts = list(range(1, 201))
    avgs = [sum(vals[:n]) / n for n in counts]
    assert nb.steady_batch_time(counts, avgs, vals, warmup=1) == pytest.approx(0.5)
    # only every 50th running mean printed: difference of running sums
    sub = [0, 49, 99, 149, 199]
    assert nb.steady_batch_time([counts[i] for i in sub], [avgs[i] for i in sub], warmup=1) == pytest.approx(0.5)
    assert math.isnan(nb.steady_batch_time([1, 2], [1.0, 1.0], warmup=5))


def test_first_batch_left_out_rq2_values():
    # Table 8/9 at 32 GPUs and Table 5/6 at 2 GPUs with the first batch of Figures 12-13 removed
    assert throughput.without_first_batch(5696.80, 128, 32, 21.925) == pytest.approx(6688.03, abs=0.01)
    assert throughput.without_first_batch(6104.32, 128, 32, 9.950) == pytest.approx(6560.19, abs=0.01)
    assert throughput.without_first_batch(372.09, 128, 2, 18.532) == pytest.approx(427.85, abs=0.01)
    assert throughput.without_first_batch(390.24, 128, 2, 9.696) == pytest.approx(419.27, abs=0.01)


def test_natural_order_of_run_names():
    names = ["w24-s0", "w2-s0", "w16-s0", "w1-s1", "w1-s0", "lars-w128-s0"]
    assert sorted(names, key=nb.natural_key) == ["lars-w128-s0", "w1-s0", "w1-s1", "w2-s0", "w16-s0", "w24-s0"]


def test_speedups_stated_in_the_text():
    t = tb.throughput_reference()
    at32 = t[t["gpus"] == 32].set_index(["framework", "per_gpu_batch"])["speedup"]
    for (fw, b), stated in STATED_SPEEDUP_32.items():
        assert round(at32[(fw, b)], 1) == stated, (fw, b)
    assert (t.loc[t["gpus"] == 1, "efficiency"] == 1.0).all()


def test_duration_and_warmup_labels():
    assert nb.format_duration(533760) == "6 d 4 h 16 min"
    assert nb.format_duration(23760) == "6 h 36 min"
    assert nb.format_duration(6900) == "1 h 55 min"
    assert nb.format_duration(75) == "1 min 15 s"
    assert nb.format_duration(14) == "14 s"
    assert nb.format_duration(float("nan")) == ""
    assert nb.warmup_label("stepping", 5) == "stepping-5"
    assert nb.warmup_label("gradual", 10.0) == "gradual-10"
    assert nb.warmup_label("none", 5) == "none"
    assert nb.warmup_label("gradual", 0.5) == "gradual-0.5"


def test_wallclock_estimate():
    assert nb.wallclock_estimate_s(1281167 / 3600) == pytest.approx(90 * 3600)


# ============================================================================================ reference data


def test_reference_shape_and_vocabulary():
    ref = rf.load_reference()
    assert list(ref.columns) == rf.REFERENCE_COLUMNS
    assert len(ref) == 35 + 18
    assert set(ref["table"]) == set(range(1, 16))
    assert set(ref["framework"]) == {"pytorch", "horovod+pytorch", "horovod+tensorflow"}
    assert set(ref["warmup"].dropna()) == {"none", "stepping-5", "gradual-5", "gradual-10"}
    assert ref.loc[ref["table"] <= 9, "throughput"].notna().all()
    assert ref.loc[ref["table"] >= 10, ["top1", "top5"]].notna().all().all()
    assert ref.loc[ref["table"] == 10, "wallclock_s"].isna().all()  # Table 10 gives no wall-clock


def test_reference_spot_values():
    ref = rf.load_reference()

    def one(**kw):
        q = ref
        for k, v in kw.items():
            q = q[q[k] == v]
        assert len(q) == 1, kw
        return q.iloc[0]

    assert one(table=1, per_gpu_batch=64)["throughput"] == 234.01
    r = one(table=7, per_gpu_batch=64, gpus=24)
    assert (r["throughput"], r["nodes"]) == (4832.52, 6)
    assert one(table=9, gpus=32)["throughput"] == 6104.32
    r = one(table=10, gpus=24)
    assert (r["top1"], r["top5"], r["lr"], r["global_batch"]) == (70.332, 89.488, 0.1, 3072)
    r = one(table=11, gpus=1)
    assert (r["top1"], r["top5"], r["wallclock_s"], r["lr"]) == (75.028, 92.296, 533760, 0.05)
    r = one(table=12, framework="pytorch")
    assert (r["top1"], r["wallclock_s"]) == (74.604, 7 * 3600 + 18 * 60)
    r = one(table=13)
    assert (r["per_gpu_batch"], r["global_batch"], r["lr"], r["top1"], r["wallclock_s"]) == (32, 1024, 0.4, 74.766,
                                                                                             8 * 3600)
    assert one(table=15, gpus=24)["warmup"] == "gradual-10"
    # the 1-GPU baseline of tables 11, 12 and 14 is stored once, under table 11
    assert ref[(ref["gpus"] == 1) & (ref["table"] >= 10)]["table"].tolist() == [10, 11]
    assert len(rf.table_rows(ref, 12)) == 6 and len(rf.table_rows(ref, 14)) == 4


@pytest.mark.skipif(not SEED.exists(), reason="thesis text not available")
def test_every_reference_value_appears_in_the_thesis_text():
    text = SEED.read_text()
    ref = rf.load_reference()
    for r in ref.itertuples(index=False):
        if not math.isnan(r.throughput):
            assert f"{r.throughput:.2f}" in text, r
        if not math.isnan(r.top1):
            assert f"{r.top1:.3f}% / {r.top5:.3f}%" in text, r
        if not math.isnan(r.wallclock_s):
            d, rem = divmod(int(r.wallclock_s), 86400)
            h, m = divmod(rem // 60, 60)
            assert re.search(rf"{d} days {h} hours {m} min", text), r


def test_rq2_table():
    rq2 = throughput.rq2_steady_state()
    assert list(rq2.columns) == ["framework", "gpus", "thesis_images_per_s", "first_batch_s", "steady_images_per_s"]
    assert len(rq2) == 12
    known = rq2.dropna(subset=["steady_images_per_s"]).set_index(["framework", "gpus"])["steady_images_per_s"]
    assert known[("pytorch", 32)] == pytest.approx(6688.03, abs=0.01)
    assert known[("pytorch", 32)] > known[("horovod+pytorch", 32)]  # the answer to RQ2 flips
    assert known[("pytorch", 2)] > known[("horovod+pytorch", 2)]


def test_thesis_learning_rate_formulas():
    assert rf.thesis_lr(0, 1.6, "stepping-5") == pytest.approx(1.6 / 6)
    assert rf.thesis_lr(4, 1.6, "stepping-5") == pytest.approx(1.6 * 5 / 6)
    assert rf.thesis_lr(5, 1.6, "stepping-5") == pytest.approx(1.6)
    assert rf.thesis_lr(0, 1.6, "gradual-5", 128) == pytest.approx(0.05)
    assert rf.thesis_lr(1, 1.6, "gradual-5", 128) == pytest.approx(0.05 + 1.55 / 5)
    assert rf.thesis_lr(9, 1.2, "gradual-10", 128) == pytest.approx(0.05 + 9 * 1.15 / 10)
    assert rf.thesis_lr(30, 1.6, "none") == pytest.approx(0.16)
    assert rf.thesis_lr(80, 1.6, "none") == pytest.approx(0.0016)
    assert rf.thesis_lr(59, 0.1, "none", decay="step") == pytest.approx(0.01)
    assert rf.thesis_lr(60, 0.1, "none", decay="step") == pytest.approx(0.001)
    from analysis.experiments.quality import thesis_schedules

    s = thesis_schedules()
    assert set(s["experiment"]) == {4, 5, 6, 7, 8, 9} and s["epoch"].max() == 89


def pseudocode_lr(epoch: int, target_lr: float, warmup: str, per_gpu_batch: int, decay: str) -> float:
    """The learning rate at the start of an epoch by the thesis's appendix pseudocode.

    stepping-W: target * (e + 1) / (W + 1) for e < W (appendix 9);
    gradual-W:  base + e * (target - base) / W for e < W, base = per_gpu_batch / 256 * 0.1 (appendix 13);
    then target, divided by 10 every 30 epochs (experiment 4) or at epochs 30, 60 and 80 (experiments 5-9).
    """
    kind, _, w = (warmup or "none").partition("-")
    w = int(float(w)) if w else 0
    if kind == "stepping" and epoch < w:
        return target_lr * (epoch + 1) / (w + 1)
    if kind == "gradual" and epoch < w:
        base = per_gpu_batch / 256 * 0.1
        return base + epoch * (target_lr - base) / w
    if decay == "step":
        return target_lr * 0.1 ** (epoch // 30)
    return target_lr * 0.1 ** sum(epoch >= m for m in rf.MILESTONES)


def test_trainer_schedule_agrees_with_the_thesis_formulas():
    from analysis.experiments.quality import SETTINGS

    ref = rf.load_reference()
    for r in ref[ref["experiment"] >= 4].itertuples(index=False):
        decay = SETTINGS[int(r.experiment)]["decay"]
        for e in range(90):
            assert rf.thesis_lr(e, r.lr, r.warmup, int(r.per_gpu_batch), decay) == pytest.approx(
                pseudocode_lr(e, r.lr, r.warmup, int(r.per_gpu_batch), decay)), (r, e)
