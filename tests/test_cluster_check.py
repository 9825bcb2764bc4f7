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
