"""Writing a report (`python -m analysis report`, put together by analysis/catalogue.py's make_report): every
table and figure of the catalogue from the run folders and the reference data.

Writes <out>/tables/*.csv|md, <out>/figures/*.png|pdf, executes the notebooks <out>/rq*.ipynb (each also as
<out>/rq*.html), and puts it all on web pages: <out>/index.html, the first, and a page a research question
(analysis/page.py).
Works on an empty runs folder too: the tables then hold the thesis's values only, and the figures that the
reference data can draw (scaling, schedules, RQ2) are drawn from it.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .advisor import runs as advisor_runs  # noqa: E402
from . import figures as fg  # noqa: E402
from . import frozen as fz  # noqa: E402
from . import page as pg  # noqa: E402
from . import tables as tb  # noqa: E402
from .compare import made_from  # noqa: E402
from .entries import Inputs, thesis_source, titled  # noqa: E402
from .machines import REPO, default_runs_root, reference_machines, runs_label  # noqa: E402

COMMITTED_REPORT = REPO / "results"  # the committed report: the reference's tables/, figures/ and rq*.ipynb
REPORT_ROOT = COMMITTED_REPORT / "report"  # gitignored: the report of any other runs, a folder each
#: tables/ and figures/ files another command writes beside the report's (make cost, make advise, make
#: advise-local): a report keeps them when it clears
OTHER_WRITERS = frozenset({"cost.csv", "cost.md", "cost_totals.csv", "cost_totals.md", "advisor_validation.md",
                           "advisor_local.csv", "advisor_validation.png", "advisor_validation.pdf"})


def entry_source(inputs: Inputs, entry, source: str | None) -> str | None:
    """The runs line an entry carries: the report's, naming another reference machine's experiment only on the
    entries that read it (made_from's `experiments`, and of an entry that reads one edition, that edition's runs
    alone); a maker's own line (the thesis's) is kept."""
    if not source or not inputs.source or not source.startswith(inputs.source) or inputs.runs is None:
        return source
    read = inputs.df[entry.reads(inputs.df)] if entry.reads and len(inputs.df) else inputs.df
    return made_from(read, inputs.runs, experiments=entry.experiments) + source[len(inputs.source):]


def build_tables(inputs: Inputs, out: Path, entries) -> list[Path]:
    """Every table the catalogue declares that these inputs make; each says which runs it was made from."""
    written: list[Path] = []
    for entry in entries:
        frame = entry.make(inputs, entry)
        if frame is None:
            continue
        notes = entry.notes(inputs, frame) if callable(entry.notes) else list(entry.notes)
        shown = entry.shown(frame) if entry.shown else None
        written += tb.write_table(frame, out, entry.name, entry.title, notes or None,
                                   thesis_source(entry) if entry.thesis_only
                                   else entry_source(inputs, entry, inputs.source), shown)
    return written


def build_figures(inputs: Inputs, out: Path, entries, captions: dict | None = None) -> tuple[list[Path], list[str]]:
    """Every figure the catalogue declares, each with the line saying which runs (or thesis values) it was made
    from; and those not drawn, with why. captions: filled with each drawn figure's (title, runs line), which the web
    page shows as text (the PNG carries them as pixels)."""
    written: list[Path] = []
    skipped: list[str] = []
    for entry in entries:
        drawn = entry.make(inputs, entry)
        if isinstance(drawn, str):
            skipped.append(f"{entry.name}: {drawn}")
        elif drawn is not None:
            source = entry_source(inputs, entry, drawn.source)
            written.extend(fg.save(drawn.figure, out, entry.name, source))
            if captions is not None:
                captions[entry.name] = (figure_caption(inputs, entry), source)
    return written, skipped


def figure_caption(inputs: Inputs, entry) -> str:
    """A figure's heading on the web page: its title, and the thesis's figure it stands beside."""
    title = titled(inputs, entry) if entry.title else entry.name
    return f"{title} ({entry.thesis})" if entry.thesis else title


class ReportError(ValueError):
    """A report asked for that would overwrite what it must not: one line, exit 2."""


def report_folder(runs: Path) -> Path:
    """Where the report of `runs` goes. The committed report (results/tables, figures, rq*.ipynb) is the committed
    reference's, so only that reference's report is written there; any other runs' report goes to a gitignored
    folder of its own under results/report/, named after the runs folder (results/runs -> results/report/runs,
    results/quick -> results/report/quick), so a user's report never rewrites the committed one."""
    runs = Path(runs).resolve()
    if runs == committed_runs().resolve():
        return COMMITTED_REPORT
    try:
        name = runs.relative_to(COMMITTED_REPORT.resolve()).as_posix().replace("/", "-")
    except ValueError:
        name = runs.name
    return REPORT_ROOT / name


def committed_runs() -> Path:
    """The runs the committed report was made from: the first reference machine's folder."""
    machines = reference_machines()
    return machines[0][1] if machines else COMMITTED_REPORT / "reference"


def link_fits_for(runs: Path) -> Path:
    """The link fits a report's predictions use: the committed ones for the committed reference's runs (its report
    must redraw from the repository alone), else this machine's own cluster checks."""
    committed = Path(runs).resolve() == committed_runs().resolve()
    return advisor_runs.COMMITTED_LINK_FITS if committed else advisor_runs.advisor.CHECK_ROOT


def frozen_for(runs: Path, declared) -> tuple:
    """The superseded editions the plug-ins keep as files (analysis/frozen.py, `declared`) that the report of `runs`
    copies in: all of them for the committed reference, whose runs they were drawn from; none for any other runs."""
    return tuple(declared) if Path(runs).resolve() == committed_runs().resolve() else ()


def refuse_committed_place(runs: Path, out: Path) -> None:
    """Only the committed reference's runs may write the committed report (or anything under results/reference)."""
    out, base = out.resolve(), COMMITTED_REPORT.resolve()
    if Path(runs).resolve() == committed_runs().resolve():
        return
    if out == base or base / "reference" in (out, *out.parents):
        raise ReportError(f"analysis report: {out} holds the committed reference's report; the report of {runs} "
                          f"goes to {report_folder(runs)} (leave out --out)")


MADE_FROM = ".made_from"  # a report folder's note of the runs folder it reports (resolved), beside what it wrote


def refuse_other_runs(runs: Path, out: Path) -> None:
    """A report folder is named after its runs folder's base name (report_folder), so two runs folders of one name
    (/a/runs and /b/runs) would share it and the second would clear the first's report: refused in one line naming
    both instead. A folder without the note (written before it) is taken as this report's."""
    try:
        other = (out / MADE_FROM).read_text().strip()
    except OSError:
        return
    if other and other != str(Path(runs).resolve()):
        raise ReportError(f"analysis report: {out} holds the report of {other}, another runs folder; the report of "
                          f"{runs} would clear it: give it a folder of its own (python -m analysis report --runs "
                          f"{runs} --out DIR), or remove {out} first")


def note_runs(runs: Path, out: Path) -> None:
    """Note which runs folder `out` reports (refuse_other_runs reads it); the committed report needs none."""
    if Path(out).resolve() != COMMITTED_REPORT.resolve():
        out.mkdir(parents=True, exist_ok=True)
        (out / MADE_FROM).write_text(f"{Path(runs).resolve()}\n")


def clear_report(out: Path, pages: list[str]) -> None:
    """Remove what an earlier report wrote into `out` (tables, figures, notebooks, its pages), so nothing stale
    survives a new one: figures a run set can no longer draw, a comparison table of runs since removed. Files another
    command writes there (make cost's tables) are kept."""
    for folder in (out / "tables", out / "figures"):
        for path in sorted(folder.glob("*")) if folder.is_dir() else []:
            if path.is_file() and path.name not in OTHER_WRITERS:
                path.unlink()
    pages = [out / name for name in pages if (out / name).is_file()]
    for path in sorted([*out.glob("rq*.ipynb"), *out.glob("rq*.html"), *pages]):
        path.unlink()


def prepare(runs, out, pages: list[str]) -> tuple[Path, str, Path]:
    """(the runs folder, its label, the report's folder) of a report asked for: checked, the folder cleared of an
    earlier report (its pages: `pages`) and noted as the runs folder's. runs: a runs root; by default this machine's
    results/runs, or the committed reference when that is empty. out: by default report_folder(runs)."""
    if runs and not Path(runs).is_dir():  # a mistyped OUT= would otherwise give a report of nothing
        raise ReportError(f"analysis report: no runs folder {runs} (a study's --out / OUT=, e.g. results/runs, "
                          "results/quick or results/reference/vm-2cpu)")
    runs, origin = (Path(runs), runs_label(runs)) if runs else default_runs_root()
    out = Path(out) if out else report_folder(runs)
    refuse_committed_place(runs, out)
    refuse_other_runs(runs, out)
    clear_report(out, pages)
    note_runs(runs, out)
    return runs, origin, out


def write_report(inputs: Inputs, out: Path, catalogue: pg.Catalogue, notebooks: dict, logs=None,
                 frozen=()) -> dict:
    """Every table and figure of the catalogue and the frozen editions' kept files (frozen_for), the notebooks (name
    -> cells; executed while the figures are drawn), the index and the web pages, into `out`; returns what was
    done."""
    df, source = inputs.df, inputs.source
    tables = build_tables(inputs, out / "tables", catalogue.tables.values()) + fz.copy_into(frozen, out, "tables")
    worker, nb_result = _start_notebooks(out, inputs.runs, logs, notebooks) if notebooks else (None, {})
    captions: dict = {}
    figs, skipped = build_figures(inputs, out / "figures", catalogue.figures.values(), captions)
    figs += fz.copy_into(frozen, out, "figures")
    captions.update(fz.captions(frozen))
    problems, breaches = invariant_breaches(list(df.attrs.get("problems", [])), out / "tables", source)
    tables += breaches
    write_index(out, source, tables, figs, skipped, problems)
    nbs: list[Path] = []
    if worker is not None:
        worker.join()
        if "error" in nb_result:
            raise nb_result["error"]
        nbs = nb_result["paths"]
    catalogue = replace(catalogue, tables={**catalogue.tables, **{e.name: e for e in fz.entries(frozen, "tables")}},
                        figures={**catalogue.figures, **{e.name: e for e in fz.entries(frozen, "figures")}})
    page = pg.write_page(pg.PageInputs(out, source, df, tables, figs, captions, skipped, problems,
                                       pg.notebook_pages(nbs), catalogue))
    return {"runs": int((df["kind"] == "run").sum()), "tables": len(tables), "figures": len(figs),
            "skipped": skipped, "problems": problems, "notebooks": [str(p) for p in nbs], "page": str(page),
            "out": str(out)}


def say(info: dict, runs: Path, origin: str) -> None:
    """What a report did, in a few lines."""
    print(f"report: {info['runs']} runs from {runs} ({origin}), {info['tables']} table files, {info['figures']} figure "
          f"files, {len(info['notebooks'])} notebooks in {info['seconds']} s")
    for p in info["problems"]:
        print(f"  problem: {p}")
    print(f"report written to {_shown(Path(info['out']))}/ (tables/README.md lists it); in a browser: "
          f"{_shown(Path(info['page']))}")


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def _start_notebooks(out: Path, runs: Path, logs, notebooks: dict):
    """The notebooks run in their own kernels (a thread) while this process draws the figures."""
    import IPython  # noqa: F401  (imported here, not half-way in the worker thread while pyplot looks for it)

    from .notebooks import run_notebooks

    plt.switch_backend("Agg")
    result: dict = {}

    def _work():
        try:
            result["paths"] = run_notebooks(out, runs, logs, notebooks)
        except Exception as exc:  # reported after the figures are done
            result["error"] = exc

    worker = threading.Thread(target=_work, name="notebooks")
    worker.start()
    return worker, result


BREACH = ": breaks "  # contract/reader.py's problem line of a broken invariant: "<path>: breaks <name>: <what>"
BREACHES = "run_invariants"


def invariant_breaches(problems: list[str], tables: Path, source: str) -> tuple[list[str], list[Path]]:
    """The run folders whose records break the run record's invariants (contract/invariants.py), a row each
    breach, into tables/run_invariants.csv and .md; the problems keep one line that counts them and names the
    table. Nothing is written where none breaks one. (problems without the breaches, the files written)"""
    rows = [(path, *rest.split(": ", 1)) for path, rest in (p.split(BREACH, 1) for p in problems if BREACH in p)]
    if not rows:
        return problems, []
    table = pd.DataFrame(rows, columns=["run", "invariant", "what"])
    tables.mkdir(parents=True, exist_ok=True)
    csv, md = tables / f"{BREACHES}.csv", tables / f"{BREACHES}.md"
    table.to_csv(csv, index=False)
    md.write_text(tb.to_markdown(table, "Run folders whose records break the run record's invariants",
                                 [f"{table['run'].nunique()} run folder(s), read as written (never repaired); the "
                                  "invariants: contract/invariants.py."], source) + "\n")
    kept = [p for p in problems if BREACH not in p]
    return kept + [f"{table['run'].nunique()} run folder(s) break the run record's invariants "
                   f"({len(table)} breach(es)): tables/{md.name}"], [csv, md]


def write_index(out: Path, source: str, tables, figs, skipped, problems) -> None:
    """tables/README.md: which runs, and every table and figure written or not drawn (with why)."""
    index = ["# Report index", "", source, "",
             "## Tables", ""] + [f"- {p.name}" for p in tables if p.suffix == ".md"] + \
            ["", "## Figures", ""] + [f"- {p.name}" for p in figs if p.suffix == ".png"] + \
            ["", "## Not drawn", ""] + [f"- {s}" for s in skipped] + \
            ["", "## Problems found while loading", ""] + [f"- {p}" for p in problems]
    (out / "tables").mkdir(parents=True, exist_ok=True)
    (out / "tables" / "README.md").write_text("\n".join(index) + "\n")
