"""Progress: what a study says while it runs and when it ends -- a line per run (updated in place on a terminal),
each run's result, the time taken and left (studies/clock.py), and at the end this machine's results beside the
reference's and the thesis's (the analysis's comparison table).
"""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import workloads
from contract import hostload, reader
from contract.plan import Study
from contract.runfolder import CHECKPOINT, CONSOLE, STATUSES
from studies.clock import Clock, duration
from studies.launch import FINISHED, FULL_OUT, Active, Plan, last_epoch

try:
    from analysis import comparison_text, numerics_label
except ImportError as exc:  # the analysis needs pandas; a bare trainer environment may lack it
    comparison_text = numerics_label = None
    NO_COMPARISON = f"(no comparison table: {exc})"


class Progress:
    """One line per run; on a terminal it updates in place with the newest epoch (of any run side by side)."""

    def __init__(self, total: int):
        self.total, self.tty = total, sys.stdout.isatty()
        self.elsewhere = 0  # runs left to the process already training them: neither this study's results nor failures

    def left_to_others(self, index: int, label: str, pid: str, who: str = "") -> None:
        self.elsewhere += 1
        self.show(index, label, f"skipped: in use by {who}pid {pid} (left to it)", final=True)

    def show(self, index: int, label: str, text: str, final: bool = False) -> None:
        line = f"[{index}/{self.total}] {label}: {text}"
        if self.tty:
            if not final:  # a line updated in place must not wrap: "\r" goes back to the start of its last row only
                line = line[:max(20, shutil.get_terminal_size().columns - 1)]
            sys.stdout.write("\r\033[K" + line + ("\n" if final else ""))
            sys.stdout.flush()
        elif final:
            print(line, flush=True)


def summary(run_dir: Path) -> str:
    """A finished run's result in a few words; never an error, whatever its folder holds (the study goes on)."""
    manifest, problem = reader.read_manifest_document(run_dir)
    if problem == "missing":
        return f"no manifest (see {run_dir / CONSOLE})"
    status = (manifest or {}).get("status")
    if status not in STATUSES:
        return (f"its manifest {'is ' + problem if problem else 'holds no status'} (see {run_dir / CONSOLE}); "
                f"`rm -r {shlex.quote(str(run_dir))}` clears it and the next study starts the run afresh")
    metrics = reader.read_metrics(run_dir)
    tokens = reader.is_token_run(run_dir)  # a language model's experiments read tokens/s and validation loss
    bench = metrics.of("bench")
    rate = bench[-1].get("tokens_per_s" if tokens else "images_per_s_steady") if bench else None
    if is_number(rate):
        disturbed = hostload.disturbances(manifest.get("placement"))  # said as it ends, not only in the report
        return (f"{status}: {rate:.1f} {'tokens' if tokens else 'images'}/s (steady state)"
                + (" — flagged: " + disturbed[0].split(":")[0] if disturbed else ""))
    if tokens:
        epochs = metrics.of("epoch")
        loss = epochs[-1].get("val_loss") if epochs else None
        return status + (f": final val loss {loss:.3f}" if is_number(loss) else "")
    best = manifest.get("best_val_top1")
    return status + (f": best val top-1 {best:.2f} %" if is_number(best) else "")


def epoch_words(record: dict, model_name: str) -> str:
    """An epoch record's result in a few words for the line a run updates: validation loss for a token workload,
    top-1 for an image one."""
    return (f"val loss {record['val_loss']:.3f}" if workloads.has_tokens(model_name)
            else f"val top-1 {record['val_top1']:.1f} %")


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ----------------------------------------------------------------------------------------------------------------
# Time taken and time left
# ----------------------------------------------------------------------------------------------------------------
def time_left(run: Active, clock: Clock, now: float) -> tuple[float | None, str]:
    """An active run's seconds left and where the estimate comes from (its epochs, this study's runs, the reference)."""
    record = run.seen or last_epoch(run.plan.run_dir)
    done = record["epoch"] + 1 if record else run.done_at_start
    epochs = run.plan.cfg.train.epochs if not run.plan.cfg.bench.batches else 1
    return clock.run_left(run.plan.fingerprint, epochs, done, run.done_at_start, now - run.started)


def study_time(active: list[Active], waiting: list, clock: Clock, now: float) -> str:
    """'study 12 min in, ~40 min left': the whole study's elapsed time and what its unfinished runs still need."""
    left = [time_left(run, clock, now)[0] for run in active]
    pending = [plan.fingerprint for _, plan in waiting if plan.status not in FINISHED]
    return f"study {clock.elapsed(now)} in, {clock.study_left(left, pending)}"


def run_time(run: Active, clock: Clock, now: float) -> str:
    """'3 min in, ~9 min left (from its 5 epoch(s))' for an active run."""
    left, why = time_left(run, clock, now)
    eta = f"~{duration(left)} left ({why})" if left is not None else "no estimate yet"
    return f"{duration(now - run.started)} in, {eta}"


# ----------------------------------------------------------------------------------------------------------------
# The study's last lines
# ----------------------------------------------------------------------------------------------------------------
def report_hint(out: Path) -> str:
    """The command that turns these runs into a report: `make report` reads results/runs, any other folder needs
    OUT= (a QUICK study's results/quick too)."""
    command = "make report" if Path(out) == FULL_OUT else f"make report OUT={out}"
    return f"`{command}` turns them into tables and figures"


def next_hint(template: str, out: Path, scale: str) -> str:
    """A study run in steps ([study] next): the command after its runs, with its runs folder and scale filled in."""
    return f"; next, {template.format(out=out, scale=scale)}" if template else ""


def interrupted_line(experiment: str, stopped: list[Path]) -> str:
    """What a stopped study left: only a run with a checkpoint resumes; one stopped in start-up starts afresh."""
    saved = sum((run_dir / CHECKPOINT).exists() for run_dir in stopped)
    fresh = len(stopped) - saved
    return (f"{experiment}: interrupted; {saved} run(s) checkpointed"
            + (f", {fresh} stopped before their first checkpoint (they start afresh)" if fresh else "")
            + ". The same command resumes them.")


def print_comparison(plans: list[Plan], study: Study) -> None:
    """This machine's results beside the committed reference's (named by its machine) and the thesis's."""
    if comparison_text is None:
        print(NO_COMPARISON)
        return
    entries = [dict(name=p.run.name, run_dir=p.run_dir, fingerprint=p.fingerprint, experiment=p.cfg.experiment,
                    framework=p.cfg.framework(p.backend), gpus=p.run.workers,
                    per_gpu_batch=p.cfg.train.per_worker_batch, processes=p.ranks(),
                    numerics=numerics_label(p.cfg.train.precision, p.cfg.train.channels_last, p.cfg.train.compile))
               for p in plans]
    print(comparison_text(entries, study.kind))
