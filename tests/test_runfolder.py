"""The run folder: declared records, the one writer and reader, locks, run names, resume cut-back, failed ranks."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from analysis.__main__ import main as analysis_main
from analysis.runs import load_run, load_study
from tests.helpers import REPO, records, train, train_in_process, trainer_env, write_config
from contract import locks, reader
from contract.config import load_config
from contract.locks import RankLock
from contract.lr import schedule
from contract.reader import read_metrics
from contract.runfolder import RecordError, RunFolder, make_record
from trainers.backends import free_port
from contract.manifest import VERSION

EPOCH = dict(epoch=0, lr=0.1, train_loss=1.0, train_top1=50.0, train_top5=90.0, val_loss=1.0, val_top1=40.0,
             val_top5=80.0, epoch_time=1.0, images=8, steps=1, step=1, skipped_images=0, skipped_val_images=0, skipped_steps=0,
             data_share=0.1, data_s=0.1, compute_s=0.8, comm_s=0.0)


# ================================================================================================================
# The schema: what is not declared cannot be written
# ================================================================================================================
def test_a_declared_record_is_written_with_kind_and_time(tmp_path):
    run = RunFolder(tmp_path, writes=True, echo=False, clock=lambda: 12.5)
    run.record("epoch", **EPOCH)
    run.record("util", t=1.0, host="h", rank=0, cpu_process_pct=50.0, cpu_system_pct=60.0, mem_process_gb=1.0,
               mem_system_pct=30.0, gpus=[{"index": 0, "nvml_index": 2, "util_pct": 99.0, "mem_used_gb": 3.0,
                                           "power_w": None}])
    run.close()
    first, second = read_metrics(tmp_path).records
    assert first == {"kind": "epoch", **EPOCH, "time": 12.5}
    assert second["gpus"] == [{"index": 0, "nvml_index": 2, "util_pct": 99.0, "mem_used_gb": 3.0, "power_w": None}]


@pytest.mark.parametrize("kind, fields, message", [
    ("epochs", EPOCH, "unknown record kind 'epochs'"),
    ("epoch", {**EPOCH, "val_top10": 1.0}, "unknown field(s) val_top10"),
    ("epoch", {k: v for k, v in EPOCH.items() if k != "comm_s"}, "comm_s"),
    ("epoch", {**EPOCH, "epoch": 1.5}, "epoch = 1.5"),
    ("epoch", {**EPOCH, "images": True}, "images = True"),
    ("status", {"status": "finished", "epoch": 0}, "unknown status 'finished'"),
    ("util", {"t": 0.0, "host": "h", "rank": 0, "cpu_process_pct": 1.0, "cpu_system_pct": 1.0, "mem_process_gb": 1.0,
              "mem_system_pct": 1.0, "gpus": [{"index": 0, "util_pct": 1.0}]}, "mem_used_gb"),
])
def test_an_undeclared_kind_or_field_is_an_error_before_anything_is_written(tmp_path, kind, fields, message):
    run = RunFolder(tmp_path, writes=True, echo=False)
    with pytest.raises(RecordError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run.record(kind, **fields)
    run.close()
    assert (tmp_path / "metrics.jsonl").read_bytes() == b""


def test_runfolder_and_the_analysis_loader_import_without_torch():
    code = "import sys, contract.runfolder, analysis.runs, tests.synth_records; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], env=trainer_env(), cwd=REPO).returncode == 0


# ================================================================================================================
# The reader: JSON per line, bad lines counted, problems named
# ================================================================================================================
def test_reader_keeps_every_good_line_and_counts_the_bad_ones(tmp_path):
    good = json.dumps(make_record("status", status="running", epoch=0)).encode()
    lines = [good, b"not json", b"[1, 2]", b'{"kind": "nonsense"}', b'{"no": "kind"}',
             b'{"kind": "status", "status": "r\xff"}', good, good[:20]]  # a bad byte; a line cut by a kill
    (tmp_path / "metrics.jsonl").write_bytes(b"\n".join(lines))
    m = read_metrics(tmp_path)
    assert len(m.records) == 2 and m.bad_lines == 6 and m.problem is None


@pytest.mark.parametrize("content, problem", [(b"", "empty"), (b"\n\n", "empty"), (b"garbage\n", "no readable record")])
def test_reader_names_an_empty_or_useless_file(tmp_path, content, problem):
    (tmp_path / "metrics.jsonl").write_bytes(content)
    assert read_metrics(tmp_path).problem == problem


def test_reader_names_a_missing_or_unreadable_file(tmp_path):
    assert read_metrics(tmp_path).problem == "missing"
    (tmp_path / "metrics.jsonl").mkdir()
    assert read_metrics(tmp_path).problem.startswith("unreadable")


def fake_run(root, name, metrics: bytes):
    d = root / "05_x" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"experiment": "05_x", "run": name}))
    (d / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": "completed", "epochs_done": 0}))
    (d / "metrics.jsonl").write_bytes(metrics)
    return d


def test_empty_metrics_and_bad_lines_reach_the_problem_list_and_the_report_index(tmp_path):
    fake_run(tmp_path / "runs", "empty", b"")
    good = json.dumps(make_record("epoch", **EPOCH)).encode()
    fake_run(tmp_path / "runs", "bad", good + b"\nnot json\n" + good[:10])
    df = load_study(tmp_path / "runs")
    problems = "\n".join(df.attrs["problems"])
    assert "empty: metrics.jsonl: empty" in problems and "bad: metrics.jsonl: 2 bad line(s) skipped" in problems
    runs = df[df["kind"] == "run"].set_index("run")
    assert runs.loc["bad", "bad_lines"] == 2 and runs.loc["bad", "best_val_top1"] == 40.0


def test_throughput_json_gives_bad_lines_for_a_run_folder(tmp_path, capsys):
    good = json.dumps(make_record("status", status="running", epoch=0)).encode()
    d = fake_run(tmp_path, "r", good + b"\n{broken\n")
    assert analysis_main(["throughput", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bad_lines"] == 1 and out["problems"][0] == "metrics.jsonl: 1 bad line(s) skipped"
    assert out["problems"][1:] == ["metrics.jsonl: no epoch record, though the run is completed with 0 epoch(s) "
                                   "done: its accuracy is unknown"]  # the fixture's manifest says completed


# ================================================================================================================
# Round trip: a real (tiny) training run -> the analysis loader
# ================================================================================================================
GENERATED = {"data": {"kind": "generated", "classes": 4, "per_class": 6, "val_per_class": 2, "image_size": 16,
                      "loader_workers": 0},
             "model": {"num_classes": 4}, "train": {"epochs": 2, "workers": 1, "per_worker_batch": 4}}


def test_a_real_run_loads_into_the_expected_rows(tmp_path):
    cfg = write_config(tmp_path / "rt.toml", GENERATED)
    assert train_in_process(cfg, tmp_path, "r") == 0
    run_dir = tmp_path / "rt" / "r"
    written = records(run_dir, "epoch")
    df, problems = load_run(run_dir)
    assert problems == []
    summary = df[df["kind"] == "run"].iloc[0]
    assert summary["status"] == "completed" and summary["epochs_done"] == 2 and summary["bad_lines"] == 0
    assert summary["gpus"] == 1 and summary["per_gpu_batch"] == 4 and summary["global_batch"] == 4
    epochs = df[df["kind"] == "epoch"].sort_values("epoch")
    assert epochs["epoch"].tolist() == [0, 1]
    assert epochs["val_top1"].tolist() == [r["val_top1"] for r in written]
    assert epochs["train_loss"].tolist() == [r["train_loss"] for r in written]
    assert summary["best_val_top1"] == max(r["val_top1"] for r in written)
    assert (epochs["images"] == 24).all() and (epochs["comm_s"] == 0).all() and (epochs["compute_s"] > 0).all()
    planned = schedule(load_config(cfg).lr_policy(), 2)
    assert df[df["kind"] == "schedule"]["planned_lr"].tolist() == epochs["epoch_lr"].tolist() == planned
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["threads"]["torch"] == 1 and manifest["versions"]["torch"] == torch.__version__.split("+")[0]


def test_benchmark_records_the_learning_rate_it_set_and_the_time_split(tmp_path):
    cfg = write_config(tmp_path / "b.toml", {"bench": {"batches": 3, "warmup_batches": 1},
                                             "lr": {"warmup": "stepping", "warmup_epochs": 1},
                                             "train": {"workers": 1}})
    assert train_in_process(cfg, tmp_path, "b") == 0
    bench = records(tmp_path / "b" / "b", "bench")[-1]
    policy = load_config(cfg).lr_policy()
    assert bench["lr"] == pytest.approx(policy.target / 2)  # stepping warm-up's first epoch: target x 1/2, not target
    assert all(r["lr"] == bench["lr"] for r in records(tmp_path / "b" / "b", "iter"))
    assert bench["comm_s"] == 0 and bench["data_s"] >= 0 and bench["compute_s"] > 0


# ================================================================================================================
# Integrity: run names, locks, folders without a manifest
# ================================================================================================================
@pytest.mark.parametrize("name", ["../x", "/tmp/x", "..", "a/b", ""])
def test_a_run_name_that_leaves_the_output_folder_is_refused(tmp_path, capsys, name):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path / "out", name) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be a plain folder name" in err[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


def test_a_run_held_by_another_process_is_refused_without_touching_its_files(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    run_dir = tmp_path / "c" / "r"
    lock = RankLock(run_dir, 0)  # as a training process holds it
    (run_dir / "metrics.jsonl").write_text("theirs\n")
    try:
        for extra in ((), ("--resume", "auto")):
            assert train_in_process(cfg, tmp_path, "r", *extra) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "in use by another process" in err[0] and str(os.getpid()) in err[0]
    finally:
        lock.release()
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "metrics.jsonl"]
    assert (run_dir / "metrics.jsonl").read_text() == "theirs\n"
    assert train_in_process(cfg, tmp_path, "r") == 0  # released: the folder has no manifest, so it starts afresh


def test_a_folder_without_manifest_is_restartable(tmp_path):
    """A run that died before writing its manifest (a bad setting, a signal during start-up) started nothing."""
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    run_dir = tmp_path / "c" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"kind": "status", "status": "running", "epoch": 0}\n')
    (run_dir / "console.log").write_text("Traceback ...\n")
    assert train_in_process(cfg, tmp_path, "r") == 0
    assert [r["status"] for r in records(run_dir, "status")] == ["running", "completed"]


def test_resume_cuts_the_files_back_to_the_checkpoint(tmp_path, monkeypatch):
    """What a killed run wrote after its last checkpoint is written again on resume: it must not be there twice."""
    from trainers import checkpoint

    save = checkpoint.save

    def save_and_keep_the_first(path, state):  # the state a kill during epoch 1 would leave on disk
        save(path, state)
        if state["epoch"] == 1:
            shutil.copy(path, path.with_name("after-epoch-0.pt"))

    monkeypatch.setattr(checkpoint, "save", save_and_keep_the_first)
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 2}, "telemetry": {"interval_s": 0}})  # records counted
    assert train_in_process(cfg, tmp_path, "r") == 0
    run_dir = tmp_path / "c" / "r"
    os.replace(run_dir / "after-epoch-0.pt", run_dir / "checkpoint.pt")
    assert len(records(run_dir, "epoch")) == 2 and (run_dir / "train.log").read_text().count(" * Acc@1") == 2
    assert train_in_process(cfg, tmp_path, "r", "--resume", "auto") == 0
    assert [r["epoch"] for r in records(run_dir, "epoch")] == [0, 1]
    iters = [(r["epoch"], r["iter"]) for r in records(run_dir, "iter")]
    assert len(iters) == len(set(iters)) == 12
    assert [r["status"] for r in records(run_dir, "status")] == ["running", "completed", "running", "completed"]
    log = (run_dir / "train.log").read_text()
    assert log.count(" * Acc@1") == 2 and log.count("Epoch: [1][0/6]") == 1
    assert "=> resumed from the checkpoint at epoch 1, iteration 0; 7 record(s) written after it dropped" in log


@pytest.mark.parametrize("edit", ["insert", "delete"])
def test_resume_cuts_back_on_a_line_boundary_when_the_files_changed_since_the_checkpoint(tmp_path, monkeypatch, edit):
    """Issue 26, item 8: a byte inserted (or deleted) before the checkpoint's offset moves the line boundary; the cut
    goes to the nearest boundary, so no record is cut in half or glued onto the next."""
    from trainers import checkpoint

    save = checkpoint.save

    def save_and_keep_the_first(path, state):
        save(path, state)
        if state["epoch"] == 1:
            shutil.copy(path, path.with_name("after-epoch-0.pt"))

    monkeypatch.setattr(checkpoint, "save", save_and_keep_the_first)
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 2}, "telemetry": {"interval_s": 0}})
    assert train_in_process(cfg, tmp_path, "r") == 0
    run_dir = tmp_path / "c" / "r"
    os.replace(run_dir / "after-epoch-0.pt", run_dir / "checkpoint.pt")
    for name in ("metrics.jsonl", "train.log"):
        data = (run_dir / name).read_bytes()
        (run_dir / name).write_bytes(b" " + data if edit == "insert" else data[:1] + data[2:])
    assert train_in_process(cfg, tmp_path, "r", "--resume", "auto") == 0
    m = read_metrics(run_dir)
    assert m.bad_lines == (1 if edit == "delete" else 0)  # the deletion damaged the first line itself, nothing more
    assert [r["epoch"] for r in m.of("epoch")] == [0, 1]
    first = ["running"] if edit == "insert" else []  # the damaged first line was the first status record
    assert [r["status"] for r in m.of("status")] == first + ["completed", "running", "completed"]
    log = (run_dir / "train.log").read_text()
    assert log.count(" * Acc@1") == 2 and log.count("Epoch: [1][0/6]") == 1


def test_the_study_marks_a_run_killed_without_a_word_as_failed(tmp_path):
    from studies.supervise import mark_failed_if_silent

    run = RunFolder(tmp_path, writes=True, echo=False)
    run.progress(manifest_version=VERSION, status="running", epochs_done=1)
    run.record("iter", **{k: 0 for k in ("epoch", "iter", "iters", "images")},
               **{k: 0.5 for k in ("lr", "batch_time", "batch_time_avg", "data_time", "data_time_avg", "loss",
                                   "loss_avg", "top1", "top1_avg", "top5", "top5_avg")})
    run._metrics.write('{"kind": "ep')  # killed mid-line
    run.close()
    lock = RankLock(tmp_path, 0)
    mark_failed_if_silent(tmp_path, 9)  # still held: a live process speaks for itself
    assert reader.read_manifest(tmp_path)["status"] == "running"
    lock.release()
    mark_failed_if_silent(tmp_path, 9)
    manifest = reader.read_manifest(tmp_path)
    assert manifest["status"] == "failed" and manifest["exit_code"] == 9 and manifest["epochs_done"] == 1
    m = read_metrics(tmp_path)
    assert [r["kind"] for r in m.records] == ["iter", "status"] and m.bad_lines == 1


# ================================================================================================================
# Real processes (slow): a kill after the checkpoint, two trainings of one run, a DDP rank dying
# ================================================================================================================
LONGER = {"data": {"synthetic_images": 1200}, "train": {"epochs": 2, "print_freq": 1}}  # 150 steps an epoch


def start(args, **kw):
    return subprocess.Popen(args, env=trainer_env(**kw), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def trainer_cmd(config, out, name, *extra):
    return [sys.executable, "-m", "trainers", "train", str(config), "--out", str(out), "--run", name, *extra]


def wait_for_record(run_dir, match, timeout=180):
    """Poll metrics.jsonl until a record satisfies `match` (parsed lines; a half-written last line is skipped)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(match(r) for r in read_metrics(run_dir).records):
            return
        time.sleep(0.01)
    raise AssertionError(f"no matching record in {run_dir}")


@pytest.mark.slow
def test_kill_after_a_checkpoint_then_resume_leaves_no_duplicate_records(tmp_path):
    cfg = write_config(tmp_path / "k.toml", LONGER)
    run_dir = tmp_path / "k" / "r"
    proc = start(trainer_cmd(cfg, tmp_path, "r"))
    # epoch 0's checkpoint is written before epoch 1's first iteration record: kill with records after it
    wait_for_record(run_dir, lambda r: r["kind"] == "iter" and r["epoch"] == 1 and r["iter"] >= 2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    covered = torch.load(run_dir / "checkpoint.pt", weights_only=True)["run_files"]["metrics.jsonl"]
    assert (run_dir / "metrics.jsonl").stat().st_size > covered  # there is something to cut
    resumed = train(cfg, tmp_path, "r", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [r["epoch"] for r in records(run_dir, "epoch")] == [0, 1]
    iters = [(r["epoch"], r["iter"]) for r in records(run_dir, "iter")]
    assert len(iters) == len(set(iters)) == 2 * 150
    log = (run_dir / "train.log").read_text()
    assert log.count(" * Acc@1") == 2 and log.count("Epoch: [1][2/150]") == 1
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path, capsys):
    """Issue 26, item 5: the lock is held on the run folder itself; removing `.lock` defeats nothing."""
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "r") == 0
    run_dir = tmp_path / "c" / "r"
    lock = RankLock(run_dir, 0)  # a first `--resume auto` training it
    try:
        (run_dir / ".lock").unlink()
        assert train_in_process(cfg, tmp_path, "r", "--resume", "auto") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"in use by another process (pid {os.getpid()})" in err[0]
    finally:
        lock.release()
    assert [r["status"] for r in records(run_dir, "status")] == ["running", "completed"]


def test_a_requeued_rank_waits_for_the_lock_its_cut_off_predecessor_holds(tmp_path, monkeypatch, capsys):
    """A rank of the attempt before, cut off on a node whose link went down, still holds its lock: the requeued
    attempt's rank waits for it to be let go (up to wait_s) instead of failing the job; a plain second launch
    (wait_s 0) is refused at once, and a holder that never lets go is refused after wait_s."""
    held = RankLock(tmp_path, 1)  # the cut-off rank (another open file: flock conflicts within a process too)
    with pytest.raises(locks.RunInUse):
        RankLock(tmp_path, 1)
    monkeypatch.setattr(locks.time, "sleep", lambda s: held.release())  # it ends while the new rank waits
    waited = RankLock(tmp_path, 1, wait_s=300)
    assert held.fd is None and "waiting up to 300 s" in capsys.readouterr().out
    monkeypatch.setattr(locks.time, "monotonic", iter(range(0, 1000, 100)).__next__)  # 100 s a look: never let go
    with pytest.raises(locks.RunInUse, match="in use by another process"):
        RankLock(tmp_path, 1, wait_s=250)
    waited.release()


def test_only_a_requeued_or_successor_job_waits_for_its_run_lock(monkeypatch):
    from trainers import backends
    from trainers.checks import earlier_attempt_wait

    for name in ("SLURM_RESTART_COUNT", "CHAIN_DEPTH"):
        monkeypatch.delenv(name, raising=False)
    assert earlier_attempt_wait() == 0.0
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert earlier_attempt_wait() == 0.0
    for name in ("SLURM_RESTART_COUNT", "CHAIN_DEPTH"):
        monkeypatch.setenv(name, "1")
        assert earlier_attempt_wait() == backends.COLLECTIVE_TIMEOUT.total_seconds() + 10
        monkeypatch.setenv(name, "0")


def test_the_study_reads_the_pid_a_refused_trainer_named():
    message = str(locks.RunInUse(f"run folder x {locks.IN_USE.format(pid=4321)}; wait"))
    assert locks.in_use_by(f"some output\nerror: {message}\n") == "4321"
    assert locks.in_use_by("error: train.epochs = -1 must be > 0\n") is None


@pytest.mark.slow
def test_two_trainings_of_one_run_the_second_is_refused_and_the_first_completes(tmp_path):
    cfg = write_config(tmp_path / "t.toml", LONGER)
    run_dir = tmp_path / "t" / "r"
    first = start(trainer_cmd(cfg, tmp_path, "r"))
    wait_for_record(run_dir, lambda r: r["kind"] == "iter")
    os.killpg(first.pid, signal.SIGSTOP)  # frozen while the second tries: it cannot finish meanwhile
    try:
        for extra in ((), ("--resume", "auto")):
            second = train(cfg, tmp_path, "r", *extra)
            assert second.returncode == 2
            assert second.stderr.strip().count("\n") == 0 and "in use by another process" in second.stderr
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert [r["epoch"] for r in records(run_dir, "epoch")] == [0, 1]
    iters = [(r["epoch"], r["iter"]) for r in records(run_dir, "iter")]
    assert len(iters) == len(set(iters)) == 2 * 150
    assert [r["status"] for r in records(run_dir, "status")] == ["running", "completed"]


def lock_pid(run_dir, rank):
    name = ".lock" if rank == 0 else f".rank{rank}.lock"
    return int((run_dir / name).read_text())


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_the_manifest_names_the_ddp_rank_that_died_whichever_it_is(tmp_path, victim):
    cfg = write_config(tmp_path / "d.toml", {**LONGER, "train": {**LONGER["train"], "backend": "ddp"}})
    run_dir = tmp_path / "d" / "r"
    proc = start([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                  str(free_port()), "-m", "trainers", "train", str(cfg), "--out", str(tmp_path), "--run-name", "r"])
    wait_for_record(run_dir, lambda r: r["kind"] == "iter" and r["iter"] >= 2)
    os.kill(lock_pid(run_dir, victim), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed_ranks"] == [victim], (manifest, err[-3000:])
    assert manifest["message"].startswith(f"rank {victim} of 2 died (rank {1 - victim} noticed")
    assert records(run_dir, "status")[-1]["status"] == "failed"
    assert f"error: training failed: rank {victim} of 2 died" in err


@pytest.mark.slow
def test_ddp_measures_its_communication(tmp_path):
    cfg = write_config(tmp_path / "c.toml", {"train": {"backend": "ddp", "epochs": 1}})
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(free_port()), "-m", "trainers", "train", str(cfg), "--out", str(tmp_path),
                           "--run-name", "r"], env=trainer_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    epoch = records(tmp_path / "c" / "r", "epoch")[-1]
    assert epoch["comm_s"] > 0 and epoch["compute_s"] > 0 and epoch["data_s"] >= 0
    assert epoch["comm_s"] + epoch["compute_s"] + epoch["data_s"] < epoch["epoch_time"]


# ---- issue 40, item 1: the manifest is written whole or not at all; no status-less manifest ever visible ------------
def test_every_manifest_the_trainer_writes_holds_a_status(tmp_path, monkeypatch):
    """A kill between two writes must not leave a manifest without a status: the first one already says running."""
    from contract import runfolder

    written, write = [], runfolder.write_json_atomic
    monkeypatch.setattr(runfolder, "write_json_atomic",
                        lambda path, data: (written.append((path.name, dict(data))), write(path, data)))
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path, "r") == 0
    manifests = [data for name, data in written if name == "manifest.json"]
    assert manifests and all(data.get("status") in runfolder.STATUSES for data in manifests), manifests[0]


def test_a_manifest_write_that_fails_leaves_no_tmp_file(tmp_path, monkeypatch):
    import errno

    from contract import runfolder

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runfolder.os, "replace", full)
    with pytest.raises(OSError):
        runfolder.write_json_atomic(tmp_path / "manifest.json", {"status": "running"})
    assert list(tmp_path.iterdir()) == []


# ---- issue 40, item 9: a run name of only spaces, or with a line break, is no folder name a table or Slurm can show --
@pytest.mark.parametrize("name", ["   ", "a\nb", "w1\r", "tab\there"])
def test_a_blank_run_name_or_one_with_control_characters_is_refused(tmp_path, capsys, name):
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    assert train_in_process(cfg, tmp_path / "out", name) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run name ") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
