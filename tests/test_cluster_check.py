"""make cluster-check's verdicts, from run folders made here (the jobs themselves: tests/test_slurm_hosts.py)."""
import json

from studies.cluster_check import judge_train
from contract.manifest import VERSION


def train_run(tmp_path, statuses: list[str], attempts: int, log: str):
    run = tmp_path / "train" / "05_linear_scaling" / "check"
    run.mkdir(parents=True)
    (run / "checkpoint.pt").write_bytes(b"")
    (run / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": "completed", "hosts": ["n1", "n2"],
                                                    "attempts": [{}] * attempts}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"kind": "status", "status": s}) + "\n" for s in statuses))
    (run / "train.log").write_text(log)
    return run


RESUMED = "=> resumed from the checkpoint at epoch 0, iteration 3; 1 record(s) written after it dropped\n"


def test_the_train_layer_passes_a_run_preempted_requeued_and_resumed(tmp_path):
    run = train_run(tmp_path, ["running", "preempted", "running", "completed"], 2, RESUMED)
    finding = judge_train("COMPLETED", run, 2)
    assert finding.ok and finding.detail.endswith("requeued, resumed at epoch 0, iteration 3")


def test_the_train_layer_names_a_signal_that_never_reached_the_ranks(tmp_path):
    run = train_run(tmp_path, ["running", "completed"], 1, "")
    finding = judge_train("COMPLETED", run, 2)
    assert finding.ok is False and "never preempted: the warning signal did not reach the ranks" in finding.detail


def test_the_train_layer_names_a_job_that_did_not_requeue_or_resume(tmp_path):
    run = train_run(tmp_path, ["running", "preempted", "completed"], 1, "")
    finding = judge_train("COMPLETED", run, 2)
    assert finding.ok is False and "1 attempt(s) and no resume" in finding.detail


def test_a_profile_that_does_not_requeue_checks_the_steps_alone(tmp_path):
    run = train_run(tmp_path, ["running", "completed"], 1, "")
    finding = judge_train("COMPLETED", run, 2, requeues=False)
    assert finding.ok and "requeue-resume not checked (the profile does not requeue)" in finding.detail


def rank_file(folder, rank, host, **placement):
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"host": host, "local_rank": rank % 2, "cpu_list": "0-1", "cpus": 1, "threads": 1,
             "threads_from": "allocation", "loader_workers": 0, **placement}
    (folder / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "host": host, "ok": True, "placement": entry}))


def test_the_placement_layer_passes_ranks_within_their_cpus_and_names_the_rank_that_is_not(tmp_path):
    """Issue 47: OMP_NUM_THREADS=8 forced on 2-CPU nodes fails the layer, naming the rank and the fix."""
    from studies.cluster_check import judge

    for r, host in enumerate(["n1", "n1", "n2", "n2"]):
        rank_file(tmp_path / "placement", r, host)
    finding = judge("placement", "COMPLETED", tmp_path, 2)
    assert finding.ok and finding.detail == ("4 ranks on 2 hosts: 1 CPU(s), 1 thread(s), 0 loader worker(s) a rank "
                                             "(allocation)")
    for r, host in enumerate(["n1", "n1", "n2", "n2"]):
        rank_file(tmp_path / "placement", r, host, threads=8, threads_from="OMP_NUM_THREADS")
    finding = judge("placement", "COMPLETED", tmp_path, 2)
    assert finding.ok is False and finding.detail == (
        "rank 0 on n1: 8 threads (OMP_NUM_THREADS) on 1 CPU(s); set OMP_NUM_THREADS to at most 1 (or leave it "
        "unset), or give the rank 8 CPUs (the profile's cpus_per_task) (and 5 more problem(s) of the same job)")


def test_two_ranks_on_one_gpu_fail_any_layer_whose_ranks_report_it(tmp_path):
    from studies.cluster_check import judge

    for r in range(2):
        rank_file(tmp_path / "placement", r, "g", cpus=8, threads=8, cpu_list=f"{8 * r}-{8 * r + 7}", gpu_index=0,
                  gpu_uuid="GPU-1")
    finding = judge("placement", "COMPLETED", tmp_path, 1)
    assert finding.ok is False and finding.detail.startswith("rank 1 on g: GPU 0 is not its local rank's (1)")
    assert finding.detail.endswith("(and 1 more problem(s) of the same job)")  # the shared GPU, tests/test_placement


def test_a_launcher_that_refuses_root_is_quoted_in_the_row_with_its_fix(tmp_path):
    from studies.cluster_check import judge

    (tmp_path / "horovod.out").write_text("job 7 restart 0 on n[1-2]\nmpirun has detected an attempt to run as root."
                                          "\nRunning as root is *strongly* discouraged\n")
    finding = judge("horovod", "FAILED", tmp_path, 2)
    assert finding.ok is False and finding.detail.startswith(
        "job FAILED; 0 of 2 ranks reported: mpirun refuses to run as root: set mpi_allow_root = true in the profile")


def test_staging_without_tmpdir_names_the_fallback(tmp_path):
    from studies.cluster_check import judge

    for r, host in enumerate(["n1", "n2"]):
        folder = tmp_path / "staging"
        folder.mkdir(exist_ok=True)
        (folder / f"rank{r}.json").write_text(json.dumps({"rank": r, "host": host, "ok": True, "staged": True,
                                                          "path": "/tmp/cluster-check.txt",
                                                          "scratch_from": "no $TMPDIR on this node"}))
    finding = judge("staging", "COMPLETED", tmp_path, 2)
    assert finding.ok and finding.detail == "staged on 2 nodes into /tmp (no $TMPDIR on this node), and removed"


# ---- issue 63: a bad OMP_NUM_THREADS fails the placement layer alone, and no line names a setting that is not one --
def placed_rank(threads: int = 0, pinned: int | None = None, omp: str | None = None, cpus: int = 2) -> dict:
    """One rank's manifest entry as the trainer makes it (contract/placement.py decide and record)."""
    from contract import placement

    alloc = placement.Allocation(tuple(range(cpus)), tuple(range(cpus)), None, 1)
    return placement.record(placement.decide(alloc, threads, pinned, omp, 0), alloc, "n1", 0)


def test_each_placement_line_names_a_setting_that_exists():
    """Issue 63: a resumed run's threads come from its checkpoint, and the row said "set checkpoint to at most 2"."""
    import re

    from contract.placement import problems

    lines = {source: problems([placed_rank(**given)]) for source, given in
             (("train.threads", {"threads": 8}), ("checkpoint", {"pinned": 8}), ("OMP_NUM_THREADS", {"omp": "8"}))}
    for source, found in lines.items():
        assert len(found) == 1 and found[0].startswith(f"rank 0 on n1: 8 threads (")
        for setting in re.findall(r"\bset (\S+) to", found[0]):
            assert setting in ("train.threads", "OMP_NUM_THREADS", "data.loader_workers"), found[0]
    assert "set train.threads to at most 2" in lines["train.threads"][0]
    assert "set OMP_NUM_THREADS to at most 2 (or leave it unset)" in lines["OMP_NUM_THREADS"][0]
    resumed = lines["checkpoint"][0]
    assert "checkpoint to" not in resumed and resumed == (
        "rank 0 on n1: 8 threads (pinned by the checkpoint it resumed from) on 2 CPU(s); a resumed run keeps the "
        "threads it started with: give the rank 8 CPUs (the profile's cpus_per_task), or resume it with --resume "
        "force and train.threads at most 2")


def test_the_train_row_of_a_run_resumed_with_too_many_threads_says_what_to_do(tmp_path):
    run = train_run(tmp_path, ["running", "preempted", "running", "completed"], 2, RESUMED)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "placement": [placed_rank(pinned=8)]}))
    finding = judge_train("COMPLETED", run, 1)
    assert finding.ok is False and "--resume force and train.threads at most 2" in finding.detail
    assert "set checkpoint" not in finding.detail


def probe(layer: str, folder, **env) -> None:
    """What one rank of a cluster-check job writes, by the probe itself (tools/cluster_probe.py), here."""
    import os
    import subprocess
    import sys

    from tests.helpers import REPO

    r = subprocess.run([sys.executable, "-m", "tools", "cluster-probe", layer, "--dir", str(folder)], cwd=REPO,
                       env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_bad_omp_num_threads_fails_placement_with_the_fix_and_the_later_layers_are_not_run(tmp_path):
    """Issue 63: with OMP_NUM_THREADS=8 every layer failed with the placement line, so the table no longer pointed at
    the broken layer. The placement layer now runs first, alone; where it fails, no later layer's job is submitted,
    and each later row says why."""
    import os
    import socket

    from studies.cluster_check import LAYERS, gated, judge, render

    cpus = len(os.sched_getaffinity(0))
    asked = []

    def run(layers):  # the check's jobs, here: the probe on this machine, judged as the check judges its ranks
        asked.append(list(layers))
        for layer in layers:
            probe(layer, tmp_path, OMP_NUM_THREADS=str(cpus + 6))
        return [judge(layer, "COMPLETED", tmp_path, 1) for layer in layers]

    layers = [layer for layer in LAYERS[1:] if layer in ("placement", "hosts", "staging")]
    findings = gated(layers, run)
    assert asked == [["placement"]] and [f.layer for f in findings] == ["placement", "hosts", "staging"]
    assert findings[0].ok is False and findings[0].detail.startswith(
        f"rank 0 on {socket.gethostname()}: {cpus + 6} threads (OMP_NUM_THREADS) on {cpus} CPU(s); set "
        f"OMP_NUM_THREADS to at most {cpus} (or leave it unset)")
    assert [(f.ok, f.detail) for f in findings[1:]] == [(None, "not run: placement failed (its row says the fix)")] * 2
    table = render(findings)
    assert table.count("| not run |") == 2 and table.count("OMP_NUM_THREADS") == 2  # one row names it, and its fix
    asked.clear()
    assert [f.ok for f in gated(["hosts"], run)] == [False] and asked == [["hosts"]]  # no placement layer: as before

