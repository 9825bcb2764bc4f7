"""The TensorFlow throughput benchmark: the thesis's protocol on synthetic data, into a run folder like any run's.

`bench.warmup_batches` untimed steps, then `bench.batches` timed ones, each timed to its end (its loss read back);
the bench record's figures come from contract/runfolder.py's bench_throughput and train.log gets tf_cnn_benchmarks'
lines. Every rank's synthetic batch is its own, so at the end every rank's weights are gathered and must agree, else
the run failed (the averaging did not happen).
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import tensorflow as tf

from contract import events, hostload, placement
from contract.config import Config, ConfigError
from contract.runfolder import MANIFEST, RunFolder, bench_throughput, config_document, now_iso
from contract.machine import cpu_vector_isa, this_machine
from contract.plan import carries_quick
from contract.versions import git_commit, package_version, versions
from trainers.launch import Launch, detect_launch
from trainers.tf import strategies

EXIT_COMPLETED, EXIT_FAILED = 0, 1
AGREE_RTOL = 1e-5  # averaged ranks apply the same update bit for bit; a rank's own gradients differ at 1e-3 and more


class WeightsDisagree(RuntimeError):
    """The ranks' weights differ at the end: their gradients were not averaged."""


def set_threads(cfg: Config, launch: Launch) -> tuple[dict, dict]:
    """TensorFlow's CPU pools from this rank's allocation, by the PyTorch trainer's rule (contract/placement.py):
    train.threads, else OMP_NUM_THREADS (a user's or the study's), else the CPUs the rank was given. Returns the
    manifest's thread settings and this rank's placement entry (contract/placement.py record), as PyTorch's."""
    alloc = placement.read_allocation(launch.local_world_size)
    placed = placement.decide(alloc, cfg.train.threads, None, placement.user_omp_threads(launcher_name(launch)))
    warning = placed.warning(launch.rank, os.uname().nodename)
    if warning and launch.rank == 0:  # one line, not one a rank
        print(warning, file=sys.stderr, flush=True)
    tf.config.threading.set_intra_op_parallelism_threads(placed.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return ({"tensorflow_intra_op": placed.threads, "cpus": placed.cpus, "threads_from": placed.threads_from,
             "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
            placement.record(placed, alloc, os.uname().nodename, launch.local_rank))


def synthetic_batch(cfg: Config, rank: int):
    """This rank's one fixed batch (tf_cnn_benchmarks' synthetic mode): NHWC images and labels."""
    rng = np.random.default_rng(cfg.train.seed * 1_000_003 + rank)
    size, batch = cfg.data.image_size, cfg.train.per_worker_batch
    images = tf.constant(rng.standard_normal((batch, size, size, 3), dtype=np.float32))
    labels = tf.constant(rng.integers(0, cfg.model.num_classes, batch), dtype=tf.int64)
    return images, labels


def time_steps(step, images, labels, count: int) -> tuple[list[float], list[float]]:
    """Each step's seconds and loss, the loss read back so that the step has ended when its clock stops."""
    times, losses = [], []
    for _ in range(count):
        start = time.perf_counter()
        loss = float(step(images, labels))
        times.append(time.perf_counter() - start)
        losses.append(loss)
    return times, losses


def step_lines(times: list[float], losses: list[float], warm: int, per_process: int, every: int) -> list[str]:
    """tf_cnn_benchmarks' lines over the timed steps: the running mean of this process's images/s, its
    uncertainty (standard error) and jitter (scaled median absolute deviation), and the step's loss."""
    lines, rates = ["Step\tImg/sec\ttotal_loss"], []
    timed = times[warm:]
    for i, (t, loss) in enumerate(zip(timed, losses[warm:]), start=1):
        rates.append(per_process / t)
        if i % every == 0 or i == 1 or i == len(timed):
            mean = per_process * i / sum(timed[:i])
            error = statistics.stdev(rates) / len(rates) ** 0.5 if len(rates) > 1 else 0.0
            median = statistics.median(rates)
            jitter = 1.4826 * statistics.median(abs(r - median) for r in rates)
            lines.append(f"{i}\timages/sec: {mean:.1f} +/- {error:.1f} (jitter = {jitter:.1f})\t{loss:.3f}")
    return lines


def weights_vector(model) -> np.ndarray:
    """Each trainable variable's sum and sum of squares (float64): equal on every rank iff they stepped alike."""
    parts = [(float(np.sum(v.numpy(), dtype=np.float64)), float(np.sum(np.square(v.numpy(), dtype=np.float64))))
             for v in model.trainable_variables]
    return np.array(parts, dtype=np.float64).ravel()


def check_agree(gathered: np.ndarray) -> float:
    """The largest difference of any rank's weights from rank 0's, relative to their size; raises WeightsDisagree
    above AGREE_RTOL."""
    scale = np.maximum(np.abs(gathered[0]), 1e-3)  # a sum near 0 (a BatchNorm shift) is compared absolutely
    worst = float(np.max(np.abs(gathered - gathered[0]) / scale)) if len(gathered) > 1 else 0.0
    if worst > AGREE_RTOL:
        ranks = [r for r in range(len(gathered)) if not np.allclose(gathered[r], gathered[0], rtol=AGREE_RTOL, atol=0)]
        raise WeightsDisagree(f"the ranks' weights differ at the end (rank(s) {', '.join(map(str, ranks))} from "
                              f"rank 0 by up to {worst:.3g} relative): their gradients were not averaged")
    return worst


def measure(cfg: Config, backend, run: RunFolder) -> dict:
    """Build, warm up, time; the Bench record, train.log's lines; the check that the ranks' weights agree."""
    model, optimizer, lr = strategies.build(cfg, backend)
    backend.start_equal(model)
    images, labels = synthetic_batch(cfg, backend.rank)
    step = backend.make_step(model, optimizer, cfg.optim.weight_decay, cfg.global_batch)
    warm, timed = cfg.bench.warmup_batches, cfg.bench.batches
    run.log(f"Model: {cfg.model.name} ({model.count_params():,} parameters), {backend.world_size} process(es), "
            f"backend {backend.name}")
    run.log(f"Batch size: {cfg.global_batch} global")
    run.log(f"{float(cfg.train.per_worker_batch):.1f} per device")
    run.log(f"Running warm up: {warm} steps, then {timed} timed")
    times, losses = time_steps(step, images, labels, warm)
    quiet_from = hostload.sample(sorted(placement.affinity_of(0)))
    timed_times, timed_losses = time_steps(step, images, labels, timed)
    quiet = hostload.window(quiet_from, hostload.sample(sorted(placement.affinity_of(0))))
    times, losses = times + timed_times, losses + timed_losses
    for line in step_lines(times, losses, warm, cfg.train.per_worker_batch, cfg.train.print_freq):
        run.log(line)
    figures = bench_throughput(times, cfg.global_batch, warm)
    steady = sum(times[warm:])
    run.record("bench", per_worker_batch=cfg.train.per_worker_batch, world_size=backend.world_size, batches=timed,
               warmup_batches=warm, lr=lr, **figures, data_share=0.0, data_s=0.0, compute_s=steady, comm_s=0.0)
    run.log("-" * 64)
    run.log(f"total images/sec: {figures['images_per_s_steady']:.2f}")
    run.log("-" * 64)
    record_quiet(backend, run, quiet)
    worst = check_agree(backend.gather(weights_vector(model)))
    run.log(f"=> the {backend.world_size} rank(s)' weights agree at the end (largest relative difference {worst:.3g})")
    return {"weights_agree": {"ranks": backend.world_size, "max_relative_difference": worst, "rtol": AGREE_RTOL}}


def record_quiet(backend, run: RunFolder, mine: dict) -> None:
    """Every rank's timed window (contract/hostload.py) into its entry of the manifest's placement, as PyTorch's."""
    merged = hostload.with_windows(run.manifest.get("placement"), backend.gather_objects(mine))  # a collective
    if merged is not None:
        run.progress(placement=merged)


def start_manifest(cfg: Config, run_dir: Path, backend, run: RunFolder, launch: Launch, threads: dict,
                   placed: dict) -> None:
    document = config_document(cfg, run_dir.name, backend.name)
    ranks = backend.gather_objects(placed)  # every rank's, in rank order (contract/placement.py), as PyTorch's
    run.begin(
        document, {"start": now_iso(), "threads_env": threads}, smoke=carries_quick(document),
        launcher=launcher_name(launch), seed=cfg.train.seed, link=os.environ.get("CLUSTER_LINK"),
        versions={**versions(), "tensorflow": tf.__version__, "tf_keras": package_version("tf-keras")},
        git_commit=git_commit(), threads=threads,
        cpu={"machine": platform.machine(), "processor": platform.processor()},
        machine=this_machine(cpu_vector_isa(), first_gpu_model()),  # no torch here: the ISA from the CPU's flags
        backend=backend.name, world_size=backend.world_size, placement=ranks,
        workers=backend.world_size, devices=["cpu"] if not tf.config.list_physical_devices("GPU") else
        [d.name for d in tf.config.list_physical_devices("GPU")], hosts=backend.hosts(), framework="tensorflow")


def first_gpu_model() -> str | None:
    """The first GPU's model as TensorFlow names it (the machine identity's gpu_model), None without one."""
    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None


def launcher_name(launch: Launch) -> str:
    """The launcher as the manifest names it: the study starts its MultiWorkerMirroredStrategy workers with
    torchrun's environment (studies/tf_launch.py), and a TensorFlow run is never started by torchrun itself."""
    return "study" if launch.launcher == "torchrun" else launch.launcher


def run_benchmark(cfg: Config, run_dir: Path, resume: bool) -> int:
    """One TensorFlow benchmark run on whatever launched it; the exit code of a PyTorch run's."""
    if not cfg.bench.batches:
        raise ConfigError("the TensorFlow trainer runs the throughput benchmark only: set bench.batches > 0")
    launch = detect_launch()
    threads, placed = set_threads(cfg, launch)
    backend = strategies.create_strategy(cfg)  # first: MWMS must exist before any other TensorFlow op
    if backend.world_size != cfg.train.workers:  # a process a worker: none emulated in TensorFlow
        raise ConfigError(f"train.workers = {cfg.train.workers} but {backend.world_size} process(es) were launched; "
                          f"start {cfg.train.workers} (horovodrun -np, srun -n) or set train.workers")
    main = backend.rank == 0
    if main and not resume and (run_dir / MANIFEST).exists():
        raise ConfigError(f"run folder {run_dir} exists; run it again with --resume auto or pick another --run")
    # a benchmark has no checkpoint: a rerun starts afresh; TensorBoard's tags are the PyTorch trainer's
    run = RunFolder(run_dir, writes=main, events=events.live(run_dir, main))
    try:
        start_manifest(cfg, run_dir, backend, run, launch, threads, placed)
        checks = measure(cfg, backend, run)
    except Exception as e:  # one line for the study's console and the manifest, after the traceback
        if not isinstance(e, WeightsDisagree):
            traceback.print_exc()
        message = f"rank {backend.rank} of {backend.world_size}: {type(e).__name__}: {e}".splitlines()[0][:400]
        print(f"error: training failed: {message}", file=sys.stderr, flush=True)
        run.log(f"=> failed: {message}")
        run.end("failed", 0, message, EXIT_FAILED, failed_ranks=[backend.rank])
        run.close()
        return EXIT_FAILED
    run.end("completed", 0, exit_code=EXIT_COMPLETED, **checks)
    run.close()
    return EXIT_COMPLETED
