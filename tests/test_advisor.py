"""The scaling advisor's model (issue #51): each formula against a hand computation, then the thesis's Tables 8-9."""
import datetime
import json
import math
import statistics
import subprocess

import pytest

from analysis.advisor import model as advisor
from analysis.advisor.model import Link, Step
from tests.helpers import REPO


def test_a_ring_allreduce_is_2_p_minus_1_messages_of_n_over_p():
    link = Link(latency_s=1e-6, bytes_per_s=1e9)
    assert advisor.ring_allreduce_s(8e6, 1, link) == 0.0  # one rank: nothing to reduce
    assert advisor.ring_allreduce_s(8e6, 4, link) == pytest.approx(2 * 3 * (1e-6 + 2e6 / 1e9))
    # the bandwidth term tends to 2 n / beta as p grows: the ring's defining property
    assert advisor.ring_allreduce_s(8e6, 1024, Link(0.0, 1e9)) == pytest.approx(2 * 8e6 / 1e9, rel=1e-3)


def test_a_ring_across_nodes_runs_at_its_slowest_link():
    fast, slow = Link(1e-5, 15e9), Link(1e-6, 6e9)
    assert advisor.ring_link(ranks_per_node=4, nodes=1, intra=fast, inter=slow) == fast
    assert advisor.ring_link(ranks_per_node=4, nodes=2, intra=fast, inter=slow) == Link(1e-5, 6e9)


def test_the_link_fit_recovers_latency_and_bandwidth_from_timed_messages():
    sizes = [1e3, 1e5, 1e6, 1e7, 1e8]
    seconds = [20e-6 + n / 5e9 for n in sizes]
    link = advisor.fit_link(sizes, seconds)
    assert link.latency_s == pytest.approx(20e-6, rel=1e-6) and link.bytes_per_s == pytest.approx(5e9, rel=1e-6)
    with pytest.raises(ValueError, match="two message sizes"):
        advisor.fit_link([1e6, 1e6], [1e-3, 1.1e-3])


def test_buckets_ready_through_the_backward_expose_only_what_outlasts_it():
    # one bucket: nothing overlaps, the whole reduction follows the backward
    assert advisor.exposed_communication_s(0.3, backward_s=1.0, buckets=1) == pytest.approx(0.3)
    # 4 buckets, short reductions: only the last bucket's reduction sticks out
    assert advisor.exposed_communication_s(0.4, backward_s=1.0, buckets=4) == pytest.approx(0.1)
    # 4 buckets, long reductions: they start with the first bucket (a quarter into the backward) and run back to back
    assert advisor.exposed_communication_s(2.0, backward_s=1.0, buckets=4) == pytest.approx(0.25 + 2.0 - 1.0)
    assert advisor.exposed_communication_s(0.0, backward_s=1.0, buckets=4) == 0.0


STEP = Step(forward_s=0.2, backward_s=0.4, optimizer_s=0.0, batch=128, gradient_bytes=100_000_000)


def test_one_rank_runs_at_its_step_and_more_ranks_pay_what_the_backward_does_not_hide():
    link = Link(0.0, 1e9)
    one = advisor.predict(STEP, "ddp", ranks=1, ranks_per_node=4, intra=link, inter=link)
    assert one.images_per_s == pytest.approx(128 / 0.6) and one.efficiency == 1.0 and one.bound == "compute"
    four = advisor.predict(STEP, "ddp", ranks=4, ranks_per_node=4, intra=link, inter=link)
    comm = 2 * 3 * 25e6 / 1e9  # 0.15 s in 4 buckets of 25 MB
    exposed = max(0.4 + comm / 4, 0.4 / 4 + comm) - 0.4
    assert four.exposed_communication_s == pytest.approx(exposed)
    assert four.images_per_s == pytest.approx(4 * 128 / (0.6 + exposed))
    assert four.efficiency == pytest.approx(0.6 / (0.6 + exposed))


def test_a_slow_link_makes_communication_the_bound_and_a_slow_input_the_input():
    slow = advisor.predict(STEP, "horovod", ranks=8, ranks_per_node=4, intra=Link(0, 1e10), inter=Link(0, 1e8))
    assert slow.bound == "communication" and slow.efficiency < 0.5
    starved = advisor.predict(Step(**{**STEP.__dict__, "input_images_per_s": 100.0}), "ddp", ranks=1,
                              ranks_per_node=1, intra=Link(0, 1e9), inter=Link(0, 1e9))
    assert starved.bound == "input" and starved.images_per_s == pytest.approx(100.0)


def test_adding_nodes_stops_paying_where_a_node_adds_less_than_half_its_own_rate():
    rows = [advisor.Prediction(ranks=4 * n, nodes=n, images_per_s=r, efficiency=0, bound="compute",
                               step_s=0, exposed_communication_s=0)
            for n, r in [(1, 100.0), (2, 190.0), (3, 260.0), (4, 280.0)]]
    # node 2 adds 90 (>= 50), node 3 adds 70, node 4 adds 20 < 50: the fourth node no longer pays
    assert advisor.break_even_nodes(rows) == 3
    assert advisor.break_even_nodes(rows[:3]) is None  # every node added still pays


# ---- the thesis ---------------------------------------------------------------------------------------------------
def test_the_declaration_was_committed_before_the_model_that_reads_it():
    """The tolerance and the inputs were fixed before any prediction: the declaration's first commit precedes the
    first commit of the model (analysis/advisor/model.py, followed back to analysis/advisor.py before it moved into
    the package), and its date is that commit's."""
    def first_commit(path):
        out = subprocess.run(["git", "log", "--follow", "--format=%H %cI", "--", path], cwd=REPO,
                             capture_output=True, text=True).stdout.split("\n")
        return [line.split() for line in out if line][-1] if any(out) else None

    declaration, model = first_commit("analysis/reference/advisor.toml"), first_commit("analysis/advisor/model.py")
    if declaration is None or model is None:
        pytest.skip("no git history here (a source copy, not a clone)")
    assert datetime.datetime.fromisoformat(declaration[1]) <= datetime.datetime.fromisoformat(model[1])
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", declaration[0], model[0]], cwd=REPO)
    assert ancestor.returncode == 0
    assert advisor.declaration()["declared"] == datetime.datetime.fromisoformat(declaration[1]).date()


def test_the_thesis_rows_are_tables_8_and_9_predicted_from_their_1_gpu_figure():
    rows = advisor.thesis_validation()
    assert [(r["table"], r["gpus"]) for r in rows] == [(t, g) for t in (8, 9) for g in (8, 16, 24, 32)]
    table8 = {r["gpus"]: r for r in rows if r["table"] == 8}
    assert table8[8]["measured"] == 1418.28 and table8[32]["measured"] == 5696.80  # the thesis's Table 8
    assert table8[8]["one_gpu"] == 207.11 and rows[-1]["one_gpu"] == 207.79  # Tables 2 and 3
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1)
        assert r["holds"] == (abs(r["error"]) <= advisor.declaration()["tolerance"])
        assert r["predicted"] <= r["gpus"] * r["one_gpu"] + 1e-9  # never above perfect scaling
    # ResNet-50's gradient, counted from torchvision's model, not typed
    assert advisor.resnet50_gradient_bytes() == 25_557_032 * 4


def test_the_validation_table_states_median_and_worst_error():
    text = advisor.validation_markdown(advisor.thesis_validation())
    errors = [abs(r["error"]) for r in advisor.thesis_validation()]
    assert f"median |error| {100 * statistics.median(errors):.1f} %" in text
    assert f"worst |error| {100 * max(errors):.1f} %" in text
    assert not math.isnan(max(errors))
    assert text.count("\n| ") == len(errors) + 1  # a header and a row each


def test_a_measured_step_is_split_and_the_split_scaled_to_the_whole_step(tmp_path, capsys):
    from analysis.__main__ import main as analysis_main
    from contract.config import load_config
    from tools.step_split import EXP1, main as step_split
    from trainers.models import build_model

    out = tmp_path / "step.json"
    assert step_split(["--scale", "local", "--steps", "2", "--warmup", "1", "--device", "cpu",
                       "--input-images-per-s", "50", "--json", str(out)]) == 0
    step, record = advisor.load_step(out)
    assert record["model"] == "cifar_resnet20" and record["batch"] == 4 and record["input_images_per_s"] == 50
    model = build_model(load_config(EXP1, "local", need_data=False).model)
    assert record["gradient_bytes"] == 4 * sum(p.numel() for p in model.parameters())  # float32, one a parameter
    assert step.compute_s == pytest.approx(record["whole_step_s"])  # the phases' shares of the unsynchronised step
    assert step.forward_s / step.backward_s == pytest.approx(record["forward_s"] / record["backward_s"])
    capsys.readouterr()
    assert analysis_main(["advise", "--step", str(out), "--gpus-per-node", "2", "--nodes", "1,2", "--intra",
                          "pcie3-x16", "--inter", "10gbe"]) == 0
    table = capsys.readouterr().out
    assert table.count("| ddp |") == 3 and table.count("| horovod |") == 3  # 1 GPU, one node, two nodes
    assert analysis_main(["advise", "--step", str(out), "--intra", "carrier-pigeon"]) == 2
    assert "no link named 'carrier-pigeon'" in capsys.readouterr().err


def test_the_committed_validation_table_is_the_one_the_model_makes():
    committed = (REPO / "results" / "tables" / "advisor_validation.md").read_text()
    from analysis.advisor.local import read_local_rows

    expected = advisor.validation_markdown(advisor.thesis_validation(), read_local_rows())
    assert committed == expected, "run `make advise` and commit it"


# ---- the link measured by make cluster-check's probes ----------------------------------------------------------
def ring_points(ranks: int, link: Link, sizes=(4096, 65536, 1 << 20, 1 << 24)) -> list[list[float]]:
    """all_reduce times a ring over `link` would take: 2 (p - 1) messages of n / p."""
    return [[n, advisor.ring_allreduce_s(n, ranks, link)] for n in sizes]


def test_all_reduces_timed_at_several_sizes_give_back_the_link_of_one_message():
    link = Link(latency_s=50e-6, bytes_per_s=0.6e9)
    for ranks in (2, 3):
        fitted = advisor.link_from_allreduces(ring_points(ranks, link), ranks)
        assert fitted.latency_s == pytest.approx(50e-6, rel=1e-6)
        assert fitted.bytes_per_s == pytest.approx(0.6e9, rel=1e-6)
    with pytest.raises(ValueError, match="needs 2 or more ranks"):
        advisor.link_from_allreduces(ring_points(2, link), 1)


def test_the_link_file_holds_points_and_fit_of_both_links_and_the_newest_check_is_read(tmp_path):
    intra, inter = Link(20e-6, 2e9), Link(300e-6, 12.5e6)
    older, newer = tmp_path / "local-20261127-100000", tmp_path / "local-20261128-090000"
    for folder, rate in ((older, None), (newer, "100mbit")):
        folder.mkdir()
        advisor.write_link_fit(folder, "intra", advisor.link_record(ring_points(2, intra), 2, ["n1", "n1"], None))
        advisor.write_link_fit(folder, "inter", advisor.link_record(ring_points(2, inter), 2, ["n1", "n2"], rate))
    (tmp_path / "local-20261129-090000").mkdir()  # a check whose link layers did not run: passed over
    (tmp_path / "localx-20261130-090000").mkdir()  # another profile's name that starts alike: not this profile's
    assert advisor.latest_link_fit("local", tmp_path) == newer / advisor.LINK_FIT
    assert advisor.latest_link_fit("local", tmp_path, rate=None) == older / advisor.LINK_FIT
    assert advisor.latest_link_fit("local", tmp_path, rate="20mbit") is None
    got_intra, got_inter, fits = advisor.read_link_fit(newer / advisor.LINK_FIT)
    assert got_intra.bytes_per_s == pytest.approx(2e9) and got_inter.latency_s == pytest.approx(300e-6)
    assert fits["inter"]["points"][0] == [4096, pytest.approx(advisor.ring_allreduce_s(4096, 2, inter))]
    assert fits["inter"]["link"] == "100mbit" and fits["intra"]["hosts"] == ["n1", "n1"]
    assert advisor.describe_link_record(fits["inter"]) == (
        "alpha 300 us, beta 0.1 Gbit/s a message (all_reduce of 2 ranks on 2 host(s), 4 sizes 4 KB-16 MB, the "
        "largest predicted +0 %, link limited to 100mbit)")
    (newer / advisor.LINK_FIT).write_text('{"intra": ' + json.dumps(fits["intra"]) + "}")
    with pytest.raises(ValueError, match="no inter link: its cluster-check's link-inter layer failed"):
        advisor.read_link_fit(newer / advisor.LINK_FIT)


def link_rank_files(folder, hosts, points, **extra):
    folder.mkdir(parents=True)
    for rank, host in enumerate(hosts):
        (folder / f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "host": host, "ok": True, "points": points, "ranks": len(hosts), "hosts": hosts,
             "device": "cpu", **extra}))


def test_the_check_fits_each_link_writes_the_file_and_shows_alpha_and_beta(tmp_path):
    from studies.cluster_check import judge

    link_rank_files(tmp_path / "link-intra", ["n1", "n1"], ring_points(2, Link(20e-6, 2e9)))
    link_rank_files(tmp_path / "link-inter", ["n1", "n2"], ring_points(2, Link(300e-6, 12.5e6)), link="100mbit")
    intra, inter = judge("link-intra", "COMPLETED", tmp_path, 2), judge("link-inter", "COMPLETED", tmp_path, 2)
    assert intra.ok and intra.detail.startswith("alpha 20 us, beta 16 Gbit/s a message (all_reduce of 2 ranks on 1")
    assert inter.ok and inter.detail.endswith("link limited to 100mbit)")
    assert advisor.latest_link_fit(tmp_path.name, tmp_path.parent) is None  # not a check folder's name
    got_intra, got_inter, _ = advisor.read_link_fit(tmp_path / advisor.LINK_FIT)
    assert got_inter.bytes_per_s == pytest.approx(12.5e6)


def test_hosts_on_one_kernel_are_found_sharing_its_cores_whatever_the_profile_says(tmp_path):
    """A site-like profile of the local cluster does not say shared_machine; the probe's boot ids do, and the link
    fit then carries the machine's cores, so the report stretches the compute of a run on those hosts."""
    from studies.cluster_check import annotate_link_fit, judge
    from slurm.profiles import Profile
    from tools.cluster_probe import one_machine_cores

    assert one_machine_cores([("n1", "b", 2), ("n2", "b", 2)]) == 2
    assert one_machine_cores([("n1", "b", 2), ("n2", "c", 2)]) is None       # two machines
    assert one_machine_cores([("n1", "b", 2), ("n1", "b", 2)]) is None       # one host: not hosts sharing
    assert one_machine_cores([("n1", None, 2), ("n2", None, 2)]) is None     # no boot id to tell
    link_rank_files(tmp_path / "link-intra", ["n1", "n1"], ring_points(2, Link(20e-6, 2e9)))
    link_rank_files(tmp_path / "link-inter", ["n1", "n2"], ring_points(2, Link(300e-6, 12.5e6)), shared_cores=2)
    assert judge("link-intra", "COMPLETED", tmp_path, 2).ok and judge("link-inter", "COMPLETED", tmp_path, 2).ok
    annotate_link_fit(tmp_path, Profile(name="site"))
    assert json.loads((tmp_path / advisor.LINK_FIT).read_text())["shared_cores"] == 2


def test_the_check_fails_a_link_probe_placed_wrongly_or_timing_nothing_that_grows(tmp_path):
    from studies.cluster_check import judge

    link_rank_files(tmp_path / "link-inter", ["n1", "n1"], ring_points(2, Link(1e-6, 1e9)))
    finding = judge("link-inter", "COMPLETED", tmp_path, 2)
    assert finding.ok is False and finding.detail.startswith("2 ranks on 1 host(s), 2 needed")
    link_rank_files(tmp_path / "link-intra", ["n1", "n1"], [[4096, 1e-3], [1 << 20, 1e-3]])
    finding = judge("link-intra", "COMPLETED", tmp_path, 2)
    assert finding.ok is False and "do not grow with their size" in finding.detail
    assert not (tmp_path / advisor.LINK_FIT).exists()


def test_ranks_beyond_a_shared_machines_cores_stretch_the_compute_in_proportion():
    step = Step(forward_s=0.02, backward_s=0.04, optimizer_s=0.0, batch=32, gradient_bytes=0, threads=1)
    link = Link(0.0, 1e9)
    two = advisor.predict(step, "ddp", ranks=2, ranks_per_node=2, intra=link, inter=link, shared_cores=2)
    six = advisor.predict(step, "ddp", ranks=6, ranks_per_node=2, intra=link, inter=link, shared_cores=2)
    assert two.step_s == pytest.approx(0.06) and two.images_per_s == pytest.approx(2 * 32 / 0.06)
    assert six.step_s == pytest.approx(3 * 0.06) and six.images_per_s == pytest.approx(two.images_per_s)
    assert six.efficiency == pytest.approx(1 / 3) and six.bound == "compute"
    apart = advisor.predict(step, "ddp", ranks=6, ranks_per_node=2, intra=link, inter=link)
    assert apart.step_s == pytest.approx(0.06)  # nodes of their own: no stretch


def test_an_input_the_rank_loads_itself_adds_to_the_step_and_one_beside_it_bounds_it():
    link = Link(0.0, 1e9)
    serial = Step(0.02, 0.04, 0.0, batch=32, gradient_bytes=0, input_images_per_s=3200, input_overlaps=False)
    p = advisor.predict(serial, "ddp", ranks=1, ranks_per_node=2, intra=link, inter=link)
    assert p.step_s == pytest.approx(0.06 + 0.01) and p.bound == "compute"
    slow = Step(0.02, 0.04, 0.0, batch=32, gradient_bytes=0, input_images_per_s=400, input_overlaps=False)
    p = advisor.predict(slow, "ddp", ranks=1, ranks_per_node=2, intra=link, inter=link)
    assert p.step_s == pytest.approx(0.06 + 0.08) and p.bound == "input"
    beside = Step(0.02, 0.04, 0.0, batch=32, gradient_bytes=0, input_images_per_s=400)
    p = advisor.predict(beside, "ddp", ranks=1, ranks_per_node=2, intra=link, inter=link)
    assert p.step_s == pytest.approx(0.08) and p.bound == "input"


# ---- make advise CLUSTER=P: the predicted table from measured parts --------------------------------------------
def local_cluster_parts(tmp_path, monkeypatch):
    """A recorded link fit, a measured step (as step-split writes it) and three answering 2-CPU nodes."""
    from studies import advise as advise_cluster

    check = tmp_path / "checks" / "local-20261128-010000"
    check.mkdir(parents=True)
    for which, link, hosts in (("intra", Link(50e-6, 1e9), ["n1", "n1"]), ("inter", Link(200e-6, 12e6), ["n1", "n2"])):
        advisor.write_link_fit(check, which, advisor.link_record(ring_points(2, link), 2, hosts, None))
    step = {"device": "cpu", "model": "cifar_resnet20", "batch": 32, "forward_s": 0.02, "backward_s": 0.04,
            "optimizer_s": 0.0, "whole_step_s": 0.06, "gradient_bytes": 280_000, "threads": 2,
            "loader_workers": 0, "data_kind": "synthetic", "input_images_per_s": 32_000.0}
    (tmp_path / "step.json").write_text(json.dumps(step))
    monkeypatch.setattr(advise_cluster, "answering_nodes", lambda clients: [("n1", 2), ("n2", 2), ("n3", 2)])
    monkeypatch.setattr(advise_cluster.os, "cpu_count", lambda: 2)
    return tmp_path / "checks", tmp_path / "step.json"


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines()
            if line.startswith("| ddp") or line.startswith("| horovod")]


def test_the_cluster_table_predicts_experiment_3_s_runs_as_the_study_places_them(tmp_path, monkeypatch):
    """Issue 63: the rows are experiment 3's runs at the scale, placed as `make exp3 LAUNCHER=slurm CLUSTER=local`
    places them on the local cluster (1 process of 2 threads on the 2 cores, 2 nodes x 1 or 2 tasks of 1 thread),
    not 1...N processes of 1 thread with 2 ranks on one node."""
    from studies.advise import advise_cluster

    root, step = local_cluster_parts(tmp_path, monkeypatch)
    text = advise_cluster("local", step_file=step, probe=False, root=root)
    rows = table_rows(text)
    placed = [(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]
    assert placed == [(b, *p) for b in ("ddp", "horovod") for p in ((1, 1, 1, 2), (2, 2, 1, 1), (4, 2, 2, 1))]
    # the placements the committed local sweep's experiment-3 runs recorded in their manifests, on a 2-core machine
    from analysis.advisor.runs import placement_of
    from contract.reader import read_manifest

    runs = REPO / "results" / "advisor" / "local_validation" / "runs"
    recorded = {(m["backend"], *placement_of(m).values()) for m in
                (read_manifest(p.parent) for p in runs.glob("*/03_*/*/manifest.json"))
                if m["backend"] in ("ddp", "horovod")}  # the advisor's two backends (the sweep also ran MWMS)
    assert recorded and set(placed) == recorded
    assert "3 nodes answer, 2 CPU(s) a node; the nodes share this machine's 2 cores" in text
    assert "across nodes alpha 200 us" in text and "0 loader workers: in the step" in text
    # the hand computation of the 2- and 4-process rows: 2 nodes over the slow link, their threads on 2 cores
    inter = advisor.link_from_allreduces(ring_points(2, Link(200e-6, 12e6)), 2)
    for ranks, per_node, stretch in ((2, 1, 1), (4, 2, 2)):
        link = advisor.ring_link(per_node, 2, Link(50e-6, 1e9), inter)
        exposed = advisor.ring_allreduce_s(280_000, ranks, link)  # one bucket: all of it follows the backward
        expected = ranks * 32 / (stretch * 0.06 + exposed + 32 / 32_000)
        row = next(r for r in rows if r[0] == "ddp" and int(r[1]) == ranks)
        assert float(row[5].replace(",", "")) == pytest.approx(expected, abs=0.5) and row[7] == "communication"
    one = next(r for r in rows if r[0] == "ddp" and int(r[1]) == 1)
    assert float(one[5].replace(",", "")) == pytest.approx(32 / (0.06 + 0.001), abs=0.5) and one[6] == "1.00x"
    # the second node adds 814 - 525 img/s, more than half of one node's 525: it pays
    assert "ddp: every node in the table still pays" in text


def test_make_advise_writes_nothing_tracked(tmp_path, monkeypatch):
    """Issue 63: `make advise` rewrote the committed results/advisor/steps/local-03-t1.json. The steps it times go
    beside this machine's link fits, into a folder git ignores; the validation table it writes is the committed one
    byte for byte. So `git status` is what it was."""
    from analysis.__main__ import main as analysis_main
    from studies import advise

    def git(*argv):
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)

    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("no git repository here (a source copy, not a clone)")
    for threads in (1, 2):  # where make advise CLUSTER=local times its steps (tools/cluster-check's root)
        path = advise.step_path(advisor.CHECK_ROOT, "local", threads)
        assert git("check-ignore", "-q", str(path)).returncode == 0 and not git("ls-files", str(path)).stdout
    before = git("status", "--porcelain", "--untracked-files=all", "--", "results").stdout
    monkeypatch.chdir(REPO)
    assert analysis_main(["advise", "--validate"]) == 0  # make advise's first line
    root, _ = local_cluster_parts(tmp_path, monkeypatch)
    monkeypatch.setattr(advise, "STEP_STEPS", 2)
    monkeypatch.setattr(advise, "STEP_WARMUP", 1)
    monkeypatch.setattr(advise, "INPUT_BATCHES", 2)
    text = advise.advise_cluster("local", probe=False, root=root)  # its second: the steps timed here
    assert sorted(p.name for p in (root / "steps").glob("*.json")) == ["local-03-t1.json", "local-03-t2.json"]
    assert text.count("| ddp |") == 3
    assert git("status", "--porcelain", "--untracked-files=all", "--", "results").stdout == before


def test_without_a_recorded_link_fit_the_cluster_table_says_how_to_make_one(tmp_path, monkeypatch):
    from studies import advise as advise_cluster

    root, step = local_cluster_parts(tmp_path, monkeypatch)
    with pytest.raises(advise_cluster.AdviseError, match="no link fit recorded for local under .*: make "
                                                          "cluster-check CLUSTER=local"):
        advise_cluster.advise_cluster("local", step_file=step, probe=False, root=tmp_path / "none")


def test_a_slow_largest_message_moves_the_bandwidth_and_leaves_the_small_messages_latency():
    link = Link(latency_s=100e-6, bytes_per_s=1e9)
    sizes = [2 ** k for k in range(10, 26, 2)]
    seconds = [link.message_s(n) * (1.2 if n == sizes[-1] else 1.0) for n in sizes]  # the largest 20 % slow
    fitted = advisor.fit_link(sizes, seconds)
    assert fitted.latency_s == pytest.approx(100e-6, rel=0.01)
    assert 0.75e9 < fitted.bytes_per_s < 1e9  # the slope through the largest three, the slow one among them
    exact = [link.message_s(n) for n in sizes]
    exact_fit = advisor.fit_link(sizes, exact)
    assert (exact_fit.latency_s, exact_fit.bytes_per_s) == pytest.approx((100e-6, 1e9), rel=1e-9)


def test_advise_cluster_on_the_command_line_prints_the_table_or_one_line_to_fix(tmp_path, monkeypatch, capsys):
    from suite.__main__ import main as suite_main

    root, step = local_cluster_parts(tmp_path, monkeypatch)
    for front in (["advise"], ["analysis", "advise"]):  # the front door's word, and the analysis command's
        assert suite_main([*front, "--cluster", "local", "--step", str(step), "--check-root", str(root),
                           "--no-probe"]) == 0
        assert capsys.readouterr().out.count("| ddp |") == 3
    assert suite_main(["advise", "--cluster", "no-such-site", "--no-probe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: advise --cluster no-such-site: ") and err.count("\n") == 1
