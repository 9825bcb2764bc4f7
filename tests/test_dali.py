"""data.decoder = "dali": NVIDIA DALI's CPU pipeline (device_id=None) against the suite's own transforms, the
sharding by logical worker, the unreadable files, a resumed run; without DALI, one line naming `make setup-dali`.

The DALI tests skip where DALI is not installed (`make setup-dali`; CI installs it). Every image here is made by the
test (`photo`), except in the one test on the shared photos, which skips without them. Nothing is timed."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contract.config import load_config
from tests.helpers import PHOTOS, final_state, max_difference, needs_photos, records, train_in_process, write_config
from tests.test_fast_data import _split_with_bad_files, photo, save_jpeg
from tests.test_precision import preempt_at
from trainers.__main__ import main
from trainers.data import DataError, IndexBatches, StepBatchSampler, make_loader, open_datasets
from trainers.data.fast import IMAGENET_STD, to_device
from trainers.data.sampling import collate, logical_shards

try:
    import nvidia.dali  # noqa: F401
    HAVE_DALI = True
except ImportError:
    HAVE_DALI = False
needs_dali = pytest.mark.skipif(not HAVE_DALI, reason="NVIDIA DALI is not installed (make setup-dali)")
CPU = torch.device("cpu")
STD = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
SIZES = [(500, 375), (375, 500), (1200, 900), (640, 480), (300, 300), (257, 700)]


def image_folder(root: Path, per_class: int = 3) -> Path:
    """train/ and val/ of two classes of photo-like JPEGs of the sizes above (portrait, landscape, large, square)."""
    k = 0
    for split in ("train", "val"):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True)
            for j in range(per_class):
                w, h = SIZES[k % len(SIZES)]
                save_jpeg(photo(w, h, k), root / split / cls / f"{j}.jpg")
                k += 1
    return root


def grey_levels(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """|x - y| of two normalised batches in grey levels (0..255), per pixel: N x H x W (the worst channel)."""
    return ((x - y) * STD * 255).abs().amax(dim=1)


def decoded(ds, items) -> tuple[torch.Tensor, torch.Tensor]:
    """The normalised images and targets of (epoch, index) items, as the loop gets them."""
    batch = collate([ds[item] for item in items])
    return to_device(batch.images, CPU), batch.targets


def against_pil(root: Path, size: int, split: str, epoch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(|dali - pil| per pixel in grey levels, dali's images) over every image of a split."""
    dali = open_datasets("imagefolder", str(root), size, 2, 0, None, decoder="dali", threads=2)
    pil = open_datasets("imagefolder", str(root), size, 2, 0, None, decoder="pil")
    ds, ref = (dali[0], pil[0]) if split == "train" else (dali[1], pil[1])
    items = [(epoch, i) for i in range(len(ds))]
    x, targets = decoded(ds, items)
    assert targets.tolist() == [ref[item][1] for item in items]  # the labels are the ImageFolder's
    y = torch.stack([ref[item][0] for item in items])  # same seed, epoch and index: the same box and flip
    return grey_levels(x, y), x


# ---------------------------------------------------------------------------------------------------------
# Without DALI, and the config
# ---------------------------------------------------------------------------------------------------------

def test_without_dali_the_decoder_is_one_line_naming_the_make_target(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import nvidia.dali now raises ImportError
    image_folder(tmp_path / "data", per_class=1)
    with pytest.raises(DataError, match="make setup-dali"):
        open_datasets("imagefolder", str(tmp_path / "data"), 32, 2, 0, None, decoder="dali")
    config = write_config(tmp_path / "c.toml", {"data": {"kind": "imagefolder", "path": str(tmp_path / "data"),
                                                         "image_size": 32, "decoder": "dali"}})
    assert main(["train", str(config), "--out", str(tmp_path / "runs")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "make setup-dali" in errors[0], errors
    assert not (tmp_path / "runs").exists()  # refused before any run folder


def test_dali_is_one_more_decoder_and_leaves_the_committed_fingerprints(tmp_path):
    from contract.config import ConfigError
    from contract.fingerprint import config_fingerprint
    from contract.reader import folder_fingerprint

    reference = Path(__file__).resolve().parents[1] / "results" / "reference" / "vm-2cpu"
    assert folder_fingerprint(reference / "05_linear_scaling" / "w32-s0") == "c9c3ffca2274"
    exp1 = Path(__file__).resolve().parents[1] / "experiments" / "01_throughput_single_gpu"
    cpu = config_fingerprint(load_config(exp1, "gpu", []))
    dali = load_config(exp1, "gpu", ['data.decoder="dali"'])
    assert dali.data.decoder == "dali" and config_fingerprint(dali) != cpu  # another condition, never pooled
    with pytest.raises(ConfigError, match="data.decoder"):
        load_config(exp1, "gpu", ['data.decoder="nvdali"'])


# ---------------------------------------------------------------------------------------------------------
# Pixels: validation equals the suite's own transform to +-1, training too inside the crop's border
# ---------------------------------------------------------------------------------------------------------

@needs_dali
def test_validation_batches_equal_resize_and_centre_crop_to_one_grey_level(tmp_path):
    diff, x = against_pil(image_folder(tmp_path), 224, "val")
    assert x.shape == (6, 3, 224, 224) and x.dtype == torch.float32
    assert float(diff.max()) <= 1.0 + 1e-4


@needs_dali
def test_training_batches_are_the_same_crops_and_flips_as_the_pil_pipeline(tmp_path):
    """The boxes and flips are the other decoders' draws. Inside the crop the pixels equal torchvision's crop-then-
    resize to +-1; on its outermost 3 pixels DALI's resize repeats the edge where Pillow's renormalises its filter
    (a few grey levels there)."""
    diff, x = against_pil(image_folder(tmp_path), 112, "train")
    assert x.shape == (6, 3, 112, 112)
    assert float(diff[:, 3:-3, 3:-3].max()) <= 1.0 + 1e-4
    assert float(diff.mean()) < 0.5 and float(diff.max()) <= 16


@pytest.mark.slow  # ~15 s: the pil reference of 397 photos at 224 px
@needs_dali
@needs_photos
def test_the_shared_photos_validation_to_one_grey_level_and_training_inside_the_border():
    diff, _ = against_pil(PHOTOS, 224, "val")
    assert float(diff.max()) <= 1.0 + 1e-4
    diff, _ = against_pil(PHOTOS, 224, "train")
    assert float(diff[:, 3:-3, 3:-3].max()) <= 1.0 + 1e-4 and float(diff.mean()) < 0.5


@needs_dali
def test_png_and_cmyk_files_take_pillow_with_the_same_box(tmp_path):
    root = image_folder(tmp_path / "data", per_class=1)
    img = photo(320, 240, 9)
    img.save(root / "train" / "a" / "x.png")
    img.convert("CMYK").save(root / "train" / "b" / "y.jpg")
    diff, x = against_pil(root, 64, "train")
    assert x.shape == (4, 3, 64, 64) and float(diff[:, 3:-3, 3:-3].max()) <= 1.0 + 1e-4


@needs_dali
def test_a_batch_dali_fails_on_is_decoded_by_pillow_and_undecodable_data_is_one_line(tmp_path, monkeypatch, caplog):
    from trainers.data import dali

    root = image_folder(tmp_path / "data", per_class=2)
    ds = open_datasets("imagefolder", str(root), 64, 2, 0, None, decoder="dali")[1]
    items = [ds[(0, i)][0] for i in range(len(ds))]
    good = dali.DaliImage.collate(items).decode_on(CPU)

    def fail(self, items):
        raise RuntimeError("Critical error in pipeline:\nError in CPU operator")

    monkeypatch.setattr(dali.Pipe, "run", fail)
    with caplog.at_level(logging.WARNING):
        by_pillow = dali.DaliImage.collate(items).decode_on(CPU)
    assert "decoding its 4 JPEGs with Pillow" in caplog.text
    assert (by_pillow.int() - good.int()).abs().max() <= 1  # the same region, box and flip
    items[1].data = items[1].data[:300].clone()  # the header, then nothing Pillow can decode either
    with pytest.raises(DataError, match="could not be decoded by DALI nor Pillow"):
        dali.DaliImage.collate(items).decode_on(CPU)


# ---------------------------------------------------------------------------------------------------------
# Sharding, unreadable files, a whole run
# ---------------------------------------------------------------------------------------------------------

@needs_dali
def test_logical_workers_over_ranks_read_each_image_once_an_epoch_and_their_batches_are_the_one_process_batch(
        tmp_path):
    """4 logical workers over 2 ranks, each rank's batches through the loader (a worker process): the ranks' batches
    side by side are bit for bit the one-process 4-worker batch, and an epoch holds every image once (the
    DistributedSampler pad apart)."""
    root = image_folder(tmp_path, per_class=5)  # 10 training images
    train = open_datasets("imagefolder", str(root), 32, 2, 0, None, decoder="dali")[0]
    for epoch in (0, 1):
        whole = StepBatchSampler(len(train), logical_shards(0, 1, 4), 2, epoch=epoch, seed=5)
        one = [to_device(b.images, CPU) for b in make_loader(train, whole, 0)]
        ranks, seen = [], []
        for rank in (0, 1):
            sampler = StepBatchSampler(len(train), logical_shards(rank, 2, 4), 2, epoch=epoch, seed=5)
            seen += [i for step in sampler for i in step]
            ranks.append([to_device(b.images, CPU) for b in make_loader(train, sampler, 1)])
        for step, batch in enumerate(one):
            assert torch.equal(batch, torch.cat([ranks[0][step], ranks[1][step]]))
        assert sorted(set(seen)) == list(range(10)) and len(seen) == 12  # 10 images padded to 3 per worker


@needs_dali
def test_unreadable_files_are_replaced_in_training_and_dropped_in_validation(tmp_path):
    for split in ("train", "val"):
        _split_with_bad_files(tmp_path / split)
    train, val = open_datasets("imagefolder", str(tmp_path), 24, 2, 0, None, decoder="dali")
    batches = list(make_loader(train, IndexBatches(list(range(6)), 3), 1))
    assert [b.skipped for b in batches] == [(1,), (3,)]
    x = to_device(batches[0].images, CPU)
    assert x.shape == (3, 3, 24, 24) and x.dtype == torch.float32 and x.abs().max() < 3
    vb = list(make_loader(val, IndexBatches(list(range(6)), 6), 0))[0]
    assert len(vb.targets) == 4 and vb.skipped == (1, 3)
    assert to_device(vb.images, CPU).shape == (4, 3, 24, 24)


@pytest.mark.slow
@needs_dali
@pytest.mark.parametrize("photos", [False, pytest.param(True, marks=needs_photos)], ids=["own-jpegs", "shared-photos"])
def test_a_two_epoch_run_trains_and_a_preempted_one_resumes_bit_identically(tmp_path, monkeypatch, photos):
    data, batch = (PHOTOS, 16) if photos else (image_folder(tmp_path / "data", per_class=4), 2)
    cfg = write_config(tmp_path / "d.toml", {
        "data": {"kind": "imagefolder", "path": str(data), "image_size": 32, "decoder": "dali",
                 "loader_workers": 1},
        "model": {"num_classes": 2}, "train": {"workers": 2, "per_worker_batch": batch}, "lr": {"base_batch": 4}})
    assert train_in_process(cfg, tmp_path, "whole") == 0
    run_dir = tmp_path / "d" / "whole"
    epochs = records(run_dir, "epoch")
    images = 244 if photos else 8
    assert [e["epoch"] for e in epochs] == [0, 1] and [e["images"] for e in epochs] == [images, images]
    assert all(0 < e["data_s"] and 0 <= e["data_share"] <= 1 for e in epochs)
    steps = records(run_dir, "iter")[0]["iters"]
    preempt_at(monkeypatch, steps + 1)  # at epoch 1's first step: a mid-epoch checkpoint
    assert train_in_process(cfg, tmp_path, "cut") == 4
    monkeypatch.undo()
    assert train_in_process(cfg, tmp_path, "cut", "--resume", "auto") == 0
    assert max_difference(final_state(run_dir), final_state(tmp_path / "d" / "cut")) == 0.0


def test_bench_data_times_torchvision_and_every_decoder_this_machine_runs(tmp_path):
    from tools import data_bench

    result = data_bench.bench(image_folder(tmp_path, per_class=2), rounds=1, batch=4, size=32)
    cuda = torch.cuda.is_available()
    assert set(result["loaders"]) == {"cpu", "pil"} | ({"dali"} if HAVE_DALI else set()) | ({"gpu"} if cuda else set())
    assert result["images"] == 4 and result["torchvision_images_per_s"] > 0
    assert all(r["images_per_s"] > 0 and r["cpu_images_per_s"] > 0 for r in result["loaders"].values())
    if not HAVE_DALI:
        assert "make setup-dali" in result["skipped"]["dali"]
    if not cuda:
        assert "CUDA" in result["skipped"]["gpu"]
        with pytest.raises(DataError, match="--decoder gpu: needs a CUDA GPU"):
            data_bench.bench(tmp_path, decoder="gpu")


@needs_dali
def test_the_loops_data_time_holds_the_wait_for_dalis_batches(tmp_path, monkeypatch):
    """Every DALI call of a training epoch happens while the loop waits for its next batch: the epoch's data time is
    at least the time spent in them (both read from the same clock, so whatever this machine's speed)."""
    import time

    from trainers import backends
    from trainers.backends import detect_launch
    from trainers.data import dali
    from trainers import loop
    from trainers.setup import build_setup

    cfg = load_config(write_config(tmp_path / "t.toml", {
        "data": {"kind": "imagefolder", "path": str(image_folder(tmp_path / "data", per_class=4)), "image_size": 32,
                 "decoder": "dali", "loader_workers": 1},
        "model": {"num_classes": 2}, "train": {"workers": 2, "per_worker_batch": 2}, "lr": {"base_batch": 4}}))
    in_dali, original = [], dali.Pipe.run

    def timed(self, items):
        started = time.perf_counter()
        try:
            return original(self, items)
        finally:
            in_dali.append(time.perf_counter() - started)

    monkeypatch.setattr(dali.Pipe, "run", timed)
    launch = detect_launch()
    s, state = build_setup(cfg, tmp_path / "run", backends.resolve(cfg, launch), launch, False, False)
    in_dali.clear()  # the readability checks before training
    loop.train_epoch(s, state, 0)
    assert len(in_dali) == 2  # one pipeline run a step
    assert s.times.split["data_s"] >= sum(in_dali) > 0
