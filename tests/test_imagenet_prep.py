"""`python -m trainers data imagenet` on a tiny fake ILSVRC-2012 built here: layout, labels, resume, bad archives."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from trainers.__main__ import main
from trainers.data import DataError, open_datasets
from trainers.data.imagenet import prepare

WNIDS = ["n01440764", "n01443537", "n01484850"]
VAL_LABELS = [3, 1, 2, 1, 3, 2, 2]  # ILSVRC2012_IDs of val images 1..7 (1-based, as the devkit's ground truth)


def jpeg_bytes(seed: int, size=(60, 40)) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def fake_ilsvrc(root: Path) -> dict[str, Path]:
    """Class tars inside the train tar, flat validation images, a devkit with meta.mat and the ground truth."""
    root.mkdir(parents=True, exist_ok=True)
    train = root / "ILSVRC2012_img_train.tar"
    with tarfile.open(train, "w") as outer:
        for c, wnid in enumerate(WNIDS):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as t:
                for k in range(2):
                    add_bytes(t, f"{wnid}_{k}.JPEG", jpeg_bytes(10 * c + k, (300, 200)))
            add_bytes(outer, f"{wnid}.tar", inner.getvalue())
    val = root / "ILSVRC2012_img_val.tar"
    with tarfile.open(val, "w") as t:
        for k in reversed(range(1, len(VAL_LABELS) + 1)):  # archive order is not name order
            add_bytes(t, f"ILSVRC2012_val_{k:08d}.JPEG", jpeg_bytes(100 + k))
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "wordnet_height", "num_train_images"]
    synsets = np.zeros(4, dtype=[(f, object) for f in fields])
    for i, wnid in enumerate(WNIDS):
        synsets[i] = (i + 1, wnid, f"class {i}, thing", "a gloss", 0, 0, 2)
    synsets[3] = (1001, "n00001740", "entity", "the root", 3, 18, 0)  # not a leaf: not a class
    devkit_dir = root / "devkit_src" / "ILSVRC2012_devkit_t12" / "data"
    devkit_dir.mkdir(parents=True)
    scipy.io.savemat(devkit_dir / "meta.mat", {"synsets": synsets})
    (devkit_dir / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{i}\n" for i in VAL_LABELS))
    devkit = root / "ILSVRC2012_devkit_t12.tar.gz"
    with tarfile.open(devkit, "w:gz") as t:
        t.add(root / "devkit_src" / "ILSVRC2012_devkit_t12", arcname="ILSVRC2012_devkit_t12")
    return {"train": train, "val": val, "devkit": devkit}


def test_prepare_builds_the_imagefolder_layout_resized_copy_and_tar(tmp_path):
    a = fake_ilsvrc(tmp_path / "dl")
    out = tmp_path / "imagenet"
    r = prepare(a["train"], a["val"], a["devkit"], out, resize=32, check=False)
    assert sorted(p.name for p in (out / "train").iterdir()) == WNIDS
    assert sorted(p.name for p in (out / "train" / WNIDS[1]).glob("*.JPEG")) == [f"{WNIDS[1]}_0.JPEG",
                                                                                 f"{WNIDS[1]}_1.JPEG"]
    for k, label in enumerate(VAL_LABELS, 1):  # each validation image in its ground-truth class
        assert (out / "val" / WNIDS[label - 1] / f"ILSVRC2012_val_{k:08d}.JPEG").is_file()
    resized = Path(r["resized"])
    assert resized == tmp_path / "imagenet-32" and r["classes"] == 3 and r["val_images"] == 7
    assert min(Image.open(resized / "train" / WNIDS[0] / f"{WNIDS[0]}_0.JPEG").size) == 32
    with tarfile.open(r["tar"]) as t:
        names = t.getnames()
    assert f"imagenet-32/val/{WNIDS[2]}/ILSVRC2012_val_00000001.JPEG" in names and r["data_subdir"] == "imagenet-32"
    assert not [n for n in names if Path(n).name.startswith(".")]
    train, val = open_datasets("imagefolder", str(resized), 16, 3, 0, None, decoder="cpu")
    assert len(train) == 6 and len(val) == 7 and train.classes == WNIDS
    # a re-run finds everything done and changes nothing
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.JPEG")}
    prepare(a["train"], a["val"], a["devkit"], out, resize=32, check=False)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.JPEG")} == before


def test_an_interrupted_preparation_resumes(tmp_path):
    a = fake_ilsvrc(tmp_path / "dl")
    out = tmp_path / "imagenet"
    prepare(a["train"], a["val"], a["devkit"], out, check=False, make_tar=False)
    # as if killed mid-way: one class half-written (no marker), one validation image missing, val not finished
    (out / "train" / WNIDS[0] / ".complete").unlink()
    (out / "train" / WNIDS[0] / f"{WNIDS[0]}_1.JPEG").unlink()
    (out / "val" / WNIDS[2] / "ILSVRC2012_val_00000001.JPEG").unlink()
    (out / "val" / ".complete").unlink()
    untouched = (out / "train" / WNIDS[1] / f"{WNIDS[1]}_0.JPEG").stat().st_mtime_ns
    prepare(a["train"], a["val"], a["devkit"], out, check=False, make_tar=False)
    assert (out / "train" / WNIDS[0] / f"{WNIDS[0]}_1.JPEG").is_file()
    assert (out / "val" / WNIDS[2] / "ILSVRC2012_val_00000001.JPEG").is_file()
    assert (out / "train" / WNIDS[1] / f"{WNIDS[1]}_0.JPEG").stat().st_mtime_ns == untouched


def test_md5_is_checked_by_default(tmp_path):
    a = fake_ilsvrc(tmp_path / "dl")
    with pytest.raises(DataError, match="MD5 .* is not that of ILSVRC-2012's ILSVRC2012_devkit_t12.tar.gz"):
        prepare(a["train"], a["val"], a["devkit"], tmp_path / "out")


def imagenet_cli(a: dict, out: Path, **replace) -> int:
    paths = {**a, **replace}
    return main(["data", "imagenet", "--train-tar", str(paths["train"]), "--val-tar", str(paths["val"]),
                 "--devkit", str(paths["devkit"]), "--out", str(out), "--no-verify"])


def test_a_truncated_or_wrong_archive_is_one_line(tmp_path, capsys):
    a = fake_ilsvrc(tmp_path / "dl")
    cut = tmp_path / "cut.tar"
    data = a["train"].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    assert imagenet_cli(a, tmp_path / "o1", train=cut) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {cut}") and "truncated" in errors[0]
    wrong = tmp_path / "wrong.tar"
    wrong.write_text("this is not a tar")
    assert imagenet_cli(a, tmp_path / "o2", val=wrong) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {wrong} is not a readable tar archive")


def test_the_command_prints_data_path_and_staging_variables(tmp_path, capsys):
    a = fake_ilsvrc(tmp_path / "dl")
    assert imagenet_cli(a, tmp_path / "imnet") == 0
    out, err = capsys.readouterr()
    assert f"data.path = {tmp_path / 'imnet'}" in out
    assert f"DATA_TAR={tmp_path / 'imnet.tar'} DATA_SUBDIR=imnet" in out
    assert "imagenet: train: 3/3 classes" in err
