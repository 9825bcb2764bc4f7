"""The GPT workload's torch parts: what the trainer builds a run of a GPT preset from (the interface is
workloads/__init__.py's). A sample is one window of `context` tokens; its targets, the next token at each position,
are flattened with the batch's, so the trainer's loss, accuracy and pass weighting run over rows of logits, one a
token, while its sample counts (images, images/s) count windows.

Data: data.kind = "tokens" reads a prepared corpus (corpus.py) from data.path; at the local scale an empty data.path
is Debian's python3.11-doc, prepared on first use into the cache (a few seconds). data.train_tokens and
data.val_tokens, where set, take that many tokens of each split in windows spread over all of it (`budgeted`).
data.kind = "synthetic" is random windows, fixed by train.seed, as the vision workload's synthetic images.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
from pathlib import Path

import torch
from torch.utils.data import Dataset, Subset

from workloads import WorkloadConfigError, WorkloadDataError
from workloads.gpt import corpus
from workloads.gpt.model import GPT
from workloads.gpt.sizes import PRESETS, GPTSizes, flops_per_token

SYNTHETIC_VAL_SHARE = 25  # the synthetic validation set is 1/25 of the training set's size, as the vision kind's


def sizes_of(cfg) -> GPTSizes:
    return PRESETS[cfg.model.name]


def check(cfg) -> None:
    """What this workload cannot train, in one line each (the contract has checked the model and data kind)."""
    if cfg.train.channels_last:
        raise WorkloadConfigError(f"train.channels_last is a layout of images; model.name = {cfg.model.name!r} "
                                  "takes token ids: set train.channels_last = false")
    if cfg.data.holdout_share:
        raise WorkloadConfigError("data.holdout_share holds out labelled images of each class; a GPT run validates "
                                  "on its corpus's val.bin: set data.holdout_share = 0")


def build_model(cfg) -> GPT:
    return GPT(sizes_of(cfg))


def flops_per_sample(cfg) -> int:
    """Model FLOPs of one trained window: PaLM's a token (sizes.py) times the context."""
    sizes = sizes_of(cfg)
    return flops_per_token(sizes) * sizes.context


# ---- batches --------------------------------------------------------------------------------------------------------
def collate(pairs) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) windows -> x (batch, context) and y flattened to (batch * context,), the rows of the model's logits."""
    xs, ys = zip(*pairs)
    return torch.stack(xs), torch.stack(ys).reshape(-1)


def dummy_batch(cfg, n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """n windows of token 0 and their targets: the trainer's trial pass (zeros draw no random numbers)."""
    context = sizes_of(cfg).context
    return (torch.zeros(n, context, dtype=torch.long, device=device),
            torch.zeros(n * context, dtype=torch.long, device=device))


def synthetic_batch(cfg, n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """One fixed batch of n random windows (train.seed), made once and moved to the device: a benchmark's."""
    sizes = sizes_of(cfg)
    tokens = torch.randint(sizes.vocab, (n, sizes.context + 1), generator=torch.Generator().manual_seed(cfg.train.seed))
    return tokens[:, :-1].to(device), tokens[:, 1:].reshape(-1).to(device)


class RandomWindows(Dataset):
    """n random windows: item i is drawn from a generator seeded by (seed, i), the same every epoch."""

    def __init__(self, n: int, sizes: GPTSizes, seed: int):
        self.n, self.sizes, self.seed = n, sizes, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.n:
            raise IndexError(index)
        digest = hashlib.blake2b(f"{self.seed}/{index}".encode(), digest_size=8).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        window = torch.randint(self.sizes.vocab, (self.sizes.context + 1,), generator=g)
        return window[:-1], window[1:]


# ---- data -----------------------------------------------------------------------------------------------------------
def build_datasets(cfg, cache: Path) -> tuple[Dataset, Dataset, dict | None]:
    """(train, val, description): windows of the corpus's train.bin and val.bin (or random ones), and the corpus's
    description for the manifest (its source, token counts and sha256s; None for synthetic data)."""
    sizes = sizes_of(cfg)
    if cfg.data.kind == "synthetic":
        n = cfg.data.synthetic_images
        return (RandomWindows(n, sizes, cfg.train.seed),
                RandomWindows(max(1, n // SYNTHETIC_VAL_SHARE), sizes, cfg.train.seed + 1), None)
    folder = corpus_folder(cfg, Path(cache))
    meta = read_corpus(folder, sizes)
    splits = []
    for split, budget in zip(corpus.SPLITS, (cfg.data.train_tokens, cfg.data.val_tokens)):
        windows = corpus.TokenWindows(folder / f"{split}.bin", sizes.context)
        if not len(windows):
            raise WorkloadDataError(f"{folder}/{split}.bin holds {windows.tokens} tokens, fewer than one window of "
                                    f"{sizes.context + 1}: prepare a larger corpus")
        splits.append(budgeted(windows, budget, f"data.{split}_tokens"))
    train, val = splits
    return train, val, {"kind": "tokens", "folder": str(folder), "source": meta["source"],
                        "tokens": meta["tokens"], "sha256": meta["sha256"],
                        "windows": {"train": len(train), "val": len(val)}}


def budgeted(windows: corpus.TokenWindows, tokens: int, setting: str) -> Dataset:
    """The windows of `tokens` tokens (data.train_tokens, data.val_tokens), spread evenly over the whole split so
    that a budget's topics are the corpus's (its files run topic by topic); every window where tokens is 0."""
    if not tokens:
        return windows
    wanted = tokens // windows.context
    if not 1 <= wanted <= len(windows):
        raise WorkloadConfigError(f"{setting} = {tokens} is {wanted} windows of {windows.context} tokens; "
                                  f"{windows.path.name} holds {len(windows)} (0 reads them all)")
    return Subset(windows, [i * len(windows) // wanted for i in range(wanted)])


def corpus_folder(cfg, cache: Path) -> Path:
    """data.path, a prepared corpus; empty at the local scale: Debian's python3.11-doc, prepared into the cache."""
    path = cfg.data.path
    if "$" in path:  # expanded where the config was read: a variable that is not set here
        raise WorkloadDataError(f"data.path = {path!r} names a variable that is not set here: export it (e.g. "
                                "CORPUS_DIR=<a folder python -m workloads.gpt.prepare wrote>)")
    if path:
        return Path(path).expanduser()
    if cfg.scale != "local":
        raise WorkloadDataError(f"data.path is empty: at the {cfg.scale} scale set it to a prepared corpus folder "
                                "(python -m workloads.gpt.prepare SRC_DIR OUT_DIR)")
    return local_corpus(cache / "corpus" / corpus.DEBIAN_PACKAGE)


def read_corpus(folder: Path, sizes: GPTSizes) -> dict:
    """The corpus's corpus.json, checked against the model: its tokens must be ids the model has."""
    try:
        meta = corpus.read_meta(folder)
    except FileNotFoundError as e:
        raise WorkloadDataError(str(e)) from None
    vocab = meta.get("tokenizer", {}).get("vocab")
    if meta.get("format") != corpus.FORMAT or not isinstance(vocab, int):
        raise WorkloadDataError(f"{folder}/{corpus.META} is not a corpus of format {corpus.FORMAT}: prepare it again "
                                f"(python -m workloads.gpt.prepare SRC_DIR {folder})")
    if vocab > sizes.vocab:
        raise WorkloadConfigError(f"the corpus in {folder} has {vocab} token ids, more than the model's vocabulary "
                                  f"of {sizes.vocab}: pick a model whose vocabulary holds them")
    return meta


def local_corpus(out: Path) -> Path:
    """The local scale's corpus in `out`, prepared from the Debian package on first use. Each process prepares into
    a folder of its own and renames it into place (ranks may start at once); the first rename wins, and every copy
    holds the same bytes."""
    if (out / corpus.META).is_file():
        return out
    if not corpus.DEBIAN_SOURCES.is_dir():
        raise WorkloadDataError(f"the local corpus is Debian's {corpus.DEBIAN_PACKAGE}, not installed here "
                                f"({corpus.DEBIAN_SOURCES} missing): run `make setup-corpus` (root), or set "
                                "data.path to a prepared corpus")
    staging = out.with_name(f".{out.name}.{socket.gethostname()}.{os.getpid()}")
    try:
        corpus.prepare(corpus.DEBIAN_SOURCES, staging)
        try:
            os.rename(staging, out)
        except OSError:  # another process renamed its copy first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out
