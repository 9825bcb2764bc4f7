"""Config loading: thesis defaults, layering, --set, and one clear line for every mistake a user can make."""
import sys

import pytest

from tests.helpers import REPO, run, write_config
from contract.config import ConfigError, load_config


def test_defaults_are_the_thesis(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.toml", {}), scale="thesis")
    d = type(cfg)()
    assert (d.model.name, d.train.epochs, d.train.per_worker_batch) == ("resnet50", 90, 128)
    assert (d.optim.momentum, d.optim.weight_decay, d.lr.base, d.lr.base_batch) == (0.9, 1e-4, 0.1, 256)
    assert (d.lr.decay, d.lr.step_every, d.lr.milestones) == ("step", 30, (30, 60, 80))
    assert (d.data.image_size, d.data.loader_workers) == (224, 4)


def test_resolved_config_applies_the_linear_rule(tmp_path):
    path = write_config(tmp_path / "c.toml", {"lr": {"base": 0.1, "base_batch": 256, "scaling": "linear"},
                                             "train": {"workers": 32, "per_worker_batch": 128}})
    cfg = load_config(path)
    resolved = cfg.resolved("emulated")
    assert resolved["global_batch"] == 4096
    assert resolved["lr"] == pytest.approx(1.6)
    assert len(resolved["schedule"]) == cfg.train.epochs


def test_scale_tables_and_overrides_layer_in_order(tmp_path):
    (tmp_path / "scales.toml").write_text("[local.train]\nepochs = 7\nprint_freq = 3\n")
    exp = tmp_path / "07_x"
    exp.mkdir()
    path = write_config(exp / "config.toml", {})
    text = path.read_text().replace("[train]\nepochs = 2\n", "[train]\n")
    path.write_text(text + "[scale.local.train]\nprint_freq = 5\n")
    cfg = load_config(path, "local", ["train.seed=9"])
    assert (cfg.train.epochs, cfg.train.print_freq, cfg.train.seed) == (7, 5, 9)
    assert cfg.experiment == "07_x" and cfg.scale == "local"


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epoch=3", "unknown key train.epoch"),
        ("trian.epochs=3", "unknown section [trian]"),
        ("train.epochs=three", "has the wrong type"),
        ("train.per_worker_batch=0", "train.per_worker_batch = 0 must be > 0"),
        ("lr.warmup=stepping", "lr.warmup_epochs = 5 must be between 1 and train.epochs - 1"),
        ("lr.scaling=cubic", "lr.scaling = 'cubic' is not one of"),
        ("data.kind=imagefolder", "data.path is empty"),
        ("epochs", "write section.key=value"),
    ],
)
def test_mistakes_are_one_line_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_config(write_config(tmp_path / "c.toml"), "local", [override])


def test_milestone_beyond_the_last_epoch_is_refused(tmp_path):
    path = write_config(tmp_path / "c.toml", {"lr": {"decay": "milestones", "milestones": [1, 5]}})
    with pytest.raises(ConfigError, match="lr.milestone 5 is beyond the last epoch"):
        load_config(path)


def test_missing_data_path_is_refused_before_anything_starts(tmp_path, capsys):
    from trainers.__main__ import main

    path = write_config(tmp_path / "c.toml", {"data": {"kind": "imagefolder", "path": str(tmp_path / "nope")}})
    assert main(["train", str(path), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_cli_prints_one_line_and_exits_2_before_anything_starts(tmp_path):
    path = write_config(tmp_path / "c.toml")
    result = run([sys.executable, "-m", "trainers", "train", str(path), "--out", str(tmp_path), "--set", "train.epochs=-1"])
    assert result.returncode == 2
    assert result.stderr.strip() == "error: train.epochs = -1 must be > 0"
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_schedule_command_prints_the_thesis_warmup(tmp_path):
    path = write_config(tmp_path / "c.toml", {"train": {"epochs": 90, "workers": 32, "per_worker_batch": 128},
                                             "lr": {"base": 0.1, "base_batch": 256, "scaling": "linear",
                                                    "warmup": "gradual", "decay": "milestones"}})
    result = run([sys.executable, "-m", "trainers", "schedule", str(path)])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == ["epoch,lr", "0,0.05", "1,0.36"]
    assert lines[6] == "5,1.6" and lines[31] == "30,0.16" and lines[-1] == "89,0.0016"


GENERATED = ["data.kind='generated'", "data.per_class=2", "data.val_per_class=1"]


@pytest.mark.parametrize("sets, message", [
    (["optim.weight_decay=-1e-4"], "error: optim.weight_decay = -0.0001 must be >= 0"),
    (["optim.momentum=-0.9"], "error: optim.momentum = -0.9 must be >= 0"),
    (["optim.momentum=nan"], "error: optim.momentum = nan must be >= 0"),
    ([*GENERATED, "data.classes=11"], "error: data.classes = 11 is more than model.num_classes = 10"),
    ([*GENERATED, "data.classes=5", "data.val_per_class=0"], "error: data.val_per_class = 0 must be > 0"),
    ([*GENERATED, "data.classes=0"], "error: data.classes = 0 must be > 0"),
    (["data.synthetic_images=0"], "error: data.synthetic_images = 0 must be > 0"),
    (["model.name='resnet500'"], "error: model.name = 'resnet500' is not one of resnet18, "),
    (["model.width=0"], "error: model.width = 0 must be > 0"),
    (["train.seed=-1"], "error: train.seed = -1 must be >= 0"),
    (["train.threads=100000"], "error: train.threads = 100000 is more than the "),
    (["train.backend='ddp'", "train.workers=1", "train.init_method='file:///no/such/dir/init'"],
     "error: train.init_method file:///no/such/dir/init: folder /no/such/dir does not exist"),
    (["telemetry.interval_s=-5"], "error: telemetry.interval_s = -5.0 must be >= 0"),
    ([*GENERATED, "data.classes=2", "data.image_size=3200"], "error: data.image_size = 3200 is too large"),
    (["data.loader_workers=100000"], "error: data.loader_workers = 100000 is more than 4 per core"),
    # issue 26, item 3: sizes beyond any sane range, refused before a folder or the data cache is written
    ([*GENERATED, "data.per_class=1000000000"], "error: data.per_class = 1000000000 is more than this suite's limit"),
    ([*GENERATED, "model.num_classes=11", "data.classes=11", "data.per_class=100000", "data.val_per_class=100000"],
     "error: the generated data set would hold 2,200,000 images"),
    (["train.epochs=9223372036854775807"], "error: train.epochs = 9223372036854775807 is more than this suite's limit"),
    (["train.workers=100000"], "error: train.workers = 100000 is more than this suite's limit"),
    (["train.per_worker_batch=100000"], "error: train.per_worker_batch = 100000 is more than this suite's limit"),
    ([*GENERATED, "data.classes=5", "train.per_worker_batch=6"],
     "error: the global batch (12 = train.workers x train.per_worker_batch) is larger than the 10 training images"),
    (["data.image_size=4096"], "error: data.image_size = 4096 is more than this suite's limit"),
    (["data.max_image_pixels=10000000000"], "error: data.max_image_pixels = 10000000000 is more than"),
    # issue 40, item 9: a negative warm-up without a warm-up, a seed no generator takes (2**70)
    (["lr.warmup_epochs=-1"], "error: lr.warmup_epochs = -1 must be >= 0"),
    (["train.seed=1180591620717411303424"], "error: train.seed = 1180591620717411303424 is more than this suite's "
                                            "limit of 9,223,372,036,854,775,807"),
])
def test_cli_refuses_mistakes_in_one_line_before_any_folder_or_data(tmp_path, capsys, monkeypatch, sets, message):
    from trainers.__main__ import main

    monkeypatch.setenv("SCALING_STUDY_CACHE", str(tmp_path / "cache"))
    path = write_config(tmp_path / "c.toml")
    argv = ["train", str(path), "--out", str(tmp_path / "runs")] + [a for s in sets for a in ("--set", s)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_cuda_without_a_gpu_is_refused_before_the_data_is_made(tmp_path, capsys, monkeypatch):
    import torch

    from trainers.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("SCALING_STUDY_CACHE", str(tmp_path / "cache"))
    path = write_config(tmp_path / "c.toml", {"data": {"kind": "generated", "classes": 2, "per_class": 4,
                                                       "val_per_class": 1}, "train": {"device": "cuda"}})
    assert main(["train", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == "error: train.device = 'cuda' but no GPU is visible; use --set train.device=cpu\n"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("where", ["file", "read-only"])
def test_an_output_folder_that_cannot_be_written_is_one_line(tmp_path, capsys, where):
    import os

    from trainers.__main__ import main

    if where == "file":
        (tmp_path / "taken").write_text("a file where the runs folder should be")
        out = tmp_path / "taken" / "runs"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder; the 'file' case covers root")
        out = tmp_path / "ro" / "runs"
        out.parent.mkdir()
        out.parent.chmod(0o555)
    path = write_config(tmp_path / "c.toml")
    assert main(["train", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: output folder {out}/c/") and err.count("\n") == 1, err


# ---- issue 40, item 9: a config saved with a UTF-8 byte-order mark (Windows editors) reads as without it -----------
def test_a_config_starting_with_a_utf8_bom_is_read_as_without_it(tmp_path):
    plain = write_config(tmp_path / "plain.toml", {"train": {"epochs": 3}})
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert load_config(bom).to_dict() == load_config(plain).to_dict()


# ---- issue 36: each field's allowed values declared once, beside the schema; validate and `trainers config` read it --
@pytest.mark.parametrize("key", ["data.kind", "data.val_mode", "data.decoder", "train.device", "train.backend",
                                 "train.precision", "model.name", "optim.name", "lr.warmup"])
def test_a_value_outside_a_fields_allowed_ones_is_refused_naming_them(key):
    from contract.config import ALLOWED, from_dict
    from tests.helpers import TINY

    section, name = key.split(".")
    with pytest.raises(ConfigError) as refused:
        from_dict({**TINY, section: {**TINY.get(section, {}), name: "bogus"}})
    assert str(refused.value) == f"{key} = 'bogus' is not one of {', '.join(ALLOWED[key])}"
