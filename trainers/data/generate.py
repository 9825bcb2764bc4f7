"""A generated ImageNet-shaped dataset for the `local` scale, and its on-disk cache.

`generate_dataset` draws class folders of JPEGs (numpy + PIL) in the ILSVRC-2012 ImageFolder layout. A class is one
combination of four factors of graded difficulty, so a small ResNet progresses from its first epoch (colour is easy)
and keeps improving for many: hue (8) x accent (3) x texture (6) x shape (10). Nuisances make it a task: a random
gradient background, 0-3 clutter shapes, random position / scale / rotation / aspect, colour jitter, noise and JPEG
compression; a fraction AMBIGUOUS of images shows a confusable class's object (as ILSVRC-2012 has mislabelled
images), so about 1 - AMBIGUOUS is reachable.

Every image is drawn from its own Generator seeded with (seed, split, class, n): byte-identical files whatever the
order or process (with the same PIL / libjpeg). GENERATOR_VERSION is part of the cache key: bump it whenever a
change here changes the pixels.
"""

from __future__ import annotations

import colorsys
import fcntl
import hashlib
import io
import json
import multiprocessing
import os
import shutil
import signal
import sys
import time
from itertools import product
from pathlib import Path

import numpy as np
from PIL import Image

from contract.config import DataError
from contract.runfolder import DISK_FULL

GENERATOR_VERSION = 2
MARKER = "dataset.json"  # written last: its presence (with matching args) means "complete"
IN_PROGRESS = ".generating"  # written first: says the folder's train/ and val/ are ours to replace

# Difficulty knobs (changing any of them changes the pixels: bump GENERATOR_VERSION).
AMBIGUOUS = 0.10  # fraction of images whose object is drawn from a confusable class
HUE_JITTER = 0.035  # hue units (0..1); hue centres are 0.125 apart
NOISE_STD = (0.02, 0.08)  # pixel noise, in 0..1 intensity units
CLUTTER_MAX = 3  # distractor shapes per image (0..CLUTTER_MAX)
JPEG_QUALITY = 90

N_HUES, N_ACCENTS, N_TEXTURES = 8, 3, 6
SHAPES = ("circle", "square", "triangle", "diamond", "cross", "ring", "star", "bar", "hexagon", "crescent")
MAX_CLASSES = N_HUES * N_ACCENTS * N_TEXTURES * len(SHAPES)  # 1440


# ---- Drawing one image -----------------------------------------------------------------------------------------------

def default_signals() -> None:
    """A forked worker must die on the pool's SIGTERM even when its parent (a Trainer) catches SIGTERM/SIGUSR1."""
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)

def class_factors(classes: int, seed: int) -> list[tuple[int, int, int, int]]:
    """(hue, accent, texture, shape) of each class: distinct combinations in a seeded order."""
    if not 1 <= classes <= MAX_CLASSES:
        raise DataError(f"generated data: classes must be 1..{MAX_CLASSES}, got {classes}")
    combos = list(product(range(N_HUES), range(N_ACCENTS), range(N_TEXTURES), range(len(SHAPES))))
    order = np.random.default_rng([seed, 0xC1A55]).permutation(len(combos))
    return [combos[i] for i in order[:classes]]


def confusers(factors: list[tuple[int, int, int, int]]) -> list[list[tuple[int, int, int, int]]]:
    """Per class, the factors of the other classes that share the most factors with it."""
    out = []
    for c, f in enumerate(factors):
        shared = [(sum(a == b for a, b in zip(f, g)), g) for d, g in enumerate(factors) if d != c]
        best = max((s for s, _ in shared), default=0)
        out.append([g for s, g in shared if s == best])
    return out


def _shape_field(shape: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Approximate signed distance (object units, < 0 inside) of a shape of radius ~1 at the origin."""
    name = SHAPES[shape]
    if name == "circle":
        return np.hypot(u, v) - 0.95
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) - 0.78
    if name == "diamond":
        return (np.abs(u) + np.abs(v) - 1.1) * 0.7071
    if name in ("triangle", "hexagon"):
        k, apothem = (3, 0.55) if name == "triangle" else (6, 0.85)
        angles = np.pi / 2 + 2 * np.pi * np.arange(k) / k
        return np.max([np.cos(a) * u + np.sin(a) * v for a in angles], axis=0) - apothem
    if name == "cross":
        arm_h = np.maximum(np.abs(u) - 1.0, np.abs(v) - 0.32)
        arm_v = np.maximum(np.abs(v) - 1.0, np.abs(u) - 0.32)
        return np.minimum(arm_h, arm_v)
    if name == "ring":
        return np.abs(np.hypot(u, v) - 0.72) - 0.26
    if name == "star":
        return (np.hypot(u, v) - (0.62 + 0.36 * np.cos(5 * np.arctan2(v, u)))) * 0.6
    if name == "bar":
        return (np.hypot(u, v / 0.38) - 1.0) * 0.38
    if name == "crescent":
        return np.maximum(np.hypot(u, v) - 0.95, 0.75 - np.hypot(u - 0.5, v))
    raise AssertionError(name)


def _texture(texture: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Mix weight 0..1 between the main colour (0) and the accent colour (1), in object coordinates."""
    two_pi = 2 * np.pi
    if texture == 0:  # coarse stripes
        s = np.sin(two_pi * 1.0 * u)
    elif texture == 1:  # fine stripes
        s = np.sin(two_pi * 2.2 * u)
    elif texture == 2:  # checkerboard
        s = np.sin(two_pi * 1.1 * u) * np.sin(two_pi * 1.1 * v) * 2
    elif texture == 3:  # dots
        s = (np.cos(two_pi * 1.6 * u) * np.cos(two_pi * 1.6 * v) - 0.45) * 3
    elif texture == 4:  # concentric rings
        s = np.sin(two_pi * 1.5 * np.hypot(u, v))
    else:  # pinwheel sectors
        s = np.sin(4 * np.arctan2(v, u))
    return np.clip(0.5 + 1.5 * s, 0.0, 1.0)


def _accent(rgb_hsv: tuple[float, float, float], accent: int) -> tuple[float, float, float]:
    h, s, v = rgb_hsv
    if accent == 0:  # dark
        return colorsys.hsv_to_rgb(h, s, v * 0.3)
    if accent == 1:  # light
        return colorsys.hsv_to_rgb(h, s * 0.25, min(1.0, v * 0.4 + 0.6))
    return colorsys.hsv_to_rgb((h + 0.5) % 1.0, s, v)  # complementary


def _paint(img, xx, yy, rng, hue, accent, texture, shape, radius, pixel):
    """Composite one textured shape onto img (H, W, 3) in place, anti-aliased by its distance field."""
    cx, cy = rng.uniform(-0.3, 0.3, size=2) if radius > 0.3 else rng.uniform(-0.85, 0.85, size=2)
    angle = rng.uniform(0, 2 * np.pi)
    aspect = np.exp(rng.uniform(-0.2, 0.2))
    c, s = np.cos(angle), np.sin(angle)
    dx, dy = xx - cx, yy - cy
    u = (c * dx + s * dy) / (radius * aspect)
    v = (-s * dx + c * dy) * aspect / radius
    alpha = np.clip(0.5 - _shape_field(shape, u, v) * radius / pixel, 0.0, 1.0)[..., None]
    hsv = ((hue + rng.uniform(-HUE_JITTER, HUE_JITTER)) % 1.0, rng.uniform(0.55, 1.0), rng.uniform(0.55, 1.0))
    main = np.array(colorsys.hsv_to_rgb(*hsv), dtype=np.float32)
    acc = np.array(_accent(hsv, accent), dtype=np.float32)
    t = _texture(texture, u, v)[..., None]
    img *= 1 - alpha
    img += alpha * (main * (1 - t) + acc * t)


def render(size: int, factors: tuple[int, int, int, int], rng: np.random.Generator,
           confusable: list[tuple[int, int, int, int]] = ()) -> np.ndarray:
    """One size x size uint8 RGB image of a class with the given (hue, accent, texture, shape); with
    probability AMBIGUOUS the object is one of `confusable` instead (the label stays)."""
    if rng.random() < AMBIGUOUS and len(confusable):
        factors = confusable[rng.integers(len(confusable))]
    hue, accent, texture, shape = factors
    hue = hue / N_HUES
    coords = (np.arange(size, dtype=np.float32) + 0.5) / size * 2 - 1  # pixel centres in [-1, 1]
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    pixel = 2.0 / size
    # Background: a gradient between two low-saturation colours in a random direction.
    c0, c1 = (np.array(colorsys.hsv_to_rgb(rng.random(), rng.uniform(0, 0.6), rng.uniform(0.2, 0.95)),
                       dtype=np.float32) for _ in range(2))
    g_angle = rng.uniform(0, 2 * np.pi)
    g = (np.cos(g_angle) * xx + np.sin(g_angle) * yy)[..., None] * 0.5 + 0.5
    img = c0 * (1 - g) + c1 * g
    # Clutter: small random shapes, most behind the object, some in front of it.
    n_clutter = int(rng.integers(CLUTTER_MAX + 1))
    in_front = rng.random(n_clutter) < 0.3
    clutter = [(rng.random(), int(rng.integers(N_ACCENTS)), int(rng.integers(N_TEXTURES)),
                int(rng.integers(len(SHAPES))), rng.uniform(0.15, 0.3)) for _ in range(n_clutter)]
    for k in np.flatnonzero(~in_front):
        _paint(img, xx, yy, rng, *clutter[k], pixel)
    _paint(img, xx, yy, rng, hue, accent, texture, shape, rng.uniform(0.34, 0.6), pixel)
    for k in np.flatnonzero(in_front):
        _paint(img, xx, yy, rng, *clutter[k], pixel)
    # Global contrast / brightness and pixel noise.
    img = (img - 0.5) * rng.uniform(0.7, 1.1) + 0.5 + rng.uniform(-0.1, 0.1)
    img += rng.normal(0.0, rng.uniform(*NOISE_STD), size=img.shape).astype(np.float32)
    return (np.clip(img, 0.0, 1.0) * 255 + 0.5).astype(np.uint8)


def _write_class(job) -> int:
    """Draw and write every image of one class (both splits). Runs in a worker process."""
    root, cls, name, factors, confusable, per_class, val_per_class, size, seed = job
    for split, count in ((0, per_class), (1, val_per_class)):
        folder = Path(root) / ("train", "val")[split] / name
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(count):
            rng = np.random.default_rng([seed, GENERATOR_VERSION, split, cls, n])
            buf = io.BytesIO()
            Image.fromarray(render(size, factors, rng, confusable)).save(buf, format="JPEG", quality=JPEG_QUALITY)
            (folder / f"{n}.jpg").write_bytes(buf.getvalue())
    return cls


# ---- Writing a dataset folder ----------------------------------------------------------------------------------------
def _args(classes, per_class, val_per_class, image_size, seed) -> dict:
    return {"classes": int(classes), "per_class": int(per_class), "val_per_class": int(val_per_class),
            "image_size": int(image_size), "seed": int(seed), "generator_version": GENERATOR_VERSION}


def is_complete(out: Path, args: dict) -> bool:
    """True when out holds a finished dataset made with exactly these arguments."""
    try:
        marker = json.loads((Path(out) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("args") == args


class _Progress:
    """One updating line on a terminal; otherwise about 20 plain lines (one a class for few classes)."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.total, self.label, self.enabled = total, label, enabled
        self.tty = enabled and sys.stderr.isatty()
        self.every = max(1, total // 20)
        self.done, self.start = 0, time.perf_counter()

    def step(self) -> None:
        self.done += 1
        if not self.enabled or (not self.tty and self.done % self.every and self.done != self.total):
            return
        elapsed = time.perf_counter() - self.start
        line = f"{self.label}: {self.done}/{self.total} classes, {elapsed:.1f} s"
        sys.stderr.write(f"\r{line}" + ("\n" if self.done == self.total else "") if self.tty else line + "\n")
        sys.stderr.flush()


def generate_dataset(out: Path, classes: int, per_class: int, val_per_class: int, image_size: int, seed: int,
                     progress: bool = True, processes: int | None = None) -> Path:
    """Write out/train/<class>/<n>.jpg, out/val/<class>/<n>.jpg and, last, out/dataset.json; return out. A complete
    dataset of the same arguments is kept, a half-made one of ours (.generating) made again, a train/ or val/ we did
    not make refused. processes=None uses every core (the files do not depend on it)."""
    out = Path(out)
    args = _args(classes, per_class, val_per_class, image_size, seed)
    if min(per_class, image_size) < 1 or val_per_class < 0:
        raise DataError(f"generated data: per_class and image_size must be >= 1, val_per_class >= 0: {args}")
    factors = class_factors(classes, seed)
    if is_complete(out, args):
        return out
    ours = (out / IN_PROGRESS).exists() or (out / MARKER).exists()
    if not ours and any((out / d).exists() for d in ("train", "val")):
        raise DataError(f"{out} already has train/ or val/ that were not generated here: choose an empty folder")
    for d in ("train", "val"):
        shutil.rmtree(out / d, ignore_errors=True)
    (out / MARKER).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / IN_PROGRESS).write_text("")

    names = [f"n{c:08d}" for c in range(classes)]  # sort in class order, shaped like WordNet ids
    near = confusers(factors)
    jobs = [(str(out), c, names[c], factors[c], near[c], per_class, val_per_class, image_size, seed)
            for c in range(classes)]
    bar = _Progress(classes, f"generating {out.name}", progress)
    start = time.perf_counter()
    processes = min(processes or os.cpu_count() or 1, classes)
    if processes > 1:
        # fork: the workers only run numpy/PIL, and it avoids re-importing torch in each of them.
        with multiprocessing.get_context("fork").Pool(processes, initializer=default_signals) as pool:
            for _ in pool.imap_unordered(_write_class, jobs):
                bar.step()
            # Let every worker end on its own before the with block's terminate(): a worker forked late (a busy
            # machine) may get the SIGTERM before its initializer restores the default, ignore it under a Trainer's
            # handler, and wait for a task forever, the pool's join with it.
            pool.close()
            pool.join()
    else:
        for job in jobs:
            _write_class(job)
            bar.step()
    marker = {"args": args, "train_images": classes * per_class, "val_images": classes * val_per_class,
              "classes": names, "factors": {n: list(f) for n, f in zip(names, factors)},
              "seconds": round(time.perf_counter() - start, 2)}
    tmp = out / (MARKER + ".tmp")
    tmp.write_text(json.dumps(marker, indent=1))
    os.replace(tmp, out / MARKER)
    (out / IN_PROGRESS).unlink(missing_ok=True)
    return out


# ---- The cache: <repo>/.cache/datasets/<name>-<hash>/, made once, safe under concurrent ranks ------------------------
SPEC_KEYS = ("classes", "per_class", "val_per_class", "image_size", "seed")


def cache_root() -> Path:
    """$SCALING_STUDY_CACHE/datasets, else <repo>/.cache/datasets (repo = parent of the trainers package)."""
    base = os.environ.get("SCALING_STUDY_CACHE")
    return (Path(base) if base else Path(__file__).resolve().parents[2] / ".cache") / "datasets"


def cache_path(spec: dict) -> Path:
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise DataError(f"generated data spec lacks {', '.join(missing)} (needs {', '.join(SPEC_KEYS)})")
    args = _args(*(spec[k] for k in SPEC_KEYS))
    digest = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:10]
    name = spec.get("name") or f"gen{args['classes']}x{args['per_class']}-{args['image_size']}px"
    return cache_root() / f"{name}-{digest}"


def estimated_bytes(spec: dict) -> int:
    """The cache's size on disk: each image as a JPEG and decoded (uint8 RGB), ~1.5 x 3 bytes a pixel (measured:
    4.7 MB for 1,000 images at 32 px)."""
    images = spec["classes"] * (spec["per_class"] + spec["val_per_class"])
    return int(images * 4.5 * spec["image_size"] ** 2)


def ensure_generated(spec: dict, progress: bool = True) -> Path:
    """The folder of the generated dataset `spec` describes, made on first use; of ranks calling at once, one
    generates under an fcntl lock while the others wait."""
    path = cache_path(spec)
    args = _args(*(spec[k] for k in SPEC_KEYS))
    if is_complete(path, args):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not is_complete(path, args):
                shutil.rmtree(path, ignore_errors=True)  # the cache folder is ours: a half-made one goes
                check_free_space(path, spec)
                images = spec["classes"] * (spec["per_class"] + spec["val_per_class"])
                print(f"generating the data set once: {images:,} images of {spec['image_size']} px, about "
                      f"{estimated_bytes(spec) / 1e6:,.1f} MB in {path}", file=sys.stderr, flush=True)
                generate_cached(path, spec, progress)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def check_free_space(path: Path, spec: dict) -> None:
    """The disk the cache writes to holds the data set: else it would fill that disk, then fail (blaming the
    run's --out), and leave the half-made cache filling it."""
    need, free = estimated_bytes(spec), shutil.disk_usage(path.parent).free
    if need > free:
        raise DataError(no_room(path.parent, f"needs about {need / 1e6:,.1f} MB, {free / 1e6:,.1f} MB free"))


def no_room(folder: Path, why: str) -> str:
    return (f"the data cache {folder} has no room for the generated data set ({why}): free space there, set "
            "SCALING_STUDY_CACHE to a folder on a larger disk, or lower data.per_class or data.classes")


def generate_cached(path: Path, spec: dict, progress: bool) -> None:
    """generate_dataset into the cache; one that fails is removed (it is made again from scratch on the next use
    anyway), so a full disk is left as it was found."""
    try:
        generate_dataset(path, **{k: spec[k] for k in SPEC_KEYS}, progress=progress)
    except BaseException as e:
        shutil.rmtree(path, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            raise DataError(no_room(path.parent, f"{e.strerror} writing {e.filename or path}")) from None
        raise
