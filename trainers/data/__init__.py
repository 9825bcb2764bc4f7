"""Data for the scaling study: datasets, the generated miniature ImageNet, sharding and the loader.

    train_ds, val_ds = build_datasets(cfg.data, cfg.model.num_classes, cfg.train.seed)   # or open_datasets(kind, ...)
    sampler = StepBatchSampler(len(train_ds), shards, per_shard_batch, epoch, seed, shuffle=True)
    loader = make_loader(train_ds, sampler, loader_workers, pin_memory)   # yields Batch(images, targets, skipped)
    images = to_device(batch.images, device)   # uint8 batches (data.decoder "cpu"/"gpu") normalised there
    batches = DeviceBatches(loader, device)    # to_device for every batch; on a GPU ahead, on a stream of its own
    ...; sampler.set_epoch(epoch + 1)                                         # next epoch, same loader

generate.py draws the dataset and caches it, datasets.py reads images, sampling.py decides who gets what,
memory.py holds the generated dataset decoded in memory and augments it a batch at a time (its default path).
"""

from .datasets import (IMAGENET_MEAN, IMAGENET_STD, ImageFolderDataset, SyntheticDataset, build_datasets,
                       generated_spec, imagenet_transforms, load_rgb, open_datasets, sample_seed, synthetic_batch)
from .datasets import DECODERS, imagefolder_transforms
from .fast import to_device
from .prefetch import DeviceBatches
from .generate import DataError, cache_path, ensure_generated, generate_dataset, is_complete
from .sampling import (Batch, IndexBatches, StepBatchSampler, collate, epoch_permutation, make_loader,
                       shard_indices, val_indices)

__all__ = [
    "Batch", "DataError", "IMAGENET_MEAN", "IMAGENET_STD", "ImageFolderDataset", "IndexBatches", "StepBatchSampler",
    "SyntheticDataset", "build_datasets", "cache_path", "collate", "ensure_generated", "epoch_permutation",
    "generate_dataset", "imagenet_transforms", "is_complete", "load_rgb", "make_loader", "sample_seed",
    "shard_indices", "synthetic_batch", "val_indices",
]
__all__ += ["DECODERS", "DeviceBatches", "generated_spec", "imagefolder_transforms", "open_datasets", "to_device"]
