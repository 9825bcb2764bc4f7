"""What a superseded edition of an experiment last drew, kept as files instead of as the code that drew them.

A plug-in (analysis/experiments/) declares them as FROZEN, a `Frozen` each: a folder holding tables/<name>.md|csv,
figures/<name>.png|pdf and readings/<name>.md (text its notebook cells showed), as the removed code last wrote them.
The report of the committed reference copies the tables and figures into its tables/ and figures/ byte for byte and
puts them on the page; a notebook shows any of them (`Frozen.show`). Nothing here reads a run: what was drawn
from the runs stays as it was drawn, and the code that drew it stays in git history (`Frozen.mark` says where).
Another runs folder's report copies none of them: they are the reference's, not its.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

KINDS = {"tables": "table", "figures": "figure"}  # a frozen folder's subfolders the report copies, by entry kind
SHOWN = (".md", ".png")  # the file of a name a notebook shows: a table or reading as markdown, a figure as its PNG


@dataclass(frozen=True)
class FrozenFile:
    """A copied table or figure as the page places it (the attributes it reads of a catalogue entry)."""

    name: str
    kind: str  # "table" or "figure"
    experiments: tuple[int, ...]  # the page of its last experiment's question
    reads = None  # every run of its experiments counts (it was drawn from the reference's)
    needs = ""


@dataclass(frozen=True)
class Frozen:
    """One superseded edition's files, and the line that marks each of them."""

    folder: Path  # tables/, figures/, readings/ and SUPERSEDED.md (what replaced them, in full)
    experiments: tuple[int, ...]  # whose runs they were drawn from
    superseded_by: str  # what replaced them, in a few words
    drawn_at: str  # the last commit whose code drew them (and drew them byte for byte as kept)
    code: str  # the module that drew them, removed after drawn_at
    captions: dict[str, str] = field(default_factory=dict)  # a figure's heading on the page

    def mark(self) -> str:
        """The line each kept markdown file carries under its title, and the page under each figure."""
        return (f"Frozen: superseded by {self.superseded_by}; as last drawn at commit {self.drawn_at} by {self.code} "
                f"(since removed: git show {self.drawn_at}:{self.code}), copied by the report, never redrawn.")

    def files(self, kind: str) -> list[Path]:
        """The kept files of one subfolder (tables, figures or readings), sorted."""
        folder = self.folder / kind
        return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []

    def entries(self, kind: str) -> list[FrozenFile]:
        """Each table or figure kept, once (its .md or .png), as the page places it."""
        shown = [p for p in self.files(kind) if p.suffix in SHOWN]
        return [FrozenFile(p.stem, KINDS[kind], self.experiments) for p in shown]

    def show(self, file: str):
        """A notebook cell's output of a kept file, named by its path in the folder: a table or reading (.md) as
        markdown, a figure (.png) as the image."""
        path = self.folder / file
        if path.suffix not in SHOWN or not path.is_file():
            raise FileNotFoundError(f"{path}: no kept table, reading or figure of that name")
        from IPython.display import Image, Markdown

        return Markdown(path.read_text()) if path.suffix == ".md" else Image(data=path.read_bytes(), format="png")


def copy_into(declared, out: Path, kind: str) -> list[Path]:
    """Copy every declared edition's kept tables or figures (kind) into out/<kind>, byte for byte; the paths written."""
    (out / kind).mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(p, out / kind / p.name)) for frozen in declared for p in frozen.files(kind)]


def entries(declared, kind: str) -> list[FrozenFile]:
    """Every declared edition's kept tables or figures (kind), as the page places them."""
    return [e for frozen in declared for e in frozen.entries(kind)]


def captions(declared) -> dict[str, tuple[str, str]]:
    """figure name -> (its heading, its line) on the page, of every declared edition's kept figures."""
    return {e.name: (frozen.captions.get(e.name, e.name), frozen.mark())
            for frozen in declared for e in frozen.entries("figures")}
