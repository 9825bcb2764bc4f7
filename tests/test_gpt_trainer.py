"""The GPT workload through the trainer (issue 66), real tiny runs on the CPU (gloo): the front door trains it and
benchmarks it in tokens/s, the analysis's reader reads what it wrote, emulated workers split its token rows, FSDP
over two processes trains as one process of the same global batch and resumes bit for bit after a kill -9."""
import json
import os
import signal
import sys

import pytest
import torch

from contract.invariants import check_run
from contract.reader import read_document, read_metrics, read_runs
from tests.helpers import (REPO, final_state, free_port, max_difference, records, run, torchrun, train_in_process,
                           write_config)
from tests.test_rank_workers import finish, start_ranks
from workloads.gpt import corpus

LOCAL_CORPUS = REPO / ".cache" / "corpus" / corpus.DEBIAN_PACKAGE
needs_corpus = pytest.mark.skipif(not (corpus.DEBIAN_SOURCES.is_dir() or (LOCAL_CORPUS / corpus.META).is_file()),
                                  reason="the local corpus needs Debian's python3.11-doc: make setup-corpus")
# Two processes (or two passes) sum a step's windows in another order than one: the losses differ in their last
# float32 bits, the weights after 4-14 SGD steps by rounding (measured 1.2e-7); a missed slice or update moves them
# by ~1e-3.
WEIGHT_ROUNDING = 1e-4


def gpt(data: dict, **train) -> dict:
    return {"model": {"name": "gpt_local"}, "data": {"loader_workers": 0, **data},
            "train": {"workers": 2, "per_worker_batch": 2, "print_freq": 1, **train}}


def tiny_corpus(tmp_path) -> str:
    """20 short texts prepared as a corpus: 18 to train.bin (26 windows of 128 tokens: 7 steps of 4 windows an
    epoch), 2 to val.bin (2 windows)."""
    source = tmp_path / "texts"
    source.mkdir()
    for i in range(20):
        (source / f"{i:02d}.txt").write_text(f"text {i:02d}: " + "the quick brown fox jumps over the lazy dog. " * 4)
    corpus.prepare(source, tmp_path / "corpus")
    return str(tmp_path / "corpus")


@pytest.mark.slow
@needs_corpus
def test_gpt_trains_and_benchmarks_through_the_front_door_and_the_reader_reads_its_records(tmp_path):
    config = write_config(tmp_path / "gpt.toml", gpt({"kind": "tokens", "path": ""}, workers=1, per_worker_batch=4,
                                                    epochs=1))
    front_door = [sys.executable, "-m", "suite", "train", str(config), "--scale", "local", "--out", str(tmp_path)]
    trained = run([*front_door, "--run", "trained", "--set", "train.max_steps=3"])
    assert trained.returncode == 0, trained.stderr[-2000:]
    timed = run([*front_door, "--run", "timed", "--set", "bench.batches=3", "--set", "bench.warmup_batches=1"])
    assert timed.returncode == 0, timed.stderr[-2000:]
    runs = read_runs(tmp_path)  # as the analysis reads them: a row a folder, then a row a record
    folders = runs[runs.kind == "run"]
    assert [m["status"] for m in folders.manifest] == ["completed", "completed"] and not any(folders.problems)
    (epoch,) = runs[runs.kind == "epoch"].to_dict("records")
    assert (epoch["run"], epoch["steps"], epoch["images"]) == ("trained", 3, 12)  # windows, not tokens: 3 steps of 4
    (bench,) = runs[runs.kind == "bench"].to_dict("records")
    assert bench["tokens_per_s"] == pytest.approx(bench["images_per_s_steady"] * 128, rel=1e-12)
    assert bench["model_flops_per_s"] == pytest.approx(bench["images_per_s_steady"] * 20_923_392 * 128, rel=1e-12)
    assert bench["mfu"] is None  # the CPU has no declared peak
    for name in ("trained", "timed"):
        run_dir = tmp_path / "gpt" / name
        config_json, manifest = read_document(run_dir / "config.json")[0], read_document(run_dir / "manifest.json")[0]
        assert check_run(config_json, manifest, read_metrics(run_dir).records) == []
        assert manifest["dataset"]["sha256"] == corpus.read_meta(LOCAL_CORPUS)["sha256"]
    (placed,) = json.loads((tmp_path / "gpt" / "timed" / "manifest.json").read_text())["placement"]
    assert placed["peak_memory_of"] == "cpu_rss" and placed["peak_memory_bytes"] > 100 * 2**20


def test_emulated_gpt_workers_in_passes_train_as_in_one_pass(tmp_path):
    """Four emulated workers, two a pass, against all four in one: their windows and token rows split alike, so
    the runs agree to the rounding of the gradient's two partial sums."""
    runs = {}
    for per_pass in (4, 2):
        config = write_config(tmp_path / f"p{per_pass}.toml", gpt({"kind": "synthetic", "synthetic_images": 16},
                              backend="emulated", workers=4, workers_per_pass=per_pass, epochs=2))
        assert train_in_process(config, tmp_path, "r") == 0
        runs[per_pass] = tmp_path / f"p{per_pass}" / "r"
    losses = [[r["train_loss"] for r in records(run_dir, "epoch")] for run_dir in runs.values()]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert max_difference(final_state(runs[4]), final_state(runs[2])) < WEIGHT_ROUNDING


@pytest.mark.slow
def test_fsdp_over_two_processes_trains_as_one_process_of_the_same_global_batch(tmp_path):
    """One step's 4 windows: two a rank over two ranks, or four in one process (the sampler gives the same windows
    to the step either way)."""
    data = {"kind": "tokens", "path": tiny_corpus(tmp_path)}
    runs = {}
    for processes, per_worker in ((2, 2), (1, 4)):
        config = write_config(tmp_path / f"p{processes}.toml", gpt(data, backend="fsdp", workers=processes,
                                                                   per_worker_batch=per_worker, epochs=2))
        done = torchrun(processes, config, tmp_path, "r")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[processes] = tmp_path / f"p{processes}" / "r"
    curves = [[loss for r in records(run_dir, "epoch") for loss in (r["train_loss"], r["val_loss"])]
              for run_dir in runs.values()]
    assert len(curves[0]) == 4 and curves[0] == pytest.approx(curves[1], rel=1e-5)
    assert max_difference(final_state(runs[2]), final_state(runs[1])) < WEIGHT_ROUNDING


@pytest.mark.slow
def test_a_two_rank_fsdp_run_killed_mid_epoch_resumes_bit_identically(tmp_path):
    from tests.test_runfolder import wait_for_record

    config = write_config(tmp_path / "f.toml", gpt({"kind": "tokens", "path": tiny_corpus(tmp_path)},
                                                   backend="fsdp", epochs=3))
    assert finish(start_ranks(config, tmp_path, "whole", port=str(free_port()))) == [0, 0]
    ranks = start_ranks(config, tmp_path, "cut", port=str(free_port()))
    run_dir = tmp_path / "f" / "cut"
    # epoch 0's checkpoint is written before epoch 1's first iter record: killed with epoch 1 under way
    wait_for_record(run_dir, lambda r: r["kind"] == "iter" and r["epoch"] == 1 and r["iter"] >= 2)
    for rank in ranks:  # as a node that dies: no handler runs, nothing is checkpointed on the way out
        os.killpg(rank.pid, signal.SIGKILL)
    for rank in ranks:
        rank.communicate(timeout=60)
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert saved["step"] == 0 and saved["epoch"] in (1, 2)  # an epoch's end (epoch 1's, unless the kill came late)
    # mid-epoch: the run had written records past its checkpoint, which the resume cuts and writes again
    assert (run_dir / "metrics.jsonl").stat().st_size > saved["run_files"]["metrics.jsonl"]
    assert finish(start_ranks(config, tmp_path, "cut", "--resume", "auto", port=str(free_port()))) == [0, 0]
    assert max_difference(final_state(tmp_path / "f" / "whole"), final_state(run_dir)) == 0.0
    epochs = [[(r["epoch"], r["train_loss"], r["val_loss"], r["images"]) for r in records(d, "epoch")]
              for d in (tmp_path / "f" / "whole", run_dir)]
    assert epochs[0] == epochs[1] and len(epochs[0]) == 3
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["status"], manifest["backend"], len(manifest["attempts"])) == ("completed", "fsdp", 2)


def test_experiment_14_starts_fsdp_ranks_under_torchrun_and_reads_the_corpus_where_it_runs(tmp_path):
    from contract.plan import study_plan
    from studies.launch import local_commands, planned_runs

    local = {p.run.name: p for p in planned_runs(study_plan(REPO / "experiments/14_gpt_throughput", "local", False,
                                                            None, []), "local", tmp_path)}
    across = [f"n2-t{t}-{b}-s0" for t in (1, 2) for b in ("ddp", "fsdp")] + ["n2-t2-hsdp-s0"]
    assert sorted(local) == sorted([f"w{w}-{b}-s0" for w in (1, 2, 4) for b in ("ddp", "fsdp", "horovod")] + across)
    (command,) = local_commands(local["w4-fsdp-s0"])
    assert "torch.distributed.run" in " ".join(command) and command[command.index("--nproc-per-node") + 1] == "4"
    node0, node1 = local_commands(local["n2-t2-hsdp-s0"])  # two torchrun nodes of 2, one rendezvous
    assert [c[c.index("--node-rank") + 1] for c in (node0, node1)] == ["0", "1"]
    assert all(c[c.index("--nnodes") + 1] == "2" and c[c.index("--nproc-per-node") + 1] == "2" for c in (node0, node1))
    gpu = study_plan(REPO / "experiments/14_gpt_throughput", "gpu", False, None, []).runs
    assert {(r.cfg.model.name, r.cfg.train.precision, r.cfg.data.kind, r.cfg.data.path) for r in gpu} == {
        ("gpt2_124m", "bf16", "tokens", "${CORPUS_DIR}")}  # as written: each run reads it where it starts


def test_experiment_14_spans_nodes_at_the_thesis_scale_with_hybrid_sharding_beside_full(monkeypatch):
    from contract.plan import study_plan

    monkeypatch.setenv("CORPUS_DIR", "/data/corpus")
    runs = {r.name: r for r in study_plan(REPO / "experiments/14_gpt_throughput", "thesis", False, None, []).runs}
    across = {name: (r.nodes, r.cfg.train.workers, r.cfg.train.backend) for name, r in runs.items() if r.nodes > 1}
    assert across == {f"thesis-n{n}-t4-{b}-s0": (n, 4 * n, b) for n in (2, 4)
                      for b in ("ddp", "fsdp", "hsdp", "horovod")}
    assert not any(r.cfg.train.backend == "hsdp" for r in runs.values() if r.nodes == 1)  # hybrid needs nodes
