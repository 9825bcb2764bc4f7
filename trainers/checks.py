"""Every check of a run's config against where it runs, in one function called before anything in the run folder
is touched or any process group exists; each refusal is one line (a ConfigError) that says what to fix.

    launch, backend_name, pinned = check_launch(cfg, run_dir, resume, force)
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch

from contract.config import SECTIONS, Config, ConfigError, TrainConfig, check_writable, cpu_isa_env
from contract.locks import in_use, is_locked
from contract.runfolder import CHECKPOINT, CONFIG, LOCK, LOG, MANIFEST, METRICS, RANK_LOCKS
from trainers import backends, checkpoint, compute, rendezvous, workload
from trainers.cpu_isa import check_cpu_has


def check_launch(cfg: Config, run_dir: Path, resume: bool, force: bool) -> tuple[backends.Launch, str, dict]:
    """This process's launch, its backend's name and, for a resume, the arithmetic it keeps (pin_arithmetic)."""
    check_paths(cfg)
    workload.of(cfg).check(cfg)  # what the run's workload cannot train (a plug-in's own refusals)
    check_cpu_isa(cfg.train)
    check_writable(run_dir)
    check_run_files(run_dir)
    launch = backends.detect_launch()
    name = backends.resolve(cfg, launch)
    # a run another process trains is refused as such (not as "exists": --resume would not help), before the checks
    # that read its folder; a requeued job's rank waits for its earlier attempt's lock instead (trainers/run.py)
    if earlier_attempt_wait() == 0 and is_locked(run_dir, launch.rank):
        raise in_use(run_dir, launch.rank)
    if launch.rank == 0 and not resume and (run_dir / MANIFEST).exists():  # no manifest: nothing started, restart
        raise ConfigError(f"run folder {run_dir} exists; continue it with --resume auto or pick another --run")
    pinned = {}
    if resume and (run_dir / CHECKPOINT).exists():
        pinned = pin_arithmetic(cfg, run_dir / CHECKPOINT, force, launch.world_size)
    return launch, name, pinned


def earlier_attempt_wait() -> float:
    """Seconds a rank of a requeued (or successor) Slurm job waits for its run lock: the attempt before may still
    hold it, cut off in a collective until its timeout on a node whose link went down. Anywhere else a held lock is
    a second launch of the run, refused at once."""
    return backends.COLLECTIVE_TIMEOUT.total_seconds() + 10 if rendezvous.restarts(os.environ) > 0 else 0.0


def check_paths(cfg: Config) -> None:
    """What must exist where the run starts (not where it is planned: a cluster stages data on its nodes)."""
    if cfg.data.kind == "imagefolder" and not Path(cfg.data.path).is_dir():
        raise ConfigError(f"data.path {cfg.data.path} does not exist; set it to the ILSVRC-2012 root (train/ and val/)")
    cores = os.cpu_count() or 1
    if cfg.train.threads > cores:  # more intra-op threads than cores only slows torch down (and 10^5 exhaust the OS)
        raise ConfigError(f"train.threads = {cfg.train.threads} is more than the {cores} cores here; use 1..{cores} "
                          "or 0 for torch's default")
    if cfg.data.loader_workers > 4 * cores:  # each is a process holding a copy of the dataset's index
        raise ConfigError(f"data.loader_workers = {cfg.data.loader_workers} is more than 4 per core here "
                          f"({4 * cores}); the thesis ran 4 per GPU")
    shared_file = cfg.train.init_method.removeprefix("file://")
    if cfg.train.init_method.startswith("file://") and not Path(shared_file).parent.is_dir():
        raise ConfigError(f"train.init_method {cfg.train.init_method}: folder {Path(shared_file).parent} does not "
                          "exist; the rendezvous file must be in an existing folder that every node sees")


def check_cpu_isa(t: TrainConfig) -> None:
    """A pinned ISA must be one this CPU has and what torch runs: set before torch started (the trainer's command
    line sets it before it imports torch: trainers/cpu_isa.py)."""
    wanted = cpu_isa_env(t.cpu_isa)
    if not wanted:
        return
    check_cpu_has(t.cpu_isa)
    missing = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    if missing:
        raise ConfigError(f"train.cpu_isa = {t.cpu_isa!r} must be set before torch starts: run with "
                          + " ".join(f"{k}={v}" for k, v in wanted.items()) + " in the environment")
    if torch.backends.cpu.get_cpu_capability().lower() != wanted["ATEN_CPU_CAPABILITY"]:
        raise ConfigError(f"train.cpu_isa = {t.cpu_isa!r}: torch runs {torch.backends.cpu.get_cpu_capability()} "
                          "kernels all the same (a build without them?); leave train.cpu_isa empty")


# Settings that may change between a run and its resumption: where the data is staged, how it is loaded, printed.
MAY_DIFFER_ON_RESUME = {
    ("data", "path"), ("data", "loader_workers"), ("train", "print_freq"), ("train", "threads"),
    ("train", "device"), ("train", "init_method"), ("train", "checkpoint"), ("telemetry", "interval_s"),
    ("train", "compile"), ("train", "cudnn_benchmark"), ("train", "workers_per_pass"),
    ("train", "cpu_isa"),  # the kernels actually used are compared instead (check_same_arithmetic)
}


def check_run_files(run_dir: Path) -> None:
    """The run's files are files: one that became a folder (a copy or a script gone wrong) would fail where it is
    first opened, as a traceback, after the run had been marked running."""
    names = (MANIFEST, METRICS, LOG, CONFIG, CHECKPOINT, LOCK, *(p.name for p in run_dir.glob(RANK_LOCKS)))
    for path in (run_dir / name for name in names):
        if path.is_dir():
            raise ConfigError(f"{path} is a folder, not the run's file; move it aside (mv {path} {path}.bad) "
                              "or pick another --run")


def pin_arithmetic(cfg: Config, path: Path, force: bool, processes: int = 1) -> dict:
    """A resumed run keeps the arithmetic it started with, whatever this attempt's defaults (a study's JOBS sets
    OMP_NUM_THREADS): what the config leaves open is taken from the checkpoint; what it sets otherwise is refused
    unless forced, as is another number of processes (this launch's `processes`)."""
    state = checkpoint.load(path)
    check_same_config(path, state["config"], cfg.to_dict())  # before any process group exists
    saved = state["arithmetic"]
    t = cfg.train
    wants_cuda = t.device == "cuda" or (t.device == "auto" and torch.cuda.is_available())
    would_be = {"threads": t.threads or None, "device": "cuda" if wants_cuda else "cpu", "processes": processes,
                "workers_per_pass": t.workers_per_pass or None,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "onednn_isa": compute.cpu_description()["onednn_isa"]}
    check_same_arithmetic(path, saved, would_be, force)
    return {key: saved.get(key) for key in ("threads", "workers_per_pass") if not force or would_be[key] is None}


def check_same_config(path: Path, saved: dict[str, dict], current: dict[str, dict]) -> None:
    diffs = []
    for section, values in current.items():
        for key, value in values.items():
            # a key added to the schema since the checkpoint was written had its default then
            old = saved.get(section, {}).get(key, schema_default(section, key))
            if (section, key) in MAY_DIFFER_ON_RESUME:
                continue
            if isinstance(value, tuple):
                value = list(value)
            if isinstance(old, tuple):
                old = list(old)
            if old != value:
                diffs.append(f"{section}.{key} was {old!r}, the config says {value!r}")
    if diffs:
        raise ConfigError(f"cannot resume {path}: {first_of(diffs)}; resume with the run's own config or start a new "
                          "--run")


def schema_default(section: str, key: str) -> Any:
    fields = {f.name: f.default for f in dataclasses.fields(SECTIONS[section])} if section in SECTIONS else {}
    return fields.get(key)


def first_of(diffs: list[str]) -> str:
    return diffs[0] + (f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else "")


# ---- Resume is the same run: what decides the arithmetic is fixed at the run's first start and reused on resume ------
def check_same_arithmetic(path: Path, saved: dict[str, Any], would_be: dict[str, Any], force: bool) -> None:
    """The settings that change the numbers (threads, device kind, processes, passes, the CPU kernels' instruction
    set) are the run's start's; a key this attempt leaves open (None) takes the saved value."""
    diffs = [f"{key} was {saved[key]!r}, this attempt's is {value!r}" for key, value in would_be.items()
             if key in saved and value is not None and value != saved[key]]
    if diffs and not force:
        raise ConfigError(f"cannot resume {path} as the same run: {first_of(diffs)}; resume with the run's own "
                          "settings (where it started), or --resume force to continue with different arithmetic "
                          "(the manifest's attempts record it)")
