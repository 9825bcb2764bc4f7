"""The trainer's side of the workload seam: what a run trains (its model, data, batches and arithmetic) from the
plug-in that owns its model.name (workloads/), else from the built-in vision workload (models.py, data/).

    w = workload.of(cfg)
    w.check(cfg); model = w.build_model(cfg); train_ds, val_ds, description = w.build_datasets(cfg)

Both give the same methods, so the setup and the benchmark never ask which one they hold. A plug-in's one-line
errors (workloads.WorkloadConfigError, WorkloadDataError) become the trainer's ConfigError and DataError here.
"""
from __future__ import annotations

import contextlib
import importlib

import torch
import torch.nn as nn

import workloads
from contract.config import Config, ConfigError, DataError
from trainers import data
from trainers.models import build_model


class Vision:
    """The thesis's workload, built in: ResNets on ILSVRC-2012, the generated miniature or synthetic images."""

    name = "vision"
    collate = None  # the loader stacks images and labels itself

    def check(self, cfg: Config) -> None:
        """Nothing beyond the contract's checks."""

    def build_model(self, cfg: Config) -> nn.Module:
        return build_model(cfg.model)

    def build_datasets(self, cfg: Config) -> tuple:
        return (*data.build_datasets(cfg.data, cfg.model.num_classes, cfg.train.seed), None)

    def dummy_batch(self, cfg: Config, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        size = cfg.data.image_size
        return (torch.zeros(n, 3, size, size, device=device), torch.zeros(n, dtype=torch.long, device=device))

    def synthetic_batch(self, cfg: Config, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return data.synthetic_batch(n, cfg.data.image_size, cfg.model.num_classes, cfg.train.seed, device)

    def tokens_per_sample(self, cfg: Config) -> int | None:
        return None  # an image is no sequence of tokens

    def flops_per_sample(self, cfg: Config) -> int | None:
        return None  # the ResNets' model FLOPs are not counted: their MFU is unmeasured


class Plugin:
    """A plug-in workload: its declaration (torch-free) and its builder module, imported here."""

    def __init__(self, declared: workloads.Workload):
        self.declared, self.name = declared, declared.name
        self.module = importlib.import_module(declared.builder)
        self.collate = self.module.collate

    def check(self, cfg: Config) -> None:
        with translated():
            self.module.check(cfg)

    def build_model(self, cfg: Config) -> nn.Module:
        with translated():
            return self.module.build_model(cfg)

    def build_datasets(self, cfg: Config) -> tuple:
        """(train, val, description), the datasets read by (epoch, index) as the loader reads (data.PluginItems)."""
        with translated():
            train, val, description = self.module.build_datasets(cfg, data.cache_root().parent)
        return data.PluginItems(train), data.PluginItems(val), description

    def dummy_batch(self, cfg: Config, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module.dummy_batch(cfg, n, device)

    def synthetic_batch(self, cfg: Config, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module.synthetic_batch(cfg, n, device)

    def tokens_per_sample(self, cfg: Config) -> int | None:
        return self.declared.tokens_per_sample[cfg.model.name]

    def flops_per_sample(self, cfg: Config) -> int | None:
        return self.module.flops_per_sample(cfg)


VISION = Vision()


def of(cfg: Config) -> Vision | Plugin:
    """The workload that owns cfg.model.name: a plug-in's, else the built-in vision workload."""
    declared = workloads.owning(cfg.model.name)
    return Plugin(declared) if declared else VISION


@contextlib.contextmanager
def translated():
    """A plug-in's one-line errors as the trainer's (exit 2, one line, no traceback)."""
    try:
        yield
    except workloads.WorkloadDataError as e:
        raise DataError(str(e)) from None
    except workloads.WorkloadConfigError as e:
        raise ConfigError(str(e)) from None
