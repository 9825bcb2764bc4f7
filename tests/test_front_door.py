"""The front door (python -m suite) hands each command to the room that owns it; the trainer's command line knows
only its own commands (`python -m trainers study` and `data bench`, the suite's first design's names, are gone)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from suite.__main__ import ROUTES, main, route
from tests.helpers import REPO, final_state, max_difference, run, trainer_env, write_config

EXP1 = "experiments/01_throughput_single_gpu"


def front_door(*args: str, module: str = "suite") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv, module, handed", [
    (["train", "x.toml"], "trainers.__main__", ["train", "x.toml"]),
    (["data", "generate", "--out", "d"], "trainers.__main__", ["data", "generate", "--out", "d"]),
    (["data", "bench", "DIR"], "tools.__main__", ["data-bench", "DIR"]),
    (["study", EXP1, "--dry-run"], "studies.__main__", [EXP1, "--dry-run"]),
    (["analysis", "report"], "analysis.__main__", ["report"]),
    (["tools", "bench-comm"], "tools.__main__", ["bench-comm"]),
    (["cluster", "status", "--dir", "c"], "slurm.local_cluster", ["status", "--dir", "c"]),
])
def test_each_command_goes_whole_to_the_room_that_owns_it(argv, module, handed):
    assert route(argv) == (module, handed)


def test_every_room_is_reachable_and_an_unknown_command_is_one_line(capsys):
    assert {module.split(".")[0] for module, _ in ROUTES.values()} == {"studies", "trainers", "analysis", "tools",
                                                                      "slurm"}
    assert main(["sturdy"]) == 2
    assert capsys.readouterr().err.strip() == f"error: no command 'sturdy'; the commands: {', '.join(ROUTES)}"
    assert main([]) == 2 and "usage: python -m suite COMMAND" in capsys.readouterr().out


def test_the_trainer_knows_no_study_or_data_bench_of_its_own(capsys):
    from trainers.__main__ import main as trainers_main

    for argv, word in ((["study", EXP1, "--dry-run"], "'study'"), (["data", "bench", "DIR"], "'bench'")):
        with pytest.raises(SystemExit) as exit_:
            trainers_main(argv)
        assert exit_.value.code == 2 and f"invalid choice: {word}" in capsys.readouterr().err


def test_a_study_through_the_front_door_prints_its_plan():
    result = front_door("study", EXP1, "--dry-run")
    assert result.returncode == 0 and "-m trainers train" in result.stdout, result.stderr


def test_every_route_reaches_a_main_of_its_room():
    from suite.__main__ import main_of

    for module, _ in ROUTES.values():
        handed = main_of(module)
        assert callable(handed) and handed.__module__ == module


# ---- issue 65, item 3: the front door trains every config `python -m trainers train` trains ----------------------
def without_pinned_isa() -> dict:
    """The trainer's environment without the variables train.cpu_isa sets, so the trainer must set them itself."""
    env = trainer_env()
    for key in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        env.pop(key, None)
    return env


def test_a_pinned_isa_trains_through_the_front_door_as_in_an_environment_set_before_it(tmp_path):
    """train.cpu_isa, the way to rerun a reference run bit for bit: `python -m suite train` pins the kernels before
    torch loads, and trains exactly what a trainer started with them already in its environment trains."""
    from contract.machine import cpuinfo

    if "avx2" not in cpuinfo()[1] or "fma" not in cpuinfo()[1]:
        pytest.skip("this CPU has no AVX2 kernels to pin")
    cfg = write_config(tmp_path / "c.toml", {"train": {"epochs": 1}})
    door = run([sys.executable, "-m", "suite", "train", str(cfg), "--set", "train.cpu_isa=avx2", "--out",
                str(tmp_path), "--run", "door"], env=without_pinned_isa())
    assert door.returncode == 0, door.stderr[-2000:]
    preset = run([sys.executable, "-m", "trainers", "train", str(cfg), "--set", "train.cpu_isa=avx2", "--out",
                  str(tmp_path), "--run", "preset"],
                 env={**without_pinned_isa(), "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert preset.returncode == 0, preset.stderr[-2000:]
    cpu = json.loads((tmp_path / "c" / "door" / "manifest.json").read_text())["cpu"]
    assert (cpu["torch_capability"], cpu["ATEN_CPU_CAPABILITY"], cpu["ONEDNN_MAX_CPU_ISA"]) == ("AVX2", "avx2", "AVX2")
    assert max_difference(final_state(tmp_path / "c" / "door"), final_state(tmp_path / "c" / "preset")) == 0.0


def test_a_tensorflow_config_called_in_a_process_that_holds_torch_is_one_line(tmp_path, capsys):
    """TensorFlow never shares a process with torch (importing triton after TensorFlow segfaults): called from
    Python where torch is loaded (this test's process), the trainer refuses rather than import TensorFlow here."""
    import torch  # noqa: F401  (loaded, as in any process that trained)

    cfg = write_config(tmp_path / "tf.toml", {"train": {"framework": "tensorflow", "backend": "mwms", "workers": 1},
                                               "bench": {"batches": 4, "warmup_batches": 1}})
    assert main(["train", str(cfg), "--out", str(tmp_path), "--run", "tf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: train.framework = 'tensorflow' trains in a process without torch") and \
        err.count("\n") == 1, err
    assert not (tmp_path / "tf").exists()
