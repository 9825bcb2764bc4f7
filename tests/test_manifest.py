"""manifest.json declared and versioned (issue 49): every committed one is the declared record at the current
version, the run folder's writer refuses anything else, older manifests are migrated once by a kept script, and a
reader given an older one names that script."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from contract import manifest as declared
from contract import reader
from contract.fingerprint import document_fingerprint
from contract.runfolder import RunFolder
from tests.helpers import REPO
from tools import migrate_manifests as mm

COMMITTED = sorted(subprocess.run(["git", "ls-files", "*manifest.json"], cwd=REPO, capture_output=True, text=True,
                                  check=True).stdout.split())
#: a committed run whose manifest recorded its CPU (cpu.model) before `machine`, and one that recorded none
XEON_RUN = "results/reference/xeon-2cpu/13_steps_to_target/lamb-w1-s1"
VM_RUN = "results/reference/vm-2cpu/04_naive_scaling/w1-s0"
V1_FIELDS = ("manifest_version", "config_fingerprint", "machine", "smoke")


def test_every_committed_manifest_is_the_declared_record_at_the_current_version():
    assert len(COMMITTED) > 380  # the reference's and the analysis fixtures'
    wrong = [f"{path}: {declared.problem(json.loads((REPO / path).read_text()))}" for path in COMMITTED
             if declared.problem(json.loads((REPO / path).read_text()))]
    assert not wrong, wrong[:5]


def test_every_committed_manifest_holds_its_config_fingerprint():
    """The fingerprint a run was recorded with is its config.json's today: no change to contract/fingerprint.py may
    move a committed run to another condition unnoticed."""
    moved = [path for path in COMMITTED if json.loads((REPO / path).read_text())["config_fingerprint"]
             != document_fingerprint(json.loads((REPO / path).with_name("config.json").read_text()))]
    assert not moved, moved[:5]


def as_version_0(run_dir):
    """The run folder's manifest as the writers before the declaration left it: without the fields version 1 added
    (the CPU in `cpu`, torch's version in `versions`, where machine.py used to find them)."""
    path = run_dir / "manifest.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k not in V1_FIELDS},
                               indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("source", [XEON_RUN, VM_RUN])
def test_the_migration_gives_back_the_committed_manifest_and_changes_nothing_a_second_time(tmp_path, source):
    run_dir = tmp_path / "runs" / "13_x" / "r"
    shutil.copytree(REPO / source, run_dir)
    as_version_0(run_dir)
    assert mm.migrate(tmp_path / "runs") == (1, 0)
    assert (run_dir / "manifest.json").read_bytes() == (REPO / source / "manifest.json").read_bytes()
    assert reader.run_identity(run_dir) == reader.run_identity(REPO / source)  # the machine and fingerprint kept
    before = (run_dir / "manifest.json").stat().st_mtime_ns
    assert mm.migrate(tmp_path / "runs") == (0, 1)  # idempotent: a current manifest is not even rewritten
    assert (run_dir / "manifest.json").stat().st_mtime_ns == before


def test_the_migration_marks_smoke_runs_by_the_signs_that_used_to_tell_them(tmp_path):
    for root, extra in (("quick", {}), ("runs", {"capped_at_steps": 20}), ("runs", {})):
        run_dir = tmp_path / root / "04_naive_scaling" / f"r{len(extra)}"
        shutil.copytree(REPO / VM_RUN, run_dir)
        as_version_0(run_dir)
        m = json.loads((run_dir / "manifest.json").read_text())
        (run_dir / "manifest.json").write_text(json.dumps({**m, **extra}))
        mm.migrate(tmp_path / root)
    smoke = {str(p.parent.relative_to(tmp_path)): json.loads(p.read_text())["smoke"]
             for p in tmp_path.rglob("manifest.json")}
    assert smoke == {"quick/04_naive_scaling/r0": True, "runs/04_naive_scaling/r1": True,
                     "runs/04_naive_scaling/r0": False}


def test_a_reader_given_an_older_manifest_names_the_migration_in_one_line(tmp_path, capsys):
    run_dir = tmp_path / "runs" / "04_naive_scaling" / "w1-s0"
    shutil.copytree(REPO / VM_RUN, run_dir)
    as_version_0(run_dir)
    with pytest.raises(declared.ManifestError) as caught:  # the one-folder reader (a study, a resume) stops
        reader.read_manifest(run_dir)
    message = str(caught.value)
    assert message.count("\n") == 0 and "manifest_version is 0, older than 1" in message
    assert f"python -m tools migrate-manifests {tmp_path / 'runs'}" in message
    tree = reader.read_runs(tmp_path / "runs")  # a tree's reader leaves the folder out with that line (issue 64)
    assert tree["left_out"].tolist() == [True] and len(tree.attrs["problems"]) == 1
    assert f"python -m tools migrate-manifests {tmp_path / 'runs'}" in tree.attrs["problems"][0]
    from tools.__main__ import main

    assert main(["migrate-manifests", str(tmp_path / "runs")]) == 0
    assert "1 manifest(s) rewritten at version 1, 0 already current" in capsys.readouterr().out
    assert reader.read_manifest(run_dir)["manifest_version"] == declared.VERSION


@pytest.mark.parametrize("version, says", [(7, "manifest_version is 7, which this suite does not know"),
                                           (True, "manifest_version is True, which this suite does not know")])
def test_a_reader_given_a_version_it_does_not_know_says_so_without_offering_the_migration(tmp_path, version, says):
    run_dir = tmp_path / "runs" / "04_x" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"manifest_version": version, "status": "completed"}))
    with pytest.raises(declared.ManifestError, match=says) as caught:
        reader.read_manifest(run_dir)
    assert "migrate" not in str(caught.value)


@pytest.mark.parametrize("version", [0, 99, True, "1"])
def test_a_report_with_one_manifest_of_another_version_among_good_runs_reports_the_good_ones_and_one_line(
        tmp_path, version):
    from analysis.catalogue import make_report

    for name in ("w1-s0", "w1-s1"):
        shutil.copytree(REPO / VM_RUN, tmp_path / "runs" / "04_naive_scaling" / name)
    bad = tmp_path / "runs" / "04_naive_scaling" / "w1-s1"
    manifest = json.loads((bad / "manifest.json").read_text())
    (bad / "manifest.json").write_text(json.dumps({**manifest, "manifest_version": version}))
    info = make_report(tmp_path / "runs", tmp_path / "out", notebooks=False, quiet=True)
    assert info["runs"] == 1  # the good folder (the copy of one run would count once anyway: the bad one is out)
    [line] = [p for p in info["problems"] if str(bad) in p]
    assert "left out: manifest_version is" in line


def test_the_migration_refuses_what_it_cannot_migrate_in_one_line(tmp_path, capsys):
    from tools.__main__ import main

    run_dir = tmp_path / "runs" / "04_naive_scaling" / "w1-s0"
    shutil.copytree(REPO / VM_RUN, run_dir)
    (run_dir / "manifest.json").write_text(json.dumps({"manifest_version": 7}))
    assert main(["migrate-manifests", str(tmp_path / "runs")]) == 2
    assert "manifest_version 7 is none this suite knows" in capsys.readouterr().err
    as_version_0(run_dir)
    (run_dir / "config.json").unlink()
    assert main(["migrate-manifests", str(tmp_path / "runs")]) == 2
    assert "no readable config.json, so its manifest cannot be migrated" in capsys.readouterr().err


# ---- the writer: only begin/progress/end, each write checked against the declaration ------------------------------
BEGIN = dict(seed=0, machine={"cpu_model": "x"}, smoke=False, backend="single", world_size=1, workers=1, launcher="none",
             hosts=["h"], devices=["cpu"], versions={"torch": "2"}, git_commit=None)
CONFIG = {"experiment": "04_x", "run": "r", "scale": "local", "train": {"seed": 0}}


def test_begin_writes_the_whole_record_and_end_the_status(tmp_path):
    run = RunFolder(tmp_path / "r", writes=True, echo=False)
    run.begin(CONFIG, {"start": "s"}, **BEGIN)
    m = reader.read_manifest(tmp_path / "r")
    assert declared.problem(m) is None and m["status"] == "running" and m["attempts"] == [{"start": "s"}]
    assert m["config_fingerprint"] == document_fingerprint(CONFIG) and m["smoke"] is False
    run.progress(epochs_done=1, best_val_top1=50.0)
    run.end("completed", 1, exit_code=0)
    run.close()
    m = reader.read_manifest(tmp_path / "r")
    assert (m["status"], m["epochs_done"], m["exit_code"], m["best_val_top1"]) == ("completed", 1, 0, 50.0)
    assert declared.problem(m) is None
    assert [r["status"] for r in reader.read_metrics(tmp_path / "r").of("status")] == ["running", "completed"]


@pytest.mark.parametrize("write, says", [
    (lambda run: run.begin(CONFIG, **{**BEGIN, "colour": "blue"}), "colour is no field of the declared manifest"),
    (lambda run: run.begin(CONFIG, **{k: v for k, v in BEGIN.items() if k != "hosts"}), "hosts is missing"),
    (lambda run: run.progress(epochs_done="2"), "epochs_done is '2', not int"),
    (lambda run: run.progress(smoke=1), "smoke is 1, not bool"),
    (lambda run: run.end("finished", 1), "status is 'finished', not one of"),
    (lambda run: run.end("running", 1), "never running"),
])
def test_a_write_the_declaration_does_not_allow_is_refused_before_anything_is_written(tmp_path, write, says):
    run = RunFolder(tmp_path / "r", writes=True, echo=False)
    with pytest.raises(declared.ManifestError, match=says):
        write(run)
    run.close()
    assert not (tmp_path / "r" / "manifest.json").exists()


def test_the_manifest_is_written_by_the_run_folder_alone():
    """No module outside contract/runfolder.py and the migration writes manifest.json (the trainers, the TensorFlow
    trainer, the failure path and the made-up runs all go through begin/progress/end)."""
    found = subprocess.run(["git", "grep", "-n", "-E", r"update_manifest|write_manifest_anyway|/ MANIFEST, |"
                            r"MANIFEST\)\.write", "--", "*.py", ":!tests"], cwd=REPO, capture_output=True, text=True)
    writers = {line.split(":")[0] for line in found.stdout.splitlines()}
    assert found.returncode in (0, 1) and writers <= {"contract/runfolder.py"}, found.stdout + found.stderr
