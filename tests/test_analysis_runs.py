"""Run folders -> one tidy DataFrame; statuses, throughput, seeds; tables and plot functions from fixtures."""
from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from analysis import tables as tb  # noqa: E402
from analysis.__main__ import main  # noqa: E402
from analysis.reference import load_reference  # noqa: E402
from analysis.runs import load_log, load_run, load_runs, load_study  # noqa: E402
from analysis.experiments import quality, throughput  # noqa: E402
from contract.runfiles import read_run_file  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "analysis"
RUNS = FIX / "runs"


@pytest.fixture(scope="module")
def study():
    return load_study(RUNS, [FIX / "logs" / "brought"])


def _run(df, experiment, run):
    r = df[(df["kind"] == "run") & (df["experiment"] == experiment) & (df["run"] == run)]
    assert len(r) == 1
    return r.iloc[0]


def test_one_tidy_frame(study):
    assert set(study["kind"]) == {"run", "epoch", "bench", "schedule"}
    assert (study["kind"] == "run").sum() == 15  # 13 run folders + 2 brought logs
    assert set(study.columns) >= {"experiment", "exp", "framework", "gpus", "per_gpu_batch", "global_batch", "lr",
                                  "warmup", "scale", "status", "val_top1"}


def test_statuses_diverged_and_half_written(study):
    assert _run(study, "06_stepping_warmup", "w8-s0")["status"] == "diverged"
    assert bool(_run(study, "06_stepping_warmup", "w8-s0")["diverged"])
    half = _run(study, "06_stepping_warmup", "w16-s0")
    assert half["status"] == "running" and half["bad_lines"] == 1 and half["epochs_done"] == 2
    assert _run(study, "05_linear_scaling", "w32-s1")["status"] == "completed"
    summary = tb.run_summary(study)
    assert summary.loc[summary["run"] == "w16-s0", "status_label"].iloc[0].startswith("running (half-written")


def test_config_mapping(study):
    r = _run(study, "06_stepping_warmup", "w32-s0")
    assert (r["exp"], r["framework"], r["gpus"], r["per_gpu_batch"], r["global_batch"], r["warmup"]) == \
        (6, "emulated", 32, 4, 128, "stepping-1")
    assert r["lr"] == pytest.approx(0.1 * 128 / 256)


def test_bench_rows_come_from_bench_records_alone(study):
    b = study[study["kind"] == "bench"]
    rec = b[(b["experiment"] == "01_throughput_single_gpu")].iloc[0]
    assert rec["note"] == "bench record" and rec["steady_images_per_s"] == pytest.approx(32 / 0.05)
    # 02_*: iteration records at batches 0 and 199 alone beside the bench record: the row is the record's
    lines = [json.loads(x) for x in (RUNS / "02_throughput_local" / "pytorch-w2" / "metrics.jsonl").read_text()
             .splitlines() if '"iter"' in x]
    assert [it["iter"] for it in lines] == [0, 199]
    der = b[(b["experiment"] == "02_throughput_local") & (b["run"] == "pytorch-w2")].iloc[0]
    assert der["note"] == "bench record"
    assert der["thesis_images_per_s"] == pytest.approx(64 / lines[-1]["batch_time_avg"])
    assert der["steady_images_per_s"] == pytest.approx(64 / (0.05 * 1.1))  # the fixture's steady step (make_fixtures)


def test_a_benchmark_without_a_bench_record_has_no_throughput_row(tmp_path):
    """No row is rebuilt from iteration records: the trainers write a bench record at every benchmark's end, so a
    benchmark without one ended before it (and says so in its status), never a number from a partial record."""
    import shutil

    import analysis as an

    run = tmp_path / "02_throughput_local" / "pytorch-w2"
    shutil.copytree(RUNS / "02_throughput_local" / "pytorch-w2", run)
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(line + "\n" for line in metrics.read_text().splitlines() if '"bench"' not in line))
    df = an.load_study(tmp_path)
    assert (df["kind"] == "bench").sum() == 0 and (df["kind"] == "run").sum() == 1


def test_schedule_rows(study):
    s = study[(study["kind"] == "schedule") & (study["experiment"] == "06_stepping_warmup") & (study["run"] == "w32-s0")]
    assert s.sort_values("epoch")["planned_lr"].round(6).tolist() == [0.025, 0.05, 0.005, 0.0005]


def test_quality_summary_mean_std_n(study):
    q = tb.quality_summary(study)
    row = q[(q["exp"] == 5) & (q["gpus"] == 32)].iloc[0]
    runs = study[(study["kind"] == "run") & (study["exp"] == 5) & (study["gpus"] == 32)]["best_val_top1"]
    assert row["n"] == 2 and row["top1_mean"] == pytest.approx(runs.mean()) and row["top1_std"] == \
        pytest.approx(runs.std())
    diverged = q[(q["exp"] == 6) & (q["gpus"] == 8)].iloc[0]
    assert diverged["status"] == "1 diverged" and diverged["n"] == 0


def test_thesis_tables_label_local_scale_and_match_thesis_scale(study, ):
    ref = load_reference()
    t12 = tb.quality_table(study, ref, 12)
    assert (t12.loc[t12["thesis_top1"].isna(), "scale"] == "local scale").all()
    assert t12["thesis_top1"].notna().sum() == 6
    t8 = throughput.throughput_table(study, ref, 8)  # the thesis-scale fixture run sits beside the thesis's row
    row = t8[(t8["gpus"] == 8) & (t8["scale"] == "thesis")].iloc[0]
    assert row["thesis_images_per_s"] == 1418.28 and row["n_runs"] == 1 and not math.isnan(row["ours_steady"])
    assert 0 < row["ours_data_wait_pct"] < 100  # the data-wait column: share of step time waiting for batches
    t5 = throughput.throughput_table(study, ref, 5)  # a brought upstream log at thesis scale
    row = t5[(t5["gpus"] == 2) & (t5["scale"] == "thesis")].iloc[0]
    assert row["ours_thesis_formula"] == pytest.approx(256 / round((18.532 + 199 * 0.6) / 200, 3), abs=0.005)
    for t in range(1, 16):
        tab = throughput.throughput_table(study, ref, t) if t <= 9 else tb.quality_table(study, ref, t)
        assert len(tab) >= 1 and set(tab["scale"]) <= {"thesis", "local scale", "gpu scale", "unknown scale"}


def test_markdown_writer(tmp_path, study):
    paths = tb.write_table(tb.quality_table(study, load_reference(), 11), tmp_path, "t11", "Table 11")
    md = paths[1].read_text()
    assert md.startswith("### Table 11") and "6 d 4 h 16 min" in md and "local scale" in md


def test_loader_survives_broken_folders(tmp_path):
    d = tmp_path / "09_x" / "r1"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text('{"kind": "epoch", "epoch": 0, "val_top1": 5}\nnot json\n[1,2]\n{"kind": "ep')
    (d / "manifest.json").write_text("{broken")
    (d / "config.json").write_text('{"experiment": "09_x", "run": "r1"}')  # without one it has no row (issue 48)
    df = load_runs(tmp_path)
    r = df[df["kind"] == "run"].iloc[0]
    assert r["bad_lines"] == 3 and r["status"] == "unknown" and r["best_val_top1"] == 5
    assert len(df.attrs["problems"]) >= 2
    assert load_runs(tmp_path / "nothing").empty


def test_epoch_rows_carry_fp16_skipped_steps_and_older_runs_read_as_missing(tmp_path):
    from contract.runfolder import RunFolder

    fields = dict(lr=0.1, train_loss=1.0, train_top1=50.0, train_top5=90.0, val_loss=1.0, val_top1=40.0,
                  val_top5=80.0, epoch_time=1.0, images=8, skipped_images=0, skipped_val_images=0, data_share=0.1,
                  data_s=0.1, compute_s=0.8, comm_s=0.0)
    run = RunFolder(tmp_path / "04_x" / "new", writes=True, echo=False)
    for epoch, skipped in enumerate([3, 0]):
        run.record("epoch", epoch=epoch, skipped_steps=skipped, steps=1, step=epoch + 1, **fields)
    run.close()
    (tmp_path / "04_x" / "new" / "config.json").write_text('{"experiment": "04_x", "run": "new"}')
    older = tmp_path / "04_x" / "old"  # an epoch record as the trainer wrote it before skipped_steps existed
    older.mkdir()
    (older / "config.json").write_text('{"experiment": "04_x", "run": "old"}')  # a folder without one has no rows
    (older / "metrics.jsonl").write_text(json.dumps({"kind": "epoch", "epoch": 0, **fields, "time": 1.0}) + "\n")
    df = load_runs(tmp_path)
    epochs = df[df["kind"] == "epoch"]
    assert epochs.loc[epochs["run"] == "new", "skipped_steps"].tolist() == [3, 0]
    assert epochs.loc[epochs["run"] == "old", "skipped_steps"].isna().tolist() == [True]
    assert (df.loc[df["run"] == "old", "bad_lines"] == 0).all()  # the older record is a good line, as before


def test_brought_diverged_log_shows_diverged():
    df = load_log(FIX / "logs" / "diverged_pf1.log", {"experiment": "04_x", "per_gpu_batch": 32})
    assert df.iloc[0]["status"] == "diverged"


# ============================================================================================ plot functions


def test_plot_functions_take_frame_and_axis(study):
    ref = load_reference()
    scaling = tb.scaling_table(study, ref)
    for fn, kw in ((throughput.plot_throughput, {"framework": ["pytorch", "horovod+pytorch"]}),
                   (throughput.plot_speedup, {"framework": "horovod+tensorflow", "per_gpu_batch": 32})):
        fig, ax = plt.subplots()
        assert fn(scaling, ax=ax, **kw) is ax and ax.get_lines()
        plt.close(fig)
    e = study[(study["kind"] == "epoch") & (study["exp"] == 5)]
    fig, ax = plt.subplots()
    assert quality.plot_error_curves(e, ax=ax, which="val") is ax and len(ax.get_lines()) == 2
    plt.close(fig)
    axes = quality.plot_error_grid(e)
    assert sum(a.get_visible() for a in axes.flat) == 2
    plt.close(axes.flat[0].figure)
    ax = throughput.plot_steady_state(throughput.rq2_steady_state())
    assert len(ax.patches) == 8
    plt.close(ax.figure)
    sched = quality.schedules_frame(study)
    assert set(sched.loc[sched["experiment"] == 6, "source"]) == {"run config"}
    assert set(sched.loc[sched["experiment"] == 9, "source"]) == {"thesis formula"}
    ax = quality.plot_lr_schedules(sched, experiment=9)
    assert len(ax.get_lines()) == 2
    plt.close(ax.figure)


# ============================================================================================ CLI


def test_throughput_cli_json(capsys):
    assert main(["throughput", str(FIX / "logs" / "thesis_fig11_srun.log"), "--per-gpu-batch", "128", "--gpus",
                 "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["thesis_images_per_s"] == 202.21 and out["steady_images_per_s"] == pytest.approx(220.31, abs=0.01)


def test_throughput_cli_on_run_folder_and_several_logs(capsys):
    assert main(["throughput", str(RUNS / "01_throughput_single_gpu" / "pytorch-w1"),
                 str(FIX / "logs" / "tf_cnn_benchmarks.log"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out) == 2 and out[1]["thesis_images_per_s"] == 234.01
    assert out[0]["steady_images_per_s"] == pytest.approx(640.0)
    assert main(["throughput", "/nonexistent.log"]) == 2


# ---- runs of different configs are never averaged ----------------------------------------------------------------
def test_a_group_mixing_configs_is_refused_with_a_problem_line(tmp_path):
    import shutil

    from analysis.runs import MIXED

    reference = Path(__file__).resolve().parents[1] / "results/reference/vm-2cpu-18ep"
    for experiment, runs in (("05_linear_scaling", ("w1-s0", "w1-s1", "w1-s2")), ("04_naive_scaling", ("w1-s0",
                                                                                                       "w1-s1"))):
        for run in runs:
            shutil.copytree(reference / experiment / run, tmp_path / experiment / run,
                            ignore=shutil.ignore_patterns("*.pt"))
    def smoke(config):  # a smoke run under a full run's name: 2 epochs
        config["train"]["epochs"], config["lr"]["milestones"] = 2, [1]

    trained_as(tmp_path / "05_linear_scaling/w1-s2", smoke)
    df = load_study(tmp_path)
    runs = df[df["kind"] == "run"].set_index(["experiment", "run"])
    assert set(runs.loc["05_linear_scaling", "status"]) == {MIXED}
    assert set(runs.loc["04_naive_scaling", "status"]) == {"completed"}  # one config: averaged as before
    problems = [p for p in df.attrs["problems"] if "different configs" in p]
    assert len(problems) == 1 and "05_linear_scaling" in problems[0] and "not averaged" in problems[0]
    summary = tb.quality_summary(df).set_index("exp")
    assert math.isnan(summary.loc[5, "top1_mean"]) and summary.loc[5, "n"] == 0 and MIXED in summary.loc[5, "status"]
    assert summary.loc[4, "n"] == 2
    from analysis.findings import orderings

    assert orderings(df, load_reference()).empty  # no baseline to compare with: it is refused


def test_runs_that_evaluate_at_another_cadence_are_two_measurements_not_a_mix(tmp_path):
    """Experiment 13's second edition evaluates every k steps, its first every epoch: otherwise alike, the two are
    kept apart (eval_every is a pooling key), so neither edition's runs are refused as a mix of configs."""
    import shutil

    from analysis.runs import MIXED

    reference = Path(__file__).resolve().parents[1] / "results/reference/vm-2cpu-18ep"
    for run in ("w1-s0", "w1-s1"):
        shutil.copytree(reference / "05_linear_scaling" / run, tmp_path / "05_linear_scaling" / run,
                        ignore=shutil.ignore_patterns("*.pt"))
    trained_as(tmp_path / "05_linear_scaling/w1-s1", lambda config: config["train"].update(eval_every=50))
    runs = load_study(tmp_path).query("kind == 'run'").set_index("run")
    assert runs.loc["w1-s1", "eval_every"] == 50 and runs.loc["w1-s0", "eval_every"] == 0
    assert runs.loc["w1-s0", "fingerprint"] != runs.loc["w1-s1", "fingerprint"]
    assert MIXED not in set(runs["status"])


def test_the_report_puts_this_machines_runs_beside_the_reference_by_fingerprint(tmp_path):
    import shutil

    from analysis.compare import report_comparison
    from analysis.machines import default_runs_root

    reference = Path(__file__).resolve().parents[1] / "results/reference/vm-2cpu-18ep"
    own = tmp_path / "runs"
    for run in ("w1-s0", "w1-s1"):  # "this machine" re-measured two of the 18-epoch reference's runs
        shutil.copytree(reference / "05_linear_scaling" / run, own / "05_linear_scaling" / run,
                        ignore=shutil.ignore_patterns("*.pt"))
    assert default_runs_root(own) == (own, "this machine")
    assert default_runs_root(tmp_path / "empty")[1] == "the committed reference, machine vm-2cpu"
    row = report_comparison(load_study(own)).set_index("configuration").loc["w1"]
    assert row["this machine"] == "62.08 ± 2.30 (n=2)"  # 63.70 and 60.45
    assert row["reference: vm-2cpu-18ep"] == "62.52 ± 1.80 (n=3)"  # the reference's three seeds of the same config
    # the 72-epoch reference ran another config, never compared: a column of "-" alone, left out
    assert not any(c.startswith("reference: vm-2cpu") and c != "reference: vm-2cpu-18ep" for c in row.index)
    assert row["thesis"] == "75.03" and row["measure"] == "best top-1 %"


# ---- numerics: runs in another precision, memory layout or compiled are rows of their own ---------------------------
REPO = Path(__file__).resolve().parents[1]
BF16_CL = {"precision": "bf16", "channels_last": True}


def test_numerics_label_and_runs_from_before_it_read_as_fp32():
    from analysis.numbers import numerics_label

    assert [numerics_label(), numerics_label("tf32"), numerics_label("bf16", True), numerics_label("bf16", True, True),
            numerics_label("fp16", False, True)] == ["fp32", "tf32", "bf16+cl", "bf16+cl+compiled", "fp16+compiled"]
    old = REPO / "results/reference/vm-2cpu-18ep/05_linear_scaling/w1-s0"  # from before [train] precision existed
    assert "precision" not in json.loads((old / "config.json").read_text())["train"]
    df, _ = load_run(old)
    assert set(df["numerics"]) == {"fp32"}
    log = load_log(FIX / "logs" / "thesis_fig11_srun.log", {"experiment": "01_x", "per_gpu_batch": 128})
    assert set(log["numerics"]) == {"fp32"}  # the thesis's P100s ran strict fp32


def _bench(root, experiment, run, gpus, batch_s, train=None, scale="gpu", per_gpu_batch=64):
    from tests import synth_records as synth

    return synth.write_run(root, experiment, run, scale=scale, framework="pytorch", gpus=gpus,
                           per_gpu_batch=per_gpu_batch, bench_batches=220, warmup_batches=10, batch_s=batch_s,
                           train_extra=train)


def test_gpu_scale_numerics_are_rows_of_their_own_with_their_own_speedups(tmp_path):
    # experiment 1's gpu-scale study adds bf16 + channels_last beside fp32 at the same batch; experiment 2 both on 2
    _bench(tmp_path, "01_throughput_single_gpu", "gpu-b64-ddp", 1, 0.2)
    _bench(tmp_path, "01_throughput_single_gpu", "gpu-b64-ddp-bf16-cl", 1, 0.05, BF16_CL)
    _bench(tmp_path, "02_throughput_local_data_parallel", "gpu-b64-w2", 2, 0.25)
    _bench(tmp_path, "02_throughput_local_data_parallel", "gpu-b64-w2-bf16-cl", 2, 0.06, BF16_CL)
    df = load_study(tmp_path)
    assert not [p for p in df.attrs["problems"] if "different configs" in p]
    assert set(df.loc[df["kind"] == "run", "status"]) == {"completed"}

    s = tb.throughput_summary(df).set_index(["exp", "numerics"])
    assert len(s) == 4 and (s["n_runs"] == 1).all()
    assert s.loc[(1, "fp32"), "steady_images_per_s"] == pytest.approx(64 / 0.2)
    assert s.loc[(1, "bf16+cl"), "steady_images_per_s"] == pytest.approx(64 / 0.05)

    ref = load_reference()
    t2 = throughput.throughput_table(df, ref, 2)  # experiment 1: each 1-GPU row is its own baseline
    t2 = t2[t2["scale"] == "gpu scale"].set_index("numerics")
    assert t2.loc["fp32", "ours_steady_speedup"] == 1.0 and t2.loc["bf16+cl", "ours_steady_speedup"] == 1.0
    t5 = throughput.throughput_table(df, ref, 5)
    ours = t5[t5["scale"] == "gpu scale"].set_index("numerics")
    assert ours.loc["bf16+cl", "ours_steady"] == pytest.approx(128 / 0.06)
    assert ours.loc["bf16+cl", "ours_steady_speedup"] == pytest.approx((128 / 0.06) / (64 / 0.05))  # over bf16's
    assert ours.loc["fp32", "ours_steady_speedup"] == pytest.approx((128 / 0.25) / (64 / 0.2))

    sc = tb.scaling_table(df, ref)
    sc = sc[(sc["source"] == "ours (steady state)") & (sc["gpus"] == 2)].set_index("numerics")
    assert sc.loc["bf16+cl", "speedup"] == pytest.approx(1.6667, abs=1e-4)
    assert sc.loc["fp32", "speedup"] == pytest.approx(1.6) and sc.loc["fp32", "efficiency"] == pytest.approx(0.8)


def test_an_experiments_speedups_divide_by_its_own_one_gpu_run(tmp_path):
    # experiments 1 and 3 both time one GPU at b64, at different rates: each divides by its own, never the other's
    _bench(tmp_path, "01_throughput_single_gpu", "gpu-b64-ddp", 1, 0.2)
    _bench(tmp_path, "03_throughput_distributed_data_parallel", "gpu-b64-w1", 1, 0.25)
    _bench(tmp_path, "03_throughput_distributed_data_parallel", "gpu-b64-w2", 2, 0.3)
    _bench(tmp_path, "02_throughput_local_data_parallel", "gpu-b64-w2", 2, 0.4)  # no 1-GPU run of its own
    df, ref = load_study(tmp_path), load_reference()
    t2 = throughput.throughput_table(df, ref, 2)
    assert t2.loc[t2["scale"] == "gpu scale", "ours_steady_speedup"].tolist() == [1.0]
    t8 = throughput.throughput_table(df, ref, 8)
    two = t8[(t8["scale"] == "gpu scale") & (t8["gpus"] == 2)].iloc[0]
    assert two["ours_steady_speedup"] == pytest.approx((128 / 0.3) / (64 / 0.25))
    t5 = throughput.throughput_table(df, ref, 5)  # experiment 2 timed no single GPU: experiment 1's is the baseline
    two = t5[(t5["scale"] == "gpu scale") & (t5["gpus"] == 2)].iloc[0]
    assert two["ours_steady_speedup"] == pytest.approx((128 / 0.4) / (64 / 0.2))


def test_thesis_rows_match_only_fp32_runs(tmp_path):
    for run, train, batch_s in (("thesis-b128-ddp", None, 0.6), ("thesis-b128-ddp-bf16-cl", BF16_CL, 0.2)):
        _bench(tmp_path, "01_throughput_single_gpu", run, 1, batch_s, train, scale="thesis", per_gpu_batch=128)
    t2 = throughput.throughput_table(load_study(tmp_path), load_reference(), 2)
    beside = t2[t2["thesis_images_per_s"] == 207.11].iloc[0]
    assert beside["numerics"] == "fp32" and beside["n_runs"] == 1
    assert beside["ours_steady"] == pytest.approx(128 / 0.6)
    own = t2[t2["numerics"] == "bf16+cl"].iloc[0]  # a row of its own, nothing of the thesis's beside it
    assert math.isnan(own["thesis_images_per_s"]) and own["ours_steady"] == pytest.approx(128 / 0.2)
    assert own["scale"] == "thesis" and len(t2) == 2


def test_a_quality_configuration_in_fp32_and_bf16_gives_two_rows(tmp_path):
    from tests import synth_records as synth

    synth.write_run(tmp_path, "05_linear_scaling", "w1-s0", final_acc=60.0)
    synth.write_run(tmp_path, "05_linear_scaling", "w1-bf16-cl-s0", final_acc=50.0, train_extra=BF16_CL)
    df = load_study(tmp_path)
    assert set(df.loc[df["kind"] == "run", "status"]) == {"completed"}
    best = df[df["kind"] == "run"].set_index("run")["best_val_top1"]
    q = tb.quality_summary(df).set_index("numerics")
    assert sorted(q.index) == ["bf16+cl", "fp32"] and (q["n"] == 1).all() and (q["status"] == "1 completed").all()
    assert q.loc["fp32", "top1_mean"] == best["w1-s0"] and q.loc["bf16+cl", "top1_mean"] == best["w1-bf16-cl-s0"]
    assert best["w1-s0"] - best["w1-bf16-cl-s0"] > 5  # two different numbers, not one mean of both
    t11 = tb.quality_table(df, load_reference(), 11)
    ours = t11[t11["scale"] == "local scale"].set_index("numerics")
    assert ours.loc["bf16+cl", "ours_top1"] == best["w1-bf16-cl-s0"]
    assert set(t11.loc[t11["scale"] == "thesis", "numerics"]) == {"fp32"}


def test_the_thesis_column_of_the_comparison_is_for_fp32_runs_only():
    from analysis.compare import thesis_value

    ref = load_reference()
    assert thesis_value(ref, "01_throughput_single_gpu", "pytorch", 1, 128, "throughput") == 207.11
    assert math.isnan(thesis_value(ref, "01_throughput_single_gpu", "pytorch", 1, 128, "throughput", "bf16+cl"))


# ---- W workers over P processes: the frame counts W (gpus) and records P (processes) ----------------------------
def test_a_run_of_8_workers_over_2_processes_reads_as_8_workers_and_records_its_2_processes(tmp_path):
    from tests import synth_records as synth

    for run, processes in (("node-w8-p2", 2), ("node-w8-p8", 8)):
        synth.write_run(tmp_path, "02_throughput_local_data_parallel", run, scale="node", gpus=8, processes=processes,
                        per_gpu_batch=64, bench_batches=220, warmup_batches=10, batch_s=0.2)
    df = load_study(tmp_path)
    rows = df[df["run"] == "node-w8-p2"]
    assert set(rows["kind"]) >= {"run", "bench"}
    assert (rows["gpus"] == 8).all() and (rows["processes"] == 2).all()  # every row, the throughput rows too
    s = tb.throughput_summary(df)
    assert sorted(s["processes"]) == [2, 8] and (s["gpus"] == 8).all()  # never averaged together
    t5 = throughput.throughput_table(df, load_reference(), 5)
    assert sorted(t5.loc[t5["scale"] == "node scale", "processes"]) == [2, 8]


def test_a_manifest_without_world_size_reads_as_processes_unknown(tmp_path):
    from tests import synth_records as synth

    old = synth.write_run(tmp_path, "01_throughput_single_gpu", "old", scale="gpu", per_gpu_batch=64,
                          bench_batches=220, warmup_batches=10, batch_s=0.2)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["world_size"]  # as a run from before the field, or a hand-made one
    (old / "manifest.json").write_text(json.dumps(manifest))
    bare = synth.write_run(tmp_path, "01_throughput_single_gpu", "bare", scale="gpu", per_gpu_batch=32,
                           bench_batches=220, warmup_batches=10, batch_s=0.2)
    (bare / "manifest.json").unlink()
    df = load_study(tmp_path)
    assert df["processes"].isna().all() and set(df["run"]) == {"old", "bare"}
    assert tb.throughput_summary(df)["processes"].isna().all()


def test_run_value_of_a_run_without_throughput_rows_is_nan_not_a_keyerror(tmp_path):
    from tests import synth_records as synth
    from analysis.compare import run_value

    quality = synth.write_run(tmp_path, "05_linear_scaling", "w2-s0", gpus=2, final_acc=60.0)
    assert math.isnan(run_value(quality, "throughput"))
    assert run_value(quality, "quality") == pytest.approx(_run(load_runs(tmp_path), "05_linear_scaling",
                                                              "w2-s0")["best_val_top1"])


# ---- issue 40, item 2: a run counts once, by its identity, not by its folder -----------------------------------------
def test_a_copied_run_folder_counts_once_with_one_problem_line(tmp_path):
    import shutil

    reference = Path(__file__).resolve().parents[1] / "results/reference/vm-2cpu-18ep/05_linear_scaling"
    for run in ("w1-s0", "w1-s1", "w1-s2"):
        shutil.copytree(reference / run, tmp_path / "05_linear_scaling" / run, ignore=shutil.ignore_patterns("*.pt"))
    before = tb.quality_summary(load_study(tmp_path))
    assert before["n"].tolist() == [3]
    shutil.copytree(tmp_path / "05_linear_scaling/w1-s0", tmp_path / "05_linear_scaling/w1-s0.bak")  # cp -a
    df = load_study(tmp_path)
    assert tb.quality_summary(df).equals(before)
    assert len(df[df["kind"] == "run"]) == 3 and not df["path"].str.endswith("w1-s0.bak").any()
    problems = [p for p in df.attrs["problems"] if "w1-s0.bak" in p]
    assert len(problems) == 1 and "counted once" in problems[0], df.attrs["problems"]
    assert problems[0].startswith(str(tmp_path / "05_linear_scaling/w1-s0.bak") + ": the same run as ")


def test_runs_under_different_links_are_neither_copies_nor_averaged(tmp_path):
    """The link sweep's runs: one config over two interconnects (manifest `link`) is two measurements."""
    import shutil

    reference = Path(__file__).resolve().parents[1] / "results/reference/vm-2cpu/03_throughput_distributed_data_parallel"
    for rate in ("100mbit", "none"):
        run_dir = tmp_path / rate / reference.name / "n2-ddp-t1-s0"
        shutil.copytree(reference / "n2-ddp-t1-s0", run_dir, ignore=shutil.ignore_patterns("*.pt"))
        if rate != "none":
            _manifest(run_dir, link=rate)
    df = load_study(tmp_path)
    assert len(df[df["kind"] == "run"]) == 2 and not any("counted once" in p for p in df.attrs["problems"])
    assert not any("not averaged" in p for p in df.attrs["problems"])  # another link: no mix, another measurement
    assert set(df.loc[df["kind"] == "run", "status"]) == {"completed"}
    # the limited run's images/s go to the link-rate table (analysis/link.py), never into its configuration's mean
    assert df.loc[df["kind"] == "link bench", "path"].tolist() == [str(tmp_path / "100mbit" / reference.name /
                                                                       "n2-ddp-t1-s0")]
    assert tb.throughput_summary(df).equals(tb.throughput_summary(load_study(tmp_path / "none")))
    assert tb.throughput_summary(df)["n_runs"].tolist() == [1]


def trained_as(run_dir: Path, edit) -> None:
    """A copied run made into a run of another config, as if trained so: config.json edited by edit(config) and the
    manifest's fingerprint of it (a config.json edited alone is a run changed after it ran, which the reader leaves
    out: issue 64)."""
    from contract.fingerprint import document_fingerprint

    config = json.loads((run_dir / "config.json").read_text())
    edit(config)
    (run_dir / "config.json").write_text(json.dumps(config))
    _manifest(run_dir, config_fingerprint=document_fingerprint(config))


# ---- issue 40, item 8: every malformed folder or field is a problem line, never silence or a crash -------------------
def _manifest(run_dir, **change):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest.update(change)
    (run_dir / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if v is not None}))


def _epochs(run_dir, change):
    """Rewrite metrics.jsonl's epoch records: change(record) -> the record to keep, or None to drop it. Written
    plain, in place of a committed run's compact form (metrics.jsonl.gz: two forms would be refused)."""
    lines = [json.loads(line) for line in read_run_file(run_dir / "metrics.jsonl").splitlines()]
    kept = [r if r["kind"] != "epoch" else change(r) for r in lines]
    (run_dir / "metrics.jsonl.gz").unlink(missing_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept if r is not None))


MALFORMED = {
    "an empty run folder": (lambda d: (d.parent / "w1-s9").mkdir(), "w1-s9",
                            "no config.json, manifest.json or metrics.jsonl"),
    "a status of 5": (lambda d: _manifest(d, status=5), "w1-s0", "manifest.json: status is 5, not"),
    "epochs_done of 'x'": (lambda d: _manifest(d, epochs_done="x"), "w1-s0", "manifest.json: epochs_done is 'x', not"),
    "no status": (lambda d: _manifest(d, status=None), "w1-s0", "manifest.json: no status"),
    "no epoch records": (lambda d: _epochs(d, lambda r: None), "w1-s0", "metrics.jsonl: no epoch record"),
    "a NaN val_top1": (lambda d: _epochs(d, lambda r: {**r, "val_top1": math.nan} if r["epoch"] == 3 else r),
                       "w1-s0", "metrics.jsonl: val_top1 is nan at epoch 3"),
}


def _three_runs(root):
    import shutil

    reference = Path(__file__).resolve().parents[1] / "results/reference/vm-2cpu-18ep/05_linear_scaling"
    for run in ("w1-s0", "w1-s1", "w1-s2"):
        shutil.copytree(reference / run, root / "05_linear_scaling" / run, ignore=shutil.ignore_patterns("*.pt"))
    return root / "05_linear_scaling"


@pytest.mark.parametrize("malformed", MALFORMED)
def test_a_malformed_run_folder_or_field_is_one_problem_line_naming_the_folder(tmp_path, malformed):
    spoil, folder, words = MALFORMED[malformed]
    experiment = _three_runs(tmp_path)
    spoil(experiment / "w1-s0")
    problems = load_study(tmp_path).attrs["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"{experiment / folder}: {words}"), problems


def test_the_report_lists_every_malformed_folder_and_still_writes(tmp_path, capsys):
    runs = tmp_path / "runs"
    experiment = _three_runs(runs)
    for i, (spoil, _, _) in enumerate(MALFORMED.values()):
        import shutil

        shutil.copytree(experiment / "w1-s1", experiment / f"w1-s{i + 3}")
        config = json.loads((experiment / f"w1-s{i + 3}" / "config.json").read_text())
        config["run"] = f"w1-s{i + 3}"  # a run of its own, not a copy of w1-s1
        (experiment / f"w1-s{i + 3}" / "config.json").write_text(json.dumps(config))
        spoil(experiment / f"w1-s{i + 3}")
    assert main(["report", "--runs", str(runs), "--out", str(tmp_path / "report"), "--no-notebooks"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  problem: ")]
    for _, _, words in MALFORMED.values():
        assert sum(words in line for line in lines) == 1, (words, lines)


def test_a_run_its_study_planned_but_nothing_started_reads_as_planned(tmp_path):
    from contract.config import load_config
    from contract.runfolder import write_planned_config

    cfg = load_config(REPO / "experiments" / "05_linear_scaling", "local")
    write_planned_config(cfg, tmp_path / "05_linear_scaling" / "w1-s0", "single")  # e.g. a Slurm job still queued
    row = load_study(tmp_path).query("kind == 'run'").iloc[0]
    assert (row["run"], row["status"], row["epochs_done"]) == ("w1-s0", "planned", 0)
