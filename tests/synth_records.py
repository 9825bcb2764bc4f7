"""Synthetic run folders and logs for the tests, that follow the run-folder contract and the upstream formats exactly.

Run folders are written with the trainer's own writer (contract.runfolder) and learning rates computed with its own
policy functions (contract.lr), so a fixture cannot drift from what a real run writes.

Used by the tests, by tests/fixtures/analysis/make_fixtures.py and by the analysis benchmarks
(tests/bench_analysis.py: a million-line log, fifty runs). The numbers are made up (a smooth curve plus seeded
noise); only the shapes and formats are real.
"""
from __future__ import annotations

import itertools
import math
import random
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from analysis import numbers as nb
from contract import lr, runfolder


def pytorch_train_line(fmt: str, epoch: int, i: int, n: int, t: float, ta: float, d: float, da: float,
                       loss: float, la: float, a1: float, a1a: float, a5: float, a5a: float) -> str:
    """One training line of pytorch/examples imagenet/main.py; i is the 0-based batch index."""
    if fmt == "early-2019":  # thesis era: unpadded, loss :.4f, index from 0
        return (f"Epoch: [{epoch}][{i}/{n}]\tTime {t:.3f} ({ta:.3f})\tData {d:.3f} ({da:.3f})\t"
                f"Loss {loss:.4f} ({la:.4f})\tAcc@1 {a1:.3f} ({a1a:.3f})\tAcc@5 {a5:.3f} ({a5a:.3f})")
    w = len(str(n))
    shown = i if fmt == "progressmeter-2019" else i + 1  # today's display(i + 1)
    return (f"Epoch: [{epoch}][{shown:{w}d}/{n}]\tTime {t:6.3f} ({ta:6.3f})\tData {d:6.3f} ({da:6.3f})\t"
            f"Loss {loss:.4e} ({la:.4e})\tAcc@1 {a1:6.2f} ({a1a:6.2f})\tAcc@5 {a5:6.2f} ({a5a:6.2f})")


def pytorch_test_line(fmt: str, i: int, n: int, t: float, ta: float, loss: float, la: float, a1: float,
                      a1a: float, a5: float, a5a: float) -> str:
    if fmt == "early-2019":
        return (f"Test: [{i}/{n}]\tTime {t:.3f} ({ta:.3f})\tLoss {loss:.4f} ({la:.4f})\t"
                f"Acc@1 {a1:.3f} ({a1a:.3f})\tAcc@5 {a5:.3f} ({a5a:.3f})")
    w = len(str(n))
    shown = i if fmt == "progressmeter-2019" else i + 1
    return (f"Test: [{shown:{w}d}/{n}]\tTime {t:6.3f} ({ta:6.3f})\tLoss {loss:.4e} ({la:.4e})\t"
            f"Acc@1 {a1:6.2f} ({a1a:6.2f})\tAcc@5 {a5:6.2f} ({a5a:6.2f})")


def pytorch_summary_line(fmt: str, top1: float, top5: float) -> str:
    if fmt == "current":  # ' *' + meters' summaries joined by ' ' (Time and Loss summarise to '')
        return f" *   Acc@1 {top1:.3f} Acc@5 {top5:.3f}"
    return f" * Acc@1 {top1:.3f} Acc@5 {top5:.3f}"


class _Meter:
    def __init__(self):
        self.sum = 0.0
        self.count = 0

    def update(self, v):
        self.sum += v
        self.count += 1
        return self.sum / self.count


def pytorch_log_lines(fmt: str = "early-2019", epochs: int = 1, batches: int = 250, val_batches: int = 4,
                      first_batch_s: float = 0.0, batch_s: float = 0.6, data_s: float = 0.25, print_freq: int = 1,
                      seed: int = 0, diverge_at: int | None = None):
    """Yield the lines of a pytorch/examples run (training and validation of each epoch)."""
    rng = random.Random(seed)
    for e in range(epochs):
        bt, dt, ls, a1m, a5m = _Meter(), _Meter(), _Meter(), _Meter(), _Meter()
        for i in range(batches):
            t = first_batch_s if (i == 0 and first_batch_s) else batch_s + rng.uniform(-0.01, 0.01)
            d = (first_batch_s * 0.6 if (i == 0 and first_batch_s) else data_s + rng.uniform(-0.005, 0.005))
            step = e * batches + i
            loss = 6.9 * math.exp(-step / (batches * epochs * 0.7)) + rng.uniform(0, 0.05)
            if diverge_at is not None and step >= diverge_at:
                loss = float("nan")
            a1 = min(100.0, 100.0 * (1 - math.exp(-step / (batches * epochs))) * 0.8 + rng.uniform(0, 2))
            a5 = min(100.0, a1 * 1.2)
            ta, da, la, a1a, a5a = bt.update(t), dt.update(d), ls.update(loss), a1m.update(a1), a5m.update(a5)
            if i % print_freq == 0:
                yield pytorch_train_line(fmt, e, i, batches, t, ta, d, da, loss, la, a1, a1a, a5, a5a)
        vt, vl, v1, v5 = _Meter(), _Meter(), _Meter(), _Meter()
        for i in range(val_batches):
            acc = 60.0 + 10 * e / max(1, epochs) + rng.uniform(-1, 1)
            t, loss = 0.3 + rng.uniform(0, 0.01), 1.5 - 0.1 * e
            ta, la, a1a, a5a = vt.update(t), vl.update(loss), v1.update(acc), v5.update(acc + 20)
            if i % print_freq == 0:
                yield pytorch_test_line(fmt, i, val_batches, t, ta, loss, la, acc, a1a, acc + 20, a5a)
        yield pytorch_summary_line(fmt, v1.sum / v1.count, v5.sum / v5.count)


def write_pytorch_log(path: str | Path, lines_wanted: int, fmt: str = "early-2019") -> int:
    """A pytorch/examples log of about `lines_wanted` lines at print frequency 1 (the thesis's setting)."""
    batches = 10010
    epochs = max(1, math.ceil(lines_wanted / (batches + 2)))
    n = 0
    with open(path, "w") as fh:
        for line in pytorch_log_lines(fmt, epochs=epochs, batches=batches, val_batches=1, first_batch_s=18.5):
            fh.write(line + "\n")
            n += 1
            if n >= lines_wanted:
                break
    return n


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


def planned_schedule(*, gpus: int, per_gpu_batch: int, epochs: int, warmup: str, warmup_epochs: float,
                     scaling: str, base_lr: float, base_batch: int, decay: str, milestones, step_every: int
                     ) -> tuple[float, list[float]]:
    """(target rate, rate of each epoch) from the trainer's own policy functions (contract.lr)."""
    target = lr.scaled_lr(base_lr, base_batch, per_gpu_batch * gpus, scaling)
    policy = lr.Policy(target, lr.single_worker_lr(base_lr, base_batch, per_gpu_batch), warmup=warmup,
                       warmup_epochs=int(warmup_epochs), decay=decay, step_every=step_every,
                       milestones=tuple(milestones), gamma=0.1)
    return target, [round(v, 10) for v in lr.schedule(policy, epochs)]


class _Clock:
    """The simulated wall clock the records are stamped with (fixtures are deterministic)."""

    def __init__(self, start: float):
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class RunSpec:
    """What a made-up run is: every setting write_run takes by keyword, with the defaults of a small local run."""

    scale: str = "local"
    framework: str = "pytorch"
    gpus: int = 1  # W workers
    processes: int | None = None  # the launch's P for W workers (default: one process a worker)
    backend: str | None = None  # ddp, horovod... (default: emulated or single)
    per_gpu_batch: int = 32
    seed: int = 0
    epochs: int = 6
    epochs_done: int | None = None  # fewer than epochs: a run that stopped (status) after these
    status: str = "completed"  # or diverged, failed, preempted, running
    warmup: str = "none"
    warmup_epochs: float = 0
    scaling: str = "linear"
    base_lr: float = 0.1
    base_batch: int = 256
    decay: str = "milestones"
    milestones: tuple = (3, 4, 5)
    step_every: int = 30
    bench_batches: int = 0  # a throughput benchmark: part of one epoch, and its bench record
    warmup_batches: int = 0
    iters_per_epoch: int = 20
    print_freq: int = 5
    final_acc: float = 70.0
    start: float = 1_700_000_000.0  # the simulated clock's start (fixtures are deterministic)
    batch_s: float = 0.05
    first_batch_s: float = 0.5
    comm_share: float = 0.0  # the bench record's share of its timed steps spent communicating
    truncate_tail: bool = False  # end the records with one cut in half, as a kill leaves it
    train_extra: dict | None = None  # more [train] keys, e.g. {"precision": "bf16"}
    manifest_extra: dict | None = None  # more manifest fields, e.g. {"link": "100mbit"}

    @property
    def epochs_run(self) -> int:
        return 1 if self.bench_batches else self.epochs  # a throughput benchmark trains part of one epoch

    @property
    def done(self) -> int:
        return self.epochs_run if self.epochs_done is None else self.epochs_done

    @property
    def resolved_backend(self) -> str:
        return self.backend or ("emulated" if self.scale == "local" and self.gpus > 1 else "single")


def write_run(root: str | Path, experiment: str, run: str, **settings) -> Path:
    """One run folder written by the trainer's own writer (contract.runfolder), with made-up numbers; settings:
    RunSpec's fields (an unknown one is a TypeError)."""
    spec = RunSpec(**settings)
    d = Path(root) / experiment / run
    target, sched = spec_schedule(spec)
    clock = _Clock(spec.start)
    out = runfolder.RunFolder(d, writes=True, echo=False, clock=clock)
    out.begin(run_config(spec, experiment, run, target, sched), **manifest_fields(spec))
    rng = random.Random(zlib.crc32(f"{experiment}/{run}/{spec.seed}".encode()))
    train = _Training(out, clock, rng, spec)
    if spec.bench_batches:
        avg199 = train.iterations(0, spec.bench_batches, sched[0] if sched else target)
        train.bench(spec.bench_batches, spec.warmup_batches, sched[0], avg199)
    else:
        for e in range(spec.done):
            ep_start = clock.now
            train.iterations(e, spec.iters_per_epoch, sched[e] if e < len(sched) else target)
            train.epoch(e, sched[e], spec.final_acc, ep_start, spec.iters_per_epoch)
    _close(out, d, spec.status, spec.done, clock, spec.truncate_tail)
    return d


def spec_schedule(spec: RunSpec) -> tuple[float, list[float]]:
    """(target rate, rate of each epoch) of a made-up run."""
    return planned_schedule(gpus=spec.gpus, per_gpu_batch=spec.per_gpu_batch, epochs=spec.epochs_run,
                            warmup=spec.warmup, warmup_epochs=spec.warmup_epochs, scaling=spec.scaling,
                            base_lr=spec.base_lr, base_batch=spec.base_batch, decay=spec.decay,
                            milestones=spec.milestones, step_every=spec.step_every)


def run_config(spec: RunSpec, experiment: str, run: str, target: float, sched: list[float]) -> dict:
    """The run's config.json, resolved as the trainer resolves it."""
    local = spec.scale == "local"
    return {
        "experiment": experiment, "run": run, "scale": spec.scale,
        "model": {"name": "resnet8" if local else "resnet50", "num_classes": 12 if local else 1000},
        "data": {"kind": "generated" if local else "imagefolder", "path": None, "image_size": 16,
                 "loader_workers": 2},
        "train": {"epochs": spec.epochs_run, "per_worker_batch": spec.per_gpu_batch, "workers": spec.gpus,
                  "backend": "auto", "seed": spec.seed, "print_freq": spec.print_freq, **(spec.train_extra or {})},
        "optim": {"name": "sgd", "momentum": 0.9, "weight_decay": 1e-4},
        "lr": {"base": spec.base_lr, "base_batch": spec.base_batch, "scaling": spec.scaling, "warmup": spec.warmup,
               "warmup_epochs": spec.warmup_epochs, "decay": spec.decay, "step_every": spec.step_every,
               "milestones": list(spec.milestones), "gamma": 0.1},
        "bench": {"batches": spec.bench_batches, "warmup_batches": spec.warmup_batches},
        "resolved": {"world_size": spec.gpus, "global_batch": spec.per_gpu_batch * spec.gpus, "lr": target,
                     "framework": spec.framework, "backend": spec.resolved_backend, "schedule": sched},
    }


def manifest_fields(spec: RunSpec) -> dict:
    """What the run's manifest.json begins with (torch 2.14.1: made up, as the numbers are)."""
    return {"start": _iso(spec.start), "hosts": ["localhost"], "backend": spec.resolved_backend, "launcher": "none",
            "devices": ["cpu"], "seed": spec.seed, "world_size": spec.processes or spec.gpus, "workers": spec.gpus,
            "machine": {"torch": "2.14.1"}, "smoke": False,
            "versions": {"python": "3.11", "torch": "2.14.1", "torchvision": "0.29.1", "horovod": None},
            "git_commit": None, **(spec.manifest_extra or {})}


class _Training:
    """The records of made-up training, written through the trainer's writer on the simulated clock."""

    def __init__(self, out: runfolder.RunFolder, clock: _Clock, rng: random.Random, spec: RunSpec):
        self.out, self.clock, self.rng, self.spec = out, clock, rng, spec
        self.gb, self.epochs, self.done = spec.per_gpu_batch * spec.gpus, spec.epochs_run, spec.done
        self.status, self.print_freq, self.batch_s, self.first_batch_s = (spec.status, spec.print_freq, spec.batch_s,
                                                                          spec.first_batch_s)

    def iterations(self, e: int, n_iter: int, rate: float) -> float | None:
        """One epoch's iterations (an iter record and a train.log line every print_freq-th); returns the running
        mean batch time at the thesis's batch 199 (None when there are fewer batches)."""
        bt = _Meter()
        avg199 = None
        for i in range(n_iter):
            b = self.first_batch_s if i == 0 else self.batch_s * (1 + self.rng.uniform(-0.05, 0.05))
            self.clock.now += b
            avg = bt.update(b)
            if i == nb.THESIS_BATCH_INDEX:
                avg199 = avg
            if i % self.print_freq == 0:
                loss = 2.5 * math.exp(-(e * n_iter + i) / (n_iter * max(1, self.epochs) / 2))
                if self.status == "diverged" and e == self.done - 1 and i > n_iter // 2:
                    loss = float("nan")
                self.out.record("iter", epoch=e, iter=i, iters=n_iter, batch_time=b, batch_time_avg=avg,
                                data_time=b * 0.3, data_time_avg=avg * 0.3, loss=loss, loss_avg=loss, top1=50.0,
                                top1_avg=50.0, top5=80.0, top5_avg=80.0, lr=rate, images=self.gb)
                self.out.log(pytorch_train_line("early-2019", e, i, n_iter, b, avg, b * 0.3, avg * 0.3, loss, loss,
                                                50.0, 50.0, 80.0, 80.0))
        return avg199

    def bench(self, n_iter: int, warmup_batches: int, rate: float, avg199: float | None) -> None:
        steps, c = n_iter - warmup_batches, self.spec.comm_share
        self.out.record("bench", per_worker_batch=self.spec.per_gpu_batch, world_size=self.spec.gpus, batches=n_iter,
                        warmup_batches=warmup_batches, lr=rate, images_per_s_steady=self.gb / self.batch_s,
                        images_per_s_thesis=self.gb / avg199 if avg199 else None, batch_time_avg_at_199=avg199,
                        data_share=0.3, data_s=0.3 * (1 - c) * self.batch_s * steps,
                        compute_s=0.7 * (1 - c) * self.batch_s * steps, comm_s=c * self.batch_s * steps)

    def epoch(self, e: int, rate: float, final_acc: float, ep_start: float, steps: int) -> None:
        """The epoch's record (validation takes 2 s) and its summary line: as the trainer's, its images those of
        the steps it trained (the run record's invariants, contract/invariants.py)."""
        frac = (e + 1) / self.epochs
        train_top1 = final_acc * (0.5 + 0.5 * frac) + self.rng.uniform(-1, 1)
        val_top1 = final_acc * (0.45 + 0.55 * frac) + self.rng.uniform(-1, 1)
        diverged_now = self.status == "diverged" and e == self.done - 1
        train_s = self.clock.now - ep_start
        self.clock.now += 2.0
        self.out.record("epoch", epoch=e, lr=rate,
                        train_loss=float("nan") if diverged_now else 2.5 * (1 - frac) + 0.5,
                        train_top1=train_top1, train_top5=min(100.0, train_top1 + 20), val_loss=2.4 * (1 - frac) + 0.6,
                        val_top1=val_top1, val_top5=min(100.0, val_top1 + 18), epoch_time=self.clock.now - ep_start,
                        images=steps * self.gb, steps=steps, step=(e + 1) * steps, skipped_images=0,
                        skipped_val_images=0, skipped_steps=0,
                        data_share=0.3, data_s=0.3 * train_s, compute_s=0.7 * train_s, comm_s=0.0)
        self.out.log(pytorch_summary_line("early-2019", val_top1, min(100.0, val_top1 + 18)))


def _close(out: runfolder.RunFolder, d: Path, status: str, done: int, clock: _Clock, truncate_tail: bool) -> None:
    """The final status and manifest; truncate_tail: then a record cut in half, as a kill leaves it."""
    if status != "running":
        exit_code = {"completed": 0, "diverged": 3, "failed": 1, "preempted": 4}[status]
        out.end(status, done, status, exit_code, end=_iso(clock.now))
    else:
        out.progress(epochs_done=done)
    out.close()
    if truncate_tail:
        last = (d / runfolder.METRICS).read_bytes().splitlines()[-1]
        with open(d / runfolder.METRICS, "ab") as f:
            f.write(last[: len(last) // 2])


QUALITY = [(4, "04_naive_scaling", "none", 0, "none"), (5, "05_linear_scaling", "none", 0, "linear"),
           (6, "06_stepping_warmup", "stepping", 1, "linear"), (7, "07_small_batch", "stepping", 1, "linear"),
           (8, "08_gradual_warmup", "gradual", 1, "linear"), (9, "09_gradual_warmup_10", "gradual", 2, "linear")]


def throughput_runs():
    """(experiment, run, settings) of experiments 1-3's benchmarks, PyTorch and Horovod+PyTorch at each worker count."""
    for exp, name in ((1, "01_throughput_single_gpu"), (2, "02_throughput_local"), (3, "03_throughput_multi_node")):
        for fw in ("pytorch", "horovod+pytorch"):
            for g in {1: (1,), 2: (1, 2, 4), 3: (1, 8, 32)}[exp]:
                yield name, f"{fw.replace('+', '-')}-w{g}", dict(
                    framework=fw, gpus=g, per_gpu_batch=32, bench_batches=220, warmup_batches=10,
                    batch_s=0.05 * (1 + 0.02 * g), first_batch_s=0.5 + (0.5 if fw == "pytorch" else 0))


def quality_runs():
    """(experiment, run, settings) of experiments 4-9 at 1, 8 and 32 workers, seed 0, then 1, ... without end."""
    for seed in itertools.count():
        for exp, name, warmup, warmup_epochs, scaling in QUALITY:
            for g in (1, 8, 32):
                yield name, f"w{g}-s{seed}", dict(
                    framework="horovod+pytorch" if g > 1 else "pytorch", gpus=g, per_gpu_batch=8 if exp != 7 else 2,
                    epochs=18, seed=seed, warmup=warmup, warmup_epochs=warmup_epochs, scaling=scaling,
                    iters_per_epoch=200, print_freq=10, milestones=(6, 12, 16), final_acc=60 - g / 4)


def write_study(root: str | Path, n_runs: int = 50) -> list[Path]:
    """n_runs local-scale runs: experiments 1-3's throughput runs first, then seeded quality runs of 4-9."""
    runs = itertools.islice(itertools.chain(throughput_runs(), quality_runs()), n_runs)
    return [write_run(root, experiment, run, **settings) for experiment, run, settings in runs]
