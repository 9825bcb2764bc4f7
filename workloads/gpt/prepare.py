"""Tokenize a folder of text files for the GPT workload (corpus.py says how), offline and deterministic.

    python -m workloads.gpt.prepare SRC_DIR OUT_DIR [--glob '*.txt']
    python -m workloads.gpt.prepare /usr/share/doc/python3.11/html/_sources .cache/corpus/python3.11-doc

writes OUT_DIR/train.bin, val.bin (flat uint16 tokens) and corpus.json; prints one line of counts. A missing or
empty source is one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workloads.gpt import corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.gpt.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="a folder of text files (searched at any depth)")
    parser.add_argument("out", type=Path, help="where train.bin, val.bin and corpus.json go")
    parser.add_argument("--glob", default="*.txt", help="which file names are text (default: *.txt)")
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        print(f"prepare: {args.src} is not a folder", file=sys.stderr)
        return 2
    try:
        meta = corpus.prepare(args.src, args.out, args.glob)
    except ValueError as e:
        print(f"prepare: {e}", file=sys.stderr)
        return 2
    files, tokens = meta["files"], meta["tokens"]
    print(f"prepare: {files['train']} + {files['val']} files -> {tokens['train']:,} train and {tokens['val']:,} val "
          f"tokens ({corpus.TOKENIZER}, vocab {corpus.VOCAB}) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
