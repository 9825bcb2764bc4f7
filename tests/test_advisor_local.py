"""The advisor's local-cluster validation (issue #51) on fabricated run folders in tmp: the arithmetic of its rows,
the table beside the thesis's rows, median and worst, the figure. The committed rows come only from real runs
(make link-sweep, then make advise-local); this checks what is computed from them."""
import math
import statistics

import pytest

from tests import synth_records as synth
from analysis.advisor import local as advisor_local, model as advisor
from analysis.advisor.model import Link
from tests.test_advisor_runs import CPU, INTER, INTRA, STEP, parts  # noqa: F401 -- the same parts

EXP3 = "03_throughput_distributed_data_parallel"


def sweep_run(root, rate, backend, hosts, threads, batch_s, comm_share=0.3):
    manifest = {"hosts": sorted(set(hosts)), "machine": {"cpu_model": CPU, "cores": 2},
                "placement": [{"host": h, "threads": threads, "cpus": 1} for h in hosts]}
    if rate != "none":
        manifest["link"] = rate
    return synth.write_run(root / rate, EXP3, f"n{len(hosts)}-{backend}-s0", gpus=len(hosts), backend=backend,
                           framework="pytorch" if backend == "ddp" else "horovod+pytorch", bench_batches=20,
                           warmup_batches=5, batch_s=batch_s, comm_share=comm_share, manifest_extra=manifest)


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    for rate, batch_s in (("20mbit", 0.4), ("100mbit", 0.2)):
        sweep_run(root, rate, "ddp", ["n1"], 2, 0.05, 0.0)
        sweep_run(root, rate, "ddp", ["n1", "n2"], 1, batch_s)
        sweep_run(root, rate, "horovod", ["n1", "n2"], 1, batch_s * 1.2)
    steps, checks = parts(tmp_path, threads=(1, 2))
    (steps / "t1.json").write_text((steps / "t1.json").read_text().replace("cifar_resnet20", "resnet8")
                                   .replace('"image_size": 32', '"image_size": 16'))
    (steps / "t2.json").write_text((steps / "t2.json").read_text().replace("cifar_resnet20", "resnet8")
                                   .replace('"image_size": 32', '"image_size": 16'))
    return root, steps, checks


def test_each_rate_s_runs_are_predicted_from_that_rate_s_link_alone(sweep):
    root, steps, checks = sweep
    rows = advisor_local.local_rows(root, steps, checks, tolerance=0.15)
    assert [(r["source"], r["framework"], r["gpus"]) for r in rows] == [
        (f"local cluster, link {rate}", fw, g) for rate in ("20mbit", "100mbit")
        for fw, g in (("horovod+pytorch", 2), ("pytorch", 1), ("pytorch", 2))]
    step = advisor.Step(0.02, 0.04, 0.0, 32, 280_000, input_overlaps=False)
    at_20 = {(r["framework"], r["gpus"]): r for r in rows if r["source"].endswith("20mbit")}
    two = at_20[("pytorch", 2)]
    expected = advisor.predict(step, "ddp", 2, 1, INTRA, INTER, shared_cores=2)
    assert two["predicted"] == pytest.approx(expected.images_per_s)
    assert two["error"] == pytest.approx(two["predicted"] / two["measured"] - 1)
    assert two["holds"] == (abs(two["error"]) <= 0.15) and two["nodes"] == 2
    # the fits were timed at 20 Mbit/s only: the 100 Mbit/s runs across hosts get no number, the one-host run does
    at_100 = {(r["framework"], r["gpus"]): r for r in rows if r["source"].endswith("100mbit")}
    assert math.isnan(at_100[("pytorch", 2)]["predicted"])
    assert at_100[("pytorch", 2)]["why"].startswith("no prediction: no link fit for this machine at 100mbit")
    assert at_100[("pytorch", 1)]["predicted"] == pytest.approx(
        advisor.predict(advisor.Step(0.02, 0.04, 0.0, 32, 280_000, input_overlaps=False, threads=2), "ddp", 1, 1,
                        INTRA, INTER, shared_cores=2).images_per_s)


def test_the_validation_table_sets_the_local_rows_beside_the_thesis_with_median_and_worst(sweep, tmp_path):
    from tools.advisor_local import tabulate

    root, steps, checks = sweep
    rows = tabulate(root, steps, checks, tmp_path / "tables", tmp_path / "figures")
    back = advisor_local.read_local_rows(tmp_path / "tables" / "advisor_local.csv")
    assert [(r["run"], r["gpus"], r["holds"]) for r in back] == [(r["run"], r["gpus"], r["holds"]) for r in rows]
    assert back[0]["predicted"] == pytest.approx(rows[0]["predicted"], rel=1e-5)
    text = (tmp_path / "tables" / "advisor_validation.md").read_text()
    counted = [r for r in rows if not math.isnan(r["error"])]
    errors = [abs(r["error"]) for r in counted]
    assert (f"local cluster: {len(counted)} rows: median |error| {100 * statistics.median(errors):.1f} %, worst "
            f"|error| {100 * max(errors):.1f} %") in text
    assert text.count("| thesis Table ") == 8 and text.count("| local cluster, link ") == 6
    assert "| local cluster, link 100mbit | pytorch | 2 | 2 |  | " in text and "no link fit for this machine" in text
    assert (tmp_path / "figures" / "advisor_validation.png").stat().st_size > 0
    assert text == advisor.validation_markdown(advisor.thesis_validation(), back)  # the CSV renders it again


def test_no_sweep_runs_is_one_line_saying_what_to_run(tmp_path):
    from tools.advisor_local import main

    assert main(["--sweep", str(tmp_path / "none"), "--no-probe"]) == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no experiment-3 runs under .*: run make link-sweep"):
        main(["--sweep", str(tmp_path / "empty"), "--no-probe"])
