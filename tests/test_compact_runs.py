"""The migration to the compact form (python -m tools compact-runs): finished runs' record files gzip'd in place,
a progress line per experiment folder, a line per folder refused, and a second pass that changes nothing."""
from __future__ import annotations

import gzip
import hashlib
import json

from contract.locks import RankLock
from contract.runfolder import COMPACT, COMPACTED, CONFIG, CONSOLE, LOG, MANIFEST, METRICS
from tools import compact_runs
from tools.__main__ import main as tools_main


def run(root, experiment, name, status="completed", files=COMPACTED):
    folder = root / experiment / name
    folder.mkdir(parents=True)
    (folder / CONFIG).write_text("{}")
    (folder / MANIFEST).write_text(json.dumps({"status": status}))
    for file in files:
        (folder / file).write_text(f"{name} {file}\n" * 50)
    return folder


def snapshot(root) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_finished_runs_are_compacted_the_others_refused_in_a_line_each_and_a_second_pass_changes_nothing(
        tmp_path, capsys):
    done = run(tmp_path, "04_naive", "w1-s0")
    diverged = run(tmp_path, "04_naive", "w32-s0", "diverged", files=(METRICS, LOG))
    running = run(tmp_path, "05_linear", "w1-s0", "running")
    damaged = run(tmp_path, "05_linear", "w2-s0")
    (damaged / (LOG + COMPACT)).write_bytes(gzip.compress(b"x"))
    planned = tmp_path / "05_linear" / "w4-s0"
    planned.mkdir()
    (planned / CONFIG).write_text("{}")  # a run planned, not started: nothing to compact, nothing said
    plain = {name: (done / name).read_bytes() for name in COMPACTED}

    assert tools_main(["compact-runs", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"compact-runs: {tmp_path / '04_naive'}: 2 run folder(s), 5 file(s) gzip'd, " \
                     f"{out[0].split(', ')[-1]}" and "MB -> " in out[0]
    assert out[1].startswith(f"compact-runs: {tmp_path / '05_linear'}: 0 run folder(s)")
    refused = [line for line in out if line.startswith("  refused: ")]
    assert len(refused) == 2
    assert f"{running}: its run is running, not finished" in refused[1 if "w2" in refused[0] else 0]
    assert f"{damaged / LOG} and {LOG}{COMPACT} both in its folder" in "".join(refused)
    assert out[-1].endswith("; 2 refused")
    for name in COMPACTED:
        assert not (done / name).exists() and gzip.decompress((done / (name + COMPACT)).read_bytes()) == plain[name]
    assert sorted(p.name for p in diverged.iterdir()) == sorted([CONFIG, MANIFEST, METRICS + COMPACT, LOG + COMPACT])
    assert (running / METRICS).exists() and not (running / (METRICS + COMPACT)).exists()
    assert (damaged / METRICS).exists() and (damaged / LOG).exists()  # refused whole: not one file changed

    before = snapshot(tmp_path)
    assert compact_runs.main([str(tmp_path)]) == 1
    assert snapshot(tmp_path) == before  # idempotent
    again = capsys.readouterr().out.splitlines()
    assert [line for line in again if "refused" in line and "compact-runs:" not in line] == refused
    assert again[-1].startswith("compact-runs: 0 run folder(s), 0 file(s) gzip'd")


def test_a_compact_tree_is_left_byte_for_byte_and_said_so(tmp_path, capsys):
    run(tmp_path, "04_naive", "w1-s0")
    assert compact_runs.main([str(tmp_path)]) == 0
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert compact_runs.main([str(tmp_path)]) == 0
    assert snapshot(tmp_path) == before
    assert capsys.readouterr().out == ("compact-runs: 0 run folder(s), 0 file(s) gzip'd, 0.0 MB -> 0.0 MB; 0 refused "
                                       "(nothing plain left: already compact)\n")


def test_a_run_being_trained_is_refused(tmp_path, capsys):
    folder = run(tmp_path, "04_naive", "w1-s0")
    lock = RankLock(folder, 0)  # as a training process holds it
    try:
        assert compact_runs.main([str(tmp_path)]) == 1
    finally:
        lock.release()
    assert f"refused: {folder}: a process is training it" in capsys.readouterr().out
    assert (folder / CONSOLE).exists()


def test_a_missing_folder_is_one_line(tmp_path, capsys):
    assert compact_runs.main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith(f"compact-runs: no folder {tmp_path / 'nowhere'}")
