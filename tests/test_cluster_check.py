"""make cluster-check's verdicts, from run folders made here (the jobs themselves: tests/test_slurm_hosts.py)."""
import json

from studies.cluster_check import judge_train


def train_run(tmp_path, statuses: list[str], attempts: int, log: str):
    run = tmp_path / "train" / "05_linear_scaling" / "check"
    run.mkdir(parents=True)
    (run / "checkpoint.pt").write_bytes(b"")
    (run / "manifest.json").write_text(json.dumps({"status": "completed", "hosts": ["n1", "n2"],
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
