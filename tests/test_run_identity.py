"""Issue 48: one run, one identity -- a run counts only for the config, seed and machine it really ran, and every
bad input is one line (`error: ...`, exit 2)."""
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import write_config
from contract.config import ConfigError
from contract.plan import study_plan
from studies.launch import NO_IDENTITY, planned_runs
from contract.manifest import VERSION


def tiny_study(tmp_path, study: str = 'vary = { "train.workers" = [1] }', overrides: dict | None = None) -> Path:
    folder = tmp_path / "99_tiny"
    folder.mkdir()
    config = write_config(folder / "config.toml", overrides)
    config.write_bytes(config.read_bytes() + f"[study]\n{study}\n".encode())
    return folder


def completed_folder(run_dir: Path, cfg, status: str = "completed", run: str | None = None) -> Path:
    """A run folder as the trainer leaves a finished run, without training: config.json, manifest.json and the
    last record of metrics.jsonl (a finished run without its records counts as none: issue 64)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"experiment": cfg.experiment, "run": run or run_dir.name,
                                                     "scale": cfg.scale, **cfg.to_dict(), "resolved": cfg.resolved()}))
    (run_dir / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": status}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"kind": "status", "time": 0.0, "status": status,
                                                       "epoch": cfg.train.epochs, "message": ""}) + "\n")
    return run_dir


# ---- item 1: a completed run without a readable config.json counts for no plan ---------------------------------------
@pytest.mark.parametrize("damage", ["delete", "garbage", "list"])
def test_a_completed_run_without_a_readable_config_is_never_done_for_any_plan(tmp_path, capsys, damage):
    from suite.__main__ import main

    folder = tiny_study(tmp_path)
    plan = planned_runs(study_plan(folder, "local", False, None, []), "local", tmp_path / "runs")[0]
    completed_folder(plan.run_dir, plan.cfg)
    config = plan.run_dir / "config.json"
    {"delete": config.unlink, "garbage": lambda: config.write_text("{not json"),
     "list": lambda: config.write_text("[1, 2]")}[damage]()
    other = study_plan(folder, "local", False, None, ["train.epochs=3", "optim.momentum=0.5"])
    assert {p.status for p in planned_runs(other, "local", tmp_path / "runs")} == {NO_IDENTITY}
    # the study refuses in one line naming the folder and the command that clears it; nothing is skipped
    argv = ["study", str(folder), "--out", str(tmp_path / "runs"), "--set", "train.epochs=3"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert f"rm -r {plan.run_dir}" in captured.err and "config.json is" in captured.err
    assert "skipped" not in captured.out
    # and the dry run says the study would refuse it, never that it would resume it
    assert main([*argv, "--dry-run"]) == 0
    assert "a run without a readable config.json: the study would refuse to start" in capsys.readouterr().out


def test_an_empty_planned_folder_is_still_a_run_to_start(tmp_path):
    folder = tiny_study(tmp_path)
    plan = planned_runs(study_plan(folder, "local", False, None, []), "local", tmp_path / "runs")[0]
    plan.run_dir.mkdir(parents=True)  # a study stopped between making the folder and writing its config.json
    assert planned_runs(study_plan(folder, "local", False, None, []), "local", tmp_path / "runs")[0].status == "missing"


# ---- item 2: the report and exp13-next name a folder without config.json as a problem, never a traceback -------------
def copy_without_config(source: Path, runs: Path) -> Path:
    run_dir = runs / source.parent.name / source.name
    shutil.copytree(source, run_dir)
    (run_dir / "config.json").unlink()
    return run_dir


def test_the_report_names_a_run_without_config_as_a_problem_and_draws_no_row_of_it(tmp_path, capsys):
    from analysis.catalogue import make_report
    from tests.helpers import REPO

    run_dir = copy_without_config(REPO / "results/reference/vm-2cpu/04_naive_scaling/w32-s0", tmp_path / "runs")
    info = make_report(tmp_path / "runs", tmp_path / "report", notebooks=False)
    assert info["runs"] == 0
    assert any(p.startswith(f"{run_dir}: no readable config.json") and f"rm -r {run_dir}" in p
               for p in info["problems"]), info["problems"]
    assert f"problem: {run_dir}: no readable config.json" in capsys.readouterr().out


def test_exp13_next_names_a_tuning_run_without_config_as_a_problem(tmp_path, capsys):
    from tests.helpers import REPO
    from tools.exp13_next import main

    tuning = REPO / "results/reference/xeon-2cpu/13_steps_to_target/tune-lamb-w1-base0.0025-s0"
    run_dir = copy_without_config(tuning, tmp_path)
    assert main(["--runs", str(tmp_path)]) == 0
    assert f"problem: {run_dir}: no readable config.json" in capsys.readouterr().out


# ---- item 4: one seed trained under two run names counts once --------------------------------------------------------
def test_one_config_and_seed_under_two_run_names_counts_once_with_a_problem_line(tmp_path):
    from analysis import tables as tb
    from analysis.runs import load_study
    from contract.reader import IDENTITY_WORDS
    from tests.helpers import REPO

    source = REPO / "results/reference/vm-2cpu-18ep/05_linear_scaling/w1-s0"
    for name in ("my run", "ρun-é✓"):  # `--run "my run"` and `--run ρun-é✓`: the same config, seed and machine
        run_dir = tmp_path / "05_linear_scaling" / name
        shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns("*.pt"))
        config = json.loads((run_dir / "config.json").read_text())
        (run_dir / "config.json").write_text(json.dumps({**config, "run": name}))
    df = load_study(tmp_path)
    assert tb.quality_summary(df)["n"].tolist() == [1]
    problems = [p for p in df.attrs["problems"] if "counted once" in p]
    assert len(problems) == 1 and f"({IDENTITY_WORDS}) -- counted once" in problems[0]


def test_the_same_config_and_seed_on_two_machines_are_two_runs(tmp_path):
    from analysis.runs import load_study
    from tests.helpers import REPO

    source = REPO / "results/reference/xeon-2cpu/13_steps_to_target/lamb-w1-s1"
    for name, model in (("a", "Intel(R) Xeon(R) Processor"), ("b", "AMD EPYC")):
        run_dir = tmp_path / "13_steps_to_target" / name
        shutil.copytree(source, run_dir)
        manifest = json.loads((run_dir / "manifest.json").read_text())
        (run_dir / "manifest.json").write_text(json.dumps({**manifest, "machine": {**manifest["machine"], "cpu_model": model}}))
    df = load_study(tmp_path)
    assert len(df[df["kind"] == "run"]) == 2 and not any("counted once" in p for p in df.attrs["problems"])


# ---- item 5: a missing sbatch, a non-object config.json and a missing TensorFlow are one line each -------------------
def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_a_slurm_study_without_sbatch_is_one_line_before_any_folder_is_written(tmp_path, capsys, monkeypatch):
    from suite.__main__ import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # a machine without Slurm's commands
    folder = tiny_study(tmp_path)
    (folder / "slurm.sbatch").write_text("#!/bin/bash\n")
    argv = ["study", str(folder), "--launcher", "slurm", "--cluster", "local", "--out", str(tmp_path / "runs")]
    assert main(argv) == 2
    assert "sbatch is not on PATH" in one_line(capsys)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("document", ["[1, 2]", "7", '"text"'])
def test_a_planned_config_that_is_not_an_object_is_one_line(tmp_path, capsys, document):
    from suite.__main__ import main

    config = tmp_path / "runs" / "99_tiny" / "w1-s0" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(document)
    assert main(["train", str(config)]) == 2
    assert "not an object of sections; re-plan the run with its study" in one_line(capsys)


def test_the_tensorflow_trainer_without_tensorflow_is_one_line(tmp_path, capsys):
    from trainers.tf import __main__ as tf_main
    from trainers.tf.available import tensorflow_installed

    if tensorflow_installed():
        pytest.skip("TensorFlow is installed here: its absence cannot be seen")
    config = write_config(tmp_path / "c.toml", {"train": {"backend": "mwms"}, "bench": {"batches": 5}})
    assert tf_main.main(["train", str(config), "--out", str(tmp_path / "runs")]) == 2
    assert "TensorFlow is not installed here (run `make setup-tf`)" in one_line(capsys)


# ---- item 6: damage is not a result ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spoil, says", [
    (lambda state: state.update(best_top1=float("nan")), "'best_top1' is nan, not a top-1 in [0, 100]"),
    (lambda state: state.update(best_top1=500.0), "'best_top1' is 500.0, not a top-1 in [0, 100]"),
    (lambda state: state["partials"][0].__setitem__(0, float("nan")), "'partials' holds non-finite epoch sums"),
])
def test_a_checkpoint_s_impossible_best_top1_or_nan_epoch_sums_are_damage_never_copied_or_diverged(
        tmp_path, capsys, spoil, says):
    """Issue 64: a best_top1 of NaN or 500 was copied into the manifest; NaN epoch sums resumed as `diverged`."""
    import torch
    from contract.reader import read_manifest
    from tests.helpers import train_in_process

    cfg = write_config(tmp_path / "c.toml")
    assert train_in_process(cfg, tmp_path, "c") == 0
    run_dir = tmp_path / "c" / "c"
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    if not state["partials"]:
        state["partials"] = [[0.0, 0.0, 0.0, 0]]
    spoil(state)
    torch.save(state, run_dir / "checkpoint.pt")
    capsys.readouterr()
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 2
    assert says in one_line(capsys)
    manifest = read_manifest(run_dir)
    assert manifest["status"] != "diverged" and 0 <= manifest["best_val_top1"] <= 100



@pytest.mark.parametrize("where", ["model", "optimizer"])
def test_a_checkpoint_with_non_finite_weights_or_optimizer_state_is_damaged_never_diverged(tmp_path, capsys, where):
    import torch
    from contract.reader import read_manifest
    from tests.helpers import records, train_in_process

    cfg = write_config(tmp_path / "c.toml")
    assert train_in_process(cfg, tmp_path, "c") == 0
    run_dir = tmp_path / "c" / "c"
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    if where == "model":
        key = next(k for k, v in state["model"].items() if v.is_floating_point())
        state["model"][key] = torch.full_like(state["model"][key], float("nan"))
    else:
        buffers = state["optimizer"]["state"][0]
        key = next(k for k, v in buffers.items() if torch.is_tensor(v) and v.is_floating_point())
        buffers[key] = torch.full_like(buffers[key], float("inf"))
    torch.save(state, run_dir / "checkpoint.pt")
    capsys.readouterr()
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 2
    err = one_line(capsys)
    assert f"checkpoint {run_dir / 'checkpoint.pt'} is damaged ({where} " in err and "non-finite values" in err
    assert read_manifest(run_dir)["status"] != "diverged"
    assert [r["epoch"] for r in records(run_dir, "epoch")] == [0, 1]  # nothing trained or written


# ---- item 6: profile counts, a malformed signal and an unbounded --jobs are one line, before anything is written -----
@pytest.mark.parametrize("line, message", [
    ("gpus_per_node = -2", "gpus_per_node = -2 must be a whole number >= 0"),
    ("max_restarts = -1", "max_restarts = -1 must be a whole number >= 0"),
    ('signal = "USR1@abc"', "signal = 'USR1@abc' is not Slurm's SIGNAL[@SECONDS]"),
    ('signal = "@120"', "signal = '@120' is not Slurm's SIGNAL[@SECONDS]"),
    ('signal = "KILL@300"', "signal = 'KILL@300' is not one slurm/job.sh catches"),  # no checkpoint before the limit
    ('signal = "SIGSTOP"', "signal = 'SIGSTOP' is not one slurm/job.sh catches"),
])
def test_a_profiles_negative_count_or_malformed_signal_is_one_line(tmp_path, capsys, line, message):
    from suite.__main__ import main

    profile = tmp_path / "mine.toml"
    profile.write_text(f'description = "a test profile"\n{line}\n')
    folder = tiny_study(tmp_path)
    (folder / "slurm.sbatch").write_text("#!/bin/bash\n")
    argv = ["study", str(folder), "--launcher", "slurm", "--cluster", str(profile), "--out", str(tmp_path / "runs")]
    assert main([*argv, "--dry-run"]) == 2
    assert message in one_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_a_well_formed_signal_and_zero_gpus_are_accepted(tmp_path):
    from slurm.profiles import load_profile

    for signal in ("USR1@120", "SIGUSR1@60", "10@30", "TERM", ""):
        profile = tmp_path / "ok.toml"
        profile.write_text(f'signal = "{signal}"\ngpus_per_node = 0\n')
        assert load_profile(str(profile), {}).signal == signal


def test_an_unbounded_jobs_count_is_one_line(tmp_path, capsys):
    from suite.__main__ import main

    assert main(["study", str(tiny_study(tmp_path)), "--dry-run", "--jobs", "100000"]) == 2
    assert "--jobs = 100000 is more than 64 runs side by side" in one_line(capsys)


def test_the_dali_decoder_without_dali_is_one_line_on_generated_data_too(tmp_path, capsys):
    import importlib.util
    from contract.reader import read_metrics
    from tests.helpers import train_in_process

    if importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None:
        pytest.skip("DALI is installed here: its absence cannot be seen")
    cfg = write_config(tmp_path / "c.toml", {"data": {"decoder": "dali"}})
    assert train_in_process(cfg, tmp_path, "d") == 2
    assert 'data.decoder = "dali" needs NVIDIA DALI, which is not installed: run `make setup-dali`' in one_line(capsys)
    assert read_metrics(tmp_path / "c" / "d").of("epoch") == []  # nothing trained


# ---- item 6: a planned config.json is checked against what its settings give before the run starts -------------------
@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(scale=7), "scale = 7 is not one of local, gpu, node, thesis"),
    (lambda d: d["resolved"].update(global_batch=d["resolved"]["global_batch"] * 2), "resolved.global_batch = "),
    (lambda d: d.pop("resolved"), "has no resolved section"),
])
def test_an_edited_planned_config_is_one_line_before_the_run_starts(tmp_path, capsys, edit, message):
    from studies.launch import write_planned
    from suite.__main__ import main

    plan = planned_runs(study_plan(tiny_study(tmp_path), "local", False, None, []), "local", tmp_path / "runs")[0]
    write_planned(plan)
    config = plan.run_dir / "config.json"
    document = json.loads(config.read_text())
    edit(document)
    config.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["train", str(config)]) == 2
    assert message in one_line(capsys)
    assert not (plan.run_dir / "manifest.json").exists()  # nothing started


def test_a_planned_config_as_its_study_wrote_it_passes_the_check(tmp_path):
    from contract.config import load_planned
    from contract.fingerprint import config_fingerprint
    from studies.launch import write_planned

    for plan in planned_runs(study_plan(tiny_study(tmp_path, 'vary = { "train.workers" = [1, 4] }'), "local", False,
                                        None, []), "local", tmp_path / "runs"):
        write_planned(plan)
        assert config_fingerprint(load_planned(plan.run_dir / "config.json")) == plan.fingerprint


# ---- item 3: "this machine" is a label of a run's recorded identity, never of where its folder lies ------------------
def test_a_run_copied_from_another_machine_is_never_labelled_this_machines(tmp_path, monkeypatch):
    from analysis.machines import machine_of
    from contract import machine

    here = {"cpu_model": "AMD EPYC", "isa": None, "cores": 2, "memory_gib": 24, "gpu_model": None, "torch": "2.14.1"}
    monkeypatch.setattr(machine, "this_machine", lambda isa, gpu: here)
    for name, manifest in (("xeon", {"machine": {"cpu_model": "Intel(R) Xeon(R) Processor"}}),
                           ("mine", {"machine": {**here, "isa": "AVX512"}}),
                           ("old", {"machine": {"isa": "AVX2"}})):  # no CPU model: nothing to tell
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": "completed", **manifest}))
    assert machine_of(tmp_path / "xeon", tmp_path / "no-reference") == "another machine (Intel(R) Xeon(R) Processor)"
    assert machine_of(tmp_path / "mine", tmp_path / "no-reference") == "this machine"
    assert machine_of(tmp_path / "old", tmp_path / "no-reference") == "this machine"


# ---- item 7: a study reports only what it did to its own runs, whatever another did since it planned them ------------
@pytest.mark.parametrize("meanwhile", ["completed", "other-config"])
def test_a_run_another_study_finished_after_this_one_planned_it_is_not_reported_as_this_studys(
        tmp_path, capsys, meanwhile):
    from studies.progress import Progress
    from studies.supervise import drive

    folder = tiny_study(tmp_path)
    plans = planned_runs(study_plan(folder, "local", False, None, []), "local", tmp_path / "runs")
    assert [p.status for p in plans] == ["missing"]
    # the other study, started 2 s earlier, finishes the run between this study's plan and its start
    cfg = plans[0].cfg if meanwhile == "completed" else \
        study_plan(folder, "local", False, None, ["train.epochs=5"]).runs[0].cfg
    completed_folder(plans[0].run_dir, cfg)
    failures = drive(list(enumerate(plans, start=1)), [], 1, Progress(1), True)
    out = capsys.readouterr().out
    assert "exit" not in out, out  # no trainer of this study ran
    if meanwhile == "completed":
        assert failures == 0 and "skipped, already completed (by another process since this study planned it)" in out
    else:
        assert failures == 1 and "not started: " in out and "now holds another config's run" in out


def test_a_slurm_dry_run_says_it_would_refuse_a_run_without_a_readable_config(tmp_path, capsys):
    from suite.__main__ import main

    folder = tiny_study(tmp_path)
    (folder / "slurm.sbatch").write_text("#!/bin/bash\n")
    plan = planned_runs(study_plan(folder, "local", False, None, []), "local", tmp_path / "runs")[0]
    (completed_folder(plan.run_dir, plan.cfg) / "config.json").unlink()
    argv = ["study", str(folder), "--launcher", "slurm", "--cluster", "local", "--out", str(tmp_path / "runs")]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "a run without a readable config.json: the study would refuse to start" in out
    assert "skipped, already completed" not in out


def test_every_new_manifest_records_the_machine_identity(tmp_path):
    from contract.machine import FIELDS, cpuinfo
    from contract.reader import read_manifest
    from tests.helpers import train_in_process

    assert train_in_process(write_config(tmp_path / "c.toml"), tmp_path, "m") == 0
    recorded = read_manifest(tmp_path / "c" / "m")["machine"]
    assert set(recorded) == set(FIELDS) and recorded["cpu_model"] == cpuinfo()[0] and recorded["cores"] >= 1


@pytest.mark.parametrize("flags, cap, isa", [
    ("fma avx2 avx512f avx512bw avx512vl avx512dq", "", "AVX512"),
    ("fma avx2 avx512f avx512bw avx512vl avx512dq", "AVX2", "AVX2"),  # oneDNN capped as torch's ATen is
    ("fma avx2 avx512f avx512bw avx512vl avx512dq", "AVX", "DEFAULT"),  # capped below AVX2: the manifest's rule
    ("fma avx2 avx512f", "", "AVX2"),  # AVX-512 foundation alone is not torch's AVX512 capability
    ("sse4_1 avx", "", "DEFAULT"),
    ("", "", None)])  # no flags read: unknown, and reference-add then refuses the run
def test_a_process_without_torch_names_the_cpus_vector_isa_as_torch_would(monkeypatch, flags, cap, isa):
    from contract import machine

    monkeypatch.setattr(machine, "cpuinfo", lambda: ("a CPU", set(flags.split())))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert machine.cpu_vector_isa() == isa


@pytest.mark.parametrize("placement, nodes", [
    ([{"local_rank": 0}, {"local_rank": 1}, {"local_rank": 0}, {"local_rank": 1}], 2),  # torchrun's 2 nodes of 2
    ([{"local_rank": 0}, {"local_rank": 1}], 1),
    (None, None), ("0,1", None), ([], None),  # unrecorded or not a list: unknown, never a count
    ([{"local_rank": 0}, {"local_rank": "1"}], None), ([{"local_rank": 0}, "rank 1"], 1),  # a rank not a mapping: left out
])
def test_a_runs_nodes_are_its_ranks_of_local_rank_0_and_unknown_where_unrecorded(placement, nodes):
    """The nodes part of a run's identity (contract/reader.py nodes_of): 4 processes on one node and 2 nodes of 2
    share a config, not a measurement."""
    from contract.reader import nodes_of

    assert nodes_of({"placement": placement}) == nodes
