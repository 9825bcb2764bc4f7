"""`python -m analysis report`: every thesis table and figure from the run folders and the reference data.

Writes <out>/tables/*.csv|md, <out>/figures/*.png|pdf and executes the notebooks <out>/rq*.ipynb.
Works on an empty runs folder too: the tables then hold the thesis's values only, and the figures that the
reference data can draw (scaling, schedules, RQ2) are drawn from it.
"""
from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from . import cost  # noqa: E402
from . import figures as fg  # noqa: E402
from . import findings as fd  # noqa: E402
from . import large_batch as lb  # noqa: E402
from . import reference as rf  # noqa: E402
from . import tables as tb  # noqa: E402
from .compare import (REPO, default_runs_root, machine_cores, made_from, reference_machines,  # noqa: E402
                      report_comparison, runs_label)
from .readings import finding_summary, verdict_table  # noqa: E402
from .runs import load_study  # noqa: E402
from .smoke import smoke_paths  # noqa: E402

COMMITTED_REPORT = REPO / "results"  # the committed report: the reference's tables/, figures/ and rq*.ipynb
REPORT_ROOT = COMMITTED_REPORT / "report"  # gitignored: the report of any other runs, a folder each
#: tables/ files another command writes beside the report's (make cost): a report keeps them when it clears
OTHER_WRITERS = frozenset({"cost.csv", "cost.md", "cost_totals.csv", "cost_totals.md"})

#: the line a figure carries when it draws the thesis's values only: never "Made from N runs (this machine)"
THESIS_SOURCE = "Made from the thesis's values (no runs)."
SCALE_NOTE = ("Rows whose scale is not 'thesis' come from runs at another scale (config.json \"scale\"): their "
              "numbers are not comparable with the thesis's and are not placed beside them.")


# ============================================================================================ tables


def build_tables(df: pd.DataFrame, ref: pd.DataFrame, out: Path, source: str | None = None) -> list[Path]:
    """Every table; source: the line each says which runs it was made from."""
    def write(tab, name, title=None, notes=None, shown=None):
        return tb.write_table(tab, out, name, title, notes, source, shown)

    written: list[Path] = []
    for t in rf.THROUGHPUT_TABLES:
        tab = tb.throughput_table(df, ref, t)
        notes = ["thesis_images_per_s: the thesis's value; ours_thesis_formula: per-GPU batch x GPUs / running-mean "
                 "batch time at batch 199; ours_steady: the same without the first warm-up batches; the speed-ups divide "
                 "each by our 1-GPU run's.", SCALE_NOTE]
        written += write(tab, f"table{t:02d}", f"Table {t}. {rf.CAPTIONS[t]}", notes)
    for t in rf.QUALITY_TABLES:
        tab = tb.quality_table(df, ref, t)
        notes = [f"Numbered as its caption; the thesis's running text and list of tables call it Table "
                 f"{rf.TEXT_NUMBER[t]}.",
                 "ours_top1/ours_top5: best validation accuracy (percent), mean over the configuration's completed "
                 "runs (seeds), ± sample std; n_runs: how many; diverged or half-written runs are counted in "
                 "status, not averaged.", SCALE_NOTE]
        written += write(tab, f"table{t:02d}", f"Table {t}. {rf.CAPTIONS[t]}", notes)
    written += write(tb.scaling_table(df, ref), "scaling",
                     "Throughput, speed-up over 1 GPU, scaling efficiency and 90-epoch wall-clock estimate")
    rq2 = rf.rq2_steady_state(ref)
    written += write(rq2, "rq2_steady_state",
                     "RQ2: Tables 5/6 and 8/9 with the first training batch (Figures 12-13) left out",
                     ["steady_images_per_s = B*G / ((200 * B*G / thesis - first_batch_s) / 199); empty "
                      "where the thesis prints no first-batch time."])
    written += write(tb.run_summary(df), "runs", "Every run found",
                     ["status 'running' with no final record: a half-written run."])
    written += write(tb.quality_summary(df), "quality_summary",
                     "Best validation accuracy per configuration (all quality experiments)")
    verdicts = fd.orderings(df, ref)
    written += write(verdicts, "orderings", "The thesis's three quality findings: 90 % intervals against a declared "
                     "margin", [f"What the rows say: {line}" for line in finding_summary(verdicts)] + fd.notes(),
                     verdict_table(verdicts))
    written += write(tb.throughput_summary(df), "throughput_summary", "Throughput per configuration")
    written += write(cost.local_study_times(df), "study_times",
                     "Local quality studies: measured run times and the study's wall-clock at JOBS=2",
                     cost.STUDY_TIME_NOTES)
    extra = df[(df["kind"] == "run") & (df["exp"] > 9)]
    if len(extra):
        written += write(tb.run_summary(extra), "extra_experiments",
                         "Runs of experiments beyond the thesis's nine")
    return written


# ============================================================================================ figures


def _quality(df: pd.DataFrame, exp: int, **where) -> pd.DataFrame:
    e = df[(df["kind"] == "epoch") & (df["exp"] == exp)]
    for k, v in where.items():
        e = e[e[k] == v]
    return e


def _two_panel(df: pd.DataFrame, title: str, ref: pd.DataFrame | None = None):
    """Training and validation error side by side, one legend for both beside them (off the data)."""
    fig, axes = plt.subplots(1, 2, figsize=(17, 5), layout="constrained")
    fg.plot_error_curves(df, ax=axes[0], which="train", title="top-1 training error")
    fg.plot_error_curves(df, ax=axes[1], which="val", title="top-1 validation error", reference=ref)
    fg.share_y(axes)
    axes[0].get_legend().remove()
    fg.legend_beside(axes[1])
    fig.suptitle(title, fontsize=10)
    return fig


def schedule_title(df: pd.DataFrame, exp: int) -> str:
    """An experiment's schedule in words: the thesis's label, with the runs' own warm-up where they warmed up."""
    label = rf.QUALITY_SETTINGS[exp]["label"]
    if rf.QUALITY_SETTINGS[exp]["warmup"] == "none" or df[(df["kind"] == "schedule") & (df["exp"] == exp)].empty:
        return label
    return f"linear scaling, {warmup_phrase(df[df['kind'] == 'schedule'], exp)}" + (", per-GPU batch smaller"
                                                                                    if exp == 7 else "")


def warmup_phrase(data: pd.DataFrame, exp: int) -> str:
    """'stepping warm-up 4 of 72 epochs (thesis: 5 of 90)': the runs' own warm-up beside the thesis's, so a title
    never says the thesis's 5 epochs over curves that warmed up for 4 of 72."""
    thesis_kind, thesis_n = rf.QUALITY_SETTINGS[exp]["warmup"].rsplit("-", 1)
    e = data[data["exp"] == exp]
    ours = {(w, ep) for w, ep in zip(e["warmup"], e["epochs"]) if isinstance(w, str) and w != "none"}
    if len(ours) == 1:
        (warmup, epochs), = ours
        kind, n = warmup.rsplit("-", 1)
        return f"{kind} warm-up {n} of {int(epochs)} epochs (thesis: {thesis_n} of {rf.THESIS_EPOCHS})"
    return f"{thesis_kind} warm-up ({thesis_n} of {rf.THESIS_EPOCHS} epochs in the thesis)"


def baseline_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Experiment 5's 1-worker runs: the baseline experiments 6-9 are compared with (the thesis's 1-GPU curve)."""
    return _quality(df, 5, gpus=1)


def exp7_peers(e6: pd.DataFrame, e7: pd.DataFrame) -> pd.DataFrame:
    """Experiment 6's runs beside experiment 7's: same worker count, framework, scale and numerics (Figure 26)."""
    on = ["gpus", "framework", "scale", "numerics"]
    return e6.merge(e7[on].drop_duplicates(), on=on, how="inner")





def schedules_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Schedules of experiments 4-9: from runs' config.json resolved.schedule, else the thesis's formulas."""
    parts = []
    s = df[(df["kind"] == "schedule") & df["exp"].between(4, 9)]
    for exp in range(4, 10):
        mine = s[s["exp"] == exp]
        if len(mine):
            keys = ["framework", "gpus", "global_batch", "lr", "warmup", "epochs", "scale"]
            for key, g in mine.groupby(keys, dropna=False):
                g = g.drop_duplicates("epoch")
                k = dict(zip(keys, key))  # the panel's title says the warm-up and scale: the label only the run
                lab = f"{fg.curve_label({**k, 'warmup': None, 'scale': None}).split(' (')[0]}, lr={k['lr']:g}"
                parts.append(pd.DataFrame({"experiment": exp, "label": lab, "epoch": g["epoch"],
                                           "lr": g["planned_lr"], "source": "run config"}))
        else:
            th = rf.thesis_schedules()
            th = th[th["experiment"] == exp]
            for (fw, gp, b, lr), g in th.groupby(["framework", "gpus", "per_gpu_batch", "target_lr"]):
                lab = f"exp {exp}: {fg.FRAMEWORK_NAME.get(fw, fw)} {gp} GPUs b={b} lr={lr:g} ({g['warmup'].iloc[0]})"
                parts.append(pd.DataFrame({"experiment": exp, "label": lab, "epoch": g["epoch"], "lr": g["lr"],
                                           "source": "thesis formula"}))
    return pd.concat(parts, ignore_index=True)


def scaling_rows(scaling: pd.DataFrame, framework, per_gpu_batch=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the thesis's points, ours at any other scale) that a scaling figure of `framework` draws."""
    thesis = scaling[scaling["scale"] == "thesis"]
    other = scaling[(scaling["scale"] != "thesis")
                    & scaling["framework"].isin([framework] if isinstance(framework, str) else framework)]
    other = other.dropna(subset=["images_per_s"])
    if per_gpu_batch is not None:
        other = other[other["per_gpu_batch"] == per_gpu_batch]
    return thesis, other


def scaling_figure(scaling: pd.DataFrame, title: str, framework, per_gpu_batch=None, cores: int | None = None):
    """Throughput and speed-up (Figures 14-17): the thesis's scale on the top row; ours at any other scale (CPU
    cores) on a row of its own below, since its images/s are not comparable with the P100 numbers. cores: the
    measuring machine's, which a local-scale row's axis names and its ideal line stops at."""
    kw = {"framework": framework, "per_gpu_batch": per_gpu_batch}
    thesis, other = scaling_rows(scaling, framework, per_gpu_batch)
    rows = [thesis] + ([other] if len(other) else [])
    fig, axes = plt.subplots(len(rows), 2, figsize=(13, 4.4 * len(rows)), squeeze=False, layout="constrained")
    fg.plot_throughput(thesis, ax=axes[0][0], **kw)
    fg.plot_speedup(thesis, ax=axes[0][1], **kw)
    if len(rows) > 1:
        _our_row(axes, other, cores, kw)
    fig.suptitle(title, fontsize=10)
    return fig


def _our_row(axes, other: pd.DataFrame, cores: int | None, kw: dict) -> None:
    """The lower row: ours at another scale. At the local scale the workers are CPU processes, not GPUs: the axis
    says so and how many cores they shared, and the ideal line stops at that count."""
    cpu = set(other["scale"]) == {"local scale"}
    limit = cores if cpu else None
    fg.plot_throughput(other, ax=axes[1][0], ideal_max=limit, **kw)
    fg.plot_speedup(other, ax=axes[1][1], ideal_max=limit, **kw)
    scales = ", ".join(sorted(other["scale"].unique()))
    for ax, what in zip(axes[0], ("Throughput (dotted: ideal linear scaling)", "Speed-up")):
        ax.set_title(f"{what}, the thesis (P100 GPUs)", fontsize=9)
    for ax, what in zip(axes[1], ("Throughput", "Speed-up")):
        ax.set_title(f"{what}, ours at the {scales} (not comparable with the P100 row above)", fontsize=9)
        if cpu:
            on = f" on {cores} core{'' if cores == 1 else 's'}" if cores else ""
            ax.set_xlabel(ax.get_xlabel().replace("GPUs (workers)", f"CPU processes{on}")
                          .replace("1-GPU run", "1-process run"))


def build_figures(df: pd.DataFrame, ref: pd.DataFrame, out: Path, source: str | None = None,
                  cores: int | None = None) -> tuple[list[Path], list[str]]:
    """Every figure; source: the line each carries saying which runs it was made from."""
    written = scaling_figures(df, ref, out, source, cores)
    written_quality, skipped = quality_figures(df, ref, out, source)
    written += written_quality
    # -- utilisation (Figures 22, 23, 27) from the runs' telemetry (util records)
    drawn, missing = utilisation_figures(df, out, source)
    written.extend(drawn)
    skipped.extend(missing)
    written.extend(other_utilisation_figure(df, out, source))
    written.extend(lr_schedules_figure(df, out, source))
    large = lb.large_batch_figure(df, fd.margins())
    if large is None:
        skipped.append("exp12_large_batch: no experiment 12 study runs")
    else:
        written.extend(fg.save(large, out, "exp12_large_batch", source))
        differences = lb.differences_figure(fd.orderings(df, ref), lb.study_points(df), fd.margins())
        if differences is not None:
            written.extend(fg.save(differences, out, "exp12_differences", source))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    fg.plot_steady_state(rf.rq2_steady_state(ref), ax=ax)
    written.extend(fg.save(fig, out, "rq2_steady_state", "Made from the thesis's Tables 5/6 and 8/9 and Figures 12-13 "
                           "(no runs)."))
    return written, skipped


def scaling_figures(df: pd.DataFrame, ref: pd.DataFrame, out: Path, source: str | None = None,
                    cores: int | None = None) -> list[Path]:
    """Figures 14-17: throughput and speed-up, the thesis's and ours."""
    written: list[Path] = []
    scaling = tb.scaling_table(df, ref)

    def two(name, title, **kw):
        drawn = len(scaling_rows(scaling, **kw)[1])  # a figure of the thesis's points alone says so, not "N runs"
        written.extend(fg.save(scaling_figure(scaling, title, cores=cores, **kw), out, name,
                               source if drawn else THESIS_SOURCE))

    for n, b in ((14, 32), (15, 64), (16, 128)):
        two(f"fig{n}_scaling_horovod_tf_b{b}", f"Figure {n}. Scaling of Horovod+TensorFlow, per-GPU batch {b}",
            framework=tb.TENSORFLOW, per_gpu_batch=b)  # ours: MultiWorkerMirroredStrategy beside it
    two("fig17_scaling_pytorch_vs_horovod", "Figure 17. Scaling of PyTorch and Horovod+PyTorch",
        framework=["pytorch", "horovod+pytorch"])
    return written


def quality_figure(data: pd.DataFrame, title: str, ref: pd.DataFrame, grid: bool = False, single: str | None = None):
    """Error curves: a panel per worker count (grid), one panel of training or validation error (single), or
    training and validation side by side."""
    if grid:
        axes = fg.plot_error_grid(data, reference=ref)
        fig = axes.flat[0].figure
        fig.suptitle(title, fontsize=10)
    elif single:
        fig, ax = plt.subplots(figsize=(11, 4.6), layout="constrained")
        fg.plot_error_curves(data, ax=ax, which=single, title=title, reference=ref)
        fg.legend_beside(ax)
    else:
        fig = _two_panel(data, title, ref)
    return fig


def quality_figures(df: pd.DataFrame, ref: pd.DataFrame, out: Path,
                    source: str | None = None) -> tuple[list[Path], list[str]]:
    """The error curves of the quality experiments (Figures 18-21, 24-26, 28-30), only where runs exist."""
    written: list[Path] = []
    skipped: list[str] = []
    smoke = smoke_paths(df)

    def draw(name, title, data, grid=False, single=None):
        if data.empty:
            skipped.append(f"{name}: no epoch records")
            return
        # a smoke run's 2 epochs never get the thesis's 90-epoch marks beside them
        marks = None if data["path"].isin(smoke).any() else ref
        written.extend(fg.save(quality_figure(data, title, marks, grid, single), out, name, source))

    def with_warmup(exp: int, n: int) -> pd.DataFrame:
        """Figure n (beside experiment 5's 1-worker baseline) and n+1 (grid) of a warm-up experiment."""
        runs = _quality(df, exp)
        phrase = warmup_phrase(runs, exp)
        draw(f"fig{n}_exp{exp}_error", f"Figure {n}. Linear scaling + {phrase}; 1 worker: exp 5's baseline",
             pd.concat([base, runs]) if len(runs) else runs)
        draw(f"fig{n + 1}_exp{exp}_error_grid", f"Figure {n + 1}. Linear scaling + {phrase} (grid)", runs, grid=True)
        return runs

    e4 = _quality(df, 4)
    draw("fig18_exp4_error", "Figure 18. Naive scaling", e4)
    draw("fig19_exp4_error_grid", "Figure 19. Naive scaling (grid)", e4, grid=True)
    e5 = _quality(df, 5)
    draw("fig20_exp5_train_error", "Figure 20. Linear scaling, no warm-up: training error", e5, single="train")
    top = e5[e5["gpus"] == e5["gpus"].max()] if len(e5) else e5
    draw("fig21_exp5_error_max_gpus", "Figure 21. Linear scaling, no warm-up, most GPUs", top, grid=True)
    base = baseline_runs(df)
    e6 = with_warmup(6, 24)
    e7 = _quality(df, 7)
    if len(e7):
        draw("fig26_exp7_vs_exp6_grid", "Figure 26. Smaller per-GPU batch (exp 7) vs the larger one (exp 6), "
             f"same workers; {warmup_phrase(e7, 7)}", pd.concat([e7, exp7_peers(e6, e7)]), grid=True)
    else:
        skipped.append("fig26_exp7_vs_exp6_grid: no epoch records")
    e8 = with_warmup(8, 28)
    e9 = _quality(df, 9)
    if len(e9):
        peer = e8[e8["gpus"].isin(e9["gpus"].unique())]
        draw("fig30_exp9_vs_exp8_grid", f"Figure 30. Exp 8's {warmup_phrase(e8, 8)} vs exp 9's "
             f"{warmup_phrase(e9, 9)}", pd.concat([e8.iloc[0:0], peer, e9]), grid=True)
    else:
        skipped.append("fig30_exp9_vs_exp8_grid: no epoch records")
    return written, skipped


def lr_schedules_figure(df: pd.DataFrame, out: Path, source: str | None = None) -> list[Path]:
    """The learning-rate schedules of experiments 4-9, one figure."""
    sched = schedules_frame(df)
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for ax, exp in zip(axes.flat, range(4, 10)):
        fg.plot_lr_schedules(sched, ax=ax, experiment=exp)
        src = sched.loc[sched["experiment"] == exp, "source"]
        title = f"Experiment {exp}: {schedule_title(df, exp)} ({src.iloc[0] if len(src) else ''})"
        ax.set_title("\n".join(textwrap.wrap(title, 64)), fontsize=8)  # three panels a row: two lines at most
    fig.suptitle("Learning-rate schedules of experiments 4-9", fontsize=10)
    from_runs = (sched["source"] == "run config").any()  # every panel the thesis's formula: no run drawn
    if from_runs and (sched["source"] == "thesis formula").any() and source:
        source += " Panels marked 'thesis formula': the thesis's schedules."
    return fg.save(fig, out, "lr_schedules_exp4-9", source if from_runs else THESIS_SOURCE)


def utilisation_figures(df: pd.DataFrame, out: Path, source: str | None = None) -> tuple[list[Path], list[str]]:
    """The thesis's Figures 22, 23 and 27 from the util records of real runs (fg.utilisation_panels)."""
    written: list[Path] = []
    panels, skipped = fg.utilisation_panels(df)
    for name, title, rows in panels:
        fig, ax = plt.subplots(figsize=(10, 4))
        fg.plot_utilisation(rows, ax=ax, title=title)
        written.extend(fg.save(fig, out, name, source))
    return written, skipped


def other_utilisation_figure(df: pd.DataFrame, out: Path, source: str | None = None) -> list[Path]:
    """util_other_runs: a panel per experiment without a thesis utilisation figure; none without such runs."""
    panels = fg.other_utilisation_panels(df)
    if not panels:
        return []
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.0 * len(panels)), squeeze=False)
    for ax, (title, rows) in zip(axes[:, 0], panels):
        fg.plot_utilisation(rows, ax=ax, title=title)
    fig.suptitle("Utilisation of the other experiments' runs, each at its largest worker count", fontsize=10)
    return fg.save(fig, out, "util_other_runs", source)


# ============================================================================================ entry point


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


def refuse_committed_place(runs: Path, out: Path) -> None:
    """Only the committed reference's runs may write the committed report (or anything under results/reference)."""
    out, base = out.resolve(), COMMITTED_REPORT.resolve()
    if Path(runs).resolve() == committed_runs().resolve():
        return
    if out == base or base / "reference" in (out, *out.parents):
        raise ReportError(f"analysis report: {out} holds the committed reference's report; the report of {runs} "
                          f"goes to {report_folder(runs)} (leave out --out)")


def clear_report(out: Path) -> None:
    """Remove what an earlier report wrote into `out` (tables, figures, notebooks), so nothing stale survives a new
    one: figures a run set can no longer draw, a comparison table of runs since removed. Files another command
    writes there (make cost's tables) are kept."""
    for folder in (out / "tables", out / "figures"):
        for path in sorted(folder.glob("*")) if folder.is_dir() else []:
            if path.is_file() and path.name not in OTHER_WRITERS:
                path.unlink()
    for path in sorted(out.glob("rq*.ipynb")):
        path.unlink()


def make_report(runs=None, out=None, logs=None, notebooks: bool = True, quiet: bool = False) -> dict:
    """Regenerate tables, figures and (optionally) the executed notebooks into `out`, cleared first. Returns what
    was done. runs: a runs root; by default this machine's results/runs, or the committed reference when that is
    empty. out: by default report_folder(runs)."""
    t0 = time.perf_counter()
    if runs and not Path(runs).is_dir():  # a mistyped OUT= would otherwise give a report of nothing
        raise ReportError(f"analysis report: no runs folder {runs} (a study's --out / OUT=, e.g. results/runs, "
                          "results/quick or results/reference/vm-2cpu)")
    runs, origin = (Path(runs), runs_label(runs)) if runs else default_runs_root()
    out = Path(out) if out else report_folder(runs)
    refuse_committed_place(runs, out)
    clear_report(out)
    df = load_study(runs, logs)
    ref = rf.load_reference()
    source = made_from(df, runs)
    tables = build_tables(df, ref, out / "tables", source)
    if runs_label(runs) == "this machine":  # this machine's runs beside the committed reference's, by fingerprint
        tables += tb.write_table(report_comparison(df), out / "tables", "this_machine_vs_reference",
                                 "This machine's runs, the committed reference's (by machine) and the thesis's",
                                 source=source)
    worker, nb_result = _start_notebooks(out, runs, logs) if notebooks else (None, {})
    figs, skipped = build_figures(df, ref, out / "figures", source, machine_cores(runs))
    problems = list(df.attrs.get("problems", []))
    write_index(out, source, tables, figs, skipped, problems)
    nbs: list[Path] = []
    if worker is not None:
        worker.join()
        if "error" in nb_result:
            raise nb_result["error"]
        nbs = nb_result["paths"]
    info = {"runs": int((df["kind"] == "run").sum()), "tables": len(tables), "figures": len(figs),
            "skipped": skipped, "problems": problems, "notebooks": [str(p) for p in nbs],
            "seconds": round(time.perf_counter() - t0, 2), "out": str(out)}
    if not quiet:
        print(f"report: {info['runs']} runs from {runs} ({origin}), {len(tables)} table files, {len(figs)} figure files, "
              f"{len(nbs)} notebooks in {info['seconds']} s")
        for p in problems:
            print(f"  problem: {p}")
        print(f"report written to {_shown(out)}/ (tables/README.md lists it)")
    return info


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def _start_notebooks(out: Path, runs: Path, logs):
    """The notebooks run in their own kernels (a thread) while this process draws the figures."""
    import IPython  # noqa: F401  (imported here, not half-way in the worker thread while pyplot looks for it)

    from .notebooks import run_notebooks

    plt.switch_backend("Agg")
    result: dict = {}

    def _work():
        try:
            result["paths"] = run_notebooks(out, runs, logs)
        except Exception as exc:  # reported after the figures are done
            result["error"] = exc

    worker = threading.Thread(target=_work, name="notebooks")
    worker.start()
    return worker, result


def write_index(out: Path, source: str, tables, figs, skipped, problems) -> None:
    """tables/README.md: which runs, and every table and figure written or not drawn (with why)."""
    index = ["# Report index", "", source, "",
             "## Tables", ""] + [f"- {p.name}" for p in tables if p.suffix == ".md"] + \
            ["", "## Figures", ""] + [f"- {p.name}" for p in figs if p.suffix == ".png"] + \
            ["", "## Not drawn", ""] + [f"- {s}" for s in skipped] + \
            ["", "## Problems found while loading", ""] + [f"- {p}" for p in problems]
    (out / "tables").mkdir(parents=True, exist_ok=True)
    (out / "tables" / "README.md").write_text("\n".join(index) + "\n")
