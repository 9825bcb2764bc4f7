"""train.max_steps: a step cap that makes any study a smoke run at any scale (QUICK=1 at the ImageNet scales)."""
from __future__ import annotations

import json

import pytest

from contract import manifest as declared
from contract.config import ConfigError, load_config
from tests.helpers import records, train_in_process, write_config


def test_the_loop_stops_at_max_steps_and_the_run_folder_says_it_was_capped(tmp_path):
    # 48 images, 2 workers x 4: 6 steps an epoch; a cap of 8 ends the run 2 steps into epoch 1 of 3
    config = write_config(tmp_path / "c.toml", {"train": {"epochs": 3, "max_steps": 8}})
    assert train_in_process(config, tmp_path / "runs", "capped") == 0
    run_dir = tmp_path / "runs" / config.stem / "capped"
    steps = [(r["epoch"], r["iter"]) for r in records(run_dir, "iter")]
    assert steps == [(0, i) for i in range(6)] + [(1, 0), (1, 1)]  # print_freq 1: every step, and no more
    epochs = records(run_dir, "epoch")
    assert [e["epoch"] for e in epochs] == [0, 1] and [e["images"] for e in epochs] == [48, 16]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["status"], manifest["epochs_done"], manifest["capped_at_steps"]) == ("completed", 2, 8)
    assert manifest["smoke"] and declared.problem(manifest) is None  # a smoke run, in the declared record
    assert "capped at 8 optimizer steps" in manifest["message"]
    assert records(run_dir, "status")[-1]["status"] == "completed"


def test_a_cap_beyond_the_schedule_changes_nothing(tmp_path):
    config = write_config(tmp_path / "c.toml", {"train": {"epochs": 1, "max_steps": 100}})
    assert train_in_process(config, tmp_path / "runs", "uncut") == 0
    manifest = json.loads((tmp_path / "runs" / config.stem / "uncut" / "manifest.json").read_text())
    assert manifest["epochs_done"] == 1 and "capped_at_steps" not in manifest and not manifest["message"]
    assert not manifest["smoke"] and declared.problem(manifest) is None


def test_max_steps_is_validated(tmp_path):
    with pytest.raises(ConfigError, match=r"train.max_steps = -1 must be >= 0"):
        load_config(write_config(tmp_path / "c.toml"), "local", ["train.max_steps=-1"])


def test_a_cap_of_0_leaves_the_committed_references_fingerprints_as_they_were_and_a_cap_is_another_condition():
    from contract.fingerprint import config_fingerprint
    from contract.reader import folder_fingerprint
    from tests.helpers import REPO

    reference = REPO / "results" / "reference" / "vm-2cpu"
    # as computed before train.max_steps existed (a quality run and a benchmark)
    assert folder_fingerprint(reference / "05_linear_scaling" / "w32-s0") == "c9c3ffca2274"
    assert folder_fingerprint(reference / "01_throughput_single_gpu" / "b128-ddp-s0") == "0955d2225c7a"
    exp5 = REPO / "experiments" / "05_linear_scaling" / "config.toml"
    plain = config_fingerprint(load_config(exp5, "local", ["train.workers=32"]))
    assert plain == "c9c3ffca2274"
    assert config_fingerprint(load_config(exp5, "local", ["train.workers=32", "train.max_steps=20"])) != plain


def test_quick_at_the_thesis_scale_is_a_capped_run_in_a_short_job(capsys, monkeypatch, tmp_path):
    """make exp6 SCALE=thesis LAUNCHER=slurm CLUSTER=taito QUICK=1 DRY_RUN=1"""
    import re

    from studies.run import run_study
    from tests.helpers import REPO

    monkeypatch.setenv("IMAGENET_TAR", "/project/ilsvrc2012.tar")
    exp6 = REPO / "experiments" / "06_linear_scaling_stepping_warmup"
    assert run_study(exp6, scale="thesis", launcher="slurm", cluster="taito", dry_run=True, quick=True,
                     out=tmp_path) == 0
    out = capsys.readouterr().out
    jobs = [line for line in out.splitlines() if line.startswith("sbatch ")]
    assert jobs and all(" -t 15 " in job and job.endswith("/config.json") for job in jobs)  # the cap is in the config
    assert len(re.findall(r", capped at 20 steps\n", out)) == len(jobs)
    assert all("--signal=B:USR1@225 " in job for job in jobs)  # taito's 600 s warning, a quarter of 15 minutes
    assert re.search(r"thesis-w32-s0: .*, capped at 20 steps", out)
    assert "24:00:00" not in out


@pytest.mark.parametrize("scale", ["gpu", "node", "thesis"])
def test_quick_caps_the_steps_at_the_imagenet_scales_and_not_at_the_local_one(scale):
    from contract.plan import study_plan
    from tests.helpers import REPO

    exp5 = REPO / "experiments" / "05_linear_scaling"
    quick = study_plan(exp5, scale, quick=True, seeds=None, overrides=[])
    assert "train.max_steps=20" in quick.overrides and quick.time_limit == "15"
    assert not any("slurm." in o for o in quick.overrides)  # the job's table is no trainer setting
    local = study_plan(exp5, "local", quick=True, seeds=None, overrides=[])
    assert not any("max_steps" in o for o in local.overrides) and local.time_limit == ""
    assert study_plan(exp5, scale, quick=False, seeds=None, overrides=[]).time_limit == ""


@pytest.mark.parametrize("scale", ["gpu", "node", "thesis"])
def test_a_quick_throughput_study_at_the_imagenet_scales_sets_no_step_cap_and_its_runs_are_smoke_runs(
        scale, monkeypatch):
    """A benchmark times bench.batches steps: the quick step cap means nothing to it, and the TensorFlow trainer
    refuses one, so experiments 1-3 planned no QUICK=1 study at these scales. Their quick runs still read as smoke
    runs (carries_quick: what the trainers record in the manifest)."""
    import json

    from contract.plan import carries_quick, study_plan
    from tests.helpers import REPO

    monkeypatch.setenv("IMAGENET_DIR", "/data/imagenet")
    for experiment in ("01_throughput_single_gpu", "02_throughput_local_data_parallel"):
        quick = study_plan(REPO / "experiments" / experiment, scale, quick=True, seeds=None, overrides=[])
        assert not any("max_steps" in o for o in quick.overrides) and "bench.batches=4" in quick.overrides
        frameworks = {r.cfg.train.framework for r in quick.runs}
        assert "tensorflow" in frameworks and all(r.cfg.train.max_steps == 0 for r in quick.runs)
        configs = [json.loads(json.dumps({"scale": scale, **r.cfg.to_dict()}, default=list)) for r in quick.runs]
        assert all(carries_quick(c) for c in configs)
        full = study_plan(REPO / "experiments" / experiment, scale, quick=False, seeds=None, overrides=[])
        assert not any(carries_quick(json.loads(json.dumps({"scale": scale, **r.cfg.to_dict()}, default=list)))
                       for r in full.runs)
