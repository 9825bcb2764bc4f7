"""analysis/link.py: experiment 3's throughput against the link rate, per backend and processes (make link-sweep's
run folders, each with the link it ran under in its manifest), kept out of the tables that average a configuration."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from analysis import catalogue as ct  # noqa: E402
from analysis import link as lk  # noqa: E402
from tests import synth_records as synth  # noqa: E402
from analysis import tables as tb  # noqa: E402
from analysis.report import build_figures, build_tables  # noqa: E402
from analysis.runs import load_study  # noqa: E402

EXP3 = "03_throughput_distributed_data_parallel"
FRAMEWORK = {"ddp": "pytorch", "horovod": "horovod+pytorch"}
#: (backend, processes, rate) -> (seconds a batch of 32 images a process, share of it communicating)
SWEEP = {("ddp", 1, r): (0.1, 0.0) for r in ("10mbit", "100mbit", "none")} | {
    ("horovod", 1, r): (0.125, 0.0) for r in ("10mbit", "100mbit", "none")} | {
    ("ddp", 2, "10mbit"): (0.4, 0.8), ("ddp", 2, "100mbit"): (0.16, 0.5), ("ddp", 2, "none"): (0.1, 0.1),
    ("horovod", 2, "10mbit"): (0.5, 0.8), ("horovod", 2, "100mbit"): (0.25, 0.5), ("horovod", 2, "none"): (0.125, 0.1)}


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def sweep_run(root, backend: str, processes: int, rate: str, batch_s: float, comm_share: float, link=True):
    """One of make link-sweep's runs: root/<rate>/<experiment>/<run>, its manifest naming the link where tc limited
    it (`none`: unlimited, no link recorded, as the trainer writes it) and its ranks' hosts."""
    manifest = {"hosts": [f"n{i + 1}" for i in range(processes)]}
    if rate != "none" and link:
        manifest["link"] = rate
    return synth.write_run(root / rate, EXP3, f"n{processes}-{backend}-s0", framework=FRAMEWORK[backend],
                           gpus=processes, backend=backend, bench_batches=20, warmup_batches=5, batch_s=batch_s,
                           comm_share=comm_share, manifest_extra=manifest)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("link_sweep")
    for (backend, processes, rate), (batch_s, share) in SWEEP.items():
        sweep_run(root, backend, processes, rate, batch_s, share)
    return root


def entry(entries, name):
    return next(e for e in entries if e.name == name)


def test_three_link_rates_and_two_backends_give_a_row_each_with_its_speedup_and_communication(sweep):
    table = lk.link_table(load_study(sweep))
    key = list(zip(table["backend"], table["processes"], table["link"]))
    assert key == [(b, p, r) for b in ("ddp", "horovod") for p in (1, 2) for r in ("10mbit", "100mbit", "unlimited")]
    for row in table.itertuples():
        batch_s, share = SWEEP[(row.backend, row.processes, "none" if row.link == "unlimited" else row.link)]
        one_s, _ = SWEEP[(row.backend, 1, "none" if row.link == "unlimited" else row.link)]
        assert row.images_per_s == pytest.approx(32 * row.processes / batch_s)
        assert row.speedup == pytest.approx((32 * row.processes / batch_s) / (32 / one_s))  # over 1 process, same link
        assert row.comm_share == pytest.approx(share)
        assert row.hosts == row.processes and row.n_runs == 1
    assert table["link_mbit_s"].tolist()[:3] == [10, 100, math.inf]  # ordered by rate, unlimited last
    ddp2 = table[(table["backend"] == "ddp") & (table["processes"] == 2)]
    assert ddp2["speedup"].round(3).tolist() == [0.5, 1.25, 2.0]


def test_runs_under_a_link_leave_the_standard_tables_as_the_unlimited_runs_alone_make_them(sweep):
    df = load_study(sweep)
    assert not any("not averaged" in p for p in df.attrs["problems"])  # another link: another measurement, no mix
    assert tb.throughput_summary(df).equals(tb.throughput_summary(load_study(sweep / "none")))
    assert len(df[df["kind"] == "run"]) == len(SWEEP)  # every run still listed


def test_runs_without_a_link_draw_no_link_table(tmp_path, sweep):
    none = load_study(sweep / "none")  # a cluster's runs across hosts, never under a limited link
    assert lk.link_table(none).empty
    inputs = ct.Inputs(none, None, "Made from 6 runs in x.")
    assert entry(ct.TABLES, "link_rates").make(inputs, entry(ct.TABLES, "link_rates")) is None
    assert build_figures(inputs, tmp_path, (entry(ct.FIGURES, "link_rates"),)) == (
        [], ["link_rates: no link-sweep runs (make link-sweep, then make report OUT=results/link_sweep)"])
    synth.write_run(tmp_path / "one", EXP3, "n1-ddp-s0", framework="pytorch", backend="ddp", bench_batches=20,
                    warmup_batches=5)  # one host (the committed reference's kind of run): nothing to say
    single = ct.Inputs(load_study(tmp_path / "one"), None)
    assert build_figures(single, tmp_path, (entry(ct.FIGURES, "link_rates"),)) == ([], [])


def test_a_limited_run_without_its_unlimited_twin_still_has_its_row(tmp_path):
    sweep_run(tmp_path, "ddp", 2, "100mbit", 0.16, 0.5)
    table = lk.link_table(load_study(tmp_path))
    assert table[["backend", "processes", "link"]].values.tolist() == [["ddp", 2, "100mbit"]]
    assert math.isnan(table["speedup"].iloc[0])  # no 1-process run at that link: no speed-up, never a made-up one


def test_the_report_writes_the_table_and_figure_and_the_sweep_the_same_table(sweep, tmp_path):
    from tools.link_sweep import tabulate

    inputs = ct.Inputs(load_study(sweep), None, "Made from 12 runs in x.")
    written = build_tables(inputs, tmp_path / "tables", (entry(ct.TABLES, "link_rates"),))
    figures, skipped = build_figures(inputs, tmp_path / "figures", (entry(ct.FIGURES, "link_rates"),))
    assert [p.name for p in written] == ["link_rates.csv", "link_rates.md"] and not skipped
    assert [p.name for p in figures] == ["link_rates.png", "link_rates.pdf"]
    md = (tmp_path / "tables" / "link_rates.md").read_text()
    assert "| ddp | 2 | 2 | 100mbit | 400.00 | 1.25 | 0.5 | 1 |" in md, md
    out = tmp_path / "sweep"
    out.mkdir()
    paths = tabulate(sweep, out)
    assert {p.name for p in paths} >= {"link_sweep.csv", "link_sweep.md", "link_sweep.png"}
    ours = pd.read_csv(out / "link_sweep.csv")
    assert ours.equals(pd.read_csv(tmp_path / "tables" / "link_rates.csv"))  # one function, not two
