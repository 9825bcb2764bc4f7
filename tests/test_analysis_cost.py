"""The cost table: runs x epochs x images / images/s -> GPU-hours, checked against the thesis's wall-clocks."""
from __future__ import annotations

import json
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
                      "gpu_hours": [math.nan, 4.0, 6.0],
                      "rate_source": ["no measurement", "bench_gpu.json (H100)", "bench_gpu.json (H100)"]})
    c = c.reindex(columns=cost.COLUMNS)  # every column cost_table writes
    t = cost.totals(c).set_index("experiment")
    assert t.loc["07", "gpu_hours"] == 4.0 and t.loc["07", "configurations_unmeasured"] == 1
    assert t.loc["06", "sequential_wallclock_s"] == 3 * 7200.0 and t.loc["07", "runs"] == 3


def test_the_printed_totals_say_which_experiments_gpus_and_gaps_they_hold():
    c = pd.DataFrame({"experiment": ["06_x", "07_x", "10_x"], "scale": "gpu", "runs": [3, 1, 2],
                      "images_per_s": [100.0, math.nan, 100.0], "run_wallclock_s": [3600.0, math.nan, 3600.0],
                      "gpu_hours": [3.0, math.nan, 2.0],
                      "rate_source": ["bench_gpu.json (H100)", "no measurement", "bench_gpu.json (H100)"]})
    c = c.reindex(columns=cost.COLUMNS)  # every column cost_table writes
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
                         "path": f"results/runs/{experiment}/{run.name}",
                         "status": "completed", "wallclock_s": walls[run.name],
                         "fingerprint": "0" * 12 if run.name in wrong_config else fp})
    return pd.DataFrame(rows)


def test_local_study_times_count_only_the_default_plans_runs_and_schedule_them_two_at_a_time():
    walls = {"w24-s0": 600.0, "w24-s1": 600.0, "w24-s2": 600.0, "w32-s0": 300.0, "w32-s1": 300.0, "w32-s2": 300.0}
    df = _planned_rows("09_gradual_warmup_10", walls)
    t = cost.local_study_times(df, EXPERIMENTS).set_index("experiment")
    row = t.loc["09_gradual_warmup_10"]
    assert (row["runs_planned"], row["runs_measured"], row["measured_on"]) == (6, 6, "this machine")
    assert row["run_minutes"] == pytest.approx(2700 / 60)
    # plan order w24-s0..2, w32-s0..2 on 2 slots: 600 | 600; then w24-s2 to 1200 | w32-s0, -s1 to 1200; w32-s2
    assert row["study_minutes_jobs2"] == pytest.approx(1500 / 60)
    assert "01_throughput_single_gpu" not in t.index  # throughput studies are timed alone, not here

    short = cost.local_study_times(_planned_rows("09_gradual_warmup_10", walls, wrong_config=("w32-s2",)),
                                   EXPERIMENTS).set_index("experiment").loc["09_gradual_warmup_10"]
    assert short["runs_measured"] == 5 and math.isnan(short["study_minutes_jobs2"])  # another config is not its run


# ---- the node scale: node-hours of a node of N GPUs ------------------------------------------------------------
NODE_BENCH = pd.DataFrame({"device": "H100", "file": "bench_gpu.json",
                           "numerics": ["fp32", "bf16+cl", "bf16+cl"], "wrapper": ["ddp", "ddp", "single"],
                           "per_gpu_batch": [128, 128, 128], "images_per_s": [900.0, 3500.0, 3600.0]})


def test_a_node_run_on_one_gpu_takes_the_measured_1_gpu_ddp_rate_as_it_is():
    assert cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 1, 1, "bf16+cl") == (3500.0, "bench_gpu.json (H100)")
    assert cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 1, 1, "fp32") == (900.0, "bench_gpu.json (H100)")


def test_a_node_run_on_p_gpus_is_p_times_the_1_gpu_rate_and_says_its_scaling_is_unmeasured():
    speed, source = cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 32, 8, "bf16+cl")
    assert speed == 8 * 3500.0
    assert source == "bench_gpu.json (H100) x 8: the 1-GPU measurement x 8 GPUs, scaling unmeasured"
    assert cost.scaling_assumed(source) and not cost.scaling_assumed("bench_gpu.json (H100)")


def test_a_node_run_with_no_1_gpu_measurement_of_its_own_numerics_backend_or_batch_has_none():
    for backend, batch, numerics in [("horovod", 128, "bf16+cl"),  # no Horovod benchmark on the GPU
                                     ("dp", 128, "fp32"),  # nor DataParallel's
                                     ("ddp", 64, "bf16+cl"),  # nor batch 64
                                     ("ddp", 128, "tf32")]:  # never another precision's rate
        speed, source = cost.node_rate(NO_RUNS, NODE_BENCH, backend, batch, 2, 2, numerics)
        assert math.isnan(speed) and source == "no measurement", (backend, batch, numerics)


def test_a_node_run_takes_our_node_measurement_of_the_same_workers_over_the_same_processes_first():
    ours = pd.DataFrame({"scale": "node", "framework": "pytorch", "backend": "ddp", "numerics": "bf16+cl",
                         "per_gpu_batch": 128, "gpus": [8, 8], "processes": [8, 2],
                         "steady_images_per_s": [20000.0, 6000.0], "thesis_images_per_s": [19000.0, 5900.0]})
    assert cost.node_rate(ours, NODE_BENCH, "ddp", 128, 8, 8, "bf16+cl") == (20000.0, "ours (node scale)")
    assert cost.node_rate(ours, NODE_BENCH, "ddp", 128, 8, 2, "bf16+cl") == (6000.0, "ours (node scale)")
    assert cost.node_rate(ours, NODE_BENCH, "ddp", 128, 8, 4, "bf16+cl")[0] == 4 * 3500.0  # P = 4: not measured


def test_node_rows_of_experiment_6_are_node_hours_of_w_workers_over_min_w_n_gpus():
    rows = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "06_linear_scaling_stepping_warmup", "node",
                                                           NO_RUNS, REF, NODE_BENCH, node_gpus=8)}
    assert set(rows) == {"node-w8", "node-w16", "node-w24", "node-w32"}
    r = rows["node-w32"]
    wall = 90 * 1_281_167 / (8 * 3500.0)  # bf16 + channels_last at per-GPU batch 128, the node scale's numerics
    assert (r["runs"], r["gpus_per_run"], r["images_per_s"]) == (1, 8, 8 * 3500.0)
    assert r["run_wallclock_s"] == pytest.approx(wall)
    assert r["node_hours"] == pytest.approx(wall / 3600)  # each run holds the whole node
    assert r["gpu_hours"] == pytest.approx(8 * wall / 3600)  # the GPUs that compute
    assert math.isnan(r["thesis_wallclock_s"])
    four = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "06_linear_scaling_stepping_warmup", "node",
                                                           NO_RUNS, REF, NODE_BENCH, node_gpus=4)}["node-w32"]
    assert four["gpus_per_run"] == 4 and four["node_hours"] == pytest.approx(90 * 1_281_167 / (4 * 3500.0) / 3600)
    one = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "05_linear_scaling", "node", NO_RUNS, REF,
                                                          NODE_BENCH, node_gpus=8)}["node-w1"]
    assert one["rate_source"] == "bench_gpu.json (H100)" and one["node_hours"] == \
        pytest.approx(one["runs"] * 90 * 1_281_167 / 3500.0 / 3600)


def test_node_rows_of_experiments_2_and_3_hold_what_the_node_runs():
    rows = {r["configuration"]: r for r in cost.study_rows(EXPERIMENTS / "02_throughput_local_data_parallel", "node",
                                                           NO_RUNS, REF, NODE_BENCH, node_gpus=4)}
    tf_rows = {f"node-w{w}-b{b}-tensorflow-{be}" for w in (2, 4) for b in (32, 64, 128) for be in ("horovod", "mwms")}
    assert set(rows) == {f"node-w{w}-{b}" for w in (1, 2, 4) for b in ("ddp", "horovod", "dp")} | tf_rows  # no w8
    assert rows["node-w1-ddp"]["images_per_s"] == 900.0  # experiment 2 keeps the thesis's fp32
    assert rows["node-w2-ddp"]["run_wallclock_s"] == pytest.approx((200 + 10) * 256 / (2 * 900.0))
    assert rows["node-w4-dp"]["gpus_per_run"] == 4 and rows["node-w4-dp"]["rate_source"] == "no measurement"
    assert cost.study_rows(EXPERIMENTS / "03_throughput_distributed_data_parallel", "node", NO_RUNS, REF,
                           NODE_BENCH) == []  # several nodes: refused at the node scale


def test_node_totals_are_node_hours_and_count_the_rows_whose_scaling_is_assumed():
    c = pd.DataFrame({"experiment": ["05_x", "05_x", "05_x"], "scale": "node", "runs": [3, 1, 2],
                      "images_per_s": [3500.0, 28000.0, math.nan], "run_wallclock_s": [7200.0, 3600.0, math.nan],
                      "gpu_hours": [6.0, 8.0, math.nan], "node_hours": [6.0, 1.0, math.nan],
                      "rate_source": ["bench_gpu.json (H100)", cost.scaled_source("bench_gpu.json (H100)", 8),
                                      "no measurement"]})
    c = c.reindex(columns=cost.COLUMNS)  # every column cost_table writes
    t = cost.totals(c).set_index("experiment").loc["05_x"]
    assert t["node_hours"] == 7.0 and t["configurations_scaling_assumed"] == 1 and t["configurations_unmeasured"] == 1
    assert t["node_hours_scaling_assumed"] == 1.0
    line = cost.summary_lines(cost.totals(c), node_gpus=8)[0]
    assert line.startswith("node (a node of 8 GPUs), the thesis's experiments (experiment 5): 7.0 node-hours, ")
    assert line.endswith("; 1.0 of the node-hours from 1 configuration(s) at a 1-GPU rate x their GPUs (perfect "
                         "scaling assumed, unmeasured); 1 configuration(s) with no measurement left out")


def test_cost_prices_the_node_at_gpus_n_and_refuses_a_node_of_no_gpus_in_one_line(tmp_path, capsys):
    from analysis.__main__ import main

    assert main(["cost", "--gpus", "0", "--out", str(tmp_path), "--runs", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --gpus 0: the node scale spreads the workers over a node of 2 or more GPUs; on one GPU "
                   "use SCALE=gpu (its workers emulated on that GPU)"]
    assert not (tmp_path / "tables").exists()


def test_cost_gpus_4_prices_a_node_of_4_gpus(tmp_path, capsys):
    from analysis.__main__ import main

    assert main(["cost", "--gpus", "4", "--out", str(tmp_path), "--runs", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert "node (a node of 4 GPUs), the thesis's experiments (experiments 1-9): " in out
    table = pd.read_csv(tmp_path / "tables" / "cost.csv")
    node = table[table["scale"] == "node"]
    exp2 = node[node["experiment"].str.startswith("02")].set_index("configuration")  # run names repeat across studies
    assert "node-w8-ddp" not in exp2.index and exp2.loc["node-w4-ddp", "gpus_per_run"] == 4
    assert node["gpus_per_run"].max() == 4 and not node["experiment"].str.startswith("03").any()
    assert "a node of 4 GPUs" in (tmp_path / "tables" / "cost.md").read_text().splitlines()[0]


def test_the_gpu_scales_quality_studies_plan_and_price_the_seeds_a_verdict_needs():
    """1 seed a side gives no interval, so every verdict would be inconclusive by construction: 3 seeds a side, and
    `make cost` prices them (its `runs`)."""
    from contract.plan import expand

    for experiment in sorted(EXPERIMENTS.glob("0[4-9]_*")):
        names = [run.name.rsplit("-s", 1)[0] for run in expand(experiment / "config.toml", "gpu")]
        assert names and all(names.count(name) >= 3 for name in names), experiment.name
        rows = cost.study_rows(experiment, "gpu", NO_RUNS, REF, bench=BENCH)
        assert rows and all(r["runs"] >= 3 for r in rows), experiment.name


# ---- the scaling advisor's prediction where no measurement exists (issue #51) --------------------------------
def gpu_step(tmp_path, precision="fp32"):
    path = tmp_path / "step-b128.json"
    path.write_text(json.dumps({"device": "NVIDIA H200", "model": "resnet50", "batch": 128, "precision": precision,
                                "channels_last": False, "forward_s": 0.02, "backward_s": 0.04, "optimizer_s": 0.002,
                                "whole_step_s": 0.062, "gradient_bytes": 102_228_128}))
    return cost.gpu_steps([tmp_path])


def test_a_node_run_on_p_gpus_takes_the_advisors_prediction_where_a_step_was_timed_and_says_so(tmp_path):
    from analysis.advisor import model as advisor

    steps = gpu_step(tmp_path)
    speed, source = cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 8, 8, "fp32", steps, "resnet50", 8)
    step, _ = advisor.load_step(tmp_path / "step-b128.json")
    link = advisor.nominal_link(cost.NODE_LINK)
    assert speed == pytest.approx(advisor.predict(step, "ddp", 8, 8, link, link).images_per_s)
    assert source == "predicted, no measurement: the advisor from step-b128.json (NVIDIA H200), nvlink4 nominal"
    assert cost.predicted(source) and cost._gpu_of(source) == "NVIDIA H200"
    # Horovod has no 1-GPU benchmark: predicted too; one GPU with a benchmark keeps the measurement
    assert cost.predicted(cost.node_rate(NO_RUNS, NODE_BENCH, "horovod", 128, 4, 4, "fp32", steps, "resnet50")[1])
    assert cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 1, 1, "fp32", steps, "resnet50") == \
        (900.0, "bench_gpu.json (H100)")
    # another model, batch or numerics than the step's: no prediction, the old rule
    assert cost.scaling_assumed(cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 8, 8, "bf16+cl", steps,
                                               "resnet50")[1])
    assert not cost.predicted(cost.node_rate(NO_RUNS, NODE_BENCH, "ddp", 128, 8, 8, "fp32", steps, "resnet18")[1])


def test_the_totals_count_the_predicted_configurations_and_say_so():
    c = pd.DataFrame({"experiment": "04_naive_scaling", "scale": "node", "runs": [1, 1], "gpus_per_run": 8,
                      "run_wallclock_s": 3600.0, "gpu_hours": 8.0, "node_hours": 1.0, "images_per_s": 1000.0,
                      "rate_source": ["bench_gpu.json (H100)", "predicted, no measurement: the advisor from s.json "
                                                               "(NVIDIA H200), nvlink4 nominal"]})
    c = c.reindex(columns=cost.COLUMNS)  # every column cost_table writes
    sums = cost.totals(c)
    assert sums["configurations_predicted"].tolist() == [1] and sums["rates_on"].tolist() == ["H100, NVIDIA H200"]
    assert "1 configuration(s) at the scaling advisor's prediction (no measurement)" in cost.summary_lines(sums, 8)[0]
