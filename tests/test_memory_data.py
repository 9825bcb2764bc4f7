"""The in-memory generated data set (trainers/data/memory.py): Pillow's resize on tensors, per-sample deterministic
crops, the same pixels as decoding the JPEG and cropping it with PIL, the decode cache, loaders built once."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import pillow_levels
from trainers.data import IMAGENET_STD, memory
from trainers.data.datasets import ImageFolderDataset, ToNormalizedTensor, imagenet_transforms, load_rgb
from trainers.data.generate import generate_dataset
from trainers.data.memory import (DRAWS, TRIES, Resizer, crop_params, decoded_datasets, load_decoded,
                                  pil_bilinear_coefficients, sample_uniforms)

TINY = dict(classes=4, per_class=6, val_per_class=3, image_size=24, seed=3)


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("gen") / "tiny", **TINY, progress=False, processes=1)


def pil_crop(img: Image.Image, box, size: int) -> np.ndarray:
    """The PIL path's crop / resize / flip of one image (TrainTransform's, with the box given)."""
    top, left, h, w, flip = (int(v) for v in box)
    img = img.crop((left, top, left + w, top + h)).resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else img)


# ---------------------------------------------------------------------------------------------------------
# Pillow's bilinear resize on tensors
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,out", [(24, 16), (17, 16), (5, 32), (32, 32), (32, 37), (64, 20), (3, 1)])
def test_coefficients_give_pillows_one_axis_resize(n, out):
    rng = np.random.default_rng(n * 100 + out)
    row = rng.integers(0, 256, (1, n, 3), dtype=np.uint8)
    ref = np.asarray(Image.fromarray(row).resize((out, 1), Image.Resampling.BILINEAR))[0]
    k = pil_bilinear_coefficients(n, out)
    assert k.min() >= 0 and np.all(np.abs(k.sum(axis=1) - 2 ** 22) <= n)  # 22-bit fixed point, rows sum to ~1
    mine = np.floor((k @ row[0].astype(np.float64) + 2 ** 21) / 2 ** 22)
    assert np.array_equal(mine, ref)


@pytest.mark.parametrize("size,out", [(20, 12), (12, 20), (24, 24), (32, 32)])
def test_resizer_equals_pil_for_every_box_shape(size, out):
    """Every crop height x width (shrinking, enlarging, mixed: both of Pillow 13's pass orders), random position
    and flip: exactly the PIL path's pixels."""
    rng = np.random.default_rng(size)
    hw = np.array([(h, w) for h in range(1, size + 1) for w in range(1, size + 1)])
    n = len(hw)
    top, left = rng.integers(0, size - hw[:, 0] + 1), rng.integers(0, size - hw[:, 1] + 1)
    boxes = torch.from_numpy(np.stack([top, left, hw[:, 0], hw[:, 1], rng.integers(0, 2, n)], axis=1))
    if size > out:  # the vertical-first order of Pillow 13 is exercised
        assert ((hw[:, 0] > out) & (hw[:, 0] - out > 2 * (hw[:, 1] - out))).any()
    images = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    got = Resizer(size, out)(torch.from_numpy(images), *boxes.unbind(1))
    assert got.shape == (n, out, out, 3)
    levels = pillow_levels()
    for i in range(n):
        ref = pil_crop(Image.fromarray(images[i]), boxes[i], out).astype(int)
        assert np.abs(got[i].numpy().astype(int) - ref).max() <= levels, boxes[i]


# ---------------------------------------------------------------------------------------------------------
# Per-sample random numbers and RandomResizedCrop's parameters
# ---------------------------------------------------------------------------------------------------------

def test_uniforms_are_a_pure_function_of_seed_epoch_index():
    u = sample_uniforms(7, 3, [5, 9, 2, 5])
    assert u.shape == (4, DRAWS) and (u >= 0).all() and (u < 1).all()
    assert np.array_equal(u[0], u[3])  # the same sample, wherever it sits in the batch
    assert np.array_equal(u[1], sample_uniforms(7, 3, [9])[0])
    assert np.array_equal(sample_uniforms(7, 3, [2, 9, 5]), u[[2, 1, 0]])
    for other in (sample_uniforms(8, 3, [5]), sample_uniforms(7, 4, [5]), sample_uniforms(7, 3, [6])):
        assert not np.isclose(other[0], u[0]).any()
    many = sample_uniforms(0, 0, np.arange(20000))
    assert abs(many.mean() - 0.5) < 0.005 and abs(np.corrcoef(many[:, 0], many[:, 1])[0, 1]) < 0.02


def reference_get_params(u, height, width, scale, ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, one sample, drawing its numbers from u in order."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(TRIES):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[2 * t])
        aspect = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[2 * t + 1])
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(u[2 * TRIES] * (height - h + 1))
            left = int(u[2 * TRIES + 1] * (width - w + 1))
            return top, left, h, w, int(u[2 * TRIES + 2] < 0.5)
    return 0, 0, height, width, int(u[2 * TRIES + 2] < 0.5)  # square images: the whole image


@pytest.mark.parametrize("scale", [(0.35, 1.0), (0.08, 1.0), (1.0, 1.0)])
def test_crop_params_follow_random_resized_crop(scale):
    u = sample_uniforms(1, 2, np.arange(2000))
    got = crop_params(u, 32, 32, scale)
    assert got.dtype == torch.int64 and got.shape == (2000, 5)
    assert got.tolist() == [list(reference_get_params(row, 32, 32, scale)) for row in u]
    assert ((got[:, 0] + got[:, 2] <= 32) & (got[:, 1] + got[:, 3] <= 32)).all()


def test_crop_params_fall_back_to_the_whole_image():
    u = sample_uniforms(0, 0, range(3))
    u[:, 0:2 * TRIES:2], u[:, 1:2 * TRIES:2] = 0.999, 0.0  # every try: the whole area at aspect 3/4, too tall
    assert crop_params(u, 32, 32, (0.35, 1.0))[:, :4].tolist() == [[0, 0, 32, 32]] * 3


# ---------------------------------------------------------------------------------------------------------
# The in-memory data set against the JPEG files
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("image_size", [32, 16])  # enlarging (the local scale's 32 px) and shrinking crops
def test_in_memory_equals_decoding_the_jpeg_then_the_same_crop(tiny_root, image_size):
    train, val = decoded_datasets(tiny_root, image_size, seed=5)
    files = ImageFolderDataset(tiny_root / "train", None, 5)
    assert train.classes == files.classes and train.targets.tolist() == files.targets
    batch = train.__getitems__([(2, i) for i in range(len(train))])
    to_tensor = ToNormalizedTensor()
    tolerance = pillow_levels() / 255 / min(IMAGENET_STD) + 1e-6  # grey levels, normalised
    for i, (path, target) in enumerate(files.samples):
        ref = to_tensor(Image.fromarray(pil_crop(load_rgb(path), train.boxes(2)[i], image_size)))
        assert (batch.images[i] - ref).abs().max() <= tolerance and batch.targets[i] == target
    _, val_tf = imagenet_transforms(image_size)
    val_files = ImageFolderDataset(tiny_root / "val", val_tf, 5, class_to_idx=files.class_to_idx,
                                   random_transform=False)
    for i in range(len(val_files)):
        x, y, skipped = val[i]
        assert (x - val_files[i][0]).abs().max() <= tolerance and y == val_files[i][1] and skipped == ()


def test_augmentation_is_per_sample_deterministic(tiny_root):
    """Same sample, epoch and seed -> the same pixels, whatever the batch, its order, or the dataset object."""
    train, _ = decoded_datasets(tiny_root, 20, seed=1)
    rng_state = torch.get_rng_state()
    big = train.__getitems__([(3, i) for i in (4, 0, 17, 9, 23)]).images
    torch.manual_seed(99)  # the global RNG plays no part ...
    small = train.__getitems__([(3, 17), (3, 4)]).images
    assert torch.equal(small[0], big[2]) and torch.equal(small[1], big[0])
    train.set_epoch(3)
    assert torch.equal(train[9][0], big[3]) and torch.equal(train[(3, 9)][0], big[3])
    train.__getitems__([(5, 1)])  # another epoch in between ...
    fresh, _ = decoded_datasets(tiny_root, 20, seed=1)  # ... or a new process's data set: the same pixels
    assert torch.equal(fresh.__getitems__([(3, 23)]).images[0], big[4])
    assert torch.equal(train.__getitems__([(3, 23)]).images[0], big[4])
    assert not torch.equal(train[(4, 4)][0], big[0])  # another epoch, another crop
    other_seed, _ = decoded_datasets(tiny_root, 20, seed=2)
    assert not torch.equal(other_seed[(3, 4)][0], big[0])
    torch.set_rng_state(rng_state)
    with pytest.raises(ValueError, match="spans epochs"):
        train.__getitems__([(1, 0), (2, 1)])


def test_an_epoch_augmented_at_once_equals_batch_by_batch(tiny_root, monkeypatch):
    """The epoch cache (all N samples augmented at the epoch's first batch, in chunks) gives each batch the same
    bits as augmenting that batch alone, and a new epoch replaces it."""
    monkeypatch.setattr(memory, "EPOCH_CHUNK", 5)  # several chunks, the last one short
    cached, _ = decoded_datasets(tiny_root, 20, seed=4)
    alone, _ = decoded_datasets(tiny_root, 20, seed=4)
    alone.holds_epochs = False
    assert cached.holds_epochs
    for epoch in (0, 1, 0):
        for batch in ([3, 11, 0], [23], list(range(24))):
            items = [(epoch, i) for i in batch]
            assert torch.equal(cached.__getitems__(items).images, alone.__getitems__(items).images)
        assert cached._epoch_images[0] == epoch
    monkeypatch.setattr(memory, "EPOCH_CACHE_BYTES", 0)  # a split too large to hold an epoch
    assert not decoded_datasets(tiny_root, 20, seed=4)[0].holds_epochs


def test_decode_cache_is_made_once_and_remade_for_another_decoder(tiny_root, monkeypatch):
    cached = load_decoded(tiny_root)
    assert (tiny_root / memory.DECODED).is_file()
    assert cached["train_images"].shape == (24, 24, 24, 3) and cached["train_images"].dtype == np.uint8

    def no_decoding(path):
        raise AssertionError("decoded again")

    monkeypatch.setattr(memory, "load_rgb", no_decoding)
    again = load_decoded(tiny_root)
    assert all(np.array_equal(again[k], cached[k]) for k in ("train_images", "val_images", "train_targets"))
    monkeypatch.setattr(memory, "_decoder", lambda: "another decoder")
    with pytest.raises(AssertionError, match="decoded again"):
        load_decoded(tiny_root)


# ---------------------------------------------------------------------------------------------------------
# Loaders built once per run
# ---------------------------------------------------------------------------------------------------------

def test_trainer_builds_its_loaders_once_and_moves_the_sampler_on(tmp_path):
    from tests.helpers import write_config
    from trainers import backends
    from contract.config import load_config
    from trainers import loop
    from trainers.setup import build_setup

    cfg = load_config(write_config(tmp_path / "c.toml", {"train": {"checkpoint": False}}))
    launch = backends.detect_launch()
    s, _ = build_setup(cfg, tmp_path / "run", backends.resolve(cfg, launch), launch, resume=False, echo=False)
    try:
        loader, steps = loop.batches(s, 0, 0)
        first_epoch = [target for _, target, _ in loader]  # on the device, as the loop reads them
        again, steps_again = loop.batches(s, 1, 2)
        assert again is loader and steps_again == steps == len(first_epoch)
        assert (s.train_sampler.epoch, s.train_sampler.start_step) == (1, 2)
        assert len(list(again)) == steps - 2  # resumed at step 2 of epoch 1
        val_loader = s.val_loader
        loop.validate(s)
        loop.validate(s)
        assert s.val_loader is val_loader
        with pytest.raises(dataclasses.FrozenInstanceError):  # the Setup is built once and only read (issue 65)
            s.val_loader = None
    finally:
        s.stop.restore()
        s.backend.close()


def test_bench_step_ratios_and_run_length_estimate():
    from tools.bench_step import estimate, ratios

    def row(workers, data, ms, val, variant="plain"):  # ms: the step as a run pays it, epoch preparation included
        return {"workers": workers, "data": data, "variant": variant, "ms_per_step_in_a_run": ms,
                "validation_s_median": val}

    table = [row(1, "before", 10.0, 4.0), row(1, "after", 5.0, 2.0), row(1, "after", 10.0, 2.0, "compile"),
             row(32, "before", 80.0, 3.0), row(32, "after", 40.0, 1.0), row(32, "after", 20.0, 1.0, "compile")]
    assert ratios(table) == {"w1_before_over_after": 2.0, "w32_before_over_after": 2.0,
                             "w1_before_over_after+compile": 1.0, "w32_before_over_after+compile": 4.0}
    est = estimate(table)
    assert est["w1-after"] == {"18_epochs_min": round(18 * (2000 * 0.005 + 2.0) / 60, 1),
                               "72_epochs_min": round(72 * 12.0 / 60, 1)}
    assert est["w32-before"]["72_epochs_min"] == round(72 * (63 * 0.08 + 3.0) / 60, 1)
    assert set(est) == {"w1-before", "w1-after", "w1-after+compile", "w32-before", "w32-after", "w32-after+compile"}


def test_bench_step_variants_are_a_runs_numerics_settings():
    from tools.bench_step import main, variant_features

    assert variant_features("plain") == []
    assert variant_features("channels_last+compile") == ["channels_last", "compile"]
    for bad in ("bf16", "compile+compile", "channels_last+"):
        with pytest.raises(ValueError, match="joined by"):
            variant_features(bad)
    assert main(["--variants", "compile,fp16", "--json", ""]) == 2  # one line, before anything is built


@pytest.mark.slow  # builds experiment 5's 8,000-image data set
def test_bench_step_charges_the_epochs_augmentation_once_an_epoch_not_to_the_block(tmp_path):
    """A block of steps after prepare_epoch pays no augmentation; the epoch's cost is what prepare_epoch timed."""
    from tools import bench_step

    trainer = bench_step.make_trainer(1, 1, tmp_path, "plain")
    try:
        dataset = trainer.s.train_ds
        assert dataset.holds_epochs and bench_step.prepare_epoch(trainer, "before", 3) == 0.0
        assert bench_step.prepare_epoch(trainer, "after", 3) > 0.0
        prepared = dataset._epoch_images[1]
        bench_step.time_block(trainer, "after", 5, 3)
        assert dataset._epoch_images[1] is prepared  # the block used the prepared epoch, made nothing anew
        assert bench_step.time_compute(trainer, 2) > 0.0
        profile = bench_step.profile_compute(trainer, 3, top=1000)  # every operator
        shares = [op["share"] for op in profile["top"]]
        assert 0.0 < profile["convolution_share"] <= 1.0 and shares == sorted(shares, reverse=True)
        conv = next(op for op in profile["top"] if op["op"] == "aten::convolution")
        assert conv["calls_per_step"] == 9  # ResNet-8: the stem, two per block and two shortcuts
    finally:
        trainer.s.stop.restore()
        trainer.s.backend.close()
