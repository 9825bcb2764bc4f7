"""Adding a study's finished runs to a committed reference machine (tools/reference_add.py): finished runs are
copied without checkpoints or locks, unfinished ones are left out, and a run measured elsewhere is refused."""
from __future__ import annotations

import json

import pytest

from contract.config import ConfigError
from tools import reference_add as ra

XEON = {"model": "Intel(R) Xeon(R) Processor", "torch_capability": "AVX512"}


def run(study, name, status, hosts=("vm",), cpu=XEON):
    folder = study / name
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"status": status, "hosts": list(hosts), "cpu": cpu}))
    for file in ("config.json", "metrics.jsonl", "train.log", "checkpoint.pt", ".lock", ".study.lock"):
        (folder / file).write_text(file)
    return folder


@pytest.fixture
def reference(tmp_path):
    (tmp_path / "ref" / "xeon").mkdir(parents=True)
    (tmp_path / "ref" / "xeon" / "machine.toml").write_text('label = "xeon"\nhosts = ["vm"]\nisa = "AVX512"\n')
    return tmp_path / "ref"


def test_finished_runs_are_copied_without_checkpoint_or_locks_and_unfinished_ones_left_out(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed"), run(study, "b-s1", "diverged"), run(study, "c-s1", "running")
    (run(study, "d-s1", "completed") / "manifest.json").write_text('{"status": "compl')  # cut short mid-write
    added, left_out = ra.add(study, "xeon", reference)
    assert added == ["a-s1", "b-s1"] and left_out == ["c-s1: running", "d-s1: unreadable manifest"]
    copied = reference / "xeon" / "13_steps" / "a-s1"
    assert sorted(p.name for p in copied.iterdir()) == ["config.json", "manifest.json", "metrics.jsonl", "train.log"]
    assert not (reference / "xeon" / "13_steps" / "c-s1").exists()


def test_a_run_of_another_machine_is_refused_and_nothing_is_copied(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed")
    run(study, "b-s1", "completed", cpu={"torch_capability": "AVX2"})
    with pytest.raises(ConfigError, match="b-s1 was not measured on xeon: its CPU instruction set AVX2"):
        ra.add(study, "xeon", reference)
    run(tmp_path / "other", "c-s1", "completed", hosts=("node1",))
    with pytest.raises(ConfigError, match=r"hosts \['node1'\] are not the machine's"):
        ra.add(tmp_path / "other", "xeon", reference)
    assert not (reference / "xeon" / "13_steps").exists()


def test_an_unknown_machine_names_the_known_ones(tmp_path, reference):
    with pytest.raises(ConfigError, match="no reference machine 'amd'.*name one of xeon"):
        ra.add(tmp_path, "amd", reference)


def test_the_committed_reference_machines_are_described_for_the_check():
    for label in ("vm-2cpu", "xeon-2cpu"):
        machine = ra.machine_of(ra.REFERENCE, label)
        assert machine["hosts"] and machine["label"] == label
