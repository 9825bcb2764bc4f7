"""Tests of trainers.data: generated data, bad images, deterministic augmentation, sharding, the loader."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data.distributed import DistributedSampler

from contract.config import DataConfig
from trainers.data import (DataError, StepBatchSampler, build_datasets, ensure_generated, generate_dataset,
                           generated_spec, is_complete, make_loader, open_datasets, shard_indices, synthetic_batch,
                           val_indices, IndexBatches)
from trainers.data.generate import IN_PROGRESS, MARKER, cache_path
from tests.helpers import PHOTOS

HYMENOPTERA = PHOTOS  # real photos beside the project (skipped without them)
TINY = dict(classes=4, per_class=6, val_per_class=3, image_size=24, seed=3)


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.jpg"))}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_STUDY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---------------------------------------------------------------------------------------------------------
# Generated data
# ---------------------------------------------------------------------------------------------------------

def test_generated_is_byte_identical_and_independent_of_processes(tmp_path):
    a = generate_dataset(tmp_path / "a", **TINY, progress=False, processes=1)
    b = generate_dataset(tmp_path / "b", **TINY, progress=False, processes=2)
    da, db = tree_digest(a), tree_digest(b)
    assert len(da) == 4 * (6 + 3) and da == db
    assert sorted(p.name for p in (a / "train").iterdir()) == [f"n{c:08d}" for c in range(4)]
    img = Image.open(a / "val" / "n00000000" / "0.jpg")
    assert img.size == (24, 24) and img.mode == "RGB"
    marker = json.loads((a / MARKER).read_text())
    assert marker["train_images"] == 24 and marker["val_images"] == 12 and marker["args"]["seed"] == 3
    c = generate_dataset(tmp_path / "c", **{**TINY, "seed": 4}, progress=False, processes=1)
    assert tree_digest(c) != da


def test_half_made_dataset_is_detected_and_regenerated(tmp_path):
    out = generate_dataset(tmp_path / "d", **TINY, progress=False)
    good = tree_digest(out)
    args = json.loads((out / MARKER).read_text())["args"]
    assert is_complete(out, args)
    # Interrupted run: the marker is not there yet, some files are missing or broken.
    (out / MARKER).unlink()
    (out / IN_PROGRESS).write_text("")
    (out / "train" / "n00000001" / "2.jpg").unlink()
    (out / "val" / "n00000000" / "0.jpg").write_bytes(b"half")
    assert not is_complete(out, args)
    generate_dataset(out, **TINY, progress=False)
    assert is_complete(out, args) and tree_digest(out) == good and not (out / IN_PROGRESS).exists()
    # A complete dataset with other arguments is not "complete" for these.
    assert not is_complete(out, {**args, "seed": 99})


def test_generate_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "x" / "train" / "cats").mkdir(parents=True)
    with pytest.raises(DataError, match="not generated"):
        generate_dataset(tmp_path / "x", **TINY, progress=False)


def test_progress_lines_when_not_a_tty(tmp_path, capsys):
    generate_dataset(tmp_path / "p", **TINY, progress=True, processes=1)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("generating p: 4/4 classes")


def _ensure_in_child(spec, cache_dir, queue):
    os.environ["SCALING_STUDY_CACHE"] = cache_dir
    queue.put(str(ensure_generated(spec, progress=False)))


def test_ensure_generated_concurrent_processes_make_one_dataset(cache):
    spec = {**TINY, "per_class": 40}
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_ensure_in_child, args=(spec, str(cache), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    paths = {queue.get(timeout=120) for _ in procs}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert paths == {str(cache_path(spec))}
    path = Path(paths.pop())
    assert path.parent == cache / "datasets"
    assert [p.name for p in (cache / "datasets").iterdir() if not p.name.startswith(".")] == [path.name]
    assert len(tree_digest(path)) == 4 * (40 + 3) and is_complete(path, json.loads((path / MARKER).read_text())["args"])
    # A second call finds it and writes nothing.
    mtime = (path / MARKER).stat().st_mtime_ns
    assert ensure_generated(spec) == path and (path / MARKER).stat().st_mtime_ns == mtime


LATE_WORKER = """
import os, signal, sys, time
from pathlib import Path
from trainers.data import generate

signal.signal(signal.SIGTERM, lambda *args: None)  # a Trainer's graceful stop: caught, not fatal
restore = generate.default_signals
first = Path(sys.argv[1] + ".first")


def one_worker_late():  # the second worker of a busy machine: its initializer runs after the other did every job
    try:
        os.close(os.open(first, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(3)
    restore()


generate.default_signals = one_worker_late
generate.generate_dataset(Path(sys.argv[1]), **{tiny}, progress=False, processes=2)
"""


def test_a_pool_worker_that_starts_late_under_a_trainers_sigterm_handler_never_hangs_the_generator(tmp_path):
    """The pool's SIGTERM could reach a worker before its initializer restored the default; under a Trainer's handler
    it was ignored, and the worker, then the pool's join or the interpreter's exit, waited forever (a fast test run
    hung here under load). The pool now ends its workers by closing, so no SIGTERM is needed."""
    import subprocess
    import sys

    import signal

    script = tmp_path / "late_worker.py"
    script.write_text(LATE_WORKER.format(tiny=TINY))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "data")], stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1], start_new_session=True)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the hung worker too: it is in the script's session
        proc.communicate()
        pytest.fail("the generator hung: a pool worker never ended")
    assert proc.returncode == 0, err[-2000:]
    assert is_complete(tmp_path / "data", json.loads((tmp_path / "data" / MARKER).read_text())["args"])


def test_ensure_generated_cache_key_and_missing_keys(cache):
    assert cache_path(TINY) != cache_path({**TINY, "seed": 4})
    with pytest.raises(DataError, match="per_class"):
        ensure_generated({"classes": 2})


def test_a_cache_that_would_not_fit_is_refused_in_one_line_naming_the_cache(cache, monkeypatch):
    """Issue 40, item 3: the disk the cache writes to, not --out, and before a byte is written."""
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 20_000, 20_000))
    with pytest.raises(DataError) as refused:
        ensure_generated(TINY, progress=False)
    line = str(refused.value)
    assert "\n" not in line and f"the data cache {cache / 'datasets'} has no room" in line
    assert "needs about 0.1 MB, 0.0 MB free" in line and "SCALING_STUDY_CACHE" in line
    assert not cache_path(TINY).exists()


def test_a_cache_whose_generation_fails_is_removed_and_the_line_names_the_cache(cache, monkeypatch):
    """A disk filled while generating (the estimate is an estimate): the half-made cache goes, the line names it."""
    import errno

    from trainers.data import generate

    original = generate._write_class

    def fill_the_disk(job):
        original(job)
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(job[0]) / "train" / "n00000000" / "6.jpg"))

    monkeypatch.setattr(generate, "_write_class", fill_the_disk)
    spec = {**TINY, "classes": 1}  # one class: one process, so the patched function runs here
    with pytest.raises(DataError, match=f"the data cache {cache / 'datasets'} has no room .*No space left"):
        ensure_generated(spec, progress=False)
    assert not cache_path(spec).exists()
    monkeypatch.undo()
    monkeypatch.setenv("SCALING_STUDY_CACHE", str(cache))
    args = generate._args(*(spec[k] for k in generate.SPEC_KEYS))
    assert is_complete(ensure_generated(spec, progress=False), args)  # the next use makes it whole


def test_the_cache_states_its_size_before_it_writes_and_only_then(cache, capsys):
    path = ensure_generated(TINY, progress=False)
    err = capsys.readouterr().err
    assert f"generating the data set once: 36 images of 24 px, about 0.1 MB in {path}" in err
    written = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert 0.3 < written / (36 * 4.5 * 24**2) < 3  # the stated size is the right order of magnitude
    ensure_generated(TINY, progress=False)
    assert "generating" not in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# open_datasets: kinds, errors, bad images, real photos; build_datasets: a config's data section
# ---------------------------------------------------------------------------------------------------------

def test_generated_kind_shapes_and_classes(cache):
    train, val = open_datasets("generated", None, 20, 10, 0, TINY)
    assert (len(train), len(val)) == (24, 12) and train.classes == val.classes
    x, y, skipped = train[5]
    assert x.shape == (3, 20, 20) and x.dtype == torch.float32 and y == 0 and skipped == ()
    assert val[0][0].shape == (3, 20, 20)
    with pytest.raises(DataError, match="num_classes >= 4"):
        open_datasets("generated", None, 20, 3, 0, TINY)


def test_build_datasets_reads_the_data_section(cache):
    section = DataConfig(kind="generated", image_size=24, classes=4, per_class=6, val_per_class=3, data_seed=3)
    assert generated_spec(section) == TINY and generated_spec(DataConfig(kind="synthetic")) is None
    train, val = build_datasets(section, 10, 7)
    same, _ = open_datasets("generated", None, 24, 10, 7, TINY)
    assert (len(train), len(val)) == (24, 12) and torch.equal(train[(0, 5)][0], same[(0, 5)][0])
    train, val = build_datasets(DataConfig(kind="synthetic", image_size=8, synthetic_images=100), 10, 0)
    assert len(train) == 100 and train[7][0].shape == (3, 8, 8)


@pytest.mark.parametrize("kind,path,generated,message", [
    ("imagefolder", None, None, "needs data.path"),
    ("imagefolder", "/nonexistent/imagenet", None, "does not exist"),
    ("generated", None, None, "data.generated"),
    ("tfrecord", None, None, "must be imagefolder"),
])
def test_build_errors_are_data_errors(kind, path, generated, message):
    with pytest.raises(DataError, match=message) as info:
        open_datasets(kind, path, 32, 10, 0, generated)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_missing_split_and_flat_val_are_data_errors(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "train" / "a" / "0.jpg")
    with pytest.raises(DataError, match="val is missing"):
        open_datasets("imagefolder", str(tmp_path), 8, 10, 0, None)
    (tmp_path / "val").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "val" / "ILSVRC2012_val_00000001.JPEG")
    with pytest.raises(DataError, match="no class sub-folders"):
        open_datasets("imagefolder", str(tmp_path), 8, 10, 0, None)


def _bad_tree(root: Path) -> Path:
    rng = np.random.default_rng(0)
    photo = Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8))
    for split in ("train", "val"):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True)
    a, b = root / "train" / "a", root / "train" / "b"
    photo.save(a / "0_good.jpg")
    buf = a / "1_truncated.jpg"
    photo.save(buf, quality=95)
    buf.write_bytes(buf.read_bytes()[:300])
    photo.convert("CMYK").save(a / "2_cmyk.jpg")
    photo.convert("L").save(a / "3_grey.png")
    photo.convert("P", palette=Image.Palette.ADAPTIVE).save(b / "0_palette.png")
    (b / "1_not_an_image.jpg").write_text("this is not a JPEG")
    photo.convert("RGBA").save(b / "2_alpha.png")
    photo.save(root / "val" / "a" / "0.jpg")
    photo.save(root / "val" / "b" / "0.jpg")
    return root


def test_bad_images_are_converted_or_skipped_and_counted(tmp_path):
    train, _ = open_datasets("imagefolder", str(_bad_tree(tmp_path)), 16, 2, 0, None)
    names = [Path(p).name for p, _ in train.samples]
    assert names == ["0_good.jpg", "1_truncated.jpg", "2_cmyk.jpg", "3_grey.png",
                     "0_palette.png", "1_not_an_image.jpg", "2_alpha.png"]
    items = [train[i] for i in range(len(train))]
    assert [s for _, _, s in items] == [(), (1,), (), (), (), (5,), ()]
    assert all(x.shape == (3, 16, 16) for x, _, _ in items)
    # the truncated a/1 is replaced by a/2 (same class), the non-image b/1 by b/2
    assert [y for _, y, _ in items] == [0, 0, 0, 0, 1, 1, 1]
    assert train.skipped_count() == 2
    # the indices reach the main process through worker processes, in the batches
    loader = make_loader(train, StepBatchSampler(len(train), [(0, 1)], 4, 0, 0), loader_workers=2)
    batches = list(loader)
    assert {i for b in batches for i in b.skipped} == {1, 5} and [len(b.targets) for b in batches] == [4, 3]
    assert all(b.images.shape[1:] == (3, 16, 16) for b in batches)


def test_all_unreadable_is_a_data_error(tmp_path):
    for split in ("train", "val"):
        (tmp_path / split / "a").mkdir(parents=True)
        (tmp_path / split / "a" / "x.jpg").write_text("nope")
    with pytest.raises(DataError, match="none of its 1 image files can be read"):
        open_datasets("imagefolder", str(tmp_path), 8, 1, 0, None)


@pytest.mark.skipif(not HYMENOPTERA.is_dir(), reason=f"{HYMENOPTERA} (real photos) is not on this machine")
def test_real_photos_imagefolder():
    train, val = open_datasets("imagefolder", str(HYMENOPTERA), 64, 2, 0, None)
    assert train.classes == ["ants", "bees"] and len(train) > 200 and len(val) > 100
    loader = make_loader(val, IndexBatches(val_indices(len(val), 1, 0, "every_rank")[:16], 8), 0)
    batches = list(loader)
    assert [b.images.shape for b in batches] == [(8, 3, 64, 64)] * 2 and not any(b.skipped for b in batches)
    x, _, _ = train[0]
    assert torch.equal(x, train[0][0]) and x.shape == (3, 64, 64)


# ---------------------------------------------------------------------------------------------------------
# Deterministic augmentation
# ---------------------------------------------------------------------------------------------------------

def test_augmentation_is_a_pure_function_of_seed_epoch_index(cache):
    train, _ = open_datasets("generated", None, 16, 4, 7, TINY)
    x0 = train[(0, 5)][0]
    torch.manual_seed(123)  # the global RNG's state must not matter ...
    rng_before = torch.get_rng_state()
    assert torch.equal(train[(0, 5)][0], x0)
    assert torch.equal(torch.get_rng_state(), rng_before)  # ... nor be changed
    train.set_epoch(0)
    assert torch.equal(train[5][0], x0)
    assert not torch.equal(train[(1, 5)][0], x0)  # another epoch, another crop
    other_seed, _ = open_datasets("generated", None, 16, 4, 8, TINY)
    assert not torch.equal(other_seed[(0, 5)][0], x0)


def torchvision_transforms(image_size: int, min_scale: float = 0.08):
    """The thesis's transforms written with torchvision only: the reference the fast ones are tested against."""
    from torchvision import transforms

    from trainers.data.folder import IMAGENET_MEAN, IMAGENET_STD

    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    train = transforms.Compose([transforms.RandomResizedCrop(image_size, scale=(min_scale, 1.0)),
                                transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize])
    val = transforms.Compose([transforms.Resize(round(image_size * 256 / 224)), transforms.CenterCrop(image_size),
                              transforms.ToTensor(), normalize])
    return train, val


@pytest.mark.parametrize("size,min_scale", [(16, 0.35), (224, 0.08)])
def test_fast_transforms_equal_torchvision(size, min_scale):
    from trainers.data.datasets import imagenet_transforms
    rng = np.random.default_rng(1)
    fast_train, fast_val = imagenet_transforms(size, min_scale)
    ref_train, ref_val = torchvision_transforms(size, min_scale)
    for i in range(20):
        h, w = rng.integers(size // 2, size * 2, size=2)
        img = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        torch.manual_seed(i)
        a = fast_train(img)
        torch.manual_seed(i)
        assert torch.equal(a, ref_train(img))
        assert torch.equal(fast_val(img), ref_val(img))


def _epoch_batches(train, sampler, workers):
    return [(b.images, b.targets) for b in make_loader(train, sampler, workers)]


def test_resume_mid_epoch_and_workers_give_the_same_batches(cache):
    train, _ = open_datasets("generated", None, 16, 4, 0, TINY)
    sampler = StepBatchSampler(len(train), [(0, 2), (1, 2)], 2, epoch=0, seed=0)
    loader = make_loader(train, sampler, 2)  # persistent workers across epochs
    full = {}
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        full[epoch] = [(b.images, b.targets) for b in loader]
        assert len(full[epoch]) == len(sampler) == 6
    assert not torch.equal(full[0][0][0], full[1][0][0])
    # Resume in epoch 1 at step 4, fresh process state, no workers: the same remaining batches.
    resumed = StepBatchSampler(len(train), [(0, 2), (1, 2)], 2, epoch=1, seed=0, start_step=4)
    rest = _epoch_batches(train, resumed, 0)
    assert len(rest) == 2 and len(resumed) == 6
    for (xa, ya), (xb, yb) in zip(rest, full[1][4:]):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_emulated_batch_equals_real_ranks_images(cache):
    """Same crop of the same sample whichever rank or emulated worker loads it."""
    train, _ = open_datasets("generated", None, 16, 4, 0, TINY)
    k = 3
    emulated = _epoch_batches(train, StepBatchSampler(len(train), [(r, k) for r in range(k)], 2, 2, 0), 0)
    ranks = [_epoch_batches(train, StepBatchSampler(len(train), [(r, k)], 2, 2, 0), 1) for r in range(k)]
    for step, (x, y) in enumerate(emulated):
        assert torch.equal(x, torch.cat([ranks[r][step][0] for r in range(k)]))
        assert torch.equal(y, torch.cat([ranks[r][step][1] for r in range(k)]))


# ---------------------------------------------------------------------------------------------------------
# Sharding
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,world", [(10, 1), (10, 3), (17, 4), (5, 8), (2, 7), (64, 8)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_equal_distributed_sampler(n, world, shuffle):
    for epoch in (0, 3):
        for rank in range(world):
            ref = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=11)
            ref.set_epoch(epoch)
            assert shard_indices(n, world, rank, epoch, 11, shuffle) == list(ref)


@pytest.mark.parametrize("n,world,b", [(50, 4, 3), (20, 4, 5), (7, 8, 2), (100, 1, 32)])
def test_emulated_step_is_concatenation_of_real_ranks(n, world, b):
    emulated = StepBatchSampler(n, [(r, world) for r in range(world)], b, epoch=2, seed=5)
    ranks = [list(StepBatchSampler(n, [(r, world)], b, epoch=2, seed=5)) for r in range(world)]
    steps = list(emulated)
    assert len(steps) == len(emulated) == len(ranks[0])
    for s, batch in enumerate(steps):
        assert batch == [i for r in range(world) for i in ranks[r][s]]
        assert len(batch) == world * emulated.micro_batch(s)
    for r in range(world):  # each rank's steps, concatenated, are its DistributedSampler shard
        assert [i for step in ranks[r] for i in step] == shard_indices(n, world, r, 2, 5)
    # drop_last=False: every sample is seen
    assert set(i for step in steps for i in step) == set(range(n))


def test_step_sampler_start_step_and_errors():
    full = list(StepBatchSampler(30, [(1, 3)], 4, epoch=1, seed=0))
    assert list(StepBatchSampler(30, [(1, 3)], 4, epoch=1, seed=0, start_step=2)) == full[2:]
    for bad in ([], [(0, 2), (0, 3)], [(3, 3)]):
        with pytest.raises(ValueError):
            StepBatchSampler(30, bad, 4)
    with pytest.raises(ValueError):
        StepBatchSampler(30, [(0, 1)], 4, start_step=9)


@pytest.mark.parametrize("n,world", [(10, 3), (7, 4), (3, 5), (12, 4)])
def test_sharded_validation_counts_every_image_once(n, world):
    parts = [val_indices(n, world, r, "sharded") for r in range(world)]
    assert sorted(i for p in parts for i in p) == list(range(n))
    assert val_indices(n, world, world - 1, "every_rank") == list(range(n))
    with pytest.raises(ValueError):
        val_indices(n, world, 0, "padded")


# ---------------------------------------------------------------------------------------------------------
# Synthetic data
# ---------------------------------------------------------------------------------------------------------

def test_synthetic_is_fixed_per_index():
    train, val = open_datasets("synthetic", None, 8, 10, 0, None, synthetic_size=100)
    assert len(train) == 100 and len(val) == 4
    x, y, s = train[7]
    assert x.shape == (3, 8, 8) and 0 <= y < 10 and s == ()
    assert torch.equal(train[(3, 7)][0], x) and not torch.equal(train[8][0], x)
    images, targets = synthetic_batch(4, 8, 10, 0, "cpu")
    again, _ = synthetic_batch(4, 8, 10, 0, torch.device("cpu"))
    assert images.shape == (4, 3, 8, 8) and targets.shape == (4,) and torch.equal(images, again)
