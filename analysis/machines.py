"""Where runs were measured: the committed reference's machines and this one.

Committed run folders are a reference measured on a named machine: results/reference/<label>/ holds them, with
machine.toml saying what the machine was. A clone's own studies write to results/runs/ (gitignored), so they
measure the machine they run on. Which machine a runs root or a run folder is, and what the report reads by default.
"""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from contract import machine, reader

REPO = Path(__file__).resolve().parents[1]
REFERENCE_ROOT = REPO / "results" / "reference"
EXPERIMENT_DIR = re.compile(r"^\d\d_")  # an experiment's folder in a runs root: 13_steps_to_target


def reference_machines(root: Path = REFERENCE_ROOT) -> list[tuple[str, Path, str]]:
    """(label, folder, one-line description) of every reference machine: a folder of root with a machine.toml."""
    found = []
    for folder in sorted(p for p in Path(root).glob("*") if (p / "machine.toml").is_file()):
        try:
            info = tomllib.loads((folder / "machine.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError):
            info = {}
        found.append((str(info.get("label", folder.name)), folder, str(info.get("description", ""))))
    return found


def default_runs_root(own: Path = Path("results/runs"), root: Path = REFERENCE_ROOT) -> tuple[Path, str]:
    """(runs root, what it is) for the report: this machine's results/runs when it holds runs, else the committed
    reference (the first machine's)."""
    if reader.holds_runs(own):
        return own, "this machine"
    machines = reference_machines(root)
    if machines:
        label, folder, _ = machines[0]
        try:  # as a user would type it (and as the report's index names it)
            folder = folder.relative_to(Path.cwd())
        except ValueError:
            pass
        return folder, f"the committed reference, machine {label}"
    return own, "this machine"


def runs_label(runs: Path, root: Path = REFERENCE_ROOT) -> str:
    """The machine a runs root was measured on: a reference machine's label (its machine.toml), else this machine."""
    runs = Path(runs).resolve()
    for label, folder, _ in reference_machines(root):
        if folder.resolve() == runs:
            return f"reference machine {label}"
    return "this machine"


def machine_cores(runs: Path, root: Path = REFERENCE_ROOT) -> int | None:
    """The CPU cores of the machine a runs root was measured on: a reference machine's machine.toml `cores`, else
    this machine's (its own results/runs)."""
    runs = Path(runs).resolve()
    for _, folder, _ in reference_machines(root):
        if folder.resolve() == runs:
            try:
                return tomllib.loads((folder / "machine.toml").read_text()).get("cores")
            except (OSError, tomllib.TOMLDecodeError):
                return None
    return os.cpu_count()


def machine_of(path, root: Path = REFERENCE_ROOT) -> str:
    """The reference machine whose folder holds a run folder (its label; reference-add let in only runs of its
    identity), else "this machine" -- where the run's manifest records this machine's identity or none to compare
    (contract/machine.py) -- else "another machine (its CPU model)": a run folder copied here from elsewhere is
    never labelled this machine's by where it lies."""
    where = Path(path).resolve()
    for label, folder, _ in reference_machines(root):
        if where.is_relative_to(folder.resolve()):
            return label
    recorded = machine.recorded(reader.read_manifest(path) or {})
    here = {k: v for k, v in machine.this_machine(None, None).items() if v is not None}
    if machine.REQUIRED in recorded and machine.mismatch(recorded, here):
        return f"another machine ({recorded[machine.REQUIRED]})"
    return "this machine"


def report_draws(folder: Path, key: str = "report_draws") -> list[str]:
    """The experiments a reference machine's machine.toml declares the committed report draws from it (`report_draws`),
    in place of the first machine's: e.g. experiments 1-3 rerun with every framework side by side in one sitting.
    key="report_draws_beside": those it draws from it beside another machine's runs of the same folder (see
    complements)."""
    try:
        return list(tomllib.loads((Path(folder) / "machine.toml").read_text()).get(key, []))
    except (OSError, tomllib.TOMLDecodeError):
        return []


def complements(runs: Path, root: Path = REFERENCE_ROOT) -> list[tuple[str, Path]]:
    """When `runs` is the committed reference (the first machine's folder): every experiment folder another
    reference machine holds and the first does not, and every one another machine declares the report draws from it
    (report_draws), as (that machine's label, the folder, found beside `runs` as it was written). The committed
    report shows such an experiment from that machine alone, and says so: an experiment comes from one machine, never
    pooled across machines, and no machine's runs stand in for another's.

    One exception, declared: an experiment folder under a machine's `report_draws_beside` is drawn from it beside
    the other machines' runs of that folder (experiment 13's second edition, measured on another machine than the
    first edition it supersedes). Each edition's reading takes its own runs, by name, and refuses runs of two
    machines (one_machine), so the two are shown side by side and never pooled."""
    machines = reference_machines(root)
    if not machines or Path(runs).resolve() != machines[0][1].resolve():
        return []
    first = {p.name for p in machines[0][1].iterdir() if p.is_dir()}
    found, taken = [], set()
    for label, folder, _ in machines[1:]:
        declared, beside = set(report_draws(folder)), set(report_draws(folder, "report_draws_beside"))
        for experiment in sorted(p.name for p in folder.iterdir() if p.is_dir() and EXPERIMENT_DIR.match(p.name)):
            drawn_elsewhere = experiment in taken or (experiment in first and experiment not in declared)
            if drawn_elsewhere and experiment not in beside:
                continue
            found.append((label, Path(runs).parent / folder.name / experiment))
            if experiment not in beside:
                taken.add(experiment)
    return found


def superseded(runs: Path, root: Path = REFERENCE_ROOT) -> list[str]:
    """When `runs` is the committed reference (the first machine's folder): its experiment folders that complements
    draws from another reference machine instead (only a declared report_draws does; one drawn beside supersedes
    nothing). They stay committed, and the committed report leaves them out."""
    return sorted(folder.name for _, folder in complements(runs, root) if (Path(runs) / folder.name).is_dir()
                  and folder.name not in report_draws(folder.parent, "report_draws_beside"))


def one_machine(paths, what: str, root: Path = REFERENCE_ROOT) -> str | None:
    """The one machine (machine_of) every run folder of a reading was measured on, or None for no run; a reading
    over runs of two machines is refused: one line naming them, since a cell that pooled them would measure neither."""
    found = sorted({machine_of(p, root) for p in paths})
    if len(found) > 1:
        raise ValueError(f"{what}: runs of {len(found)} machines ({', '.join(found)}) in one reading -- read each "
                         "machine's runs apart (make report OUT=<one machine's runs>)")
    return found[0] if found else None
