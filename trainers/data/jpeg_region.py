"""Partial JPEG decoding: one region of the image at a DCT scale of n/8, through the system's libjpeg(-turbo).

No Python package here decodes only a region (PyTurboJPEG 2.x needs TurboJPEG 3, which Debian 12 and Ubuntu 22.04
don't ship), so _jpeg_region.c calls libjpeg's own API and is compiled on first use (cc + libjpeg-dev) into the cache
folder. Without a compiler or the headers `available()` is False and the caller decodes with simplejpeg instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .generate import cache_root

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("_jpeg_region.c")
OK, UNREADABLE, CMYK, BAD_REGION = 0, 1, 2, 3
_lib: ctypes.CDLL | None | bool = None  # None: not tried yet; False: can't be built here


class RegionError(Exception):
    """libjpeg could not decode the region; the caller decodes the file the careful way (Pillow)."""


def _library_path() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return cache_root().parent / "native" / f"jpeg_region-{digest}.so"


def _build(target: Path) -> None:
    """Compile into a temporary name, then rename: concurrent loader workers never load half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE), "-ljpeg"], check=True,
                       capture_output=True, timeout=120)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load():
    global _lib
    if _lib is None:
        if os.environ.get("SCALING_STUDY_NO_JPEG_REGION"):  # tests and benchmarks of the fallback
            _lib = False
            return _lib
        target = _library_path()
        try:
            if not target.exists():
                _build(target)
            lib = ctypes.CDLL(str(target))
        except (OSError, subprocess.SubprocessError) as e:
            log.info("partial JPEG decoding unavailable (%s); decoding whole images with simplejpeg", e)
            _lib = False
            return _lib
        buf, size, ints = ctypes.c_char_p, ctypes.c_ulong, ctypes.POINTER(ctypes.c_int)
        lib.header.argtypes = [buf, size, ints]
        lib.decode_region.argtypes = [buf, size] + [ctypes.c_int] * 5 + [ctypes.c_void_p, size, ints]
        _lib = lib
    return _lib


def available() -> bool:
    return bool(_load())


def header(data: bytes) -> tuple[int, int, bool]:
    """(width, height, is_cmyk) of a JPEG; RegionError when libjpeg can't read its header."""
    info = (ctypes.c_int * 4)()
    if _load().header(data, len(data), info) != OK:
        raise RegionError("unreadable JPEG header")
    return info[0], info[1], bool(info[2])


def scaled_size(width: int, height: int, scale_num: int) -> tuple[int, int]:
    """libjpeg's output size at scale_num/8 (jdiv_round_up)."""
    return -(-width * scale_num // 8), -(-height * scale_num // 8)


def decode_region(data: bytes, scale_num: int, x: int, y: int, w: int, h: int) -> tuple[np.ndarray, int]:
    """Rows y..y+h of the image decoded at scale_num/8, columns from x0 <= x covering x..x+w (whole iMCU columns):
    returns (uint8 array h x w' x 3, x0)."""
    out = np.empty(h * (w + 64) * 3, dtype=np.uint8)  # libjpeg widens by < 2 iMCU columns (<= 32 px each side)
    info = (ctypes.c_int * 4)()
    code = _load().decode_region(data, len(data), scale_num, x, y, w, h, out.ctypes.data, out.size, info)
    if code != OK:
        raise RegionError({UNREADABLE: "libjpeg refused the file", CMYK: "CMYK/YCCK JPEG",
                           BAD_REGION: f"region {x},{y},{w},{h} outside {info[0]}x{info[1]}"}[code])
    x0, width = info[2], info[3]
    return out[: h * width * 3].reshape(h, width, 3), x0
