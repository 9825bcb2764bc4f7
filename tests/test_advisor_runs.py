"""Each experiment-3 run beside the advisor's prediction for its own placement (issue #51), on run folders made
here: the arithmetic, the matching of parts to the run's machine, shape and link, and the flag."""
import json
import math

import pandas as pd
import pytest

from analysis.advisor import model as advisor, runs as advisor_runs
from analysis.advisor.model import Link
from contract.manifest import VERSION

CPU = "Test CPU 2000"
INTRA, INTER = Link(50e-6, 1e9), Link(200e-6, 2.5e6)  # 20 Mbit/s across
STEP = {"model": "cifar_resnet20", "batch": 32, "image_size": 32, "forward_s": 0.02, "backward_s": 0.04,
        "optimizer_s": 0.0, "whole_step_s": 0.06, "gradient_bytes": 280_000, "loader_workers": 0,
        "input_images_per_s": None, "machine": {"cpu_model": CPU}}


def points(link: Link) -> list[list[float]]:
    return [[n, advisor.ring_allreduce_s(n, 2, link)] for n in (4096, 65536, 1 << 20)]


def parts(tmp_path, rate="20mbit", threads=(1,), cpu=CPU, shared_cores=2):
    steps, checks = tmp_path / "steps", tmp_path / "checks"
    steps.mkdir()
    for t in threads:
        (steps / f"t{t}.json").write_text(json.dumps({**STEP, "threads": t}))
    folder = checks / "local-20261128-010000"
    folder.mkdir(parents=True)
    advisor.write_link_fit(folder, "intra", advisor.link_record(points(INTRA), 2, ["n1", "n1"], None, cpu_model=cpu))
    advisor.write_link_fit(folder, "inter", advisor.link_record(points(INTER), 2, ["n1", "n2"], rate, cpu_model=cpu))
    advisor.annotate_link_fit(folder, "local", shared_cores)
    return steps, checks


def run(tmp_path, name, hosts, threads=1, link="20mbit", cpu=CPU, measured=100.0, comm_s=0.5, data_s=0.1,
        backend="ddp", framework="pytorch"):
    """A run folder (manifest with placement, config) and its bench row as analysis.runs.load_study has it."""
    folder = tmp_path / "runs" / name
    folder.mkdir(parents=True)
    placement = [{"host": h, "threads": threads, "cpus": 1} for h in hosts]
    (folder / "manifest.json").write_text(json.dumps({"manifest_version": VERSION, "placement": placement, "link": link,
                                                      "machine": {"cpu_model": cpu, "cores": 2}}))
    (folder / "config.json").write_text(json.dumps({"model": {"name": "cifar_resnet20"},
                                                    "train": {"per_worker_batch": 32}, "data": {"image_size": 32}}))
    return {"kind": "bench", "exp": 3, "run": name, "backend": backend, "framework": framework, "processes": len(hosts),
            "steady_images_per_s": measured, "data_s": data_s, "compute_s": 1.0, "comm_s": comm_s,
            "cpus_per_rank": 1.0, "path": str(folder)}


def expected(ranks, per_host, threads=1, shared=2):
    step = advisor.Step(0.02, 0.04, 0.0, 32, 280_000, input_overlaps=False, threads=threads)
    return advisor.predict(step, "ddp", ranks, per_host, INTRA, INTER, shared_cores=shared)


def test_each_run_is_predicted_for_its_own_placement_and_flagged_when_below_it(tmp_path):
    steps, checks = parts(tmp_path)
    across = expected(4, 2)  # 2 hosts of 2 ranks over the 20 Mbit/s link, 4 threads on 2 cores
    df = pd.DataFrame([run(tmp_path, "n4", ["n1", "n1", "n2", "n2"], measured=across.images_per_s * 0.8),
                       run(tmp_path, "n2", ["n1", "n2"], measured=expected(2, 1).images_per_s)])
    table = advisor_runs.prediction_table(df, steps, checks, tolerance=0.15).set_index("run")
    assert table.loc["n4", "predicted"] == pytest.approx(across.images_per_s)
    assert table.loc["n4", "error"] == pytest.approx(1 / 0.8 - 1) and table.loc["n4", "bound"] == across.bound
    assert table.loc["n4", "flag"] == "below prediction"
    assert table.loc["n4", "cause"] == ("communication 31 % of the timed step; data wait 6 %; 1 thread(s) a rank on "
                                        "1 CPU(s)")
    assert table.loc["n2", "error"] == pytest.approx(0.0) and table.loc["n2", "flag"] == ""
    assert (table.loc["n4", "hosts"], table.loc["n4", "ranks_per_host"]) == (2, 2)


def test_a_run_without_its_own_parts_says_which_instead_of_a_number(tmp_path):
    steps, checks = parts(tmp_path)
    df = pd.DataFrame([run(tmp_path, "other-rate", ["n1", "n2"], link="100mbit"),
                       run(tmp_path, "other-cpu", ["n1", "n2"], cpu="Another CPU"),
                       run(tmp_path, "two-threads", ["n1", "n2"], threads=2),
                       run(tmp_path, "one-host", ["n1", "n1"], link=None)])
    table = advisor_runs.prediction_table(df, steps, checks, tolerance=0.15).set_index("run")
    assert table.loc["other-rate", "cause"].startswith("no prediction: no link fit for this machine at 100mbit")
    assert table.loc["other-cpu", "cause"].startswith("no prediction: no link fit for this machine")
    assert table.loc["two-threads", "cause"].startswith("no prediction: no step split of cifar_resnet20 batch 32 at "
                                                        "2 thread(s) on this machine")
    assert all(math.isnan(v) for v in table.loc[["other-rate", "other-cpu", "two-threads"], "predicted"])
    # one host needs the within-a-node link only, whatever rate the across-nodes probe ran at; its machine's cores
    assert table.loc["one-host", "predicted"] == pytest.approx(expected(2, 2).images_per_s)


def test_a_run_whose_manifest_records_no_placement_gets_no_prediction(tmp_path):
    steps, checks = parts(tmp_path)
    row = run(tmp_path, "old", ["n1"])
    (tmp_path / "runs" / "old" / "manifest.json").write_text(json.dumps({"manifest_version": VERSION}))
    table = advisor_runs.prediction_table(pd.DataFrame([row]), steps, checks, tolerance=0.15)
    assert table.loc[0, "cause"].startswith("no prediction: the manifest records no per-rank placement")


def test_more_threads_than_cpus_is_named_first():
    row = pd.Series({"data_s": 0.1, "compute_s": 1.0, "comm_s": 0.5})
    assert advisor_runs.cause(row, 4, 2.0).startswith("4 thread(s) a rank on 2 CPU(s): more threads than CPUs; "
                                                      "communication 31 %")


def test_links_timed_between_another_clusters_nodes_are_not_the_runs(tmp_path):
    steps, checks = parts(tmp_path)  # timed between n1 and n2
    df = pd.DataFrame([run(tmp_path, "elsewhere", ["g101", "g102"]), run(tmp_path, "here", ["n2", "n3"])])
    table = advisor_runs.prediction_table(df, steps, checks, tolerance=0.15).set_index("run")
    assert table.loc["elsewhere", "cause"].startswith("no prediction: no link fit for this machine at 20mbit")
    assert not math.isnan(table.loc["here", "predicted"])


def test_tensorflow_runs_get_no_row_the_advisor_models_pytorchs_step(tmp_path):
    steps, checks = parts(tmp_path)
    df = pd.DataFrame([run(tmp_path, "tf", ["n1", "n2"], backend="horovod", framework="horovod+tensorflow"),
                       run(tmp_path, "mwms", ["n1", "n2"], backend="mwms", framework="tensorflow"),
                       run(tmp_path, "hvd", ["n1", "n2"], backend="horovod", framework="horovod+pytorch")])
    assert list(advisor_runs.prediction_table(df, steps, checks, tolerance=0.15)["run"]) == ["hvd"]


def test_each_prediction_names_the_link_fit_it_used(tmp_path):
    steps, checks = parts(tmp_path)
    table = advisor_runs.prediction_table(pd.DataFrame([run(tmp_path, "a", ["n1", "n2"])]), steps, checks)
    assert table["link_fit"].tolist() == ["local-20261128-010000"]


def test_the_committed_report_predicts_from_committed_link_fits_only():
    """The committed exp3_predicted is redrawn from the repository alone: the committed reference's report reads the
    committed link fits, never this machine's gitignored results/cluster_check (which a fresh clone lacks)."""
    from analysis import report
    from tests.helpers import REPO

    assert report.link_fits_for(report.committed_runs()) == advisor_runs.COMMITTED_LINK_FITS
    assert advisor_runs.COMMITTED_LINK_FITS.is_relative_to(REPO) and any(advisor_runs.COMMITTED_LINK_FITS.glob(
        f"*/{advisor.LINK_FIT}"))
    assert report.link_fits_for(REPO / "results" / "runs") == advisor.CHECK_ROOT
    committed = pd.read_csv(REPO / "results" / "tables" / "exp3_predicted.csv")
    used = set(committed["link_fit"].dropna())
    assert used and all((advisor_runs.COMMITTED_LINK_FITS / name / advisor.LINK_FIT).is_file() for name in used)
