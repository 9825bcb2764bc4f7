"""`python -m analysis tensorboard [--runs DIR]` (`make tensorboard OUT=DIR`): TensorBoard event files for every run
folder under DIR, from its metrics.jsonl, by the mapping the trainer's live writer uses (contract/events.py).

A run training now is left to its own writer (its lock is held), so two writers never race in one folder; every
other folder's event files are rebuilt, so converting twice gives the same steps once.
"""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from contract import events
from contract.locks import is_locked
from contract.runfolder import METRICS


def run_folders(root: Path) -> list[Path]:
    """Every folder under root holding records, in path order."""
    return sorted(path.parent for path in Path(root).rglob(METRICS))


def convert(root: Path) -> dict:
    """Each run folder's event files anew; what was written and what was left to a live writer."""
    written, steps, training = 0, 0, []
    for run_dir in run_folders(root):
        if is_locked(run_dir):
            training.append(run_dir)
            continue
        steps += events.write_run_events(run_dir)
        written += 1
    return {"runs": written, "steps": steps, "training": training}


def write_events(root: Path) -> int:
    """The command: convert, then say what was written and the line that shows it; user errors in one line."""
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
          f"{time.perf_counter() - t0:.1f} s")
    for run_dir in done["training"]:
        print(f"  {run_dir}: training now; its trainer writes its own event files")
    print(f"tensorboard --logdir {shlex.quote(str(root))}")
    return 0
