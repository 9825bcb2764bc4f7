"""Studies: the nine experiments expand into the thesis's runs, at every scale, without running anything."""
import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import REPO
from contract.config import ConfigError, load_config
from contract.plan import expand, study_plan
from studies.launch import default_jobs, planned_runs, threads_per_process
from studies.run import run_study
from contract.manifest import VERSION

EXPERIMENTS = sorted((REPO / "experiments").glob("[0-9][0-9]_*"))


def test_the_nine_experiments_and_the_studies_beyond_each_have_config_sbatch_and_readme():
    assert [p.name[:2] for p in EXPERIMENTS] == [f"{n:02d}" for n in range(1, 16)]
    for folder in EXPERIMENTS:
        assert {"config.toml", "slurm.sbatch", "README.md"} <= {p.name for p in folder.iterdir()}, folder


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
@pytest.mark.parametrize("scale", ["local", "gpu", "thesis"])
def test_every_experiment_plans_at_every_scale(folder, scale, monkeypatch):
    monkeypatch.setenv("IMAGENET_DIR", "/data/ilsvrc2012")
    study = study_plan(folder, scale, quick=False, seeds=None, overrides=[])
    assert study.runs and study.question
    assert len({r.name for r in study.runs}) == len(study.runs)


def thesis_plan(name, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("IMAGENET_DIR", "/data/ilsvrc2012")
    monkeypatch.setenv("IMAGENET_TAR", "/project/ilsvrc2012.tar")
    assert run_study(REPO / "experiments" / name, scale="thesis", launcher="slurm", cluster="taito", dry_run=True,
                     out=tmp_path) == 0
    assert not list(tmp_path.iterdir())  # a dry run creates nothing
    return capsys.readouterr().out


def test_experiment_6_thesis_dry_run_prints_the_thesis_nodes_batches_and_rates(capsys, monkeypatch, tmp_path):
    out = thesis_plan("06_linear_scaling_stepping_warmup", capsys, monkeypatch, tmp_path)
    for nodes, workers, lr in [(2, 8, "0.4"), (4, 16, "0.8"), (6, 24, "1.2"), (8, 32, "1.6")]:
        assert f"{nodes} node(s) x 4 process(es), {workers} worker(s), per-GPU batch 128" in out
        assert re.search(rf"thesis-w{workers}-s0: horovod\+pytorch .* lr {lr}, warm-up stepping 5 epochs, 90 epochs", out)
        assert f"sbatch -N {nodes} --ntasks-per-node 4 -p gpu --cpus-per-task 7 --gres=gpu:p100:4" in out
    assert "thesis-w32-ddp-s0: pytorch (ddp)" in out  # the PyTorch row at 32 GPUs


def test_experiment_7_and_9_thesis_rates(capsys, monkeypatch, tmp_path):
    out = thesis_plan("07_stepping_warmup_small_batch", capsys, monkeypatch, tmp_path)
    assert "per-GPU batch 32, global batch 1024, lr 0.4, warm-up stepping 5 epochs" in out
    out = thesis_plan("09_gradual_warmup_10", capsys, monkeypatch, tmp_path)
    assert "global batch 3072, lr 1.2, warm-up gradual 10 epochs" in out


def test_experiment_4_is_naive_and_experiment_5_linear(capsys, monkeypatch, tmp_path):
    out = thesis_plan("04_naive_scaling", capsys, monkeypatch, tmp_path)
    for workers in (1, 2, 16, 24, 32):
        assert re.search(rf"thesis-w{workers}-s0: pytorch \(ddp\).* lr 0\.1, warm-up none, 90 epochs", out)
    out = thesis_plan("05_linear_scaling", capsys, monkeypatch, tmp_path)
    assert "thesis-w1-ddp-s0: pytorch (ddp), 1 node(s) x 1 process(es), 1 worker(s), per-GPU batch 128, global batch 128, lr 0.05" in out
    assert "thesis-w32-horovod-s0: horovod+pytorch (horovod), 8 node(s) x 4 process(es)" in out and "lr 1.6" in out


def test_local_quality_studies_run_three_seeds_as_emulated_workers():
    study = study_plan(REPO / "experiments/08_gradual_warmup_5", "local", quick=False, seeds=None, overrides=[])
    assert [r.name for r in study.runs] == [f"w{w}-s{s}" for w in (16, 24, 32) for s in range(3)]
    plans = planned_runs(study, "local", Path("/nonexistent"))
    assert {p.backend for p in plans} == {"emulated"} and {p.status for p in plans} == {"missing"}


def test_only_keeps_the_runs_named_and_refuses_a_pattern_that_names_none():
    study = study_plan(REPO / "experiments/05_linear_scaling", "local", quick=False, seeds=4, overrides=[],
                       only=["w32-*", "w1-s3"])
    assert [r.name for r in study.runs] == ["w1-s3", "w32-s0", "w32-s1", "w32-s2", "w32-s3"]
    with pytest.raises(ConfigError, match="matches none of 05_linear_scaling's runs"):
        study_plan(REPO / "experiments/05_linear_scaling", "local", quick=False, seeds=None, overrides=[],
                   only=["w7-*"])
    with pytest.raises(ConfigError, match="and [0-9]+ more: DRY_RUN=1 lists them all") as refused:
        study_plan(REPO / "experiments/13_steps_to_target", "local", quick=False, seeds=None, overrides=[],
                   only=["nomatch*"])
    assert len(str(refused.value)) < 400  # a study of a hundred runs still refuses in one readable line


def test_quick_shrinks_a_quality_study_without_turning_it_into_a_benchmark():
    study = study_plan(REPO / "experiments/04_naive_scaling", "local", quick=True, seeds=None, overrides=[])
    cfg = planned_runs(study, "local", Path("/nonexistent"))[0].cfg
    assert cfg.train.epochs == 2 and cfg.bench.batches == 0 and len(study.runs) == 5


def test_quick_leaves_out_a_run_whose_batch_its_small_set_cannot_hold_and_says_so(capsys):
    quick = study_plan(REPO / "experiments/12_large_batch", "local", quick=True, seeds=None, overrides=[])
    assert quick.left_out == ["sgd-w256-s0", "lars-w256-s0", "lamb-w256-s0", "radam-w256-s0"]  # 1,024 > 800 images
    assert not {r.name for r in quick.runs} & set(quick.left_out) and len(quick.runs) > 0
    full = study_plan(REPO / "experiments/12_large_batch", "local", quick=False, seeds=None, overrides=[])
    assert full.left_out == [] and {"sgd-w256-s0", "lamb-w256-s2"} <= {r.name for r in full.runs}
    with pytest.raises(ConfigError, match="no run of this study fits QUICK's training set"):
        run_study(REPO / "experiments/12_large_batch", quick=True, dry_run=True, only=["sgd-w256-*"])
    assert "QUICK: 1 run(s) left out" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="larger than the 800 training images"):  # a full study still refuses one
        study_plan(REPO / "experiments/12_large_batch", "local", quick=False, seeds=None,
                   overrides=["data.per_class=16"], only=["sgd-w256-s0"])


def test_experiment_3_local_uses_several_torchrun_nodes():
    runs = expand(REPO / "experiments/03_throughput_distributed_data_parallel/config.toml", "local")
    by_name = {r.name: r for r in runs}
    assert by_name["n2-ddp-t2-s0"].nodes == 2 and by_name["n2-ddp-t2-s0"].workers == 4
    assert by_name["n1-t1-ddp-s0"].workers == 1


def test_local_runs_share_the_cores_evenly_between_jobs_and_ranks():
    study = study_plan(REPO / "experiments/03_throughput_distributed_data_parallel", "local", quick=True, seeds=None,
                       overrides=[])
    plans = {p.run.name: p for p in planned_runs(study, "local", Path("/nonexistent"))}
    assert threads_per_process(plans["n1-t1-ddp-s0"], jobs=1, cores=16) == 16
    assert threads_per_process(plans["n2-ddp-t2-s0"], jobs=1, cores=16) == 4   # 2 torchrun nodes x 2 ranks
    assert threads_per_process(plans["n2-horovod-t2-s0"], jobs=1, cores=16) == 4
    assert threads_per_process(plans["n2-horovod-t2-s0"], jobs=1, cores=2) == 1  # never below one
    quality = study_plan(REPO / "experiments/05_linear_scaling", "local", quick=True, seeds=None, overrides=[])
    emulated = planned_runs(quality, "local", Path("/nonexistent"))[-1]
    assert emulated.run.workers == 32 and threads_per_process(emulated, jobs=2, cores=16) == 8  # one process


def test_by_default_cpu_quality_runs_go_side_by_side_and_throughput_runs_alone():
    def plans(experiment, scale="local", seeds=None):
        study = study_plan(REPO / "experiments" / experiment, scale, quick=False, seeds=seeds, overrides=[])
        return study, planned_runs(study, scale, Path("/nonexistent"))

    quality, runs = plans("05_linear_scaling")  # 2 worker counts x 3 seeds, emulated on the CPU
    assert default_jobs(quality, runs, cores=2) == 2      # one thread each: how the local results were measured
    assert default_jobs(quality, runs, cores=64) == 6     # never more than the runs
    assert default_jobs(*plans("05_linear_scaling", seeds=1), cores=1) == 1
    assert default_jobs(*plans("03_throughput_distributed_data_parallel"), cores=16) == 1  # timed alone
    assert default_jobs(*plans("05_linear_scaling", "gpu"), cores=16) == 1  # one GPU: one run at a time


# ---- committed results are a reference; smoke runs live apart; a folder counts only for its own config ------------
def fake_run(run_dir: Path, cfg, status="completed"):
    """A run folder as the trainer leaves it, without training: config.json (resolved), manifest.json and the last
    record of metrics.jsonl (a finished run without its records counts as none: issue 64)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"experiment": cfg.experiment, "run": run_dir.name,
                                                     "scale": cfg.scale, **cfg.to_dict(), "resolved": cfg.resolved()}))
    (run_dir / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": status}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"kind": "status", "time": 0.0, "status": status,
                                                       "epoch": cfg.train.epochs, "message": ""}) + "\n")


def test_committed_reference_runs_are_never_this_machines_results(tmp_path):
    from contract.reader import folder_fingerprint
    from studies.launch import FULL_OUT

    study = study_plan(REPO / "experiments/03_throughput_distributed_data_parallel", "local", quick=False, seeds=None,
                       overrides=[])
    reference = REPO / "results/reference/vm-2cpu/03_throughput_distributed_data_parallel"
    # the committed runs are these plans (same config fingerprints), but for the 1-process Horovod run, added to the
    # study after the reference machine was measured (machine.toml says so; no other machine's run stands in) ...
    # (and the TensorFlow rows, issue 37)
    plans = planned_runs(study, "local", reference.parent)
    added = {"n1-t1-horovod-s0"} | {p.run.name for p in plans if p.cfg.train.framework == "tensorflow"}
    assert len(added) == 7
    assert sorted(folder_fingerprint(p) for p in reference.iterdir()) == \
        sorted(p.fingerprint for p in plans if p.run.name not in added)
    assert {p.run.name: p.status for p in plans if p.status != "completed"} == dict.fromkeys(added, "missing")
    # ... but a clone's study writes to results/runs, which the reference is not, so all its runs run
    assert FULL_OUT == Path("results/runs") and "results/runs/" in (REPO / ".gitignore").read_text().splitlines()
    assert {p.status for p in planned_runs(study, "local", tmp_path)} == {"missing"}


def test_a_smoke_run_never_counts_for_the_full_study(tmp_path):
    from studies.launch import FULL_OUT, OTHER_CONFIG, QUICK_OUT
    from studies.run import run_local

    assert QUICK_OUT != FULL_OUT  # by default smoke runs have their own runs root
    folder = REPO / "experiments/05_linear_scaling"
    quick = study_plan(folder, "local", quick=True, seeds=3, overrides=[])
    for plan in planned_runs(quick, "local", tmp_path):  # a completed smoke study under the same names
        fake_run(plan.run_dir, plan.cfg)
    full = study_plan(folder, "local", quick=False, seeds=None, overrides=[])
    plans = planned_runs(full, "local", tmp_path)
    assert {p.status for p in plans} == {OTHER_CONFIG}  # neither skipped as completed nor resumed
    with pytest.raises(ConfigError, match="holds a run of another config"):
        run_local(full, "local", tmp_path, dry_run=False)
    # the same full run completed counts as completed; a print-frequency change is no other config
    done = plans[0]
    import shutil
    shutil.rmtree(done.run_dir)
    fake_run(done.run_dir, load_config(folder / "config.toml", "local",
                                       [f"{k}={json.dumps(v)}" for k, v in done.run.settings.items()]
                                       + ["train.print_freq=7"]))
    assert planned_runs(full, "local", tmp_path)[0].status == "completed"


def test_a_benchmarks_fingerprint_ignores_epochs_and_the_learning_rate_schedule_a_trainings_does_not():
    from contract.fingerprint import config_fingerprint

    bench = REPO / "experiments/03_throughput_distributed_data_parallel"
    quality = REPO / "experiments/05_linear_scaling"
    for folder, same in ((bench, True), (quality, False)):
        base = load_config(folder, "local")
        other = load_config(folder, "local", ["lr.warmup_epochs=2", "lr.milestones=[3]", "train.epochs=5"])
        assert (config_fingerprint(base) == config_fingerprint(other)) is same
    assert config_fingerprint(load_config(bench, "local")) != config_fingerprint(
        load_config(bench, "local", ["bench.batches=13"]))  # what it times still counts


def test_named_extra_runs_and_the_studies_beyond_the_thesis_match_their_committed_runs():
    from contract.reader import folder_fingerprint

    # experiment 11's committed sweep has a second seed at base 0.1 (`make exp11 SEEDS=2 ONLY=base0.1-s1`)
    for experiment, seeds in (("10_more_steps_pilot", None), ("11_base_rate_sweep", 2)):
        study = study_plan(REPO / "experiments" / experiment, "local", quick=False, seeds=seeds, overrides=[])
        plans: dict[str, set] = {}  # fingerprint -> run names (the seeds of a configuration share one)
        for p in planned_runs(study, "local", Path("/nonexistent")):
            plans.setdefault(p.fingerprint, set()).add(p.run.name)
        reference = REPO / "results/reference/vm-2cpu" / experiment
        assert any(reference.iterdir())
        for run_dir in reference.iterdir():
            assert run_dir.name in plans[folder_fingerprint(run_dir)]


def test_an_extra_run_may_carry_its_own_seeds_and_the_command_line_overrides_every_count(tmp_path):
    from contract.plan import expand

    folder = tiny_experiment(tmp_path, 'seeds = 2\nextra = [{ run = "sweep", "train.workers" = 2, seeds = 1 }, '
                                       '{ "train.workers" = 4, seeds = 3 }, { "train.workers" = 1 }]')
    seed = load_config(folder / "config.toml", "local").train.seed  # the tiny config's own first seed
    names = [r.name.replace(f"-s{seed}", "-s0").replace(f"-s{seed + 1}", "-s1").replace(f"-s{seed + 2}", "-s2")
             for r in expand(folder / "config.toml", "local")]
    assert names == ["sweep-s0", "w4-s0", "w4-s1", "w4-s2", "w1-s0", "w1-s1"]
    assert all("seeds" not in r.settings for r in expand(folder / "config.toml", "local"))
    assert len(expand(folder / "config.toml", "local", seeds=1)) == 3  # one each


def test_an_extra_run_chosen_at_one_scale_is_planned_at_that_scale_alone(tmp_path):
    """A row a scale's own step 1 chose (experiment 13's rates) must never run at another scale's batches."""
    from contract.plan import expand

    folder = tiny_experiment(tmp_path, 'extra = [{ run = "grid", "train.workers" = 2 }, '
                                       '{ run = "chosen", scale = "local", "train.workers" = 4, seeds = 2 }]')
    local = expand(folder / "config.toml", "local", need_data=False)
    assert [r.name.rsplit("-s", 1)[0] for r in local] == ["grid", "chosen", "chosen"]
    assert all("scale" not in r.settings for r in local)  # a launch key, never a trainer setting
    assert [r.name.rsplit("-s", 1)[0] for r in expand(folder / "config.toml", "gpu", need_data=False)] == ["gpu-grid"]


def test_the_default_references_quality_runs_are_the_local_scales_own_plans():
    """The findings' evidence is made by today's default config: every committed run of experiments 4-9 in the
    default reference is, by config fingerprint, a run its study plans at the local scale (seeds as committed)."""
    from contract.reader import folder_fingerprint

    reference = REPO / "results/reference/vm-2cpu"
    checked = 0
    for folder in sorted(reference.glob("0[4-9]_*")):
        runs = list(folder.iterdir())
        seeds = 1 + max(int(r.name.rsplit("-s", 1)[1]) for r in runs)
        study = study_plan(REPO / "experiments" / folder.name, "local", quick=False, seeds=seeds, overrides=[])
        plans = {p.run.name: p.fingerprint for p in planned_runs(study, "local", Path("/nonexistent"))}
        for run_dir in runs:
            assert plans.get(run_dir.name) == folder_fingerprint(run_dir), run_dir
            checked += 1
    assert checked >= 10


@pytest.mark.slow
def test_a_fresh_clones_throughput_study_runs_every_run_and_prints_images_per_s(tmp_path):
    # the committed reference holds experiment 1's runs; a clone's study must still run (none skipped as done)
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "suite", "study", "experiments/01_throughput_single_gpu", "--quick",
                          "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=1200).stdout
    assert "already" not in out
    ran = [line for line in out.splitlines() if re.match(r"\[\d+/12\] .*: completed: [\d.]+ images/s", line)]
    # 6 PyTorch rows and 6 TensorFlow rows (issue 37), each run or skipped with its line where its framework is missing
    skipped = sum(out.count(why) for why in ("Horovod is not built here", "TensorFlow is not installed here",
                                             "Horovod is not built with TensorFlow here"))
    assert len(ran) + skipped == 12, out
    # beside the one reference machine the committed report draws experiment 1 from (issue 67), in 120 columns
    assert "this machine" in out and "reference: vm-epyc-avx512" in out and "thesis" in out
    # the last line says where the runs went and what to run next (not the reference's description)
    assert "run folders in" in out.splitlines()[-1] and "make report" in out.splitlines()[-1]


def test_the_closing_hint_names_the_runs_folder_the_report_must_read():
    from studies.launch import FULL_OUT, QUICK_OUT
    from studies.progress import report_hint

    assert report_hint(FULL_OUT) == "`make report` turns them into tables and figures"
    assert "`make report OUT=results/quick`" in report_hint(QUICK_OUT)
    assert "`make report OUT=/tmp/x`" in report_hint(Path("/tmp/x"))



def test_a_study_that_declares_its_next_step_names_it_with_its_folder_and_scale(tmp_path, capsys):
    """Experiment 13 runs in steps: a `make exp13` that finished step 1 must say what writes step 2, not just stop."""
    from studies.progress import next_hint

    study = study_plan(REPO / "experiments" / "13_steps_to_target", "gpu", False, None, [], ["gpu-e2-tune-sgd-w1-*"])
    hint = next_hint(study.next_step, Path("/data/runs"), "gpu")
    assert "`make exp13-next SCALE=gpu OUT=/data/runs WRITE=1`" in hint
    assert next_hint("", Path("/x"), "local") == ""
    quick = study_plan(REPO / "experiments" / "13_steps_to_target", "local", True, None, [], ["e2-tune-sgd-w1-*"])
    assert quick.next_step == ""  # QUICK's smoke runs choose nothing: no next step is named
    err = refuse_study(capsys, tiny_experiment(tmp_path, 'next = "make it {outt}"'))
    assert "study.next names {outt}" in err and "{out} and {scale}" in err


# ---- time on every progress line ------------------------------------------------------------------------------
def test_a_runs_time_left_comes_from_its_epochs_then_this_studys_runs_then_the_reference():
    from studies.clock import Clock, duration

    clock = Clock(jobs=2, reference={"fp": [600.0, 800.0]}, now=0.0)
    assert clock.expected("fp") == (700.0, "the reference's time") and clock.expected("other") == (None, "")
    # no epoch yet: the reference's whole run, less what has passed
    assert clock.run_left("fp", epochs=72, done=0, done_at_start=0, elapsed=100.0) == (600.0, "the reference's time")
    # 6 epochs in 60 s: 10 s an epoch for the 66 left; a resumed run counts only the epochs of this session
    assert clock.run_left("fp", 72, 6, 0, 60.0) == (660.0, "from its 6 epoch(s)")
    assert clock.run_left("fp", 72, 40, 36, 60.0) == (32 * 15.0, "from its 4 epoch(s)")
    assert clock.run_left("new", 72, 0, 0, 5.0) == (None, "")
    # the study: active runs hold the two slots, waiting runs go to the slot that frees first
    assert clock.study_left([100.0, 300.0], ["fp", "fp"]) == f"~{duration(1000.0)} left"
    assert clock.study_left([100.0], ["new"]) == f"~{duration(100.0)} left + 1 run(s) not yet timed"
    assert clock.study_left([None], []) == "time left: no estimate yet"
    assert [duration(s) for s in (45, 720, 3900)] == ["45 s", "12 min", "1 h 05 min"]


def test_once_a_run_the_reference_also_ran_finishes_here_the_reference_s_times_are_scaled_by_this_machine_s_pace(
        tmp_path):
    import json

    from contract.manifest import VERSION
    from studies.clock import Clock, duration

    clock = Clock(jobs=1, reference={"a": [100.0], "b": [300.0]}, now=0.0)
    done = tmp_path / "a-s0"  # the fields run_seconds reads of a manifest the trainer ended: 200 s, twice 100 s
    done.mkdir()
    (done / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": "completed",
                                                    "start": "2026-12-01T00:00:00+00:00",
                                                    "end": "2026-12-01T00:03:20+00:00"}))
    clock.finished("a", done)
    assert clock.pace() == 2.0
    assert clock.expected("b") == (600.0, "the reference's time x 2.00, this machine's pace")
    assert clock.expected("a") == (200.0, "1 such run(s) here")
    # a reference run shorter than a second recorded 0 s (experiment 3's committed runs): it sets no pace, and a
    # run of its fingerprint finished here never divides by it (a ZeroDivisionError took make exp3 down)
    instant = Clock(jobs=1, reference={"a": [0.0, 0.0], "b": [50.0]}, now=0.0)
    instant.finished("a", done)
    assert instant.pace() is None and instant.study_left([], ["b"]) == f"~{duration(50.0)} left"


def test_the_committed_references_times_are_found_by_fingerprint():
    from studies.clock import reference_seconds

    study = study_plan(REPO / "experiments/05_linear_scaling", "local", quick=False, seeds=None, overrides=[])
    times = reference_seconds(study.experiment.name)
    plans = planned_runs(study, "local", Path("/nonexistent"))
    assert all(times.get(p.fingerprint) for p in plans)  # every plan of the study has a reference time
    assert all(60 < t < 4 * 3600 for ts in times.values() for t in ts)


def test_every_progress_line_of_a_study_carries_elapsed_time_and_time_left(tmp_path, monkeypatch, capsys):
    """drive() with runs that pretend to train (an epoch record, then exit 0): each line says how long it has
    taken and what is left, of the run and of the whole study."""
    from studies import supervise
    from studies.clock import Clock
    from studies.launch import Active
    from studies.progress import Progress

    plans = planned_runs(study_plan(REPO / "experiments/05_linear_scaling", "local", quick=True, seeds=1,
                                    overrides=[]), "local", tmp_path)

    class FakeProcess:
        def __init__(self, run_dir):
            self.run_dir, self.polls, self.returncode = run_dir, 0, 0

        def poll(self):
            self.polls += 1
            if self.polls == 2:  # the run has logged its first epoch
                (self.run_dir / "metrics.jsonl").write_text(json.dumps(
                    {"kind": "epoch", "epoch": 0, "val_top1": 12.5, "time": 0.0}) + "\n")
            return None if self.polls < 4 else 0

    def fake_start(plan, index, jobs):
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        return Active(plan, index, [FakeProcess(plan.run_dir)], open(os.devnull, "w"), supervise.time.time())

    monkeypatch.setattr(supervise, "start_local", fake_start)
    monkeypatch.setattr(supervise.time, "sleep", lambda s: None)
    progress = Progress(len(plans))
    progress.tty = False
    clock = Clock(1, {plans[1].fingerprint: [300.0]}, supervise.time.time())
    assert supervise.drive(list(enumerate(plans, start=1)), [], 1, progress, True, clock) == 0
    lines = capsys.readouterr().out.splitlines()
    epochs = [line for line in lines if ": epoch 1/" in line]
    assert len(epochs) == len(plans), lines
    for line in epochs:
        assert re.search(r"; \d+ s in, ~\d+ s left \(from its 1 epoch\(s\)\); study \d+ s in, ~\d+ (s|min) left", line), line
    assert re.search(r"\[2/2\] .*~5 min \(the reference's time\)", "\n".join(lines))  # before its first epoch
    assert all("study" in line for line in lines)


# ---- issue 26, item 7: a study's options and config file are validated like the trainer's ---------------------------
def tiny_experiment(tmp_path, study: str, text: bytes | None = None, overrides: dict | None = None) -> Path:
    """experiments/99_tiny/config.toml: the tests' tiny config with a [study] table."""
    from tests.helpers import write_config

    folder = tmp_path / "99_tiny"
    folder.mkdir()
    config = write_config(folder / "config.toml", overrides)
    config.write_bytes(text if text is not None else config.read_bytes() + f"[study]\n{study}\n".encode())
    return folder


def refuse_study(capsys, folder, *extra) -> str:
    from suite.__main__ import main

    assert main(["study", str(folder), "--dry-run", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("study, extra, message", [
    ('vary = { "train.workers" = [1, 2] }', ["--jobs", "-1"], "--jobs = -1 must be a whole number >= 1"),
    ('vary = { "train.workers" = [1, 2] }', ["--jobs", "0"], "--jobs = 0 must be a whole number >= 1"),
    ('vary = { "train.workers" = [1, 2] }', ["--seeds", "-1"], "--seeds = -1 must be a whole number >= 1"),
    ('seeds = 0', [], "study.seeds = 0 must be a whole number >= 1"),
    ('kind = "bogus"', [], "study.kind = 'bogus' in "),
    ('nodes = 0', [], "study.nodes = 0 must be a whole number >= 1"),
    ('vary = { "train.workers" = [] }', [], "study.vary's train.workers in "),
    ('vary = { "train.workers" = [1] }', ["--out", ""], "--out is empty"),
    ('extra = [{ run = "' + "x" * 300 + '" }]', [], "is 303 bytes long; use at most 200"),
    ('extra = [{ run = "a", "train.workers" = 1 }, { run = "a", "train.workers" = 2 }]', [],
     "two runs of "),
    ('sede = 3', [], "unknown key sede in [study]"),
    ('extra = [{ run = "a", seeds = 0 }]', [], "study seeds = 0 must be a whole number >= 1"),
    ('extra = [{ run = "a", scale = "laptop" }]', [], "study scale = 'laptop' is not a scale: local, gpu, node, "),
])
def test_study_mistakes_are_one_line_and_exit_2(tmp_path, capsys, study, extra, message):
    err = refuse_study(capsys, tiny_experiment(tmp_path, study), *extra)
    assert message in err, err


def test_a_config_that_is_not_utf8_is_one_line(tmp_path, capsys):
    from suite.__main__ import main

    folder = tiny_experiment(tmp_path, "", text=b"[train]\nepochs = 2 # \xff\n")
    err = refuse_study(capsys, folder)
    assert "is not UTF-8 text (byte 0xff at offset 21)" in err
    assert main(["train", str(folder), "--out", str(tmp_path / "runs")]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_train_refuses_an_empty_out_and_an_overlong_run_name(tmp_path, capsys):
    from tests.helpers import write_config
    from suite.__main__ import main

    config = write_config(tmp_path / "c.toml")
    assert main(["train", str(config), "--out", ""]) == 2
    assert capsys.readouterr().err == "error: --out is empty; give the runs' folder (default results/runs)\n"
    assert main(["train", str(config), "--out", str(tmp_path), "--run", "r" * 300]) == 2
    assert "is 300 bytes long" in capsys.readouterr().err and not (tmp_path / "c").exists()


# ---- issue 26, items 5 and 6: a run another process holds is `skipped: in use by pid N` on the study's console -----
def test_a_study_skips_a_run_another_process_holds_and_names_its_pid(tmp_path, capsys):
    from contract.locks import RankLock
    from studies.run import run_local

    study = study_plan(tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }'), "local", quick=False,
                       seeds=None, overrides=[])
    lock = RankLock(tmp_path / "runs" / "99_tiny" / "w1-s3", 0)  # another study's trainer
    try:  # nothing failed: the run is the other process's to finish
        assert run_local(study, "local", tmp_path / "runs", dry_run=False, jobs=1) == 0
    finally:
        lock.release()
    out = capsys.readouterr().out
    assert f"[1/1] 99_tiny/w1-s3: skipped: in use by pid {os.getpid()} (left to it)" in out
    assert "1 runs, 0 skipped (finished before), 0 failed, 1 left to the process training them" in out


def test_two_studies_never_both_start_a_run_and_the_second_reports_only_its_own(tmp_path, capsys):
    """The study that claims a run first starts it; the other leaves it, starting no trainer (whose refusal would
    land in the first study's console.log), and neither counts it as failed (issue 40, item 5)."""
    from contract.locks import StudyClaim
    from contract.runfolder import CONSOLE
    from studies.run import run_local

    study = study_plan(tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }'), "local", quick=False,
                       seeds=None, overrides=[])
    run_dir = tmp_path / "runs" / "99_tiny" / "w1-s3"
    first = StudyClaim.take(run_dir)  # the first study, between its claim and its trainer's lock
    try:
        assert run_local(study, "local", tmp_path / "runs", dry_run=False, jobs=1) == 0
    finally:
        first.release()
    out = capsys.readouterr().out
    assert f"[1/1] 99_tiny/w1-s3: skipped: in use by another study, pid {os.getpid()} (left to it)" in out
    assert not (run_dir / CONSOLE).exists() and "0 failed, 1 left to the process training them" in out
    assert StudyClaim.take(run_dir) is not None  # released with the first study: the next one may start it


@pytest.mark.slow
def test_a_study_that_loses_the_race_for_a_run_says_so_on_its_own_console(tmp_path, capsys, monkeypatch):
    """Two studies started together both find the run free; the second's trainer is refused (exit 2), and the
    study prints why rather than the first study's manifest."""
    from contract import locks
    from contract.locks import RankLock
    from studies.run import run_local

    study = study_plan(tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }'), "local", quick=False,
                       seeds=None, overrides=[])
    run_dir = tmp_path / "runs" / "99_tiny" / "w1-s3"
    lock = RankLock(run_dir, 0)  # the first study's trainer, taken after this study looked
    monkeypatch.setattr(locks, "is_locked", lambda *a: False)
    try:
        assert run_local(study, "local", tmp_path / "runs", dry_run=False, jobs=1) == 0
    finally:
        lock.release()
    out = capsys.readouterr().out
    assert f"[1/1] 99_tiny/w1-s3: skipped: in use by pid {os.getpid()} (left to it)" in out and "exit 2" not in out


# ---- issue 26, item 9: a study killed outright takes its trainers with it; the interrupted line counts checkpoints --
def test_the_interrupted_line_counts_only_runs_with_a_checkpoint(tmp_path):
    from studies.progress import interrupted_line

    started, saved = tmp_path / "w1-s0", tmp_path / "w2-s0"
    started.mkdir()
    saved.mkdir()
    (saved / "checkpoint.pt").write_bytes(b"")
    assert interrupted_line("99_tiny", [started, started]) == ("99_tiny: interrupted; 0 run(s) checkpointed, 2 stopped "
                                                              "before their first checkpoint (they start afresh). "
                                                              "The same command resumes them.")
    assert interrupted_line("99_tiny", [saved]).startswith("99_tiny: interrupted; 1 run(s) checkpointed. ")


@pytest.mark.slow
def test_sigkill_of_a_study_takes_its_trainer_with_it(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import trainer_env
    from contract.locks import is_locked, lock_holder
    from contract.reader import read_metrics

    folder = tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }',
                             overrides={"data": {"synthetic_images": 4000}, "train": {"epochs": 50}})  # never ends first
    study = subprocess.Popen([sys.executable, "-m", "suite", "study", str(folder), "--out", str(tmp_path / "runs")],
                             cwd=REPO, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "runs" / "99_tiny" / "w1-s3"
    deadline = time.time() + 180
    while not read_metrics(run_dir).of("iter"):  # the trainer is training
        assert time.time() < deadline and study.poll() is None, "the study's run never started training"
        time.sleep(0.05)
    trainer = int(lock_holder(run_dir))
    study.send_signal(signal.SIGKILL)
    study.wait(timeout=60)
    while is_locked(run_dir):  # the trainer got SIGTERM from the kernel: it checkpoints and exits
        assert time.time() < deadline, f"trainer {trainer} went on after its study was killed"
        time.sleep(0.05)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "preempted"


@pytest.mark.slow
def test_a_study_that_make_started_stops_when_make_is_killed(tmp_path):
    """`make expN` killed with SIGKILL: its study gets SIGTERM from the kernel (make sets MAKELEVEL) and stops as on
    Ctrl-C, its run checkpointed (preempted), instead of training on with nobody to read its output."""
    import signal
    import subprocess
    import sys
    import time

    from contract.locks import is_locked
    from contract.reader import read_metrics
    from tests.helpers import trainer_env

    folder = tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }',
                             overrides={"data": {"synthetic_images": 4000}, "train": {"epochs": 50}})  # never ends first
    study = [sys.executable, "-m", "suite", "study", str(folder), "--out", str(tmp_path / "runs")]
    make = subprocess.Popen(["bash", "-c", f"{' '.join(study)} & wait"], cwd=REPO,  # make's place: the parent
                            env=trainer_env(MAKELEVEL="1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "runs" / "99_tiny" / "w1-s3"
    deadline = time.time() + 180
    while not read_metrics(run_dir).of("iter"):
        assert time.time() < deadline and make.poll() is None, "the study's run never started training"
        time.sleep(0.05)
    make.send_signal(signal.SIGKILL)
    make.wait(timeout=60)
    while is_locked(run_dir) or json.loads((run_dir / "manifest.json").read_text())["status"] == "running":
        assert time.time() < deadline, "the study and its trainer went on after make was killed"
        time.sleep(0.1)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "preempted"


@pytest.mark.parametrize("scale", ["local", "thesis"])
def test_experiment_12s_declared_plan_gives_each_optimizer_its_designs_rule(scale):
    """The design table (experiments/12_large_batch/README.md): SGD and LARS scale the rate linearly, LAMB and RAdam by
    sqrt; SGD and RAdam decay in steps, LARS and LAMB poly; every warm-up gradual; the study's runs 32-256 workers
    with 3 seeds, the sweep's seed 0 at 128 workers."""
    design = {"sgd": ("linear", "milestones"), "lars": ("linear", "poly"), "lamb": ("sqrt", "poly"),
              "radam": ("sqrt", "milestones")}
    experiment = REPO / "experiments/12_large_batch"
    study: dict[tuple, set] = {}
    for run in expand(experiment / "config.toml", scale):
        cfg = load_config(experiment / "config.toml", scale,
                          [f"{k}={json.dumps(v)}" for k, v in run.settings.items()])
        assert (cfg.lr.scaling, cfg.lr.decay) == design[cfg.optim.name], run.name
        assert cfg.lr.warmup == "gradual"
        if re.search(r"-w\d+-s\d+$", run.name):
            study.setdefault((cfg.optim.name, cfg.train.workers), set()).add(cfg.train.seed - load_config(
                experiment / "config.toml", scale).train.seed)
        else:
            assert cfg.train.workers == 128 and run.name.endswith("-s0")
    assert {workers for _, workers in study} == {32, 64, 128, 256}
    assert {o for o, _ in study} == set(design) and all(s == {0, 1, 2} for s in study.values())


# ---- issue 40, item 1: a folder with a status-less manifest never strands a study --------------------------------------
@pytest.mark.parametrize("manifest", ['{"manifest_version": 1, "start": "2026-01-01T00:00:00+00:00"}',
                                      '{"manifest_version": 1, "status": 5}', "", "{not json"])
def test_a_run_folder_whose_manifest_has_no_status_is_resumed_by_the_next_study(tmp_path, capsys, manifest):
    """A kill right after the trainer's first manifest write (or a 20 kB disk) left a manifest with no status and a
    0-byte manifest.json.tmp: the next study trains the run rather than dying with KeyError: 'status'."""
    from contract.reader import read_manifest
    from studies.run import run_local

    study = study_plan(tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }'), "local", quick=False,
                       seeds=None, overrides=[])
    run_dir = tmp_path / "runs" / "99_tiny" / "w1-s3"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(manifest)
    (run_dir / "manifest.json.tmp").write_bytes(b"")
    assert run_local(study, "local", tmp_path / "runs", dry_run=False, jobs=1) == 0, capsys.readouterr()
    assert read_manifest(run_dir)["status"] == "completed"
    assert "[1/1] 99_tiny/w1-s3: completed" in capsys.readouterr().out


@pytest.mark.parametrize("manifest, says", [
    ({"start": "x"}, "its manifest holds no status"), ({"status": 5}, "its manifest holds no status"),
    ({"status": "completed", "best_val_top1": "x"}, "completed"), (None, "no manifest"),
])
def test_a_runs_summary_line_never_raises_on_a_manifest_it_cannot_read(tmp_path, manifest, says):
    from studies.progress import summary

    if manifest is not None:
        (tmp_path / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, **manifest}))
    line = summary(tmp_path)
    assert says in line and line.count("\n") == 0
    if "no status" in says:
        assert f"rm -r {tmp_path}" in line  # the command that clears it


# ---- issue 40, item 4: no study option is silently ignored; counts have an upper bound that says why ------------------
@pytest.mark.parametrize("study, extra, message", [
    ('vary = { "train.workers" = [1] }', ["--gpus", "-3"], "--gpus = -3 must be a whole number >= 1"),
    ('vary = { "train.workers" = [1] }', ["--gpus", "0"], "--gpus = 0 must be a whole number >= 1"),
    ('vary = { "train.workers" = [1] }', ["--gpus", "4"], "--gpus 4 is the node's GPUs at --scale node; "),
    ('vary = { "train.workers" = [1] }', ["--cluster", "taito"], "--cluster taito is a Slurm profile: add "
                                                                  "--launcher slurm"),
    ('vary = { "train.workers" = [1] }', ["--seeds", "100000"], "--seeds = 100000 is more than 100 seeds"),
    ('seeds = 1000', [], "study.seeds = 1000 is more than 100 seeds"),
    ('extra = [{ run = "a", seeds = 101 }]', [], "study seeds = 101 is more than 100 seeds"),
])
def test_options_a_study_would_ignore_or_that_are_out_of_range_are_one_line(tmp_path, capsys, study, extra, message):
    err = refuse_study(capsys, tiny_experiment(tmp_path, study), *extra)
    assert message in err, err


def test_the_default_cluster_and_the_largest_seed_count_are_accepted(tmp_path, capsys):
    from suite.__main__ import main

    folder = tiny_experiment(tmp_path, 'vary = { "train.workers" = [1] }')
    assert main(["study", str(folder), "--dry-run", "--cluster", "local", "--seeds", "100"]) == 0
    assert capsys.readouterr().out.count("# w1-s") == 100


def test_a_run_whose_process_failed_ends_its_waiting_peers_after_the_grace(monkeypatch, tmp_path):
    """An MWMS worker whose gRPC server could not start exits 1 and its three peers wait for it forever: the study
    ends them (SIGTERM, then SIGKILL for one that ignores it) and the run ends failed instead of hanging the study."""
    import subprocess
    import sys
    import time

    from studies import launch

    monkeypatch.setattr(launch, "PEER_GRACE_S", 0.2)
    monkeypatch.setattr(launch, "PEER_KILL_S", 0.5)
    ignores_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    procs = [subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"]),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]),
             subprocess.Popen([sys.executable, "-c", ignores_term])]
    active = launch.Active(None, 1, procs, open(os.devnull, "w"), time.time())
    deadline = time.monotonic() + 120  # generous: the grace is 0.2 s and SIGKILL 0.5 s after it
    while (code := active.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert code is not None and code != 0, "the stranded peers were never ended"
    assert [p.returncode for p in procs] == [1, -15, -9]
