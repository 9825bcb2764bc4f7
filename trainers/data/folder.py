"""The ImageFolder layout (DIR/train/<class>/*.jpg, DIR/val/<class>/*.jpg) and the normalisation every decoder uses."""
from __future__ import annotations

import os
from pathlib import Path

from torchvision.datasets.folder import IMG_EXTENSIONS

from contract.config import held_out_count

from .generate import DataError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
GENERATED_MIN_SCALE = 0.35  # at ~32 px the ImageNet default 0.08 leaves a few pixels of the object


def scan_imagefolder(root: Path, class_to_idx: dict[str, int] | None) -> tuple[list[str], list[tuple[str, int]]]:
    """Class names and (path, target) pairs of an ImageFolder split, sorted like torchvision's."""
    if not root.is_dir():
        raise DataError(f"{root} is missing: an ImageFolder dataset needs {root.parent}/train and "
                        f"{root.parent}/val, each with one sub-folder of images per class")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if not classes:
        raise DataError(f"{root} has no class sub-folders (ILSVRC-2012's val/ comes flat: sort it into "
                        f"class folders, e.g. with the usual valprep.sh)")
    if class_to_idx is None:
        class_to_idx = {c: i for i, c in enumerate(classes)}
    unknown = [c for c in classes if c not in class_to_idx]
    if unknown:
        raise DataError(f"{root} has class folders that train/ lacks: {', '.join(unknown[:5])}")
    samples = []
    for c in classes:
        for dirpath, _, files in sorted(os.walk(root / c, followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith(IMG_EXTENSIONS):
                    samples.append((os.path.join(dirpath, f), class_to_idx[c]))
    if not samples:
        raise DataError(f"{root} holds no image files ({', '.join(IMG_EXTENSIONS[:4])}, ...)")
    return classes, samples


def held_out_split(targets, share: float) -> tuple[list[int], list[int]]:
    """(training indices, held-out indices) of a training split: of each class, its last held_out_count(share, n)
    samples in sample order (the folders' sorted file order) are held out, the rest trained on."""
    by_class: dict[int, list[int]] = {}
    for i, t in enumerate(targets):
        by_class.setdefault(int(t), []).append(i)
    train, held = [], []
    for members in by_class.values():
        k = held_out_count(share, len(members))
        if k >= len(members):
            raise DataError(f"a held-out share of {share} takes all {len(members)} training images of a class; "
                            "lower data.holdout_share")
        train += members[:len(members) - k]
        held += members[len(members) - k:]
    return sorted(train), sorted(held)
