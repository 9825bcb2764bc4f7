"""Our TensorFlow runs in the report (issue 37): Tables 1/4/7 and Figures 14-16 take them beside the thesis's values
at their own scale, and RQ2's reading compares the three frameworks, from run folders written as the trainers
write them (the numbers here are the fixtures', chosen so each ratio is exact)."""
from __future__ import annotations

from pathlib import Path

import pytest

from contract.config import load_config
from contract.runfolder import RunFolder
from tests.helpers import REPO
from contract.manifest import VERSION

EXP1, EXP2 = (REPO / "experiments" / n for n in ("01_throughput_single_gpu", "02_throughput_local_data_parallel"))


def write_run(out: Path, experiment: Path, name: str, steady: float, sets: list[str]) -> None:
    cfg = load_config(experiment, "local", sets)
    run = RunFolder(out / cfg.experiment / name, writes=True, echo=False)
    run.write_config({"experiment": cfg.experiment, "run": name, "scale": "local", **cfg.to_dict(),
                      "resolved": cfg.resolved()})
    run.record("bench", per_worker_batch=cfg.train.per_worker_batch, world_size=cfg.train.workers, batches=12,
               warmup_batches=3, lr=0.1, images_per_s_steady=steady, images_per_s_thesis=None,
               batch_time_avg_at_199=None, data_share=0.0, data_s=0.0, compute_s=1.0, comm_s=0.0)
    run.end("completed", 0, exit_code=0, manifest_version=VERSION, backend=cfg.train.backend, world_size=cfg.train.workers)
    run.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import analysis as an

    out = tmp_path_factory.mktemp("runs")
    for name, steady, sets in [
        ("b32-ddp-s0", 750.0, ["train.backend=ddp"]),  # two seeds of one config: 800 on average, 850/750 apart
        ("b32-ddp-s1", 850.0, ["train.backend=ddp", "train.seed=1"]),
        ("b32-horovod-s0", 400.0, ["train.backend=horovod"]),
        ("b32-tensorflow-horovod-s0", 200.0, ["train.backend=horovod", "train.framework=tensorflow"]),
        ("b32-tensorflow-mwms-s0", 100.0, ["train.backend=mwms", "train.framework=tensorflow"]),
    ]:
        write_run(out, EXP1, name, steady, ["train.per_worker_batch=32", *sets])
    write_run(out, EXP2, "w2-b32-tensorflow-mwms-s0", 150.0,
              ["train.workers=2", "train.per_worker_batch=32", "train.backend=mwms", "train.framework=tensorflow"])
    write_run(out, EXP2, "w2-b32-tensorflow-horovod-s0", 160.0,  # ahead of MWMS by less than the seeds' spread
              ["train.workers=2", "train.per_worker_batch=32", "train.backend=horovod", "train.framework=tensorflow"])
    return an.load_study(out), an.load_reference()


def test_table_1_sets_our_tensorflow_runs_beside_the_thesiss_rows_at_their_own_scale(runs):
    from analysis.experiments.throughput import throughput_table

    df, ref = runs
    t1 = throughput_table(df, ref, 1)
    thesis = t1[t1["scale"] == "thesis"]
    assert set(thesis["framework"]) == {"horovod+tensorflow"} and thesis["ours_steady"].isna().all()
    ours = t1[t1["scale"] == "local scale"].set_index("framework")["ours_steady"].to_dict()
    assert ours == {"horovod+tensorflow": 200.0, "tensorflow": 100.0}
    t4 = throughput_table(df, ref, 4)
    assert t4[t4["scale"] == "local scale"]["ours_speedup"].isna().all()  # no thesis-formula value at 12 batches
    assert t4[t4["scale"] == "local scale"]["ours_steady_speedup"].tolist() == [0.8, 1.5]  # Horovod+TF, MWMS


def test_figures_14_to_16_draw_our_tensorflow_rows_in_their_own_row(runs):
    from analysis import tables
    from analysis.experiments.throughput import scaling_rows

    df, ref = runs
    thesis, ours = scaling_rows(tables.scaling_table(df, ref), tables.TENSORFLOW, 32)
    assert set(thesis["scale"]) == {"thesis"} and set(ours["scale"]) == {"local scale"}
    steady = ours[ours["source"] == "ours (steady state)"]
    assert sorted(zip(steady["framework"], steady["gpus"], steady["images_per_s"])) == [
        ("horovod+tensorflow", 1, 200.0), ("horovod+tensorflow", 2, 160.0), ("tensorflow", 1, 100.0),
        ("tensorflow", 2, 150.0)]


def test_rq2_reads_the_three_frameworks_from_the_runs(runs):
    from analysis.experiments.throughput import framework_table, frameworks_reading

    df, _ = runs
    row = framework_table(df).set_index(["per_gpu_batch", "gpus"]).loc[(32, 1)]
    assert (row["horovod+pytorch_vs_pytorch"], row["horovod+tensorflow_vs_pytorch"], row["tensorflow_vs_pytorch"]) \
        == (0.5, 0.25, 0.125)
    text = frameworks_reading(df)
    assert ("measured twice (1 configuration(s), equal config fingerprints on as many nodes) differed by up to "
            "1.13x") in text
    assert ("experiment 1, local scale, per-GPU batch 32, 1 worker(s): PyTorch 800 images/s; Horovod+PyTorch 400 "
            "images/s (0.50x PyTorch's); Horovod+TF 200 images/s (0.25x PyTorch's); TF (MWMS) 100 images/s (0.12x "
            "PyTorch's) — fastest: PyTorch.") in text
    assert ("experiment 2, local scale, per-GPU batch 32, 2 worker(s): Horovod+TF 160 images/s (speed-up 0.80 over 1 "
            "worker); TF (MWMS) 150 images/s (speed-up 1.50 over 1 worker) — none ahead by more than the repeats' "
            "spread.") in text  # 160/150 < 850/750; the speed-ups over experiment 1's 1-worker runs
