"""analysis/catalogue.py: the report's tables and figures declared once (the plug-ins' and the core's, in the report's
parts), written by the report, shared with the notebooks' helpers."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import analysis as an  # noqa: E402
from analysis import catalogue as ct  # noqa: E402
from analysis import entries as en  # noqa: E402
from analysis.experiments import quality, throughput  # noqa: E402
from analysis.report import build_figures, build_tables  # noqa: E402
from tests.test_analysis_figures import epochs  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _runs(*frames) -> pd.DataFrame:
    """Epoch rows as the report sees them: each run with a folder path (no smoke run among them)."""
    df = pd.concat(frames, ignore_index=True)
    return df.assign(path=[f"runs/{exp}/{run}" for exp, run in zip(df["exp"], df["run"])])


def test_each_entry_names_one_file_and_a_thesis_number_where_the_thesis_has_one():
    for entries in (ct.FIGURES, ct.TABLES):
        names = [e.name for e in entries]
        assert len(names) == len(set(names)), "two entries would write one file"
    thesis_figures = [int(f.thesis.split()[1]) for f in ct.FIGURES if f.thesis.startswith("Figure ")]
    assert sorted(thesis_figures) == list(range(14, 31))  # Figures 14-30, each once
    assert {t.options["table"] for t in ct.TABLES if "table" in t.options} == set(range(1, 16))
    assert ct.figure("fig26_exp7_vs_exp6_grid").experiments == (6, 7)


def test_an_added_entry_is_written_or_listed_as_not_drawn_with_why(tmp_path):
    new = en.Figure("fig99_exp13_error", "", (13,), quality.errors, "Experiment 13", {"rows": en.every_run})
    inputs = en.Inputs(_runs(epochs(13, 1, 60), epochs(13, 2, 70)), None, "Made from 4 runs in x (this machine).")
    written, skipped = build_figures(inputs, tmp_path, (new,))
    assert [p.name for p in written] == ["fig99_exp13_error.png", "fig99_exp13_error.pdf"] and not skipped
    written, skipped = build_figures(en.Inputs(_runs(epochs(4, 1, 60)), None), tmp_path, (new,))
    assert not written and skipped == ["fig99_exp13_error: no epoch records"]


def test_a_table_entry_writes_its_title_notes_and_the_runs_line(tmp_path):
    table = en.Table("exp13", "", (13,), en.of_runs(lambda df: df.groupby("gpus").size().rename("rows").reset_index()),
                     "Experiment 13's rows per worker count", ("one row a worker count",))
    nothing = en.Table("none", "", (), lambda inputs, entry: None)
    inputs = en.Inputs(_runs(epochs(13, 1, 60), epochs(13, 2, 70)), None, "Made from 4 runs in x (this machine).")
    written = build_tables(inputs, tmp_path, (table, nothing))
    assert [p.name for p in written] == ["exp13.csv", "exp13.md"]
    md = (tmp_path / "exp13.md").read_text()
    assert md.startswith("### Experiment 13's rows per worker count\n\nMade from 4 runs in x (this machine).")
    assert "- one row a worker count" in md and "| 2 | 12 |" in md


def test_figure_titles_take_each_experiments_own_warm_up():
    six = epochs(6, 32, 90, warmup="stepping-4").assign(epochs=72)
    inputs = en.Inputs(_runs(six), None)
    assert en.titled(inputs, ct.figure("fig25_exp6_error_grid")) == \
        "Figure 25. Linear scaling + stepping warm-up 4 of 72 epochs (thesis: 5 of 90) (grid)"
    assert en.titled(inputs, ct.figure("fig30_exp9_vs_exp8_grid")) == \
        "Figure 30. Exp 8's gradual warm-up (5 of 90 epochs in the thesis) vs exp 9's gradual warm-up (10 of 90 " \
        "epochs in the thesis)"


def test_the_notebooks_draw_with_the_reports_figure_functions():
    assert an.scaling_figure.__wrapped__ is throughput.draw_scaling  # one scaling figure, shown as an image
    fig = an.schedules_figure(pd.DataFrame(columns=["kind", "exp"]))  # no runs: the thesis's schedules
    assert [ax.get_title() for ax in fig.axes] == [f"experiment {e}" for e in quality.NUMBERS]


def test_the_report_writes_each_part_in_turn_the_cores_own_entries_between_them():
    """The plug-ins' entries of a part (entries.PARTS) together, in the plug-ins' order; the core's in their places."""
    names = [e.name for e in ct.TABLES]
    parts = [next((e.part for e in ct.declared("TABLES") if e.name == name), "core") for name in names]
    plugged = [part for part in parts if part != "core"]
    assert plugged == sorted(plugged, key=en.PARTS.index) and "core" in parts  # the parts in PARTS' order
    assert names[:15] == [f"table{t:02d}" for t in range(1, 16)]  # the thesis's tables first, the plug-ins' order
    assert names.index("runs") < names.index("orderings") < names.index("this_machine_vs_reference")
    assert ct.FIGURES[0].name == "headline" and [p.__name__.rsplit(".", 1)[1] for p in ct.PLUGINS[:2]] == \
        ["throughput", "quality"]  # in the order of their first experiment, not of their names
