"""`python -m suite data bench DIR` (python -m tools data-bench): images/s of torchvision's ImageFolder pipeline
and each of our decoders.

All read DIR/train (or DIR) with RandomResizedCrop 224 + flip through a DataLoader of the same batch and workers,
alternating pass by pass so a shared machine slows all alike; each loader's first pass is untimed. Ours end where
the loop's `to_device` takes over, timed apart ("gpu"/"dali" decode there): `images_per_s` leaves out what a GPU
would do, `cpu_images_per_s` counts all of it on this CPU. --decoder all skips, with the reason, the decoders this
machine cannot run ("gpu" needs CUDA, "dali" DALI).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from trainers.data.datasets import DECODERS, IMAGENET_MEAN, IMAGENET_STD, ImageFolderDataset, imagefolder_transforms
from trainers.data.fast import to_device
from contract.config import DataError
from trainers.data.sampling import IndexBatches, make_loader

ON_DEVICE = ("gpu", "dali")  # decoders whose decode happens in to_device


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
    train_tf, _ = imagefolder_transforms(decoder, size, threads=max(1, workers))
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


def runnable(decoder: str) -> str | None:
    """Why this machine cannot run the decoder, or None."""
    if decoder == "gpu" and not torch.cuda.is_available():
        return "needs a CUDA GPU; this machine has none"
    if decoder == "dali":
        from trainers.data.dali import dali_missing
        return dali_missing()
    return None


def chosen(decoder: str) -> tuple[list[str], dict[str, str]]:
    """The decoders to time and those left out (with why): "all", or one name (refused when it can't run)."""
    if decoder != "all":
        why = runnable(decoder)
        if why:
            raise DataError(f"--decoder {decoder}: {why}")
        return [decoder], {}
    skipped = {d: why for d in DECODERS if (why := runnable(d))}
    return [d for d in DECODERS if d not in skipped], skipped


def bench(root: Path, workers: int = 0, decoder: str = "all", batch: int = 32, rounds: int = 3,
          size: int = 224) -> dict:
    root = split_root(root)
    decoders, skipped = chosen(decoder)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaders = {"torchvision": torchvision_loader(root, size, batch, workers)}
    for d in decoders:
        loaders[d], _ = our_loader(root, size, batch, workers, d)
    for name, loader in loaders.items():  # warm-up: workers start, files enter the page cache, pipelines build
        _timed_pass(loader, device, name != "torchvision")
    spent = {name: [0.0, 0.0] for name in loaders}  # seconds in all, of which in to_device
    images = 0
    for _ in range(rounds):
        for name, loader in loaders.items():
            s, on_device, k = _timed_pass(loader, device, name != "torchvision")
            spent[name][0] += s
            spent[name][1] += on_device
        images += k
    tv_rate = images / spent["torchvision"][0]
    result = {"dir": str(root), "images": len(loaders["torchvision"].dataset), "rounds": rounds, "batch": batch,
              "workers": workers, "torch_threads": torch.get_num_threads(), "device": str(device),
              "torchvision_images_per_s": tv_rate, "loaders": {}, "skipped": skipped}
    for d in decoders:
        total, on_device = spent[d]
        # a GPU decodes "gpu"/"dali" batches in to_device: count it, as their loader alone does not decode
        loader_s = total if d in ON_DEVICE else total - on_device
        result["loaders"][d] = {"images_per_s": images / loader_s, "cpu_images_per_s": images / total,
                                "to_device_s": on_device, "ratio": images / loader_s / tv_rate}
    return result


def run(args) -> int:
    torch.set_num_threads(args.threads)  # per core: the loader's own ops stay on one thread
    result = bench(Path(args.dir), args.workers, args.decoder, args.batch, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['dir']}: {result['images']} images x {result['rounds']} rounds, {args.workers} loader workers, "
          f"{result['torch_threads']} torch thread(s), images/s")
    print(f"  {'torchvision ImageFolder + PIL':32s} {result['torchvision_images_per_s']:8.1f}")
    for d, r in result["loaders"].items():
        print(f"  {'ours, data.decoder = ' + repr(d):32s} {r['images_per_s']:8.1f}  (x{r['ratio']:.2f}; "
              f"{r['cpu_images_per_s']:.1f} with to_device on this {result['device']})")
    for d, why in result["skipped"].items():
        print(f"  {'ours, data.decoder = ' + repr(d):32s} not run: {why}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools data-bench", description=__doc__.split("\n")[0])
    p.add_argument("dir", help="an ImageFolder (DIR/train/<class>/*.jpg, or DIR/<class>/*.jpg)")
    p.add_argument("--workers", type=int, default=0,
                   help="loader worker processes (0: the main process only); the dali decoder's threads (at least 1)")
    p.add_argument("--decoder", choices=["all", *DECODERS], default="all",
                   help="our decoder (data.decoder), or all that can run here")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="timed passes of each pipeline, alternating")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: images/s per core)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return run(p.parse_args(argv))
