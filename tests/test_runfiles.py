"""A run's record files, plain or compact (contract/runfiles.py): the one opener reads both forms alike, a folder
holding both forms of one file is refused in one line, compacting is deterministic and idempotent, a gzip'd real
run reads exactly as its plain form, and every committed run folder is compact."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pandas as pd
import pytest

from analysis.logs import parse_log
from analysis.runs import load_run, load_runs
from contract import reader, runfiles
from contract.runfolder import COMPACT, COMPACTED, CONFIG, CONSOLE, LOG, MANIFEST, METRICS, RunFolder
from tests.helpers import REPO, train_in_process, write_config

LINES = b'{"kind": "status", "time": 1.0, "status": "running", "epoch": 0}\n' * 3


def both(folder, name, data=LINES):
    """A folder holding `name` plain and gzip'd."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    (folder / (name + COMPACT)).write_bytes(gzip.compress(data))


# ---- the opener --------------------------------------------------------------------------------------------------
def test_the_opener_reads_a_plain_and_a_gzipd_file_alike_by_either_name(tmp_path):
    (tmp_path / "plain").mkdir(), (tmp_path / "gz").mkdir()
    (tmp_path / "plain" / CONSOLE).write_bytes(LINES)
    (tmp_path / "gz" / (CONSOLE + COMPACT)).write_bytes(gzip.compress(LINES))
    for path in (tmp_path / "plain" / CONSOLE, tmp_path / "gz" / CONSOLE, tmp_path / "gz" / (CONSOLE + COMPACT)):
        assert runfiles.read_run_file(path) == LINES, path
        with runfiles.open_run_file(path) as f:  # seekable from its end, as the tail readers need
            f.seek(-10, 2)
            assert f.read() == LINES[-10:]
        assert runfiles.run_file_exists(path)
    assert not runfiles.run_file_exists(tmp_path / "plain" / LOG)
    with pytest.raises(FileNotFoundError):
        runfiles.open_run_file(tmp_path / "plain" / LOG)


def test_a_file_in_both_forms_is_refused_in_one_line_naming_it_and_never_guessed(tmp_path):
    both(tmp_path / "r", METRICS)
    with pytest.raises(runfiles.TwoForms) as caught:
        runfiles.read_run_file(tmp_path / "r" / METRICS)
    line = str(caught.value)
    assert "\n" not in line and str(tmp_path / "r" / METRICS) in line and METRICS + COMPACT in line
    assert runfiles.two_forms(tmp_path / "r") == line
    assert runfiles.two_forms(tmp_path) is None


def test_a_damaged_gzip_file_is_an_unreadable_file_not_a_crash(tmp_path):
    (tmp_path / (METRICS + COMPACT)).write_bytes(gzip.compress(LINES)[:-12])  # cut short
    with pytest.raises(OSError):
        runfiles.read_run_file(tmp_path / METRICS)
    assert reader.read_metrics(tmp_path).problem.startswith("unreadable (")


# ---- compacting --------------------------------------------------------------------------------------------------
def test_compacting_is_deterministic_idempotent_and_keeps_every_byte(tmp_path):
    for copy in ("a", "b"):
        (tmp_path / copy).mkdir()
        for name in COMPACTED:
            (tmp_path / copy / name).write_bytes(LINES + name.encode())
    first = runfiles.compact_folder(tmp_path / "a")
    assert first == list(COMPACTED)
    assert runfiles.compact_folder(tmp_path / "a") == []  # a second pass changes nothing
    runfiles.compact_folder(tmp_path / "b")
    for name in COMPACTED:
        gz = (tmp_path / "a" / (name + COMPACT)).read_bytes()
        assert gz == (tmp_path / "b" / (name + COMPACT)).read_bytes()  # no time stamp, no file name in it
        assert gz[4:8] == b"\0\0\0\0" and gzip.decompress(gz) == LINES + name.encode()
        assert not (tmp_path / "a" / name).exists()


def test_compacting_a_folder_holding_both_forms_refuses_and_touches_nothing(tmp_path):
    both(tmp_path, LOG, b"plain")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(runfiles.TwoForms):
        runfiles.compact_folder(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# ---- a real run, plain and compact -------------------------------------------------------------------------------
TINY = {"data": {"kind": "generated", "classes": 4, "per_class": 6, "val_per_class": 2, "image_size": 16,
                 "loader_workers": 0},
        "model": {"num_classes": 4}, "train": {"epochs": 2, "workers": 1, "per_worker_batch": 4}}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A tiny real run (the trainer's own files) and a gzip'd copy of it made by the migration's function."""
    root = tmp_path_factory.mktemp("runs")
    assert train_in_process(write_config(root / "c.toml", TINY), root / "plain", "r") == 0
    plain = root / "plain" / "c" / "r"
    (plain / CONSOLE).write_text("a study's capture of the trainer's output\n")
    compact = shutil.copytree(plain, root / "compact" / "c" / "r")
    assert runfiles.compact_folder(compact) == list(COMPACTED)
    return plain, compact


def test_a_gzipd_real_run_holds_only_the_compact_forms(real_run):
    _, compact = real_run
    names = {p.name for p in compact.iterdir()}
    assert {n + COMPACT for n in COMPACTED} <= names and not names & set(COMPACTED)
    assert {CONFIG, MANIFEST} <= names


def test_every_reader_reads_a_gzipd_real_run_as_its_plain_form(real_run):
    plain, compact = real_run
    assert reader.read_metrics(compact) == reader.read_metrics(plain)
    assert len(reader.read_metrics(plain).records) > 5
    for kind in ("epoch", "status", "iter"):
        assert reader.last_record(compact / METRICS, kind) == reader.last_record(plain / METRICS, kind)
    assert reader.identity_problem(compact) is None and reader.record_problem(compact) is None
    assert reader.find_runs(compact.parents[1]) == [compact]
    same_frames(reader.read_run(plain), reader.read_run(compact))
    same_frames(load_run(plain)[0], load_run(compact)[0])
    same_frames(load_runs(plain.parents[1]), load_runs(compact.parents[1]))
    logs = parse_log(plain / LOG), parse_log(compact / LOG)
    assert logs[0].tool == logs[1].tool == "pytorch-examples"
    pd.testing.assert_frame_equal(logs[0].train, logs[1].train)
    pd.testing.assert_frame_equal(logs[0].epochs, logs[1].epochs)
    assert runfiles.read_run_file(compact / CONSOLE) == (plain / CONSOLE).read_bytes()


def same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal but for where each folder lies."""
    assert len(a) > 1
    pd.testing.assert_frame_equal(a.drop(columns="path"), b.drop(columns="path"))
    assert [p.split(": ", 1)[-1] for p in a.attrs["problems"]] == [p.split(": ", 1)[-1] for p in b.attrs["problems"]]


def test_the_reader_leaves_out_a_folder_holding_both_forms_with_its_line(real_run, tmp_path):
    plain, _ = real_run
    damaged = shutil.copytree(plain, tmp_path / "c" / "r")
    (damaged / (METRICS + COMPACT)).write_bytes(gzip.compress((plain / METRICS).read_bytes()))
    row = reader.read_run(damaged).iloc[0]
    assert bool(row["left_out"]) and len(row["problems"]) == 1
    assert runfiles.two_forms(damaged) in row["problems"][0]
    assert reader.record_problem(damaged) is not None  # a study neither skips nor resumes it


def test_a_fresh_writer_drops_an_earlier_attempts_compact_records_rather_than_leave_two_forms(tmp_path):
    both(tmp_path, METRICS)
    (tmp_path / METRICS).unlink()
    (tmp_path / (LOG + COMPACT)).write_bytes(gzip.compress(b"old\n"))
    run = RunFolder(tmp_path, writes=True, echo=False)
    run.close()
    assert runfiles.two_forms(tmp_path) is None and not list(tmp_path.glob("*" + COMPACT))


def test_a_resuming_writer_refuses_a_compact_folder(tmp_path):
    (tmp_path / (METRICS + COMPACT)).write_bytes(gzip.compress(LINES))
    with pytest.raises(Exception, match="compact"):
        RunFolder(tmp_path, writes=True, echo=False, fresh=False)
    assert not (tmp_path / METRICS).exists()


# ---- the committed reference ------------------------------------------------------------------------------------
def tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *paths], cwd=REPO, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_every_committed_run_folder_is_compact():
    files = tracked("results/reference")
    plain = [p for p in files if p.rsplit("/", 1)[-1] in COMPACTED]
    assert not plain, f"{len(plain)} plain record file(s) committed, e.g. {plain[:3]}: python -m tools compact-runs"
    folders = {p.rsplit("/", 1)[0] for p in files if p.endswith("/" + CONFIG)}
    without = sorted(f for f in folders if f"{f}/{METRICS}{COMPACT}" not in set(files))
    assert len(folders) > 600 and not without, without[:3]


def test_the_tracked_tree_is_at_most_48_mib():
    size = sum((REPO / p).stat().st_size for p in tracked() if (REPO / p).is_file())
    assert size <= 48 * 2 ** 20, f"{size / 2 ** 20:.1f} MiB tracked"


def test_a_committed_compact_run_reads_as_a_run(tmp_path):
    run_dir = REPO / "results/reference/vm-2cpu/04_naive_scaling/w1-s0"
    metrics = reader.read_metrics(run_dir)
    assert metrics.problem is None and metrics.bad_lines == 0 and metrics.of("epoch")
    assert json.loads(json.dumps(metrics.records[-1]))["kind"] == "status"
