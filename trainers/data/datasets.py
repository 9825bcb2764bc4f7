"""Datasets: ImageFolder (ILSVRC-2012 layout), the generated miniature, and synthetic tensors.

Every item is (image, target, unreadable): `unreadable` is (index,) when the item's own file could not be read (a
training item is then the next readable file; a validation item's image is None and collate drops it), so the loop
counts distinct files per epoch across loader processes. The random crop / flip of sample i in epoch e is a pure
function of (seed, e, i): torchvision's transforms draw from torch's global RNG, so __getitem__ seeds it and restores
it after. The epoch travels with the index ((epoch, i), make_loader), so persistent workers need no `set_epoch`.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms

from contract.config import ALLOWED

from .generate import DataError, ensure_generated
from .folder import GENERATED_MIN_SCALE, IMAGENET_MEAN, IMAGENET_STD, held_out_split, scan_imagefolder
from .images import MAX_IMAGE_PIXELS, load_rgb

if TYPE_CHECKING:
    from contract.config import DataConfig

log = logging.getLogger(__name__)

SYNTHETIC_TRAIN = 1_281_167  # ILSVRC-2012's train size: synthetic epochs are ImageNet-shaped


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed that is a pure function of (seed, epoch, index)."""
    digest = hashlib.blake2b(f"{seed}/{epoch}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _split_index(item) -> tuple[int | None, int]:
    if isinstance(item, (tuple, list)):
        return int(item[0]), int(item[1])
    return None, int(item)


# ---- Transforms ------------------------------------------------------------------------------------------------------
class ToNormalizedTensor:
    """ToTensor + Normalize(ImageNet mean/std) in one pass over a PIL RGB image (the same arithmetic)."""

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)

    def __call__(self, img: Image.Image) -> torch.Tensor:
        x = torch.from_numpy(np.array(img, dtype=np.uint8, copy=True)).permute(2, 0, 1)
        return x.float().div_(255).sub_(self.mean).div_(self.std).contiguous()


class TrainTransform:
    """RandomResizedCrop(size, scale) + RandomHorizontalFlip + ToTensor + Normalize, drawing the same numbers
    from torch's global RNG in the same order as torchvision's Compose of them, hence the same output; about
    4x faster on small images, where torchvision's per-call overhead dominates (tests check the equality)."""

    def __init__(self, size: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        self.size, self.scale, self.ratio = size, scale, ratio
        self.to_tensor = ToNormalizedTensor()

    def __call__(self, img: Image.Image) -> torch.Tensor:
        top, left, h, w = transforms.RandomResizedCrop.get_params(img, self.scale, self.ratio)
        # crop, then resize (a resize with box= would read pixels outside the crop: not torchvision's output)
        img = img.crop((left, top, left + w, top + h)).resize((self.size, self.size), Image.Resampling.BILINEAR)
        if torch.rand(1) < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return self.to_tensor(img)


def imagenet_transforms(image_size: int, min_scale: float = 0.08):
    """The thesis's (pytorch/examples imagenet) transforms, (train, val): train RandomResizedCrop +
    RandomHorizontalFlip, val Resize(size * 256 / 224) + CenterCrop(size); both ToTensor + Normalize."""
    val = transforms.Compose([transforms.Resize(round(image_size * 256 / 224)), transforms.CenterCrop(image_size),
                              ToNormalizedTensor()])
    return TrainTransform(image_size, scale=(min_scale, 1.0)), val


# ---- ImageFolder with bad-image tolerance ----------------------------------------------------------------------------
class ImageFolderDataset(Dataset):
    """An ImageFolder split whose unreadable files are counted and, in training, replaced by the next readable
    index, which keeps every rank's batch the same size (exact synchronous SGD) and its crop seeded by the original
    index; in validation excluded (`replace_unreadable=False`). A transform with `reads_files` takes the path."""

    def __init__(self, root: Path, transform, seed: int = 0, class_to_idx: dict[str, int] | None = None,
                 random_transform: bool = True, replace_unreadable: bool = True,
                 max_pixels: int = MAX_IMAGE_PIXELS):
        self.root = Path(root)
        self.classes, self.samples = scan_imagefolder(self.root, class_to_idx)
        self.class_to_idx = class_to_idx or {c: i for i, c in enumerate(self.classes)}
        self.targets = [t for _, t in self.samples]
        self.transform, self.seed, self.random_transform = transform, seed, random_transform
        self.replace_unreadable, self.max_pixels = replace_unreadable, max_pixels
        self.epoch = 0
        self._unreadable: set[int] = set()  # in this process only: use the indices the batches carry
        self._warned: set[str] = set()

    def __len__(self) -> int:
        return len(self.samples)

    def keep(self, indices) -> ImageFolderDataset:
        """Only these samples (a held-out split's side), in this order."""
        self.samples = [self.samples[i] for i in indices]
        self.targets = [t for _, t in self.samples]
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skipped_count(self) -> int:
        """Distinct unreadable files met in this process (with loader workers, read what the batches carry)."""
        return len(self._unreadable)

    def _transformed(self, path: str, epoch: int, index: int):
        source = path if getattr(self.transform, "reads_files", False) else load_rgb(path, self.max_pixels)
        if not self.random_transform:
            return self.transform(source)
        # Only the CPU generator (the one torchvision draws from): torch.manual_seed would reseed CUDA too.
        state = torch.default_generator.get_state()
        torch.default_generator.manual_seed(sample_seed(self.seed, epoch, index))
        try:
            return self.transform(source)
        finally:
            torch.default_generator.set_state(state)

    def _unreadable_file(self, j: int, path: str, e: Exception) -> None:
        self._unreadable.add(j)
        if path not in self._warned:
            self._warned.add(path)
            log.warning("skipping unreadable image %s (%s: %s)", path, type(e).__name__, e)

    def __getitem__(self, item):
        epoch, index = _split_index(item)
        epoch = self.epoch if epoch is None else epoch
        n = len(self.samples)
        for offset in range(n):
            j = (index + offset) % n
            path, target = self.samples[j]
            try:
                x = self._transformed(path, epoch, index)
            except Exception as e:  # noqa: BLE001 - any undecodable file: skip it, count it, go on
                self._unreadable_file(j, path, e)
                if not self.replace_unreadable:
                    return None, target, (index,)
                continue
            return x, target, (index,) if offset else ()
        raise DataError(f"{self.root}: no readable image in {n} files")

    def check_readable(self) -> None:
        """DataError (one line, before training) when no file of the split can be read; stops at the first
        readable one, so a healthy data set costs one decode."""
        for j, (path, _) in enumerate(self.samples):
            try:
                self._transformed(path, 0, j)
                return
            except Exception as e:  # noqa: BLE001
                self._unreadable_file(j, path, e)
        raise DataError(f"{self.root}: none of its {len(self.samples)} image files can be read")


# ---- A plug-in workload's dataset (workloads/) as the loader's ------------------------------------------------------
class PluginItems(Dataset):
    """A plug-in's dataset of (x, y) items by index, as the loader reads datasets: by (epoch, index), each item
    (x, y, unreadable) with nothing unreadable (its files were checked when it was made)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item):
        x, y = self.dataset[_split_index(item)[1]]
        return x, y, ()


# ---- Synthetic data (tf_cnn_benchmarks' --data_name=imagenet without --data_dir) -------------------------------------
class SyntheticDataset(Dataset):
    """n fixed random images: item i is drawn from a generator seeded by (seed, i), the same every epoch."""

    def __init__(self, n: int, image_size: int, num_classes: int, seed: int):
        self.n, self.image_size, self.num_classes, self.seed = n, image_size, num_classes, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, item):
        _, index = _split_index(item)
        if not 0 <= index < self.n:
            raise IndexError(index)
        g = torch.Generator().manual_seed(sample_seed(self.seed, -1, index))
        x = torch.randn(3, self.image_size, self.image_size, generator=g)
        return x, int(torch.randint(self.num_classes, (1,), generator=g)), ()


def synthetic_batch(batch: int, image_size: int, num_classes: int, seed: int, device="cpu"):
    """One fixed random (images, targets) batch made once and moved to the device (for throughput runs)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, image_size, image_size, generator=g)
    targets = torch.randint(num_classes, (batch,), generator=g)
    return images.to(device), targets.to(device)


# ---- The one entry point ---------------------------------------------------------------------------------------------
DECODERS = ALLOWED["data.decoder"]  # declared once, with the config


def imagefolder_transforms(decoder: str, image_size: int, max_pixels: int = MAX_IMAGE_PIXELS, threads: int = 1):
    """(train, val) transforms of an ImageFolder for data.decoder: "cpu" (fast.py), "gpu" (gpu.py), "dali" (dali.py,
    with `threads` CPU threads) or "pil" (torchvision's pipeline)."""
    resize = round(image_size * 256 / 224)
    if decoder == "dali":
        from .dali import DaliTrainPlan, DaliValPlan, require_dali
        require_dali()
        return (DaliTrainPlan(image_size, threads, max_pixels=max_pixels),
                DaliValPlan(image_size, resize, threads, max_pixels=max_pixels))
    if decoder == "cpu":
        from .fast import FastTrainTransform, FastValTransform
        return (FastTrainTransform(image_size, max_pixels=max_pixels),
                FastValTransform(image_size, resize, max_pixels=max_pixels))
    if decoder == "gpu":
        from .gpu import GpuTrainPlan, GpuValPlan
        return GpuTrainPlan(image_size, max_pixels=max_pixels), GpuValPlan(image_size, resize, max_pixels=max_pixels)
    if decoder == "pil":
        return imagenet_transforms(image_size)
    raise DataError(f"data.decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")


def build_datasets(d: DataConfig, num_classes: int, seed: int, decoded: bool = True):
    """(train_ds, val_ds) of a config's data section, for a model of `num_classes` outputs; `seed` (train.seed)
    seeds the augmentation. decoded=False reads the generated kind file by file (see open_datasets)."""
    return open_datasets(d.kind, d.path, d.image_size, num_classes, seed, generated_spec(d),
                         synthetic_size=d.synthetic_images, decoder=d.decoder, max_pixels=d.max_image_pixels,
                         decoded=decoded, threads=max(1, d.loader_workers), holdout_share=d.holdout_share)


def generated_spec(d: DataConfig) -> dict | None:
    """The generated kind's data set (generate.py's spec) as the data section describes it; None for other kinds."""
    if d.kind != "generated":
        return None
    return {"classes": d.classes, "per_class": d.per_class, "val_per_class": d.val_per_class,
            "image_size": d.image_size, "seed": d.data_seed}


def open_datasets(kind: str, path: str | None, image_size: int, num_classes: int, seed: int,
                  generated: dict | None, synthetic_size: int = SYNTHETIC_TRAIN, decoder: str = "pil",
                  max_pixels: int = MAX_IMAGE_PIXELS, decoded: bool = True, threads: int = 1,
                  holdout_share: float = 0.0):
    """(train_ds, val_ds) for kind "imagefolder", "generated" (made from the `generated` spec) or "synthetic";
    holdout_share > 0: val_ds is that share of the training images held out. The generated kind is read from its
    decode cached in memory (memory.py) unless decoded=False: then file by file with Pillow, as ImageFolder."""
    if decoder == "dali":  # whatever the kind: a run that names DALI and trains without it would record "dali" falsely
        from .dali import require_dali
        require_dali()
    if kind == "synthetic":
        return (SyntheticDataset(synthetic_size, image_size, num_classes, seed),
                SyntheticDataset(max(1, synthetic_size // 25), image_size, num_classes, seed + 1))
    if kind == "imagefolder":
        if not path:
            raise DataError("data.kind = \"imagefolder\" needs data.path: a folder with train/ and val/")
        root = Path(path).expanduser()
        if not root.is_dir():
            raise DataError(f"data.path {root} does not exist: point it at a folder with train/ and val/")
        train_tf, val_tf = imagefolder_transforms(decoder, image_size, max_pixels, threads)
    elif kind == "generated":
        if not generated:
            raise DataError("data.kind = \"generated\" needs a data.generated table "
                            "(classes, per_class, val_per_class, image_size, seed)")
        root = ensure_generated(generated)
        if decoded:
            from .memory import decoded_datasets  # imports this module

            return _check_classes(root, *decoded_datasets(root, image_size, seed, holdout_share=holdout_share),
                                  num_classes)
        train_tf, val_tf = imagenet_transforms(image_size, min_scale=GENERATED_MIN_SCALE)
    else:
        raise DataError(f"data.kind must be imagefolder, generated or synthetic, not {kind!r}")
    train = ImageFolderDataset(root / "train", train_tf, seed, max_pixels=max_pixels)
    split = root / ("train" if holdout_share else "val")
    val = ImageFolderDataset(split, val_tf, seed, class_to_idx=train.class_to_idx, random_transform=False,
                             replace_unreadable=False, max_pixels=max_pixels)
    if holdout_share:
        kept, held = held_out_split(train.targets, holdout_share)
        train.keep(kept), val.keep(held)
    return _check_classes(root, train, val, num_classes)


def _check_classes(root: Path, train, val, num_classes: int):
    if len(train.classes) > num_classes:
        raise DataError(f"{root}/train has {len(train.classes)} classes but the model has {num_classes} outputs: "
                        f"set model.num_classes >= {len(train.classes)}")
    train.check_readable()
    val.check_readable()
    return train, val
