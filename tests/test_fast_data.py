"""The fast ImageFolder path (data.decoder "cpu"), the GPU decoder's batched crop (run on the CPU here), and the
careful image handling: size cap, 16-bit images, unreadable files counted and excluded."""

from __future__ import annotations

import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from tests.helpers import PHOTOS, run, write_config
from trainers.__main__ import main
from trainers.data import DataError, IndexBatches, make_loader, open_datasets
from trainers.data import fast, gpu, jpeg_region
from trainers.data.datasets import ImageFolderDataset, ToNormalizedTensor
from trainers.data.images import ImageTooLarge, load_rgb

HYMENOPTERA = PHOTOS  # real photos beside the project (skipped without them)


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """A photo-like image: a smooth random field (upsampled noise) plus a little fine noise."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 255, (height // 24 + 2, width // 24 + 2, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC)).astype(np.int16)
    fine = rng.integers(-12, 13, (height, width, 3))
    return Image.fromarray(np.clip(smooth + fine, 0, 255).astype(np.uint8))


def save_jpeg(img: Image.Image, path: Path, **kw) -> str:
    img.save(path, quality=90, **kw)
    return str(path)


def exact_crop(path: str, box, size: int) -> np.ndarray:
    """torchvision's RandomResizedCrop pixels for a given box: full decode, crop, then resize."""
    return np.asarray(load_rgb(path).crop(box).resize((size, size), Image.Resampling.BILINEAR)).astype(np.float64)


def mean_abs(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).mean())


# ---------------------------------------------------------------------------------------------------------
# Crop boxes: torchvision's draws, torchvision's ranges
# ---------------------------------------------------------------------------------------------------------

def test_boxes_are_torchvision_draws():
    img = Image.new("RGB", (500, 375))
    for seed in range(50):
        torch.manual_seed(seed)
        top, left, h, w = transforms.RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3))
        torch.manual_seed(seed)
        assert fast.random_resized_box(500, 375, (0.08, 1.0), (3 / 4, 4 / 3)) == (left, top, w, h)


def test_crop_statistics_cover_scale_and_ratio_ranges():
    torch.manual_seed(0)
    scales, ratios = [], []
    for _ in range(3000):
        left, top, w, h = fast.random_resized_box(500, 375, (0.08, 1.0), (3 / 4, 4 / 3))
        assert 0 <= left and left + w <= 500 and 0 <= top and top + h <= 375
        scales.append(w * h / (500 * 375))
        ratios.append(w / h)
    scales, ratios = np.array(scales), np.array(ratios)
    tried = (scales <= 1.0) & (np.abs(np.log(ratios)) <= math.log(4 / 3) + 0.02)  # all but the centre fallback
    assert tried.mean() > 0.9
    # rounding to whole pixels moves the bounds a little
    assert scales.min() >= 0.075 and scales.max() <= 1.0 and scales.min() < 0.1 and scales.max() > 0.9
    assert 0.3 < np.median(scales) < 0.6  # uniform over [0.08, 1], large areas redrawn when they don't fit (~0.42)
    assert ratios[tried].min() < 0.8 and ratios[tried].max() > 1.25


def test_centre_box_is_resize_then_centre_crop():
    for w, h in [(500, 375), (375, 500), (256, 256), (1000, 301)]:
        left, top, right, bottom = fast.centre_box(w, h, 256, 224)
        assert right - left == pytest.approx(224 * min(w, h) / 256, rel=0.02)
        assert (left + right) / 2 == pytest.approx(w / 2, abs=2) and (top + bottom) / 2 == pytest.approx(h / 2, abs=2)


@pytest.mark.parametrize("w,h,size,n", [(500, 375, 224, 8), (1000, 800, 224, 4), (1800, 1400, 224, 2),
                                        (1800, 1400, 100, 1), (440, 440, 224, 8)])
def test_dct_scale_is_the_smallest_covering(w, h, size, n):
    assert fast.dct_scale(w, h, size) == n
    sw, sh = jpeg_region.scaled_size(w, h, n)
    assert sw >= size and sh >= size


# ---------------------------------------------------------------------------------------------------------
# Pixels: the fast path against the full-resolution one
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(params=["region", "simplejpeg"])
def decode_mode(request, monkeypatch):
    """Both the partial decoder and its fallback (whole image at the DCT scale, simplejpeg)."""
    if request.param == "region":
        if not jpeg_region.available():
            pytest.skip("partial JPEG decoding not built here (no cc or libjpeg headers)")
    else:
        monkeypatch.setattr(jpeg_region, "_lib", False)
    return request.param


@pytest.mark.parametrize("width,height,bound", [(500, 375, 0.25), (1800, 1400, 2.5)])
def test_fast_train_pixels_stay_near_the_full_resolution_pipeline(tmp_path, decode_mode, width, height, bound):
    """500x375 decodes at 8/8 (equal pixels but for libjpeg versions and chroma upsampling at the region edge);
    1800x1400 mostly at
    a reduced DCT scale (libjpeg's scaled IDCT, a different resampling)."""
    path = save_jpeg(photo(width, height), tmp_path / "p.jpg")
    t = fast.FastTrainTransform(224)
    diffs, scaled = [], 0
    for seed in range(12):
        torch.manual_seed(seed)
        f, box, flip = t.plan(path)
        scaled += fast.dct_scale(box[2] - box[0], box[3] - box[1], 224) < 8
        torch.manual_seed(seed)
        x = t(path)
        assert x.dtype == torch.uint8 and x.shape == (224, 224, 3)
        ref = exact_crop(path, box, 224)
        diffs.append(mean_abs(x.numpy(), ref[:, ::-1] if flip else ref))
    assert np.mean(diffs) <= bound and max(diffs) <= 2 * bound + 0.5
    assert (scaled > 0) == (width > 1000)


def test_fast_val_pixels_stay_near_resize_and_centre_crop(tmp_path, decode_mode):
    ref_tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
    for k, (w, h) in enumerate([(500, 375), (375, 500), (1200, 900)]):
        path = save_jpeg(photo(w, h, k), tmp_path / f"{k}.jpg")
        got = fast.FastValTransform(224, 256)(path)
        assert mean_abs(got.numpy(), ref_tf(load_rgb(path))) <= 1.5


def test_non_jpeg_and_cmyk_take_pillow_with_the_same_box(tmp_path):
    img = photo(300, 200)
    for name, save in [("a.png", lambda p: img.save(p)), ("c.jpg", lambda p: img.convert("CMYK").save(p))]:
        path = str(tmp_path / name)
        save(path)
        torch.manual_seed(1)
        f, box, flip = fast.FastTrainTransform(64).plan(path)
        assert not f.jpeg
        torch.manual_seed(1)
        x = fast.FastTrainTransform(64)(path).numpy()
        ref = exact_crop(path, box, 64)
        assert np.array_equal(x, (ref[:, ::-1] if flip else ref).astype(np.uint8))


def test_normalising_on_the_device_equals_to_tensor_and_normalize():
    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (2, 24, 24, 3), dtype=np.uint8)
    expected = torch.stack([ToNormalizedTensor()(Image.fromarray(a)) for a in hwc])
    assert torch.equal(fast.to_device(torch.from_numpy(hwc), torch.device("cpu")), expected)


@pytest.mark.skipif(not HYMENOPTERA.is_dir(), reason=f"{HYMENOPTERA} (real photos) is not on this machine")
def test_real_photos_fast_path_against_pil_path():
    fast_train, _ = open_datasets("imagefolder", str(HYMENOPTERA), 224, 2, 0, None, decoder="cpu")
    pil_train, _ = open_datasets("imagefolder", str(HYMENOPTERA), 224, 2, 0, None, decoder="pil")
    std = torch.tensor(fast.IMAGENET_STD).view(3, 1, 1)
    for i in range(0, len(fast_train), 25):
        x = fast.to_device(fast_train[(1, i)][0][None], torch.device("cpu"))[0]
        y = pil_train[(1, i)][0]  # same seed, epoch and index: the same box and flip
        assert float(((x - y) * std * 255).abs().mean()) < 0.5


# ---------------------------------------------------------------------------------------------------------
# The GPU decoder's device side, run on the CPU
# ---------------------------------------------------------------------------------------------------------

def test_batched_crop_equals_one_image_at_a_time():
    rng = np.random.default_rng(2)
    images = [torch.from_numpy(rng.integers(0, 255, (3, h, w), dtype=np.uint8)) for h, w in
              [(40, 60), (200, 90), (31, 31), (120, 160)]]
    boxes = torch.tensor([[0, 0, 60, 40], [10.5, 20, 80, 190], [3, 3, 20, 29], [40, 0, 160, 90]])
    together = gpu.crop_resize(images, boxes, 24)
    tiny_chunks = gpu.crop_resize(images, boxes, 24, budget=1)  # one image per roi_align call
    alone = torch.cat([gpu.crop_resize([x], b[None], 24) for x, b in zip(images, boxes)])
    assert torch.allclose(together, alone, atol=1e-3) and torch.allclose(tiny_chunks, alone, atol=1e-3)
    assert gpu.size_chunks([(10, 10)] * 5, budget=250) == [[0, 1], [2, 3], [4]]


def test_gpu_decoder_on_cpu_matches_the_cpu_decoder(tmp_path):
    paths = [save_jpeg(photo(w, h, k), tmp_path / f"{k}.jpg") for k, (w, h) in
             enumerate([(500, 375), (375, 500), (640, 480), (300, 300)])]
    photo(320, 240, 9).save(tmp_path / "x.png")
    paths.append(str(tmp_path / "x.png"))
    items, refs = [], []
    for seed, p in enumerate(paths):
        torch.manual_seed(seed)
        items.append(gpu.GpuTrainPlan(112)(p))
        torch.manual_seed(seed)
        refs.append(fast.FastTrainTransform(112)(p))
    assert [i.encoded for i in items] == [True] * 4 + [False]
    got = fast.to_device(gpu.EncodedImage.collate(items), torch.device("cpu"))
    ref = fast.to_device(torch.stack(refs), torch.device("cpu"))
    std = torch.tensor(fast.IMAGENET_STD).view(1, 3, 1, 1)
    per_image = ((got - ref) * std * 255).abs().mean(dim=(1, 2, 3))
    assert got.shape == (5, 3, 112, 112) and float(per_image.max()) < 2.5  # roi_align vs Pillow's resampling


def test_the_gpu_decoder_drains_the_stream_before_nvjpeg_writes_and_only_on_cuda(tmp_path, monkeypatch):
    """nvJPEG's hardware path ignores the caller's stream (pytorch/vision#9606): decode_all waits for the queued work
    first. Here with a fake stream and decoder, so the order is checked without a GPU."""
    calls = []

    class Stream:
        def synchronize(self):
            calls.append("drain")

    def decode_jpeg(data, mode, device):
        calls.append(f"decode on {device.type}")
        return [torch.zeros(3, 30, 40, dtype=torch.uint8) for _ in data]

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(gpu.torchvision.io, "decode_jpeg", decode_jpeg)
    items = [gpu.GpuValPlan(24, 28)(save_jpeg(photo(40, 30, k), tmp_path / f"{k}.jpg")) for k in range(2)]
    gpu.decode_all(items, torch.device("cuda"))
    assert calls == ["drain", "decode on cuda"]
    calls.clear()
    gpu.decode_all(items, torch.device("cpu"))
    assert calls == ["decode on cpu"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: nvJPEG decoding is not tested here")
def test_gpu_decoder_on_cuda_matches_cpu(tmp_path):
    paths = [save_jpeg(photo(500, 375, k), tmp_path / f"{k}.jpg") for k in range(4)]
    items = [gpu.GpuValPlan(224, 256)(p) for p in paths]
    on_gpu = gpu.EncodedBatch(items).decode_on("cuda").cpu()
    on_cpu = gpu.EncodedBatch(items).decode_on("cpu")
    assert float((on_gpu - on_cpu).abs().mean()) < 0.05


# ---------------------------------------------------------------------------------------------------------
# Hostile files
# ---------------------------------------------------------------------------------------------------------

def huge_header_jpeg(path: Path, width: int = 13000, height: int = 13000) -> Path:
    """A small JPEG whose SOF header claims width x height."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 120, 30)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("decoder", ["cpu", "pil", "gpu"])
def test_an_image_claiming_13000_squared_is_refused_before_decoding(tmp_path, decoder):
    from trainers.data.datasets import imagefolder_transforms
    bomb = huge_header_jpeg(tmp_path / "bomb.jpg")
    with pytest.raises(ImageTooLarge, match="13000x13000"):
        load_rgb(str(bomb))
    train_tf, _ = imagefolder_transforms(decoder, 32)
    ds_root = tmp_path / "train" / "a"
    ds_root.mkdir(parents=True)
    bomb.rename(ds_root / "0_bomb.jpg")
    photo(40, 30).save(ds_root / "1_good.jpg")
    ds = ImageFolderDataset(tmp_path / "train", train_tf)
    start = time.process_time()
    x, _, unreadable = ds[0]
    assert unreadable == (0,) and time.process_time() - start < 2  # decoding 169 Mpx would take far longer
    small_tf, _ = imagefolder_transforms(decoder, 32, max_pixels=1000)  # the cap is configurable
    small = ImageFolderDataset(tmp_path / "train", small_tf, max_pixels=1000, replace_unreadable=False)
    assert small[1][0] is None and small[1][2] == (1,)


def test_sixteen_bit_png_is_converted_not_white(tmp_path):
    ramp = (np.arange(64 * 32, dtype=np.uint16).reshape(32, 64) * 31).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    rgb = np.asarray(load_rgb(str(tmp_path / "g16.png")))
    assert rgb.shape == (32, 64, 3) and np.array_equal(rgb[..., 0], (ramp >> 8).astype(np.uint8))
    assert rgb.min() == 0 and 200 < rgb.max() < 255


def _split_with_bad_files(root: Path) -> Path:
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for k in range(3):
            photo(40, 30, k).save(root / cls / f"{k}.jpg")
    (root / "a" / "1.jpg").write_text("not a jpeg")
    b = (root / "b" / "0.jpg")
    b.write_bytes(b.read_bytes()[:200])  # truncated
    return root


@pytest.mark.parametrize("decoder", ["cpu", "pil"])
def test_unreadable_validation_files_are_excluded_and_counted(tmp_path, decoder):
    from trainers.data.datasets import imagefolder_transforms
    _, val_tf = imagefolder_transforms(decoder, 16)
    val = ImageFolderDataset(_split_with_bad_files(tmp_path / "val"), val_tf, random_transform=False,
                             replace_unreadable=False)
    batches = list(make_loader(val, IndexBatches(list(range(6)), 4), 0))
    assert [len(b.targets) for b in batches] == [2, 2]  # a/1 and b/0 dropped, nothing duplicated
    assert [b.skipped for b in batches] == [(1, 3), ()]
    assert batches[0].targets.tolist() == [0, 0] and batches[1].targets.tolist() == [1, 1]


@pytest.mark.parametrize("decoder", ["cpu", "pil"])
def test_five_bad_files_in_a_row_count_five_per_epoch(tmp_path, decoder):
    from trainers.data.datasets import imagefolder_transforms
    root = tmp_path / "train" / "a"
    root.mkdir(parents=True)
    for k in range(8):
        path = root / f"{k}.jpg"
        photo(40, 30, k).save(path) if k in (0, 6, 7) else path.write_text("broken")
    train_tf, _ = imagefolder_transforms(decoder, 16)
    ds = ImageFolderDataset(tmp_path / "train", train_tf)
    bad = set()
    for _ in range(2):  # two epochs: each counts the same 5 files again, not a running total
        bad_this_epoch = {i for b in make_loader(ds, IndexBatches(list(range(8)), 3), 0) for i in b.skipped}
        assert bad_this_epoch == {1, 2, 3, 4, 5}
        bad |= bad_this_epoch
    assert ds.skipped_count() == 5


@pytest.mark.slow
def test_training_records_unreadable_files_per_split_and_epoch(tmp_path):
    data = tmp_path / "data"
    _split_with_bad_files(data / "train")
    _split_with_bad_files(data / "val")
    config = write_config(tmp_path / "c.toml", {
        "data": {"kind": "imagefolder", "path": str(data), "image_size": 16, "decoder": "cpu"},
        "model": {"num_classes": 2}, "train": {"workers": 1, "backend": "single", "per_worker_batch": 2},
        "lr": {"base_batch": 2}})
    r = run([sys.executable, "-m", "trainers", "train", str(config), "--out", str(tmp_path / "runs"), "--run", "r"])
    assert r.returncode == 0, r.stderr
    run_dir = next((tmp_path / "runs").glob("*/r"))
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
              if json.loads(line).get("kind") == "epoch"]
    assert [(e["skipped_images"], e["skipped_val_images"]) for e in epochs] == [(2, 2), (2, 2)]
    assert [e["images"] for e in epochs] == [6, 6]
    assert all(0 <= e["data_share"] <= 1 for e in epochs)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["unreadable_images"] == {"train": {"0": 2, "1": 2}, "val": {"0": 2, "1": 2}}
    assert 0 <= manifest["data_wait_share"] <= 1
    assert "waiting for data:" in (run_dir / "train.log").read_text().splitlines()[-1]


def test_a_data_set_with_no_readable_image_is_one_line_exit_2(tmp_path, capsys):
    for split in ("train", "val"):
        (tmp_path / "data" / split / "a").mkdir(parents=True)
        (tmp_path / "data" / split / "a" / "x.jpg").write_text("nope")
    config = write_config(tmp_path / "c.toml", {
        "data": {"kind": "imagefolder", "path": str(tmp_path / "data"), "image_size": 16},
        "train": {"workers": 1, "backend": "single"}})
    assert main(["train", str(config), "--out", str(tmp_path / "runs")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "none of its 1 image files can be read" in errors[0]
    assert not (tmp_path / "runs").exists()  # refused before any run folder is made


def test_build_datasets_refuses_an_unknown_decoder(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="data.decoder must be one of"):
        open_datasets("imagefolder", str(tmp_path), 16, 2, 0, None, decoder="nvdali")


def test_gpu_decoder_batches_through_the_loader_workers(tmp_path):
    """decoder = "gpu": workers send bytes and boxes (another process), to_device decodes; here on the CPU."""
    for split in ("train", "val"):
        _split_with_bad_files(tmp_path / split)
    train, val = open_datasets("imagefolder", str(tmp_path), 24, 2, 0, None, decoder="gpu")
    batches = list(make_loader(train, IndexBatches(list(range(6)), 3), 1))
    assert [b.skipped for b in batches] == [(1,), (3,)]  # replaced in training, and counted
    x = fast.to_device(batches[0].images, torch.device("cpu"))
    assert x.shape == (3, 3, 24, 24) and x.dtype == torch.float32 and x.abs().max() < 3
    vb = list(make_loader(val, IndexBatches(list(range(6)), 6), 0))[0]
    assert len(vb.targets) == 4 and fast.to_device(vb.images, torch.device("cpu")).shape == (4, 3, 24, 24)


def test_without_a_compiler_the_fast_path_falls_back_to_simplejpeg(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_STUDY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    monkeypatch.setattr(jpeg_region, "_lib", None)
    assert not jpeg_region.available()
    path = save_jpeg(photo(300, 200), tmp_path / "p.jpg")
    torch.manual_seed(0)
    f, box, flip = fast.FastTrainTransform(64).plan(path)
    torch.manual_seed(0)
    x = fast.FastTrainTransform(64)(path).numpy()
    ref = exact_crop(path, box, 64)
    assert mean_abs(x, ref[:, ::-1] if flip else ref) < 1.0  # torch vs Pillow resampling: +-1 on a noisy image
