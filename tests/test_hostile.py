"""Issue 64, the third hostile round, its remaining rows: each bad input is one line naming the file or value and
what to do, a non-zero exit where the command could not do its job, nothing written before the refusal, and the good
run folders still read beside a bad one. Every row is played on real records: a run the trainer trained here, or a
committed reference run copied.

(Rows fixed with their own mechanism are tested beside it: the advisor's inputs in test_advisor_inputs.py, the Slurm
clients in test_slurm_client.py, manifests of another version in test_manifest.py, checkpoint damage in
test_run_identity.py, a profile's signal and reference-add's --machine in test_run_identity.py and
test_reference_add.py, the browser test's network in test_report_page.py.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, trainer_env, write_config

VM_RUN = REPO / "results/reference/vm-2cpu/04_naive_scaling/w1-s0"  # a committed run: its records as written


def one_error(capsys, starts: str = "error: "):
    """What a refused command printed, its one line (stderr) checked to be one line with no traceback."""
    captured = capsys.readouterr()
    assert captured.err.startswith(starts) and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.out + captured.err
    return captured


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root with its kind, size and modification time: what a refusal must leave as it was."""
    if not os.path.lexists(root):
        return {}
    return {str(p.relative_to(root)): (p.is_symlink(), p.is_dir(), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


# ---- a study's tiny experiment and one of its runs trained for real ------------------------------------------------
def tiny_study(root: Path) -> Path:
    folder = root / "99_tiny"
    folder.mkdir(parents=True)
    config = write_config(folder / "config.toml")  # 2 epochs
    config.write_text(config.read_text() + '[study]\nvary = { "train.workers" = [2] }\n')
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A root holding the tiny study and its one run, completed by the trainer from the config.json the study
    plans (as a study starts it); each test copies it."""
    from contract.plan import study_plan
    from studies.launch import planned_runs, write_planned
    from trainers.__main__ import main

    root = tmp_path_factory.mktemp("trained")
    folder = tiny_study(root)
    plan = planned_runs(study_plan(folder, "local", False, None, []), "local", root / "runs")[0]
    write_planned(plan)
    assert main(["train", str(plan.run_dir / "config.json")]) == 0
    return root


def copied(trained: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the study's folder, its runs root, the completed run's folder) in a copy of the trained root."""
    shutil.copytree(trained, tmp_path / "t")
    run_dir = next((tmp_path / "t" / "runs" / "99_tiny").iterdir())
    return tmp_path / "t" / "99_tiny", tmp_path / "t" / "runs", run_dir


def study(folder: Path, runs: Path, *extra: str) -> int:
    from suite.__main__ import main

    return main(["study", str(folder), "--out", str(runs), "--jobs", "1", *extra])


# ---- counted wrong: a completed run whose config.json was edited after it ran ---------------------------------------
def edit_epochs(run_dir: Path, epochs: int) -> None:
    config = json.loads((run_dir / "config.json").read_text())
    config["train"]["epochs"] = epochs
    (run_dir / "config.json").write_text(json.dumps(config))


def test_a_completed_run_whose_config_was_edited_is_not_skipped_as_done_by_the_plan_it_now_names(
        trained, tmp_path, capsys):
    folder, runs, run_dir = copied(trained, tmp_path)
    edit_epochs(run_dir, 3)  # a 2-epoch run whose config.json now says 3: its manifest and records say 2
    before = tree(runs)
    assert study(folder, runs, "--set", "train.epochs=3") == 2
    captured = one_error(capsys)
    assert f"{run_dir} holds a run whose config.json's fingerprint" in captured.err
    assert "config.json was changed after the run" in captured.err and f"rm -r {run_dir}" in captured.err
    assert "skipped" not in captured.out and tree(runs) == before  # nothing started, nothing written


def test_a_manifest_fingerprint_that_is_not_its_configs_does_not_pass(trained, tmp_path, capsys):
    folder, runs, run_dir = copied(trained, tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "config_fingerprint": "deadbeef0000"}))
    assert study(folder, runs) == 2
    captured = one_error(capsys)
    assert "'deadbeef0000' its manifest.json recorded" in captured.err and "skipped" not in captured.out


def test_the_report_leaves_an_edited_run_out_with_a_line_and_reports_the_good_one_beside_it(trained, tmp_path):
    from analysis.catalogue import make_report

    _, runs, run_dir = copied(trained, tmp_path)
    shutil.copytree(VM_RUN, runs / "04_naive_scaling" / "w1-s0")  # a good folder beside the bad one
    edit_epochs(run_dir, 3)
    info = make_report(runs, tmp_path / "report", notebooks=False, quiet=True)
    assert info["runs"] == 1  # the good one; the edited run is counted nowhere, not as a completed 3-epoch run
    [line] = [p for p in info["problems"] if str(run_dir) in p]
    assert line.startswith(f"{run_dir}: left out: config.json's fingerprint") and f"rm -r {run_dir}" in line


# ---- silently wrong: a completed run whose metrics.jsonl is gone ---------------------------------------------------
@pytest.mark.parametrize("damage, said", [("delete", "metrics.jsonl is missing"),
                                          ("folder", "metrics.jsonl is unreadable (IsADirectoryError"),
                                          ("empty", "metrics.jsonl is empty")])
def test_a_completed_run_whose_records_are_gone_is_neither_skipped_nor_resumed(trained, tmp_path, capsys, damage,
                                                                                said):
    folder, runs, run_dir = copied(trained, tmp_path)
    metrics = run_dir / "metrics.jsonl"
    metrics.unlink()
    if damage == "folder":
        metrics.mkdir()
    elif damage == "empty":
        metrics.write_text("")
    before = tree(runs)
    assert study(folder, runs) == 2
    captured = one_error(capsys)
    assert f"{run_dir} holds a run whose manifest.json says completed but its {said}" in captured.err
    assert "what the run trained cannot be read" in captured.err and f"rm -r {run_dir}" in captured.err
    assert "skipped" not in captured.out and tree(runs) == before


def test_reference_add_refuses_a_finished_run_whose_records_are_gone(trained, tmp_path):
    from contract.config import ConfigError
    from tools import reference_add

    _, runs, run_dir = copied(trained, tmp_path)
    (run_dir / "metrics.jsonl").unlink()
    (tmp_path / "ref" / "here").mkdir(parents=True)
    (tmp_path / "ref" / "here" / "machine.toml").write_text('label = "here"\ncpu_model = "any"\n')
    with pytest.raises(ConfigError, match="metrics.jsonl is missing: what the run trained cannot be read; restore "
                                          "it, or leave it out of the reference"):
        reference_add.add(runs / "99_tiny", "here", tmp_path / "ref")
    assert not (tmp_path / "ref" / "here" / "99_tiny").exists()


def test_the_completed_run_itself_is_still_skipped_as_done(trained, tmp_path, capsys):
    folder, runs, _ = copied(trained, tmp_path)
    assert study(folder, runs) == 0
    assert "skipped, already completed" in capsys.readouterr().out


# ---- silently wrong: a --set the study overrides in every run --------------------------------------------------------
@pytest.mark.parametrize("setting, extra, said", [
    ("train.seed=7", [], "a study gives each run its own seed"),
    ("train.workers=4", [], "the study sets train.workers per run ([study] in"),
    # QUICK's settings are experiments/scales.toml's, which a real experiment finds; --dry-run bounds the test
    ("train.epochs=5", ["--quick", "--dry-run"], "QUICK sets train.epochs in every run"),
])
def test_a_set_the_study_would_ignore_is_one_line_and_nothing_is_written(tmp_path, capsys, setting, extra, said):
    folder = REPO / "experiments" / "04_naive_scaling" if "--quick" in extra else tiny_study(tmp_path)
    runs = tmp_path / "runs"
    assert study(folder, runs, "--set", setting, *extra) == 2
    assert f"error: --set {setting}: {said}" in one_error(capsys).err
    assert not runs.exists()


# ---- tracebacks: a run folder that is a symbolic link to no folder ---------------------------------------------------
@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_a_run_folder_that_is_a_broken_link_is_one_line_for_the_trainer_and_the_study(tmp_path, capsys, link):
    from contract.plan import study_plan
    from studies.launch import planned_runs
    from tests.helpers import train_in_process

    folder = tiny_study(tmp_path)
    runs = tmp_path / "runs"
    run_dir = planned_runs(study_plan(folder, "local", False, None, []), "local", runs)[0].run_dir
    run_dir.parent.mkdir(parents=True)
    run_dir.symlink_to(run_dir.name if link == "loop" else "/nonexistent/run")  # ELOOP; FileExistsError on mkdir
    said = {"loop": f"is a symbolic link that loops ({run_dir} -> {run_dir.name})",
            "dangling": "is a symbolic link to /nonexistent/run, which does not exist"}[link]
    before = tree(runs)
    assert study(folder, runs) == 2
    err = one_error(capsys).err
    assert f"{run_dir} cannot hold the run: {run_dir} {said}; remove the link (rm {run_dir})" in err
    assert tree(runs) == before
    assert train_in_process(folder / "config.toml", runs, run_dir.name) == 2  # the trainer, by hand
    err = one_error(capsys).err
    assert f"output folder {run_dir} cannot be made: {run_dir} {said}; remove the link (rm {run_dir})" in err
    assert tree(runs) == before


# ---- silently wrong: two runs folders of one base name share results/report/<name> ---------------------------------
def test_a_second_runs_folder_of_the_same_name_never_clears_the_first_ones_report(tmp_path, monkeypatch, capsys):
    from analysis import report
    from analysis.__main__ import main
    from analysis.catalogue import make_report

    monkeypatch.setattr(report, "REPORT_ROOT", tmp_path / "report")
    first, second = tmp_path / "a" / "runs", tmp_path / "b" / "runs"
    for runs in (first, second):
        shutil.copytree(VM_RUN, runs / "04_naive_scaling" / "w1-s0")
    info = make_report(first, notebooks=False, quiet=True)
    out = Path(info["out"])
    assert out == tmp_path / "report" / "runs"
    before = tree(out)
    assert main(["report", "--runs", str(second), "--no-notebooks"]) == 2
    err = one_error(capsys, "analysis report: ").err
    assert f"{out} holds the report of {first.resolve()}, another runs folder; the report of {second}" in err
    assert "--out DIR" in err and tree(out) == before  # the first report as it was
    assert main(["report", "--runs", str(second), "--out", str(tmp_path / "b-report"), "--no-notebooks"]) == 0
    assert make_report(first, notebooks=False, quiet=True)["out"] == str(out)  # its own folder again


# ---- silently wrong: migrate-manifests calling `machine: [1]` current -----------------------------------------------
def test_migrate_manifests_refuses_a_current_manifest_that_is_not_the_record_and_writes_nothing(tmp_path, capsys):
    from tests.test_manifest import as_version_0
    from tools.__main__ import main

    old, bad = tmp_path / "runs" / "04_naive_scaling" / "w1-s0", tmp_path / "runs" / "04_naive_scaling" / "w1-s1"
    for run_dir in (old, bad):
        shutil.copytree(VM_RUN, run_dir)
    as_version_0(old)  # one the migration would rewrite...
    manifest = json.loads((bad / "manifest.json").read_text())
    (bad / "manifest.json").write_text(json.dumps({**manifest, "machine": [1]}))  # ...beside a damaged current one
    before = tree(tmp_path / "runs")
    assert main(["migrate-manifests", str(tmp_path / "runs")]) == 2
    err = one_error(capsys).err
    assert f"{bad / 'manifest.json'}: machine is [1], not dict, though its manifest_version is current" in err
    assert tree(tmp_path / "runs") == before  # the old one not migrated either: nothing written before the refusal
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert main(["migrate-manifests", str(tmp_path / "runs")]) == 0
    assert "1 manifest(s) rewritten at version 1, 1 already current" in capsys.readouterr().out


# ---- tracebacks: make tensorboard on a bad record, and on a read-only folder -----------------------------------------
def two_trained_runs(trained: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the runs root, its first run folder, its second): the trained run and a copy of it under another name."""
    _, runs, run_dir = copied(trained, tmp_path)
    second = run_dir.with_name("zz-" + run_dir.name)
    shutil.copytree(run_dir, second)
    return runs, run_dir, second


def converted(runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis", "tensorboard", "--runs", str(runs)], cwd=REPO,
                          env=trainer_env(), capture_output=True, text=True, timeout=300)


def test_an_iter_record_without_iters_leaves_that_record_out_and_every_run_gets_its_event_files(trained, tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed (make setup-tensorboard)")
    from contract.runfolder import EVENTS_GLOB
    from tests.helpers import read_back

    runs, first, second = two_trained_runs(trained, tmp_path)
    lines = (first / "metrics.jsonl").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "iter")
    record = json.loads(lines[at])
    del record["iters"]
    lines[at] = json.dumps(record)
    (first / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    done = converted(runs)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"problem: {first / 'metrics.jsonl'}: left out of its event files: 1 iter record(s) without a " \
           "whole-number 'iters'; fix or remove those lines" in done.stdout
    assert len(list(second.glob(EVENTS_GLOB))) == 1 and len(list(first.glob(EVENTS_GLOB))) == 1
    steps = [step for step, _, _ in read_back(first)["train/loss"]]
    assert len(steps) == len([line for line in lines if '"kind": "iter"' in line]) - 1  # only that one left out
    assert read_back(second)["train/loss"][0][0] == 1  # the run after it: every step


def test_a_read_only_run_folder_is_one_problem_line_and_the_others_are_converted(trained, tmp_path):
    """The converter in a mount namespace of its own where the first run folder is a read-only bind mount: the
    machine's mounts are never touched, and the mount is gone with the process."""
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed (make setup-tensorboard)")
    from contract.runfolder import EVENTS_GLOB

    runs, first, second = two_trained_runs(trained, tmp_path)
    for run_dir in (first, second):
        for path in run_dir.glob(EVENTS_GLOB):
            path.unlink()  # the trainer's own, if it wrote them: none now
    script = (f"mount --bind {first} {first} && mount -o remount,bind,ro {first} {first} && "
              f"exec {sys.executable} -m analysis tensorboard --runs {runs}")
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script], cwd=REPO, env=trainer_env(),
                          capture_output=True, text=True, timeout=300)
    if "mount" in done.stderr and "Traceback" not in done.stderr and done.returncode not in (0, 1):
        pytest.skip(f"no private read-only bind mount here: {done.stderr.strip()[:200]}")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"problem: {first}: no event files written (Read-only file system: " in done.stdout
    assert "make it writable, or copy the runs to a writable folder and convert the copy" in done.stdout
    assert "event files for 1 runs" in done.stdout and "1 run folder(s) could not be written" in done.stdout
    assert not list(first.glob(EVENTS_GLOB)) and len(list(second.glob(EVENTS_GLOB))) == 1
