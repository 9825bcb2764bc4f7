"""The cost table: runs x epochs x images / images/s -> GPU-hours, checked against the thesis's wall-clocks."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from analysis import cost
from analysis import reference as rf
from analysis import tables as tb
from analysis.runs import COLUMNS
from contract.config import load_config

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"
REF = rf.load_reference()
NO_RUNS = tb.throughput_summary(pd.DataFrame(columns=COLUMNS))


def test_work_of_a_training_and_of_a_benchmark():
    train = load_config(EXPERIMENTS / "06_linear_scaling_stepping_warmup", "thesis", ["train.workers=32"],
                        need_data=False)
    assert cost.run_work(train) == (90 * 1_281_167, 32)
    emulated = load_config(EXPERIMENTS / "06_linear_scaling_stepping_warmup", "gpu", ["train.workers=32"],
                           need_data=False)
    assert cost.run_work(emulated)[1] == 1  # 32 emulated workers hold one GPU
    bench = load_config(EXPERIMENTS / "01_throughput_single_gpu", "thesis", ["train.per_worker_batch=64"],
                        need_data=False)
    assert cost.run_work(bench) == ((200 + 10) * 64, 1)


def test_rate_prefers_ours_then_the_thesis_then_nothing():
    ours = pd.DataFrame({"scale": ["thesis"], "framework": ["horovod+pytorch"], "numerics": ["fp32"],
                         "per_gpu_batch": [128], "gpus": [32], "steady_images_per_s": [7000.0],
                         "thesis_images_per_s": [6500.0]})
    thesis = REF.dropna(subset=["throughput"])
    assert cost.rate(ours, thesis, "thesis", "horovod+pytorch", 128, 32) == (7000.0, "ours (thesis scale)")
    assert cost.rate(NO_RUNS, thesis, "thesis", "horovod+pytorch", 128, 32) == (6104.32, "thesis Table 9 (P100)")
    speed, source = cost.rate(NO_RUNS, thesis, "thesis", "horovod+pytorch", 32, 32)
    assert math.isnan(speed) and source == "no measurement"
    # the gpu scale's GPU is not a P100: its rows take its own benchmark or nothing
    assert cost.rate(NO_RUNS, thesis, "gpu", "emulated", 128, 1, bench=BENCH.iloc[0:0])[1] == "no measurement"


BENCH = pd.DataFrame({"device": "H100", "file": "bench_gpu.json", "numerics": ["fp32", "fp32", "bf16+cl+compiled"],
                      "wrapper": ["ddp", "single", "single"], "per_gpu_batch": [128, 128, 256],
                      "images_per_s": [900.0, 950.0, 5000.0]})


def test_rate_takes_our_measurement_of_the_same_numerics_only():
    ours = pd.DataFrame({"scale": ["gpu"], "framework": ["pytorch"], "numerics": ["bf16+cl"], "per_gpu_batch": [128],
                         "gpus": [1], "steady_images_per_s": [2500.0], "thesis_images_per_s": [2400.0]})
    thesis = REF.dropna(subset=["throughput"])
    assert cost.rate(ours, thesis, "gpu", "pytorch", 128, 1, "bf16+cl") == (2500.0, "ours (gpu scale)")
    # fp32 takes the benchmark's fp32 row, never the bf16 run's rate nor the P100's
    assert cost.rate(ours, thesis, "gpu", "pytorch", 128, 1, bench=BENCH) == (900.0, "bench_gpu.json (H100)")
    assert cost.rate(ours, thesis, "gpu", "emulated", 128, 1, "bf16+cl", BENCH)[0] == 2500.0  # ours first
    assert cost.rate(NO_RUNS, thesis, "gpu", "emulated", 256, 1, "bf16+cl+compiled", BENCH) == \
        (5000.0, "bench_gpu.json (H100)")
    rows = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "01_throughput_single_gpu", "gpu", ours, REF,
                                                           BENCH)}
    assert rows["gpu-b128-ddp-bf16-cl"]["images_per_s"] == 2500.0 and rows["gpu-b128-ddp"]["images_per_s"] == 900.0
    for name in ("gpu-b128-ddp-bf16-cl-compiled", "gpu-b128-ddp-tf32", "gpu-b64-ddp"):  # measured by nothing
        assert rows[name]["rate_source"] == "no measurement" and math.isnan(rows[name]["images_per_s"]), name
    thesis_rows = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "01_throughput_single_gpu", "thesis",
                                                                  NO_RUNS, REF, BENCH)}
    assert thesis_rows["thesis-b128-ddp"]["rate_source"] == "thesis Table 2 (P100)"  # the thesis scale's own GPU


def test_experiment6_at_the_thesis_scale_against_its_own_wall_clock():
    rows = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "06_linear_scaling_stepping_warmup",
                                                           "thesis", NO_RUNS, REF)}
    r = rows["thesis-w32"]
    wall = 90 * 1_281_167 / 6104.32
    assert r["run_wallclock_s"] == pytest.approx(wall)
    assert r["gpu_hours"] == pytest.approx(32 * wall / 3600)
    assert r["thesis_wallclock_s"] == 23760  # Table 12: 6 h 36 min
    assert r["estimate_over_thesis"] == pytest.approx(wall / 23760)
    assert rows["thesis-w32-ddp"]["images_per_s"] == 5696.80 and rows["thesis-w32-ddp"]["thesis_wallclock_s"] == 26280


def test_totals_sum_runs_and_leave_unmeasured_configurations_out_loudly():
    c = pd.DataFrame({"experiment": ["07", "07", "06"], "scale": "thesis", "runs": [1, 2, 3],
                      "images_per_s": [math.nan, 100.0, 100.0], "run_wallclock_s": [math.nan, 3600.0, 7200.0],
                      "gpu_hours": [math.nan, 4.0, 6.0]})
    t = cost.totals(c).set_index("experiment")
    assert t.loc["07", "gpu_hours"] == 4.0 and t.loc["07", "configurations_unmeasured"] == 1
    assert t.loc["06", "sequential_wallclock_s"] == 3 * 7200.0 and t.loc["07", "runs"] == 3


def test_the_printed_totals_say_which_experiments_gpus_and_gaps_they_hold():
    c = pd.DataFrame({"experiment": ["06_x", "07_x", "10_x"], "scale": "gpu", "runs": [3, 1, 2],
                      "images_per_s": [100.0, math.nan, 100.0], "run_wallclock_s": [3600.0, math.nan, 3600.0],
                      "gpu_hours": [3.0, math.nan, 2.0],
                      "rate_source": ["bench_gpu.json (H100)", "no measurement", "bench_gpu.json (H100)"]})
    lines = cost.summary_lines(cost.totals(c))
    assert lines[0].startswith("gpu, the thesis's experiments (experiments 6-7): 3.0 GPU-hours")
    assert "rates measured on H100" in lines[0] and "1 configuration(s) with no measurement left out" in lines[0]
    assert lines[1].startswith("gpu, beyond the thesis (experiment 10): 2.0 GPU-hours")


def test_list_schedule_runs_jobs_in_plan_order_on_the_first_free_slot():
    assert cost.list_schedule_s([], 2) == 0.0
    assert cost.list_schedule_s([10.0, 10.0, 10.0], 2) == 20.0
    # 30 | 5 -> slot 2 takes 5, then 6 (at 5 -> 11), then 7 (at 11 -> 18): the 30 ends last
    assert cost.list_schedule_s([30.0, 5.0, 6.0, 7.0], 2) == 30.0
    assert cost.list_schedule_s([5.0, 6.0, 7.0, 30.0], 2) == 6.0 + 30.0  # plan order, not longest first
    assert cost.list_schedule_s([4.0, 4.0], 1) == 8.0


def _planned_rows(experiment: str, walls: dict[str, float], wrong_config: tuple[str, ...] = ()) -> pd.DataFrame:
    """The run rows a report frame holds for those planned runs (their real fingerprints unless wrong_config)."""
    from contract.fingerprint import config_fingerprint
    from contract.plan import expand

    config = EXPERIMENTS / experiment / "config.toml"
    rows = []
    for run in expand(config, "local"):
        if run.name in walls:
            overrides = [f"{k}={v}" for k, v in run.settings.items()]
            fp = config_fingerprint(load_config(config, "local", overrides, need_data=False))
            rows.append({"kind": "run", "experiment": experiment, "run": run.name, "scale": "local",
                         "status": "completed", "wallclock_s": walls[run.name],
                         "fingerprint": "0" * 12 if run.name in wrong_config else fp})
    return pd.DataFrame(rows)


def test_local_study_times_count_only_the_default_plans_runs_and_schedule_them_two_at_a_time():
    walls = {"w24-s0": 600.0, "w24-s1": 600.0, "w24-s2": 600.0, "w32-s0": 300.0, "w32-s1": 300.0, "w32-s2": 300.0}
    df = _planned_rows("09_gradual_warmup_10", walls)
    t = cost.local_study_times(df, EXPERIMENTS).set_index("experiment")
    row = t.loc["09_gradual_warmup_10"]
    assert (row["runs_planned"], row["runs_measured"]) == (6, 6)
    assert row["run_minutes"] == pytest.approx(2700 / 60)
    # plan order w24-s0..2, w32-s0..2 on 2 slots: 600 | 600; then w24-s2 to 1200 | w32-s0, -s1 to 1200; w32-s2
    assert row["study_minutes_jobs2"] == pytest.approx(1500 / 60)
    assert "01_throughput_single_gpu" not in t.index  # throughput studies are timed alone, not here

    short = cost.local_study_times(_planned_rows("09_gradual_warmup_10", walls, wrong_config=("w32-s2",)),
                                   EXPERIMENTS).set_index("experiment").loc["09_gradual_warmup_10"]
    assert short["runs_measured"] == 5 and math.isnan(short["study_minutes_jobs2"])  # another config is not its run
