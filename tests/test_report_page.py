"""The report's web pages (issue 52; issue 67: a first page and a page a research question): index.html with the
headline and the verdicts first, every table and figure with its runs line on its question's page, the notebooks as
HTML; self-contained (nothing from a network); and in a real browser (Debian's chromium driven by Selenium): every
image loads, every local link resolves, no console error, readable at a phone's width."""
from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import catalogue as ct  # noqa: E402
from analysis import figures as fg  # noqa: E402
from analysis import page as pg  # noqa: E402
from analysis import tables as tb  # noqa: E402
from analysis.catalogue import make_report  # noqa: E402
from analysis.report import COMMITTED_REPORT  # noqa: E402
from tests.test_analysis_report import FIX  # noqa: E402

COMMITTED_PAGE = COMMITTED_REPORT / pg.PAGE
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


class Links(HTMLParser):
    """Every src and href of a page, and whether it has a script."""

    def __init__(self):
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.scripts += tag == "script"
        self.targets += [attrs[a] for a in ("src", "href") if attrs.get(a)]
        if attrs.get("id"):
            self.ids.add(attrs["id"])


def links_of(page: Path) -> Links:
    parsed = Links()
    parsed.feed(page.read_text())
    return parsed


def off_disk(target: str) -> bool:
    """A target a browser would fetch from a network (an image embedded as a data: URI is not one)."""
    url = urlparse(target)
    return bool(url.netloc) or url.scheme not in ("", "data")


def unresolved(page: Path) -> list[str]:
    """The page's targets that are not a file beside it (or an anchor of it), and any that leaves the disk."""
    parsed, bad = links_of(page), []
    for target in parsed.targets:
        url = urlparse(target)
        if off_disk(target):
            bad.append(target)  # a network fetch, or a link off the report
        elif url.scheme == "data":
            continue
        elif url.path and not (page.parent / unquote(url.path)).exists():
            bad.append(target)
        elif not url.path and url.fragment and url.fragment not in parsed.ids:
            bad.append(target)
    return bad


# ============================================================================================ the page, without a browser


def small_report(out: Path) -> pg.PageInputs:
    """A report of one table, one figure and the verdicts' table of two experiment-3 runs, as make_report leaves
    them."""
    tables = tb.write_table(pd.DataFrame({"gpus": [1, 2], "images_per_s": [10.5, 19.0]}), out / "tables", "scaling",
                            "Throughput by GPUs", ["images_per_s: steady state"], "Made from 2 runs in x (this machine).")
    (out / "tables" / "orderings.md").write_text("### Findings\n\nMade from 2 runs.\n\n| finding | holds |\n|---|---|\n"
                                                 "| naive_degrades | yes |\n\n"
                                                 "- What the rows say: naive_degrades (local scale): holds\n")
    (out / "tables" / "orderings.csv").write_text("a\n1\n")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [10.5, 19.0])
    name = "fig17_scaling_pytorch_vs_horovod"
    figs = fg.save(fig, out / "figures", name, "Made from 2 runs in x (this machine).")
    captions = {name: ("Throughput against GPUs (thesis Figure 17)", "Made from 2 runs in x (this machine).")}
    runs = pd.DataFrame({"kind": "run", "source": "run", "path": [str(out / "r1"), str(out / "r2")], "exp": 3,
                         "framework": "pytorch", "per_gpu_batch": 32})
    return pg.PageInputs(out, "Made from 2 runs in x (this machine).", runs, tables, figs, captions,
                         ["fig26_exp7_vs_exp6_grid: no experiment-7 runs"], [], [],
                         ct.CATALOGUE)


def test_the_first_page_leads_with_the_verdicts_and_each_page_holds_its_tables_and_figures_with_their_runs_line(
        tmp_path):
    first = pg.write_page(small_report(tmp_path))
    text = first.read_text()
    order = [text.index(s) for s in ('id="machines"', 'id="headline"', 'id="verdicts"', 'id="questions"')]
    assert order == sorted(order)
    assert "this machine: 2 runs of experiment 3" in text and '<span class="badge holds"' in text
    page = (tmp_path / "throughput.html").read_text()  # the scaling table and Figure 17: the throughput question
    table = page[page.index('id="table-scaling"'):]
    assert "Throughput by GPUs" in table and "Made from 2 runs in x (this machine)." in table
    assert "<td>19.00</td>" in table or "<td>19</td>" in table
    figure = page[page.index('id="figure-fig17_scaling_pytorch_vs_horovod"'):page.index('id="table-scaling"')]
    assert "(thesis Figure 17)" in figure and "Made from 2 runs in x" in figure
    assert 'src="figures/fig17_scaling_pytorch_vs_horovod.png"' in figure
    assert "no experiment-7 runs" in (tmp_path / "quality.html").read_text()  # not drawn: on its question's page
    for name in pg.page_names(ct.QUESTIONS):
        assert unresolved(tmp_path / name) == [] and links_of(tmp_path / name).scripts == 0, name


def test_a_markdown_table_reads_back_as_the_report_wrote_it():
    table = pg.read_markdown_table(tb.to_markdown(pd.DataFrame({"a": ["x|y"], "b": [1.5]}), "T", ["n"], "Made."))
    assert (table.title, table.lines, table.header, table.rows, table.notes) == ("T", ["Made."], ["a", "b"],
                                                                                 [["x/y", "1.50"]], ["n"])


def test_a_notebook_page_fetches_nothing_from_a_network(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# RQ"), nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(nb, str(tmp_path / "rq9_x.ipynb"))
    [page] = pg.notebook_pages([tmp_path / "rq9_x.ipynb"])
    assert page == tmp_path / "rq9_x.html" and 'id="RQ"' in page.read_text()
    assert links_of(page).scripts == 0 and [t for t in links_of(page).targets if off_disk(t)] == []


def test_the_committed_page_links_only_files_beside_it():
    assert unresolved(COMMITTED_PAGE) == []
    for notebook in sorted(COMMITTED_REPORT.glob("rq*.ipynb")):
        assert notebook.with_suffix(".html").is_file(), notebook.name
        assert [t for t in links_of(notebook.with_suffix(".html")).targets if off_disk(t)] == []


@pytest.mark.slow
def test_make_report_writes_the_page(tmp_path):
    info = make_report(FIX / "runs", tmp_path, notebooks=False, quiet=True)
    assert info["page"] == str(tmp_path / pg.PAGE)
    text = "".join((tmp_path / name).read_text() for name in pg.page_names(ct.QUESTIONS))
    # every table and figure is on a page: drawn, or a line saying what would fill it that links its file
    tables = {p.stem for p in (tmp_path / "tables").glob("*.md")} - {"README"}
    drawn = set(re.findall(r'<article id="table-([^"]+)"', text))
    unfilled = set(re.findall(r'<a href="tables/([^"]+)\.md">[^<]*</a>: the thesis', text))
    assert drawn | unfilled == tables and drawn and unfilled
    figures = {p.stem for p in (tmp_path / "figures").glob("*.png")}
    shown = set(re.findall(r'<img src="figures/([^"]+)\.png"', text))
    assert shown | set(re.findall(r'<a href="figures/([^"]+)\.png">[^<]*</a>: the thesis', text)) == figures
    for name in pg.page_names(ct.QUESTIONS):
        assert unresolved(tmp_path / name) == [], name


# ============================================================================================ in a browser


class Sentinel:
    """A proxy on the loopback that answers nothing: the browser is told to send every request for a network
    through it, so anything Chromium tries to fetch from outside lands here (its first line kept) instead of on the
    internet, and no host name is looked up by the browser (a proxied request leaves that to the proxy)."""

    def __init__(self):
        import socket
        import threading

        self.tried: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.tried.append(conn.recv(1024).split(b"\r\n")[0].decode(errors="replace"))
                except OSError:
                    self.tried.append("(a connection that sent nothing)")

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def sentinel():
    guard = Sentinel()
    yield guard
    guard.close()


@pytest.fixture
def browser(sentinel, monkeypatch):
    """Debian's chromium driven through Debian's chromedriver, and nothing fetched (tools/browser.py): the driver is
    given by path, so Selenium never starts Selenium Manager (which would reach the internet for a driver: it raises
    here), SE_OFFLINE and SE_AVOID_STATS tell it to stay offline should anything start it, and every request the
    browser makes for a network goes to the sentinel."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no chromium and chromedriver here (make setup-browser installs them)")
    pytest.importorskip("selenium.webdriver", reason="Selenium is not installed (make setup-browser)")
    from selenium.webdriver.common import selenium_manager

    from tools.browser import offline_driver

    def refused(*_):
        raise AssertionError("Selenium Manager started: it would reach the internet for a driver")

    monkeypatch.setattr(selenium_manager.SeleniumManager, "binary_paths", refused)
    monkeypatch.setenv("SE_OFFLINE", "true")
    monkeypatch.setenv("SE_AVOID_STATS", "true")
    driver = offline_driver(CHROMIUM, CHROMEDRIVER, proxy=f"http://127.0.0.1:{sentinel.port}", log_console=True)
    yield driver
    driver.quit()


IMAGES = "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])"
LINKS = "return Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"


def resolves(url: str, driver, page: Path) -> bool:
    """A link of a page opened from disk: a file that exists, or an anchor the page itself holds."""
    parsed = urlparse(url)
    path = Path(unquote(parsed.path))
    if parsed.scheme != "file":
        return False
    if parsed.fragment and path == page:
        return driver.execute_script("return document.getElementById(arguments[0]) !== null", parsed.fragment)
    return path.exists()


@pytest.mark.slow
@pytest.mark.parametrize("width, height", [(1440, 1000), (390, 844)])  # a wide screen and a phone
def test_the_committed_page_in_a_browser(browser, tmp_path, width, height):
    browser.set_window_size(width, height)
    browser.get(COMMITTED_PAGE.as_uri())  # get() returns after the load event: every image has loaded or failed
    images = browser.execute_script(IMAGES)
    assert images and [src for src, ok in images if not ok] == []
    assert [url for url in browser.execute_script(LINKS) if not resolves(url, browser, COMMITTED_PAGE)] == []
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    # readable at this width: the page never scrolls sideways (a wide table scrolls in its own box)
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    assert browser.save_screenshot(str(tmp_path / f"page-{width}.png"))
    assert (tmp_path / f"page-{width}.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_browser_test_reaches_no_network(browser, sentinel):
    """Issue 64: a Selenium driver set up by `make setup-browser` tried to reach the internet. The browser opens the
    committed page and stays a while (its startup and first idle are when Chromium phones home); nothing reaches
    the sentinel, through which every request for a network would have to pass."""
    import time

    browser.get(COMMITTED_PAGE.as_uri())
    time.sleep(5)
    browser.get("http://192.0.2.1/")  # the sentinel itself: a request for a network does arrive there
    deadline = time.time() + 10
    while not sentinel.tried and time.time() < deadline:
        time.sleep(0.1)
    assert [line for line in sentinel.tried if "192.0.2.1" not in line] == []
    assert any("192.0.2.1" in line for line in sentinel.tried)  # the sentinel sees what the browser asks for


@pytest.mark.slow
def test_the_committed_notebook_pages_in_a_browser(browser):
    for notebook in sorted(COMMITTED_REPORT.glob("rq*.html")):
        browser.get(notebook.as_uri())
        assert [src for src, ok in browser.execute_script(IMAGES) if not ok] == [], notebook.name
        assert [url for url in browser.execute_script(LINKS) if not resolves(url, browser, notebook)] == []
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == [], notebook.name
