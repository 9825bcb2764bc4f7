"""Add a study's finished runs to a committed reference machine's folder, the way its runs were committed: each
run folder whose manifest says completed or diverged, copied without its checkpoint and lock files, its records and
logs gzip'd (the committed runs' compact form, contract/runfiles.py), only where its hosts and machine identity
(contract/machine.py) are those machine.toml declares, and only once per run identity.

    make reference-add RUNS=results/runs/13_steps_to_target MACHINE=xeon-2cpu

Unfinished runs are left out with a count; a finished run already there is copied again (its records are final).
"""
from __future__ import annotations

import argparse
import shutil
import tomllib
from pathlib import Path

from contract import machine
from contract.config import ConfigError
from contract.reader import IDENTITY_WORDS, identity_problem, read_manifest, record_problem, run_identity
from contract.runfiles import read_run_file, run_file, two_forms, write_compact
from contract.runfolder import COMPACTED, CONFIG, MANIFEST

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "results" / "reference"
FINISHED = ("completed", "diverged")
KEPT = (CONFIG, MANIFEST, *COMPACTED)  # everything but checkpoint.pt and the lock files; COMPACTED ones gzip'd


def machine_of(reference: Path, label: str) -> dict:
    """The reference machine's machine.toml; one line naming what to do when it has none, or declares no CPU model
    (the field a manifest must record for its machine to be told: contract/machine.py)."""
    if not label or label in (".", "..") or Path(label).name != label:  # a folder of reference/, never elsewhere
        raise ConfigError(f"--machine {label!r} is no reference machine's label: give a folder name in {reference} "
                          f"(e.g. vm-2cpu), without '/' or '..'")
    path = reference / label / "machine.toml"
    if not path.is_file():
        known = sorted(p.parent.name for p in reference.glob("*/machine.toml"))
        raise ConfigError(f"no reference machine {label!r} ({path} missing): describe it in a machine.toml first, "
                          f"or name one of {', '.join(known) or 'none'}")
    declared = tomllib.loads(path.read_text())
    if not declared.get(machine.REQUIRED):
        raise ConfigError(f"{path} declares no {machine.REQUIRED}: add the CPU model its runs' manifests record "
                          f"(manifest.json's machine.cpu_model)")
    return declared


def foreign(manifest: dict, declared: dict) -> str:
    """Why a run was not measured on the machine ('' when it was): its hosts, then its machine identity
    (contract/machine.py: CPU model, instruction set, cores, memory, GPU model, torch version), field by field."""
    hosts = set(manifest.get("hosts") or [])
    if declared.get("hosts") and not hosts <= set(declared["hosts"]):
        return f"hosts {sorted(hosts)} are not the machine's {declared['hosts']}"
    return machine.mismatch(machine.recorded(manifest), {k: declared[k] for k in machine.FIELDS if k in declared})


def refuse_second_copies(runs: list[Path], target: Path) -> None:
    """One line when two folders hold one run (contract/reader.py RUN_IDENTITY, whatever their names: a `cp -a`
    copy, one seed trained under two run names), among the study's or beside a different folder already in the
    reference: a reference holds each run once."""
    replaced = {folder.name for folder in runs}  # a run added again replaces its own folder
    kept = sorted(p for p in target.iterdir() if p.is_dir() and p.name not in replaced) if target.is_dir() else []
    seen = {run_identity(folder): folder for folder in kept}
    for folder in runs:
        first = seen.setdefault(run_identity(folder), folder)
        if first != folder:
            raise ConfigError(f"{folder} is the same run as {first} ({IDENTITY_WORDS}): a reference holds it once; "
                              "remove one of them")


def finished_runs(study: Path) -> tuple[list[Path], list[str]]:
    """The finished run folders of a study's runs folder, and one line per run left out (unfinished)."""
    runs, left_out = [], []
    for folder in sorted(p for p in study.iterdir() if (p / MANIFEST).is_file()):
        status = (read_manifest(folder) or {}).get("status", "unreadable manifest")
        if status in FINISHED:
            runs.append(folder)
        else:
            left_out.append(f"{folder.name}: {status}")
    return runs, left_out


def add(study: Path, label: str, reference: Path = REFERENCE) -> tuple[list[str], list[str]]:
    """Copy the study's finished runs measured on the machine into its reference folder: (added, left out)."""
    declared = machine_of(reference, label)
    if not study.is_dir():
        raise ConfigError(f"{study} is no folder: give a study's runs folder, e.g. results/runs/13_steps_to_target")
    runs, left_out = finished_runs(study)
    for folder in runs:
        if identity_problem(folder):
            raise ConfigError(f"{folder}: its {identity_problem(folder)}, so which config and seed it ran cannot be "
                              "told; leave it out of the reference (move it away) or run its study again")
        if record_problem(folder):  # config.json changed after the run, or its records gone: not its result
            raise ConfigError(f"{folder}: its {record_problem(folder)}; restore it, or leave it out of the reference "
                              "(move it away) and run its study again")
        if two_forms(folder):
            raise ConfigError(f"{two_forms(folder)}; nothing was copied")
        why = foreign(read_manifest(folder), declared)
        if why:
            raise ConfigError(f"{folder.name} was not measured on {label}: {why}; commit it under its own machine")
    target = reference / label / study.name
    refuse_second_copies(runs, target)
    for folder in runs:
        copy_run(folder, target / folder.name)
    return [f.name for f in runs], left_out


def copy_run(folder: Path, copy: Path) -> None:
    """A finished run's kept files into its reference folder (anew): config.json and manifest.json as they are,
    its records and logs in the compact form (the same bytes, gzip'd deterministically), whichever form the study
    holds them in."""
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    for name in KEPT:
        if name in COMPACTED and run_file(folder / name).is_file():
            write_compact(read_run_file(folder / name), copy / name)
        elif (folder / name).is_file():
            shutil.copy2(folder / name, copy / name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools reference-add", description=__doc__.split("\n\n")[0])
    p.add_argument("study", type=Path, help="a study's runs folder, e.g. results/runs/13_steps_to_target")
    p.add_argument("--machine", required=True, help="the reference machine's label (results/reference/LABEL)")
    args = p.parse_args(argv)
    added, left_out = add(args.study, args.machine)
    target = REFERENCE / args.machine / args.study.name
    print(f"reference-add: {len(added)} finished run(s) of {args.study} in {target.relative_to(REPO)}; "
          f"{len(left_out)} unfinished left out" + (f" ({', '.join(left_out)})" if left_out else ""))
    return 0
