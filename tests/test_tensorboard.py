"""TensorBoard event files (issue 52): written live by rank 0, rebuilt across resumes so each step is there once and
equal to metrics.jsonl, the same after the fact (`python -m analysis tensorboard`), and nothing without TensorBoard."""
import signal
import sys
import textwrap

import pytest

from contract import events
from contract.runfolder import CHECKPOINT, CONFIG, EVENTS_GLOB, LOG, MANIFEST, METRICS
from tests.helpers import REPO, f32, read_back, records, run, train_in_process, trainer_env, write_config
from tests.test_precision import preempt_at  # SIGUSR1 at a given training step: a mid-epoch checkpoint

pytest.importorskip("tensorboard", reason="TensorBoard is not installed (pip install -e '.[tensorboard]')")


def expected_from_records(run_dir) -> dict[str, list[tuple[int, float, float]]]:
    """What the event files must hold for the fields they copy, computed here from metrics.jsonl on its own: an
    iter record at step epoch * iters + iter + 1, an epoch record at its epoch's last step."""
    iters = records(run_dir, "iter")
    per_epoch = iters[0]["iters"]
    want: dict[str, list] = {}
    for rec in iters:
        for tag, name in events.FIELDS["iter"].items():
            want.setdefault(tag, []).append((rec["epoch"] * per_epoch + rec["iter"] + 1, rec["time"], f32(rec[name])))
    for rec in records(run_dir, "epoch"):
        for tag, name in events.FIELDS["epoch"].items():
            want.setdefault(tag, []).append(((rec["epoch"] + 1) * per_epoch, rec["time"], f32(rec[name])))
    return want


def assert_events_equal_records(run_dir) -> dict:
    """Each step once per tag, every copied field equal to its record, and every tag the mapping gives."""
    got = read_back(run_dir)
    for tag, points in got.items():
        steps = [step for step, _, _ in points]
        assert len(steps) == len(set(steps)), f"{tag}: a step written twice"
    for tag, points in expected_from_records(run_dir).items():
        assert got[tag] == points, tag
    assert set(got) == {"train/images_per_s", "train/data_share", "time/data_share", "time/compute_share",
                        "time/comm_share", *events.FIELDS["iter"], *events.FIELDS["epoch"]}
    return got


def test_a_run_writes_event_files_equal_to_its_records(tmp_path):
    cfg = write_config(tmp_path / "m.toml")  # 2 epochs of 6 steps, an iter record at each
    assert train_in_process(cfg, tmp_path, "whole") == 0
    got = assert_events_equal_records(tmp_path / "m" / "whole")
    assert [step for step, _, _ in got["train/loss"]] == list(range(1, 13))
    assert [step for step, _, _ in got["val/top1"]] == [6, 12]


def test_a_run_preempted_mid_epoch_and_resumed_holds_each_step_once(tmp_path, monkeypatch):
    cfg = write_config(tmp_path / "m.toml")
    preempt_at(monkeypatch, 6 + 3)  # epoch 1, after its third step: a mid-epoch checkpoint
    assert train_in_process(cfg, tmp_path, "cut") == 4
    monkeypatch.undo()
    assert train_in_process(cfg, tmp_path, "cut", "--resume", "auto") == 0
    run_dir = tmp_path / "m" / "cut"
    got = assert_events_equal_records(run_dir)
    assert [step for step, _, _ in got["train/loss"]] == list(range(1, 13))
    assert len(list(run_dir.glob(EVENTS_GLOB))) == 1  # the resume rebuilt them into one file


# Killed outright (SIGKILL, as a node that dies): no handler runs, nothing is flushed or checkpointed on the way out,
# so the resume goes back to epoch 1's start and writes again the steps of epoch 1 the killed attempt had written.
KILL_AT = textwrap.dedent("""
    import os, signal, sys
    from trainers import loop
    from trainers.__main__ import main
    step, calls = loop.step, []
    def killing_step(s, images, target):
        calls.append(1)
        if len(calls) == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
        return step(s, images, target)
    loop.step = killing_step
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.slow
def test_a_run_killed_mid_epoch_and_resumed_holds_each_step_once_with_the_resumed_values(tmp_path):
    cfg = write_config(tmp_path / "m.toml")
    run_dir = tmp_path / "m" / "cut"
    killed = run([sys.executable, "-c", KILL_AT, str(6 + 4), "train", str(cfg), "--out", str(tmp_path),
                  "--run", "cut"], env=trainer_env())
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    before = read_back(run_dir)
    assert [step for step, _, _ in before["train/loss"]] == list(range(1, 10))  # epoch 1's first 3 steps too
    resumed = run([sys.executable, "-m", "trainers", "train", str(cfg), "--out", str(tmp_path), "--run", "cut",
                   "--resume", "auto"], env=trainer_env())
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = assert_events_equal_records(run_dir)
    # epoch 1's steps are the resumed attempt's (their records' times), not the killed one's
    assert {t for step, t, _ in after["train/loss"] if step > 6}.isdisjoint(
        {t for step, t, _ in before["train/loss"] if step > 6})


def test_converting_a_finished_run_gives_what_the_live_writer_wrote(tmp_path):
    cfg = write_config(tmp_path / "m.toml")
    assert train_in_process(cfg, tmp_path, "whole") == 0
    live = read_back(tmp_path / "m" / "whole")
    done = run([sys.executable, "-m", "suite", "analysis", "tensorboard", "--runs", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"tensorboard --logdir {tmp_path}"
    assert read_back(tmp_path / "m" / "whole") == live
    again = run([sys.executable, "-m", "suite", "analysis", "tensorboard", "--runs", str(tmp_path)])
    assert again.returncode == 0 and read_back(tmp_path / "m" / "whole") == live  # rebuilt, not appended


def test_the_converter_leaves_a_training_run_to_its_own_writer(tmp_path):
    from analysis.events import convert
    from contract.locks import RankLock

    (tmp_path / "x" / "busy").mkdir(parents=True)
    (tmp_path / "x" / "busy" / METRICS).write_text("")
    lock = RankLock(tmp_path / "x" / "busy", 0)
    try:
        done = convert(tmp_path)
    finally:
        lock.release()
    assert done == {"runs": 0, "steps": 0, "training": [tmp_path / "x" / "busy"], "problems": [], "failed": 0}


def test_the_converter_says_what_is_wrong_in_one_line(tmp_path):
    done = run([sys.executable, "-m", "analysis", "tensorboard", "--runs", str(tmp_path / "nope")])
    assert done.returncode == 2 and done.stderr.startswith("error: no runs folder") and done.stderr.count("\n") == 1


def test_a_bench_record_draws_its_throughput_and_where_its_time_went():
    rec = {"kind": "bench", "time": 5.0, "per_worker_batch": 32, "world_size": 2, "batches": 20, "warmup_batches": 5,
           "lr": 0.1, "images_per_s_steady": 250.0, "images_per_s_thesis": None, "batch_time_avg_at_199": None,
           "data_share": 0.1, "data_s": 1.0, "compute_s": 6.0, "comm_s": 3.0}
    assert events.Scalars().of(rec) == (25, 5.0, [("bench/images_per_s_steady", 250.0), ("time/data_share", 0.1),
                                                   ("time/compute_share", 0.6), ("time/comm_share", 0.3)])


def test_without_tensorboard_a_run_writes_no_event_files_and_the_same_records(tmp_path, monkeypatch):
    cfg = write_config(tmp_path / "m.toml", {"train": {"epochs": 1}})
    for name in [m for m in sys.modules if m.split(".")[0] == "tensorboard"] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails, as where it is not installed
    assert not events.available()
    assert train_in_process(cfg, tmp_path, "plain") == 0
    run_dir = tmp_path / "m" / "plain"
    assert not list(run_dir.glob(EVENTS_GLOB))
    assert sorted(p.name for p in run_dir.iterdir() if not p.name.startswith(".")) == sorted(
        [CHECKPOINT, CONFIG, MANIFEST, METRICS, LOG])


def test_the_project_pins_tensorboard_in_an_extra():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(pin.startswith("tensorboard==") for pin in extras["tensorboard"])


@pytest.mark.slow
def test_the_committed_reference_converts_every_run(tmp_path):
    """make tensorboard OUT=results/reference/vm-2cpu, on a copy (the committed folders stay as they are)."""
    import shutil

    from analysis.events import convert, run_folders

    copy = shutil.copytree(REPO / "results" / "reference" / "vm-2cpu", tmp_path / "vm-2cpu")
    done = convert(copy)
    assert done["runs"] == len(run_folders(copy)) == 150 and done["training"] == []
    assert [d for d in run_folders(copy) if len(list(d.glob(EVENTS_GLOB))) != 1] == []
