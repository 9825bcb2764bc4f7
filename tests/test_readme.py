"""The README a newcomer reads first: the quick start on the first screen, short, every guide it names present, and
its headline of the findings the verdict table's own words (copied by `make reference-report`, never typed)."""
import re

from analysis.headline import COPIES, HEADLINE, ORDERINGS, README
from tests.helpers import REPO


def test_the_quick_start_is_on_the_first_screen_and_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert "## Quick start" in lines[:15]
    assert len(lines) < 200


def test_every_guide_the_readme_names_exists():
    named = set(re.findall(r"`((?:docs|slurm|experiments)/[\w./-]+\.md)`", README.read_text()))
    assert {"docs/cluster.md", "docs/scales.md", "docs/gpu.md", "docs/imagenet.md"} <= named
    assert [path for path in sorted(named) if not (REPO / path).exists()] == []


def test_the_headline_is_the_verdict_tables_summary():
    current = HEADLINE.current(README.read_text())
    assert current is not None, "README.md lost its headline markers"
    assert current == HEADLINE.block(ORDERINGS.read_text()), "run `make reference-report` (analysis headline --write)"
    assert "naive_degrades" in current and "warmup_matches_baseline" in current


def test_every_number_block_in_the_docs_is_its_tables_summary():
    """The docs' totals (docs/cost.md's GPU- and node-hours) are copied from the tables `make cost` writes, so
    a change of plan or of a measured rate cannot leave a stale number in a guide."""
    assert {copy.doc.name for copy in COPIES} >= {"README.md", "cost.md"}
    for copy in COPIES:
        current = copy.current(copy.doc.read_text())
        assert current is not None, f"{copy.doc} lost its {copy.name} markers"
        assert current == copy.block(copy.table.read_text()), f"run `{copy.command}` ({copy.doc} is stale)"
        assert len(copy.summary(copy.table.read_text())) >= 2


def test_a_doc_without_its_markers_is_one_line_naming_them(tmp_path):
    doc, table = tmp_path / "doc.md", tmp_path / "table.md"
    doc.write_text("no markers\n")
    table.write_text("- gpu, x\n")
    copy = next(c for c in COPIES if c.doc.name == "cost.md")
    copy = type(copy)(copy.name, doc, table, copy.prefixes, copy.command)
    try:
        copy.write()
    except SystemExit as e:
        assert str(e).startswith(f"error: {doc} has no {copy.name} markers") and "\n" not in str(e)
    else:
        raise AssertionError("a doc without markers was written")
