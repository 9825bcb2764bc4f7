"""A run's record files, plain or compact: the one opener every reader of them goes through, and the compacting.

metrics.jsonl, train.log and console.log (COMPACTED) come in two forms. A live run writes them plain
(contract/runfolder.py's RunFolder, the study runner's console.log): it appends line by line, a resume cuts
metrics.jsonl and train.log back to the byte offsets its checkpoint stored, and a study reads them while the run
trains -- none of which a gzip stream allows. A committed run (results/reference/, `python -m tools reference-add`,
`python -m tools compact-runs`) is final, so it keeps them gzip'd beside its other files (metrics.jsonl.gz, ...):
a fifth of the bytes, and the standard library reads them. Readers never ask which form a folder holds: they open
the plain name through `open_run_file` and get the same bytes from either.

A folder holding both forms of one file is damage (a copy over a compacted run, a compacting cut short): which one
holds the run cannot be told, so it is refused in one line naming it (TwoForms), never guessed.
"""
from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from contract.runfolder import COMPACT, COMPACTED

# Fixed, so compacting one file anywhere gives the same bytes (with mtime=0 below: no time stamp in the header, and
# gzip.compress writes no file name): a migration is reproducible and a file compacted twice is the same file.
LEVEL = 9


class TwoForms(OSError):
    """One run file both plain and gzip'd in one folder. An OSError, so a reader that turns an unreadable file
    into its folder's problem line (contract/reader.py) does so here too, rather than read one of the two."""


def plain_name(path: str | Path) -> Path:
    """A run file's plain path, given it by either name (train.log or train.log.gz)."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(COMPACT)) if path.name.endswith(COMPACT) else path


def both_forms_line(plain: Path) -> str:
    return (f"{plain} and {plain.name}{COMPACT} both in its folder: one run file in two forms, so which holds the "
            f"run cannot be told; remove the one that is not the run's")


def run_file(path: str | Path) -> Path:
    """Where a run file is: its plain path or its compact one (the plain path when neither exists, so opening it
    raises FileNotFoundError as for any missing file); TwoForms when both are there."""
    plain = plain_name(path)
    compact = plain.with_name(plain.name + COMPACT)
    if compact.exists():
        if plain.exists():
            raise TwoForms(both_forms_line(plain))
        return compact
    return plain


def open_run_file(path: str | Path) -> BinaryIO:
    """A run file opened for reading, plain or gzip'd, by either name: its bytes as written. The compact form is
    decompressed whole into memory: the tail readers seek from the end (reader.last_record), which a gzip stream
    cannot, and a committed run's files are tens of kB to a few MB. A damaged gzip file raises an OSError."""
    where = run_file(path)
    if where.name.endswith(COMPACT):
        return io.BytesIO(decompressed(where))
    return open(where, "rb")


def decompressed(path: Path) -> bytes:
    """A gzip file's bytes; damage (cut short, not gzip) as an OSError naming the file, as a plain file's read
    error would be, so every reader reports it as its folder's unreadable file."""
    data = path.read_bytes()
    try:
        return gzip.decompress(data)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise OSError(f"{path}: damaged gzip file ({type(e).__name__}: {e})") from e


def read_run_file(path: str | Path) -> bytes:
    """A run file's bytes, plain or gzip'd (open_run_file)."""
    with open_run_file(path) as f:
        return f.read()


def run_file_exists(path: str | Path) -> bool:
    """Whether a run file is there in either form."""
    plain = plain_name(path)
    return plain.exists() or plain.with_name(plain.name + COMPACT).exists()


def two_forms(run_dir: str | Path) -> str | None:
    """The line refusing a folder that holds one of its record files in both forms, or None."""
    for name in COMPACTED:
        plain = Path(run_dir) / name
        if plain.exists() and plain.with_name(name + COMPACT).exists():
            return both_forms_line(plain)
    return None


def holding(root: str | Path, name: str) -> set[Path]:
    """The folders under root holding a run file of this name, in either form (config.json has one form only)."""
    root = Path(root)
    patterns = (name, name + COMPACT) if name in COMPACTED else (name,)
    return {p.parent for pattern in patterns for p in root.glob(f"**/{pattern}")}


# ================================================================================================================
# Compacting: a finished run's record files gzip'd in place (python -m tools compact-runs, reference-add)
# ================================================================================================================
def compact_bytes(data: bytes) -> bytes:
    """The compact form of a file's bytes: deterministic (LEVEL, mtime 0), so the same bytes everywhere."""
    return gzip.compress(data, compresslevel=LEVEL, mtime=0)


def write_compact(data: bytes, plain: Path) -> Path:
    """`data` as `plain`'s compact form, written whole before it is named (a compacting cut short leaves a .tmp,
    never a half gzip file under the name the readers open), checked to read back as `data`."""
    target = plain.with_name(plain.name + COMPACT)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(compact_bytes(data))
    if decompressed(tmp) != data:  # never drop a record file for a copy that does not give it back
        tmp.unlink()
        raise OSError(f"{target}: its compact form does not read back as {plain.name}; nothing changed")
    os.replace(tmp, target)
    return target


def compact_file(plain: Path) -> bool:
    """Replace a plain run file by its compact form; False where it is compact already or absent (so a second
    pass changes nothing). TwoForms where both are there."""
    where = run_file(plain)
    if where.name.endswith(COMPACT) or not where.exists():
        return False
    write_compact(where.read_bytes(), where)
    where.unlink()
    return True


def compact_folder(run_dir: str | Path) -> list[str]:
    """A run folder's record files compacted (the names it changed, in COMPACTED's order). A folder holding a file
    in both forms is refused (TwoForms) before any file of it changes."""
    run_dir = Path(run_dir)
    damaged = two_forms(run_dir)
    if damaged:
        raise TwoForms(damaged)
    return [name for name in COMPACTED if compact_file(run_dir / name)]
