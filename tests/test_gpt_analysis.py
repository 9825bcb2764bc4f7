"""Experiment 14's analysis plug-in (analysis/experiments/gpt_throughput.py): its table of tokens/s, speed-up and
efficiency over the same backend's 1-process run, model FLOP/s, MFU and peak memory a rank, its figure, page and
notebook -- the formulas on run folders the real writer wrote with chosen numbers, the rest on a tiny real study
(DDP and FSDP on 1 and 2 processes, 3 timed steps a run) that the trainer ran."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from contract.config import load_config
from contract.manifest import VERSION
from contract.reader import read_metrics
from contract.runfolder import RunFolder
from tests.helpers import REPO, run
from tests.test_gpt_trainer import needs_corpus

EXP14 = REPO / "experiments" / "14_gpt_throughput"
CONTEXT = 128  # gpt_local's tokens a window (workloads/gpt/sizes.py)


# ============================================================================================ the formulas


def write_run(out: Path, name: str, tokens_per_s: float, sets: list[str], peaks=(2**30,), mfu: float | None = None,
              disturbed: bool = False, local_ranks=None) -> None:
    """A bench run as the trainer writes one (contract/runfolder.py's writer), with chosen rates: windows/s is
    tokens/s over the context, model FLOP/s a fixed multiple; a placement entry a rank with its peak memory."""
    cfg = load_config(EXP14, "local", sets, need_data=False)
    folder = RunFolder(out / cfg.experiment / name, writes=True, echo=False)
    folder.write_config({"experiment": cfg.experiment, "run": name, "scale": "local", **cfg.to_dict(),
                         "resolved": cfg.resolved()})
    folder.record("bench", per_worker_batch=cfg.train.per_worker_batch, world_size=cfg.train.workers, batches=12,
                  warmup_batches=3, lr=0.1, images_per_s_steady=tokens_per_s / CONTEXT, images_per_s_thesis=None,
                  batch_time_avg_at_199=None, data_share=0.0, data_s=0.0, compute_s=1.0, comm_s=0.0,
                  tokens_per_s=tokens_per_s, model_flops_per_s=tokens_per_s * 1e6, mfu=mfu)
    # a rank that timed its steps beside 1.5 CPUs of other work on a 2-CPU host (contract/hostload.py)
    load = {"busy_cpu_s": 2.5, "timed_cpu_s": 1.0, "timed_wall_s": 1.0} if disturbed else {}
    local_ranks = local_ranks or range(len(peaks))  # one node unless told: its ranks 0 ... P-1
    placement = [{"host": "vm", "local_rank": r, "threads": 1, "cpus": 1, "cpu_list": "0-1", "peak_memory_bytes": peak,
                  "peak_memory_of": "cuda_allocated", **load} for r, peak in zip(local_ranks, peaks)]
    folder.end("completed", 0, exit_code=0, manifest_version=VERSION, backend=cfg.train.backend,
               world_size=cfg.train.workers, placement=placement)
    folder.close()


def study_sets(name: str) -> list[str]:
    """The study's settings of a run named as it names them (w2-fsdp-s0: 2 workers, FSDP)."""
    workers, backend, _ = name.split("-")
    return [f"train.workers={workers[1:]}", f"train.backend={backend}"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    import analysis as an

    out = tmp_path_factory.mktemp("runs")
    for name, tokens, extra in [
        ("w1-ddp-s0", 1000.0, {"mfu": 0.25}),
        ("w2-ddp-s0", 1800.0, {"peaks": (3 * 2**30, 5 * 2**30), "mfu": 0.2}),
        ("w4-ddp-s0", 4400.0, {"peaks": (2**30,) * 4}),  # 4.4x on 4 processes: impossible, flagged
        ("w1-fsdp-s0", 800.0, {}),
        ("w2-fsdp-s0", 1200.0, {"peaks": (2**29, 2**29)}),
    ]:
        write_run(out, name, tokens, study_sets(name), **extra)
    return an.load_study(out)


def rows_by(table, backend: str) -> dict:
    return {int(r.processes): r for r in table[table["backend"] == backend].itertuples()}


def test_speed_up_and_efficiency_are_tokens_per_s_over_the_same_backends_one_process_run(written):
    from analysis.experiments.gpt_throughput import gpt_throughput_table

    table = gpt_throughput_table(written)
    ddp, fsdp = rows_by(table, "ddp"), rows_by(table, "fsdp")
    assert (ddp[2].tokens_per_s, ddp[2].speedup, ddp[2].efficiency) == (1800.0, pytest.approx(1.8),
                                                                        pytest.approx(0.9))
    assert (ddp[4].speedup, ddp[4].efficiency) == (pytest.approx(4.4), pytest.approx(1.1))
    assert (fsdp[2].speedup, fsdp[2].efficiency) == (pytest.approx(1.5), pytest.approx(0.75))  # over FSDP's 800
    assert ddp[1].speedup == fsdp[1].speedup == 1.0
    assert {r.context for r in table.itertuples()} == {CONTEXT}


def test_hybrid_shardings_speed_up_is_over_full_shardings_one_process_run(tmp_path):
    """hsdp has no 1-process run (it needs two nodes or more); on one process it is full sharding, so its speed-up
    and efficiency are over FSDP's 1-process run of the same scale, numerics and batch."""
    import analysis as an
    from analysis.experiments.gpt_throughput import gpt_throughput_table, rq6_reading

    across = {"peaks": (2**29,) * 4, "local_ranks": (0, 1, 0, 1)}  # 2 nodes of 2, as torchrun numbers them
    write_run(tmp_path, "w1-fsdp-s0", 800.0, study_sets("w1-fsdp-s0"))
    write_run(tmp_path, "n2-t2-hsdp-s0", 2000.0, ["train.workers=4", "train.backend=hsdp"], **across)
    write_run(tmp_path, "n2-t2-fsdp-s0", 1600.0, ["train.workers=4", "train.backend=fsdp"], **across)
    (hsdp,) = [r for r in gpt_throughput_table(an.load_study(tmp_path)).itertuples() if r.backend == "hsdp"]
    assert (hsdp.processes, hsdp.nodes, hsdp.speedup, hsdp.efficiency) == (4, 2, pytest.approx(2.5),
                                                                           pytest.approx(0.625))
    # the reading's line of that placement sets hybrid sharding against full sharding on the same nodes
    (line,) = [x for x in rq6_reading(an.load_study(tmp_path)).splitlines() if "on 2 nodes" in x]
    assert "4 process(es) on 2 nodes" in line and "HSDP's tokens/s 1.25x FSDP's" in line


def test_mfu_where_recorded_else_unmeasured_model_flops_and_the_largest_ranks_peak(written):
    from analysis.experiments.gpt_throughput import UNMEASURED, gpt_throughput_table

    ddp, fsdp = rows_by(gpt_throughput_table(written), "ddp"), rows_by(gpt_throughput_table(written), "fsdp")
    assert (ddp[1].mfu_pct, ddp[2].mfu_pct, ddp[4].mfu_pct) == (25.0, 20.0, UNMEASURED)
    assert ddp[2].model_tflops_per_s == pytest.approx(1800.0 * 1e6 / 1e12)
    assert (ddp[2].peak_gib_a_rank, fsdp[2].peak_gib_a_rank, ddp[2].peak_memory_of) == (5.0, 0.5, "cuda_allocated")


def test_a_speed_up_above_its_processes_and_a_disturbed_baseline_are_flagged(written, tmp_path):
    from analysis.experiments.gpt_throughput import gpt_throughput_table
    import analysis as an

    ddp = rows_by(gpt_throughput_table(written), "ddp")
    assert "speed-up 4.40 above its ideal 4" in ddp[4].flag and ddp[2].flag == ddp[1].flag == ""
    write_run(tmp_path, "w1-ddp-s0", 1000.0, study_sets("w1-ddp-s0"), disturbed=True)
    write_run(tmp_path, "w2-ddp-s0", 1800.0, study_sets("w2-ddp-s0"))
    busy = rows_by(gpt_throughput_table(an.load_study(tmp_path)), "ddp")
    assert busy[1].flag.startswith("host busy") and busy[2].flag.startswith("baseline: host busy")


def test_no_experiment_14_run_draws_nothing_and_says_what_would(tmp_path):
    import analysis as an
    from analysis import catalogue as ct
    from analysis.experiments import gpt_throughput as gt

    inputs = ct.inputs(an.load_study(tmp_path), an.load_reference())
    assert gt.gpt_throughput_table(inputs.df) is None and gt.TABLES[0].make(inputs, gt.TABLES[0]) is None
    assert gt.FIGURES[0].make(inputs, gt.FIGURES[0]) == gt.NO_RUNS and "make exp14" in gt.rq6_reading(inputs.df)


def test_the_core_scan_catches_each_way_of_naming_experiment_14_and_finds_none():
    """The ast scan of analysis/*.py (tests/test_analysis_plugins.py) on the ways a core module would name this
    experiment -- its slug, its folder, its number compared, kept or given as an entry's -- and on the core itself."""
    from tests import test_analysis_plugins as scan

    params = {"Table": ["name", "thesis", "experiments"]}
    for named_so in ("x = 'gpt_throughput'", "x = 'results/runs/14_gpt_throughput'", "ok = df['exp'] == 14",
                     "GPT_EXP = 14", "t = Table('x', '', (14,), make)"):
        assert scan.experiments_named(named_so, params), named_so
    scan.test_the_core_names_no_experiment()


# ============================================================================================ a tiny real study


@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    """DDP and FSDP on 1 and 2 processes, FSDP's 2 also as 2 torchrun nodes of 1, 3 timed steps after 1 (about a
    minute on 2 cores)."""
    out = tmp_path_factory.mktemp("exp14")
    done = run([sys.executable, "-m", "suite", "study", str(EXP14), "--scale", "local", "--set", "bench.batches=3",
                "--set", "bench.warmup_batches=1", "--only", "w1-ddp-s0", "w2-ddp-s0", "w1-fsdp-s0", "w2-fsdp-s0",
                "n2-t1-fsdp-s0", "--out", str(out)], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
@needs_corpus
def test_the_table_reads_the_trainers_records_and_manifests(studied):
    import analysis as an
    from analysis.experiments.gpt_throughput import UNMEASURED, gpt_throughput_table

    frame = an.load_study(studied)
    table = gpt_throughput_table(frame)
    # FSDP's 2 processes on one node and on 2 nodes share a config fingerprint: two runs all the same, two rows
    assert sorted(zip(table["backend"], table["processes"], table["nodes"])) == [
        ("ddp", 1, 1), ("ddp", 2, 1), ("fsdp", 1, 1), ("fsdp", 2, 1), ("fsdp", 2, 2)]
    assert not [p for p in frame.attrs.get("problems", []) if "the same run as" in p]
    # nor is one a repeat of the other: no configuration here was measured twice, so no backend is named fastest
    from analysis.experiments.gpt_throughput import rq6_reading
    from analysis.tables import repeat_spread

    assert repeat_spread(frame)[1] == 0 and "No configuration was measured twice" in rq6_reading(frame)
    from analysis.tables import throughput_summary  # the core's throughput rows keep the two placements apart too

    from analysis.compare import report_comparison
    from studies.progress import summary  # what the study said as each run ended: its tokens/s

    closing = report_comparison(frame, (14,))  # and its closing table, beside the reference's runs
    assert set(closing["measure"]) == {"steady tokens/s"}
    closing = closing.set_index("configuration")

    fsdp2 = throughput_summary(frame).query("backend == 'fsdp' and gpus == 2")
    assert sorted(fsdp2["nodes"]) == [1, 2] and fsdp2["n_runs"].tolist() == [1, 1]
    for r in table.itertuples():
        name = f"w{int(r.processes)}" if r.nodes == 1 else f"n{int(r.nodes)}-t{int(r.processes / r.nodes)}"
        run_dir = studied / "14_gpt_throughput" / f"{name}-{r.backend}-s0"
        (bench,) = [x for x in read_metrics(run_dir / "metrics.jsonl").records if x["kind"] == "bench"]
        placement = json.loads((run_dir / "manifest.json").read_text())["placement"]
        assert summary(run_dir).startswith(f"completed: {bench['tokens_per_s']:.1f} tokens/s (steady state)")
        assert closing.loc[f"{name}-{r.backend}", "this machine"] == f"{bench['tokens_per_s']:.2f}"
        assert r.tokens_per_s == bench["tokens_per_s"] and r.context == CONTEXT and r.mfu_pct == UNMEASURED
        assert r.model_tflops_per_s == pytest.approx(bench["model_flops_per_s"] / 1e12, rel=1e-12)
        assert len(placement) == r.processes and r.peak_memory_of == "cpu_rss"
        assert r.peak_gib_a_rank == max(p["peak_memory_bytes"] for p in placement) / 2**30
        one = table[(table["backend"] == r.backend) & (table["processes"] == 1)]["tokens_per_s"].iloc[0]
        assert r.speedup == pytest.approx(r.tokens_per_s / one) and r.efficiency == pytest.approx(r.speedup
                                                                                                 / r.processes)
        assert isinstance(r.flag, str) and (r.speedup <= r.processes + 0.005 or "above its ideal" in r.flag)


@pytest.mark.slow
@needs_corpus
def test_the_report_draws_the_table_figure_page_and_notebook_of_the_real_runs(studied, tmp_path):
    from analysis.__main__ import main
    from analysis.experiments.gpt_throughput import NOTEBOOKS
    from analysis.notebooks import run_notebooks

    assert main(["report", "--runs", str(studied), "--out", str(tmp_path / "out"), "--no-notebooks"]) == 0
    md = (tmp_path / "out" / "tables" / "exp14_gpt_throughput.md").read_text()
    assert "Made from 5 runs" in md and "| local scale | fsdp | pytorch | fp32 | 4 | 128 | 2 |" in md
    assert (tmp_path / "out" / "figures" / "exp14_gpt_throughput.png").stat().st_size > 10_000
    page = (tmp_path / "out" / "gpt_throughput.html").read_text()
    assert "figures/exp14_gpt_throughput.png" in page and "table-exp14_gpt_throughput" in page
    (notebook,) = run_notebooks(tmp_path / "nb", studied, None, NOTEBOOKS)
    cells = json.loads(notebook.read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    assert not any(o["output_type"] == "error" for o in outputs)
    assert any("FSDP's tokens/s" in "".join(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the figure, drawn from the table


def test_its_windows_per_s_stay_out_of_the_thesis_images_per_s_tables(written):
    """A GPT window is no image: the scaling table (Tables 1-9's images/s, Figure 17, the headline's speed-ups)
    reads the runs of the experiments measured in images/s alone, so experiment 14's bench rows add no row there."""
    from analysis import catalogue
    from analysis.reference import load_reference

    assert len(written[written["kind"] == "bench"]) == 5  # the runs are read, as bench rows
    inputs = catalogue.inputs(written, load_reference())
    scaling = inputs.scaling
    assert len(scaling) and set(scaling["source"]) == {"thesis"}
    # the per-configuration images/s table too: a table of named experiments reads their runs alone (of_runs)
    (summary,) = [entry for entry in catalogue.TABLES if entry.name == "throughput_summary"]
    assert 14 not in summary.experiments and 14 not in set(summary.make(inputs, summary).get("exp", []))


@pytest.mark.slow
@needs_corpus
def test_a_run_on_two_nodes_is_never_given_a_reference_run_on_one_as_its_reference(studied, tmp_path):
    """FSDP's 2 processes on one node and as 2 torchrun nodes of 1 share a config fingerprint; the table a study
    prints when it ends gives each the reference's run placed alike, never the other placement's."""
    import shutil

    from analysis.compare import comparison_frame, run_value
    from contract.reader import folder_fingerprint

    runs = studied / "14_gpt_throughput"
    reference = tmp_path / "reference" / "m"
    shutil.copytree(runs / "w2-fsdp-s0", reference / "14_gpt_throughput" / "w2-fsdp-s0")
    (reference / "machine.toml").write_text('label = "m"\n')
    entries = [dict(name=name, run_dir=runs / name, fingerprint=folder_fingerprint(runs / name),
                    experiment="14_gpt_throughput", framework="pytorch", gpus=2, per_gpu_batch=4)
               for name in ("w2-fsdp-s0", "n2-t1-fsdp-s0")]
    assert entries[0]["fingerprint"] == entries[1]["fingerprint"]
    frame = comparison_frame(entries, "throughput", root=tmp_path / "reference")
    by = dict(zip(frame["configuration"], frame["reference: m"]))
    assert by == {"w2-fsdp": f"{run_value(runs / 'w2-fsdp-s0', 'throughput'):.2f}", "n2-t1-fsdp": "-"}
