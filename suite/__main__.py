"""The front door: python -m suite COMMAND [ARGS...] (installed as `scaling-study` too).

It stands on the top floor (docs/architecture.md) and owns no work of its own: each command is handed whole to the
room that owns it, so every room below keeps its own command line and imports nothing above it.
"""
from __future__ import annotations

import sys
from typing import Callable

from contract.cli import command_word

# command -> (the module whose main(argv) takes it, what it does). Train, schedule, config and data are the trainer's
# own commands: the front door hands them on with the command word, as `python -m trainers` takes them.
ROUTES: dict[str, tuple[str, str]] = {
    "study": ("studies.__main__", "expand an experiment into its runs and launch them (here or with Slurm)"),
    "train": ("trainers.__main__", "one training run (any launcher: none, torchrun, srun, mpirun, horovodrun)"),
    "schedule": ("trainers.__main__", "print the learning rate at the start of each epoch as CSV"),
    "config": ("trainers.__main__", "print the merged, resolved config a run would get"),
    "data": ("trainers.__main__", "the generated dataset, ILSVRC-2012 preparation; `data bench`: the data path's speed"),
    "analysis": ("analysis.__main__", "the report, throughput of logs, cost, the headline (analysis --help)"),
    "advise": ("studies.advise", "a cluster's predicted images/s for 1...N processes from its measured link, "
                                 "step and input (make advise CLUSTER=P)"),
    "tools": ("tools.__main__", "measurements of the suite itself: benches, noise scale, cluster-check (tools --help)"),
    "cluster": ("slurm.local_cluster", "a Slurm cluster of namespace hosts on this machine: start, stop, status, link"),
}
WITH_WORD = {"train", "schedule", "config", "data"}  # the room's own parser reads the command word too
DATA_BENCH = ("tools.__main__", ["data-bench"])  # `data bench` measures the data path: a tool, not the trainer


def usage() -> str:
    return ("usage: python -m suite COMMAND [ARGS...]   (COMMAND --help for each; `make help` lists the make targets)\n"
            + "".join(f"  {word:9} {text}\n" for word, (_, text) in ROUTES.items()))


def route(argv: list[str]) -> tuple[str, list[str]]:
    """(the module to hand the command to, the arguments its main takes)."""
    word = argv[0]
    if argv[:2] == ["data", "bench"]:
        module, head = DATA_BENCH
        return module, head + argv[2:]
    if argv[:2] == ["analysis", "advise"] and any(a.split("=")[0] == "--cluster" for a in argv):
        return "studies.advise", argv[2:]  # a cluster's table runs its probes and jobs: the studies' room
    module, _ = ROUTES[word]
    return module, argv if word in WITH_WORD else argv[1:]


def main_of(module: str) -> Callable[[list[str]], int]:
    """The room's main, imported when its command runs (a study need not load the analysis, nor `--help` torch)."""
    if module == "studies.__main__":
        from studies.__main__ import main as room_main
    elif module == "trainers.__main__":
        from trainers.__main__ import main as room_main
    elif module == "analysis.__main__":
        from analysis.__main__ import main as room_main
    elif module == "studies.advise":
        from studies.advise import main as room_main
    elif module == "tools.__main__":
        from tools.__main__ import main as room_main
    else:
        from slurm.local_cluster import main as room_main
    return room_main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    word = command_word(argv, ROUTES, usage())
    if isinstance(word, int):
        return word
    module, args = route(argv)
    return main_of(module)(args)

if __name__ == "__main__":
    from trainers.launch import end_process  # a trainer's rank ends as `python -m trainers` ends it

    end_process(main())
