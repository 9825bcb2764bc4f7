"""Upstream log parsers: every format, exact numbers, and garbage that must not crash them."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from analysis import logs
from tests import synth_records as synth
from analysis.logs import parse_log
from analysis.numbers import log_throughput

LOGS = Path(__file__).parent / "fixtures" / "analysis" / "logs"


def test_figure_11_line_gives_202_21_images_per_s():
    log = parse_log(LOGS / "thesis_fig11_srun.log")
    assert log.tool == "pytorch-examples" and log.fmt == "early-2019"
    assert log.info["ranks"] == [0]  # the srun -l label
    row = log.train[log.train["batch"] == 199].iloc[0]
    assert row["time_avg"] == pytest.approx(0.633) and row["total"] == 10010
    tp = log_throughput(log, per_gpu_batch=128, gpus=1)
    assert tp["thesis_batch"] == 199
    assert tp["batch_time_avg_at_199"] == pytest.approx(0.633)
    assert tp["thesis_images_per_s"] == pytest.approx(202.21, abs=0.005)  # 128 / 0.633
    # steady state: batches 10..201 took 0.581 s (one 0.582), so 128 / 0.581005...
    assert tp["steady_images_per_s"] == pytest.approx(128 / ((191 * 0.581 + 0.582) / 192), abs=0.01)


def test_figure_11_running_means_match_the_thesis():
    log = parse_log(LOGS / "thesis_fig11_srun.log")
    got = log.train.set_index("batch").loc[197:201, "time_avg"].round(3).tolist()
    assert got == [0.633, 0.633, 0.633, 0.632, 0.632]


@pytest.mark.parametrize("name,fmt", [("early2019_pf1.log", "early-2019"),
                                      ("progressmeter2019_pf10.log", "progressmeter-2019"),
                                      ("current_pf10.log", "current")])
def test_each_pytorch_examples_format(name, fmt):
    log = parse_log(LOGS / name)
    assert log.fmt == fmt
    assert log.bad_lines == 0
    assert log.train["batch"].min() == 0  # normalised to 0-based whatever the format printed
    assert list(log.epochs["epoch"]) == [0, 1]
    assert log.epochs["val_top1"].notna().all() and log.epochs["val_top5"].notna().all()
    assert log.epochs["train_top1"].notna().all()


def test_formats_agree_on_batches_and_values():
    pm = parse_log(LOGS / "progressmeter2019_pf10.log")
    cur = parse_log(LOGS / "current_pf10.log")
    assert list(pm.train["batch"]) == list(cur.train["batch"]) == [0, 10, 20, 0, 10, 20]
    assert np.allclose(pm.train["time_avg"], cur.train["time_avg"])
    assert np.allclose(pm.epochs["val_top1"], cur.epochs["val_top1"])


def test_current_format_summary_line_and_index_from_one():
    text = (LOGS / "current_pf10.log").read_text()
    assert " *   Acc@1 " in text and "Epoch: [0][ 1/30]" in text
    log = parse_log(LOGS / "current_pf10.log")
    assert log.train.iloc[0]["count"] == 1


def test_interleaved_ranks_keep_rank_0_and_count_bad_lines():
    log = parse_log(LOGS / "interleaved_ranks.log")
    assert log.info["ranks"] == [0, 1]
    assert (log.train["rank"] == 0).all()
    assert not log.train.duplicated(["epoch", "batch"]).any()
    assert len(log.train) == 12
    assert log.bad_lines == 2  # one line cut short, one record glued onto another line
    assert log.epochs.loc[0, "val_top1"] > 0


def test_unlabelled_interleaved_ranks_keep_first_line_per_batch():
    a = list(synth.pytorch_log_lines("early-2019", batches=5, val_batches=1, seed=1))
    b = list(synth.pytorch_log_lines("early-2019", batches=5, val_batches=1, seed=2))
    text = "\n".join(x for pair in zip(a, b) for x in pair) + "\n"
    log = logs.parse_pytorch_examples(text.encode())
    assert len(log.train) == 5 and log.bad_lines == 0


def test_horovod_example_tqdm_output():
    log = parse_log(LOGS / "horovod_example.log")
    assert log.tool == "horovod-example"
    assert list(log.epochs["epoch"]) == [0, 1]
    assert log.epochs["val_top1"].tolist() == [1.5, 2.5]
    tp = log_throughput(log, per_gpu_batch=128, gpus=1)
    assert tp["thesis_images_per_s"] == pytest.approx(128 * 40 / 33, abs=0.01)  # n / elapsed at the end
    assert tp["steady_images_per_s"] == pytest.approx(128 * 30 / 18, abs=0.01)  # batches 10..40 in 18 s


def test_tf_cnn_benchmarks_output():
    log = parse_log(LOGS / "tf_cnn_benchmarks.log")
    assert log.tool == "tf_cnn_benchmarks"
    assert log.info["total_images_per_s"] == 234.01
    assert log.info["per_device_batch"] == 64.0
    assert log.train["count"].tolist() == [1, 10, 20, 200]
    assert log.train["loss"].iloc[0] == pytest.approx(7.785)
    tp = log_throughput(log)
    assert tp["thesis_images_per_s"] == 234.01 and tp["steady_images_per_s"] == 234.0


def test_tf_cnn_benchmarks_mpirun_tags_keep_rank_0():
    log = parse_log(LOGS / "tf_cnn_benchmarks_tagged.log")
    assert log.info["ranks"] == [0, 1]
    assert log.info["last_step_images_per_s"] == 234.0  # rank 1 printed 231.9
    assert log_throughput(log, gpus=2)["steady_images_per_s"] == pytest.approx(468.0)


def test_garbled_log_never_crashes_and_counts_bad_lines():
    log = parse_log(LOGS / "garbled.log")
    assert len(log.train) == 1
    assert log.bad_lines >= 3


def test_truncated_and_random_input_never_crashes():
    rng = random.Random(0)
    for path in sorted(LOGS.glob("*.log")):
        raw = path.read_bytes()
        for cut in (0, 1, len(raw) // 3, len(raw) // 2, len(raw) - 5):
            parse_log(path, raw=raw[:cut])
    for _ in range(20):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        parse_log("random.log", raw=b"Epoch: [" + blob)
        parse_log("random.log", raw=b"Step\tImg/sec\ttotal_loss\n" + blob)
        parse_log("random.log", raw=b"Train Epoch     #1: " + blob)


def test_empty_and_unknown_logs():
    assert parse_log("x.log", raw=b"").tool == "unknown"
    log = parse_log("x.log", raw=b"hello\nworld\n")
    assert log.tool == "unknown" and log.lines == 2 and log.train.empty


def test_learning_rate_lines_of_the_thesis_horovod_script():
    lines = ["Setting learning rate for epoch 0 to 0.26666666666666666"]
    lines += list(synth.pytorch_log_lines("early-2019", batches=3, val_batches=1))
    log = logs.parse_pytorch_examples(("\n".join(lines) + "\n").encode())
    assert log.epochs.loc[log.epochs["epoch"] == 0, "lr"].iloc[0] == pytest.approx(0.26666666666666666)


def test_steady_state_from_running_means_when_not_every_batch_is_printed():
    # print frequency 50: only the running means at 0, 50, ..., 200 are known
    lines = list(synth.pytorch_log_lines("early-2019", batches=201, val_batches=1, first_batch_s=20.0,
                                         batch_s=0.5, print_freq=50))
    log = logs.parse_pytorch_examples(("\n".join(lines) + "\n").encode())
    tp = log_throughput(log, per_gpu_batch=100, gpus=1, warmup=1)
    assert tp["thesis_batch"] == 200
    assert tp["steady_images_per_s"] == pytest.approx(200.0, rel=0.01)  # 100 / 0.5 s
    assert tp["thesis_images_per_s"] < 170  # the 20 s first batch drags the 201-batch mean down


def test_one_non_utf8_byte_costs_only_its_line():
    # a thesis-era log: a Latin-1 byte in a note line and one flipped byte in batch 50's time
    log = parse_log(LOGS / "one_bad_byte.log")
    assert len(log.train) == 199 and log.bad_lines == 1
    assert 50 not in set(log.train.loc[log.train["epoch"] == 0, "batch"])
    assert list(log.epochs["epoch"]) == [0, 1] and log.epochs["val_top1"].notna().all()


def test_two_rank_log_with_its_first_line_glued_keeps_the_good_lines():
    log = parse_log(LOGS / "glued_two_ranks.log")
    assert log.info["ranks"] == [0, 1]
    assert (log.train["rank"] == 0).all()
    assert list(log.train["batch"]) == list(range(1, 100))  # batch 0 of both ranks shares the glued line
    assert log.bad_lines == 1
    assert log_throughput(log, per_gpu_batch=128, gpus=2)["steady_images_per_s"] > 0


def test_mpirun_tagged_training_lines_are_parsed():
    lines = list(synth.pytorch_log_lines("early-2019", batches=4, val_batches=1))
    text = "".join(f"[1,{r}]<stdout>:{ln}\n" for ln in lines for r in (0, 1))
    log = logs.parse_pytorch_examples(text.encode())
    assert log.info["ranks"] == [0, 1] and len(log.train) == 4 and log.bad_lines == 0


def test_the_fixture_generator_reproduces_the_committed_fixtures_byte_for_byte(tmp_path):
    from tests.fixtures.analysis import make_fixtures

    make_fixtures.write_all(tmp_path)
    committed = LOGS.parent
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    kept = sorted(p.relative_to(committed) for d in ("logs", "runs") for p in (committed / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)
    assert made == kept
    assert [f for f in made if (tmp_path / f).read_bytes() != (committed / f).read_bytes()] == []
