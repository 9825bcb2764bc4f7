"""The GPT workload's corpus: a folder of text -> byte tokens in nanoGPT's flat uint16 files, and their windows."""
import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.helpers import REPO
from workloads.gpt import corpus

# Debian's python3.11-doc as `make setup-corpus` installs it: the sha256s its sources prepare to, per version of the
# package (a new Debian revision may edit the documentation; its digests are added here when it arrives).
PINNED = {"3.11.2-6+deb12u9": {"train.bin": "86c82553898797e7e0c6310297f6e35306f2a7f4465736fe64a6beacb73e2e65",
                               "val.bin": "b31d10f07a61b739dea5d59a4a1b34f29c5388dcae2c9cd1696d3e948939a045",
                               "tokens": {"train": 10_005_695, "val": 1_043_077}}}


def write_folder(root, files: dict[str, bytes]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(text)
    return root


def twelve_files(root):
    """12 small documents in nested folders (names sort as f00 ... f11), and two that are not text."""
    files = {f"{'sub/' if i % 3 else ''}f{i:02d}.txt": f"doc {i}: caf\u00e9\n".encode() * (i + 1) for i in range(12)}
    return write_folder(root, {**files, "notes.md": b"not matched", "sub/image.png": b"\x89PNG"})


def test_prepare_writes_byte_tokens_each_file_ended_and_every_tenth_file_to_validation(tmp_path):
    src = twelve_files(tmp_path / "src")
    meta = corpus.prepare(src, tmp_path / "out")
    order = corpus.text_files(src)
    assert [p.relative_to(src).as_posix() for p in order] == sorted(p.relative_to(src).as_posix() for p in order)
    assert len(order) == 12  # *.txt only
    val_files = [order[9]]  # the 10th in path order
    expected = {"train": b"".join(p.read_bytes() + b"\0" for p in order if p not in val_files),
                "val": b"".join(p.read_bytes() + b"\0" for p in val_files)}
    for split in ("train", "val"):
        tokens = np.fromfile(tmp_path / "out" / f"{split}.bin", dtype=np.uint16)
        assert tokens.astype(np.uint8).tobytes() == expected[split] and tokens.max() < 256
        assert meta["tokens"][split] == len(expected[split])
        assert meta["sha256"][f"{split}.bin"] == hashlib.sha256(tokens.tobytes()).hexdigest()
    assert meta["files"] == {"train": 11, "val": 1}
    assert meta["tokenizer"] == {"kind": "bytes", "vocab": 256, "end_of_text": 0}
    assert json.loads((tmp_path / "out" / "corpus.json").read_text()) == meta == corpus.read_meta(tmp_path / "out")
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_prepare_is_deterministic_and_ignores_the_order_files_were_written_in(tmp_path):
    first = corpus.prepare(twelve_files(tmp_path / "a"), tmp_path / "out_a")
    files = {p.relative_to(tmp_path / "a").as_posix(): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    write_folder(tmp_path / "b", dict(reversed(list(files.items()))))
    second = corpus.prepare(tmp_path / "b", tmp_path / "out_b")
    assert first["sha256"] == second["sha256"]


def test_prepare_command_line_and_its_one_line_refusals(tmp_path):
    def prepare(*args):
        return subprocess.run([sys.executable, "-m", "workloads.gpt.prepare", *map(str, args)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)

    ok = prepare(twelve_files(tmp_path / "src"), tmp_path / "out")
    assert ok.returncode == 0 and "11 + 1 files" in ok.stdout and (tmp_path / "out" / "corpus.json").is_file()
    missing = prepare(tmp_path / "nowhere", tmp_path / "o2")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "not a folder" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = prepare(tmp_path / "empty", tmp_path / "o3")
    assert empty.returncode == 2 and "no files matching" in empty.stderr and not (tmp_path / "o3").exists()


def test_a_folder_never_prepared_says_how_to_prepare_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="workloads.gpt.prepare"):
        corpus.read_meta(tmp_path)


def test_windows_are_context_tokens_and_the_same_shifted_by_one(tmp_path):
    path = tmp_path / "t.bin"
    np.arange(23, dtype=np.uint16).tofile(path)
    windows = corpus.TokenWindows(path, context=5)
    assert len(windows) == 4  # (23 - 1) // 5: the last window needs its 21st token as a target
    x, y = windows[3]
    assert x.dtype == torch.int64 and x.tolist() == [15, 16, 17, 18, 19] and y.tolist() == [16, 17, 18, 19, 20]
    assert all(torch.equal(windows[i][0][1:], windows[i][1][:-1]) for i in range(len(windows)))
    with pytest.raises(IndexError):
        windows[4]
    strided = corpus.TokenWindows(path, context=5, stride=2)
    assert len(strided) == 9 and strided[8][1].tolist() == [17, 18, 19, 20, 21]
    assert len(corpus.TokenWindows(path, context=22)) == 1 and len(corpus.TokenWindows(path, context=23)) == 0


def test_windows_are_read_alike_by_a_loaders_worker_processes(tmp_path):
    path = tmp_path / "t.bin"
    np.arange(1000, dtype=np.uint16).tofile(path)
    windows = corpus.TokenWindows(path, context=16)
    windows[0]  # mapped here first: a worker is handed the path, never the mapping
    loader = torch.utils.data.DataLoader(windows, batch_size=8, num_workers=2)
    x, y = next(iter(loader))
    assert x.shape == (8, 16) and torch.equal(x, torch.stack([windows[i][0] for i in range(8)]))
    assert torch.equal(y.reshape(-1), torch.stack([windows[i][1] for i in range(8)]).reshape(-1))


def debian_corpus_version() -> str | None:
    if not corpus.DEBIAN_SOURCES.is_dir():
        return None
    query = subprocess.run(["dpkg-query", "-W", "-f=${Version}", corpus.DEBIAN_PACKAGE], capture_output=True, text=True)
    return query.stdout.strip() if query.returncode == 0 else "unknown"


def test_debians_python_docs_prepare_to_the_pinned_tokens(tmp_path):
    version = debian_corpus_version()
    if version is None:
        pytest.skip(f"{corpus.DEBIAN_PACKAGE} is not installed ({corpus.DEBIAN_SOURCES} absent): make setup-corpus")
    if version not in PINNED:
        pytest.skip(f"{corpus.DEBIAN_PACKAGE} {version} has no pinned sha256s here (pinned: {', '.join(PINNED)})")
    meta = corpus.prepare(corpus.DEBIAN_SOURCES, tmp_path)
    pinned = PINNED[version]
    assert meta["sha256"] == {name: pinned[name] for name in ("train.bin", "val.bin")}
    assert meta["tokens"] == pinned["tokens"] and meta["files"] == {"train": 448, "val": 49}
    assert {name: corpus.file_sha256(tmp_path / name) for name in meta["sha256"]} == meta["sha256"]
