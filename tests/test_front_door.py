"""The front door (python -m suite) hands each command to the room that owns it; `python -m trainers study` and
`data bench`, the names the suite's first design gave them, still work, handed up by exec rather than by an import."""
from __future__ import annotations

import re
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


def test_a_study_through_the_front_door_and_through_the_trainers_old_name_prints_the_same_plan():
    new, old = front_door("study", EXP1, "--dry-run"), front_door("study", EXP1, "--dry-run", module="trainers")
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    fresh_ports = re.compile(r"(MASTER_PORT=|--master-port )\d+")  # each run's rendezvous gets a free port
    assert fresh_ports.sub(r"\1P", new.stdout) == fresh_ports.sub(r"\1P", old.stdout)
    assert "-m trainers train" in new.stdout


def test_the_trainer_called_from_python_names_the_front_door_instead_of_importing_it(capsys):
    from trainers.__main__ import main as trainers_main

    assert trainers_main(["study", EXP1, "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == "error: study is the front door's command: call suite.__main__.main"


def test_data_bench_under_its_old_name_reaches_the_tool():
    result = front_door("data", "bench", "--help", module="trainers")
    assert result.returncode == 0 and "python -m tools data-bench" in result.stdout


def test_every_route_reaches_a_main_of_its_room():
    from suite.__main__ import main_of

    for module, _ in ROUTES.values():
        handed = main_of(module)
        assert callable(handed) and handed.__module__ == module
