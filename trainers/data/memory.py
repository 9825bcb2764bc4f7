"""The generated dataset decoded once into memory and augmented a batch at a time on tensors.

The JPEG files stay the on-disk form; their decode (24 MB at the local scale) is cached beside them in decoded.npz,
once per machine and decoder. A batch is then a few tensor operations instead of a decode, crop, resize and
normalisation per image (train: RandomResizedCrop + flip; val: Resize + CenterCrop, once at load).

Exact, not approximate: the resize reproduces Pillow's fixed-point bilinear resampling (Resample.c's coefficients at
22 fractional bits, two passes each rounded to uint8, in Pillow 13's order, the pinned version), so an image equals
the PIL path's given the same box and flip (tests check every box shape). The crop and flip of sample i in epoch e
come from a counter-based generator keyed by (seed, e, i) (splitmix64), so a sample's pixels depend on nothing else
(emulated = DDP, bit-exact resume). The draws follow RandomResizedCrop.get_params, from another stream than the
per-file path's torch RNG: equally distributed crops, not identical ones.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
from pathlib import Path

import numpy as np
import PIL
import PIL.features
import torch
from torch.utils.data import Dataset

from .fast import normalize  # (B, H, W, 3) integer values -> normalised float (B, 3, H, W)
from .folder import GENERATED_MIN_SCALE, held_out_split, scan_imagefolder
from .generate import DataError
from .images import load_rgb
from .sampling import Batch

DECODED = "decoded.npz"
PRECISION_BITS = 22  # Pillow's resampling: 32 - 8 - 2 fractional bits in 32-bit integer sums
RATIO = (3 / 4, 4 / 3)  # RandomResizedCrop's default aspect ratios
TRIES = 10  # RandomResizedCrop.get_params' attempts before it falls back to the whole image
DRAWS = 2 * TRIES + 3  # per sample: (area, aspect) per try, then top, left, flip
EPOCH_CACHE_BYTES = 256 * 2 ** 20  # a training split whose augmented epoch fits is augmented an epoch at a time
EPOCH_CHUNK = 1024  # images a vectorised augmentation pass holds (int32 buffers of ~3 x 12 KiB an image)


# ---- Per-sample random numbers, vectorised ---------------------------------------------------------------------------
_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that mixes every input bit into every output bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sample_uniforms(seed: int, epoch: int, indices, draws: int = DRAWS) -> np.ndarray:
    """(len(indices), draws) uniforms in [0, 1); row j is a pure function of (seed, epoch, indices[j])."""
    with np.errstate(over="ignore"):
        key = _mix64(np.array([(seed + _GOLDEN) & _MASK], dtype=np.uint64))
        key = _mix64(key ^ np.uint64((epoch * _GOLDEN + 1) & _MASK))
        index = np.asarray(indices, dtype=np.int64).astype(np.uint64)
        rows = _mix64(key ^ _mix64(index + np.uint64(_GOLDEN)))
        counters = np.arange(1, draws + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
        bits = _mix64(rows[:, None] + counters[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def crop_params(u: np.ndarray, height: int, width: int, scale: tuple[float, float], ratio=RATIO) -> torch.Tensor:
    """RandomResizedCrop.get_params for a batch, from uniforms u (B, DRAWS): int64 (B, 5) of top, left, h, w, flip.

    Try t uses u[:, 2t] for the area and u[:, 2t + 1] for the log aspect ratio; the first try whose box fits
    wins, and if none does the whole image is taken (torchvision's fallback for in-range aspect ratios)."""
    area = height * width
    target = area * (scale[0] + (scale[1] - scale[0]) * u[:, 0:2 * TRIES:2])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[:, 1:2 * TRIES:2])
    w = np.round(np.sqrt(target * aspect)).astype(np.int64)  # round half to even, as Python's round()
    h = np.round(np.sqrt(target / aspect)).astype(np.int64)
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.argmax(axis=1)
    rows = np.arange(len(u))
    found = fits[rows, first]
    h = np.where(found, h[rows, first], height)
    w = np.where(found, w[rows, first], width)
    top = np.where(found, np.floor(u[:, 2 * TRIES] * (height - h + 1)).astype(np.int64), 0)
    left = np.where(found, np.floor(u[:, 2 * TRIES + 1] * (width - w + 1)).astype(np.int64), 0)
    flip = u[:, 2 * TRIES + 2] < 0.5
    return torch.from_numpy(np.stack([top, left, h, w, flip.astype(np.int64)], axis=1))


# ---- Pillow's bilinear resize on uint8 tensors -----------------------------------------------------------------------
def pil_bilinear_coefficients(in_size: int, out_size: int) -> np.ndarray:
    """(out_size, in_size) integer coefficients (as float64) of Pillow's BILINEAR resize of one axis.

    Follows precompute_coeffs and normalize_coeffs_8bpc in Pillow's Resample.c step by step, in the same
    double arithmetic and summation order, so the integers are Pillow's."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale  # the bilinear filter's support is 1
    out = np.zeros((out_size, in_size))
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        weights = []
        ww = 0.0
        for x in range(xmax):
            d = abs((x + xmin - center + 0.5) * (1.0 / filterscale))
            weights.append(1.0 - d if d < 1.0 else 0.0)
            ww += weights[-1]
        for x, k in enumerate(weights):
            k = k / ww if ww != 0.0 else k
            out[xx, xmin + x] = math.floor(0.5 + k * (1 << PRECISION_BITS))  # (int) of a positive double
    return out


class Resizer:
    """PIL's img.crop(box).resize((out, out), BILINEAR) (then an optional flip) of a batch of equal-sized square
    uint8 HWC images at once: (B, out, out, 3) int32 holding 0..255. A pass holds the axis it resizes first, so each
    tap is one row copy and one int32 multiply-add over whole rows. Pillow's two passes, each rounded to uint8, run
    horizontal then vertical, except (Pillow 13) vertical first when the height shrinks by more than twice as many
    pixels as the width; the order changes a few pixels by one level, so it is followed too."""

    def __init__(self, in_size: int, out_size: int):
        self.in_size, self.out_size = in_size, out_size
        coefficients = {n: pil_bilinear_coefficients(n, out_size) for n in range(1, in_size + 1)}
        spans = [np.flatnonzero(row) for c in coefficients.values() for row in c]
        self.taps = max(int(s[-1] - s[0] + 1) for s in spans)
        # per (flip, crop length): each output pixel's first input pixel (within the crop) and tap weights
        first = np.zeros((2, in_size + 1, out_size), dtype=np.int64)
        weights = np.zeros((2, in_size + 1, self.taps, out_size), dtype=np.int32)
        for n, c in coefficients.items():
            for o, row in enumerate(c):
                nz = np.flatnonzero(row)
                first[0, n, o] = nz[0]
                weights[0, n, :nz[-1] - nz[0] + 1, o] = row[nz[0]:nz[-1] + 1]
            first[1, n], weights[1, n] = first[0, n, ::-1], weights[0, n, :, ::-1]
        self.first, self.weights = torch.from_numpy(first), torch.from_numpy(weights)

    def axis_taps(self, start: torch.Tensor, length: torch.Tensor, reverse: torch.Tensor):
        """Input indices and weights, each (B, taps, out), of boxes [start, start + length) of one axis, the
        output reversed where `reverse` (0/1: a flip). Taps past the image's edge have weight 0."""
        index = (self.first[reverse, length] + start[:, None])[:, None, :] + torch.arange(self.taps)[None, :, None]
        return index.clamp_(max=self.in_size - 1), self.weights[reverse, length]

    @staticmethod
    def _pass(x: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Resize axis 1 of x (B, L, R) to (B, out, R), rounded as Pillow rounds: (sum + 2^21) >> 22, which
        stays in 0..255 as the weights are >= 0 and sum to 2^22 (+ rounding)."""
        b, length, rest = x.shape
        rows = x.reshape(b * length, rest)
        base = (torch.arange(b) * length)[:, None]
        acc = None
        for t in range(index.shape[1]):
            term = rows.index_select(0, (index[:, t] + base).view(-1)).view(b, -1, rest)
            term.mul_(weights[:, t, :, None])
            acc = term if acc is None else acc.add_(term)
        return acc.add_(1 << (PRECISION_BITS - 1)).bitwise_right_shift_(PRECISION_BITS)

    @staticmethod
    def _swap(x: torch.Tensor, other: int) -> torch.Tensor:
        """(B, A, other * 3) -> (B, other, A * 3): bring the other spatial axis first."""
        b, a = x.shape[:2]
        return x.view(b, a, other, 3).transpose(1, 2).reshape(b, other, a * 3)

    def _resize(self, images: torch.Tensor, horizontal, vertical, vertical_first: bool) -> torch.Tensor:
        b, s, o = images.shape[0], self.in_size, self.out_size
        x = images.to(torch.int32)
        if vertical_first:
            x = self._pass(x.view(b, s, s * 3), *vertical)  # (B, y_out, x * c)
            x = self._pass(self._swap(x, s), *horizontal)  # (B, x_out, y_out * c)
            return x.view(b, o, o, 3).transpose(1, 2)
        x = self._pass(self._swap(x.view(b, s, s * 3), s), *horizontal)  # (B, x_out, y * c)
        return self._pass(self._swap(x, s), *vertical).view(b, o, o, 3)  # (B, y_out, x_out, c)

    def __call__(self, images: torch.Tensor, top, left, h, w, flip) -> torch.Tensor:
        """images (B, S, S, 3) uint8 and the boxes' int64 (B,) tensors -> (B, out, out, 3) int32."""
        horizontal = self.axis_taps(left, w, flip)
        vertical = self.axis_taps(top, h, torch.zeros_like(flip))
        o = self.out_size
        order = (h > o) & (h - o > 2 * (w - o))  # Pillow 13: vertical first
        if not order.any():
            return self._resize(images, horizontal, vertical, False)
        out = torch.empty(images.shape[0], o, o, 3, dtype=torch.int32)
        for vertical_first, rows in ((False, ~order), (True, order)):
            if rows.any():
                pick = lambda taps: tuple(t[rows] for t in taps)  # noqa: E731
                out[rows] = self._resize(images[rows], pick(horizontal), pick(vertical), vertical_first)
        return out


# ---- The datasets ----------------------------------------------------------------------------------------------------
class DecodedDataset(Dataset):
    """A split held as one uint8 tensor; `__getitems__` makes a whole Batch with tensor ops. Items are addressed
    like ImageFolderDataset's: an index, or (epoch, index).

    train (random=True): at an epoch's first batch all N samples are augmented at once, in chunks (one vectorised
    pass costs about what 30 batches of 4 do one by one), and kept for the epoch: the same pixels as batch by batch,
    as each depends only on (seed, epoch, index). A split over EPOCH_CACHE_BYTES is augmented batch by batch.
    val (random=False): the images already resized and centre-cropped; a batch is only normalised.
    """

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, classes: list[str], image_size: int,
                 seed: int, random: bool, min_scale: float = GENERATED_MIN_SCALE):
        self.images, self.targets = images, targets
        self.classes = classes
        self.class_to_idx = {c: i for i, c in enumerate(classes)}
        self.seed, self.random, self.scale = seed, random, (min_scale, 1.0)
        self.epoch = 0
        self.size = images.shape[1]
        self.resize = Resizer(self.size, image_size) if random else None
        self._boxes: tuple[int, torch.Tensor] | None = None  # (epoch, its (N, 5) crop boxes and flips)
        self._epoch_images: tuple[int, torch.Tensor] | None = None  # (epoch, its N augmented, normalised images)
        self.holds_epochs = random and len(images) * 3 * image_size ** 2 * 4 <= EPOCH_CACHE_BYTES

    def __len__(self) -> int:
        return len(self.images)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def check_readable(self) -> None:
        """Every image was decoded when the cache was made, so none is unreadable; an empty split is a mistake."""
        if not len(self.images):
            raise DataError("the generated data set has no images: raise data.per_class / data.val_per_class")

    def _split(self, items) -> tuple[int, list[int]]:
        epochs = {int(i[0]) for i in items if isinstance(i, (tuple, list))}
        if len(epochs) > 1:
            raise ValueError(f"one batch spans epochs {sorted(epochs)}")
        indices = [int(i[1]) if isinstance(i, (tuple, list)) else int(i) for i in items]
        return (epochs.pop() if epochs else self.epoch), indices

    def boxes(self, epoch: int) -> torch.Tensor:
        """(N, 5) top, left, h, w, flip of every sample in `epoch` (each a pure function of seed, epoch, index)."""
        if self._boxes is None or self._boxes[0] != epoch:
            u = sample_uniforms(self.seed, epoch, np.arange(len(self.images)))
            self._boxes = epoch, crop_params(u, self.size, self.size, self.scale)
        return self._boxes[1]

    def augment(self, epoch: int, index: torch.Tensor) -> torch.Tensor:
        """The training images `index` of `epoch`: cropped, resized, flipped, normalised (B, 3, size, size)."""
        return normalize(self.resize(self.images[index], *self.boxes(epoch)[index].unbind(1)))

    def epoch_images(self, epoch: int) -> torch.Tensor:
        """All N training images of `epoch`, augmented once (in chunks, to bound the int32 resize buffers)."""
        if self._epoch_images is None or self._epoch_images[0] != epoch:
            self._epoch_images = None  # the last epoch's images go before the next are made
            every = torch.arange(len(self.images))
            self._epoch_images = epoch, torch.cat([self.augment(epoch, chunk) for chunk in every.split(EPOCH_CHUNK)])
        return self._epoch_images[1]

    def __getitems__(self, items) -> Batch:
        epoch, indices = self._split(items)
        index = torch.as_tensor(indices, dtype=torch.long)
        if not self.random:
            images = normalize(self.images[index])
        elif self.holds_epochs:
            images = self.epoch_images(epoch)[index]
        else:
            images = self.augment(epoch, index)
        return Batch(images, self.targets[index], ())  # () unreadable: all were decoded

    def __getitem__(self, item):
        batch = self.__getitems__([item])
        return batch.images[0], int(batch.targets[0]), ()


def _decoder() -> str:
    return f"Pillow {PIL.__version__}, libjpeg-turbo {PIL.features.version('libjpeg_turbo')}"


def _decode_split(folder: Path, class_to_idx: dict[str, int] | None):
    classes, samples = scan_imagefolder(folder, class_to_idx)
    images = np.stack([np.asarray(load_rgb(path), dtype=np.uint8) for path, _ in samples])
    return classes, images, np.array([t for _, t in samples], dtype=np.int64)


def load_decoded(root: Path) -> dict:
    """root/decoded.npz (made now if missing or from another decoder): the generated dataset's train and val
    images as uint8 (N, H, W, 3), their targets and class names, in ImageFolderDataset's sample order."""
    root = Path(root)
    path = root / DECODED
    meta = {"decoder": _decoder(), "dataset": json.loads((root / "dataset.json").read_text())["args"]}

    def read():
        try:
            with np.load(path) as z:
                if json.loads(str(z["meta"])) == meta:
                    return {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError):
            pass
        return None

    found = read()
    if found is not None:
        return found
    with open(root / f".{DECODED}.lock", "w") as lock:  # one process decodes, the others wait and read
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = read()
            if found is None:
                classes, train_x, train_y = _decode_split(root / "train", None)
                _, val_x, val_y = _decode_split(root / "val", {c: i for i, c in enumerate(classes)})
                if train_x.shape[1] != train_x.shape[2]:
                    raise DataError(f"{root}: generated images must be square, not {train_x.shape[1:3]}")
                found = {"meta": np.array(json.dumps(meta)), "classes": np.array(classes), "train_images": train_x,
                         "train_targets": train_y, "val_images": val_x, "val_targets": val_y}
                tmp = root / f".{DECODED}.tmp.npz"
                np.savez(tmp, **found)
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return found


def val_resize_crop(images: torch.Tensor, image_size: int) -> torch.Tensor:
    """Resize(round(size * 256 / 224)) + CenterCrop(size) of square uint8 (N, S, S, 3) images, as torchvision
    does on PIL images; uint8 (N, size, size, 3)."""
    n, s = images.shape[0], images.shape[1]
    resized = round(image_size * 256 / 224)
    zeros, full = torch.zeros(n, dtype=torch.long), torch.full((n,), s, dtype=torch.long)
    out = Resizer(s, resized)(images, zeros, zeros, full, full, zeros)
    c = int(round((resized - image_size) / 2.0))
    return out[:, c:c + image_size, c:c + image_size].to(torch.uint8)


def decoded_datasets(root: Path, image_size: int, seed: int, min_scale: float = GENERATED_MIN_SCALE,
                     holdout_share: float = 0.0):
    """(train, val) DecodedDatasets of a generated dataset folder; holdout_share > 0: val is that share of the
    training images held out (folder.held_out_split), resized and centre-cropped as validation images are."""
    z = load_decoded(root)
    classes = [str(c) for c in z["classes"]]
    train_x, train_y = torch.from_numpy(z["train_images"]), torch.from_numpy(z["train_targets"])
    val_x, val_y = torch.from_numpy(z["val_images"]), torch.from_numpy(z["val_targets"])
    if holdout_share:
        kept, held = (torch.tensor(i, dtype=torch.long) for i in held_out_split(train_y.tolist(), holdout_share))
        train_x, train_y, val_x, val_y = train_x[kept], train_y[kept], train_x[held], train_y[held]
    train = DecodedDataset(train_x, train_y, classes, image_size, seed, random=True, min_scale=min_scale)
    val = DecodedDataset(val_resize_crop(val_x, image_size), val_y, classes, image_size, seed, random=False)
    return train, val
