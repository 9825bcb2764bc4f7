"""The front door (python -m suite) hands each command to the room that owns it; the trainer's command line knows
only its own commands (`python -m trainers study` and `data bench`, the suite's first design's names, are gone)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from suite.__main__ import ROUTES, main, route
from tests.helpers import REPO

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
