"""The report leads with what you ran (issue 67): a first page that answers "does it scale here?" for the report's
own runs (the headline figure, a verdict table with one badge a row, the machine and commit in one line), a page a
research question linked from it, an entry that holds no run drawn as a line saying what would fill it, problems
folded; after `make exp3 QUICK=1` and `make report`, this machine's experiment-3 runs come before any table of the
thesis's values alone, and the first page holds at most 6 tables; in a browser, the first screen holds them."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import catalogue as ct
from analysis import numbers as nb
from analysis import page as pg
from analysis import reference as rf
from analysis import tables as tb
from analysis.catalogue import make_report
from analysis.report import COMMITTED_REPORT
from tests.helpers import REPO
from tests.test_report_page import IMAGES, LINKS, browser, resolves, sentinel, unresolved  # noqa: F401 (fixtures)

MOST_TABLES = 6  # the first page's tables at most (issue 67)


# ============================================================================================ where an entry goes


def test_every_research_question_has_a_page_and_every_entry_one_of_them():
    slugs = [q.slug for q in (*ct.QUESTIONS, pg.RUNS)]
    assert slugs == ["throughput", "batch_size", "quality", "large_batch", "critical_batch", "gpt_throughput", "runs"]
    pages = {e.name: pg.question_of(e.name, e.experiments, ct.QUESTIONS).slug for e in (*ct.TABLES, *ct.FIGURES)}
    assert pages["fig17_scaling_pytorch_vs_horovod"] == pages["table08"] == pages["scaling"] == "throughput"
    assert pages["fig14_scaling_horovod_tf_b32"] == pages["table07"] == "batch_size"
    assert pages["orderings"] == pages["table10"] == pages["fig24_exp6_error"] == "quality"
    assert pages["exp12_large_batch"] == "large_batch" and pages["exp13_e2_steps_to_target"] == "critical_batch"
    assert pages["exp14_gpt_throughput"] == "gpt_throughput"
    assert pages["runs"] == pages["extra_experiments"] == "runs"
    notebooks = {p.stem for p in COMMITTED_REPORT.glob("rq*.ipynb")}
    assert {q.notebook for q in ct.QUESTIONS} == notebooks  # a page a notebook, and the reverse


def test_an_entry_counts_the_runs_of_its_own_frameworks():
    """Table 7 holds experiment 3's TensorFlow runs alone: a report of its PyTorch runs leaves it empty (it said
    'Made from 6 runs' while holding none of them)."""
    df = pd.DataFrame({"kind": ["run", "run", "run"], "exp": [3, 3, 4], "framework": ["pytorch", "pytorch", "pytorch"],
                       "per_gpu_batch": [32, 32, 32]})
    table = {e.name: e for e in ct.TABLES}
    assert ct.runs_read(df, table["table07"]) == 0 and ct.runs_read(df, table["table08"]) == 2
    assert ct.runs_read(df, table["runs"]) == 3 and ct.runs_read(df, table["rq2_steady_state"]) == 0
    assert "make setup-tf" in pg.fill_line(table["table07"]) and "`make exp3`" in pg.fill_line(table["table07"])


# ============================================================================================ the headline figure


def scaling_rows(frameworks_batches: dict, workers=(1, 2, 4)) -> pd.DataFrame:
    """Our steady-state speed-ups, a series per (framework, batch), beside the thesis's scaling table."""
    ours = [{"source": "ours (steady state)", "scale": "local scale", "framework": fw, "numerics": "fp32",
             "per_gpu_batch": b, "gpus": w, "images_per_s": 10.0 * w, "speedup": float(w) * 0.9, "flag": ""}
            for (fw, batches) in frameworks_batches.items() for b in batches for w in workers]
    thesis = tb.throughput_reference(rf.load_reference())
    thesis = pd.DataFrame({"source": "thesis", "scale": "thesis", "framework": thesis["framework"], "numerics": "fp32",
                           "per_gpu_batch": thesis["per_gpu_batch"], "gpus": thesis["gpus"],
                           "images_per_s": thesis["throughput"], "speedup": thesis["speedup"]})
    return pd.concat([thesis, pd.DataFrame(ours)], ignore_index=True)


def test_the_headline_draws_one_series_a_framework_and_the_thesiss_beside_it():
    scaling = scaling_rows({"pytorch": [32, 64]})
    scaling = scaling[~((scaling["per_gpu_batch"] == 64) & (scaling["gpus"] == 4) & (scaling["source"] != "thesis"))]
    rows = ct.headline_speedups(scaling)
    ours = rows[rows["source"] != "thesis"]
    assert set(ours["per_gpu_batch"]) == {32} and sorted(ours["gpus"]) == [1, 2, 4]  # the series of most workers
    thesis = rows[rows["source"] == "thesis"]
    assert set(thesis["framework"]) == {"pytorch"} and set(thesis["per_gpu_batch"]) == {128}  # its only batch
    assert thesis["gpus"].max() == 32
    assert ct.headline_speedups(scaling_rows({"pytorch": [32]}, workers=(1,))).empty  # one worker count: nothing


def quality_runs(tmp_path: Path, smoke: bool) -> pd.DataFrame:
    from tests import synth_records as synth
    from analysis.runs import load_study

    extra = {"smoke": True} if smoke else None
    for exp, gpus, acc in (("05_linear_scaling", 1, 70.0), ("05_linear_scaling", 32, 66.0),
                           ("04_naive_scaling", 32, 60.0)):
        synth.write_run(tmp_path, exp, f"w{gpus}-s0", gpus=gpus, epochs=2, final_acc=acc, manifest_extra=extra)
    return load_study(tmp_path)


def test_the_headline_accuracy_is_each_experiments_loss_from_the_1_worker_baseline(tmp_path):
    df = quality_runs(tmp_path / "full", smoke=False)
    rows = ct.headline_accuracy(df, rf.load_reference(), set())
    ours = rows[rows["source"] == "ours"].set_index(["exp", "gpus"])["difference"]
    best = df[df["kind"] == "run"].set_index(["exp", "gpus"])["best_val_top1"]
    assert ours[(5, 1)] == 0 and ours[(5, 32)] == pytest.approx(best[(5, 32)] - best[(5, 1)])
    assert ours[(4, 32)] == pytest.approx(best[(4, 32)] - best[(5, 1)])
    thesis = rows[rows["source"] == "thesis"].set_index(["exp", "gpus"])["difference"]
    ref = rf.load_reference()
    top1 = ref.dropna(subset=["top1"]).set_index(["experiment", "gpus"])["top1"]
    assert thesis[(5, 32)] == pytest.approx(top1[(5, 32)].mean() - top1[(5, 1)].mean())
    smoke = quality_runs(tmp_path / "smoke", smoke=True)
    from analysis.smoke import smoke_paths
    assert set(ct.headline_accuracy(smoke, ref, smoke_paths(smoke))["source"]) == {"ours"}  # never beside a smoke run


# ============================================================================================ the first page's parts


def orderings_md(rows: list[tuple[str, str]]) -> str:
    """orderings.md as the report writes it: (comparison, holds) rows."""
    frame = pd.DataFrame({"finding": "naive_degrades", "comparison": [c for c, _ in rows], "seeds": "3 vs 3",
                          "difference [90 % interval]": "-4.58 [-6.56, -2.60]", "method": "paired by seed",
                          "verdict": "worse", "holds": [h for _, h in rows], "holds after Holm": "yes", "flag": ""})
    return tb.to_markdown(frame, "Findings", ["What the rows say: naive_degrades (local scale): holds"], "Made from 6 runs.")


def test_the_verdict_table_has_one_badge_a_row_and_its_interval(tmp_path):
    (tmp_path / "orderings.md").write_text(orderings_md([("exp 4 at 16", "yes"), ("exp 4 at 24", "no"),
                                                          ("exp 4 at 32", "undecided"), ("exp 12 at 256", "diverged")]))
    text = pg.verdict_table(tmp_path, ct.CATALOGUE.no_verdicts)
    badges = re.findall(r'<span class="badge (\w+)" title="([^"]*)">([^<]*)</span>', text)
    assert [(kind, said) for kind, _, said in badges] == [("holds", "holds"), ("fails", "fails"),
                                                           ("undecided", "undecided"), ("diverged", "diverged")]
    assert all("verdict: worse" in hover and "paired by seed" in hover for _, hover, _ in badges)
    assert text.count("-4.58 [-6.56, -2.60]") == 4 and text.count("<tr>") == 5


def test_no_verdict_is_one_line_naming_the_command(tmp_path):
    (tmp_path / "orderings.md").write_text(orderings_md([]))
    none_yet = ct.CATALOGUE.no_verdicts  # what would give the first verdict, from the declared findings
    assert "<table" not in pg.verdict_table(tmp_path, none_yet)
    assert "warmup_matches_baseline: <code>make exp5</code> then <code>make exp6</code>" in pg.verdict_table(
        tmp_path / "none", none_yet)


def test_the_machines_and_commits_are_one_line():
    assert nb.experiments_text({1, 2, 3, 5}) == "experiments 1-3, 5" and nb.experiments_text({3}) == "experiment 3"
    line = pg.machine_line(pd.DataFrame({"kind": [], "source": [], "path": [], "exp": []}))
    assert line.startswith("No run folders")


# ============================================================================================ a report of real runs


def real_exp3(out: Path) -> str:
    """`make exp3 QUICK=1`, two of its runs (1 and 2 DDP processes): the study's output."""
    return subprocess.run([sys.executable, "-m", "suite", "study", "experiments/03_throughput_distributed_data_parallel",
                           "--quick", "--only", "n1-t1-ddp-s0", "n2-ddp-t1-s0", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=1200).stdout


@pytest.fixture(scope="module")
def exp3_report(tmp_path_factory):
    """A real experiment-3 study at --quick and `make report` of it (without the notebooks)."""
    root = tmp_path_factory.mktemp("exp3")
    out = real_exp3(root / "runs")
    assert "completed" in out, out
    make_report(root / "runs", root / "report", notebooks=False, quiet=True)
    return root / "report"


def articles(text: str) -> list[tuple[int, str]]:
    """(position, the block) of each table article of a page."""
    return [(m.start(), m.group(0)) for m in re.finditer(r'<article id="table-.*?</article>', text, re.S)]


def thesis_alone(block: str) -> bool:
    """A table whose runs line says it holds no run: 'Made from 0 runs' or the thesis's values."""
    return bool(re.search(r'class="source">Made from (0 runs|the thesis)', block))


@pytest.mark.slow
def test_after_make_exp3_the_report_leads_with_this_machines_runs(exp3_report):
    first = (exp3_report / pg.PAGE).read_text()
    named = first.index("this machine: 2 runs of experiment 3")
    assert [pos for pos, block in articles(first) if thesis_alone(block) and pos < named] == []
    assert first.count("<table") <= MOST_TABLES
    assert 'src="figures/headline.png"' in first and first.index("figures/headline.png") < first.index('id="verdicts"')
    assert "n1-t1-ddp" in first  # this machine's runs beside the reference
    for q in (*ct.QUESTIONS, pg.RUNS):  # on every page, the tables of its runs before any of the thesis's alone
        text = (exp3_report / f"{q.slug}.html").read_text()
        kinds = [thesis_alone(block) for _, block in articles(text)]
        assert kinds == sorted(kinds), q.slug
        assert unresolved(exp3_report / f"{q.slug}.html") == [], q.slug
    throughput = (exp3_report / "throughput.html").read_text()
    assert "Table 8. Multi-node" in throughput and "table-table08" in throughput  # DDP's runs: drawn
    assert "table-table09" not in throughput and "<code>make exp3</code>" in throughput  # Horovod's: a line
    assert "<code>make exp12</code> would fill this page" in (exp3_report / "large_batch.html").read_text()
    assert unresolved(exp3_report / pg.PAGE) == []


@pytest.mark.slow
def test_the_first_screen_holds_this_machines_runs_in_a_browser(exp3_report, browser):
    browser.set_window_size(1440, 1000)
    browser.get((exp3_report / pg.PAGE).as_uri())
    seen = browser.execute_script("return window.innerHeight")
    top = "return document.querySelector(arguments[0]).getBoundingClientRect().top"
    assert browser.execute_script(top, "#machines") < seen and browser.execute_script(top, "#headline img") < seen
    assert "this machine: 2 runs of experiment 3" in browser.find_element("id", "machines").text
    for page in pg.page_names(ct.QUESTIONS):
        browser.get((exp3_report / page).as_uri())
        assert [src for src, ok in browser.execute_script(IMAGES) if not ok] == [], page
        assert [u for u in browser.execute_script(LINKS) if not resolves(u, browser, exp3_report / page)] == [], page


@pytest.mark.slow
@pytest.mark.parametrize("width, height", [(1440, 1000), (390, 844)])  # a wide screen and a phone
def test_every_page_of_the_committed_report_in_a_browser(browser, width, height):
    browser.set_window_size(width, height)
    for page in pg.page_names(ct.QUESTIONS):
        browser.get((COMMITTED_REPORT / page).as_uri())
        assert [src for src, ok in browser.execute_script(IMAGES) if not ok] == [], page
        assert [u for u in browser.execute_script(LINKS) if not resolves(u, browser, COMMITTED_REPORT / page)] == []
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), page


def test_the_committed_first_page_leads_with_the_headline_and_the_verdicts():
    text = (COMMITTED_REPORT / pg.PAGE).read_text()
    assert text.index('id="machines"') < text.index('id="headline"') < text.index('id="verdicts"')
    assert text.count("<table") <= MOST_TABLES and text.count('class="badge ') >= 10
    assert '<details id="problems">' in text  # problems folded, a section of their own
    shot = COMMITTED_REPORT / "screenshots" / "first_screen.png"
    assert shot.stat().st_size > 50_000  # python -m tools screenshot results/index.html ... (README shows it)
