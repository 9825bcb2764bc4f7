"""Compact finished run folders in place: each one's metrics.jsonl, train.log and console.log gzip'd beside its
other files (the committed runs' form: contract/runfiles.py, which every reader opens them through).

    python -m tools compact-runs results/reference

The migration of the committed reference, kept here so it can be rerun and checked: the same bytes give the same
gzip files anywhere (runfiles.compact_bytes), each is checked to read back before its plain file goes, and a second
pass changes nothing (a compact file is never compressed again). A line per experiment folder as it goes; a folder
it leaves alone is one `refused:` line naming it: one holding a file in both forms, an unfinished run (it may still
be appended to or resumed, which a gzip file does not allow), one a process is training. Exit 1 when one was.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

from contract.locks import is_locked
from contract.reader import FINISHED, read_document
from contract.runfiles import compact_folder, two_forms
from contract.runfolder import COMPACT, COMPACTED, MANIFEST


@dataclass
class Tally:
    """What a pass did: folders and files compacted, bytes before and after, the refusals' lines."""

    folders: int = 0
    files: int = 0
    plain_bytes: int = 0
    compact_bytes: int = 0
    refused: list[str] = field(default_factory=list)

    def add(self, other: "Tally") -> None:
        self.folders, self.files = self.folders + other.folders, self.files + other.files
        self.plain_bytes += other.plain_bytes
        self.compact_bytes += other.compact_bytes
        self.refused += other.refused

    def line(self) -> str:
        return (f"{self.folders} run folder(s), {self.files} file(s) gzip'd, {mb(self.plain_bytes)} -> "
                f"{mb(self.compact_bytes)}")


def mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def with_plain_files(root: Path) -> list[Path]:
    """The run folders under root still holding a record file plain, in path order (a compact folder is done)."""
    return sorted({p.parent for name in COMPACTED for p in root.rglob(name) if p.is_file()})


def refusal(run_dir: Path) -> str | None:
    """Why a folder is left as it is, or None: compacting is for a finished run's final files only."""
    damaged = two_forms(run_dir)
    if damaged:
        return damaged
    if is_locked(run_dir):
        return f"{run_dir}: a process is training it; compact it once it has finished"
    # the status as written, whatever the manifest's version: compacting changes no record, so an older folder is
    # compacted as it is
    status = (read_document(run_dir / MANIFEST)[0] or {}).get("status")
    if status not in FINISHED:
        return (f"{run_dir}: its run is {status or 'without a readable status'}, not finished (completed or "
                "diverged): a run that may still be appended to or resumed keeps its files plain")
    return None


def compact_run(run_dir: Path, tally: Tally) -> None:
    """One folder compacted and counted, or its refusal's line kept."""
    why = refusal(run_dir)
    if why:
        tally.refused.append(why)
        return
    before = {name: (run_dir / name).stat().st_size for name in COMPACTED if (run_dir / name).is_file()}
    done = compact_folder(run_dir)
    tally.folders += 1
    tally.files += len(done)
    tally.plain_bytes += sum(before[name] for name in done)
    tally.compact_bytes += sum((run_dir / (name + COMPACT)).stat().st_size for name in done)


def compact_tree(root: Path) -> Tally:
    """Every run folder under root compacted, a progress line per experiment folder, a line per refusal."""
    total = Tally()
    for experiment, runs in itertools.groupby(with_plain_files(root), key=lambda run_dir: run_dir.parent):
        tally = Tally()
        for run_dir in runs:
            compact_run(run_dir, tally)
        print(f"compact-runs: {experiment}: {tally.line()}", flush=True)
        for line in tally.refused:
            print(f"  refused: {line}", flush=True)
        total.add(tally)
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools compact-runs", description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="+", type=Path, help="folders of run folders, e.g. results/reference")
    args = p.parse_args(argv)
    missing = [str(root) for root in args.roots if not root.is_dir()]
    if missing:
        print(f"compact-runs: no folder {', '.join(missing)}: give folders of run folders, e.g. results/reference",
              file=sys.stderr)
        return 2
    total = Tally()
    for root in args.roots:
        total.add(compact_tree(root))
    print(f"compact-runs: {total.line()}; {len(total.refused)} refused"
          + ("" if total.folders or total.refused else " (nothing plain left: already compact)"))
    return 1 if total.refused else 0
