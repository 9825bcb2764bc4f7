"""Time on a study's progress lines: how long each run has taken, how long it and the whole study have left.

A local study of 26 minutes to 2 hours must say how far it is. A run's time left comes, in this order of trust, from
its own epochs done in this session (seconds per epoch times the epochs left), from runs of the same config
fingerprint this study has already finished, or from the committed reference's runs of that fingerprint
(results/reference/<machine>/, measured on the machine machine.toml names, so only a guide on another one), scaled
by this machine's pace once one of this study's runs the reference also ran has finished here. The
study's time left places every unfinished run with an estimate on the `jobs` slots in plan order, as the runner
starts them; runs with no estimate yet are counted apart, never guessed.
"""
from __future__ import annotations

import statistics
from datetime import datetime
from pathlib import Path
from typing import Iterable

from contract.reader import folder_fingerprint, read_manifest

REFERENCE_ROOT = Path(__file__).resolve().parents[1] / "results" / "reference"


def duration(seconds: float) -> str:
    """'45 s', '12 min', '1 h 05 min': the precision a person plans with."""
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def run_seconds(run_dir: Path) -> float | None:
    """A completed run's wall-clock from its manifest (start to end); None for a resumed run, whose span includes
    the time it lay stopped."""
    manifest = read_manifest(run_dir) or {}
    if manifest.get("status") != "completed" or manifest.get("resumed_at") or not manifest.get("end"):
        return None
    try:
        start, end = (datetime.fromisoformat(manifest[k]) for k in ("start", "end"))
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()


def reference_seconds(experiment: str) -> dict[str, list[float]]:
    """Config fingerprint -> wall-clocks of the committed reference's completed runs of `experiment` (every
    reference machine)."""
    found: dict[str, list[float]] = {}
    for run_dir in sorted(REFERENCE_ROOT.glob(f"*/{experiment}/*")):
        seconds = run_seconds(run_dir) if run_dir.is_dir() else None
        fingerprint = folder_fingerprint(run_dir) if seconds is not None else None
        if fingerprint:
            found.setdefault(fingerprint, []).append(seconds)
    return found


class Clock:
    """Elapsed time and time left for the progress lines of one study (`now` is passed in: tests set it)."""

    def __init__(self, jobs: int, reference: dict[str, list[float]], now: float):
        self.jobs, self.reference, self.started = max(1, jobs), reference, now
        self.measured: dict[str, list[float]] = {}  # fingerprint -> runs finished in this study

    def finished(self, fingerprint: str, run_dir: Path) -> None:
        """A run ended: a completed one's time estimates its fingerprint's other seeds."""
        seconds = run_seconds(run_dir)
        if seconds is not None:
            self.measured.setdefault(fingerprint, []).append(seconds)

    def expected(self, fingerprint: str) -> tuple[float | None, str]:
        """(a whole run's seconds, where that comes from) for a run of this fingerprint; (None, '') if unknown."""
        here = self.measured.get(fingerprint)
        if here:
            return statistics.median(here), f"{len(here)} such run(s) here"
        ref = self.reference.get(fingerprint)
        if not ref:
            return None, ""
        pace = self.pace()
        if pace is None:
            return statistics.median(ref), "the reference's time"
        return statistics.median(ref) * pace, f"the reference's time x {pace:.2f}, this machine's pace"

    def pace(self) -> float | None:
        """This machine's time over the reference's, once a run of this study that the reference also ran has
        finished here: the median over such fingerprints (another machine's times alone ran 2x low)."""
        # a reference run shorter than a second records 0 s (the manifest's times are to the second): no pace
        ratios = [statistics.median(here) / statistics.median(self.reference[fp])
                  for fp, here in self.measured.items() if self.reference.get(fp)
                  and statistics.median(self.reference[fp]) > 0]
        return statistics.median(ratios) if ratios else None

    def run_left(self, fingerprint: str, epochs: int, done: int, done_at_start: int, elapsed: float
                 ) -> tuple[float | None, str]:
        """(seconds left, why) of an active run with `done` of `epochs` epochs, `done_at_start` of them before this
        session (a resumed run), `elapsed` seconds since it started here."""
        fresh = done - done_at_start
        if fresh > 0:
            return elapsed / fresh * (epochs - done), f"from its {fresh} epoch(s)"
        total, why = self.expected(fingerprint)
        if total is None:
            return None, ""
        return max(0.0, total * (epochs - done) / max(1, epochs) - elapsed), why

    def study_left(self, active: Iterable[float | None], waiting: Iterable[str]) -> str:
        """The study's time left: each active run's seconds left occupies a slot, then every waiting run (by
        fingerprint) goes to the slot that frees first, as the runner starts them."""
        slots = [0.0] * self.jobs
        untimed = 0
        for i, left in enumerate(active):
            if left is None:
                untimed += 1
            else:
                slots[i % self.jobs] = max(slots[i % self.jobs], left)
        for fingerprint in waiting:
            total, _ = self.expected(fingerprint)
            if total is None:
                untimed += 1
                continue
            first = slots.index(min(slots))
            slots[first] += total
        if untimed and not any(slots):
            return "time left: no estimate yet"
        return f"~{duration(max(slots))} left" + (f" + {untimed} run(s) not yet timed" if untimed else "")

    def elapsed(self, now: float) -> str:
        return duration(now - self.started)
