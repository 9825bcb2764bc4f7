"""Synthetic run folders and logs that follow the run-folder contract and the upstream formats exactly.

Run folders are written with the trainer's own writer (contract.runfolder) and learning rates computed with its own
policy functions (contract.lr), so a fixture cannot drift from what a real run writes.

Used by the benchmarks (a million-line log, fifty runs) and by tests/fixtures/analysis/make_fixtures.py. The
numbers are made up (a smooth curve plus seeded noise); only the shapes and formats are real.
"""
from __future__ import annotations

import math
import random
import zlib
from datetime import datetime, timezone
from pathlib import Path

from contract import lr, runfolder

from . import numbers as nb


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


def write_run(root: str | Path, experiment: str, run: str, *, scale: str = "local", framework: str = "pytorch",
              gpus: int = 1, per_gpu_batch: int = 32, epochs: int = 6, epochs_done: int | None = None,
              status: str = "completed", seed: int = 0, warmup: str = "none", warmup_epochs: float = 0,
              scaling: str = "linear", base_lr: float = 0.1, base_batch: int = 256, decay: str = "milestones",
              milestones=(3, 4, 5), step_every: int = 30, bench_batches: int = 0, warmup_batches: int = 0,
              iters_per_epoch: int = 20, print_freq: int = 5,
              final_acc: float = 70.0, start: float = 1_700_000_000.0, batch_s: float = 0.05,
              first_batch_s: float = 0.5, truncate_tail: bool = False,
              train_extra: dict | None = None, processes: int | None = None, backend: str | None = None,
              comm_share: float = 0.0, manifest_extra: dict | None = None) -> Path:
    """One run folder written by the trainer's own writer (contract.runfolder), with made-up numbers.
    train_extra: more [train] keys, e.g. {"precision": "bf16", "channels_last": True}; processes: the launch's P for
    `gpus` = W workers over P processes (default: one process a worker); backend: ddp, horovod... (default: emulated
    or single); comm_share: the bench record's share of its timed steps spent communicating; manifest_extra: more
    manifest fields, e.g. {"link": "100mbit", "hosts": ["n1", "n2"]}."""
    d = Path(root) / experiment / run
    if bench_batches:
        epochs = 1  # a throughput benchmark trains part of one epoch
    rng = random.Random(zlib.crc32(f"{experiment}/{run}/{seed}".encode()))
    target, sched = planned_schedule(gpus=gpus, per_gpu_batch=per_gpu_batch, epochs=epochs, warmup=warmup,
                                     warmup_epochs=warmup_epochs, scaling=scaling, base_lr=base_lr,
                                     base_batch=base_batch, decay=decay, milestones=milestones, step_every=step_every)
    backend = backend or ("emulated" if scale == "local" and gpus > 1 else "single")
    config = {
        "experiment": experiment, "run": run, "scale": scale,
        "model": {"name": "resnet8" if scale == "local" else "resnet50", "num_classes": 12 if scale == "local" else 1000},
        "data": {"kind": "generated" if scale == "local" else "imagefolder", "path": None, "image_size": 16,
                 "loader_workers": 2},
        "train": {"epochs": epochs, "per_worker_batch": per_gpu_batch, "workers": gpus, "backend": "auto",
                  "seed": seed, "print_freq": print_freq, **(train_extra or {})},
        "optim": {"name": "sgd", "momentum": 0.9, "weight_decay": 1e-4},
        "lr": {"base": base_lr, "base_batch": base_batch, "scaling": scaling, "warmup": warmup,
               "warmup_epochs": warmup_epochs, "decay": decay, "step_every": step_every,
               "milestones": list(milestones), "gamma": 0.1},
        "bench": {"batches": bench_batches, "warmup_batches": warmup_batches},
        "resolved": {"world_size": gpus, "global_batch": per_gpu_batch * gpus, "lr": target, "framework": framework,
                     "backend": backend, "schedule": sched},
    }
    clock = _Clock(start)
    out = runfolder.RunFolder(d, writes=True, echo=False, clock=clock)
    out.begin(config, **{"start": _iso(start), "hosts": ["localhost"], "backend": backend, "launcher": "none",
                         "devices": ["cpu"], "seed": seed, "world_size": processes or gpus, "workers": gpus,
                         "machine": {"torch": "2.14.1"}, "smoke": False,  # the made-up torch below
                         "versions": {"python": "3.11", "torch": "2.14.1", "torchvision": "0.29.1", "horovod": None},
                         "git_commit": None, **(manifest_extra or {})})
    done = epochs if epochs_done is None else epochs_done
    train = _Training(out, clock, rng, per_gpu_batch * gpus, epochs, done, status, print_freq, batch_s, first_batch_s)
    train.comm_share = comm_share
    if bench_batches:
        avg199 = train.iterations(0, bench_batches, sched[0] if sched else target)
        train.bench(per_gpu_batch, gpus, bench_batches, warmup_batches, sched[0], avg199)
    else:
        for e in range(done):
            ep_start = clock.now
            train.iterations(e, iters_per_epoch, sched[e] if e < len(sched) else target)
            train.epoch(e, sched[e], final_acc, ep_start, iters_per_epoch)
    _close(out, d, status, done, clock, truncate_tail)
    return d


class _Training:
    """The records of made-up training, written through the trainer's writer on the simulated clock."""

    def __init__(self, out: runfolder.RunFolder, clock: _Clock, rng: random.Random, global_batch: int, epochs: int,
                 done: int, status: str, print_freq: int, batch_s: float, first_batch_s: float):
        self.out, self.clock, self.rng, self.gb, self.epochs, self.done = out, clock, rng, global_batch, epochs, done
        self.status, self.print_freq, self.batch_s, self.first_batch_s = status, print_freq, batch_s, first_batch_s
        self.comm_share = 0.0  # of a bench record's timed steps

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

    def bench(self, per_gpu_batch: int, gpus: int, n_iter: int, warmup_batches: int, rate: float,
              avg199: float | None) -> None:
        steps, c = n_iter - warmup_batches, self.comm_share
        self.out.record("bench", per_worker_batch=per_gpu_batch, world_size=gpus, batches=n_iter,
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


def write_study(root: str | Path, n_runs: int = 50) -> list[Path]:
    """About n_runs local-scale runs across experiments 1-9 (throughput studies and seeded quality studies)."""
    out = []
    k = 0
    for exp, name in ((1, "01_throughput_single_gpu"), (2, "02_throughput_local"), (3, "03_throughput_multi_node")):
        for fw in ("pytorch", "horovod+pytorch"):
            for g in {1: (1,), 2: (1, 2, 4), 3: (1, 8, 32)}[exp]:
                if k >= n_runs:
                    return out
                out.append(write_run(root, name, f"{fw.replace('+', '-')}-w{g}", framework=fw, gpus=g,
                                     per_gpu_batch=32, bench_batches=220, warmup_batches=10,
                                     batch_s=0.05 * (1 + 0.02 * g), first_batch_s=0.5 + (0.5 if fw == "pytorch" else 0)))
                k += 1
    quality = [(4, "04_naive_scaling", "none", 0, "none"), (5, "05_linear_scaling", "none", 0, "linear"),
               (6, "06_stepping_warmup", "stepping", 1, "linear"), (7, "07_small_batch", "stepping", 1, "linear"),
               (8, "08_gradual_warmup", "gradual", 1, "linear"), (9, "09_gradual_warmup_10", "gradual", 2, "linear")]
    seed = 0
    while k < n_runs:
        for exp, name, wk, we, sc in quality:
            for g in (1, 8, 32):
                if k >= n_runs:
                    return out
                out.append(write_run(root, name, f"w{g}-s{seed}", framework="horovod+pytorch" if g > 1 else "pytorch",
                                     gpus=g, per_gpu_batch=8 if exp != 7 else 2, epochs=18, seed=seed,
                                     warmup=wk, warmup_epochs=we, scaling=sc, iters_per_epoch=200,
                                     print_freq=10, milestones=(6, 12, 16),
                                     final_acc=60 - g / 4))
                k += 1
        seed += 1
    return out

