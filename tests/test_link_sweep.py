"""make link-sweep's submissions (tools/link_sweep.py): each rate's experiment-3 study submitted by a call whose
return value is the job ids, never scraped from the study's printed lines. No Slurm here: a fake clients object
answers each sbatch as a cluster would (the sweep on a real cluster: tests/test_slurm_hosts.py, as root)."""
from __future__ import annotations

import pytest

from slurm.client import Submission
from tools.link_sweep import EXP3, submit_rate

RUNS = ["n2-ddp-t1-s0", "n1-t1-ddp-s0"]  # DDP only: no Horovod or TensorFlow build decides what is submitted


class FakeClients:
    """sbatch's answers: the next job id from `first` on, or, told to fail, sbatch's error line and exit code 1."""

    def __init__(self, first: int = 700, fail: bool = False):
        self.first, self.fail, self.argvs = first, fail, []

    def check(self) -> None:
        """A configuration is always there."""

    def submit(self, argv) -> Submission:
        self.argvs.append(list(argv))
        if self.fail:
            return Submission(None, 1, "sbatch: error: Batch job submission failed: Invalid partition name specified")
        return Submission(str(self.first + len(self.argvs) - 1), 0, "")


def test_a_rate_s_job_ids_are_the_submissions_returned_by_the_study(tmp_path, capsys):
    clients = FakeClients(first=700)
    jobs = submit_rate("100mbit", tmp_path, RUNS, clients)
    assert jobs == ["700", "701"] and len(clients.argvs) == 2
    study = tmp_path / "100mbit" / EXP3.name
    assert sorted(p.parent.name for p in study.glob("*/config.json")) == sorted(RUNS)  # each job's planned run
    assert all(argv[-1].startswith(str(study)) for argv in clients.argvs)  # each job trains its rate's folder
    assert "Submitted batch job" not in capsys.readouterr().out  # the study's own lines kept back, as before


def test_a_rate_whose_sbatch_fails_stops_the_sweep_with_sbatch_s_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        submit_rate("1gbit", tmp_path, RUNS, FakeClients(fail=True))
    assert stop.value.code == ("error: the study at 1gbit was not submitted: 2 sbatch call(s) failed (sbatch's line "
                               "above each)")
    assert capsys.readouterr().out.count("Invalid partition name specified") == 2  # the study's lines, shown
    assert not list((tmp_path / "1gbit").glob(f"{EXP3.name}/*/config.json"))  # no planned run without its job


def test_a_rate_whose_study_cannot_be_planned_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="^error: the study at none was not submitted: .*no-such-run"):
        submit_rate("none", tmp_path, ["no-such-run"], FakeClients())
