"""data.decoder = "gpu": loader workers only read files and draw crop boxes; the device decodes and crops.

A worker's item is an `EncodedImage`: the file's bytes (or Pillow's pixels for what nvJPEG can't take: PNG, CMYK),
its crop box and flip, drawn as the "cpu" decoder draws them. `decode_on` decodes the batch with nvJPEG in one
decode_jpeg call, pastes the images into padded tensors (chunks of similar size) and resamples every box in one
roi_align call per chunk (several samples per output pixel when shrinking: an antialiased resize like Pillow's). On
a CPU device the same code runs with libjpeg: that is how the tests check it.

Still torchvision.io (deprecated since torchvision 0.29 for TorchCodec): TorchCodec is not a pinned dependency and
its CUDA decode cannot be tested without a GPU; the maintained GPU path is data.decoder = "dali", which reads the
same items. When torchvision drops decode_jpeg, this decoder goes.
"""

from __future__ import annotations

import numpy as np
import torch
import torchvision
from torchvision.io import ImageReadMode
from torchvision.ops import roi_align

from .fast import IMAGENET_MEAN, IMAGENET_STD, JpegFile, centre_box, random_resized_box
from .images import MAX_IMAGE_PIXELS, load_rgb

CHUNK_PIXELS = 64 * 2**20  # padded pixels per roi_align call: 64 Mi x 3 channels x 4 bytes = 768 MiB of float


class EncodedImage:
    """One sample for the device: bytes (JPEG) or HWC uint8 pixels, its size, crop box and flip."""

    def __init__(self, data: torch.Tensor, encoded: bool, width: int, height: int, box, flip: bool):
        self.data, self.encoded, self.width, self.height = data, encoded, width, height
        self.box, self.flip = tuple(float(v) for v in box), flip

    @staticmethod
    def collate(items: list["EncodedImage"]) -> "EncodedBatch":
        return EncodedBatch(items)


def _encoded_item(path: str, box_of, max_pixels: int, draw_flip: bool, kind: type = EncodedImage) -> EncodedImage:
    """The file as a `kind` item (EncodedImage, or dali.DaliImage: another batch, the same draws)."""
    f = JpegFile(path, max_pixels)
    box = box_of(f.width, f.height)
    flip = bool(torch.rand(1) < 0.5) if draw_flip else False
    if f.jpeg:
        return kind(torch.frombuffer(bytearray(f.data), dtype=torch.uint8), True, f.width, f.height, box, flip)
    pixels = torch.from_numpy(np.array(load_rgb(path, max_pixels), dtype=np.uint8))  # a writable copy
    return kind(pixels, False, f.width, f.height, box, flip)


class GpuTrainPlan:
    """RandomResizedCrop + flip, drawn in the worker, done on the device."""

    reads_files = True
    item_kind = EncodedImage

    def __init__(self, size: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), max_pixels: int = MAX_IMAGE_PIXELS):
        self.size, self.scale, self.ratio, self.max_pixels = size, scale, ratio, max_pixels

    def _box(self, width: int, height: int):
        left, top, w, h = random_resized_box(width, height, self.scale, self.ratio)
        return left, top, left + w, top + h

    def __call__(self, path: str) -> EncodedImage:
        item = _encoded_item(path, self._box, self.max_pixels, draw_flip=True, kind=self.item_kind)
        item.size = self.size
        return item


class GpuValPlan:
    """Resize(resize) + CenterCrop(size) done on the device."""

    reads_files = True
    item_kind = EncodedImage

    def __init__(self, size: int, resize: int, max_pixels: int = MAX_IMAGE_PIXELS):
        self.size, self.resize, self.max_pixels = size, resize, max_pixels

    def __call__(self, path: str) -> EncodedImage:
        item = _encoded_item(path, lambda w, h: centre_box(w, h, self.resize, self.size), self.max_pixels, False,
                             kind=self.item_kind)
        item.size = self.size
        return item


# ---- On the device ---------------------------------------------------------------------------------------------------
def drain(device: torch.device) -> None:
    """Wait for the work queued on the device's current stream. nvJPEG's hardware decoder (A100, H100) writes its
    outputs without waiting for that stream, into blocks the caching allocator may have just freed while queued
    kernels still read them (pytorch/vision#9606, meta-pytorch/torchcodec#1634): on an H100 without this wait, a
    ResNet-50 run on real JPEGs reached a NaN loss within 200 steps."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def decode_all(items: list[EncodedImage], device: torch.device) -> list[torch.Tensor]:
    """CHW uint8 images on the device: the JPEGs in one decode_jpeg call (nvJPEG on CUDA), the rest copied."""
    jpegs = [i for i, item in enumerate(items) if item.encoded]
    out: list[torch.Tensor | None] = [None] * len(items)
    if jpegs:
        data = [items[i].data for i in jpegs]
        drain(device)
        try:
            decoded = torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # one file nvJPEG refuses fails the call: decode those on the CPU instead
            decoded = [_decode_one(d, device) for d in data]
        for i, img in zip(jpegs, decoded):
            out[i] = img
    for i, item in enumerate(items):
        if not item.encoded:
            out[i] = item.data.to(device, non_blocking=True).permute(2, 0, 1)
    return out


def _decode_one(data: torch.Tensor, device: torch.device) -> torch.Tensor:
    try:
        return torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:
        return torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB).to(device)


def size_chunks(sizes: list[tuple[int, int]], budget: int = CHUNK_PIXELS) -> list[list[int]]:
    """Indices grouped (by area, largest first) so that each group's padded size n x max h x max w <= budget
    (a single image larger than the budget gets a group of its own)."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i][0] * sizes[i][1])
    chunks, current, mh, mw = [], [], 0, 0
    for i in order:
        h, w = sizes[i]
        nh, nw = max(mh, h), max(mw, w)
        if current and (len(current) + 1) * nh * nw > budget:
            chunks.append(current)
            current, nh, nw = [], h, w
        current.append(i)
        mh, mw = nh, nw
    if current:
        chunks.append(current)
    return chunks


def _padded(images: list[torch.Tensor]) -> torch.Tensor:
    """N x 3 x max H x max W float; each image's last row and column repeated once past its edge, so bilinear
    samples within half a pixel of the border never mix in the padding's zeros."""
    h = max(x.shape[1] for x in images) + 1
    w = max(x.shape[2] for x in images) + 1
    out = torch.zeros(len(images), 3, h, w, device=images[0].device)
    for k, x in enumerate(images):  # copies only: the resampling below is one call for the chunk
        ih, iw = x.shape[1:]
        out[k, :, :ih, :iw] = x
        out[k, :, ih, :iw] = x[:, -1]
        out[k, :, :ih + 1, iw] = out[k, :, :ih + 1, iw - 1]
    return out


def crop_resize(images: list[torch.Tensor], boxes: torch.Tensor, size: int, budget: int = CHUNK_PIXELS) -> torch.Tensor:
    """Each image's box (left, top, right, bottom; original pixels) resampled to size x size: N x 3 x size x size
    float in 0..255, with roi_align (aligned=True: pixel centres at +0.5, as Pillow's resize with box)."""
    out = torch.empty(len(images), 3, size, size, device=images[0].device)
    for chunk in size_chunks([tuple(x.shape[1:]) for x in images], budget):
        padded = _padded([images[i] for i in chunk])
        rois = torch.cat([torch.arange(len(chunk), dtype=torch.float32).view(-1, 1),
                          boxes[chunk].float()], dim=1).to(padded.device)
        # sampling_ratio 0: ceil(box side / size) samples per output pixel and axis, per box (the antialiasing)
        out[torch.tensor(chunk, device=out.device)] = roi_align(
            padded, rois, output_size=size, spatial_scale=1.0, sampling_ratio=0, aligned=True)
    return out


class EncodedBatch:
    """A batch of EncodedImage: `decode_on(device)` gives the normalised N x 3 x size x size float batch."""

    def __init__(self, items: list[EncodedImage]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def pin_memory(self) -> "EncodedBatch":
        return self

    def decode_on(self, device) -> torch.Tensor:
        device = torch.device(device)
        images = decode_all(self.items, device)
        boxes = torch.tensor([item.box for item in self.items], dtype=torch.float32)
        x = crop_resize(images, boxes, self.items[0].size)
        flips = torch.tensor([item.flip for item in self.items], device=device).view(-1, 1, 1, 1)
        x = torch.where(flips, x.flip(-1), x)
        mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
        return x.div_(255).sub_(mean).div_(std)
