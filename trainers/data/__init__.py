"""Data for the scaling study: datasets, the generated miniature ImageNet, sharding and the loader.

    train_ds, val_ds = build_datasets(cfg.data, cfg.model.num_classes, cfg.train.seed)
    sampler = StepBatchSampler(len(train_ds), shards, per_shard_batch, epoch, seed, shuffle=True)
    batches = DeviceBatches(make_loader(train_ds, sampler, loader_workers), device)   # Batch(images, targets, skipped)
"""

from .datasets import (IMAGENET_MEAN, IMAGENET_STD, ImageFolderDataset, SyntheticDataset, build_datasets,
                       generated_spec, imagenet_transforms, load_rgb, open_datasets, sample_seed, synthetic_batch)
from .datasets import DECODERS, imagefolder_transforms
from .fast import to_device
from .prefetch import DeviceBatches
from .generate import DataError, cache_path, ensure_generated, generate_dataset, is_complete
from .sampling import (Batch, IndexBatches, StepBatchSampler, collate, epoch_permutation, make_loader,
                       shard_indices, val_indices)
