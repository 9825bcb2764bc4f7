"""Workloads beyond the thesis's ResNet-50, one plug-in package a folder (AlgoPerf's `workloads/`, torchtitan's
train specs): each brings its model, its data and its arithmetic, and the project finds them by a loop over this
package (`declared()`), never by name. The lowest floor: a workload imports nothing of the project, so the contract
may read these declarations (which model names and data kinds are valid) and the trainers build from them.

A plug-in is a package `workloads/<name>/` whose `__init__.py` declares `WORKLOAD = Workload(...)` and imports no
torch (declarations only: the contract reads it in processes that never load torch). The torch parts live in the
module its `builder` names, which the trainer imports only when the workload owns a run's model.name. That module
offers, every function taking the run's config (contract.config.Config, read by attribute, never imported):

    check(cfg)                          a setting the workload cannot train: WorkloadConfigError
    build_model(cfg) -> nn.Module       the model; its forward's rows are the loss's rows (logits, targets)
    build_datasets(cfg, cache)          (train, val, description): datasets of (x, y) items by index, and a dict
                                        naming what they were read from (the manifest's `dataset`), or None;
                                        `cache`: a folder for data made on first use (<repo>/.cache)
    collate(pairs) -> (x, y)            a batch of (x, y) items, as the model and the loss take them
    dummy_batch(cfg, n, device)         n samples of zeros: the trainer's measure of what a pass holds
    synthetic_batch(cfg, n, device)     n random samples, fixed by train.seed: a benchmark on synthetic data
    flops_per_sample(cfg) -> int        model FLOPs of one trained sample, forward and backward (MFU's numerator)

Its mistakes a user can cause raise WorkloadConfigError or WorkloadDataError (ValueErrors, one line each), which
the trainer turns into its own one-line ConfigError or DataError. The vision workload (ResNets on images) stays
built into the trainers (trainers/models.py, trainers/data/): the trainer uses it where no plug-in owns the model.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str  # the package's name
    models: tuple[str, ...]  # the model.name values it owns
    data_kinds: tuple[str, ...]  # the data.kind values it owns (it also trains on data.kind = "synthetic")
    tokens_per_sample: Mapping[str, int]  # model.name -> the tokens one sample holds (a sequence: its context)
    builder: str  # the dotted module of its torch parts (the functions above)


class WorkloadConfigError(ValueError):
    """A setting the workload cannot train; one line that says what to change."""


class WorkloadDataError(ValueError):
    """Data the workload cannot read or make; one line that says what to do."""


@functools.lru_cache(maxsize=None)
def declared() -> tuple[Workload, ...]:
    """Every plug-in's WORKLOAD, in package order; two that claim one model name or data kind are a bug here."""
    found = [importlib.import_module(f"{__name__}.{info.name}").WORKLOAD
             for info in pkgutil.iter_modules(__path__) if info.ispkg]
    for attribute in ("models", "data_kinds"):
        names = [name for w in found for name in getattr(w, attribute)]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise RuntimeError(f"workloads: {attribute} {twice} declared by more than one workload")
    return tuple(found)


def owning(model_name: str) -> Workload | None:
    """The plug-in that owns `model_name`, or None (the trainers' built-in vision workload)."""
    return next((w for w in declared() if model_name in w.models), None)


def models() -> tuple[str, ...]:
    return tuple(name for w in declared() for name in w.models)


def data_kinds() -> tuple[str, ...]:
    return tuple(kind for w in declared() for kind in w.data_kinds)


def tokens_per_sample(model_name: str) -> int | None:
    """The tokens one sample of `model_name` holds, where a plug-in declares them; None for a model without tokens."""
    w = owning(model_name)
    return w.tokens_per_sample[model_name] if w else None


def has_tokens(model_name) -> bool:
    """A plug-in declares the tokens a sample of this model holds: a language model, whose runs are read in tokens/s
    and validation loss rather than images/s and top-1 (a study's lines, its closing table)."""
    return isinstance(model_name, str) and tokens_per_sample(model_name) is not None
