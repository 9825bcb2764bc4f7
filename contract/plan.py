"""The study plan: an experiment's [study] table expanded into named runs, each a set of --set overrides.

An experiment's config.toml declares its varied factor once (the thesis's one-factor-at-a-time method):

    [study]
    question = "Does naive scaling degrade accuracy as the global batch grows?"
    vary = { "train.workers" = [1, 2, 16, 24, 32] }     # a grid: every combination of the lists
    extra = [{ "train.workers" = 32, "train.backend" = "ddp" }]   # single runs outside the grid
    # an extra run may carry its own name: { run = "baseline-w1", "train.workers" = 1 } -> baseline-w1-s0, -s1...
    # and its own number of seeds: { run = "pilot", seeds = 1 }; --seeds N on the command line overrides every count
    seeds = 1
    nodes = 1                      # or a varied "nodes": real multi-node launches (torchrun nodes, Slurm -N)

`[scale.<scale>.study]` changes any of these at a scale. What the plan becomes on a machine (processes, folders,
Slurm jobs) is the studies' business (studies/); how the `node` scale places a run on its one machine of N GPUs
(P = min(W, N) processes, what does not fit, no multi-node study) is the plan's, below, so that the studies and
`make cost` place it alike.
"""
from __future__ import annotations

import fnmatch
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.config import DISTRIBUTED_BACKENDS, SCALES, ConfigError, find_scales_file, load_config, read_toml
from contract.runfolder import check_run_name

SHORT = {"train.workers": "w", "train.per_worker_batch": "b", "nodes": "n", "tasks_per_node": "t", "train.backend": "",
         "train.framework": "", "data.kind": "",
         "train.precision": "", "train.channels_last": "cl", "train.compile": "compiled"}
LAUNCH_KEYS = ("nodes", "tasks_per_node", "run", "seeds")  # how runs are launched, named or repeated, not
# trainer settings
STUDY_KEYS = ("question", "vary", "extra", "seeds", "nodes", "tasks_per_node", "baseline", "kind")
KINDS = ("quality", "throughput")


@dataclass(frozen=True)
class Run:
    name: str
    settings: dict[str, Any]  # section.key -> value, passed as --set
    nodes: int = 1

    @property
    def workers(self) -> int:
        return int(self.settings.get("train.workers", 1))


@dataclass(frozen=True)
class Study:
    experiment: Path
    config: Path
    question: str
    runs: list[Run]
    baseline: str = ""
    kind: str = "quality"
    overrides: list[str] = field(default_factory=list)  # --set for every run (QUICK, the user's own)
    time_limit: str = ""  # a Slurm job's -t (QUICK's short one); "" = the cluster profile's


# ----------------------------------------------------------------------------------------------------------------
# Expanding a study
# ----------------------------------------------------------------------------------------------------------------
def study_table(config: Path, scale: str) -> dict[str, Any]:
    document = read_toml(config)
    table = dict(document.get("study", {}))
    table.update(document.get("scale", {}).get(scale, {}).get("study", {}))
    check_study_table(table, config)
    return table


def whole_number(where: str, value: Any, at_least: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < at_least:
        raise ConfigError(f"{where} = {value!r} must be a whole number >= {at_least}")


MAX_SEEDS = 100  # the thesis ran 1 seed a configuration, the local studies 3-7; --seeds 100000 (a typo) planned for 15 min


def seed_count(where: str, value: Any) -> None:
    """A number of seeds: at least 1, at most MAX_SEEDS."""
    whole_number(where, value)
    if value > MAX_SEEDS:
        raise ConfigError(f"{where} = {value} is more than {MAX_SEEDS} seeds: each seed is a whole training of every "
                          f"configuration, and {MAX_SEEDS} already narrow a mean's interval to a tenth of one run's "
                          "spread")


def check_study_table(table: dict[str, Any], config: Path) -> None:
    """The [study] table's mistakes, one line each, before any run is planned."""
    where = f"[study] in {config}"
    unknown = sorted(set(table) - set(STUDY_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]} in {where}; known: {', '.join(STUDY_KEYS)}")
    if table.get("kind", "quality") not in KINDS:
        raise ConfigError(f"study.kind = {table['kind']!r} in {config} is not one of {', '.join(KINDS)}")
    for key in ("seeds", "nodes", "tasks_per_node"):
        if key in table:
            (seed_count if key == "seeds" else whole_number)(f"study.{key}", table[key])
    vary = table.get("vary", {})
    if not isinstance(vary, dict):
        raise ConfigError(f"study.vary in {config} must be a table of lists, e.g. {{ \"train.workers\" = [1, 32] }}")
    for key, values in vary.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"study.vary's {key} in {config} must be a non-empty list of values, not {values!r}")
    extras = table.get("extra", [])
    if not isinstance(extras, list) or not all(isinstance(e, dict) for e in extras):
        raise ConfigError(f"study.extra in {config} must be a list of tables, e.g. [{{ \"train.workers\" = 32 }}]")
    for combo in [{k: v for k, v in zip(vary, values)} for values in itertools.product(*vary.values())] + extras:
        for key in ("nodes", "tasks_per_node", "seeds"):
            if key in combo:
                (seed_count if key == "seeds" else whole_number)(f"study {key}", combo[key])


def run_name(values: dict[str, Any], seed: int | None) -> str:
    parts = []
    for key, value in values.items():
        prefix = SHORT.get(key, key.split(".")[-1])
        parts.append(prefix if value is True else f"{prefix}{value}")  # a switch that is on: its name alone
    if seed is not None:
        parts.append(f"s{seed}")
    return "-".join(parts) or "run"


def expand(config: Path, scale: str, seeds: int | None = None) -> list[Run]:
    table = study_table(config, scale)
    vary: dict[str, list] = table.get("vary", {})
    extras = [dict(extra) for extra in table.get("extra", [])]
    grid = [dict(zip(vary, values)) for values in itertools.product(*vary.values())] if vary else []
    combos = grid + extras or [{}]
    base_seed = load_config(config, scale).train.seed
    runs = []
    for combo in combos:
        nodes = int(combo.get("nodes", table.get("nodes", 1)))
        per_node = combo.get("tasks_per_node", table.get("tasks_per_node"))
        n_seeds = seeds if seeds is not None else combo.get("seeds", table.get("seeds", 1))
        for s in range(n_seeds):
            settings = {k: v for k, v in combo.items() if k not in LAUNCH_KEYS}
            if per_node and "train.workers" not in settings:  # N nodes x M GPUs
                settings["train.workers"] = nodes * int(per_node)
            settings["train.seed"] = base_seed + s
            name = (f"{combo['run']}-s{base_seed + s}" if "run" in combo  # a named extra run
                    else run_name({k: v for k, v in combo.items() if k != "seeds"}, base_seed + s))
            # runs at another scale get their own folders
            runs.append(Run(check_run_name(name if scale == "local" else f"{scale}-{name}"), settings, nodes))
    refuse_duplicate_names(runs, config)
    return runs


def refuse_duplicate_names(runs: list[Run], config: Path) -> None:
    """Two plans in one folder would train beside each other and pool into one row: one name, one run."""
    seen: set[str] = set()
    for run in runs:
        if run.name in seen:
            raise ConfigError(f"two runs of {config}'s study are named {run.name}; give each [study] extra entry "
                              "its own `run` name or settings")
        seen.add(run.name)


def quick_tables(config: Path, scale: str) -> dict[str, dict[str, Any]]:
    """The `[quick]` tables of experiments/scales.toml at `scale`: the shared ones, `[quick.<scale>.*]` over them."""
    scales = find_scales_file(config)
    quick = read_toml(scales).get("quick", {}) if scales else {}
    tables = {section: dict(values) for section, values in quick.items() if section not in SCALES}
    for section, values in quick.get(scale, {}).items():
        tables.setdefault(section, {}).update(values)
    return tables


def quick_overrides(config: Path, scale: str) -> list[str]:
    """The `[quick]` tables as --set lines: the study shrunk to a smoke run."""
    benchmark = load_config(config, scale).bench.batches > 0
    return [f"{section}.{key}={json.dumps(value)}" for section, values in quick_tables(config, scale).items()
            for key, value in values.items()
            if section != "slurm"  # the job's, not the trainer's (quick_time_limit)
            and (section != "bench" or benchmark)]  # a quick quality study stays a training, not a benchmark


def quick_time_limit(config: Path, scale: str) -> str:
    """A quick run's Slurm time limit at `scale` (`[quick.<scale>.slurm] time_limit`); "" = the profile's."""
    return str(quick_tables(config, scale).get("slurm", {}).get("time_limit", ""))


def load_study(experiment: Path, scale: str, quick: bool, seeds: int | None, overrides: list[str],
               only: list[str] = ()) -> Study:
    """only: run-name patterns (fnmatch, e.g. "w32-*"): the study's runs of those names alone."""
    config = experiment / "config.toml"
    if seeds is not None:
        seed_count("--seeds", seeds)
    if not config.is_file():
        raise ConfigError(f"{experiment} has no config.toml; pass an experiments/NN_name folder")
    table = study_table(config, scale)
    extra = (quick_overrides(config, scale) if quick else []) + list(overrides)
    runs = expand(config, scale, 1 if quick and not seeds else seeds)
    refuse_multi_node(runs, experiment, scale)
    if only:
        chosen = [r for r in runs if any(fnmatch.fnmatchcase(r.name, pattern) for pattern in only)]
        if not chosen:
            raise ConfigError(f"--only {' '.join(only)} matches none of {experiment.name}'s runs "
                              f"({', '.join(r.name for r in runs)})")
        runs = chosen
    for run in runs:  # validate every run's config now, not after the first hour
        load_config(config, scale, extra + [f"{k}={json.dumps(v)}" for k, v in run.settings.items()])
    return Study(experiment, config, table.get("question", ""), runs, table.get("baseline", ""),
                 table.get("kind", "quality"), extra, quick_time_limit(config, scale) if quick else "")


# ----------------------------------------------------------------------------------------------------------------
# The node scale: one machine of N GPUs (studies/node.py counts them where a study runs)
# ----------------------------------------------------------------------------------------------------------------
NODE_SCALE = "node"
NODE_GPUS = 8  # a node's GPUs when experiments/scales.toml [node.study] says nothing


def declared_node_gpus(config: Path) -> int:
    """The node's GPUs that experiments/scales.toml declares ([node.study] gpus), else NODE_GPUS."""
    scales = find_scales_file(Path(config))
    gpus = (read_toml(scales).get(NODE_SCALE, {}).get("study", {}) if scales else {}).get("gpus", NODE_GPUS)
    return check_node_gpus(gpus, "[node.study] gpus in experiments/scales.toml")


def check_node_gpus(gpus: int, where: str = "--gpus") -> int:
    """The node's GPU count, from `where` (--gpus N, make GPUS=N; the GPUs visible; scales.toml): at least 2. A
    node of one GPU would run W workers as one DDP/Horovod process, which the trainer refuses (one process is the
    emulated backend: SCALE=gpu)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 2:
        raise ConfigError(f"{where} {gpus}: the node scale spreads the workers over a node of 2 or more GPUs; on "
                          "one GPU use SCALE=gpu (its workers emulated on that GPU)")
    return gpus


def node_processes(workers: int, backend: str, gpus: int) -> int:
    """Processes a run starts on the node: one a GPU for DDP/Horovod, at most the node's GPUs (W/P workers each);
    one for the one-process backends (emulated, single, DataParallel)."""
    return min(workers, gpus) if backend in DISTRIBUTED_BACKENDS else 1


def node_gpus_used(workers: int, backend: str, gpus: int) -> int:
    """GPUs a run computes on at the node: its processes' (one each), DataParallel's W, one for emulated workers."""
    return workers if backend == "dp" else node_processes(workers, backend, gpus)


def node_fits(workers: int, backend: str, gpus: int, throughput: bool) -> bool:
    """Whether the node can run it: a throughput run measures W real GPUs (never emulated), DataParallel too."""
    return not (throughput or backend == "dp") or workers <= gpus


def refuse_multi_node(runs: list[Run], experiment: Path, scale: str) -> None:
    """The node scale is one machine: a study that launches several nodes (experiment 3) is one line."""
    several = [r for r in runs if r.nodes > 1]
    if scale == NODE_SCALE and several:
        raise ConfigError(f"{Path(experiment).name} runs across several nodes ({several[0].name} on "
                          f"{several[0].nodes}); the node scale is one machine: its 1...N GPUs are experiment 2 "
                          "(make exp2 SCALE=node); across nodes use SCALE=thesis (LAUNCHER=slurm CLUSTER=<profile>)")
