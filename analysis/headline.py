"""Blocks of the guides copied from the tables the report and `make cost` write, never typed.

    python -m analysis headline [--write]     # print the blocks; --write puts each into its guide

Each block sits between two markers in its guide and is the summary lines of one generated table:
- README.md's headline: results/tables/orderings.md's (what the rows say per finding, and the family-wise lines);
  `make reference-report` rewrites it.
- docs/cost.md's totals: results/tables/cost_totals.md's (GPU- and node-hours per scale); `make cost` rewrites it.
tests/test_readme.py checks that every block agrees with its table.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TABLES = REPO / "results" / "tables"
ORDERINGS = TABLES / "orderings.md"


@dataclass(frozen=True)
class Copy:
    """A guide's block of a table's summary lines (those starting with one of `prefixes`)."""
    name: str
    doc: Path
    table: Path
    prefixes: tuple[str, ...]
    command: str  # the command that rewrites it

    @property
    def begin(self) -> str:
        return (f"<!-- {self.name}: copied from {self.table.relative_to(self.table.parents[2])} by "
                f"`{self.command}`; do not edit -->")

    @property
    def end(self) -> str:
        return f"<!-- {self.name} end -->"

    def summary(self, table_md: str) -> list[str]:
        return [line for line in table_md.splitlines() if line.startswith(self.prefixes)]

    def block(self, table_md: str) -> str:
        return "\n".join([self.begin, *self.summary(table_md), self.end])

    def current(self, doc: str) -> str | None:
        """The guide's block as it stands, or None when it has no markers."""
        if self.begin not in doc or self.end not in doc:
            return None
        start = doc.index(self.begin)
        return doc[start:doc.index(self.end, start) + len(self.end)]

    def write(self) -> bool:
        """Put the current block into the guide; True when it changed."""
        doc = self.doc.read_text()
        old = self.current(doc)
        if old is None:
            raise SystemExit(f"error: {self.doc} has no {self.name} markers ({self.begin} ... {self.end})")
        new = self.block(self.table.read_text())
        if new == old:
            return False
        self.doc.write_text(doc.replace(old, new))
        return True


HEADLINE = Copy("headline", README, ORDERINGS, ("- What the rows say:", "- Family-wise"), "make reference-report")
COST_TOTALS = Copy("cost totals", REPO / "docs" / "cost.md", TABLES / "cost_totals.md",
                   ("- gpu,", "- node ", "- thesis,"), "make cost")
COPIES = (HEADLINE, COST_TOTALS)


def write_all(copies=COPIES) -> None:
    for copy in copies:
        print(f"{copy.doc.relative_to(REPO)} {copy.name} " + ("rewritten" if copy.write() else "already current"))
