"""`python -m analysis tensorboard [--runs DIR]` (`make tensorboard OUT=DIR`): TensorBoard event files for every run
folder under DIR, from its metrics.jsonl, by the mapping the trainer's live writer uses (contract/events.py).

A run training now is left to its own writer (its lock is held), so two writers never race in one folder; every
other folder's event files are rebuilt, so converting twice gives the same steps once. A folder that cannot be
written (read-only, full) or a record that cannot be placed (an iter record without `iters`) is a `problem:` line
naming it and what to do, and the other folders are converted all the same; exit 1 when a folder was not written.
"""
from __future__ import annotations

import shlex
import sys
import time
from collections import Counter
from pathlib import Path

from contract import events
from contract.locks import is_locked
from contract.runfiles import holding
from contract.runfolder import METRICS


def run_folders(root: Path) -> list[Path]:
    """Every folder under root holding records (plain or compact), in path order."""
    return sorted(holding(root, METRICS))


def convert(root: Path) -> dict:
    """Each run folder's event files anew; what was written, what was left to a live writer, and each folder's
    problem line (one that could not be written, records that could not be placed): one bad folder never costs the
    others theirs."""
    written, steps, training, problems, failed = 0, 0, [], [], 0
    for run_dir in run_folders(root):
        if is_locked(run_dir):
            training.append(run_dir)
            continue
        try:
            done, left_out = events.write_run_events(run_dir)
        except OSError as e:  # a read-only or full folder: its line, and the next folder
            problems.append(f"{run_dir}: no event files written ({e.strerror or e}: {e.filename or run_dir}); make "
                            "it writable, or copy the runs to a writable folder and convert the copy")
            failed += 1
            continue
        steps, written = steps + done, written + 1
        if left_out:
            problems.append(f"{run_dir / METRICS}: left out of its event files: {counted(left_out)}; fix or remove "
                            "those lines and convert again")
    return {"runs": written, "steps": steps, "training": training, "problems": problems, "failed": failed}


def counted(reasons: list[str]) -> str:
    """['iter record without ...', the same, ...] -> '2 iter record(s) without ...'."""
    return ", ".join(f"{n} {why.replace(' record ', ' record(s) ', 1)}" for why, n in Counter(reasons).items())


def write_events(root: Path) -> int:
    """The command: convert, then say what was written, each folder's problem and the line that shows it; user
    errors in one line. Exit 1 when a folder could not be written (the others were)."""
    if not root.is_dir():
        print(f"error: no runs folder {root} (a study's --out / OUT=, e.g. results/runs or "
              "results/reference/vm-2cpu)", file=sys.stderr)
        return 2
    if not events.available():
        print("error: TensorBoard is not installed: pip install -e '.[tensorboard]' (make tensorboard installs it)",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    done = convert(root)
    print(f"tensorboard: event files for {done['runs']} runs ({done['steps']} steps) under {root} in "
          f"{time.perf_counter() - t0:.1f} s" + (f"; {done['failed']} run folder(s) could not be written"
                                                  if done["failed"] else ""))
    for run_dir in done["training"]:
        print(f"  {run_dir}: training now; its trainer writes its own event files")
    for line in done["problems"]:
        print(f"problem: {line}")
    print(f"tensorboard --logdir {shlex.quote(str(root))}")
    return 1 if done["failed"] else 0
