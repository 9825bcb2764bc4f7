"""The research-question notebooks: written from cell lists here, executed with nbclient.

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


RQ1 = [
    ("md", "# RQ1 — smaller vs larger per-GPU batch size\n\n"
           "*What are the implications of using smaller per GPU worker batch sizes vs. larger ones in terms of "
           "scaling performance, training time (wall clock) and efficient resource utilisation?* (thesis, 6.1)\n\n"
           "Evidence: Horovod+TensorFlow throughput at per-GPU batch 32/64/128 (Tables 1, 4, 7; Figures 14-16: the "
           "thesis's values, and ours where TensorFlow ran: Horovod+TensorFlow and TensorFlow's "
           "MultiWorkerMirroredStrategy, `make setup-tf`), "
           "experiment 7 (batch 32) against experiment 6 (batch 128) on 32 GPUs (Tables 12-13, Figure 27). "
           "This notebook is executed by `make report`; it only calls `analysis`."),
    ("code", None),
    ("md", "## Throughput and speed-up by per-GPU batch size (thesis data, and ours where present)"),
    ("code", "scaling = an.tables.scaling_table(df, ref)\n"
             "an.speedup_pivot(scaling, an.tables.TENSORFLOW)"),
    ("code", "an.scaling_figure(scaling, 'Horovod+TensorFlow by per-GPU batch (Figures 14-16)', "
             "an.tables.TENSORFLOW)"),
    ("md", "## Our throughput runs by per-GPU batch size"),
    ("code", "an.tables.throughput_summary(df)"),
    ("md", "## Wall-clock: per-GPU batch 32 (experiment 7) vs 128 (experiment 6), 32 GPUs"),
    ("code", "an.batch_size_wallclock(df, ref)"),
    ("md", "## Utilisation over time (thesis Figures 22, 23 and 27), from the runs' telemetry"),
    ("code", "an.show_utilisation(df)"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq1_reading(df, ref))"),
]

RQ2 = [
    ("md", "# RQ2 — does Horovod speed up PyTorch's distributed training?\n\n"
           "The thesis answers yes: Horovod+PyTorch reached 6104 images/s on 32 GPUs (29.4x) against PyTorch's "
           "5697 (27.5x) (Tables 8-9, Figure 17). Its throughput formula divides by the running-mean batch time at "
           "batch 199, so the first batch — 18.5 s (PyTorch) vs 9.7 s (Horovod) on 2 GPUs, 21.9 s vs 9.95 s on "
           "32 GPUs (Figures 12-13), mostly data loading — is averaged into the 200-batch mean."),
    ("code", None),
    ("md", "## The thesis's numbers (Tables 2/3, 5/6, 8/9) and speed-ups"),
    ("code", "scaling = an.tables.scaling_table(df, ref)\n"
             "an.speedup_pivot(scaling, ['pytorch', 'horovod+pytorch'])"),
    ("code", "an.scaling_figure(scaling, 'PyTorch and Horovod+PyTorch (Figure 17)', ['pytorch', 'horovod+pytorch'])"),
    ("md", "## Re-analysis: the same tables without the first batch\n\n"
           "With n = 200 batches and thesis throughput T, the summed batch time is 200·B·G/T; removing the first "
           "batch t₀ leaves (200·B·G/T − t₀)/199 per batch. The thesis prints t₀ only for 2 and 32 GPUs."),
    ("code", "rq2 = an.reference.rq2_steady_state(ref)\nrq2"),
    ("code", "fig, ax = an.subplots(1, 1)\nan.figures.plot_steady_state(rq2, ax=ax)\nan.show(fig)"),
    ("code", "print(an.rq2_verdict(rq2))"),
    ("md", "## What this does to the thesis's answer\n\n"
           "Left out of the mean, the first batch no longer favours Horovod: at 2 and at 32 GPUs — the only GPU "
           "counts for which the thesis prints the first batch — the PyTorch script's throughput is about 2 % "
           "*higher* than Horovod's (figure and lines above), where the thesis's formula has it 5-7 % lower. The "
           "thesis's 'Horovod scales better' (29.4x vs 27.5x on 32 GPUs) measures how long each script takes to "
           "start an epoch (the data-loader start-up in its first batch), not how fast gradients are exchanged. "
           "So the evidence for RQ2 becomes: no difference in steady-state training throughput was shown; the "
           "PyTorch script's slower epoch start-up costs time once per epoch. Over 90 epochs that start-up gap is "
           "about 18 minutes at 32 GPUs (table below), part of the 42-minute gap between the two scripts' 90-epoch "
           "wall-clock in Table 12 (experiment 6). Caveat: the first-batch times come from one log excerpt each "
           "(Figures 12-13); for 4-24 GPUs the thesis gives none, so those rows are not re-estimated."),
    ("code", "an.first_batch_penalty(ref)"),
    ("md", "## Our runs (same formula and the steady-state estimate from per-iteration records)"),
    ("code", "an.tables.throughput_summary(df)"),
    ("md", "## The frameworks in our runs: PyTorch DDP, Horovod+PyTorch, Horovod+TensorFlow and TensorFlow's "
           "MultiWorkerMirroredStrategy, each where it ran (the 'Made from' line above names the runs)"),
    ("code", "an.frameworks.framework_table(df)"),
    ("code", "an.markdown(an.frameworks.frameworks_reading(df))"),
]

RQ3 = [
    ("md", "# RQ3 — model quality under large global batches\n\n"
           "Does training on up to 32 GPUs (global batch up to 4096) keep ResNet-50's accuracy, with the linear "
           "scaling rule and warm-up? Experiments 4-9, Tables 10-15 (the text calls them 11-16), Figures 18-30."),
    ("code", None),
    ("md", "## Best validation accuracy: thesis and ours (mean ± std over seeds)"),
    ("code", "an.quality_overview(df, ref)"),
    ("md", "## Do the thesis's three findings hold in our runs? (90 % intervals of the difference in best top-1 "
           "against the scale's declared margin: equivalent, worse, better or inconclusive)"),
    ("md", "One line a comparison: how its interval was computed (paired by seed or Welch), whether it supports the "
           "finding on its own and after Holm's correction over the finding's rows, and whether it gained seeds "
           "after a look (every column: `verdicts`, results/tables/orderings.csv)."),
    ("code", "verdicts = an.orderings(df, ref)\nan.verdict_table(verdicts)"),
    ("md", "## The local 32-worker gap and optimizer steps\n\n"
           "The miniature at 72 epochs instead of 18 (experiment 10, `experiments/10_more_steps_pilot`): the 32-worker runs take "
           "4,500 steps instead of 1,125. Best top-1 and last-epoch training loss, mean ± sd over seeds."),
    ("code", "an.pilot_summary(RUNS + \"/10_more_steps_pilot\")"),
    ("md", "## Learning-rate schedules of experiments 4-9"),
    ("code", "fig = an.schedules_figure(df)\nan.show(fig)"),
    ("md", "## Training and validation error per epoch (only experiments with runs)"),
    ("code", "an.error_figures(df, ref)"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq3_reading(verdicts, ref))"),
    ("code", "an.markdown(an.baseline_rate_note(df) or 'The 1-worker baseline runs at the best rate of its sweep "
             "(experiment 11), where there is one.')"),
]

RQ4 = [
    ("md", "# RQ4 — past the thesis's 4k batch: where linear scaling with warm-up breaks, and LARS, LAMB, RAdam\n\n"
           "The thesis stops at 32 GPUs x 128 = 4,096 images a step. Experiment 12 (`experiments/12_large_batch`) "
           "runs SGD with linear scaling and gradual warm-up, LARS, LAMB and RAdam at 32-256 workers (locally "
           "x 4 images: 128-1,024; 4k-32k at the thesis and gpu scales), each optimizer at the base rate its "
           "declared seed-0 sweep chose, 3 seeds, against experiment 5's 1-worker baseline with the findings' "
           "equivalence test. What is compared is each optimizer's recipe (the reading says which rates were "
           "tuned); the gradient noise scale (`make noise-scale`) is drawn beside it."),
    ("code", None),
    ("md", "## Best top-1 per optimizer and global batch (mean and 90 % interval over seeds)"),
    ("code", "points = an.study_points(df)\npoints"),
    ("md", "## Verdicts against experiment 5's 1-worker baseline"),
    ("code", "verdicts = an.orderings(df, ref)\n"
             "an.verdict_table(verdicts[verdicts['experiment'] == 12])"),
    ("code", "fig = an.differences_figure(verdicts, points, an.findings.margins())\n"
             "an.show(fig) if fig is not None else print('no experiment 12 verdicts')"),
    ("md", "## The gradient noise scale of the same model and data, measured on the study's runs"),
    ("code", "noise = an.noise_scales()\nnoise"),
    ("code", "fig = an.large_batch_figure(df, an.findings.margins(), noise)\n"
             "an.show(fig) if fig is not None else print('no experiment 12 study runs')"),
    ("md", "## Reading"),
    ("code", "an.markdown(an.rq4_reading(verdicts, points, noise))"),
    ("md", "## Once SGD is tuned: experiment 13's SGD (its first edition, frozen), each batch at its own rate, beside "
           "these recipes\n\n"
           "Steps to experiment 13's target (50 % top-1), the measure of `rq5_critical_batch.ipynb`: experiment 12's "
           "runs read at that target, beside SGD tuned per batch (no decay)."),
    ("code", "an.exp13_first_edition.show('readings/tuned_beside_recipes.md')"),
    ("md", "## Once both are tuned: experiment 13's LAMB beside its SGD (its first edition, frozen), each batch at "
           "its own rate (Nado et al.)"),
    ("code", "an.exp13_first_edition.show('readings/tuned_optimizers.md')"),
]

RQ5 = [
    ("md", "# RQ5 — where linear scaling really stops: steps to a target accuracy per batch, each batch tuned\n\n"
           "The thesis takes RQ3's upper bound on the global batch from the literature (8,192 for ILSVRC-2012, "
           "Goyal et al.). Experiment 13 (`experiments/13_steps_to_target`, declared before any run) measures the "
           "miniature's: the optimizer steps until the validation top-1 first reaches the declared target, for "
           "global batches from the 1-worker batch to 16x the thesis's 4k stand-in, SGD with momentum and LAMB, "
           "each batch at the rate chosen for it on a held-out split of the training set; McCandlish et al.'s "
           "S = S_min (1 + B_noise / B) is fitted to the curve. Its second edition "
           "(`declared_2026-11-28-edition2.txt`) counts steps every k steps (k <= 5 % of the steps), on 5 seeds a "
           "batch, with intervals that hold the fit's misfit, and names regimes only where they allow it; the first "
           "edition (whole epochs, 3 seeds) is superseded by it and shown below as it was last drawn (kept as files: "
           "results/frozen/exp13_edition1/SUPERSEDED.md)."),
    ("code", None),
    ("md", "## Second edition: steps to the target per optimizer and batch, counted every k steps"),
    ("code", "cells = an.steps_cells_table(df)\n"
             "an.markdown('No second-edition study run has finished yet.') if cells is None else cells"),
    ("code", "fig = an.steps_figure_e2(df)\n"
             "an.show(fig) if fig is not None else an.markdown('Not drawn: no second-edition study run yet.')"),
    ("md", "## Second edition: reading, from the fit"),
    ("code", "an.markdown(an.rq5_reading_e2(df))"),
    ("md", "## Second edition, step 1: every rate on its selection seeds, the declared tie rule and the decision"),
    ("code", "rates = an.rate_selection_table(df)\n"
             "an.markdown('No second-edition selection run has finished yet.') if rates is None else rates"),
    ("md", "## First edition (superseded by the second): step 1, the rate chosen for each batch on the held-out "
           "split (never the validation set)"),
    ("code", "an.exp13_first_edition.show('tables/exp13_rate_selection.md')"),
    ("md", "## First edition (superseded): steps to the target per optimizer and global batch, in whole epochs"),
    ("code", "an.exp13_first_edition.show('tables/exp13_steps_to_target.md')"),
    ("code", "an.exp13_first_edition.show('figures/exp13_steps_to_target.png')"),
    ("md", "## First edition (superseded): reading, by its own rules as declared then"),
    ("code", "an.exp13_first_edition.show('readings/rq5_reading.md')"),
]


NOTEBOOKS = {"rq1_batch_size.ipynb": RQ1, "rq2_horovod_speedup.ipynb": RQ2, "rq3_model_quality.ipynb": RQ3,
             "rq4_large_batch.ipynb": RQ4, "rq5_critical_batch.ipynb": RQ5}


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


def run_notebooks(out: str | Path, runs: str | Path, logs=None) -> list[Path]:
    """Write and execute the RQ notebooks into `out` (the notebooks' folder); returns their paths."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs_rel = os.path.relpath(Path(runs).resolve(), out)
    logs_rel = [os.path.relpath(Path(p).resolve(), out) for p in logs] if logs else None
    done = execute_all([build_notebook(cells, runs_rel, logs_rel) for cells in NOTEBOOKS.values()], out)
    for name, nb in zip(NOTEBOOKS, done):
        nbformat.write(nb, str(out / name))
    return [out / name for name in NOTEBOOKS]
