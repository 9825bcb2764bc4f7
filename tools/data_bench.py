"""`python -m suite data bench DIR` (python -m tools data-bench): images/s of torchvision's ImageFolder pipeline and ours, in one run.

Both read DIR/train (or DIR itself) in the ImageFolder layout with RandomResizedCrop 224 + flip, through a
DataLoader of the same batch size and worker count. The two alternate pass by pass (rounds), so a machine that
others share slows both alike; each loader's first pass (start-up, page cache) is not timed. torchvision's
figure includes ToTensor + Normalize (its loader's output is float); ours ends in uint8, normalised on the device
by `to_device`, which is timed apart (`ours_normalise_s`): on a GPU it runs there, on a CPU-only run it costs the
main process that much.
"""

from __future__ import annotations

import argparse

import json
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from trainers.data.datasets import IMAGENET_MEAN, IMAGENET_STD, ImageFolderDataset, imagefolder_transforms
from trainers.data.fast import to_device
from trainers.data.generate import DataError
from trainers.data.sampling import IndexBatches, make_loader


def split_root(root: Path) -> Path:
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"{root} is not a folder (data bench needs an ImageFolder: class sub-folders of images)")
    return root / "train" if (root / "train").is_dir() else root


def torchvision_loader(root: Path, size: int, batch: int, workers: int) -> DataLoader:
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    ds = datasets.ImageFolder(str(root), transform=tf)
    return DataLoader(ds, batch_size=batch, shuffle=False, num_workers=workers, persistent_workers=workers > 0)


def our_loader(root: Path, size: int, batch: int, workers: int, decoder: str):
    train_tf, _ = imagefolder_transforms(decoder, size)
    ds = ImageFolderDataset(root, train_tf, seed=0)
    return make_loader(ds, IndexBatches(list(range(len(ds))), batch), workers), len(ds)


def _timed_pass(loader, device, normalise: bool) -> tuple[float, float, int]:
    """Seconds for one pass, of which in to_device, and the images it gave."""
    images, spent_norm = 0, 0.0
    start = time.perf_counter()
    for batch in loader:
        x = batch[0]
        if normalise:
            t = time.perf_counter()
            x = to_device(x, device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            spent_norm += time.perf_counter() - t
        images += len(batch[1])
    return time.perf_counter() - start, spent_norm, images


def bench(root: Path, workers: int = 0, decoder: str = "cpu", batch: int = 32, rounds: int = 3,
          size: int = 224) -> dict:
    root = split_root(root)
    device = torch.device("cuda" if decoder == "gpu" else "cpu")
    if decoder == "gpu" and not torch.cuda.is_available():
        raise DataError("--decoder gpu needs a CUDA GPU; this machine has none")
    tv = torchvision_loader(root, size, batch, workers)
    ours, n = our_loader(root, size, batch, workers, decoder)
    _timed_pass(tv, device, False)  # warm-up: workers start, files enter the page cache
    _timed_pass(ours, device, True)
    t_tv = t_ours = t_norm = 0.0
    images = 0
    for _ in range(rounds):
        s, _, k = _timed_pass(tv, device, False)
        t_tv += s
        s, norm, _ = _timed_pass(ours, device, True)
        t_ours, t_norm = t_ours + s, t_norm + norm
        images += k
    tv_rate = images / t_tv
    ours_rate = images / (t_ours - t_norm) if decoder != "gpu" else images / t_ours
    return {
        "dir": str(root), "images": n, "rounds": rounds, "batch": batch, "workers": workers, "decoder": decoder,
        "torch_threads": torch.get_num_threads(), "torchvision_images_per_s": tv_rate,
        "ours_images_per_s": ours_rate, "ratio": ours_rate / tv_rate, "ours_normalise_s": t_norm,
        "ours_with_normalise_images_per_s": images / t_ours,
    }


def run(args) -> int:
    torch.set_num_threads(args.threads)  # per core: the loader's own ops stay on one thread
    result = bench(Path(args.dir), args.workers, args.decoder, args.batch, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['dir']}: {result['images']} images x {result['rounds']} rounds, {args.workers} loader "
              f"workers, decoder {args.decoder}")
        print(f"  torchvision ImageFolder + PIL: {result['torchvision_images_per_s']:8.1f} images/s")
        print(f"  ours:                          {result['ours_images_per_s']:8.1f} images/s  "
              f"(x{result['ratio']:.2f}; {result['ours_with_normalise_images_per_s']:.1f} with normalising "
              f"on this {'GPU' if args.decoder == 'gpu' else 'CPU'})")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="an ImageFolder (DIR/train/<class>/*.jpg, or DIR/<class>/*.jpg)")
    p.add_argument("--workers", type=int, default=0, help="loader worker processes (0: the main process only)")
    p.add_argument("--decoder", choices=["cpu", "gpu", "pil"], default="cpu", help="our decoder (data.decoder)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="timed passes of each pipeline, alternating")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: images/s per core)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools data-bench", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))
