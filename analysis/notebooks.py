"""The research-question notebooks: written from the cell lists the plug-ins declare (NOTEBOOKS: file name -> cells,
each ("md" | "code", its source), None for the cell that loads the runs), executed with nbclient.

Same inputs -> same outputs: fixed cell ids and metadata, no execution timestamps (record_timing=False),
figures embedded as PNGs rendered with fixed metadata, paths relative to the notebook, execution counts
1..N. The kernel is this interpreter (sys.executable), registered under the name ``python3`` in a temporary
JUPYTER_PATH entry, so no system-wide kernelspec is needed.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def _setup(runs_rel: str, logs_rel) -> str:
    return (f"RUNS, LOGS = {runs_rel!r}, {logs_rel!r}  # relative to this notebook\n"
            "import analysis as an\n"
            "df = an.load_report_study(RUNS, LOGS)\nref = an.load_reference()\n"
            "print(an.made_from(df, RUNS))\n"
            "an.overview(df)")


def build_notebook(cells, runs_rel: str, logs_rel) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNEL), "language_info": {"name": "python"}}
    for i, (kind, src) in enumerate(cells):
        src = _setup(runs_rel, logs_rel) if src is None else src
        cell = nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
        cell["id"] = f"cell-{i:02d}"
        nb.cells.append(cell)
    return nb


def _kernel_dir() -> str:
    """A JUPYTER_PATH entry whose 'python3' kernel is this interpreter."""
    d = Path(tempfile.mkdtemp(prefix="analysis-kernel-"))
    k = d / "kernels" / "python3"
    k.mkdir(parents=True)
    (k / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                 "--HistoryManager.enabled=False", "--IPKernelApp.log_level=ERROR"],
        "display_name": KERNEL["display_name"], "language": "python"}))
    return str(d)


def _normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop what differs between executions of the same inputs."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)
    lang = nb.metadata.get("language_info", {})
    nb.metadata["language_info"] = {k: lang[k] for k in ("name", "file_extension", "mimetype") if k in lang}
    nb.metadata["kernelspec"] = dict(KERNEL)
    return nb


async def _execute_all(notebooks, cwd: Path):
    # coalesce_streams: the kernel chunks printed text by timing; one output per stream keeps reruns byte-identical.
    clients = [NotebookClient(nb, timeout=300, kernel_name="python3", record_timing=False, coalesce_streams=True,
                              resources={"metadata": {"path": str(cwd)}}, allow_errors=False) for nb in notebooks]
    await asyncio.gather(*(c.async_execute() for c in clients))


def execute_all(notebooks, cwd: Path):
    """Execute notebooks concurrently (one kernel each) in `cwd`; returns them normalised."""
    old = os.environ.get("JUPYTER_PATH")
    kdir = _kernel_dir()
    os.environ["JUPYTER_PATH"] = kdir + (os.pathsep + old if old else "")
    try:
        asyncio.run(_execute_all(notebooks, cwd))
    finally:
        if old is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old
        shutil.rmtree(kdir, ignore_errors=True)
    return [_normalise(nb) for nb in notebooks]


def run_notebooks(out: str | Path, runs: str | Path, logs, notebooks: dict) -> list[Path]:
    """Write and execute the notebooks (file name -> cells) into `out` (the notebooks' folder); returns their
    paths."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs_rel = os.path.relpath(Path(runs).resolve(), out)
    logs_rel = [os.path.relpath(Path(p).resolve(), out) for p in logs] if logs else None
    done = execute_all([build_notebook(cells, runs_rel, logs_rel) for cells in notebooks.values()], out)
    for name, nb in zip(notebooks, done):
        nbformat.write(nb, str(out / name))
    return [out / name for name in notebooks]
