"""Reading one image file with Pillow, the careful way: a size cap before decoding, every mode to 8-bit RGB."""

from __future__ import annotations

import warnings

import numpy as np
from PIL import Image

MAX_IMAGE_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold (it only warns below twice that)
SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")


class ImageTooLarge(ValueError):
    """The header claims more pixels than data.max_image_pixels: refused before any decoding."""


def check_size(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise ImageTooLarge(f"{width}x{height} is over data.max_image_pixels = {max_pixels}")


def _sixteen_to_eight(img: Image.Image) -> Image.Image:
    """16-bit greyscale (PNG) to 8-bit L by the high byte; Pillow's convert("RGB") would clip it to white."""
    arr = np.asarray(img, dtype=np.int64 if img.mode == "I" else None).astype(np.int64)
    return Image.fromarray((np.clip(arr, 0, 65535) >> 8).astype(np.uint8), mode="L")


def load_rgb(path: str, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """Decode an image fully as 8-bit RGB (CMYK, greyscale, 16-bit, palette, alpha converted). Raises on a bad
    file, and on one whose header claims more than max_pixels pixels (before decoding it)."""
    with open(path, "rb") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the cap below decides, configurably
        img = Image.open(f)
        check_size(*img.size, max_pixels)
        img.load()  # decode now: a truncated file raises here, not later in a transform
    if img.mode in SIXTEEN_BIT:
        img = _sixteen_to_eight(img)
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    return img.convert("RGB") if img.mode != "RGB" else img
