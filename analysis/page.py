"""The report as one web page, <report>/index.html (`make report`; the committed one, results/index.html, by `make
reference-report`): the verdicts first, then the machines and commits the runs were made on, the notebooks (each
converted to HTML beside its .ipynb), every table and every figure with the line naming the runs it was made from.

Self-contained: one file of HTML and CSS, no script, nothing fetched from a network; it links only files of the
report beside it (figures/*.png shown by relative path, tables/*.md|csv, the notebooks' .html and .ipynb), so the
folder opens from disk or from any web server. Deterministic like the rest of the report (no clock, no host name of
the machine drawing it), so `make reference-report` redraws the committed page byte for byte.

The tables are read back from the markdown the report wrote (tables.to_markdown's layout: a "### " title, the
runs line, a pipe table, "- " notes), so the page shows exactly what the .md shows.
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from contract import reader

from .machines import machine_of, reference_machines
from .headline import HEADLINE

PAGE = "index.html"
VERDICTS = "orderings.md"  # the table whose summary lines are the verdicts (README's headline too)

CSS = """
:root { --ink: #1d2127; --muted: #5b6470; --line: #d8dde3; --band: #f4f6f8; --accent: #1f5fa8; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; line-height: 1.5;
       font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 78rem; margin: 0 auto; padding: 1rem clamp(0.75rem, 3vw, 2.5rem) 4rem; }
h1 { font-size: clamp(1.4rem, 4vw, 2rem); margin: 0.5rem 0; }
h2 { font-size: 1.35rem; margin-top: 2.5rem; border-bottom: 2px solid var(--line); padding-bottom: 0.25rem; }
h3 { font-size: 1.05rem; margin: 2rem 0 0.25rem; }
a { color: var(--accent); }
nav ul { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; padding: 0; list-style: none; }
.source { color: var(--muted); font-size: 0.875rem; margin: 0.25rem 0 0.5rem; }
.files { font-size: 0.875rem; }
.verdicts li { margin-bottom: 0.6rem; }
dt { font-weight: 600; margin-top: 0.75rem; }
dd { margin: 0.2rem 0 0 1.25rem; color: var(--muted); font-size: 0.9rem; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; border: 1px solid var(--line); }
table { border-collapse: collapse; font-size: 0.8125rem; font-variant-numeric: tabular-nums; }
th, td { padding: 0.3rem 0.55rem; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: var(--band); position: sticky; top: 0; }
tbody tr:nth-child(even) { background: #fafbfc; }
figure { margin: 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
.notes { font-size: 0.875rem; color: var(--muted); }
@media (max-width: 40rem) { body { font-size: 15px; } th, td { padding: 0.25rem 0.4rem; } }
"""


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


def verdicts_section(tables_dir: Path) -> str:
    """The findings' summary lines of orderings.md (the README's headline), first on the page."""
    path = tables_dir / VERDICTS
    if not path.is_file():
        return ('<section id="verdicts"><h2>Verdicts</h2><p>No verdicts: these runs hold none of the quality '
                "experiments the findings compare (4-9, 12).</p></section>")
    lines = [line[2:] for line in HEADLINE.summary(path.read_text())]
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    said = f'<ul class="verdicts">{items}</ul>' if lines else "<p>No finding has runs on both sides yet.</p>"
    return (f'<section id="verdicts"><h2>Verdicts</h2>{said}'
            f'<p class="files">Every row with its interval: <a href="tables/{VERDICTS}">tables/{VERDICTS}</a> '
            f'(<a href="tables/{Path(VERDICTS).stem}.csv">csv</a>).</p></section>')


def run_commits(df: pd.DataFrame) -> dict[str, Counter]:
    """machine label -> how many of its runs each git commit made (from the runs' manifests)."""
    found: dict[str, Counter] = {}
    paths = df.loc[(df["kind"] == "run") & (df["source"] == "run"), "path"].dropna().unique() if len(df) else []
    for path in sorted(paths):
        commit = (reader.read_manifest(path) or {}).get("git_commit") or "unknown"
        found.setdefault(machine_of(path), Counter())[commit[:7]] += 1
    return found


def machines_section(df: pd.DataFrame) -> str:
    """Each machine the runs were measured on (a reference machine's description) and the commits they ran at."""
    described = {label: text for label, _, text in reference_machines()}
    items = []
    for label, commits in sorted(run_commits(df).items()):
        listed = ", ".join(f"{c} ({n})" for c, n in sorted(commits.items(), key=lambda kv: (-kv[1], kv[0])))
        about = f"<dd>{esc(described[label])}</dd>" if label in described else ""
        items.append(f"<dt>{esc(label)}: {sum(commits.values())} runs</dt>{about}"
                     f"<dd>Made at commit (runs): {esc(listed)}</dd>")
    body = f"<dl>{''.join(items)}</dl>" if items else "<p>No run folders: the tables hold the thesis's values only.</p>"
    return f'<section id="machines"><h2>Machines and commits</h2>{body}</section>'


def notebooks_section(pages: list[Path]) -> str:
    if not pages:
        return ('<section id="notebooks"><h2>Notebooks</h2><p>Not run with this report '
                "(<code>--no-notebooks</code>).</p></section>")
    items = "".join(f'<li><a href="{esc(p.name)}">{esc(p.stem)}</a> '
                    f'(<a href="{esc(p.with_suffix(".ipynb").name)}">ipynb</a>)</li>' for p in pages)
    return f'<section id="notebooks"><h2>Notebooks, one per research question</h2><ul>{items}</ul></section>'


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


def listed(title: str, anchor: str, lines: list[str]) -> str:
    if not lines:
        return ""
    return f'<section id="{anchor}"><h2>{esc(title)}</h2><ul>' + "".join(f"<li>{esc(x)}</li>" for x in lines) + \
        "</ul></section>"


@dataclass
class PageInputs:
    """What the report made, as make_report holds it."""

    out: Path
    source: str  # the report's runs line
    df: pd.DataFrame
    tables: list[Path]
    figures: list[Path]
    captions: dict[str, tuple[str, str | None]]  # figure name -> (caption, its runs line)
    skipped: list[str]
    problems: list[str]
    notebooks: list[Path]  # the notebooks' HTML pages


def write_page(inputs: PageInputs) -> Path:
    """<out>/index.html."""
    mds = [p for p in inputs.tables if p.suffix == ".md"]
    pngs = [p for p in inputs.figures if p.suffix == ".png"]
    nav = ('<nav><ul><li><a href="#verdicts">Verdicts</a></li><li><a href="#machines">Machines</a></li>'
           '<li><a href="#notebooks">Notebooks</a></li><li><a href="#tables">Tables</a></li>'
           '<li><a href="#figures">Figures</a></li></ul></nav>')
    tables = "".join(table_block(md) for md in mds)
    figures = "".join(figure_block(png, *inputs.captions.get(png.stem, (png.stem, None))) for png in pngs)
    body = (f"<h1>Large-scale deep learning by distributed training: the report</h1>"
            f'<p class="source">{esc(inputs.source)}</p>{nav}'
            + verdicts_section(inputs.out / "tables") + machines_section(inputs.df)
            + notebooks_section(inputs.notebooks)
            + f'<section id="tables"><h2>Tables</h2>{tables}</section>'
            + f'<section id="figures"><h2>Figures</h2>{figures}</section>'
            + listed("Not drawn", "not-drawn", inputs.skipped)
            + listed("Problems found while loading", "problems", inputs.problems))
    page = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>Scaling-study report</title><style>{CSS}</style></head>\n<body><main>{body}</main></body></html>\n")
    path = inputs.out / PAGE
    path.write_text(page)
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
    for nb in notebooks:
        body, _ = exporter.from_filename(str(nb))
        page = Path(nb).with_suffix(".html")
        page.write_text(body)
        pages.append(page)
    return pages
