"""Commands an HPC user runs before launching: `trainers config`, `trainers schedule` without data, `make help`."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trainers.__main__ import main
from contract.config import load_config

REPO = Path(__file__).resolve().parents[1]
EXP6 = REPO / "experiments" / "06_linear_scaling_stepping_warmup"


def test_config_prints_the_resolved_values_as_json(capsys, monkeypatch):
    monkeypatch.delenv("IMAGENET_DIR", raising=False)
    assert main(["config", str(EXP6), "--scale", "thesis", "--set", "train.workers=32", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    res = doc["resolved"]
    assert (res["global_batch"], res["lr"], res["warmup"], res["framework"]) == \
        (4096, pytest.approx(1.6), "stepping, 5 epochs", "horovod+pytorch")
    assert len(res["schedule"]) == 90 and res["schedule"][0] == pytest.approx(1.6 / 6)
    assert doc["train"]["workers"] == 32 and doc["scale"] == "thesis"
    assert "IMAGENET_DIR" in err  # unset: said once, on stderr


def test_config_toml_loads_back_as_the_same_config(tmp_path, capsys):
    assert main(["config", str(EXP6), "--scale", "local", "--set", "train.workers=16"]) == 0
    text = capsys.readouterr().out
    assert "#   global_batch = 64" in text and "#   lr = 0.8" in text  # 16 x 4, linear rule from 0.1 per 8
    printed = tmp_path / "printed.toml"
    printed.write_text(text)
    tomllib.loads(text)  # valid TOML
    again = load_config(printed, "local")
    original = load_config(EXP6, "local", ["train.workers=16"])
    assert again.to_dict() == original.to_dict() and again.resolved() == original.resolved()


def test_schedule_and_config_need_no_data_path(tmp_path, capsys):
    only_model = tmp_path / "resnet.toml"
    only_model.write_text('[model]\nname = "resnet18"\n')
    assert main(["schedule", str(only_model), "--scale", "thesis"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "epoch,lr" and len(lines) == 91 and lines[1] == "0,0.1" and lines[31] == "30,0.01"
    assert main(["config", str(only_model)]) == 0
    assert 'name = "resnet18"' in capsys.readouterr().out
    assert main(["train", str(only_model), "--out", str(tmp_path / "runs")]) == 2  # training still needs data
    assert "data.path is empty" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_is_plain_when_piped_and_names_every_variable():
    out = subprocess.run(["make", "-s", "-o", ".venv/.installed", "help"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert "\033" not in out
    for var in ("SCALE=", "LAUNCHER=", "CLUSTER=", "QUICK=1", "SEEDS=N", "JOBS=N", "DRY_RUN=1", "OUT=DIR",
                "HOROVOD=0", "SITE_TORCH=1", "IMAGENET_DIR=DIR"):
        line = next((x for x in out.splitlines() if x.strip().startswith(var)), "")
        assert len(line.split(None, 1)) == 2, f"{var} has no line saying what it means"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_names_every_experiment_and_its_target():
    """`make help` lists experiments/NN_* as found there, never a typed count that falls behind a new folder."""
    out = subprocess.run(["make", "-s", "-o", ".venv/.installed", "help"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    folders = sorted(p.name for p in (REPO / "experiments").glob("[0-9][0-9]_*") if p.is_dir())
    assert len(folders) >= 13
    listed = {tuple(line.split()) for line in out.splitlines()}
    missing = [name for name in folders if (f"exp{int(name[:2])}", name) not in listed]
    assert not missing, f"make help does not name: {missing}"

@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_passes_out_to_the_study(tmp_path):
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "exp5", f"OUT={tmp_path}"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert f"--out {tmp_path}" in out
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "report", f"OUT={tmp_path}"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert f"--runs {tmp_path}" in out


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_exp3_builds_horovod_first_unless_told_not_to():
    """`make exp3` compares DDP with Horovod: it must build Horovod first (a Makefile comment once kept trailing
    spaces in a variable, which switched the build off for every scale and nothing noticed)."""
    def dry(*args):
        return subprocess.run(["make", "-n", "-o", ".venv/.installed", *args], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout
    build = "trainers/horovod_build/setup.sh"
    assert build in dry("exp3") and build in dry("exp1") and build in dry("exp3", "SCALE=thesis")
    for off in (("HOROVOD=0",), ("DRY_RUN=1",), ("SCALE=node",), ("LAUNCHER=slurm", "CLUSTER=taito")):
        assert build not in dry("exp3", *off), off
    assert build not in dry("exp5")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_cost_for_another_node_never_rewrites_the_committed_tables():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "cost", "GPUS=4"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert "--gpus 4 --out results/report/cost-gpus4" in out  # results/report/ is gitignored
    assert "--out" not in subprocess.run(["make", "-n", "-o", ".venv/.installed", "cost"], cwd=REPO,
                                         capture_output=True, text=True, check=True).stdout


def test_study_dry_run_warns_when_imagenet_dir_is_unset(capsys, monkeypatch):
    from suite.__main__ import main

    monkeypatch.delenv("IMAGENET_DIR", raising=False)
    assert main(["study", str(EXP6), "--scale", "gpu", "--dry-run"]) == 0
    assert "IMAGENET_DIR is not set" in capsys.readouterr().err
    monkeypatch.setenv("IMAGENET_DIR", sys.prefix)
    assert main(["study", str(EXP6), "--scale", "gpu", "--dry-run"]) == 0
    assert "IMAGENET_DIR" not in capsys.readouterr().err


def test_config_prints_only_the_settings_the_data_kind_and_model_read(tmp_path, capsys):
    assert main(["config", str(EXP6), "--scale", "thesis"]) == 0
    thesis = capsys.readouterr().out
    body = [line.split(" =")[0] for line in thesis.splitlines() if line and not line.startswith(("#", "["))]
    for key in ("classes", "per_class", "val_per_class", "data_seed", "synthetic_images", "width"):
        assert key not in body, key  # the generated data's and the CIFAR ResNets' settings: imagefolder + ResNet-50
    assert "path" in body and "decoder" in body
    assert "left out, not read by this data kind or model" in thesis
    assert main(["config", str(EXP6), "--scale", "local"]) == 0
    local = capsys.readouterr().out
    body = [line.split(" =")[0] for line in local.splitlines() if line and not line.startswith(("#", "["))]
    assert {"classes", "per_class", "width"} <= set(body) and "decoder" not in body and "path" not in body
    for text, scale in ((thesis, "thesis"), (local, "local")):  # still loads back as the same config
        printed = tmp_path / f"{scale}.toml"
        printed.write_text(text)
        assert load_config(printed, scale, need_data=False).to_dict() == \
            load_config(EXP6, scale, need_data=False).to_dict()


# ---- issue 36: one set of disk-full errnos, read by the trainer's run and its command line alike --------------------
@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT", "EROFS", "EFBIG"])
def test_a_full_disk_is_one_line_and_exit_1_whichever_errno_says_so(monkeypatch, capsys, code):
    import errno

    import trainers.__main__ as cli
    from contract.runfolder import WRITE_FAILURES
    from trainers import run

    assert run.WRITE_FAILURES is WRITE_FAILURES and getattr(errno, code) in WRITE_FAILURES

    def full(_args):
        raise OSError(getattr(errno, code), "disk says no", "out/r/metrics.jsonl")

    monkeypatch.setattr(cli, "cmd_config", full)
    assert main(["config", "experiments/01_throughput_single_gpu"]) == 1
    assert capsys.readouterr().err == ("error: cannot write out/r/metrics.jsonl: disk says no; "
                                       "free space or pick another --out\n")


def test_config_names_the_allowed_values_of_a_setting_beside_it(capsys):
    from contract.config import ALLOWED

    assert main(["config", str(EXP6), "--scale", "local"]) == 0
    lines = capsys.readouterr().out.splitlines()
    device = next(line for line in lines if line.startswith("device = "))
    assert device.endswith(f"  # one of {', '.join(ALLOWED['train.device'])}"), device
    assert not any("# one of" in line for line in lines if line.startswith("epochs = "))
