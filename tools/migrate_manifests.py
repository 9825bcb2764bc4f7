"""Rewrite run folders' manifest.json of older versions at the current one (contract/manifest.py VERSION), and
their config.json where an older writer left out what the readers now take as written, in place.

    python -m tools migrate-manifests results/runs

Each manifest is brought up one version's step after another (STEPS); a current one is left byte for byte, so a
second run changes nothing. The steps only add fields computed from what the folder holds and keep every field.
This is the one place that knows the older versions: the readers know only the current one. Stop the studies
writing into a folder before migrating it.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from contract import manifest as declared
from contract.fingerprint import document_fingerprint
from contract.plan import carries_quick
from contract.reader import read_config, read_document
from contract.runfolder import CONFIG, MANIFEST, write_json_atomic

QUICK_ROOT = "quick"  # a QUICK study's runs root (results/quick): smoke runs, before `smoke` was recorded


def machine_before_v1(manifest: dict) -> dict[str, Any]:
    """The machine identity a manifest from before `machine` records (contract/machine.py): the CPU model, the
    torch kernels' instruction set and torch's version it kept elsewhere; the fields it lacks were never measured."""
    cpu = manifest.get("cpu") if isinstance(manifest.get("cpu"), dict) else {}
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    old = {"cpu_model": cpu.get("model"), "isa": cpu.get("torch_capability"), "torch": versions.get("torch")}
    return {k: v for k, v in old.items() if v is not None}


def to_v1(manifest: dict, run_dir: Path) -> dict:
    """Version 0 (no manifest_version) -> 1: the config's fingerprint, the machine, and whether it is a smoke run
    by the three signs that used to tell one (a step cap, every [quick] setting, a runs root named quick)."""
    config = read_config(run_dir)
    if config is None:
        raise declared.ManifestError(f"{run_dir}: no readable config.json, so its manifest cannot be migrated (its "
                                     "fingerprint is the config's); restore config.json or remove the folder")
    smoke = (run_dir.parent.parent.name == QUICK_ROOT or bool(manifest.get("capped_at_steps"))
             or carries_quick(config))
    machine = manifest["machine"] if isinstance(manifest.get("machine"), dict) else machine_before_v1(manifest)
    return {**manifest, "manifest_version": 1, "config_fingerprint": document_fingerprint(config),
            "machine": machine, "smoke": smoke}


#: version -> the step that brings a manifest of that version to the next
STEPS: dict[int, Callable[[dict, Path], dict]] = {0: to_v1}


def migrated(manifest: dict, run_dir: Path) -> dict:
    """The manifest at the current version; ManifestError naming the file and field where it cannot be."""
    version = manifest.get("manifest_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version > declared.VERSION:
        raise declared.ManifestError(f"{run_dir / MANIFEST}: manifest_version {version!r} is none this suite knows "
                                     f"(it writes {declared.VERSION}): migrate it with the suite that wrote it")
    while version < declared.VERSION:
        manifest = STEPS[version](manifest, run_dir)
        version = manifest["manifest_version"]
    wrong = declared.problem(manifest)
    if wrong:
        raise declared.ManifestError(f"{run_dir / MANIFEST}: {wrong}; fix it by hand, then migrate again")
    return manifest


def config_migrated(config: dict) -> dict:
    """A config.json as the current writer writes it: [optim] named (a run from before it had a name ran SGD, the
    schema's default)."""
    optim = config.get("optim") if isinstance(config.get("optim"), dict) else {}
    return {**config, "optim": {"name": "sgd", **optim}}


def migrate_configs(root: Path) -> int:
    """Every config.json under root as config_migrated writes it: how many were rewritten. A config the schema
    refuses is fingerprinted as written (contract/fingerprint.py), so its manifest's recorded fingerprint follows it."""
    rewritten = 0
    for path in sorted(root.rglob(CONFIG)):
        config, problem = read_document(path)
        if problem is not None or config_migrated(config) == config:
            continue
        write_json_atomic(path, config_migrated(config))
        manifest, _ = read_document(path.with_name(MANIFEST))
        if manifest and manifest.get("config_fingerprint") == document_fingerprint(config):
            new = document_fingerprint(config_migrated(config))
            if new != manifest["config_fingerprint"]:
                write_json_atomic(path.with_name(MANIFEST), {**manifest, "config_fingerprint": new})
        rewritten += 1
    return rewritten


def planned_rewrites(root: Path) -> tuple[list[tuple[Path, dict]], int]:
    """Every manifest.json under root read and checked, nothing written: (the ones to rewrite, each with its manifest
    at the current version; how many already are). A manifest that cannot be brought to the current version, or one
    that says it is current but is not the declared record (`machine: [1]`), is ManifestError naming it."""
    paths = sorted(root.rglob(MANIFEST))
    rewrites = []
    for i, path in enumerate(paths, 1):
        manifest, problem = read_document(path)
        if problem:
            raise declared.ManifestError(f"{path}: {problem}; restore it or remove its run folder, then migrate again")
        if manifest.get("manifest_version") != declared.VERSION:
            rewrites.append((path, migrated(manifest, path.parent)))
        elif declared.problem(manifest):  # current by its version alone is not current: the record must hold too
            raise declared.ManifestError(f"{path}: {declared.problem(manifest)}, though its manifest_version is "
                                         "current; restore it or fix it by hand, then migrate again")
        if i % 100 == 0:
            print(f"migrate-manifests: {i}/{len(paths)} read", flush=True)
    return rewrites, len(paths) - len(rewrites)


def migrate(root: Path) -> tuple[int, int]:
    """Every manifest.json under root at the current version: (how many were rewritten, how many already were).
    All are read and checked before the first is written, so a refusal leaves every one as it was."""
    return rewrite(*planned_rewrites(root))


def rewrite(rewrites: list[tuple[Path, dict]], current: int) -> tuple[int, int]:
    for path, manifest in rewrites:
        write_json_atomic(path, manifest)
    return len(rewrites), current


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools migrate-manifests", description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="+", type=Path, help="folders of run folders, e.g. results/runs")
    args = p.parse_args(argv)
    for root in args.roots:
        if not root.is_dir():
            raise declared.ManifestError(f"{root} is no folder: give a folder of run folders, e.g. results/runs")
    # every root read and checked before any is written: one refusal leaves them all as they were
    planned = [(root, planned_rewrites(root)) for root in args.roots]
    for root, (rewrites, current) in planned:
        rewritten, current = rewrite(rewrites, current)
        print(f"migrate-manifests: {root}: {rewritten} manifest(s) rewritten at version {declared.VERSION}, "
              f"{current} already current; {migrate_configs(root)} config.json rewritten")
    return 0
