"""`python -m trainers data imagenet`: ILSVRC-2012's three downloads -> the ImageFolder layout, and a staging tar.

    OUT/train/<wnid>/*.JPEG, OUT/val/<wnid>/*.JPEG (sorted by the devkit's ground truth); with --resize N also
    OUT-<N>/ (shorter side N); OUT.tar (or OUT-<N>.tar) for slurm/job.sh's node-local staging

torchvision.datasets.imagenet supplies the archives' MD5s (checked unless --no-verify) and the devkit parsing. Its
extraction is not used (it starts over and fails on a half-extracted folder): here every piece is written under a
temporary name and renamed, so a re-run skips what is complete.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import time
from contextlib import contextmanager
import multiprocessing
from pathlib import Path
from unittest import mock

from PIL import Image
from torchvision.datasets import imagenet as tv_imagenet
from torchvision.datasets.utils import calculate_md5

from .generate import DataError
from .images import load_rgb

DONE = ".complete"


def progress(message: str) -> None:
    print(f"imagenet: {message}", file=sys.stderr, flush=True)


# ---- Checks: the archives are what ILSVRC-2012 published -------------------------------------------------------------
def verify(path: Path, kind: str, out: Path) -> None:
    """The archive's MD5 against torchvision's ARCHIVE_META; a pass is remembered (by size and time) in OUT."""
    name, md5 = tv_imagenet.ARCHIVE_META[kind]
    stat = path.stat()
    marker = out / f".md5-ok-{path.name}-{stat.st_size}-{int(stat.st_mtime)}"
    if marker.exists():
        return
    progress(f"checking the MD5 of {path} ({stat.st_size / 2**30:.1f} GiB)")
    got = calculate_md5(str(path))
    if got != md5:
        raise DataError(f"{path}: MD5 {got} is not that of ILSVRC-2012's {name} ({md5}): a wrong or incomplete "
                        f"download (--no-verify skips this check for a re-packed archive)")
    marker.touch()


@contextmanager
def _verification(enabled: bool):
    """torchvision's parse_devkit_archive checks the MD5 itself; --no-verify turns that check off too."""
    if enabled:
        yield
    else:
        with mock.patch.object(tv_imagenet, "_verify_archive", lambda *args: None):
            yield


def _open_tar(path: Path) -> tarfile.TarFile:
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    try:
        return tarfile.open(path)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(f"{path} is not a readable tar archive ({e}): a wrong or incomplete download") from e


@contextmanager
def _reading(path: Path):
    """Any error while reading an archive's members: one line naming the archive."""
    try:
        yield
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(f"{path} ends early or is damaged ({type(e).__name__}: {e}): a truncated or wrong "
                        f"archive; download it again") from e


# ---- The steps -------------------------------------------------------------------------------------------------------
def devkit_labels(devkit: Path, out: Path, check: bool) -> tuple[list[str], list[str]]:
    """(the 1000 wnids, the validation images' wnids in file order) from the devkit, via torchvision."""
    if not (out / tv_imagenet.META_FILE).exists():
        if not devkit.is_file():
            raise DataError(f"{devkit} does not exist")
        try:
            with _verification(check):
                tv_imagenet.parse_devkit_archive(str(out), str(devkit.resolve()))
        except RuntimeError as e:  # torchvision's MD5 message
            raise DataError(f"{devkit}: not ILSVRC-2012's devkit (MD5 differs; --no-verify skips the check)") from e
        except (tarfile.TarError, EOFError, OSError, KeyError, ValueError) as e:
            raise DataError(f"{devkit} is not a readable ILSVRC-2012 devkit ({type(e).__name__}: {e})") from e
    wnid_to_classes, val_wnids = tv_imagenet.load_meta_file(str(out))
    return sorted(wnid_to_classes), val_wnids


def extract_train(train_tar: Path, out: Path, wnids: list[str]) -> int:
    """Each class tar inside the train tar into OUT/train/<wnid>/ (a finished class has a marker file)."""
    root = out / "train"
    root.mkdir(parents=True, exist_ok=True)
    done, start, seen = 0, time.time(), 0
    with _open_tar(train_tar) as outer, _reading(train_tar):
        for member in outer:  # a seekable file: skipping a finished class costs a seek, not a read
            if not member.isfile() or not member.name.endswith(".tar"):
                continue
            seen += 1
            wnid = Path(member.name).stem
            dest = root / wnid
            if not (dest / DONE).exists():
                partial = root / f".{wnid}.partial"
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir()
                with tarfile.open(fileobj=outer.extractfile(member), mode="r|") as inner:
                    inner.extractall(partial, filter="data")
                (partial / DONE).touch()
                shutil.rmtree(dest, ignore_errors=True)
                partial.rename(dest)
            done += 1
            if done % 50 == 0 or done == len(wnids):
                progress(f"train: {done}/{len(wnids)} classes, {time.time() - start:.0f} s")
    missing = sorted(set(wnids) - {p.name for p in root.iterdir() if (p / DONE).exists()})
    if missing:
        raise DataError(f"{train_tar} holds {seen} class archives; {len(missing)} of the devkit's classes are missing "
                        f"(e.g. {missing[0]}): a truncated or wrong archive")
    return seen


def extract_val(val_tar: Path, out: Path, val_wnids: list[str]) -> int:
    """The flat validation images into OUT/val/<wnid>/, the i-th image (sorted by name) to the i-th label."""
    root = out / "val"
    if (root / DONE).exists():
        return len(val_wnids)
    with _open_tar(val_tar) as tar, _reading(val_tar):
        members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: Path(m.name).name)
        if len(members) != len(val_wnids):
            raise DataError(f"{val_tar} holds {len(members)} images but the devkit labels {len(val_wnids)}: "
                            f"a truncated or wrong archive")
        for wnid in set(val_wnids):
            (root / wnid).mkdir(parents=True, exist_ok=True)
        start = time.time()
        for k, (member, wnid) in enumerate(zip(members, val_wnids), 1):
            dest = root / wnid / Path(member.name).name
            if not (dest.exists() and dest.stat().st_size == member.size):
                tmp = dest.with_name(f".{dest.name}.partial")
                with tar.extractfile(member) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                if tmp.stat().st_size != member.size:
                    raise DataError(f"{val_tar}: {member.name} is cut short: a truncated archive")
                tmp.rename(dest)
            if k % 5000 == 0 or k == len(members):
                progress(f"val: {k}/{len(members)} images, {time.time() - start:.0f} s")
    (root / DONE).touch()
    return len(members)


def _resize_one(job: tuple[str, str, int]) -> None:
    src, dst, size = job
    if os.path.exists(dst):
        return
    tmp = os.path.join(os.path.dirname(dst), f".{os.path.basename(dst)}.partial")
    try:
        with Image.open(src) as probe:
            small = min(probe.size) <= size
        if small:
            shutil.copyfile(src, tmp)  # already small enough: the original bytes
        else:
            img = load_rgb(src)
            w, h = img.size
            scale = size / min(w, h)
            img.resize((max(size, round(w * scale)), max(size, round(h * scale))),
                       Image.Resampling.BILINEAR).save(tmp, format="JPEG", quality=90)
    except Exception:  # noqa: BLE001 - an unreadable original is copied as is: the loader counts and skips it
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def resize_copy(src_root: Path, dst_root: Path, size: int, processes: int | None = None) -> int:
    """Every image of src_root with its shorter side `size` (JPEG q90; smaller ones copied) into dst_root."""
    jobs = []
    for split in ("train", "val"):
        for cls in sorted(p for p in (src_root / split).iterdir() if p.is_dir() and not p.name.startswith(".")):
            (dst_root / split / cls.name).mkdir(parents=True, exist_ok=True)
            jobs += [(str(f), str(dst_root / split / cls.name / f.name), size)
                     for f in sorted(cls.iterdir()) if f.is_file() and not f.name.startswith(".")]
    start = time.time()
    # spawned, not forked: a child forked from a process with threads (torch's, a data pipeline's) can inherit a lock
    # some thread held, and wait on it forever (seen: a test's pool stuck in futex_wait for 7 minutes)
    with multiprocessing.get_context("spawn").Pool(processes or os.cpu_count()) as pool:
        for k, _ in enumerate(pool.imap_unordered(_resize_one, jobs, chunksize=64), 1):
            if k % 20000 == 0 or k == len(jobs):
                progress(f"resize {size}: {k}/{len(jobs)} images, {time.time() - start:.0f} s")
    return len(jobs)


def staging_tar(root: Path) -> Path:
    """ROOT.tar holding ROOT's train/ and val/ under ROOT's name (uncompressed: JPEGs don't compress)."""
    target = root.with_name(root.name + ".tar")
    if target.exists():
        return target
    tmp = target.with_name(f".{target.name}.partial")
    progress(f"writing {target}")
    with tarfile.open(tmp, "w") as tar:
        for split in ("train", "val"):
            tar.add(root / split, arcname=f"{root.name}/{split}",
                    filter=lambda info: None if Path(info.name).name.startswith(".") else info)
    tmp.rename(target)
    return target


# ---- The command -----------------------------------------------------------------------------------------------------
def prepare(train_tar: Path, val_tar: Path, devkit: Path, out: Path, resize: int | None = None,
            check: bool = True, make_tar: bool = True) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    if check:
        for path, kind in ((devkit, "devkit"), (train_tar, "train"), (val_tar, "val")):
            if not path.is_file():
                raise DataError(f"{path} does not exist")
            verify(path, kind, out)
    wnids, val_wnids = devkit_labels(devkit, out, check)
    classes = extract_train(train_tar, out, wnids)
    images = extract_val(val_tar, out, val_wnids)
    result = {"root": str(out), "classes": classes, "val_images": images}
    root = out
    if resize:
        root = out.with_name(f"{out.name}-{resize}")
        result["resized"] = str(root)
        result["resized_images"] = resize_copy(out, root, resize)
    if make_tar:
        result["tar"] = str(staging_tar(root))
        result["data_subdir"] = root.name
    return result


def main(args) -> int:
    r = prepare(Path(args.train_tar), Path(args.val_tar), Path(args.devkit), Path(args.out).expanduser(),
                args.resize, check=not args.no_verify, make_tar=not args.no_tar)
    data_path = r.get("resized", r["root"])
    print(f"ImageNet ready: {r['classes']} classes, {r['val_images']} validation images; data.path = {data_path}")
    if "tar" in r:
        print(f"staging on a cluster: DATA_TAR={r['tar']} DATA_SUBDIR={r['data_subdir']}")
    return 0
