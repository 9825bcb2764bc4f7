"""contract/placement.py: each rank's CPUs, threads and loader workers from its allocation, and the checks on a
run's per-rank records (pure arithmetic: no launcher, no timing)."""
import math

import pytest

from contract.placement import (Allocation, cpu_list, cpus_given, decide, nodes, parse_cpu_list, peak_memory,
                                per_rank, problems, record)
from contract.manifest import VERSION

NODE2 = (0, 1)
NODE16 = tuple(range(16))


def alloc(affinity, parent=None, per_task=None, local=1):
    return Allocation(tuple(affinity), tuple(parent or affinity), per_task, local)


def test_unbound_ranks_share_the_node():
    # srun / torchrun / the local launcher without binding: 2 ranks on a 2-CPU node get 1 CPU each, not 2 threads each
    assert cpus_given(alloc(NODE2, local=2)) == 1
    assert cpus_given(alloc(NODE16, local=4)) == 4
    assert cpus_given(alloc(NODE2, local=4)) == 1  # never below one


def test_bound_ranks_keep_their_own_cpus():
    assert cpus_given(alloc((1,), parent=NODE2, local=2)) == 1  # mpirun binds each rank to a core
    assert cpus_given(alloc(range(8), parent=NODE16, local=4)) == 4  # bound to a socket, 2 ranks on it
    assert cpus_given(alloc((3,), parent=NODE16, local=2)) == 1


def test_cpus_per_task_wins_within_the_affinity():
    assert cpus_given(alloc(NODE16, per_task=4, local=4)) == 4
    assert cpus_given(alloc(NODE2, per_task=8, local=1)) == 2  # never more than the process may run on


def test_threads_follow_the_allocation_unless_set():
    a = alloc(NODE2, local=2)
    assert decide(a).threads == 1 and decide(a).threads_from == "allocation"
    assert decide(a, omp_env="8").threads == 8 and decide(a, omp_env="8").threads_from == "OMP_NUM_THREADS"
    assert decide(a, pinned_threads=2, omp_env="8").threads_from == "checkpoint"
    assert decide(a, threads=3, pinned_threads=2, omp_env="8").threads_from == "train.threads"
    assert decide(a, omp_env="junk").threads_from == "allocation"


def test_loader_workers_at_most_the_cpus():
    assert decide(alloc(NODE16, local=2), loader_workers=8).loader_workers == 8
    assert decide(alloc(NODE16, local=4), loader_workers=8).loader_workers == 4
    assert decide(alloc(NODE2), loader_workers=0).loader_workers == 0


def test_more_threads_than_cpus_is_one_warning_line():
    p = decide(alloc(NODE2, local=2), omp_env="8")
    line = p.warning(1, "n2")
    assert line.startswith("warning: rank 1 on n2 runs 8 threads") and "\n" not in line and "cpus_per_task" in line
    assert decide(alloc(NODE2, local=2)).warning(0, "n1") is None


def test_cpu_lists_round_trip():
    assert cpu_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert parse_cpu_list("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}


def rank(host, local_rank, cpus, threads, workers=0, affinity=NODE2, gpu=None, src="allocation"):
    a = alloc(affinity)
    from contract.placement import Placement
    return record(Placement(cpus, threads, src, workers), a, host, local_rank, gpu)


def test_a_good_placement_has_no_problems():
    ranks = [rank("n1", 0, 1, 1), rank("n1", 1, 1, 1), rank("n2", 0, 2, 2)]
    assert problems(ranks) == []
    assert per_rank(ranks[:2], "threads") == 1 and per_rank(ranks, "threads") is None and per_rank(None, "cpus") is None


def test_each_problem_names_the_rank_and_the_fix():
    assert problems([rank("n1", 0, 2, 8, src="OMP_NUM_THREADS")]) == [
        "rank 0 on n1: 8 threads (OMP_NUM_THREADS) on 2 CPU(s); set OMP_NUM_THREADS to at most 2 (or leave it "
        "unset), or give the rank 8 CPUs (the profile's cpus_per_task)"]
    [line] = problems([rank("n1", 0, 2, 2, workers=4)])
    assert line.startswith("rank 0 on n1: 4 loader workers on 2 CPU(s)")
    [line] = problems([rank("n1", 0, 1, 1), rank("n1", 1, 2, 2)])  # 3 threads on the node's 2 CPUs
    assert line.startswith("ranks 0, 1 on n1 share CPUs 0-1: 3 threads on 2 CPU(s)")
    [line] = problems([rank("g", 0, 8, 8, affinity=range(8), gpu=(1, "GPU-a"))])
    assert line.startswith("rank 0 on g: GPU 1 is not its local rank's (0)")
    two = [rank("g", 0, 8, 8, affinity=range(8), gpu=(0, "GPU-a")),
           rank("g", 1, 8, 8, affinity=range(8, 16), gpu=(0, "GPU-a"))]
    assert any(p.startswith("ranks 0, 1 on g share GPU GPU-a") for p in problems(two))


@pytest.mark.parametrize("per_task", ["", "x", "0"])
def test_read_allocation_ignores_an_unusable_cpus_per_task(per_task):
    from contract.placement import read_allocation
    a = read_allocation(2, {"SLURM_CPUS_PER_TASK": per_task})
    assert a.cpus_per_task in (None, 0) and a.local_ranks == 2 and a.affinity


def wait_for_exec(pid: int, name: str, seconds: float = 30.0) -> None:
    """Until process `pid` runs `name` with its environment in place (a bounded wait: fails after `seconds`)."""
    import time
    from pathlib import Path

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        proc = Path(f"/proc/{pid}")
        if (proc / "comm").read_text().strip() == name and (proc / "environ").read_bytes():
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exec {name} within {seconds} s")


@pytest.mark.parametrize("parent_has_it, expected", [(True, "1"), (False, None)])
def test_torchruns_own_omp_default_is_not_a_choice(parent_has_it, expected):
    """torchrun sets OMP_NUM_THREADS=1 for its ranks when nobody did: that 1 must not override the allocation; one
    that torchrun was started with is the user's."""
    import subprocess

    from contract.placement import user_omp_threads
    env = {"PATH": "/usr/bin:/bin", **({"OMP_NUM_THREADS": "1"} if parent_has_it else {})}
    # stands for torchrun; /proc is read once it runs `sleep`: read in the middle of an exec, its environment is
    # empty (the CI run under load saw that once)
    parent = subprocess.Popen(["sh", "-c", "echo started; exec sleep 30"], env=env, stdout=subprocess.PIPE)
    try:
        assert parent.stdout.readline() == b"started\n"
        wait_for_exec(parent.pid, "sleep")
        assert user_omp_threads("torchrun", {"OMP_NUM_THREADS": "1"}, parent.pid) == expected
        assert user_omp_threads("slurm", {"OMP_NUM_THREADS": "1"}, parent.pid) == "1"  # any other launcher: as set
    finally:
        parent.kill()
        parent.wait()


def test_the_report_flags_a_comparison_whose_rows_ran_with_different_threads_a_rank():
    """Issue 47: DDP (srun, torch's default threads) against Horovod (mpirun, 1 thread) came out inverted, silently."""
    import math

    import pandas as pd

    from analysis.tables import one_value, unlike_rows

    def row(framework, backend, threads, cpus, gpus=2, steady=100.0):
        return {"framework": framework, "backend": backend, "numerics": "fp32", "per_gpu_batch": 32, "gpus": gpus,
                "processes": gpus, "scale": "local", "ours_steady": steady, "threads_per_rank": threads,
                "cpus_per_rank": cpus}

    same = pd.DataFrame([row("pytorch", "ddp", 1, 1), row("horovod+pytorch", "horovod", 1, 1),
                         row("pytorch", "ddp", 2, 2, gpus=1)])  # another shape may differ
    assert unlike_rows(same) == []
    mixed = pd.DataFrame([row("pytorch", "ddp", 2, 1), row("horovod+pytorch", "horovod", 1, 1)])
    assert unlike_rows(mixed) == ["Not like for like: 2 GPU(s), batch 32, local scale ran with different threads a "
                                  "rank: pytorch (ddp) 2, horovod+pytorch (horovod) 1."]
    unrecorded = pd.DataFrame([row("pytorch", "ddp", math.nan, math.nan), row("horovod+pytorch", "horovod", 1, 1)])
    assert len(unlike_rows(unrecorded)) == 2  # one recorded, one not: not known to be like for like
    assert one_value(pd.Series([2.0, 2.0, math.nan])) == 2.0 and math.isnan(one_value(pd.Series([1.0, 2.0])))


def test_the_studys_closing_table_shows_threads_a_rank_and_says_when_rows_differ(tmp_path):
    import json

    import pandas as pd

    from analysis.compare import threads_cell, unlike_lines

    def run(name, threads):
        folder = tmp_path / name
        folder.mkdir()
        ranks = [{"host": "n1", "local_rank": r, "cpu_list": "0-1", "cpus": 1, "threads": threads,
                  "threads_from": "allocation", "loader_workers": 0} for r in range(2)]
        (folder / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "placement": ranks}))
        return {"name": f"{name}-s0", "run_dir": folder, "gpus": 2, "per_gpu_batch": 32, "processes": 2}

    ddp, horovod, bare = run("n1-ddp", 2), run("n1-horovod", 1), {"name": "old-s0", "run_dir": tmp_path / "old"}
    assert (threads_cell([ddp]), threads_cell([horovod]), threads_cell([bare])) == ("2", "1", "-")
    frame = pd.DataFrame({"configuration": ["n1-ddp", "n1-horovod"], "threads/rank": ["2", "1"]})
    [line] = unlike_lines([ddp, horovod], frame)
    assert line.startswith("not like for like: n1-ddp 2, n1-horovod 1 threads a rank at 2 worker(s), batch 32")
    assert unlike_lines([ddp], frame[:1]) == []


def test_the_warning_for_a_resumed_runs_threads_names_no_setting_that_does_not_exist():
    """Issue 63: threads pinned by a checkpoint are no setting: the line never says "leave checkpoint unset"."""
    from contract.placement import Placement

    line = Placement(cpus=2, threads=8, threads_from="checkpoint", loader_workers=0).warning(0, "n1")
    assert "checkpoint unset" not in line and "set checkpoint" not in line
    assert line == ("warning: rank 0 on n1 runs 8 threads (pinned by the checkpoint it resumed from) on 2 CPU(s); a "
                    "resumed run keeps the threads it started with: give the rank 8 CPUs (the profile's "
                    "cpus_per_task), or resume it with --resume force and train.threads at most 2")
    omp = Placement(cpus=2, threads=8, threads_from="OMP_NUM_THREADS", loader_workers=0).warning(1, "n2")
    assert omp.endswith("set OMP_NUM_THREADS to at most 2 (or leave it unset), or give the rank 8 CPUs (the "
                        "profile's cpus_per_task)")


def test_a_runs_peak_memory_is_its_largest_ranks_with_what_each_measured():
    ranks = [{"peak_memory_bytes": 3 * 2**30, "peak_memory_of": "cuda_allocated"},
             {"peak_memory_bytes": 5 * 2**30, "peak_memory_of": "cuda_allocated"},
             {"peak_memory_bytes": 2**30, "peak_memory_of": "cpu_rss"}, {"threads": 1}]
    assert peak_memory(ranks) == (5 * 2**30, "cuda_allocated, cpu_rss")
    assert peak_memory([{"threads": 1}]) == peak_memory(None) == (None, "")  # a run before peaks were recorded
    assert peak_memory([{"peak_memory_bytes": True}]) == (None, "")  # a flag is no number of bytes


def test_a_runs_nodes_are_its_ranks_of_local_rank_0():
    """torchrun's two "nodes" on one machine share a host name: the local ranks count them."""
    assert nodes([{"host": "vm", "local_rank": r} for r in (0, 1, 0, 1)]) == 2.0
    assert nodes([{"host": "vm", "local_rank": r} for r in (0, 1, 2, 3)]) == 1.0
    assert math.isnan(nodes(None)) and math.isnan(nodes([{"host": "vm"}]))  # unrecorded
