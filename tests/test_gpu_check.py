"""`python -m tools gpu-check`: the folder it writes and its exit codes, checked on the CPU (the checks
themselves need a GPU: tests/test_gpu.py and the GPU rows run there)."""
import json

import pytest
import torch

from tools import gpu_check
from tools.gpu_check import Check


def test_names_the_folder_after_the_gpu():
    assert gpu_check.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert gpu_check.gpu_slug("Tesla P100-PCIE-16GB") == "p100-pcie-16gb"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the check would run")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_2(tmp_path, capsys):
    from tools.__main__ import main

    assert main(["gpu-check", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: no CUDA GPU visible: gpu-check verifies a GPU machine (run it there)"]
    assert not any(tmp_path.iterdir())


def passing(out, data):
    (out / "passing.log").write_text("fine\n")
    return Check("passing", True, "1.00 x", {"ratio": 1.0})


def failing(out, data):
    return [Check("failing", False, "0.50 x | below the goal"), Check("skipped", None, "no data")]


def test_each_finished_check_is_written_before_the_next_starts(tmp_path):
    """A device lease can end mid-way: the checks done by then are in the folder."""
    out = tmp_path / "h200-2026-11-26"

    def interrupted(out, data):
        assert [c["name"] for c in json.loads((out / "checks.json").read_text())["checks"]] == ["passing"]
        assert "| passing | pass |" in (out / "README.md").read_text()
        raise KeyboardInterrupt  # the lease's timeout

    with pytest.raises(KeyboardInterrupt):
        gpu_check.run_checks([passing, interrupted], out, None, {"gpu": "NVIDIA H200", "date": "2026-11-26"})


def test_writes_json_and_a_table_two_levels_deep_and_exits_1_when_a_check_fails(tmp_path, capsys):
    out = tmp_path / "gpu_checks" / "h100-2026-11-24"
    machine = {"gpu": "NVIDIA H100", "date": "2026-11-24"}
    assert gpu_check.run_checks([passing, failing], out, None, machine) == 1
    written = json.loads((out / "checks.json").read_text())
    assert written["machine"] == machine
    assert [(c["name"], c["ok"]) for c in written["checks"]] == [("passing", True), ("failing", False),
                                                                 ("skipped", None)]
    table = (out / "README.md").read_text()
    assert "| failing | FAIL | 0.50 x / below the goal |" in table and "| skipped | skipped | no data |" in table
    assert all(p.parent == out for p in out.rglob("*"))  # results/gpu_checks/<gpu>-<date>/file, nothing deeper
    assert "failed: failing" in capsys.readouterr().out
    assert gpu_check.run_checks([passing], tmp_path / "ok", None, machine) == 0


def test_jpeg_rows_without_a_data_folder_are_skipped_not_failed(tmp_path):
    checks = gpu_check.check_jpegs(tmp_path, None)
    assert [(c.name, c.ok) for c in checks] == [("jpeg-cpu", None), ("jpeg-gpu", None), ("jpeg-dali", None)]
    assert "IMAGENET_DIR" in checks[0].detail


@pytest.mark.parametrize("dali_installed", [True, False])
def test_the_jpeg_rows_name_their_decoder_and_the_readme_the_loader_to_use(tmp_path, monkeypatch, dali_installed):
    """The three real-JPEG rows against synthetic data (the trainer's bench runs faked: they need a GPU); without
    DALI its row is skipped with the make target, not failed."""
    rates = {"synthetic": 1000.0, "jpeg-cpu": 600.0, "jpeg-gpu": 500.0, "jpeg-dali": 950.0}
    ran = []

    def train_bench(out, runs, name, *settings, **kw):
        ran.append(name)
        return {"images_per_s_steady": rates[name], "data_share": 0.1}, ""

    monkeypatch.setattr(gpu_check, "train_bench", train_bench)
    monkeypatch.setattr(gpu_check, "dali_missing", lambda: None if dali_installed else "run `make setup-dali`")
    monkeypatch.setattr(gpu_check, "allocated_loader_workers", lambda: 15)  # a 16-core GPU machine's allocation
    checks = gpu_check.check_jpegs(tmp_path, tmp_path)
    assert ran == ["synthetic", "jpeg-cpu", "jpeg-gpu"] + (["jpeg-dali"] if dali_installed else [])
    by_name = {c.name: c for c in checks}
    assert "15 loader processes" in by_name["jpeg-cpu"].detail and "SMs" in by_name["jpeg-gpu"].detail
    if dali_installed:
        assert by_name["jpeg-dali"].ok and "hardware JPEG decoder" in by_name["jpeg-dali"].detail
        assert all(c.ok for c in checks)  # the best, 0.95, meets the goal: every row that ran passes
    else:
        assert by_name["jpeg-dali"].ok is None and "make setup-dali" in by_name["jpeg-dali"].detail
        assert by_name["jpeg-cpu"].ok is False  # the best that ran, 0.6, misses it
    gpu_check.write_folder(tmp_path, checks, {"gpu": "NVIDIA H100"})
    best = "dali" if dali_installed else "cpu"
    assert f'Loader to use on this GPU: `data.decoder = "{best}"`' in (tmp_path / "README.md").read_text()


def test_each_jpeg_row_reports_its_own_runs_seconds_and_the_synthetic_baselines_in_its_figures(tmp_path,
                                                                                                  monkeypatch):
    """The table's seconds column: each decoder's run, not the whole check's time repeated on every row."""
    clock = {"now": 0.0}
    took = {"synthetic": 30.0, "jpeg-cpu": 100.0, "jpeg-gpu": 60.0}

    def train_bench(out, runs, name, *settings, **kw):
        clock["now"] += took[name]
        return {"images_per_s_steady": 500.0, "data_share": 0.1}, ""

    monkeypatch.setattr(gpu_check, "train_bench", train_bench)
    monkeypatch.setattr(gpu_check, "dali_missing", lambda: "run `make setup-dali`")
    monkeypatch.setattr(gpu_check.time, "time", lambda: clock["now"])
    gpu_check.run_checks([gpu_check.check_jpegs], tmp_path, tmp_path, {"gpu": "NVIDIA H100"})
    rows = {c["name"]: c for c in json.loads((tmp_path / "checks.json").read_text())["checks"]}
    assert (rows["jpeg-cpu"]["seconds"], rows["jpeg-gpu"]["seconds"], rows["jpeg-dali"]["seconds"]) == (100, 60, 0)
    assert rows["jpeg-cpu"]["figures"]["synthetic_seconds"] == 30
    assert "| jpeg-cpu | pass |" in (tmp_path / "README.md").read_text()
    assert "| 100 |" in (tmp_path / "README.md").read_text() and "| 190 |" not in (tmp_path / "README.md").read_text()


def test_the_jpeg_goal_is_the_better_decoders():
    synthetic = {"images_per_s_steady": 1000.0}
    slow = gpu_check.jpeg_check("cpu", {"images_per_s_steady": 500.0, "data_share": 0.5}, synthetic, "")
    assert slow.figures["ratio"] == 0.5 and "0.50 x synthetic" in slow.detail
    assert gpu_check.jpeg_check("gpu", None, synthetic, "Traceback: boom").ok is False


def test_a_short_lease_runs_only_the_checks_named_and_a_misspelt_one_is_one_line(capsys):
    from tools.__main__ import main

    assert gpu_check.selected_checks("jpegs, tests") == [gpu_check.check_jpegs, gpu_check.check_tests]  # as named
    assert gpu_check.selected_checks(None) == gpu_check.CHECKS
    assert main(["gpu-check", "--checks", "tests,jepgs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--checks 'tests,jepgs': name some of tests, bench, jpegs, exp1" in err[0]


def test_a_jpeg_row_says_the_loader_workers_its_allocation_gave_it():
    """Issue 47: the row's loader workers are what the run had (data.loader_workers at most the rank's CPUs, from its
    manifest's placement), not the constant asked for."""
    synthetic = {"images_per_s_steady": 1000.0}
    placed = {"cpus": 4, "threads": 4, "loader_workers": 4}
    row = gpu_check.jpeg_check("cpu", {"images_per_s_steady": 900.0, "data_share": 0.1}, synthetic, "", placed)
    assert (row.figures["loader_workers"], row.figures["cpus"]) == (4, 4)
    assert row.detail.endswith("libjpeg-turbo in 4 loader processes")


def test_the_jpeg_rows_loader_workers_follow_the_allocation(monkeypatch):
    """All the CPUs this process may run on, less the training process's own: 15 on a 16-core GPU machine."""
    import os

    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert gpu_check.allocated_loader_workers() == 15
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")  # a Slurm job that asked for 4 CPUs a task
    assert gpu_check.allocated_loader_workers() == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert gpu_check.allocated_loader_workers() == 1  # never none


def test_the_prepared_copy_is_the_suites_resize_of_every_image(tmp_path):
    from PIL import Image

    src = tmp_path / "photos"
    for split in ("train", "val"):
        (src / split / "ants").mkdir(parents=True)
        Image.new("RGB", (640, 480), (200, 30, 30)).save(src / split / "ants" / "a.jpg")
        Image.new("RGB", (100, 80), (20, 30, 200)).save(src / split / "ants" / "small.jpg")
    copy = gpu_check.prepared_copy(src, 256, tmp_path / "tmp")
    assert copy == tmp_path / "tmp" / "photos-256"
    assert Image.open(copy / "train" / "ants" / "a.jpg").size == (341, 256)  # shorter side 256, aspect kept
    assert Image.open(copy / "val" / "ants" / "small.jpg").size == (100, 80)  # already smaller: copied as it is


def test_a_resize_below_32_pixels_is_one_line(capsys):
    from tools.__main__ import main

    assert main(["gpu-check", "--resize", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --resize 0: give the shorter side in pixels, at least 32 (e.g. 256)"]
