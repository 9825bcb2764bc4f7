"""A run is resolved once: the plan builds each run's Config, the study saves it as the run's config.json, and the
trainer starts from that file -- with nothing but where its data is and how its ranks meet still open."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.config import WHERE_IT_RUNS, ConfigError, load_planned
from contract.fingerprint import config_fingerprint, document_fingerprint
from contract.plan import study_plan
from contract.runfolder import CONFIG, write_planned_config
from tests.helpers import REPO

EXP6 = REPO / "experiments" / "06_linear_scaling_stepping_warmup"


def planned(tmp_path: Path, scale: str = "local", run: int = 0) -> tuple[Path, object]:
    study = study_plan(EXP6, scale, quick=False, seeds=None, overrides=["train.print_freq=7"])
    chosen = study.runs[run]
    return write_planned_config(chosen.cfg, tmp_path / chosen.name, "emulated"), chosen


def test_each_run_of_the_plan_carries_its_resolved_config(tmp_path):
    study = study_plan(EXP6, "local", quick=False, seeds=None, overrides=["train.print_freq=7"])
    for run in study.runs:
        assert run.cfg.train.workers == run.settings["train.workers"] and run.cfg.train.print_freq == 7
        assert run.cfg.train.seed == run.settings["train.seed"] and run.name.endswith(f"-s{run.cfg.train.seed}")


def test_the_saved_config_reads_back_as_the_plans_run(tmp_path):
    path, run = planned(tmp_path)
    cfg = load_planned(path)
    assert cfg == run.cfg and config_fingerprint(cfg) == document_fingerprint(json.loads(path.read_text()))


def test_a_node_may_say_where_its_data_is_and_how_ranks_meet_but_nothing_else(tmp_path):
    path, _ = planned(tmp_path)
    cfg = load_planned(path, ["data.path=/scratch/imagenet", "train.init_method=file:///tmp/rdv"])
    assert (cfg.data.path, cfg.train.init_method) == ("/scratch/imagenet", "file:///tmp/rdv")
    with pytest.raises(ConfigError) as refused:
        load_planned(path, ["train.workers=64"])
    assert str(refused.value) == (f"--set train.workers=64: {path} is a resolved run; only "
                                  f"{' and '.join(WHERE_IT_RUNS)} may be set where it runs (change the experiment's "
                                  "config or the study's --set and re-plan)")


def test_imagenet_dir_is_read_where_the_run_starts_not_where_it_was_planned(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENET_DIR", "/login-node/imagenet")
    path, run = planned(tmp_path, scale="thesis")
    assert run.cfg.data.path == "${IMAGENET_DIR}"  # as written: the plan does not read it
    monkeypatch.setenv("IMAGENET_DIR", "/node-local/imagenet")
    assert load_planned(path).data.path == "/node-local/imagenet"


def test_a_missing_or_broken_config_json_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist: a study writes a run's config.json as it starts the run"):
        load_planned(tmp_path / "nowhere" / CONFIG)
    (tmp_path / CONFIG).write_text("{not json")
    with pytest.raises(ConfigError, match=r"is not a readable config.json .*re-plan the run with its study"):
        load_planned(tmp_path / CONFIG)


def test_the_trainer_refuses_a_scale_or_an_out_beside_a_config_json(tmp_path, capsys):
    from trainers.__main__ import main

    path, _ = planned(tmp_path)
    assert main(["train", str(path), "--scale", "gpu"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --scale with {path}: a run's config.json is already resolved "
                                               "and names its folder; leave it out (or train from the experiment's "
                                               "config.toml)")
