"""The fast ImageFolder path: decode only the crop, at the smallest DCT scale that covers the output, in uint8.

RandomResizedCrop's box is drawn first, from the JPEG header's size and torch's global RNG exactly as torchvision
draws it, then only that box is decoded (libjpeg's partial decoding, jpeg_region.py, at the smallest scale n/8
that still covers `size`), resized (antialiased bilinear) and flipped; `to_device` normalises on the device. At
8/8 the pixels equal the exact path's to +-1 (tests bound the smaller scales). Files libjpeg can't take (PNG,
CMYK...) are decoded whole by Pillow (`load_rgb`), which also decides whether a file is readable at all.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms

from . import jpeg_region
from .folder import IMAGENET_MEAN, IMAGENET_STD
from .images import MAX_IMAGE_PIXELS, check_size, load_rgb

JPEG_MAGIC = b"\xff\xd8"


# ---- The boxes: what RandomResizedCrop / Resize + CenterCrop would take from a width x height image ------------------
def random_resized_box(width: int, height: int, scale, ratio) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params (10 tries, then the centre fallback) as (left, top, w, h),
    drawing from torch's global RNG; a 0 x H x W tensor stands in for the image (no pixels needed)."""
    top, left, h, w = transforms.RandomResizedCrop.get_params(torch.empty(0, height, width), scale, ratio)
    return left, top, w, h


def centre_box(width: int, height: int, resize: int, size: int) -> tuple[float, float, float, float]:
    """The box of the original image that Resize(resize) (shorter side) + CenterCrop(size) keeps, as
    (left, top, right, bottom) in original pixels."""
    short, long_ = (width, height) if width <= height else (height, width)
    new_long = int(resize * long_ / short)  # torchvision's _compute_resized_output_size
    rw, rh = (resize, new_long) if width <= height else (new_long, resize)
    top, left = int(round((rh - size) / 2.0)), int(round((rw - size) / 2.0))  # CenterCrop's rounding
    sx, sy = width / rw, height / rh
    return left * sx, top * sy, (left + size) * sx, (top + size) * sy


def dct_scale(box_w: float, box_h: float, size: int) -> int:
    """The smallest n in 1, 2, 4, 8 such that the box decoded at n/8 still has >= size pixels each way.
    (libjpeg-turbo has SIMD IDCTs only for those; 3/8, 5/8... were no faster than 8/8, measured.)"""
    need = 8 * max(size / box_w, size / box_h)
    return next(n for n in (1, 2, 4, 8) if n >= need - 1e-9 or n == 8)


# ---- Decoding a box to size x size uint8 -----------------------------------------------------------------------------
def _resize_box(arr: np.ndarray, box, size: int) -> torch.Tensor:
    """arr's box (left, top, right, bottom) resized to size x size, H x W x 3 uint8. A whole-pixel box (the
    training crops at 8/8) goes through torch's uint8 antialiased bilinear (SIMD; Pillow's filter to +-1, measured
    1.7x faster than Pillow here); a fractional one through Pillow's resize with box."""
    arr = np.ascontiguousarray(arr)
    if box == (0, 0, arr.shape[1], arr.shape[0]):
        x = torch.from_numpy(arr).permute(2, 0, 1)[None]  # channels-last strides: the fast kernel's layout
        out = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        return out[0].permute(1, 2, 0).contiguous()
    return _hwc(Image.fromarray(arr).resize((size, size), Image.Resampling.BILINEAR, box=box))


def _jpeg_box(data: bytes, width: int, height: int, box, size: int) -> torch.Tensor:
    """Decode box (left, top, right, bottom, original pixels) of a JPEG at the smallest DCT scale covering
    size x size; raises jpeg_region.RegionError / ValueError when libjpeg can't."""
    left, top, right, bottom = box
    n = dct_scale(right - left, bottom - top, size)
    sw, sh = jpeg_region.scaled_size(width, height, n)
    fx, fy = sw / width, sh / height
    x0, y0 = math.floor(left * fx + 1e-9), math.floor(top * fy + 1e-9)
    x1, y1 = min(sw, math.ceil(right * fx - 1e-9)), min(sh, math.ceil(bottom * fy - 1e-9))
    if jpeg_region.available():
        region, xr = jpeg_region.decode_region(data, n, x0, y0, x1 - x0, y1 - y0)
    else:  # whole image at the same scale (simplejpeg picks the smallest n/8 covering the minimum size)
        import simplejpeg  # here, not at the top: a run on synthetic or generated data starts without it

        full = simplejpeg.decode_jpeg(data, min_height=sh, min_width=sw)
        if full.shape[:2] != (sh, sw):
            raise ValueError(f"simplejpeg decoded {full.shape[1]}x{full.shape[0]}, expected {sw}x{sh}")
        region, xr = full[y0:y1], 0
    # crop to the box's whole pixels first: at 8/8 that is exactly torchvision's crop-then-resize
    region = region[:, x0 - xr:x1 - xr]
    return _resize_box(region, (left * fx - x0, top * fy - y0, right * fx - x0, bottom * fy - y0), size)


def _pil_box(path: str, box, size: int, max_pixels: int) -> torch.Tensor:
    """The careful path: Pillow decodes the whole image; crop the integer box, then resize (as torchvision)."""
    img = load_rgb(path, max_pixels)
    left, top, right, bottom = box
    if all(float(v).is_integer() for v in box):
        return _hwc(img.crop((left, top, right, bottom)).resize((size, size), Image.Resampling.BILINEAR))
    return _hwc(img.resize((size, size), Image.Resampling.BILINEAR, box=box))


class JpegFile:
    """A file's bytes and its size; `jpeg` when libjpeg / simplejpeg can take it (not CMYK, a readable header)."""

    def __init__(self, path: str, max_pixels: int):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        self.jpeg = self.data[:2] == JPEG_MAGIC
        if self.jpeg:
            try:
                if jpeg_region.available():
                    self.width, self.height, cmyk = jpeg_region.header(self.data)
                else:
                    import simplejpeg

                    self.height, self.width, colour, _ = simplejpeg.decode_jpeg_header(self.data)
                    cmyk = colour in ("CMYK", "YCCK")
                self.jpeg = not cmyk
            except (jpeg_region.RegionError, ValueError):
                self.jpeg = False
        if not self.jpeg:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # check_size decides
                with Image.open(path) as img:  # reads the header only
                    self.width, self.height = img.size
        check_size(self.width, self.height, max_pixels)

    def decode_box(self, box, size: int, max_pixels: int) -> torch.Tensor:
        if self.jpeg:
            try:
                return _jpeg_box(self.data, self.width, self.height, box, size)
            except (jpeg_region.RegionError, ValueError):
                pass  # a warning or a quirk: Pillow decides (it reads many files libjpeg warns about)
        return _pil_box(self.path, box, size, max_pixels)


def _hwc(img: Image.Image) -> torch.Tensor:
    """H x W x 3 uint8: the loader keeps the decoder's layout, `to_device` permutes on the device (a copy per
    image here would cost as much as the resize)."""
    return torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(img.height, img.width, 3)


# ---- The transforms (they take a path: the file is decoded inside, after the box is known) ---------------------------
class FastTrainTransform:
    """RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip as uint8 HWC, same draws as torchvision."""

    reads_files = True

    def __init__(self, size: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), max_pixels: int = MAX_IMAGE_PIXELS):
        self.size, self.scale, self.ratio, self.max_pixels = size, scale, ratio, max_pixels

    def plan(self, path: str) -> tuple[JpegFile, tuple, bool]:
        f = JpegFile(path, self.max_pixels)
        left, top, w, h = random_resized_box(f.width, f.height, self.scale, self.ratio)
        flip = bool(torch.rand(1) < 0.5)
        return f, (left, top, left + w, top + h), flip

    def __call__(self, path: str) -> torch.Tensor:
        f, box, flip = self.plan(path)
        x = f.decode_box(box, self.size, self.max_pixels)
        return x.flip(1) if flip else x


class FastValTransform:
    """Resize(resize) + CenterCrop(size) as uint8 HWC, decoding only the centre box at a reduced DCT scale."""

    reads_files = True

    def __init__(self, size: int, resize: int, max_pixels: int = MAX_IMAGE_PIXELS):
        self.size, self.resize, self.max_pixels = size, resize, max_pixels

    def __call__(self, path: str) -> torch.Tensor:
        f = JpegFile(path, self.max_pixels)
        box = centre_box(f.width, f.height, self.resize, self.size)
        return f.decode_box(box, self.size, self.max_pixels)


# ---- On the device ---------------------------------------------------------------------------------------------------
def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 N x H x W x 3 (already on the device) -> float N x 3 x H x W, ImageNet mean/std: the arithmetic of
    ToTensor + Normalize (datasets.ToNormalizedTensor), hence the same values."""
    mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    x = images.permute(0, 3, 1, 2).float().div_(255).sub_(mean).div_(std)
    return x.contiguous()


def to_device(images, device) -> torch.Tensor:
    """The loop's `images.to(device)`: uint8 batches are normalised on the device, encoded ones (the "gpu"
    decoder) decoded, cropped and flipped there; float batches move as they are."""
    if hasattr(images, "decode_on"):
        images = images.decode_on(device)
    else:
        images = images.to(device, non_blocking=True)
    return normalize(images) if images.dtype == torch.uint8 else images
