"""The study plan: an experiment's [study] table expanded into named runs, each with its resolved config, built once.

An experiment's config.toml declares its varied factor once (the thesis's one-factor-at-a-time method):

    [study]
    question = "Does naive scaling degrade accuracy as the global batch grows?"
    vary = { "train.workers" = [1, 2, 16, 24, 32] }     # a grid: every combination of the lists
    extra = [{ "train.workers" = 32, "train.backend" = "ddp" }]   # single runs outside the grid
    # an extra run may carry its own name: { run = "baseline-w1", "train.workers" = 1 } -> baseline-w1-s0, -s1...
    # and its own number of seeds: { run = "pilot", seeds = 1 }; --seeds N on the command line overrides every count
    # and its first seed: { run = "sgd-w8", seeds = 3, first_seed = 1 } -> sgd-w8-s1, -s2, -s3 (seeds that a
    # tuning run at seed 0 never drew), and the one scale it is planned at: { run = "sgd-w8", scale = "local", ... }
    # (a row that scale's own results chose, as experiment 13's rates: another scale runs its own choice)
    seeds = 1
    nodes = 1                      # or a varied "nodes": real multi-node launches (torchrun nodes, Slurm -N)
    next = "`make expN-next OUT={out}` ..."    # a study run in steps: the command its last line names after its runs

`[scale.<scale>.study]` changes any of these at a scale. What the plan becomes on a machine (processes, folders,
Slurm jobs) is the studies' business (studies/); how the `node` scale places a run on its one machine of N GPUs
(P = min(W, N) processes, what does not fit, no multi-node study) is the plan's, below, so that the studies and
`make cost` place it alike.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.config import (DISTRIBUTED_BACKENDS, SCALES, BatchTooLarge, Config, ConfigError, chosen_backend,
                             find_scales_file, load_config, parse_override, read_toml)
from contract import tuned
from contract.fingerprint import is_benchmark
from contract.runfolder import check_run_name

SHORT = {"train.workers": "w", "train.per_worker_batch": "b", "nodes": "n", "tasks_per_node": "t", "train.backend": "",
         "train.framework": "", "data.kind": "",
         "train.precision": "", "train.channels_last": "cl", "train.compile": "compiled"}
LAUNCH_KEYS = ("nodes", "tasks_per_node", "run", "seeds", "first_seed", "scale")  # how runs are launched, named,
# repeated or placed at a scale, not trainer settings
STUDY_KEYS = ("question", "vary", "extra", "seeds", "nodes", "tasks_per_node", "baseline", "kind", "next", "tuned")
NEXT_FIELDS = ("out", "scale")  # what a study's `next` command may name: {out} its runs folder, {scale} its scale
KINDS = ("quality", "throughput")


@dataclass(frozen=True)
class Run:
    name: str
    settings: dict[str, Any]  # section.key -> value: what [study] varies for this run (its name says them)
    cfg: Config  # the run's resolved config, built here once: the study saves it as the run's config.json
    nodes: int = 1

    @property
    def workers(self) -> int:
        return int(self.settings.get("train.workers", 1))

    @property
    def backend(self) -> str:
        """The backend the run is planned with (train.backend, "auto" read without a launcher yet)."""
        return chosen_backend(self.cfg)


@dataclass(frozen=True)
class Study:
    experiment: Path
    config: Path
    question: str
    runs: list[Run]
    baseline: str = ""
    kind: str = "quality"
    overrides: list[str] = field(default_factory=list)  # --set for every run (QUICK, the user's own), in each cfg
    time_limit: str = ""  # a Slurm job's -t ([quick.<scale>.slurm] time_limit); "" = the cluster profile's
    left_out: list[str] = field(default_factory=list)  # QUICK: runs whose global batch its small set cannot hold
    next_step: str = ""  # [study] next: the command after these runs (a study run in steps), {out} and {scale} in it


# ----------------------------------------------------------------------------------------------------------------
# Expanding a study
# ----------------------------------------------------------------------------------------------------------------
def study_table(config: Path, scale: str) -> dict[str, Any]:
    document = read_toml(config)
    table = dict(document.get("study", {}))
    table.update(document.get("scale", {}).get(scale, {}).get("study", {}))
    if "tuned" in table:  # a tuned study's plan and decisions, as data (contract/tuned.py): its rows join extra's
        table["extra"] = list(table.get("extra", [])) + tuned.rows(config.parent / str(table["tuned"]))
    check_study_table(table, config)
    if "extra" in table:  # a row that names its scale is planned there alone
        table["extra"] = [row for row in table["extra"] if row.get("scale", scale) == scale]
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
    named = {name for _, name, _, _ in string.Formatter().parse(str(table.get("next", ""))) if name is not None}
    if named - set(NEXT_FIELDS):
        raise ConfigError(f"study.next names {{{sorted(named - set(NEXT_FIELDS))[0]}}} in {config}; it may name only "
                          "{out} and {scale}")
    if table.get("kind", "quality") not in KINDS:
        raise ConfigError(f"study.kind = {table['kind']!r} in {config} is not one of {', '.join(KINDS)}")
    vary = table.get("vary", {})
    if not isinstance(vary, dict):
        raise ConfigError(f"study.vary in {config} must be a table of lists, e.g. {{ \"train.workers\" = [1, 32] }}")
    for key, values in vary.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"study.vary's {key} in {config} must be a non-empty list of values, not {values!r}")
    extras = table.get("extra", [])
    if not isinstance(extras, list) or not all(isinstance(e, dict) for e in extras):
        raise ConfigError(f"study.extra in {config} must be a list of tables, e.g. [{{ \"train.workers\" = 32 }}]")
    combos = [dict(zip(vary, values)) for values in itertools.product(*vary.values())] + extras
    for prefix, combo in [("study.", table)] + [("study ", combo) for combo in combos]:  # the table's, each run's
        for key in ("seeds", "nodes", "tasks_per_node"):
            if key in combo:
                (seed_count if key == "seeds" else whole_number)(prefix + key, combo[key])
        if "first_seed" in combo:
            whole_number("study first_seed", combo["first_seed"], at_least=0)
        if "scale" in combo and combo["scale"] not in SCALES:
            raise ConfigError(f"study scale = {combo['scale']!r} is not a scale: {', '.join(SCALES)}")


def run_name(values: dict[str, Any], seed: int | None) -> str:
    parts = []
    for key, value in values.items():
        prefix = SHORT.get(key, key.split(".")[-1])
        parts.append(prefix if value is True else f"{prefix}{value}")  # a switch that is on: its name alone
    if seed is not None:
        parts.append(f"s{seed}")
    return "-".join(parts) or "run"


@dataclass(frozen=True)
class Shape:
    """A run as [study] declares it, before its config: the settings it varies, its nodes, its number of seeds."""
    combo: dict[str, Any]  # the [study] entry: varied settings and launch keys (LAUNCH_KEYS)
    settings: dict[str, Any]  # the trainer's settings among them (the seed added per run)
    nodes: int
    seeds: int
    first_seed: int | None = None  # None: the config's train.seed

    @property
    def stem(self) -> str:
        """The run's name without its seed: a named extra run's `run`, else the varied values (run_name)."""
        varied = {k: v for k, v in self.combo.items() if k not in ("seeds", "first_seed", "scale")}
        return self.combo.get("run") or (run_name(varied, None) if varied else "")

    def run_name(self, seed: int) -> str:
        return f"{self.stem}-s{seed}" if self.stem else f"s{seed}"


def shapes(table: dict[str, Any], seeds: int | None = None) -> list[Shape]:
    """The [study] table's grid (every combination of `vary`) and its `extra` runs; `seeds` overrides each count."""
    vary: dict[str, list] = table.get("vary", {})
    grid = [dict(zip(vary, values)) for values in itertools.product(*vary.values())] if vary else []
    found = []
    for combo in grid + [dict(extra) for extra in table.get("extra", [])] or [{}]:
        nodes = int(combo.get("nodes", table.get("nodes", 1)))
        per_node = combo.get("tasks_per_node", table.get("tasks_per_node"))
        settings = {k: v for k, v in combo.items() if k not in LAUNCH_KEYS}
        if per_node and "train.workers" not in settings:  # N nodes x M GPUs
            settings["train.workers"] = nodes * int(per_node)
        count = seeds if seeds is not None else combo.get("seeds", table.get("seeds", 1))
        found.append(Shape(combo, settings, nodes, count, combo.get("first_seed")))
    return found


def resolve(config: Path, scale: str, planned: list[Shape], overrides: list[str] = (),
            need_data: bool = True, only: list[str] = (), left_out: list[str] | None = None) -> list[Run]:
    """Each shape's runs, one a seed, each with its config resolved from the experiment's, `overrides` (--set for
    every run) and its own settings: every config validated now, not after the first hour. need_data=False: a
    plan only priced or printed (make cost) needs no data.path. Runs at another scale get their own folders.
    only: run-name patterns; the other runs are neither resolved nor validated (a smoke run of a few of them).
    left_out: a list (QUICK's) that takes the name of a run whose global batch the data cannot hold, instead of
    refusing the study."""
    base_seed = load_config(config, scale).train.seed
    prefix = "" if scale == "local" else f"{scale}-"
    runs = []
    for shape in planned:
        first = base_seed if shape.first_seed is None else shape.first_seed
        for seed in range(first, first + shape.seeds):
            name = prefix + shape.run_name(seed)
            if only and not any(fnmatch.fnmatchcase(name, pattern) for pattern in only):
                continue
            settings = {**shape.settings, "train.seed": seed}
            try:
                cfg = load_config(config, scale, overrides, need_data, settings, expand=False)  # read where it runs
            except BatchTooLarge:
                if left_out is None:
                    raise
                left_out.append(name)
                continue
            runs.append(Run(check_run_name(name), settings, cfg, shape.nodes))
    refuse_duplicate_names(runs, config)
    return runs


def expand(config: Path, scale: str, seeds: int | None = None, need_data: bool = True) -> list[Run]:
    """The study's runs, each with its resolved config (resolve)."""
    return resolve(config, scale, shapes(study_table(config, scale), seeds), need_data=need_data)


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


def carries_quick(config: dict) -> bool:
    """Whether a run's config.json holds every [quick] train and data setting of its scale, which is what a study's
    --quick adds to its runs (config.json has no quick flag of its own): the trainer records such a run as a smoke
    run (the manifest's `smoke`)."""
    scales = Path(__file__).resolve().parents[1] / "experiments" / "scales.toml"
    try:
        tables = quick_tables(scales, str(config.get("scale") or "local"))
    except Exception:  # an unknown scale, no scales.toml: no settings to recognise
        return False
    benchmark = is_benchmark(config)
    wanted = [(section, key, value) for section in ("train", "data") for key, value in tables.get(section, {}).items()
              if not (benchmark and f"{section}.{key}" in NOT_FOR_BENCHMARKS)]
    return bool(wanted) and all((config.get(section) or {}).get(key) == value for section, key, value in wanted)


# A benchmark times bench.batches steps and stops: a step cap changes nothing it measures (the fingerprint leaves it
# out), and the TensorFlow trainer refuses one, so the ImageNet scales' quick cap is not set on a throughput study
NOT_FOR_BENCHMARKS = ("train.max_steps",)


def quick_overrides(quick: dict[str, dict[str, Any]], table: dict[str, Any]) -> list[str]:
    """The `[quick]` tables as --set lines: the study shrunk to a smoke run. Only a throughput study's runs are
    benchmarks: a quick quality study stays a training, and takes no bench setting; a benchmark takes no step cap."""
    benchmark = table.get("kind", "quality") == "throughput"
    return [f"{section}.{key}={json.dumps(value)}" for section, values in quick.items() for key, value in values.items()
            if section != "slurm"  # the job's, not the trainer's (Study.time_limit)
            and (section != "bench" or benchmark)
            and not (benchmark and f"{section}.{key}" in NOT_FOR_BENCHMARKS)]


ONLY_NAMES_SHOWN = 8  # an --only that matches nothing names this many of the runs, so its line stays one line


def study_plan(experiment: Path, scale: str, quick: bool, seeds: int | None, overrides: list[str],
               only: list[str] = ()) -> Study:
    """only: run-name patterns (fnmatch, e.g. "w32-*"): the study's runs of those names alone. A quick study's
    settings win over a run's own (a smoke run stays one where an [study] entry sets its epochs or data)."""
    config = experiment / "config.toml"
    if seeds is not None:
        seed_count("--seeds", seeds)
    if not config.is_file():
        raise ConfigError(f"{experiment} has no config.toml; pass an experiments/NN_name folder")
    table = study_table(config, scale)
    quick_tables_here = quick_tables(config, scale) if quick else {}
    quick_lines = quick_overrides(quick_tables_here, table)
    extra = quick_lines + list(overrides)
    quick_settings = {f"{section}.{key}": value for section, key, value in map(parse_override, quick_lines)}
    planned = [dataclasses.replace(shape, settings={**shape.settings, **quick_settings})
               for shape in shapes(table, 1 if quick and not seeds else seeds)]
    refuse_ignored_overrides(overrides, planned, quick_settings, config)
    refuse_multi_node(planned, experiment, scale)
    left_out: list[str] | None = [] if quick else None
    runs = resolve(config, scale, planned, extra, only=only, left_out=left_out)
    if only and not runs and not left_out:
        names = [("" if scale == "local" else f"{scale}-") + shape.run_name(0)[:-1] + "*" for shape in planned]
        shown = ", ".join(names[:ONLY_NAMES_SHOWN]) + (f", and {len(names) - ONLY_NAMES_SHOWN} more: DRY_RUN=1 "
                                                        "lists them all" if len(names) > ONLY_NAMES_SHOWN else "")
        raise ConfigError(f"--only {' '.join(only)} matches none of {experiment.name}'s runs ({shown})")
    return Study(experiment, config, table.get("question", ""), runs, table.get("baseline", ""),
                 table.get("kind", "quality"), extra, str(quick_tables_here.get("slurm", {}).get("time_limit", "")),
                 left_out or [],
                 "" if quick else table.get("next", ""))  # a smoke run's results choose nothing


def refuse_ignored_overrides(overrides: list[str], planned: list[Shape], quick_settings: dict[str, Any],
                             config: Path) -> None:
    """A --set of a setting the plan gives each run itself -- its seed, what [study] varies, QUICK's settings --
    would be overridden in every run that has it (a run's own settings win: resolve), so the study would run without
    it and say nothing. One line instead, naming the setting and what sets it."""
    for text in overrides:
        section, key, _ = parse_override(text)
        where = f"{section}.{key}"
        if where == "train.seed":
            raise ConfigError(f"--set {text}: a study gives each run its own seed (its runs' -s0, -s1, ... from "
                              f"train.seed in {config}), so it would be ignored; ask for more seeds with --seeds N "
                              "(make: SEEDS=N), or set train.seed in the experiment's config.toml")
        if where in quick_settings:
            raise ConfigError(f"--set {text}: QUICK sets {where} in every run (experiments/scales.toml [quick]), so "
                              "it would be ignored; leave QUICK out to set it")
        if any(where in shape.settings for shape in planned):
            raise ConfigError(f"--set {text}: the study sets {where} per run ([study] in {config}), so it would be "
                              "ignored there; pick runs with --only (make: ONLY=), or train one by hand with "
                              "python -m suite train")


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


def refuse_multi_node(planned: list[Shape], experiment: Path, scale: str) -> None:
    """The node scale is one machine: a study that launches several nodes (experiment 3) is one line."""
    several = [shape for shape in planned if shape.nodes > 1]
    if scale == NODE_SCALE and several:
        raise ConfigError(f"{Path(experiment).name} runs across several nodes ({scale}-{several[0].stem} on "
                          f"{several[0].nodes}); the node scale is one machine: its 1...N GPUs are experiment 2 "
                          "(make exp2 SCALE=node); across nodes use SCALE=thesis (LAUNCHER=slurm CLUSTER=<profile>)")
