"""A text corpus as tokens: a folder of text files -> train.bin / val.bin, and a dataset of context windows over one.

The files are nanoGPT's: flat arrays of uint16 token ids, no header, so a 65,536-token BPE fits the same format later.
The tokenizer is byte-level (a file's bytes are its tokens, vocab 256; nothing to train or download) and each file
ends with END_OF_TEXT, the NUL byte no text file holds, as GPT-2's <|endoftext|> separates documents. Files are read
in the order of their paths, every VAL_EVERY-th to validation (spread over the corpus's topics, where the last tenth
of the sorted paths would be one topic), so the same folder always gives the same bytes; `corpus.json` beside them
says where they came from, their counts and each file's sha256.

The local scale's corpus: Debian's python3.11-doc, the Python documentation's reStructuredText sources (about 12 MB
of English and code), installed by `make setup-corpus` (root), never downloaded at run time.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

DEBIAN_PACKAGE = "python3.11-doc"
DEBIAN_SOURCES = Path("/usr/share/doc/python3.11/html/_sources")  # where that package puts the .rst.txt sources

TOKENIZER = "bytes"
VOCAB = 256
END_OF_TEXT = 0  # NUL: after each file
DTYPE = np.uint16
VAL_EVERY = 10  # files 9, 19, 29, ... (counting from 0, in path order) are the validation split
SPLITS = ("train", "val")
META = "corpus.json"
FORMAT = 1


def text_files(src: Path, pattern: str = "*.txt") -> list[Path]:
    """The files under `src` (any depth) whose names match `pattern`, in the order of their relative paths."""
    return sorted((p for p in src.rglob(pattern) if p.is_file()), key=lambda p: p.relative_to(src).as_posix())


def split_of(index: int) -> str:
    return "val" if index % VAL_EVERY == VAL_EVERY - 1 else "train"


def encode(text: bytes) -> np.ndarray:
    """Byte-level tokens of one document, END_OF_TEXT after it."""
    return np.append(np.frombuffer(text, dtype=np.uint8), np.uint8(END_OF_TEXT)).astype(DTYPE)


def prepare(src: Path, out: Path, pattern: str = "*.txt") -> dict:
    """Tokenize the text files under `src` into out/train.bin and out/val.bin (written a file at a time: any corpus
    size in the memory of its largest file) and describe them in out/corpus.json, written last: its presence says
    the two files are whole. Returns that description."""
    files = text_files(src, pattern)
    if not files:
        raise ValueError(f"no files matching {pattern!r} under {src}")
    out.mkdir(parents=True, exist_ok=True)
    tokens, counts = dict.fromkeys(SPLITS, 0), dict.fromkeys(SPLITS, 0)
    digests = {split: hashlib.sha256() for split in SPLITS}
    handles = {split: open(out / f"{split}.bin.tmp", "wb") for split in SPLITS}
    try:
        for index, path in enumerate(files):
            split, ids = split_of(index), encode(path.read_bytes()).tobytes()
            handles[split].write(ids)
            digests[split].update(ids)
            tokens[split] += len(ids) // DTYPE().itemsize
            counts[split] += 1
    finally:
        for handle in handles.values():
            handle.close()
    for split in SPLITS:
        os.replace(out / f"{split}.bin.tmp", out / f"{split}.bin")
    meta = {"format": FORMAT, "source": str(src), "pattern": pattern, "files": counts, "tokens": tokens,
            "sha256": {f"{split}.bin": digests[split].hexdigest() for split in SPLITS},
            "tokenizer": {"kind": TOKENIZER, "vocab": VOCAB, "end_of_text": END_OF_TEXT},
            "dtype": np.dtype(DTYPE).name, "split": f"every {VAL_EVERY}th file in path order to val"}
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def read_meta(folder: Path) -> dict:
    """A prepared corpus's description; a folder without one was never prepared, or its prepare did not finish."""
    path = folder / META
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no prepared corpus ({META} missing): run "
                                f"python -m workloads.gpt.prepare SRC_DIR {folder}")
    return json.loads(path.read_text())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class TokenWindows(torch.utils.data.Dataset):
    """Item i of a .bin file: (x, y), `context` tokens from i * stride and the same shifted by one (the next token
    at each position), as int64. Windows never overlap by default (stride = context: an epoch reads each token
    once). The file is mapped (np.memmap), not read: opened once in each process that reads it, so a loader's
    workers are handed the path, not a copy of the tokens."""

    def __init__(self, path: Path, context: int, stride: int | None = None):
        self.path, self.context, self.stride = Path(path), context, stride or context
        self.tokens = self.path.stat().st_size // np.dtype(DTYPE).itemsize
        self._mapped: np.memmap | None = None

    def __len__(self) -> int:
        return max(0, (self.tokens - self.context - 1) // self.stride + 1)  # each window needs context + 1 tokens

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} of {len(self)}")
        start = index * self.stride
        window = torch.from_numpy(self._tokens()[start:start + self.context + 1].astype(np.int64))
        return window[:-1], window[1:]

    def _tokens(self) -> np.memmap:
        if self._mapped is None:
            self._mapped = np.memmap(self.path, dtype=DTYPE, mode="r")
        return self._mapped

    def __getstate__(self) -> dict:  # to a loader's worker: the path, never the mapped pages
        return {**self.__dict__, "_mapped": None}
