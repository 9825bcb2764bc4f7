"""Checkpoints: a plain dict, written atomically, loadable with torch.load(weights_only=True) (torch >= 2.6 refuses
pickled objects such as the argparse namespaces pytorch/examples saved).

What a run saves is declared: its `TrainState` (where it stands, the generators' states and its tallies: all a
resume restores besides the weights) beside the model's, optimizer's and scaler's state dicts, and what a resume
checks itself against (the config, the arithmetic, the run files' sizes). The manifest's skipped_steps and
unreadable_images are a record written from the TrainState, never read back. A checkpoint carries VERSION; one
written by another version is refused with one line.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
from pathlib import Path
from typing import Any

import torch

from contract.config import ConfigError
from trainers import compute
from trainers.runlog import Sums

def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file, fsync, then rename: a crash leaves the old checkpoint or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:  # a full disk: the half-written copy goes, so the run can still say why it failed
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# 3: the generators' states, fp16's skipped steps and the unreadable-file tallies in TrainState (issue 65);
# 2: the declared TrainState (issue 49); 1 (no "version"): the trainer's attributes before it
VERSION = 3

# What every checkpoint holds; a file without them is not one of ours (or is damaged).
REQUIRED_KEYS = ("model", "optimizer", "epoch", "step", "config")


@dataclasses.dataclass
class TrainState:
    """Where a run stands: everything a checkpoint saves besides the weights, and all a resume restores.

    epoch, step          the epoch and step to train next
    best_top1            the best validation top-1 so far
    partial              this process's sums of the epoch so far (a resume mid-epoch goes on from them; a
                         checkpoint holds every rank's)
    skipped_steps        the optimizer steps fp16's scaler skipped in the epochs done (the manifest's skipped_steps)
    epoch_skipped_steps  those it skipped in the epoch so far: counted on the device while the epoch trains
                         (compute.Compute.skipped), taken into the state when a checkpoint is written, put back there
                         on resume
    unreadable_images    the files no decoder could read, per split and epoch ("0", "1", ...), all ranks' (the
                         manifest's unreadable_images)
    rng                  the generators' states (torch, python, cuda where it runs), taken when a checkpoint is
                         written and put back on resume
    `lr`, the rate last set, is shown by the iter records and never saved (each step sets it)."""
    epoch: int = 0
    step: int = 0
    best_top1: float = 0.0
    partial: Sums = dataclasses.field(default_factory=Sums)
    skipped_steps: int = 0
    epoch_skipped_steps: int = 0
    unreadable_images: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    rng: dict[str, Any] = dataclasses.field(default_factory=dict)
    lr: float = 0.0

    def add_epoch(self, epoch: int, skipped_steps: int, unreadable: dict[str, int]) -> None:
        """An epoch's tallies (all ranks'), into the run's."""
        self.skipped_steps += skipped_steps
        for split, n in unreadable.items():
            self.unreadable_images.setdefault(split, {})[str(epoch)] = n

    def tallies(self) -> dict[str, Any]:
        """The manifest's record of the run's tallies, written from this state (a copy: the state counts on)."""
        return {"skipped_steps": self.skipped_steps,
                "unreadable_images": {split: dict(per_epoch) for split, per_epoch in self.unreadable_images.items()}}

    def entries(self, partials: list[Sums]) -> dict[str, Any]:
        """The checkpoint's entries of this state (`partials`: every rank's sums of the epoch so far, in rank order)."""
        return {"epoch": self.epoch, "step": self.step, "best_top1": self.best_top1,
                "partials": [[p.loss, p.top1, p.top5, p.images] for p in partials],
                "skipped_steps": self.skipped_steps, "epoch_skipped_steps": self.epoch_skipped_steps,
                "unreadable_images": self.unreadable_images, "rng": self.rng}

    @classmethod
    def from_entries(cls, saved: dict[str, Any]) -> "TrainState":
        """The state a checkpoint holds (its `partial` chosen for this rank afterwards: running_sums)."""
        return cls(saved["epoch"], saved["step"], float(saved["best_top1"]), skipped_steps=saved["skipped_steps"],
                   epoch_skipped_steps=saved["epoch_skipped_steps"], unreadable_images=saved["unreadable_images"],
                   rng=saved["rng"])


class CorruptCheckpoint(ConfigError):
    """A checkpoint file that cannot be read back: empty, cut short, overwritten."""


def load(path: Path, to_resume: bool = True) -> dict[str, Any]:
    """The checkpoint as saved; a damaged file is one line that names it and says how to go on. to_resume=False:
    only its model, config and epoch are read (tools/noise_scale.py), which every format holds alike."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # empty: EOFError; cut short: RuntimeError (zip reader); random bytes: UnpicklingError
        first_line = (str(e).splitlines() or ["unreadable"])[0]
        raise CorruptCheckpoint(damaged(path, f"{type(e).__name__}: {first_line}"[:160])) from None
    if not isinstance(state, dict) or not all(k in state for k in REQUIRED_KEYS):
        raise CorruptCheckpoint(damaged(path, "not a checkpoint of this trainer (keys missing)"))
    if not to_resume:
        return state
    if state.get("version") != VERSION:
        raise ConfigError(f"checkpoint {path} was written by an older trainer (format {state.get('version', 1)}, "
                          f"this one reads {VERSION}): finish the run with the version that started it (its "
                          f"manifest's git_commit), or move the checkpoint aside (mv {path} {path}.old) to restart it")
    problem = contents_problem(state)
    if problem:
        raise CorruptCheckpoint(damaged(path, problem))
    return state


# What each entry is: the right keys with the wrong contents are as damaged as a file cut short, and would otherwise
# fail deep inside a resume (a traceback) or, worse, be trained on.
KINDS = {"model": dict, "optimizer": dict, "epoch": int, "step": int, "config": dict, "rng": dict,
         "best_top1": (int, float), "partials": list, "scaler": dict, "skipped_steps": int,
         "epoch_skipped_steps": int, "unreadable_images": dict, "arithmetic": dict, "run_files": dict}


def contents_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with a checkpoint's entries, as far as they can be judged without the model (load_into)."""
    for key, kind in KINDS.items():
        if key not in state:
            return f"no {key!r}"
    for key, kind in KINDS.items():
        if (not isinstance(state[key], kind) or isinstance(state[key], bool)):
            return f"{key!r} is a {type(state[key]).__name__}, not a {getattr(kind, '__name__', 'number')}"
    inner = {"config": (state["config"], dict), "model": (state["model"], torch.Tensor),
             "optimizer": ({k: state["optimizer"].get(k) for k in ("state", "param_groups")}, (dict, list)),
             "rng": ({k: state["rng"].get(k) for k in ("torch", "python")}, (torch.Tensor, list))}
    for where, (entries, kind) in inner.items():
        for key, value in entries.items():
            if not isinstance(value, kind):
                return f"{where} {key!r} is a {type(value).__name__}"
    for row in state["partials"]:
        if not isinstance(row, list) or len(row) != 4 or not all(isinstance(v, (int, float)) for v in row):
            return "'partials' is not rows of 4 numbers (loss, top-1, top-5, images)"
        if not all(math.isfinite(v) for v in row):  # the trainer saves none: resumed, it would read as diverged
            return "'partials' holds non-finite epoch sums (NaN or infinity)"
    if not (math.isfinite(state["best_top1"]) and 0 <= state["best_top1"] <= 100):  # else copied into the manifest
        return f"'best_top1' is {state['best_top1']!r}, not a top-1 in [0, 100]"
    return tallies_problem(state) or nonfinite_entry(state)


def tallies_problem(state: dict[str, Any]) -> str | None:
    """Counts that are not counts: resumed, they would be written into the manifest and summed on."""
    if state["skipped_steps"] < 0 or state["epoch_skipped_steps"] < 0:
        return "'skipped_steps' holds a negative count"
    for split, per_epoch in state["unreadable_images"].items():
        if not (isinstance(per_epoch, dict) and all(isinstance(epoch, str) and type(n) is int and n >= 0
                                                    for epoch, n in per_epoch.items())):
            return f"'unreadable_images' {split!r} is not counts per epoch"
    return None


def nonfinite_entry(state: dict[str, Any]) -> str | None:
    """A weight or optimizer buffer that is NaN or infinite. The trainer never saves one (a diverged run stops before
    its checkpoint), so it is damage: resumed, it would train on and be recorded as a `diverged` result -- a finding
    made of a broken file."""
    tensors = [("model", key, value) for key, value in state["model"].items()]
    for index, buffers in (state["optimizer"].get("state") or {}).items():
        tensors += [("optimizer", f"{index}.{key}", value) for key, value in (buffers or {}).items()
                    if isinstance(buffers, dict)]
    for where, key, value in tensors:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
            return f"{where} {key!r} holds non-finite values (NaN or infinity)"
    return None


def check_position(path: Path, epoch: int, step: int, epochs: int, steps: int) -> None:
    """The epoch and iteration a checkpoint resumes at lie within the run: another epoch would train epochs the
    schedule never has (-5..-1) or none at all and report the run completed (999)."""
    if not 0 <= epoch <= epochs:
        raise CorruptCheckpoint(damaged(path, f"epoch {epoch} is outside [0, {epochs}], train.epochs"))
    if not 0 <= step < (steps if epoch < epochs else 1):
        raise CorruptCheckpoint(damaged(path, f"iteration {step} is outside [0, {steps}) of epoch {epoch}"))


@contextlib.contextmanager
def applying(path: Path):
    """Putting a checkpoint's state into the model, optimizer, scaler and generators: what does not fit (another
    shape, another number of parameter groups, a generator state of another size) is the damaged file's one line,
    not load_state_dict's traceback."""
    try:
        yield
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        words = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        raise CorruptCheckpoint(damaged(path, words[:200])) from None


def optimizer_state_problem(optimizer: torch.optim.Optimizer) -> str | None:
    """A per-parameter buffer (momentum, Adam's moments) whose shape is not its parameter's: load_state_dict takes
    it as it is, and the first step would fail or broadcast it silently."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != p.shape:
                    return f"optimizer {key} of shape {list(value.shape)} for a parameter of shape {list(p.shape)}"
    return None


def damaged(path: Path, why: str) -> str:
    return (f"checkpoint {path} is damaged ({why}); move it aside (mv {path} {path}.bad) and run the same command "
            f"again to restart the run from epoch 0 (no earlier checkpoint is kept)")


# ---- A run's checkpoint: the TrainState and the state dicts it saves, what a resume puts back -----------------------
def save_state(s, state: TrainState, partial: Sums) -> None:
    """Rank 0 writes the run's state at state.epoch, state.step (`s`: the Setup; partial: this rank's sums of the
    epoch so far; every rank calls it, and mid-epoch every rank's sums are gathered, so each resumes its own; a
    sharding backend gathers the weights' slices here, on every rank); train.checkpoint off writes nothing."""
    partials = partial.gathered(s.backend) if state.step and s.backend.world_size > 1 else [partial]
    if not s.cfg.train.checkpoint:
        return
    model_state, optimizer_state = s.backend.checkpoint_state(s.model, s.optimizer)  # whole tensors on rank 0
    if not s.backend.is_main():
        return
    # what lives elsewhere while the run trains, taken into the state as it is saved
    state.rng, state.epoch_skipped_steps = rng_state(), int(s.compute.skipped)
    save(s.ckpt_path, {
        "version": VERSION,
        **state.entries(partials),
        "model": model_state,
        "optimizer": optimizer_state,
        "scaler": s.compute.state_dict(),  # fp16's loss scale: resume takes the same steps
        "config": s.cfg.to_dict(),
        "arithmetic": arithmetic(s),  # what a resume must reuse to continue the same run
        "run_files": s.run.sizes(),  # bytes of metrics.jsonl and train.log this checkpoint covers
    })


def restore_state(path: Path, run, backend, model, optimizer, c: compute.Compute, *, epochs: int,
                  steps: int) -> TrainState:
    """The checkpoint at `path` (of a run of `epochs` epochs of `steps` steps) into the model, optimizer, fp16's
    scaler and skipped-step counter (`c`) and the generators; its TrainState returned; the run files beyond it cut."""
    saved = load(path)
    state = TrainState.from_entries(saved)
    check_position(path, state.epoch, state.step, epochs, steps)
    with applying(path):
        backend.load_checkpoint_state(model, optimizer, saved["model"], saved["optimizer"])  # every rank
        problem = optimizer_state_problem(optimizer)
        if problem:
            raise ValueError(problem)
        c.load_state_dict(saved["scaler"])
        c.skipped.fill_(state.epoch_skipped_steps)
        restore_rng(state.rng)
    # what was written after this checkpoint will be written again: cut it, or the files would hold it twice
    dropped = run.cut_back(saved["run_files"])
    run.log(f"=> resumed from the checkpoint at epoch {state.epoch}, iteration {state.step}"
            + (f"; {dropped} record(s) written after it dropped" if dropped else ""))
    state.partial = running_sums(backend, run.log, state, saved["partials"])  # after the cut: its line stays
    return state


def running_sums(backend, log, state: TrainState, partials: list) -> Sums:
    """This rank's sums of the epoch up to the checkpoint: what its iter records' running averages go on from."""
    if len(partials) == backend.world_size:  # a resume keeps the number of processes (unless forced)
        return Sums(*partials[backend.rank])
    if state.step:  # forced onto another number of processes: the averages and the epoch's train sums restart
        log(f"=> the checkpoint holds no running sums for {backend.world_size} processes: the running "
            f"averages of epoch {state.epoch} restart at iteration {state.step} (so do its train_loss/top1/top5)")
    return Sums()


def arithmetic(s) -> dict:
    """The settings of this attempt that decide the numbers beyond the config (stored with each checkpoint)."""
    return {"threads": torch.get_num_threads(), "device": s.backend.device.type,
            "processes": s.backend.world_size,  # W workers over P: another P sums in another order
            "workers_per_pass": s.backend.workers_per_pass or None,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_isa": compute.cpu_description()["onednn_isa"],
            "precision": s.cfg.train.precision, "deterministic": s.cfg.train.deterministic}
