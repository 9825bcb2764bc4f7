"""Was the machine quiet while a run was timed (contract/hostload.py, issue 63): each rank's timed window recorded in
the manifest's placement by the real trainer, and the declared rules that read it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract import hostload
from tests.helpers import run, trainer_env, write_config

REPO = Path(__file__).resolve().parents[1]
ONE_CPU = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0


def rank(host="n1", cpu_list="0-1", threads=1, wall=10.0, cpu=10.0, busy=20.0, machine="m") -> dict:
    """One rank's placement entry as the trainer writes it (contract/placement.py record + hostload.window)."""
    return {"host": host, "local_rank": 0, "cpu_list": cpu_list, "cpus": 2, "threads": threads,
            "threads_from": "allocation", "loader_workers": 0, "timed_wall_s": wall, "timed_cpu_s": cpu,
            "busy_cpu_s": busy, "load_before": 0.1, "load_after": 0.2, "machine": machine}


# ------------------------------------------------------------------------------------------------ the rules
def test_a_quiet_machine_is_no_disturbance():
    # two ranks of one thread on two CPUs, each busy its whole window: the CPUs did nothing else
    assert hostload.disturbances([rank(cpu=9.9), rank(cpu=9.9)]) == []


def test_other_work_beyond_the_spare_cpus_is_a_busy_host():
    # one rank of one thread on two CPUs (one spare); the CPUs were busy 19.5 of 20 CPU-seconds, the rank 10 of them:
    # others 0.95 CPUs, within the spare CPU and its slack; at 2 threads nothing was spare
    assert hostload.disturbances([rank(threads=1, cpu=10.0, busy=19.5)]) == []
    lines = hostload.disturbances([rank(threads=2, cpu=10.0, busy=19.5)])
    assert lines == ["host busy: other work used 0.95 of 2 CPU(s) on n1 while timed (0 spare)"]


def test_ranks_of_one_cpu_set_measured_the_same_cpus_once():
    # two ranks on the same two CPUs: each saw the CPUs busy 20 s of 20; the ranks used 19.8 between them
    assert hostload.disturbances([rank(cpu=9.9, busy=20.0), rank(cpu=9.9, busy=20.0)]) == []


def test_ranks_on_hosts_of_one_machine_are_judged_together():
    # the local cluster: hosts n1 and n2 are namespaces of one machine (one boot id), 2 CPUs, 1 thread each
    quiet = [rank(host="n1", cpu=9.9), rank(host="n2", cpu=9.9)]
    assert hostload.disturbances(quiet) == []
    apart = [rank(host="n1", cpu=9.9, machine="a"), rank(host="n2", cpu=9.9, machine="b")]
    # on two machines each rank left a CPU spare: the other 10 busy seconds on each are within it
    assert hostload.disturbances(apart) == []


def test_a_rank_whose_cpu_time_fell_short_of_its_threads_is_named():
    lines = hostload.disturbances([rank(threads=2, cpu=8.0, busy=8.0)])  # 0.8 of 2 threads, nothing else ran
    assert lines == ["CPU short: a rank on n1 got 0.80 CPU(s) of its 2 thread(s)' 2.00 while timed (throttled?)"]
    # four ranks of one thread on two CPUs: a rank's share is half a CPU, and 0.45 of it is no shortfall
    crowded = [rank(cpu=4.5, busy=20.0) for _ in range(4)]
    assert hostload.disturbances(crowded) == []


def test_a_manifest_without_a_window_is_not_judged():
    assert hostload.disturbances(None) == []
    unrecorded = {k: v for k, v in rank().items() if k not in hostload.WINDOW_FIELDS}
    assert hostload.disturbances([unrecorded, rank()]) == []


def test_the_machine_clock_reads_the_cpus_asked_for():
    one = hostload.busy_seconds([ONE_CPU])
    assert one is not None and one > 0
    both = hostload.busy_seconds(sorted(os.sched_getaffinity(0)))
    assert both >= one
    assert hostload.busy_seconds([ONE_CPU], Path("/nonexistent")) is None


def test_the_process_tree_clock_counts_a_child_that_works():
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.5: pass\ntime.sleep(30)"])
    try:
        deadline = 100
        while hostload.process_cpu_seconds(child.pid) < 0.45 and deadline:
            deadline -= 1
            subprocess.run(["sleep", "0.05"])
        assert hostload.tree_cpu_seconds(os.getpid()) - hostload.process_cpu_seconds(os.getpid()) >= 0.45
    finally:
        child.kill()
        child.wait()


# ------------------------------------------------------------------------------------------------ real runs
def pinned_bench(tmp_path: Path, name: str) -> dict:
    """A real benchmark run on one CPU (one thread), its manifest."""
    cfg = write_config(tmp_path / f"{name}.toml", {"bench": {"batches": 40, "warmup_batches": 2},
                                                  "train": {"workers": 1, "per_worker_batch": 16},
                                                  "data": {"image_size": 32}})
    done = run([sys.executable, "-m", "trainers", "train", str(cfg), "--out", str(tmp_path), "--run", name],
               env=trainer_env(), preexec_fn=lambda: os.sched_setaffinity(0, {ONE_CPU}))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((tmp_path / name / name / "manifest.json").read_text())  # out/<config stem>/<run>


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's CPU clock is Linux's /proc/stat")
def test_the_trainer_records_each_ranks_timed_window(tmp_path):
    manifest = pinned_bench(tmp_path, "quiet")
    (entry,) = manifest["placement"]
    assert entry["cpu_list"] == str(ONE_CPU) and entry["threads"] == 1
    assert set(hostload.WINDOW_FIELDS) <= set(entry)
    assert entry["machine"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    # one thread on one CPU: its CPU time is at most the window's wall time (a tick of rounding), and the CPU was
    # busy at least as long as the rank ran on it
    assert 0 < entry["timed_cpu_s"] <= entry["timed_wall_s"] + 0.02
    assert entry["busy_cpu_s"] >= entry["timed_cpu_s"] - 0.02


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's CPU clock is Linux's /proc/stat")
def test_a_run_beside_two_busy_loops_on_its_cpu_is_flagged_busy(tmp_path):
    pin = {"preexec_fn": lambda: os.sched_setaffinity(0, {ONE_CPU})}
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], **pin) for _ in range(2)]
    try:
        manifest = pinned_bench(tmp_path, "busy")
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    lines = hostload.disturbances(manifest["placement"])
    assert any(line.startswith("host busy: other work used") for line in lines), lines
    from studies.progress import summary  # the study's line as the run ends says it too

    assert summary(tmp_path / "busy" / "busy").endswith("images/s (steady state) — flagged: host busy")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's CPU clock is Linux's /proc/stat")
def test_the_closing_table_flags_a_speedup_over_a_disturbed_baseline(tmp_path):
    """Real runs: a 1-process baseline timed beside two busy loops on its CPU, 2 DDP processes timed after; the
    study's closing table names the 2-process row's flag with the baseline's reason."""
    from analysis.compare import flag_lines
    from tests.helpers import torchrun

    pin = {"preexec_fn": lambda: os.sched_setaffinity(0, {ONE_CPU})}
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], **pin) for _ in range(2)]
    try:
        pinned_bench(tmp_path, "n1-ddp")
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    cfg = write_config(tmp_path / "n2-ddp.toml", {"bench": {"batches": 40, "warmup_batches": 2},
                                                 "train": {"workers": 2, "per_worker_batch": 16},
                                                 "data": {"image_size": 32}})
    done = torchrun(2, cfg, tmp_path, "n2-ddp")
    assert done.returncode == 0, done.stderr[-2000:]

    def entry(name, processes):
        return {"name": name, "run_dir": tmp_path / name / name, "fingerprint": name, "experiment": name,
                "framework": "pytorch", "gpus": processes, "per_gpu_batch": 16, "processes": processes,
                "numerics": "fp32"}

    lines = flag_lines([entry("n1-ddp", 1), entry("n2-ddp", 2)])
    assert all(len(line) <= 120 for line in lines)
    n1, n2 = " ".join(line.strip() for line in lines).split(" flagged ")  # a flag's wrapped lines, rejoined
    assert n1.startswith("flagged n1-ddp: host busy: other work used"), lines
    assert n2.startswith("n2-ddp:") and "baseline: host busy" in n2, lines

    # the report's rows of the same runs: the scaling table's 2-process row (CSV and Markdown) carries the flag
    from analysis import reference, runs, tables

    scaling = tables.scaling_table(runs.load_study(tmp_path), reference.load_reference())
    ours = scaling[scaling["source"] == "ours (steady state)"].set_index("gpus")["flag"]
    assert ours[1].startswith("host busy") and "baseline: host busy" in ours[2]


# ------------------------------------------------------------------------------------------------ the flags
def test_a_speedup_above_its_processes_is_flagged_with_its_reason():
    from analysis import flags

    assert flags.above_ideal(2.004, 2) == ""  # 2.00 as shown: at the ideal, not above it
    assert flags.above_ideal(16.5, 2) == "speed-up 16.50 above its ideal 2 (impossible: its baseline was slowed)"
    assert flags.above_ideal(float("nan"), 2) == flags.above_ideal(3.0, float("nan")) == ""
    # the cluster: 18.51x at 4 processes, a baseline of 2 threads against 1, a busy baseline
    flag = flags.speedup_flag(18.51, 4, threads=1, base_threads=2, base_disturbed="host busy: x")
    assert flag.split("; ") == [flags.above_ideal(18.51, 4), "unlike: baseline ran 2 thread(s) a rank, this row 1",
                                "baseline: host busy: x"]
    assert flags.speedup_flag(1.9, 2, threads=1, base_threads=1) == ""


def test_a_damaged_placement_is_never_judged_nor_an_error():
    for damaged in (3, "x", {"host": "n1"}, [3, None], True):
        assert hostload.disturbances(damaged) == []


def test_a_busy_host_names_the_cause_not_its_ranks_shortfall_too():
    # 2 threads on 2 CPUs got 0.8 CPUs: the CPUs were busy 20 of 20 s, so others took 1.2: the host was busy
    assert [line.split(":")[0] for line in hostload.disturbances([rank(threads=2, cpu=8.0, busy=20.0)])] == \
        ["host busy"]


def test_each_ranks_window_merges_into_its_own_placement_entry():
    placed = [{"host": "n1", "threads": 1}, {"host": "n2", "threads": 1}]
    merged = hostload.with_windows(placed, [{"timed_wall_s": 1.0}, {"timed_wall_s": 2.0}])
    assert merged == [{"host": "n1", "threads": 1, "timed_wall_s": 1.0}, {"host": "n2", "threads": 1, "timed_wall_s": 2.0}]
    assert hostload.with_windows(placed[:1], [{}, {}]) is None and hostload.with_windows(None, [{}]) is None
