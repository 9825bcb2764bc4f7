"""The benchmark mode (bench.batches > 0): timed training steps of the loop in place of its epochs, one `bench`
record (tf_cnn_benchmarks' steady rate, and the thesis's rate read at training batch 199).

    benchmark(setup, state)   # bench.warmup_batches untimed steps, then bench.batches timed ones, on the configured data
"""
from __future__ import annotations

import itertools

from contract import hostload
from contract.config import THESIS_BATCH_INDEX
from contract.machine import peak_flops
from contract.runfolder import bench_throughput, workload_rates
from contract.lr import lr_at
from trainers import compute, loop
from trainers.checkpoint import TrainState
from trainers.runlog import DeviceTotals, LogEvery
from trainers.setup import Setup


def benchmark(s: Setup, state: TrainState) -> None:
    """Time `bench.batches` steps (loop.step) after `bench.warmup_batches` untimed ones into the bench record."""
    cfg, b = s.cfg, s.backend
    warm, timed = cfg.bench.warmup_batches, cfg.bench.batches
    per_process = s.per_shard_batch * len(b.shards())
    source, comm_start, quiet_from = bench_batches(s, per_process), 0.0, None
    cpus = s.allocation.affinity

    def numbered():  # the warm-up's waits for data and communication are left out, as its step times are
        nonlocal comm_start, quiet_from
        for i in range(warm + timed):
            if i == warm:  # the warm-up's last step was read (LogEvery's `also`): the device has finished it
                comm_start = b.comm_seconds()
                s.train_batches.gpu_wait_s()
                quiet_from = hostload.sample(cpus)
            yield i, next(source)

    totals = DeviceTotals(b.device)
    # the GPU is waited for only where LogEvery reads, so the sums of step times up to each of these are exact
    every = LogEvery(totals, cfg.train.print_freq, lambda i, meters: loop.log_iteration(s, state, 0, i, warm + timed, meters),
                     also={warm - 1, THESIS_BATCH_INDEX, warm + timed - 1}, keep_times=True)
    s.model.train()
    lr = lr_at(0, 0, 1, s.policy)  # the rate of the first step: the warm-up's start where there is one
    loop.set_lr(s, state, lr)
    for i, (images, target, _) in every(numbered()):
        output, loss = loop.step(s, images, target)
        totals.add(loss, output, target, len(images))
        every.end_step(i)
    quiet = hostload.window(quiet_from, hostload.sample(cpus))  # the last step was read: it has ended
    times, images_per_step = every.batch_times, per_process * b.world_size  # all ranks' images in one step
    steady = times[warm:]
    data_s = sum(every.data_times[warm:]) + s.train_batches.gpu_wait_s()
    s.times.add_epoch(data_s, sum(steady), b.comm_seconds() - comm_start)
    throughput = bench_throughput(times, images_per_step, warm)
    s.run.record(
        "bench", per_worker_batch=cfg.train.per_worker_batch, world_size=b.workers, batches=timed,
        warmup_batches=warm, lr=lr, **throughput, data_share=s.times.epoch_data_share, **s.times.split,
        **rates(s, throughput["images_per_s_steady"]),
    )
    s.run.progress(data_wait_share=s.times.data_wait_share())
    record_quiet(s, {**quiet, **compute.peak_memory(b.device)})
    s.telemetry.write(gather=True)


def rates(s: Setup, images_per_s: float) -> dict:
    """The bench record's tokens/s, model FLOP/s and MFU, from the workload's tokens and FLOPs a sample and the
    GPUs' peak (contract/machine.py; none on the CPU). Every rank calls it: the devices are gathered."""
    w, cfg, b = s.workload, s.cfg, s.backend
    devices = b.describe()["devices"]  # every GPU the run computes on (DataParallel: several in one process)
    gpu = devices[0].split(" ", 1)[-1] if b.device.type == "cuda" else None
    return workload_rates(images_per_s, w.tokens_per_sample(cfg), w.flops_per_sample(cfg),
                          peak_flops(gpu, cfg.train.precision), len(devices))


def record_quiet(s: Setup, mine: dict) -> None:
    """Every rank's timed window (contract/hostload.py) and peak memory (compute.peak_memory) into its entry of the
    manifest's placement (rank 0's)."""
    merged = hostload.with_windows(s.run.manifest.get("placement"), s.backend.gather_objects(mine))  # a collective
    if merged is not None:
        s.run.progress(placement=merged)


def bench_batches(s: Setup, per_process: int):
    """The benchmark's endless batches, on the device: tf_cnn_benchmarks' one batch in synthetic mode."""
    cfg = s.cfg
    if cfg.data.kind != "synthetic":
        loader, _ = loop.batches(s, 0, 0)
        return itertools.chain.from_iterable(itertools.repeat(loader))  # epoch 0 over and over
    images, target = s.workload.synthetic_batch(cfg, per_process, s.backend.device)
    return itertools.repeat((s.compute.layout(images), target, 0))  # channels_last once, as by hand
