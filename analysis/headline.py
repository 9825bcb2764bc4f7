"""The README's headline of what the local runs show, copied from the verdict table, never typed.

    python -m analysis headline [--write]     # print the block; --write puts it into README.md

The block between the README's markers is the summary lines of results/tables/orderings.md (what the rows say per
finding, and the family-wise lines beside them), as `make reference-report` computed them from the committed runs;
`make reference-report` rewrites it, and tests/test_analysis_report.py checks that the two agree.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
ORDERINGS = REPO / "results" / "tables" / "orderings.md"
BEGIN = "<!-- headline: copied from results/tables/orderings.md by `make reference-report`; do not edit -->"
END = "<!-- headline end -->"
SUMMARY_PREFIXES = ("- What the rows say:", "- Family-wise")  # the orderings notes a headline carries


def summary_lines(orderings_md: str) -> list[str]:
    """The per-finding summary notes of orderings.md, in its order."""
    return [line for line in orderings_md.splitlines() if line.startswith(SUMMARY_PREFIXES)]


def block(orderings_md: str) -> str:
    return "\n".join([BEGIN, *summary_lines(orderings_md), END])


def readme_block(readme: str) -> str | None:
    """The README's headline block as it stands, or None when it has no markers."""
    if BEGIN not in readme or END not in readme:
        return None
    start = readme.index(BEGIN)
    return readme[start:readme.index(END, start) + len(END)]


def write(readme_path: Path = README, orderings_path: Path = ORDERINGS) -> bool:
    """Put the current block into the README; True when it changed."""
    readme = readme_path.read_text()
    old = readme_block(readme)
    if old is None:
        raise SystemExit(f"error: {readme_path} has no headline markers ({BEGIN} ... {END})")
    new = block(orderings_path.read_text())
    if new == old:
        return False
    readme_path.write_text(readme.replace(old, new))
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis headline", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="put the block into README.md")
    args = ap.parse_args(argv)
    if args.write:
        print("README.md headline " + ("rewritten" if write() else "already current"))
    else:
        sys.stdout.write(block(ORDERINGS.read_text()) + "\n")
    return 0
