"""The report as web pages (`make report`; the committed ones, results/index.html and its pages, by `make
reference-report`). The first page, <report>/index.html, answers the reader's question for the runs it was made
from: the headline figure (speed-up and accuracy against workers, ideal and the thesis beside them, flagged points
ringed), a verdict table with one badge a row, the machine and commit in one line, this machine's runs beside the
reference where the report is of this machine's, and a link to one page a research question (the plug-ins'
QUESTIONS: its tables and figures, the ones holding runs first, its notebook). Problems are a folded section of their own.

An entry (a catalogue table or figure) that holds none of the runs is not drawn: one line on its page says what
would fill it (its `make expN`) and links its file (the thesis's values it holds). An entry of the thesis's values
alone by design (thesis_only) is drawn after those with runs.

Self-contained: HTML and CSS, no script, nothing fetched from a network; the pages link only files of the report
beside them (figures/*.png shown by relative path, tables/*.md|csv, the notebooks' .html and .ipynb), so the
folder opens from disk or from any web server. Deterministic like the rest of the report (no clock, no host name of
the machine drawing it), so `make reference-report` redraws the committed pages byte for byte.

The tables are read back from the markdown the report wrote (tables.to_markdown's layout: a "### " title, the
runs line, a pipe table, "- " notes), so a page shows exactly what the .md shows.
"""
from __future__ import annotations

import fnmatch
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from contract import reader

from . import numbers as nb
from .machines import machine_of, reference_machines

PAGE = "index.html"
VERDICTS = "orderings.md"  # the table whose rows the first page's verdict table shows (README's headline too)
HEADLINE = "headline"  # the catalogue's figure the first page leads with
YOURS = "this_machine_vs_reference"  # the table of this machine's runs beside the reference's: first page
PROBLEM_TABLES = ("run_invariants",)  # tables the report writes of what is wrong with the runs: the problems section

CSS = """
:root { --ink: #1d2127; --muted: #5b6470; --line: #d8dde3; --band: #f4f6f8; --accent: #1f5fa8; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; line-height: 1.5;
       font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 78rem; margin: 0 auto; padding: 0.5rem clamp(0.75rem, 3vw, 2.5rem) 4rem; }
h1 { font-size: clamp(1.3rem, 4vw, 1.8rem); margin: 0.4rem 0 0.2rem; }
h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 2px solid var(--line); padding-bottom: 0.25rem; }
h3 { font-size: 1.05rem; margin: 1.75rem 0 0.25rem; }
a { color: var(--accent); }
nav ul { display: flex; flex-wrap: wrap; gap: 0.15rem 1rem; padding: 0; margin: 0.25rem 0; list-style: none;
         font-size: 0.9rem; }
nav a[aria-current] { font-weight: 700; color: var(--ink); text-decoration: none; }
.machine { font-size: 0.9rem; margin: 0.2rem 0; }
.source { color: var(--muted); font-size: 0.8125rem; margin: 0.25rem 0 0.5rem; }
.files { font-size: 0.875rem; }
.question { font-style: italic; }
.fill li { margin-bottom: 0.3rem; }
dt { font-weight: 600; margin-top: 0.75rem; }
dd { margin: 0.2rem 0 0 1.25rem; color: var(--muted); font-size: 0.9rem; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; border: 1px solid var(--line); }
table { border-collapse: collapse; font-size: 0.8125rem; font-variant-numeric: tabular-nums; }
th, td { padding: 0.3rem 0.55rem; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: var(--band); position: sticky; top: 0; }
tbody tr:nth-child(even) { background: #fafbfc; }
.badge { display: inline-block; min-width: 6.5em; padding: 0.05rem 0.5rem; border-radius: 0.8rem; font-weight: 600;
         text-align: center; font-size: 0.75rem; border: 1px solid transparent; }
.holds { background: #d9f2e3; color: #0b5a2b; } .fails { background: #fbdcdc; color: #8a1111; }
.undecided { background: #f1f1f1; color: #444; border-color: #ccc; } .diverged { background: #3b2a4d; color: #fff; }
.other { background: #fff; color: var(--muted); border-color: var(--line); }
figure { margin: 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
.notes { font-size: 0.875rem; color: var(--muted); }
details { margin-top: 2rem; border-top: 2px solid var(--line); padding-top: 0.5rem; }
summary { cursor: pointer; font-weight: 600; font-size: 1.1rem; }
@media (max-width: 40rem) { body { font-size: 15px; } th, td { padding: 0.25rem 0.4rem; } }
"""


@dataclass(frozen=True)
class Question:
    """A page of the report: one research question, the catalogue entries it shows and its notebook."""

    slug: str  # the page: <slug>.html
    title: str
    question: str
    notebook: str = ""  # the notebook's name (rq*.ipynb) without suffix
    names: tuple[str, ...] = ()  # the entries it shows, as patterns of their names
    experiments: tuple[int, ...] = ()  # and the entries whose last experiment is one of these (a plug-in's)


#: the page of what no question names: every run, the machines, the runs of experiments beyond the thesis's
RUNS = Question("runs", "Runs and machines", "Every run found, the machines and commits it ran on, the runs of "
                "experiments beyond the thesis's nine")


def page_names(questions) -> list[str]:
    """Every page the report writes for these questions (clear_report removes them before a new report)."""
    return [PAGE] + [f"{q.slug}.html" for q in (*questions, RUNS)]


def question_of(name: str, experiments: tuple[int, ...], questions) -> Question:
    """The page an entry goes on: the first question naming it, else the one of its last experiment, else RUNS."""
    for q in questions:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in q.names):
            return q
    for q in questions:
        if experiments and max(experiments) in q.experiments:
            return q
    return RUNS


# ============================================================================================ a table as written


@dataclass
class MarkdownTable:
    """A table .md as the report wrote it."""

    title: str = ""
    lines: list[str] = field(default_factory=list)  # the paragraphs: the runs line first
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    """A pipe-table row's cells (to_markdown writes each cell's own '|' as '/', so splitting is safe)."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_markdown_table(text: str) -> MarkdownTable:
    table = MarkdownTable()
    for line in text.splitlines():
        if line.startswith("### "):
            table.title = line[4:]
        elif line.startswith("|") and set(line) <= set("|-: "):
            continue  # the separator row
        elif line.startswith("|") and not table.header:
            table.header = _cells(line)
        elif line.startswith("|"):
            table.rows.append(_cells(line))
        elif line.startswith("- "):
            table.notes.append(line[2:])
        elif line.strip():
            table.lines.append(line)
    return table


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def with_code(text: str) -> str:
    """Text escaped, its `commands` set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


# ============================================================================================ what the report made


@dataclass
class Catalogue:
    """The catalogue's tables and figures as the pages need them (its entries by name, and how many runs an entry
    holds), its research questions (a page each) and the line said where no verdict is yet, handed in by the
    report: the page imports no catalogue, so it stands one layer above the tables and plug-ins instead of on top of
    them (tests/test_analysis_plugins.py counts the layers)."""

    tables: dict[str, Any]
    figures: dict[str, Any]
    runs_read: Callable[[pd.DataFrame, Any], int]
    questions: tuple[Question, ...] = ()
    no_verdicts: str = ""

    @classmethod
    def of(cls, tables, figures, runs_read, questions=(), findings=()) -> "Catalogue":
        return cls({e.name: e for e in tables}, {e.name: e for e in figures}, runs_read, tuple(questions),
                   no_verdicts(findings))

    def entry(self, name: str, kind: str | None = None):
        """The entry of that name (of that kind: "table" or "figure"), None where the catalogue declares none."""
        if kind:
            return (self.tables if kind == "table" else self.figures).get(name)
        return self.figures.get(name) or self.tables.get(name)


@dataclass
class PageInputs:
    """What the report made, as make_report holds it."""

    out: Path
    source: str  # the report's runs line
    df: pd.DataFrame
    tables: list[Path]
    figures: list[Path]
    captions: dict[str, tuple[str, str | None]]  # figure name -> (caption, its runs line)
    skipped: list[str]  # "name: why" of each figure not drawn
    problems: list[str]
    notebooks: list[Path]  # the notebooks' HTML pages
    catalogue: Catalogue  # the entries that made the tables and figures


@dataclass
class Item:
    """A table or figure the report wrote, as a page shows it."""

    name: str
    kind: str  # "table" or "figure"
    path: Path  # its .md or .png
    question: Question
    held: bool  # it holds runs (or is of the thesis's values alone by design): drawn, else a line what fills it
    thesis_only: bool = False
    fill: str = ""  # what would fill it


def fill_line(entry) -> str:
    """What would fill an entry that holds no runs: its experiments' `make expN`, after what they need first."""
    commands = ", ".join(f"`make exp{n}`" for n in sorted(set(entry.experiments)))
    return f"{entry.needs} {commands}".strip() if commands else "runs of its experiments"


def item(path: Path, kind: str, inputs: PageInputs) -> Item:
    """A written table (.md) or figure (.png) with its page and whether it holds runs; a file no catalogue entry
    declares is shown as it is, on RUNS."""
    entry = inputs.catalogue.entry(path.stem, kind)
    if entry is None:
        return Item(path.stem, kind, path, question_of(path.stem, (), inputs.catalogue.questions), True)
    thesis_only = getattr(entry, "thesis_only", False) or (kind == "figure" and not entry.experiments)
    held = thesis_only or inputs.catalogue.runs_read(inputs.df, entry) > 0
    page = question_of(entry.name, entry.experiments, inputs.catalogue.questions)
    return Item(entry.name, kind, path, page, held, thesis_only, fill_line(entry))


def items(inputs: PageInputs) -> list[Item]:
    """Every table and figure written, figures first (curves before tables), in the report's order."""
    pngs = [item(p, "figure", inputs) for p in inputs.figures if p.suffix == ".png"]
    mds = [item(p, "table", inputs) for p in inputs.tables if p.suffix == ".md"]
    return pngs + mds


# ============================================================================================ blocks


def table_html(table: MarkdownTable) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in table.header)
    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"


def table_block(md: Path) -> str:
    table = read_markdown_table(md.read_text())
    source = "".join(f'<p class="source">{esc(line)}</p>' for line in table.lines)
    notes = "<ul class=notes>" + "".join(f"<li>{esc(n)}</li>" for n in table.notes) + "</ul>" if table.notes else ""
    return (f'<article id="table-{esc(md.stem)}"><h3>{esc(table.title or md.stem)}</h3>{source}{table_html(table)}'
            f'{notes}<p class="files"><a href="tables/{esc(md.name)}">{esc(md.name)}</a> · '
            f'<a href="tables/{esc(md.stem)}.csv">{esc(md.stem)}.csv</a></p></article>')


def figure_block(png: Path, caption: str, source: str | None) -> str:
    line = f'<p class="source">{esc(source)}</p>' if source else ""
    return (f'<article id="figure-{esc(png.stem)}"><h3>{esc(caption)}</h3>{line}<figure>'
            f'<a href="figures/{esc(png.name)}"><img src="figures/{esc(png.name)}" alt="{esc(caption)}">'
            f'</a></figure><p class="files"><a href="figures/{esc(png.stem)}.pdf">'
            f"{esc(png.stem)}.pdf</a></p></article>")


def block(it: Item, inputs: PageInputs) -> str:
    if it.kind == "table":
        return table_block(it.path)
    return figure_block(it.path, *inputs.captions.get(it.name, (it.name, None)))


def title_of(it: Item, inputs: PageInputs) -> str:
    if it.kind == "figure":
        return inputs.captions.get(it.name, (it.name, None))[0]
    return read_markdown_table(it.path.read_text()).title or it.name


def unfilled_line(it: Item, inputs: PageInputs) -> str:
    """The line an entry holding no runs gets instead of being drawn: what would fill it, and its file."""
    folder = "tables" if it.kind == "table" else "figures"
    return (f"<li>{esc(title_of(it, inputs).rstrip('.'))}: none of these runs; {with_code(it.fill)} would fill it "
            f'(<a href="{folder}/{esc(it.path.name)}">{esc(it.path.name)}</a>: the thesis\'s values alone)</li>')


def nav(current: str, questions) -> str:
    """The same links on every page: the first page, each question's, the runs'."""
    pages = [(PAGE, "First page")] + [(f"{q.slug}.html", q.title) for q in (*questions, RUNS)]
    links = "".join(f'<li><a href="{href}"{" aria-current=page" if href == current else ""}>{esc(text)}</a></li>'
                    for href, text in pages)
    return f"<nav><ul>{links}</ul></nav>"


def html_page(title: str, current: str, body: str, questions) -> str:
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>{nav(current, questions)}{body}</main>"
            "</body></html>\n")


# ============================================================================================ the first page


def machine_runs(df: pd.DataFrame) -> dict[str, dict]:
    """machine label -> {"commits": how many of its runs each git commit made, "experiments": their numbers}."""
    found: dict[str, dict] = {}
    runs = df[(df["kind"] == "run") & (df["source"] == "run")].dropna(subset=["path"]) if len(df) else df
    for path, exp in sorted(set(zip(runs["path"], runs["exp"])) if len(runs) else []):
        commit = (reader.read_manifest(path) or {}).get("git_commit") or "unknown"
        mine = found.setdefault(machine_of(path), {"commits": Counter(), "experiments": set()})
        mine["commits"][commit[:7]] += 1
        mine["experiments"].add(int(exp))
    return found


def run_commits(df: pd.DataFrame) -> dict[str, Counter]:
    """machine label -> how many of its runs each git commit made (from the runs' manifests)."""
    return {label: found["commits"] for label, found in machine_runs(df).items()}


def machine_line(df: pd.DataFrame) -> str:
    """The machines and commits in one line: each machine's runs, experiments and its most frequent commit."""
    parts = []
    for label, found in sorted(machine_runs(df).items()):
        commits = found["commits"]
        top = sorted(commits.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        more = f" (+{len(commits) - 1} more: runs page)" if len(commits) > 1 else ""
        parts.append(f"{label}: {sum(commits.values())} runs of {nb.experiments_text(found['experiments'])} at commit "
                     f"{top}{more}")
    return " · ".join(parts) if parts else "No run folders: the tables hold the thesis's values only."


BADGES = {"yes": ("holds", "holds"), "no": ("fails", "fails"), "undecided": ("undecided", "undecided"),
          "diverged": ("diverged", "diverged"), "n/a": ("claims nothing", "other")}
VERDICT_COLUMNS = ("finding", "comparison", "holds", "difference [90 % interval]", "holds after Holm")


def badge(holds: str, hover: str) -> str:
    """A verdict's badge: holds / fails / undecided / diverged (claims nothing, a smoke run: said as they are)."""
    text, kind = BADGES.get(holds, (holds, "other"))
    return f'<span class="badge {kind}" title="{esc(hover)}">{esc(text)}</span>'


def no_verdicts(findings) -> str:
    """What would give the first verdict: each declared finding's first comparison, its control's runs first."""
    steps = [f"{f.name}: `make exp{c.control.experiment}`" + ("" if c.control.experiment == c.treated.experiment
                                                             else f" then `make exp{c.treated.experiment}`")
             for f in findings for c in f.comparisons[:1]]
    return "No verdicts yet: each finding compares two experiments' runs (" + "; ".join(steps) + ")."


def verdict_table(tables: Path, none_yet: str) -> str:
    """orderings.md's rows with one badge a row (its verdict, method and seeds on hover), or the line saying what
    would give the first verdict (none_yet: no_verdicts' line)."""
    path = tables / VERDICTS
    table = read_markdown_table(path.read_text()) if path.is_file() else MarkdownTable()
    if not table.rows:
        return f"<p>{with_code(none_yet)}</p>"
    at = {c: i for i, c in enumerate(table.header)}
    head = "".join(f"<th>{esc('verdict' if c == 'holds' else c)}</th>" for c in VERDICT_COLUMNS)
    rows = []
    for row in table.rows:
        hover = "; ".join(f"{c}: {row[at[c]]}" for c in ("verdict", "method", "seeds", "flag") if c in at and row[at[c]])
        cells = [badge(row[at[c]], hover) if c == "holds" else esc(row[at[c]]) for c in VERDICT_COLUMNS if c in at]
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    source = "".join(f'<p class="source">{esc(line)}</p>' for line in table.lines)
    return (f"{source}<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f'</div><p class="files">What the rows say, each finding, and every column: <a href="quality.html#table-'
            f'orderings">the model quality page</a>, <a href="tables/{VERDICTS}">tables/{VERDICTS}</a>.</p>')


def headline_section(inputs: PageInputs, by_name: dict[str, Item]) -> str:
    """The headline figure, or the line saying what would draw it."""
    it = by_name.get(HEADLINE)
    if it is not None and it.held:
        return f'<section id="headline">{block(it, inputs)}</section>'
    entry = inputs.catalogue.entry(HEADLINE, "figure")
    why = next((s.split(": ", 1)[1] for s in inputs.skipped if s.startswith(f"{HEADLINE}: ")),
               f"none of these runs is of its experiments: {fill_line(entry) if entry else 'runs'} draws it")
    return f'<section id="headline"><h2>Does it scale here?</h2><p>Not drawn: {with_code(why)}.</p></section>'


def questions_list(all_items: list[Item], inputs: PageInputs) -> str:
    """Each question's page, linked, with how many of its tables and figures hold runs."""
    lines = []
    for q in (*inputs.catalogue.questions, RUNS):
        mine = [it for it in all_items if it.question == q and it.name not in (HEADLINE, YOURS)]
        drawn = sum(it.held for it in mine)
        lines.append(f'<li><a href="{q.slug}.html">{esc(q.title)}</a>: {esc(q.question)} ({drawn} of {len(mine)} '
                     f"tables and figures hold runs)</li>")
    return f'<section id="questions"><h2>One page a research question</h2><ul>{"".join(lines)}</ul></section>'


def problems_section(inputs: PageInputs, all_items: list[Item]) -> str:
    """The problems found while loading and the tables of them, folded: a section of their own."""
    tables = "".join(table_block(it.path) for it in all_items if it.name in PROBLEM_TABLES)
    lines = "".join(f"<li>{esc(p)}</li>" for p in inputs.problems)
    if not lines and not tables:
        return ""
    return (f'<details id="problems"><summary>Problems found while loading ({len(inputs.problems)})</summary>'
            f"<ul>{lines}</ul>{tables}</details>")


def first_page(inputs: PageInputs, all_items: list[Item]) -> str:
    by_name = {it.name: it for it in all_items if it.kind == "figure" or it.name == YOURS}
    yours = by_name.get(YOURS)
    yours_html = (f'<section id="yours"><h2>This machine\'s runs beside the reference and the thesis</h2>'
                  f"{table_block(yours.path)}</section>") if yours is not None and yours.held else ""
    body = (f"<h1>Does it scale here?</h1>"
            f'<p class="machine" id="machines">{esc(machine_line(inputs.df))}</p>'
            + headline_section(inputs, by_name) + yours_html
            + f'<section id="verdicts"><h2>Verdicts</h2>{verdict_table(inputs.out / "tables", inputs.catalogue.no_verdicts)}</section>'
            + questions_list(all_items, inputs) + problems_section(inputs, all_items))
    return html_page("Scaling-study report", PAGE, body, inputs.catalogue.questions)


# ============================================================================================ a question's page


def notebook_line(q: Question, notebooks: list[Path]) -> str:
    page = next((p for p in notebooks if p.stem == q.notebook), None)
    if not q.notebook:
        return ""
    if page is None:
        return f'<p class="files">Its notebook, {esc(q.notebook)}, was not run with this report (--no-notebooks).</p>'
    return (f'<p class="files">Its notebook: <a href="{esc(page.name)}">{esc(page.stem)}</a> '
            f'(<a href="{esc(page.with_suffix(".ipynb").name)}">ipynb</a>)</p>')


def question_page(q: Question, inputs: PageInputs, all_items: list[Item]) -> str:
    """A question's tables and figures: those holding runs first, then the thesis's values alone, then a line each
    for the ones no run here fills and the figures not drawn (with why)."""
    mine = [it for it in all_items if it.question == q and it.name not in (HEADLINE, YOURS, *PROBLEM_TABLES)]
    ran = "".join(block(it, inputs) for it in mine if it.held and not it.thesis_only)
    thesis = "".join(block(it, inputs) for it in mine if it.thesis_only)
    unfilled = [unfilled_line(it, inputs) for it in mine if not it.held]
    skipped = [f"<li>{with_code(s)}</li>" for s in inputs.skipped if question_of(
        s.split(": ", 1)[0], experiments_of(s.split(": ", 1)[0], inputs.catalogue), inputs.catalogue.questions) == q]
    body = (f"<h1>{esc(q.title)}</h1><p class=question>{esc(q.question)}</p>{notebook_line(q, inputs.notebooks)}"
            + (f'<p class="source">{esc(inputs.source)}</p>{machines_section(inputs.df)}' if q == RUNS else "")
            + (f'<section id="drawn">{ran}</section>' if ran else f"<p>{with_code(none_line(q))}</p>")
            + (f"<section id=thesis><h2>The thesis's values</h2>{thesis}</section>" if thesis else "")
            + (f'<section id="unfilled"><h2>Not drawn: no run here fills them</h2><ul class=fill>{"".join(unfilled)}'
               "</ul></section>" if unfilled else "")
            + (f'<section id="not-drawn"><h2>Not drawn</h2><ul>{"".join(skipped)}</ul></section>' if skipped else ""))
    return html_page(f"{q.title}: scaling-study report", f"{q.slug}.html", body, inputs.catalogue.questions)


def none_line(q: Question) -> str:
    """What a question's page says where none of the runs is of it: what would fill it, where its experiments say."""
    commands = ", ".join(f"`make exp{n}`" for n in q.experiments)
    return "None of these runs is of this question" + (f": {commands} would fill this page." if commands else ".")


def experiments_of(name: str, catalogue: Catalogue) -> tuple[int, ...]:
    entry = catalogue.entry(name)
    return entry.experiments if entry else ()


def machines_section(df: pd.DataFrame) -> str:
    """Each machine the runs were measured on (a reference machine's description) and the commits they ran at."""
    described = {label: text for label, _, text in reference_machines()}
    entries = []
    for label, commits in sorted(run_commits(df).items()):
        listed = ", ".join(f"{c} ({n})" for c, n in sorted(commits.items(), key=lambda kv: (-kv[1], kv[0])))
        about = f"<dd>{esc(described[label])}</dd>" if label in described else ""
        entries.append(f"<dt>{esc(label)}: {sum(commits.values())} runs</dt>{about}"
                       f"<dd>Made at commit (runs): {esc(listed)}</dd>")
    body = f"<dl>{''.join(entries)}</dl>" if entries else "<p>No run folders: the tables hold the thesis's values only.</p>"
    return f'<section id="machines"><h2>Machines and commits</h2>{body}</section>'


def write_page(inputs: PageInputs) -> Path:
    """<out>/index.html and a page a question (<slug>.html); returns the first page's path."""
    all_items = items(inputs)
    for q in (*inputs.catalogue.questions, RUNS):
        (inputs.out / f"{q.slug}.html").write_text(question_page(q, inputs, all_items))
    path = inputs.out / PAGE
    path.write_text(first_page(inputs, all_items))
    return path


# nbconvert's lab template, less its scripts: require.js, MathJax and mermaid come from a CDN, and the page must
# open without a network (the notebooks draw no widgets, no math and no diagrams)
OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def notebook_pages(notebooks: list[Path]) -> list[Path]:
    """Each executed notebook as <name>.html beside it."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(extra_loaders=[DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})],
                            template_file="offline.html.j2")
    pages = []
    for notebook in notebooks:
        body, _ = exporter.from_filename(str(notebook))
        page = Path(notebook).with_suffix(".html")
        page.write_text(body)
        pages.append(page)
    return pages
