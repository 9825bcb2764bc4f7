"""Adding a study's finished runs to a committed reference machine (tools/reference_add.py): finished runs are
copied without checkpoints or locks, unfinished ones are left out, and a run measured elsewhere is refused."""
from __future__ import annotations

import gzip
import json

import pytest

from contract.config import ConfigError
from contract.manifest import VERSION
from contract.runfiles import compact_bytes
from tools import reference_add as ra

XEON = {"cpu_model": "Intel(R) Xeon(R) Processor", "isa": "AVX512"}


def run(study, name, status, hosts=("vm",), machine=XEON, seed=None, **manifest):
    folder = study / name
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "status": status, "hosts": list(hosts), "machine": machine,
                                                      **manifest}))
    for file in ("train.log", "checkpoint.pt", ".lock", ".study.lock"):
        (folder / file).write_text(file)
    # its last record: a finished run without readable records is refused (issue 64)
    (folder / "metrics.jsonl").write_text(json.dumps({"kind": "status", "time": 0.0, "status": status, "epoch": 0,
                                                      "message": ""}) + "\n")
    seed = seed if seed is not None else sum(name.encode())  # a seed a name unless told: each its own run
    (folder / "config.json").write_text(json.dumps({"experiment": study.name, "run": name, "scale": "local",
                                                    "train": {"seed": seed}}))
    return folder


@pytest.fixture
def reference(tmp_path):
    (tmp_path / "ref" / "xeon").mkdir(parents=True)
    (tmp_path / "ref" / "xeon" / "machine.toml").write_text(
        'label = "xeon"\nhosts = ["vm"]\nisa = "AVX512"\ncores = 2\ncpu_model = "Intel(R) Xeon(R) Processor"\n')
    return tmp_path / "ref"


def test_finished_runs_are_copied_without_checkpoint_or_locks_and_unfinished_ones_left_out(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed"), run(study, "b-s1", "diverged"), run(study, "c-s1", "running")
    (run(study, "d-s1", "completed") / "manifest.json").write_text('{"status": "compl')  # cut short mid-write
    added, left_out = ra.add(study, "xeon", reference)
    assert added == ["a-s1", "b-s1"] and left_out == ["c-s1: running", "d-s1: unreadable manifest"]
    copied = reference / "xeon" / "13_steps" / "a-s1"
    # the committed runs' compact form (contract/runfiles.py): the same bytes, gzip'd deterministically
    assert sorted(p.name for p in copied.iterdir()) == ["config.json", "manifest.json", "metrics.jsonl.gz",
                                                         "train.log.gz"]
    for name in ("metrics.jsonl", "train.log"):
        gz = (copied / f"{name}.gz").read_bytes()
        assert gzip.decompress(gz) == (study / "a-s1" / name).read_bytes() and gz == compact_bytes(gzip.decompress(gz))
    assert not (reference / "xeon" / "13_steps" / "c-s1").exists()
    assert ra.add(study, "xeon", reference)[0] == added  # added again: the same files
    assert sorted(p.name for p in copied.iterdir()) == ["config.json", "manifest.json", "metrics.jsonl.gz",
                                                         "train.log.gz"]


def test_a_run_holding_a_file_in_both_forms_is_refused_and_nothing_is_copied(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed")
    damaged = run(study, "b-s1", "completed")
    (damaged / "train.log.gz").write_bytes(gzip.compress(b"train.log"))
    with pytest.raises(ConfigError, match=r"b-s1/train.log and train.log.gz both in its folder.*nothing was copied"):
        ra.add(study, "xeon", reference)
    assert not (reference / "xeon" / "13_steps").exists()


def test_a_run_of_another_machine_is_refused_and_nothing_is_copied(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed")
    run(study, "b-s1", "completed", machine={**XEON, "isa": "AVX2"})
    with pytest.raises(ConfigError, match="b-s1 was not measured on xeon: its isa 'AVX2' is not the machine's"):
        ra.add(study, "xeon", reference)
    run(tmp_path / "other", "c-s1", "completed", hosts=("node1",))
    with pytest.raises(ConfigError, match=r"hosts \['node1'\] are not the machine's"):
        ra.add(tmp_path / "other", "xeon", reference)
    assert not (reference / "xeon" / "13_steps").exists()


def test_an_unknown_machine_names_the_known_ones(tmp_path, reference):
    with pytest.raises(ConfigError, match="no reference machine 'amd'.*name one of xeon"):
        ra.add(tmp_path, "amd", reference)


@pytest.mark.parametrize("label", ["../../../x", "..", "a/b", ""])
def test_a_machine_label_that_is_no_folder_of_the_reference_is_refused_before_anything_is_read(tmp_path, label):
    (tmp_path / "x").mkdir()  # a machine.toml outside the reference would otherwise be taken (issue 64)
    (tmp_path / "x" / "machine.toml").write_text('label = "x"\ncpu_model = "m"\n')
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed")
    with pytest.raises(ConfigError, match="is no reference machine's label"):
        ra.add(study, label, tmp_path / "ref" / "a" / "b")
    assert not (tmp_path / "x" / "13_steps").exists()


def test_the_committed_reference_machines_are_described_for_the_check():
    for label in ("vm-2cpu", "xeon-2cpu"):
        machine = ra.machine_of(ra.REFERENCE, label)
        assert machine["hosts"] and machine["label"] == label


# ---- issue 48, item 3: a reference never pools another machine's runs, nor one run twice -----------------------------
AMD = {"cpu_model": "AMD EPYC", "isa": "AVX512"}  # this machine: host vm, AVX-512, as the Xeon's


def test_a_run_of_another_cpu_model_with_the_same_host_and_instruction_set_is_refused(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed", machine=AMD)
    with pytest.raises(ConfigError, match="a-s1 was not measured on xeon: its cpu_model 'AMD EPYC' is not the "
                                          r"machine's 'Intel\(R\) Xeon\(R\) Processor'"):
        ra.add(study, "xeon", reference)
    assert not (reference / "xeon" / "13_steps").exists()


def test_a_new_manifests_machine_identity_is_compared_field_by_field(tmp_path, reference):
    from contract.machine import FIELDS

    machine = {"cpu_model": "Intel(R) Xeon(R) Processor", "isa": "AVX512", "cores": 4, "memory_gib": 23,
               "gpu_model": None, "torch": "2.14.1"}
    assert set(machine) == set(FIELDS)
    run(tmp_path / "runs" / "13_steps", "a-s1", "completed", machine=machine)
    with pytest.raises(ConfigError, match="its cores 4 is not the machine's 2"):
        ra.add(tmp_path / "runs" / "13_steps", "xeon", reference)
    run(tmp_path / "old" / "13_steps", "a-s1", "completed", machine={"isa": "AVX512"})  # no CPU model
    with pytest.raises(ConfigError, match="records no cpu_model"):
        ra.add(tmp_path / "old" / "13_steps", "xeon", reference)


def test_a_copy_of_a_run_is_refused_and_the_same_run_added_again_replaces_its_folder(tmp_path, reference):
    import shutil

    study = tmp_path / "runs" / "13_steps"
    run(study, "a-s1", "completed", seed=1)
    assert ra.add(study, "xeon", reference)[0] == ["a-s1"]
    assert ra.add(study, "xeon", reference)[0] == ["a-s1"]  # again: its own folder replaced, still one
    shutil.copytree(study / "a-s1", study / "a-s1.bak")  # cp -a
    from contract.reader import IDENTITY_WORDS

    with pytest.raises(ConfigError, match=rf"a-s1.bak is the same run as .*a-s1 \({IDENTITY_WORDS}\)"):
        ra.add(study, "xeon", reference)
    shutil.rmtree(study)
    run(study, "b-s1", "completed", seed=1)  # the same config and seed under another run name
    with pytest.raises(ConfigError, match="b-s1 is the same run as .*xeon/13_steps/a-s1"):
        ra.add(study, "xeon", reference)
    assert sorted(p.name for p in (reference / "xeon" / "13_steps").iterdir()) == ["a-s1"]


def test_a_finished_run_without_a_readable_config_is_refused(tmp_path, reference):
    study = tmp_path / "runs" / "13_steps"
    (run(study, "a-s1", "completed") / "config.json").unlink()
    with pytest.raises(ConfigError, match="a-s1: its config.json is missing, so which config and seed"):
        ra.add(study, "xeon", reference)


def test_the_committed_reference_machines_declare_the_cpu_model_their_manifests_record():
    from contract.machine import recorded

    for label, model in (("vm-2cpu", "AMD EPYC"), ("xeon-2cpu", "Intel(R) Xeon(R) Processor")):
        assert ra.machine_of(ra.REFERENCE, label)["cpu_model"] == model
        models = {recorded(json.loads(m.read_text())).get("cpu_model")
                  for m in (ra.REFERENCE / label).glob("*/*/manifest.json")}
        assert model in models and models <= {model, None}
