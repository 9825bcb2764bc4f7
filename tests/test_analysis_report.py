"""`python -m analysis report`: every table and figure from fixtures; notebooks execute, reproducibly."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis import reference as rf
from analysis.catalogue import NOTEBOOKS
from analysis.notebooks import build_notebook
from analysis.catalogue import make_report
from contract.runfiles import run_file_exists

FIX = Path(__file__).parent / "fixtures" / "analysis"

EXPECTED_FIGURES = ["fig14_scaling_horovod_tf_b32", "fig15_scaling_horovod_tf_b64", "fig16_scaling_horovod_tf_b128",
                    "fig17_scaling_pytorch_vs_horovod", "lr_schedules_exp4-9", "rq2_steady_state"]
QUALITY_FIGURES = ["fig20_exp5_train_error", "fig21_exp5_error_max_gpus", "fig24_exp6_error",
                   "fig25_exp6_error_grid"]


def _tables_ok(out: Path):
    for t in range(1, 16):
        for ext in ("csv", "md"):
            assert (out / "tables" / f"table{t:02d}.{ext}").exists(), (t, ext)
    rq2 = pd.read_csv(out / "tables" / "rq2_steady_state.csv")
    assert list(rq2.columns) == ["framework", "gpus", "thesis_images_per_s", "first_batch_s", "steady_images_per_s"]
    t12 = pd.read_csv(out / "tables" / "table12.csv")
    assert t12["thesis_top1"].notna().sum() == 6


@pytest.mark.slow
def test_report_from_fixtures(tmp_path):
    info = make_report(FIX / "runs", tmp_path, logs=[FIX / "logs" / "brought"], notebooks=False, quiet=True)
    assert info["runs"] == 15
    _tables_ok(tmp_path)
    for name in EXPECTED_FIGURES + QUALITY_FIGURES:
        for ext in ("png", "pdf"):
            assert (tmp_path / "figures" / f"{name}.{ext}").stat().st_size > 1000, name
    t12 = (tmp_path / "tables" / "table12.md").read_text()
    assert "local scale" in t12 and "1 diverged" in t12 and "running (incomplete)" in t12
    runs = pd.read_csv(tmp_path / "tables" / "runs.csv")
    assert set(runs["status"]) >= {"completed", "diverged", "running", "log"}
    assert any("fig26" in s for s in info["skipped"])  # no experiment-7 runs in the fixtures


@pytest.mark.slow
def test_report_on_empty_runs_dir(tmp_path):
    (tmp_path / "runs").mkdir()
    info = make_report(tmp_path / "runs", tmp_path / "out", notebooks=False, quiet=True)
    assert info["runs"] == 0
    _tables_ok(tmp_path / "out")
    t7 = pd.read_csv(tmp_path / "out" / "tables" / "table07.csv")
    assert t7["thesis_images_per_s"].tolist() == rf.load_reference().query("table == 7")["throughput"].tolist()
    for name in EXPECTED_FIGURES:
        assert (tmp_path / "out" / "figures" / f"{name}.png").exists()


def test_notebooks_are_short_cells_calling_analysis():
    for name, cells in NOTEBOOKS.items():
        nb = build_notebook(cells, "runs", None)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(len(c.source.splitlines()) <= 6 for c in code), name
        assert "import analysis as an" in code[0].source
        assert [c["id"] for c in nb.cells] == [f"cell-{i:02d}" for i in range(len(nb.cells))]


@pytest.mark.slow
def test_notebooks_execute_and_are_reproducible(tmp_path):
    from analysis.notebooks import run_notebooks

    first = run_notebooks(tmp_path / "a", FIX / "runs", None, NOTEBOOKS)
    again = run_notebooks(tmp_path / "b", FIX / "runs", None, NOTEBOOKS)
    assert [p.name for p in first] == sorted(NOTEBOOKS)
    for p, q in zip(first, again):
        nb = json.loads(p.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c["outputs"] for c in code[:2]), p.name  # outputs are stored
        assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
        assert not any(o.get("output_type") == "error" for c in code for o in c["outputs"])
        # same inputs -> same outputs (the relative runs path is the same from a/ and b/ ... except its text)
        assert p.read_text().replace("../../", "../") == q.read_text().replace("../../", "../"), p.name
    rq2 = json.loads((tmp_path / "a" / "rq2_horovod_speedup.ipynb").read_text())
    text = json.dumps(rq2)
    assert "32 GPUs: thesis formula Horovod 6104 vs PyTorch 5697" in text


# ============================================================================================ one report, one source


def _committed_report_state() -> tuple[str, dict[str, str]]:
    """git's view of results/ and the bytes of every file a report could write in the committed place."""
    import hashlib
    import subprocess

    from analysis.report import COMMITTED_REPORT

    status = subprocess.run(["git", "status", "--porcelain", "--", str(COMMITTED_REPORT)], capture_output=True,
                            text=True, cwd=COMMITTED_REPORT.parent).stdout
    files = [*COMMITTED_REPORT.glob("tables/*"), *COMMITTED_REPORT.glob("figures/*"), *COMMITTED_REPORT.glob("rq*.ipynb")]
    return status, {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files) if p.is_file()}


@pytest.mark.slow
def test_a_cells_printed_text_is_one_output_however_the_kernel_chunks_it(tmp_path):
    # The kernel sends stdout in chunks that depend on timing; a flush forces two chunks here, as a busy machine can.
    import nbformat

    from analysis.notebooks import execute_all

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys\nsys.stdout.write('no runs'); sys.stdout.flush()\nprint()")])
    (done,) = execute_all([nb], tmp_path)
    assert [(o["output_type"], o["text"]) for o in done.cells[0].outputs] == [("stream", "no runs\n")]


def test_a_report_of_other_runs_leaves_the_committed_report_alone_and_its_own_folder_fresh(tmp_path, monkeypatch):
    import shutil

    from analysis import report

    runs = tmp_path / "runs"
    shutil.copytree(FIX / "runs" / "05_linear_scaling" / "w1-s0", runs / "05_linear_scaling" / "w1-s0")
    monkeypatch.setattr(report, "REPORT_ROOT", tmp_path / "report")
    out = report.report_folder(runs)
    assert out == tmp_path / "report" / "runs"
    # what an earlier report of other runs left there: a figure these runs can't draw, a comparison, a notebook
    stale = [out / "figures" / "fig30_exp9_vs_exp8_grid.png", out / "tables" / "this_machine_vs_reference.md",
             out / "rq3_model_quality.ipynb"]
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("stale")
    before = _committed_report_state()
    info = make_report(runs, notebooks=False, quiet=True)
    assert _committed_report_state() == before  # not one committed byte rewritten
    assert info["out"] == str(out) and info["runs"] == 1
    assert not any(p.exists() for p in stale[:1] + stale[2:])
    comparison = (out / "tables" / "this_machine_vs_reference.md").read_text()  # redrawn from these runs
    assert "stale" not in comparison
    index = (out / "tables" / "README.md").read_text()
    assert f"Made from 1 run in {runs.resolve()} (this machine" in index
    # every table says which runs it shows (the runs of the experiments it reads: here experiment 5's one run, or
    # none), or that it shows the thesis's values alone
    from analysis.catalogue import TABLES
    entries = {t.name: t for t in TABLES}
    for md in (out / "tables").glob("*.md"):
        entry = entries.get(md.stem)  # None: the index and the comparison, made from all the runs
        reads_it = entry is None or not entry.experiments or 5 in entry.experiments
        said = ("(no runs)" if entry and entry.thesis_only
                else "Made from 1 run in" if reads_it else "Made from 0 runs in")
        assert said in md.read_text(), md.name


def test_the_committed_place_takes_only_the_committed_reference(tmp_path):
    from analysis.report import COMMITTED_REPORT, ReportError, committed_runs, report_folder

    assert report_folder(committed_runs()) == COMMITTED_REPORT
    assert report_folder(COMMITTED_REPORT / "quick") == COMMITTED_REPORT / "report" / "quick"
    assert report_folder(COMMITTED_REPORT / "reference" / "vm-2cpu-18ep") == \
        COMMITTED_REPORT / "report" / "reference-vm-2cpu-18ep"
    before = _committed_report_state()
    with pytest.raises(ReportError, match="committed reference's report"):
        make_report(FIX / "runs", COMMITTED_REPORT, notebooks=False, quiet=True)
    assert _committed_report_state() == before


def test_report_cli_refuses_the_committed_place_in_one_line(capsys):
    from analysis.__main__ import main
    from analysis.report import COMMITTED_REPORT

    assert main(["report", "--runs", str(FIX / "runs"), "--out", str(COMMITTED_REPORT), "--no-notebooks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results/report/runs" in err


def test_report_of_a_missing_runs_folder_is_one_line(tmp_path, capsys):
    from analysis.__main__ import main

    assert main(["report", "--runs", str(tmp_path / "nowhere"), "--no-notebooks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no runs folder" in err and not (tmp_path / "nowhere").exists()


def _quick_study(root: Path) -> Path:
    """A QUICK study's folder: 1 seed of 2 epochs of experiments 4 and 5, as `make exp4 QUICK=1` leaves it."""
    from tests import synth_records as synth

    for exp in ("04_naive_scaling", "05_linear_scaling"):
        for gpus, acc in ((1, 6.0), (2, 5.0)):
            synth.write_run(root, exp, f"w{gpus}-s0", gpus=gpus, epochs=2, milestones=(1,), final_acc=acc,
                            scaling="none" if exp.startswith("04") else "linear",
                            manifest_extra={"smoke": True})  # what the trainer records of a --quick run
    return root


@pytest.mark.slow
def test_a_quick_report_gives_no_verdict_and_no_thesis_value_beside_smoke_runs(tmp_path, monkeypatch):
    from analysis import report as rp

    sources = {}
    save = rp.fg.save
    monkeypatch.setattr(rp.fg, "save", lambda fig, out, name, source=None: sources.setdefault(name, source)
                        and save(fig, out, name, source) or save(fig, out, name, source))
    marks = []
    from analysis.experiments import quality

    quality_figure = quality.quality_figure
    monkeypatch.setattr(quality, "quality_figure", lambda data, title, ref, *a: marks.append(ref) or
                        quality_figure(data, title, ref, *a))
    make_report(_quick_study(tmp_path / "quick"), tmp_path / "out", notebooks=False, quiet=True)
    tables = tmp_path / "out" / "tables"
    orderings = pd.read_csv(tables / "orderings.csv")
    assert len(orderings) and (orderings["verdict"] == "smoke run: no verdict").all()
    assert orderings["thesis_difference"].isna().all() and "does not hold" not in (tables / "orderings.md").read_text()
    mine = pd.read_csv(tables / "this_machine_vs_reference.csv")
    assert "thesis" not in mine.columns and (mine["verdict"] == "smoke run: no verdict").all()
    assert marks and all(ref is None for ref in marks)  # no 90-epoch diamonds beside a 2-epoch run
    # the thesis-only figures say so; the figures of runs name the runs
    for name in ("fig14_scaling_horovod_tf_b32", "fig16_scaling_horovod_tf_b128", "rq2_steady_state"):
        assert "this machine" not in sources[name] and "no runs" in sources[name], name
    assert "this machine" in sources["fig18_exp4_error"]
    assert "Panels marked 'thesis formula': the thesis's" in sources["lr_schedules_exp4-9"]  # 4 and 5 ran, 6-9 not


def test_a_schedules_figure_of_the_thesis_alone_names_no_runs():
    import matplotlib.pyplot as plt

    from analysis import catalogue as ct
    from analysis.entries import THESIS_SOURCE
    from analysis.experiments import quality

    inputs = ct.inputs(pd.DataFrame(columns=["kind", "exp"]), None, "Made from 3 runs in x (this machine).")
    drawn = quality.schedules(inputs, ct.figure("lr_schedules_exp4-9"))
    plt.close(drawn.figure)
    assert drawn.source == THESIS_SOURCE


def test_a_smoke_run_is_known_by_its_quick_settings_or_its_step_cap(tmp_path):
    """The writer decides (the manifest's `smoke`), the report reads only that: every [quick] setting of the scale
    in the config at the start, or the step cap at the end."""
    from tests import synth_records as synth
    from analysis.smoke import is_smoke_run
    from contract.plan import carries_quick
    from contract.runfolder import RunFolder

    full = synth.write_run(tmp_path / "runs", "05_linear_scaling", "w1-s0", epochs=2)
    assert not is_smoke_run(full)  # few epochs alone: a pilot, or a test's made-up run
    config = json.loads((full / "config.json").read_text())
    config["train"].update(epochs=2, print_freq=5)
    config["data"].update(per_class=16, val_per_class=4, synthetic_images=256)  # what --quick sets (scales.toml)
    assert carries_quick(config) and not carries_quick(json.loads((full / "config.json").read_text()))
    manifest = json.loads((full / "manifest.json").read_text())
    quick = RunFolder(tmp_path / "runs" / "05_linear_scaling" / "quick", writes=True, echo=False)
    quick.begin(config, **{k: manifest[k] for k in ("seed", "machine", "backend", "world_size", "workers",
                                                    "launcher", "hosts", "devices", "versions", "git_commit")},
                smoke=carries_quick(config))  # as the trainers record it (trainers/run.py, trainers/tf/bench.py)
    quick.close()
    assert is_smoke_run(quick.path)
    capped = RunFolder(full, writes=True, echo=False, fresh=False)
    capped.manifest = manifest
    capped.end("completed", 1, "capped", 0, capped_at_steps=20)
    capped.close()
    assert is_smoke_run(capped.path)


def test_the_studys_closing_table_never_places_a_smoke_run_beside_the_thesis(tmp_path):
    """The console's comparison after `make exp4 QUICK=1` (studies/progress.py) as the report's: no thesis value
    beside a smoke run's accuracy."""
    from tests import synth_records as synth
    from analysis.compare import comparison_frame

    def entry(run_dir):
        return dict(name=run_dir.name, run_dir=run_dir, fingerprint="f", experiment="04_naive_scaling",
                    framework="pytorch", gpus=1, per_gpu_batch=128)

    full = synth.write_run(tmp_path / "runs", "04_naive_scaling", "w1-s0", epochs=2)
    smoke = synth.write_run(tmp_path / "quick", "04_naive_scaling", "w1-s0", epochs=2,
                            manifest_extra={"smoke": True})  # as the trainer records a QUICK run
    assert comparison_frame([entry(full)], "quality", root=tmp_path / "none")["thesis"].tolist() == ["73.29"]
    assert comparison_frame([entry(smoke)], "quality", root=tmp_path / "none")["thesis"].tolist() == \
        ["smoke run: not compared"]


def test_the_committed_report_takes_an_experiment_only_another_reference_machine_holds_from_it_alone(tmp_path):
    from analysis.compare import load_report_study, made_from
    from analysis.machines import complements

    ref = Path("results/reference/vm-2cpu")
    first, second = tmp_path / "a-machine", tmp_path / "b-machine"
    for machine, experiments in ((first, ["05_linear_scaling"]), (second, ["05_linear_scaling", "12_large_batch"])):
        (machine / "machine.toml").parent.mkdir(parents=True)
        (machine / "machine.toml").write_text(f'label = "{machine.name}"\n')
        for experiment in experiments:
            run = next(p for p in sorted((ref / experiment).iterdir()) if run_file_exists(p / "metrics.jsonl"))
            shutil.copytree(run, machine / experiment / run.name)
    assert complements(first, tmp_path) == [("b-machine", first.parent / "b-machine" / "12_large_batch")]
    assert complements(second, tmp_path) == []  # only the first machine's report is complemented
    df = load_report_study(first, root=tmp_path)
    runs = df[df["kind"] == "run"]
    assert sorted(runs["exp"]) == [5, 12]  # experiment 5 from the first machine alone: never pooled with the second's
    assert all(Path(p).is_relative_to(first) for p in runs.loc[runs["exp"] == 5, "path"])
    said = made_from(df, first, tmp_path)
    assert said.startswith("Made from 1 run in ") and "12_large_batch: 1 run in " in said
    assert said.endswith("(reference machine b-machine).")


def test_an_experiment_another_reference_machine_declares_is_drawn_from_it_in_place_of_the_first_machines(tmp_path):
    from analysis.compare import load_report_study, made_from
    from analysis.machines import complements, superseded

    ref = Path("results/reference/vm-2cpu")
    first, second = tmp_path / "a-machine", tmp_path / "b-machine"
    for machine, experiments in ((first, ["01_throughput_single_gpu", "05_linear_scaling"]),
                                 (second, ["01_throughput_single_gpu", "05_linear_scaling"])):
        (machine / "machine.toml").parent.mkdir(parents=True)
        draws = 'report_draws = ["01_throughput_single_gpu"]\n' if machine is second else ""
        (machine / "machine.toml").write_text(f'label = "{machine.name}"\n{draws}')
        for experiment in experiments:
            for run in [p for p in sorted((ref / experiment).iterdir()) if run_file_exists(p / "metrics.jsonl")][:2]:
                shutil.copytree(run, machine / experiment / run.name)
    assert superseded(first, tmp_path) == ["01_throughput_single_gpu"]
    assert complements(first, tmp_path) == [("b-machine", first.parent / "b-machine" / "01_throughput_single_gpu")]
    runs = load_report_study(first, root=tmp_path)
    runs = runs[runs["kind"] == "run"]
    assert sorted(runs["exp"]) == [1, 1, 5, 5]
    assert all(Path(p).is_relative_to(second) for p in runs.loc[runs["exp"] == 1, "path"])  # never the first's too
    assert all(Path(p).is_relative_to(first) for p in runs.loc[runs["exp"] == 5, "path"])  # 5 is not declared
    said = made_from(runs, first, tmp_path)
    assert said.startswith("Made from 2 runs in ") and "01_throughput_single_gpu: 2 runs in " in said
    only_one = made_from(runs, first, tmp_path, experiments=[1])  # a table of experiment 1 names its machine alone
    assert only_one.startswith("Made from 01_throughput_single_gpu: 2 runs in ") and "a-machine (" not in only_one


def test_an_experiment_declared_beside_is_drawn_from_each_machine_and_each_reading_takes_one(tmp_path):
    """Experiment 13's second edition on another machine than its first: a machine.toml's report_draws_beside draws
    its folder beside the other machine's, superseding nothing; an entry that reads one edition names only the
    machine it reads; a reading over both machines is refused."""
    from analysis.compare import load_report_study, made_from
    from analysis.machines import complements, one_machine, superseded

    ref = Path("results/reference/vm-2cpu")
    first, second, third = tmp_path / "a-machine", tmp_path / "b-machine", tmp_path / "c-machine"
    for machine, experiments in ((first, ["05_linear_scaling"]), (second, ["05_linear_scaling", "12_large_batch"]),
                                 (third, ["12_large_batch"])):
        beside = 'report_draws_beside = ["05_linear_scaling", "12_large_batch"]\n' if machine is second else ""
        (machine / "machine.toml").parent.mkdir(parents=True)
        (machine / "machine.toml").write_text(f'label = "{machine.name}"\n{beside}')
        for experiment in experiments:  # another run on each machine: one run copied twice is counted once
            done = [p for p in sorted((ref / experiment).iterdir()) if run_file_exists(p / "metrics.jsonl")]
            run = done[machine is second]
            shutil.copytree(run, machine / experiment / run.name)
    assert complements(first, tmp_path) == [("b-machine", tmp_path / "b-machine" / "05_linear_scaling"),
                                            ("b-machine", tmp_path / "b-machine" / "12_large_batch"),
                                            ("c-machine", tmp_path / "c-machine" / "12_large_batch")]
    assert superseded(first, tmp_path) == []  # the first machine's experiment 5 is still drawn
    runs = load_report_study(first, root=tmp_path).query("kind == 'run'")
    assert sorted(runs["exp"]) == [5, 5, 12, 12]
    assert one_machine(runs.loc[runs["path"].str.contains("c-machine"), "path"], "x", tmp_path) == "c-machine"
    with pytest.raises(ValueError, match=r"x: runs of 2 machines \(b-machine, c-machine\) in one reading"):
        one_machine(runs.loc[runs["exp"] == 12, "path"], "x", tmp_path)
    third_only = runs[~runs["path"].str.contains("b-machine")]  # an entry that reads c-machine's edition alone
    said = made_from(third_only, first, tmp_path, experiments=[12])
    assert said == f"Made from 12_large_batch: 1 run in {third / '12_large_batch'} (reference machine c-machine)."


def test_a_table_of_the_thesis_alone_names_no_runs(tmp_path):
    from analysis import catalogue as ct
    from analysis import report as rp

    inputs = ct.inputs(pd.DataFrame(columns=["kind", "exp"]), rf.load_reference(), "Made from 3 runs in x (this machine).")
    entries = [t for t in ct.TABLES if t.name == "rq2_steady_state"]
    [md] = [p for p in rp.build_tables(inputs, tmp_path, entries) if p.suffix == ".md"]
    assert "Made from the thesis's Tables 5/6 and 8/9, Figures 12-13 (no runs)." in md.read_text()
    assert "this machine" not in md.read_text()
