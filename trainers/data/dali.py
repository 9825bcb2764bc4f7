"""data.decoder = "dali": NVIDIA DALI decodes, crops, resizes and flips each batch; the loader only reads files.

The loader stays the suite's own (ImageFolderDataset over StepBatchSampler): a worker's item is the file's bytes,
crop box and flip drawn from the (seed, epoch, index) seed as the "cpu" and "gpu" decoders draw them, and the batch
goes to one DALI pipeline through `external_source`. DALI's own `readers.file` would shard and shuffle its own way:
with ours W emulated workers equal W ranks and a resume is bit-identical.

The pipeline decodes only the region the resize reads (`image_slice`; "mixed": nvJPEG with HW_DECODER_LOAD on the
A100/H100 hardware decoder, which takes no SMs; without a GPU, libjpeg-turbo on DALI's threads), resizes
(antialiased linear, Pillow's BILINEAR) and flips. A training crop reads its box alone; a validation crop (Resize +
CenterCrop) also the filter's reach past it, so both equal "pil" to +-1 grey level (tests). EXIF orientation is
ignored, as Pillow's ImageFolder does. Files DALI is not given (PNG, CMYK...) and a batch DALI fails on take Pillow
with the same region, box and flip. DALI is optional (`make setup-dali`).
"""
from __future__ import annotations

import io
import logging
import math

import numpy as np
import torch
from PIL import Image

from .fast import _resize_box
from .generate import DataError
from .gpu import EncodedBatch, EncodedImage, GpuTrainPlan, GpuValPlan

log = logging.getLogger(__name__)

HW_DECODER_LOAD = 0.65  # DALI's default share for the hardware decoder; its best value is found by measuring
SETUP = "run `make setup-dali`"


def require_dali() -> None:
    """DataError (one line naming the make target) when DALI is not installed."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError as e:
        raise DataError(f'data.decoder = "dali" needs NVIDIA DALI, which is not installed: {SETUP} ({e})') from None


def dali_missing() -> str | None:
    """Why this machine cannot run DALI (require_dali's line), or None."""
    try:
        require_dali()
    except DataError as e:
        return str(e)
    return None


# ---- In the loader workers: the files, their boxes and flips ---------------------------------------------------------
class DaliImage(EncodedImage):
    """One sample for DALI. `outside`: the resize reads past the box (validation's Resize + CenterCrop)."""

    outside = False
    threads = 1

    @staticmethod
    def collate(items: list["DaliImage"]) -> "DaliBatch":
        return DaliBatch(items)


class DaliTrainPlan(GpuTrainPlan):
    """RandomResizedCrop + flip drawn in the worker (as "cpu" and "gpu" draw them), done by DALI."""

    item_kind = DaliImage

    def __init__(self, size: int, threads: int = 1, **kw):
        super().__init__(size, **kw)
        self.threads = threads

    def __call__(self, path: str) -> DaliImage:
        item = super().__call__(path)
        item.threads = self.threads
        return item


class DaliValPlan(GpuValPlan):
    """Resize(resize) + CenterCrop(size), done by DALI."""

    item_kind = DaliImage

    def __init__(self, size: int, resize: int, threads: int = 1, **kw):
        super().__init__(size, resize, **kw)
        self.threads = threads

    def __call__(self, path: str) -> DaliImage:
        item = super().__call__(path)
        item.outside, item.threads = True, self.threads
        return item


def region(item: DaliImage) -> tuple[tuple[int, int, int, int], tuple[float, float, float, float]]:
    """The pixels to decode, (x0, y0, x1, y1), and the box within them, (left, top, right, bottom).

    A training box is whole pixels and is its own region. A validation box is fractional and its resize reads up
    to one output pixel's span (the antialiasing filter's support) past it, plus one for rounding: that margin is
    decoded too, clipped to the image."""
    left, top, right, bottom = item.box
    if not item.outside:
        x0, y0, x1, y1 = int(left), int(top), int(right), int(bottom)
    else:
        reach = math.ceil(max((right - left) / item.size, (bottom - top) / item.size, 1.0)) + 1
        x0, y0 = max(0, math.floor(left) - reach), max(0, math.floor(top) - reach)
        x1, y1 = min(item.width, math.ceil(right) + reach), min(item.height, math.ceil(bottom) + reach)
    return (x0, y0, x1, y1), (left - x0, top - y0, right - x0, bottom - y0)


# ---- In the training process: the pipeline ---------------------------------------------------------------------------
def _graph(size: int, mixed: bool):
    """The pipeline's operators: encoded JPEGs, their regions, boxes and flips in; uint8 HWC size x size out."""
    from nvidia.dali import fn, types

    def given(name, dtype):
        return fn.external_source(name=name, dtype=dtype)

    encoded = given("encoded", types.UINT8)
    decoder = {"device": "mixed", "hw_decoder_load": HW_DECODER_LOAD} if mixed else {"device": "cpu"}
    images = fn.decoders.image_slice(encoded, given("anchor", types.INT32), given("shape", types.INT32),
                                     normalized_anchor=False, normalized_shape=False, output_type=types.RGB,
                                     adjust_orientation=False, jpeg_fancy_upsampling=True, **decoder)
    images = fn.resize(images, size=[size, size], roi_start=given("roi_start", types.FLOAT),
                       roi_end=given("roi_end", types.FLOAT), roi_relative=False, interp_type=types.INTERP_LINEAR,
                       antialias=True)
    return fn.flip(images, horizontal=given("mirror", types.INT32))


class Pipe:
    """One built DALI pipeline for batches of up to `batch` images of one output size on one device."""

    def __init__(self, device: torch.device, size: int, threads: int, batch: int):
        from nvidia.dali import pipeline_def

        self.device, self.size, self.batch = device, size, batch
        mixed = device.type == "cuda"
        device_id = (device.index if device.index is not None else torch.cuda.current_device()) if mixed else None

        @pipeline_def(batch_size=batch, num_threads=max(1, threads), device_id=device_id, exec_dynamic=True,
                      prefetch_queue_depth=1)
        def pipeline():
            return _graph(size, mixed)

        self.pipeline = pipeline()
        self.pipeline.build()

    def run(self, items: list[DaliImage]) -> torch.Tensor:
        """N x size x size x 3 uint8 on the device; raises RuntimeError when DALI cannot decode one of them."""
        regions, boxes = zip(*(region(item) for item in items))
        feed = {
            "encoded": [item.data.numpy() for item in items],
            "anchor": [np.array([x0, y0], dtype=np.int32) for x0, y0, _, _ in regions],
            "shape": [np.array([x1 - x0, y1 - y0], dtype=np.int32) for x0, y0, x1, y1 in regions],
            "roi_start": [np.array([top, left], dtype=np.float32) for left, top, _, _ in boxes],
            "roi_end": [np.array([bottom, right], dtype=np.float32) for _, _, right, bottom in boxes],
            "mirror": [np.array(int(item.flip), dtype=np.int32) for item in items],
        }
        for name, data in feed.items():
            self.pipeline.feed_input(name, data)
        (images,) = self.pipeline.run()
        return self._to_torch(images, len(items))

    def _to_torch(self, images, n: int) -> torch.Tensor:
        from nvidia.dali.plugin.pytorch import feed_ndarray

        out = torch.empty(n, self.size, self.size, 3, dtype=torch.uint8, device=self.device)
        # A blocking copy (no stream given: DALI's own, waited for): the output's buffer is DALI's to reuse once we
        # return, so no copy may still be queued then. It costs the host the copy, two batches ahead of training.
        feed_ndarray(images.as_tensor(), out)
        return out


_PIPES: dict[tuple, Pipe] = {}


def pipe_for(device: torch.device, size: int, threads: int, batch: int) -> Pipe:
    """The pipeline for this device, size and thread count, built on first use; rebuilt for a larger batch."""
    key = (str(device), size, threads)
    pipe = _PIPES.get(key)
    if pipe is None or pipe.batch < batch:
        pipe = _PIPES[key] = Pipe(device, size, threads, max(batch, pipe.batch if pipe else 0))
    return pipe


# ---- A batch: DALI for the JPEGs, Pillow for the rest ----------------------------------------------------------------
def pillow_crop(item: DaliImage) -> torch.Tensor:
    """The item's crop as DALI would make it, with Pillow: size x size x 3 uint8 (for what DALI is not given)."""
    if item.encoded:
        try:
            with Image.open(io.BytesIO(item.data.numpy().tobytes())) as img:
                pixels = np.asarray(img.convert("RGB"))
        except Exception as e:  # noqa: BLE001 - any undecodable data: one line, not a traceback
            raise DataError(f"a {item.width}x{item.height} JPEG whose header reads could not be decoded by DALI "
                            f"nor Pillow ({type(e).__name__}: {e}): remove the file or set data.decoder = \"cpu\"")
    else:
        pixels = item.data.numpy()
    (x0, y0, x1, y1), box = region(item)
    x = _resize_box(pixels[y0:y1, x0:x1], box, item.size)
    return x.flip(1) if item.flip else x


class DaliBatch(EncodedBatch):
    """A batch of DaliImage: `decode_on(device)` gives uint8 N x size x size x 3 on the device (to_device
    normalises it)."""

    def decode_on(self, device) -> torch.Tensor:
        device = torch.device(device)
        first = self.items[0]
        out = torch.empty(len(self.items), first.size, first.size, 3, dtype=torch.uint8, device=device)
        jpegs = [i for i, item in enumerate(self.items) if item.encoded]
        others = [i for i, item in enumerate(self.items) if not item.encoded]
        if jpegs:
            try:
                out[jpegs] = pipe_for(device, first.size, first.threads, len(jpegs)).run([self.items[i] for i in jpegs])
            except RuntimeError as e:  # one bad JPEG fails the batch: Pillow decodes each instead (or names it)
                log.warning("DALI could not decode a batch (%s); decoding its %d JPEGs with Pillow",
                            str(e).strip().splitlines()[0], len(jpegs))
                others = list(range(len(self.items)))
        for i in others:
            out[i] = pillow_crop(self.items[i]).to(device)
        return out
