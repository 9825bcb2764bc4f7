"""A superseded edition kept as files (analysis/frozen.py): copied byte for byte into a report's tables/ and figures/,
placed on its experiment's page with the mark as its line, shown by a notebook by path, and only in the report of
the committed reference (the runs they were drawn from)."""
from __future__ import annotations

import pytest

from analysis import catalogue as ct
from analysis import page as pg
from analysis import report
from analysis.frozen import Frozen, captions, copy_into, entries

PNG = b"\x89PNG\r\n\x1a\n-not-a-real-image"


@pytest.fixture
def kept(tmp_path) -> Frozen:
    folder = tmp_path / "kept"
    for path, data in (("tables/old_steps.md", b"### Old steps\n\nMade from 3 runs.\n\n| a |\n|---|\n| 1 |\n"),
                       ("tables/old_steps.csv", b"a\n1\n"), ("figures/old_curve.png", PNG),
                       ("figures/old_curve.pdf", b"%PDF-1.4"), ("readings/old_reading.md", b"- it held\n")):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return Frozen(folder, (9, 13), "the second edition", "abc1234", "analysis/experiments/old.py",
                  {"old_curve": "The old curve"})


def test_the_mark_names_what_replaced_them_and_the_commit_that_last_drew_them(kept):
    assert kept.mark() == ("Frozen: superseded by the second edition; as last drawn at commit abc1234 by "
                           "analysis/experiments/old.py (since removed: git show abc1234:analysis/experiments/old.py), "
                           "copied by the report, never redrawn.")


def test_a_report_gets_every_kept_table_and_figure_byte_for_byte(kept, tmp_path):
    out = tmp_path / "report"
    tables, figures = copy_into([kept], out, "tables"), copy_into([kept], out, "figures")
    assert [p.name for p in tables] == ["old_steps.csv", "old_steps.md"]
    assert [p.name for p in figures] == ["old_curve.pdf", "old_curve.png"]
    for path in (*tables, *figures):
        assert path.read_bytes() == (kept.folder / path.parent.name / path.name).read_bytes()
    assert not (out / "readings").exists()  # a notebook shows those; the report's tables are not theirs


def test_the_page_places_each_once_on_its_last_experiments_question_with_the_mark_as_its_line(kept):
    [table], [figure] = entries([kept], "tables"), entries([kept], "figures")
    assert (table.name, table.kind, figure.name, figure.kind) == ("old_steps", "table", "old_curve", "figure")
    assert pg.question_of(table.name, table.experiments, ct.QUESTIONS).slug == "critical_batch"
    assert captions([kept]) == {"old_curve": ("The old curve", kept.mark())}
    catalogue = pg.Catalogue.of([table], [figure], lambda df, entry: 1)
    assert catalogue.entry("old_steps", "table") is table and catalogue.entry("old_curve", "figure") is figure


def test_a_notebook_shows_a_kept_file_by_its_path(kept):
    assert kept.show("readings/old_reading.md").data == "- it held\n"
    assert kept.show("tables/old_steps.md").data.startswith("### Old steps")
    assert kept.show("figures/old_curve.png").data == PNG
    for missing in ("readings/none.md", "tables/old_steps.csv"):
        with pytest.raises(FileNotFoundError, match="no kept table, reading or figure"):
            kept.show(missing)


def test_only_the_committed_references_report_copies_them(tmp_path):
    declared = ct.declared("FROZEN")
    assert declared and report.frozen_for(report.committed_runs(), declared) == declared
    assert report.frozen_for(tmp_path, declared) == ()
