"""Checkpoints, exact resumption, preemption by a signal, divergence."""
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch

from contract import reader
from contract.reader import read_metrics
from tests.test_precision import preempt_at  # SIGUSR1 at a given training step: a mid-epoch checkpoint
from tests.helpers import (REPO, final_state, max_difference, records, train, train_in_process, trainer_env,
                           write_config)

SLOWER = {"data": {"synthetic_images": 320}, "train": {"epochs": 3, "print_freq": 5}}


def start(config, out, name, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "trainers", "train", str(config), "--out", str(out), "--run", name, *extra],
        env=trainer_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def preempt_and_resume(config, out, name) -> None:
    """Train `name`, SIGTERM it (the whole process group, as Slurm does) once its first epoch is recorded, check
    it checkpointed and exited 4, then resume it to the end."""
    proc = start(config, out, name)
    wait_for(out / config.stem / name, "epoch")
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err[-2000:]
    resumed = train(config, out, name, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def wait_for(run_dir, kind, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if read_metrics(run_dir).of(kind):
            return
        time.sleep(0.05)
    raise AssertionError(f"no {kind} record appeared in {run_dir}")


@pytest.mark.slow
@pytest.mark.parametrize("sig, loader_workers", [(signal.SIGTERM, 0), (signal.SIGUSR1, 1)])
def test_preempted_run_resumes_to_the_same_parameters_as_an_uninterrupted_one(tmp_path, sig, loader_workers):
    cfg = write_config(tmp_path / "r.toml", {**SLOWER, "data": {**SLOWER["data"], "loader_workers": loader_workers}})
    assert train(cfg, tmp_path, "whole").returncode == 0
    proc = start(cfg, tmp_path, "cut")
    run_dir = tmp_path / "r" / "cut"
    wait_for(run_dir, "epoch")
    os.killpg(proc.pid, sig)  # as Slurm does: every process of the step, data-loader workers included
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err[-2000:]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "preempted" and manifest["exit_code"] == 4
    assert records(run_dir, "status")[-1]["status"] == "preempted"
    resumed = train(cfg, tmp_path, "cut", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert max_difference(final_state(tmp_path / "r" / "whole"), final_state(run_dir)) == 0.0
    epochs = [r["epoch"] for r in records(run_dir, "epoch")]
    assert sorted(set(epochs)) == [0, 1, 2]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


def test_checkpoint_is_a_plain_dict_loadable_with_weights_only(tmp_path):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    state = torch.load(tmp_path / "c" / "c" / "checkpoint.pt", weights_only=True)
    assert {"model", "optimizer", "epoch", "step", "rng", "config"} <= state.keys()
    assert state["epoch"] == 1 and state["step"] == 0


def test_all_a_checkpoint_saves_of_the_run_is_its_declared_train_state(tmp_path):
    """Issue 65: a checkpoint is the TrainState's entries (every field but `lr`, the sums as every rank's), the
    weights' state dicts and what a resume checks itself against; nothing else."""
    import dataclasses

    from trainers.checkpoint import TrainState
    from trainers.runlog import Sums

    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    saved = torch.load(tmp_path / "c" / "c" / "checkpoint.pt", weights_only=True)
    entries = TrainState().entries([Sums()])
    fields = {f.name for f in dataclasses.fields(TrainState)} - {"lr", "partial"}
    assert fields | {"partials"} == entries.keys()
    assert saved.keys() == entries.keys() | {"version", "model", "optimizer", "scaler", "config", "arithmetic",
                                             "run_files"}
    assert set(saved["rng"]) >= {"torch", "python"} and saved["unreadable_images"] == {"train": {"0": 0},
                                                                                       "val": {"0": 0}}
    assert not list((tmp_path / "c" / "c").glob("*.tmp"))


def test_resume_with_a_different_config_is_refused(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto", "--set", "lr.base=0.2") == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "lr.base was 0.05, the config says 0.2" in err


def test_existing_run_folder_is_not_overwritten_without_resume(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    assert train_in_process(cfg, tmp_path, "c") == 2
    assert "--resume auto" in capsys.readouterr().err


def test_divergence_stops_the_run_with_its_own_status_and_exit_code(tmp_path):
    cfg = write_config(tmp_path / "d.toml", {"lr": {"base": 1e8}})
    assert train_in_process(cfg, tmp_path, "d") == 3
    run_dir = tmp_path / "d" / "d"
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "diverged"
    last = records(run_dir, "status")[-1]
    assert last["status"] == "diverged" and "loss is" in last["message"]


def test_resume_without_a_checkpoint_starts_the_records_over(tmp_path):
    """A run killed before its first checkpoint restarts from scratch: its old records must not be read twice."""
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    run_dir = tmp_path / "c" / "c"
    (run_dir / "checkpoint.pt").unlink()
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 0
    assert [r["status"] for r in records(run_dir, "status")] == ["running", "completed"]
    assert len(records(run_dir, "epoch")) == 1
    assert (run_dir / "train.log").read_text().count("* Acc@1") == 1
    assert json.loads((run_dir / "manifest.json").read_text())["resumed_at"] is None


@pytest.mark.parametrize("damage", ["empty", "truncated", "random bytes"])
def test_a_damaged_checkpoint_is_one_line_naming_the_file_and_what_to_do(tmp_path, capsys, damage):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    ckpt = tmp_path / "c" / "c" / "checkpoint.pt"
    whole = ckpt.read_bytes()
    ckpt.write_bytes({"empty": b"", "truncated": whole[: len(whole) // 2],
                      "random bytes": os.urandom(len(whole))}[damage])
    capsys.readouterr()
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"checkpoint {ckpt} is damaged" in err and "move it aside" in err
    ckpt.rename(ckpt.with_name("checkpoint.pt.bad"))  # what the line says to do: the run starts again
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 0
    assert json.loads((tmp_path / "c" / "c" / "manifest.json").read_text())["status"] == "completed"


def test_a_resume_reuses_the_threads_the_run_started_with_and_refuses_others_unless_forced(tmp_path, capsys,
                                                                                          monkeypatch):
    """Issue 26, item 1: a study's JOBS changed OMP_NUM_THREADS between attempts and the resumed run's weights
    differed. The threads are fixed at the run's first start, stored with the checkpoint and reused."""
    import shutil

    from trainers import checkpoint

    save = checkpoint.save

    def save_and_keep_the_first(path, state):  # the checkpoint a kill during epoch 1 would leave
        save(path, state)
        if state["epoch"] == 1:
            shutil.copy(path, path.with_name("after-epoch-0.pt"))

    monkeypatch.setattr(checkpoint, "save", save_and_keep_the_first)
    cfg = write_config(tmp_path / "c.toml", {"train": {"threads": 0}})  # threads left to the environment
    run_dir = tmp_path / "c" / "r"
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the first attempt: a study at JOBS=2 on 2 cores
        assert train_in_process(cfg, tmp_path, "r") == 0
        whole = final_state(run_dir)
        os.replace(run_dir / "after-epoch-0.pt", run_dir / "checkpoint.pt")
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the resume: `--only` one run, JOBS=1, 2 threads
        assert train_in_process(cfg, tmp_path, "r", "--resume", "auto") == 0
    finally:
        torch.set_num_threads(before)
    assert max_difference(whole, final_state(run_dir)) == 0.0
    attempts = json.loads((run_dir / "manifest.json").read_text())["attempts"]
    assert [(a["epoch"], a["threads"], a["forced"]) for a in attempts] == [(0, 1, False), (1, 1, False)]
    assert all(a["cpu_capability"] == torch.backends.cpu.get_cpu_capability() for a in attempts)

    capsys.readouterr()  # the finished run's checkpoint: a resume now only asks for other threads
    assert train_in_process(cfg, tmp_path, "r", "--resume", "auto", "--set", "train.threads=2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "as the same run: threads was 1, this attempt's is 2" in err
    assert train_in_process(cfg, tmp_path, "r", "--resume", "force", "--set", "train.threads=2") == 0
    attempts = json.loads((run_dir / "manifest.json").read_text())["attempts"]
    assert (attempts[-1]["threads"], attempts[-1]["forced"]) == (2, True) and len(attempts) == 3


# ---- issue 26, item 10: the manifest names the CPU and its kernels' ISA; train.cpu_isa pins them ---------------------
def test_the_manifest_records_the_cpu_and_the_kernels_instruction_sets(tmp_path):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    manifest = json.loads((tmp_path / "c" / "c" / "manifest.json").read_text())
    cpu = manifest["cpu"]
    assert cpu["model"] and cpu["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert {"onednn_isa", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"} <= cpu.keys()
    assert manifest["attempts"][0]["cpu_capability"] == cpu["torch_capability"]


def test_a_pinned_isa_without_its_environment_is_one_line_in_process(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1, "cpu_isa": "avx2"}})
    assert train_in_process(cfg, tmp_path, "c") == 2
    err = capsys.readouterr().err
    assert err == ("error: train.cpu_isa = 'avx2' must be set before torch starts: run with ATEN_CPU_CAPABILITY=avx2 "
                   "ONEDNN_MAX_CPU_ISA=AVX2 in the environment\n")
    assert not (tmp_path / "c").exists()


def test_a_resume_on_other_cpu_kernels_is_refused_unless_forced(tmp_path):
    from trainers.checks import check_same_arithmetic
    from contract.config import ConfigError

    saved = {"threads": 1, "device": "cpu", "workers_per_pass": 8, "cpu_capability": "AVX2", "onednn_isa": "AVX2"}
    would_be = {"threads": None, "device": "cpu", "workers_per_pass": None, "cpu_capability": "AVX512",
                "onednn_isa": "AVX512_CORE"}
    with pytest.raises(ConfigError, match="cpu_capability was 'AVX2', this attempt's is 'AVX512' \\(and 1 more\\)"):
        check_same_arithmetic(tmp_path / "checkpoint.pt", saved, would_be, force=False)
    check_same_arithmetic(tmp_path / "checkpoint.pt", saved, would_be, force=True)
    check_same_arithmetic(tmp_path / "checkpoint.pt", saved, {**would_be, "cpu_capability": "AVX2",
                                                              "onednn_isa": "AVX2"}, force=False)


@pytest.mark.slow
def test_a_trainer_started_without_the_pinned_isas_environment_sets_it_before_torch_loads(tmp_path):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1, "cpu_isa": "default"}})
    result = train(cfg, tmp_path, "c")
    assert result.returncode == 0, result.stderr[-2000:]
    cpu = json.loads((tmp_path / "c" / "c" / "manifest.json").read_text())["cpu"]
    assert (cpu["torch_capability"], cpu["ATEN_CPU_CAPABILITY"], cpu["ONEDNN_MAX_CPU_ISA"]) == \
        ("DEFAULT", "default", "SSE41")
    assert cpu["onednn_isa"] in ("SSE41", None)


@pytest.mark.slow
def test_an_isa_the_cpu_lacks_is_one_line(tmp_path):
    from trainers.compute import cpuinfo

    if "avx512f" in cpuinfo()[1]:
        pytest.skip("this CPU has AVX-512: the refusal needs a CPU without it")
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1, "cpu_isa": "avx512"}})
    result = train(cfg, tmp_path, "c")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "train.cpu_isa = 'avx512': this CPU has no avx512 kernels (it lacks avx512f" in result.stderr
    assert not (tmp_path / "c").exists()


# ---- issue 26, item 2: a full or read-only disk ---------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 300 KB tmpfs made by the test (root only), or a skip that says why."""
    import subprocess

    folder = tmp_path / "disk"
    folder.mkdir()

    def mount(size: str, options: str = "") -> Path:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{options}", "tmpfs", str(folder)],
                                capture_output=True, text=True)
        if result.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
        return folder

    yield mount
    subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_full_disk_marks_the_run_failed_with_the_reason_in_one_line(tmp_path, capsys, small_disk):
    out = small_disk("300k")
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 6}})
    assert train_in_process(cfg, out, "c") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error: ") == 1, err
    assert "No space left on device" in err and "free space or pick another --out" in err
    manifest = json.loads((out / "c" / "c" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "No space left on device" in manifest["message"]
    assert not list((out / "c" / "c").glob("*.tmp"))  # the half-written checkpoint went


def test_a_study_refuses_a_read_only_out_in_one_line(tmp_path, capsys, small_disk):
    from suite.__main__ import main

    out = small_disk("100k", ",ro")
    folder = tmp_path / "99_tiny"
    folder.mkdir()
    write_config(folder / "config.toml")
    assert main(["study", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: output folder {out} cannot be written") and err.count("\n") == 1, err


def test_a_study_warns_when_its_runs_would_not_fit(tmp_path, small_disk):
    from contract.plan import study_plan
    from studies.launch import planned_runs, space_warning

    out = small_disk("400k")
    folder = tmp_path / "99_tiny"
    folder.mkdir()
    write_config(folder / "config.toml", {"train": {"epochs": 6}})
    plans = planned_runs(study_plan(folder, "local", quick=False, seeds=2, overrides=[]), "local", out)
    warning = space_warning(plans, out)
    assert warning.startswith(f"warning: 0.4 MB free in {out}; a run needs about ") and "2 run(s)" in warning
    assert space_warning(plans, tmp_path) is None


@pytest.mark.slow
def test_a_study_on_a_full_disk_reports_each_run_and_leaves_no_running_manifest(tmp_path, small_disk):
    out = small_disk("400k")
    folder = tmp_path / "99_tiny"
    folder.mkdir()
    write_config(folder / "config.toml", {"train": {"epochs": 6}})
    (folder / "config.toml").write_text((folder / "config.toml").read_text() + "[study]\nseeds = 2\n")
    result = subprocess.run([sys.executable, "-m", "suite", "study", str(folder), "--out", str(out), "--jobs", "1"],
                            cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr, result.stderr[-2000:]
    assert "warning: 0.4 MB free in" in result.stderr
    assert result.stdout.count("[1/2]") >= 1 and result.stdout.count("[2/2]") >= 1  # the second run still started
    for run_dir in (out / "99_tiny").iterdir():
        manifest = reader.read_manifest(run_dir)
        assert manifest is None or manifest["status"] != "running", (run_dir, manifest)


# ---- issue 40, item 6: a mid-epoch resume continues the epoch's running averages -----------------------------------
AVERAGES = ("loss", "loss_avg", "top1", "top1_avg", "top5", "top5_avg")


def averages(run_dir):
    return [(r["epoch"], r["iter"], *(r[k] for k in AVERAGES)) for r in records(run_dir, "iter")]


def test_a_mid_epoch_resume_continues_the_running_averages_of_the_epoch(tmp_path, monkeypatch):
    cfg = write_config(tmp_path / "m.toml")  # 6 steps an epoch, an iter record at each
    assert train_in_process(cfg, tmp_path, "whole") == 0
    preempt_at(monkeypatch, 6 + 3)  # epoch 1, after its third step
    assert train_in_process(cfg, tmp_path, "cut") == 4
    assert torch.load(tmp_path / "m" / "cut" / "checkpoint.pt", weights_only=True)["step"] == 3
    monkeypatch.undo()
    assert train_in_process(cfg, tmp_path, "cut", "--resume", "auto") == 0
    assert averages(tmp_path / "m" / "cut") == averages(tmp_path / "m" / "whole")


@pytest.mark.parametrize("written_as", [1, 2])
def test_a_checkpoint_of_an_earlier_format_is_refused_with_one_line(tmp_path, capsys, written_as):
    """Issue 49: a checkpoint without a version (the trainer's attributes, before TrainState) is not read; issue 65:
    nor is one of format 2 (its generators' states and skipped steps beside the state, its unreadable-file tallies
    in the manifest alone). The line says how to go on."""
    cfg = write_config(tmp_path / "m.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "old") == 0
    ckpt = tmp_path / "m" / "old" / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    if written_as == 1:
        del state["version"]
    else:
        state["version"] = written_as
    torch.save(state, ckpt)
    capsys.readouterr()
    assert train_in_process(cfg, tmp_path, "old", "--resume", "auto") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"written by an older trainer (format {written_as}, this one reads 3)" in err[0]
    assert "finish the run with the version that started it" in err[0] and f"mv {ckpt} {ckpt}.old" in err[0]


# ---- issue 40, item 7: a checkpoint with the right keys and wrong contents, run files that are folders --------------
def first_conv(model):
    return next(k for k, v in model.items() if v.dim() == 4)


BAD_CONTENTS = {
    "a wrong tensor shape": (lambda s: s["model"].update({first_conv(s["model"]): torch.zeros(1, 2, 3, 3)}),
                             "size mismatch"),
    "no rng": (lambda s: s.pop("rng"), "no 'rng'"),
    "a string for the optimizer": (lambda s: s.update(optimizer="sgd"), "'optimizer' is a str"),
    "a string for the rng": (lambda s: s.update(rng="seed"), "'rng' is a str"),
    "a string for a config section": (lambda s: s["config"].update(train="x"), "config 'train' is a str"),
    "another number of parameter groups": (
        lambda s: s["optimizer"]["param_groups"].append({**s["optimizer"]["param_groups"][0], "params": []}),
        "parameter groups"),
    "a momentum buffer of another shape": (
        lambda s: s["optimizer"]["state"][0].update(momentum_buffer=torch.zeros(1)), "momentum_buffer"),
    "epoch -5": (lambda s: s.update(epoch=-5), "epoch -5 is outside [0, 2]"),
    "epoch 999": (lambda s: s.update(epoch=999), "epoch 999 is outside [0, 2]"),
    "step past the epoch": (lambda s: s.update(step=6), "iteration 6 is outside [0, 6)"),
    "a negative skip count": (lambda s: s.update(skipped_steps=-1), "'skipped_steps' holds a negative count"),
    "unreadable files that are not counts": (lambda s: s.update(unreadable_images={"train": {"0": "x"}}),
                                             "'unreadable_images' 'train' is not counts per epoch"),
}


@pytest.mark.parametrize("damage", BAD_CONTENTS)
def test_a_checkpoint_with_bad_contents_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, capsys, damage):
    cfg = write_config(tmp_path / "c.toml")
    assert train_in_process(cfg, tmp_path, "c") == 0
    ckpt = tmp_path / "c" / "c" / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    spoil, words = BAD_CONTENTS[damage]
    spoil(state)
    torch.save(state, ckpt)
    capsys.readouterr()
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"checkpoint {ckpt} is damaged" in err and words in err, err
    assert [r["epoch"] for r in records(tmp_path / "c" / "c", "epoch")] == [0, 1]  # nothing trained or written


@pytest.mark.parametrize("name", [".lock", "config.json", "manifest.json", "metrics.jsonl", "train.log",
                                  "checkpoint.pt"])
def test_a_run_file_replaced_by_a_folder_is_one_line_naming_it(tmp_path, capsys, name):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "c") == 0
    path = tmp_path / "c" / "c" / name
    path.unlink()
    path.mkdir()
    capsys.readouterr()
    assert train_in_process(cfg, tmp_path, "c", "--resume", "auto") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} is a folder, not the run's file" in err, err


# ---- issue 65: the committed reference reruns bit for bit, through a preemption and a resume --------------------------
REFERENCE_RUN = REPO / "results" / "reference" / "vm-2cpu" / "05_linear_scaling" / "w32-s0"
TIMINGS = {"time", "epoch_time", "data_share", "data_s", "compute_s", "comm_s", "batch_time", "batch_time_avg",
           "data_time", "data_time_avg"}


def numbers_of(records: list[dict], epochs: set[int], keys: dict[str, set[str]]) -> list[dict]:
    """The iter and epoch records of these epochs, each cut to its kind's `keys` less the timings."""
    return [{k: r[k] for k in keys[r["kind"]] - TIMINGS} for r in records
            if r["kind"] in ("iter", "epoch") and r["epoch"] in epochs]


@pytest.mark.slow
def test_the_committed_reference_run_reruns_its_first_epochs_bit_for_bit_through_a_preemption(tmp_path):
    """Its config.json trained again with the kernels and threads it ran with: epoch 0 as committed; preempted in
    epoch 1 and resumed from the checkpoint, epoch 1 too. Only on the CPU model it was measured on (machine.toml:
    the same ISA and threads make it bit-identical there)."""
    from contract.machine import cpuinfo

    measured_on = tomllib.loads((REFERENCE_RUN.parents[1] / "machine.toml").read_text())["cpu_model"]
    model, flags = cpuinfo()
    if model != measured_on or "avx2" not in flags:
        pytest.skip(f"the reference ran on an {measured_on} with AVX2 kernels; this is {model}")
    run_dir = tmp_path / REFERENCE_RUN.name
    run_dir.mkdir()
    (run_dir / "config.json").write_bytes((REFERENCE_RUN / "config.json").read_bytes())
    env = trainer_env(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    for epoch, extra in ((0, ()), (1, ("--resume", "auto"))):  # each attempt stopped once its epoch is recorded
        proc = subprocess.Popen([sys.executable, "-m", "trainers", "train", str(run_dir / "config.json"), *extra],
                                env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        deadline = time.time() + 300
        while not [r for r in read_metrics(run_dir).of("epoch") if r["epoch"] == epoch] and time.time() < deadline:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 4, proc.stderr.read()[-2000:]
    committed, rerun = read_metrics(REFERENCE_RUN).records, read_metrics(run_dir).records
    keys = {kind: {k for r in committed if r["kind"] == kind for k in r} for kind in ("iter", "epoch")}  # (fewer)
    assert numbers_of(rerun, {0, 1}, keys) == numbers_of(committed, {0, 1}, keys)
    assert len(numbers_of(rerun, {0, 1}, keys)) == 6  # iterations 0 and 62 and the epoch record, of each epoch
    assert "=> resumed from the checkpoint at epoch 1" in (run_dir / "train.log").read_text()
