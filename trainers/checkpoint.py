"""Checkpoints: a plain dict, written atomically, loadable with torch.load(weights_only=True).

torch >= 2.6 loads with weights_only=True by default and refuses pickled objects such as the argparse namespaces
pytorch/examples used to save; everything here is tensors, numbers, strings, lists and dicts.
Below the file's format and its checks: what a Trainer saves (`save_trainer`) and what a resume puts back into it
(`restore_trainer`), with the arithmetic a resume must reuse (`arithmetic`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from pathlib import Path
from typing import Any

import torch

from contract.config import SECTIONS, ConfigError
from trainers import compute
from trainers.runlog import Sums

# Settings that may change between a run and its resumption: where the data is staged, how it is loaded, printed.
MAY_DIFFER_ON_RESUME = {
    ("data", "path"), ("data", "loader_workers"), ("train", "print_freq"), ("train", "threads"),
    ("train", "device"), ("train", "init_method"), ("train", "checkpoint"), ("telemetry", "interval_s"),
    ("train", "compile"), ("train", "cudnn_benchmark"), ("train", "workers_per_pass"),
    ("train", "cpu_isa"),  # the kernels actually used are compared instead (check_same_arithmetic)
}


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


# What every checkpoint holds; a file without them is not one of ours (or is damaged).
REQUIRED_KEYS = ("model", "optimizer", "epoch", "step", "config")


class CorruptCheckpoint(ConfigError):
    """A checkpoint file that cannot be read back: empty, cut short, overwritten."""


def load(path: Path) -> dict[str, Any]:
    """The checkpoint as saved; a damaged file is one line that names it and says how to go on."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # empty: EOFError; cut short: RuntimeError (zip reader); random bytes: UnpicklingError
        first_line = (str(e).splitlines() or ["unreadable"])[0]
        raise CorruptCheckpoint(damaged(path, f"{type(e).__name__}: {first_line}"[:160])) from None
    if not isinstance(state, dict) or not all(k in state for k in REQUIRED_KEYS):
        raise CorruptCheckpoint(damaged(path, "not a checkpoint of this trainer (keys missing)"))
    problem = contents_problem(state)
    if problem:
        raise CorruptCheckpoint(damaged(path, problem))
    return state


# What each entry is: the right keys with the wrong contents are as damaged as a file cut short, and would otherwise
# fail deep inside a resume (a traceback) or, worse, be trained on.
KINDS = {"model": dict, "optimizer": dict, "epoch": int, "step": int, "config": dict, "rng": dict,
         "best_top1": (int, float)}
LATER_KINDS = {"partial": list, "partials": list, "scaler": dict, "skipped_steps": dict, "arithmetic": dict, "run_files": dict}


def contents_problem(state: dict[str, Any]) -> str | None:
    """What is wrong with a checkpoint's entries, as far as they can be judged without the model (load_into)."""
    for key, kind in KINDS.items():
        if key not in state:
            return f"no {key!r}"
    for key, kind in {**KINDS, **LATER_KINDS}.items():
        if key in state and (not isinstance(state[key], kind) or isinstance(state[key], bool)):
            return f"{key!r} is a {type(state[key]).__name__}, not a {getattr(kind, '__name__', 'number')}"
    inner = {"config": (state["config"], dict), "model": (state["model"], torch.Tensor),
             "optimizer": ({k: state["optimizer"].get(k) for k in ("state", "param_groups")}, (dict, list)),
             "rng": ({k: state["rng"].get(k) for k in ("torch", "python")}, (torch.Tensor, list))}
    for where, (entries, kind) in inner.items():
        for key, value in entries.items():
            if not isinstance(value, kind):
                return f"{where} {key!r} is a {type(value).__name__}"
    for row in ([state["partial"]] if "partial" in state else []) + state.get("partials", []):
        if not isinstance(row, list) or len(row) != 4 or not all(isinstance(v, (int, float)) for v in row):
            return "'partial' is not 4 numbers (loss, top-1, top-5, images)"
    return nonfinite_entry(state)


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


def config_differences(saved: dict[str, dict], current: dict[str, dict]) -> list[str]:
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
    return diffs


def schema_default(section: str, key: str) -> Any:
    fields = {f.name: f.default for f in dataclasses.fields(SECTIONS[section])} if section in SECTIONS else {}
    return fields.get(key)


def check_same_config(path: Path, saved: dict[str, dict], current: dict[str, dict]) -> None:
    diffs = config_differences(saved, current)
    if diffs:
        raise ConfigError(
            f"cannot resume {path}: {diffs[0]}"
            + (f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else "")
            + "; resume with the run's own config or start a new --run"
        )


# ----------------------------------------------------------------------------------------------------------------
# Resume is the same run: what decides the arithmetic is fixed at the run's first start and reused on resume
# ----------------------------------------------------------------------------------------------------------------
def arithmetic_differences(saved: dict[str, Any], would_be: dict[str, Any]) -> list[str]:
    """The settings that change the numbers (threads, device kind, processes, passes, the CPU kernels' instruction
    set) in which this attempt would differ from the run's start; a key this attempt leaves open (None) takes the
    saved value."""
    return [f"{key} was {saved[key]!r}, this attempt's is {value!r}" for key, value in would_be.items()
            if key in saved and value is not None and value != saved[key]]


def check_same_arithmetic(path: Path, saved: dict[str, Any], would_be: dict[str, Any], force: bool) -> None:
    diffs = arithmetic_differences(saved, would_be)
    if diffs and not force:
        raise ConfigError(
            f"cannot resume {path} as the same run: {diffs[0]}"
            + (f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else "")
            + "; resume with the run's own settings (where it started), or --resume force to continue with "
            "different arithmetic (the manifest's attempts record it)"
        )


# ----------------------------------------------------------------------------------------------------------------
# A trainer's checkpoint: what it saves, what a resume puts back (`trainer`: a trainers.loop.Trainer)
# ----------------------------------------------------------------------------------------------------------------
def save_trainer(trainer, epoch: int, step: int, partial: Sums) -> None:
    """Rank 0 writes the run's state at `epoch`, `step` (partial: this rank's sums of the epoch so far; every rank
    calls it, and mid-epoch every rank's sums are gathered, so each resumes its own); train.checkpoint off writes
    nothing."""
    partials = partial.gathered(trainer.backend) if step and trainer.backend.world_size > 1 else [partial]
    if not (trainer.backend.is_main() and trainer.cfg.train.checkpoint):
        return
    save(trainer.ckpt_path, {
        "model": trainer.backend.unwrap(trainer.model).state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "epoch": epoch,
        "step": step,
        "partial": [partial.loss, partial.top1, partial.top5, partial.images],  # rank 0's (read before partials)
        "partials": [[p.loss, p.top1, p.top5, p.images] for p in partials],  # every rank's, in rank order
        "best_top1": trainer.best_top1,
        "rng": rng_state(),
        "scaler": trainer.compute.state_dict(),  # fp16's loss scale: resume takes the same steps
        "skipped_steps": trainer.skipped.state(),  # steps the scaler skipped: this epoch's so far, the epochs done
        "config": trainer.cfg.to_dict(),
        "arithmetic": arithmetic(trainer),  # what a resume must reuse to continue the same run
        "run_files": trainer.run.sizes(),  # bytes of metrics.jsonl and train.log this checkpoint covers
    })


def restore_trainer(trainer) -> None:
    """The checkpoint's model, optimizer, scaler, counts and generators into `trainer`, and its position (epoch,
    iteration, the epoch's sums so far); what the run folder holds beyond it is cut."""
    path = trainer.ckpt_path
    state = load(path)
    trainer.start_epoch, trainer.start_step = state["epoch"], state["step"]
    check_position(path, trainer.start_epoch, trainer.start_step, trainer.cfg.train.epochs,
                   len(trainer.train_sampler))
    with applying(path):
        trainer.backend.unwrap(trainer.model).load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        problem = optimizer_state_problem(trainer.optimizer)
        if problem:
            raise ValueError(problem)
        trainer.best_top1 = float(state["best_top1"])
        trainer.compute.load_state_dict(state.get("scaler", {}))
        trainer.skipped.restore(state.get("skipped_steps", {}))  # absent in checkpoints from before it was counted
        restore_rng(state["rng"])
    # what was written after this checkpoint will be written again: cut it, or the files would hold it twice
    dropped = trainer.run.cut_back(state.get("run_files", {}))
    trainer.run.log(f"=> resumed from the checkpoint at epoch {trainer.start_epoch}, iteration {trainer.start_step}"
                    + (f"; {dropped} record(s) written after it dropped" if dropped else ""))
    trainer.partial = running_sums(trainer, state)  # after the cut: its line stays in train.log


def running_sums(trainer, state: dict) -> Sums:
    """The epoch's sums up to the checkpoint: what its iter records' running averages go on from."""
    rank, partials = trainer.backend.rank, state.get("partials", [])
    if len(partials) == trainer.backend.world_size:  # this rank's own (a resume keeps the number of processes)
        return Sums(*partials[rank])
    if "partial" in state:  # rank 0's alone (a checkpoint from before partials): right for one process
        return Sums(*state["partial"])
    if trainer.start_step:  # a checkpoint written without them: the averages and the epoch's train sums restart
        trainer.run.log(f"=> the checkpoint holds no running sums: the running averages of epoch "
                        f"{trainer.start_epoch} restart at iteration {trainer.start_step} (so do its "
                        f"train_loss/top1/top5)")
    return Sums()


def arithmetic(trainer) -> dict:
    """The settings of this attempt that decide the numbers beyond the config (stored with each checkpoint)."""
    return {"threads": torch.get_num_threads(), "device": trainer.backend.device.type,
            "processes": trainer.backend.world_size,  # W workers over P: another P sums in another order
            "workers_per_pass": trainer.backend.workers_per_pass or None,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_isa": compute.cpu_description()["onednn_isa"],
            "precision": trainer.cfg.train.precision, "deterministic": trainer.cfg.train.deterministic}
