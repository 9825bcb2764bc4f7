"""Data for the scaling study: datasets, the generated miniature ImageNet, sharding and the loader.

    train_ds, val_ds = build_datasets(cfg.data, cfg.model.num_classes, cfg.train.seed)
    sampler = StepBatchSampler(len(train_ds), shards, per_shard_batch, epoch, seed, shuffle=True)
    batches = DeviceBatches(make_loader(train_ds, sampler, loader_workers), device)   # Batch(images, targets, skipped)
"""

from .datasets import IMAGENET_STD, PluginItems, build_datasets, generated_spec, open_datasets, synthetic_batch
from .fast import to_device
from .generate import DataError, cache_root, ensure_generated, generate_dataset, is_complete
from .prefetch import DeviceBatches
from .sampling import (IndexBatches, StepBatchSampler, collate, epoch_permutation, make_loader, shard_indices,
                       val_indices)

__all__ = ["DataError", "DeviceBatches", "IMAGENET_STD", "IndexBatches", "PluginItems", "StepBatchSampler",
           "build_datasets", "cache_root", "collate", "ensure_generated", "epoch_permutation", "generate_dataset",
           "generated_spec", "is_complete", "make_loader", "open_datasets", "shard_indices", "synthetic_batch",
           "to_device", "val_indices"]
