"""The human side of a run: train.log's lines, the meters behind them, and `LogEvery`, the one place that decides
when a loop reads its meters and writes them (the records themselves are contract/runfolder.py).

train.log keeps pytorch/examples' imagenet/main.py line format as the thesis ran it (early 2019), so the thesis's
way of reading logs (per-GPU batch x GPUs / running-mean batch time at batch 199) still works.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Iterator

import torch


class AverageMeter:
    """The current value and the running mean, as pytorch/examples' AverageMeter."""

    def __init__(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train_line(epoch: int, i: int, n: int, batch, data, loss, top1, top5) -> str:
    return (
        f"Epoch: [{epoch}][{i}/{n}]\tTime {batch.val:.3f} ({batch.avg:.3f})\tData {data.val:.3f} ({data.avg:.3f})\t"
        f"Loss {loss.val:.4f} ({loss.avg:.4f})\tAcc@1 {top1.val:.3f} ({top1.avg:.3f})\t"
        f"Acc@5 {top5.val:.3f} ({top5.avg:.3f})"
    )


def test_line(i: int, n: int, batch, loss, top1, top5) -> str:
    return (
        f"Test: [{i}/{n}]\tTime {batch.val:.3f} ({batch.avg:.3f})\tLoss {loss.val:.4f} ({loss.avg:.4f})\t"
        f"Acc@1 {top1.val:.3f} ({top1.avg:.3f})\tAcc@5 {top5.val:.3f} ({top5.avg:.3f})"
    )


def summary_line(top1: float, top5: float) -> str:
    return f" * Acc@1 {top1:.3f} Acc@5 {top5:.3f}"


# ---- Loss and hits: summed on the device, read where the loop logs ---------------------------------------------------
@dataclass
class Sums:
    """Loss and correct predictions summed over images: reduced across ranks as sums, never means of means."""
    loss: float = 0.0
    top1: float = 0.0
    top5: float = 0.0
    images: int = 0

    def add(self, loss: float, c1: float, c5: float, n: int) -> None:
        self.loss += loss * n
        self.top1 += c1
        self.top5 += c5
        self.images += n

    def reduced(self, backend) -> "Sums":
        sums = [self.loss, self.top1, self.top5, float(self.images)]
        t = backend.all_reduce_sum(torch.tensor(sums, dtype=torch.float64, device=backend.device))
        loss, c1, c5, n = t.tolist()
        return Sums(loss, c1, c5, int(n))

    def gathered(self, backend) -> list["Sums"]:
        """Every rank's sums, in rank order (a collective: all ranks call it): each fills its own row of zeros, and
        the rows' sum is every row exactly."""
        rows = torch.zeros(backend.world_size, 4, dtype=torch.float64, device=backend.device)
        rows[backend.rank] = torch.tensor([self.loss, self.top1, self.top5, float(self.images)], dtype=torch.float64)
        return [Sums(loss, c1, c5, int(n)) for loss, c1, c5, n in backend.all_reduce_sum(rows).tolist()]

    def means(self) -> tuple[float, float, float]:
        n = max(self.images, 1)
        return self.loss / n, 100.0 * self.top1 / n, 100.0 * self.top5 / n


def topk_hits(output: torch.Tensor, target: torch.Tensor, ks=(1, 5)) -> list[torch.Tensor]:
    """Correct predictions among the top k, as device tensors (reading them would wait for the GPU)."""
    maxk = min(max(ks), output.shape[1])
    pred = output.topk(maxk, dim=1).indices
    hits = pred.eq(target.view(-1, 1))  # at most one hit a row: the top-k classes are distinct
    return [hits[:, : min(k, maxk)].sum() for k in ks]


@dataclass
class Reading:
    """A meter's value at one iteration and its running mean, read from the device (train_line's .val/.avg)."""
    val: float
    avg: float


@dataclass
class Readout:
    """One reading of DeviceTotals: the last step's mean loss, the loss / top-1 / top-5 meters, the epoch's sums."""
    loss: float
    losses: Reading
    top1: Reading
    top5: Reading
    sums: Sums


class DeviceTotals:
    """Loss x images and top-1/top-5 hits summed on the device in float64, read only where the loop logs (reading
    waits for every queued step). One sum serves the epoch and the running means, so iter records after a mid-epoch
    resume equal an uninterrupted run's. On the CPU the sums stay Python floats (cheaper than tensor ops)."""

    def __init__(self, device: torch.device, start: Sums | None = None):
        self.start = start = start or Sums()
        self.on_host = device.type == "cpu"
        self.sums, self.last = [start.loss, start.top1, start.top5], [0.0, 0.0, 0.0]
        if not self.on_host:
            self.sums = torch.tensor(self.sums, dtype=torch.float64, device=device)
            self.last = torch.zeros(3, dtype=torch.float64, device=device)
        self.images, self.last_images = start.images, 0

    def add(self, loss: torch.Tensor, output: torch.Tensor, target: torch.Tensor, samples: int) -> None:
        """One batch of `samples` inputs: its mean loss and hits over the rows of `output` and `target`. An image is
        one row; a sequence's tokens are rows of one sample (workloads/gpt): the sums count samples, each weighted as
        the mean of its rows, so loss and accuracy are per row (per token) and `images` counts samples."""
        n = samples
        per_row = n / len(target)  # 1.0 for images: the hits stay whole numbers
        if self.on_host:
            hits = output.topk(min(5, output.shape[1]), dim=1).indices.eq(target.view(-1, 1)).sum(0).tolist()
            self.last = [loss.item() * n, float(hits[0]) * per_row, float(sum(hits)) * per_row]  # top-1, top-5
            self.sums = [a + b for a, b in zip(self.sums, self.last)]
        else:
            c1, c5 = topk_hits(output, target)
            self.last = torch.stack([loss.detach().double() * n, c1.double() * per_row, c5.double() * per_row])
            self.sums += self.last
        self.images += n
        self.last_images = n

    def read(self) -> Readout:
        """The last loss, the meters and the epoch's sums, in one device-to-host copy."""
        if self.on_host:
            last, sums = self.last, self.sums
        else:
            last, sums = torch.stack([self.last, self.sums]).tolist()
        n, count = max(self.last_images, 1), max(self.images, 1)
        loss = last[0] / n
        readings = [Reading(scale * v / n, scale * m / count) for v, m, scale in zip(last, sums, (1.0, 100.0, 100.0))]
        return Readout(loss, *readings, Sums(*sums, self.images))


# ---- The cadence: one iterator for training, validation and the benchmark --------------------------------------------
class LogEvery:
    """A loop's batches with its read-and-log cadence, as MetricLogger.log_every of torchvision's references.

    `every(numbered)` yields (i, batch), timing the wait for each batch (`data_time`) and the whole iteration
    (`batch_time`). `end_step(i)` reads the totals at every print_freq-th iteration and those in `also` (the one
    place the host waits for the device) and calls write(i, self); read=True reads without a line. The reading's
    wait counts in its iteration's batch_time, the writing in none. keep_times=True keeps every iteration's times.
    """

    def __init__(self, totals: DeviceTotals, print_freq: int, write: Callable[[int, LogEvery], None],
                 also: Collection[int] = (), keep_times: bool = False):
        self.totals, self.print_freq, self.write, self.also = totals, print_freq, write, also
        self.keep_times = keep_times
        self.batch_time, self.data_time = AverageMeter(), AverageMeter()
        self.batch_times: list[float] = []
        self.data_times: list[float] = []
        self.reading: Readout | None = None  # the latest
        self.read_images = 0  # the totals' images at the latest reading
        self.started = 0.0  # when the iteration under way began waiting for its batch
        self.open: int | None = None  # the iteration yielded and not yet ended

    def __call__(self, numbered: Iterable[tuple[int, object]]) -> Iterator[tuple[int, object]]:
        self.started = time.time()
        for i, batch in numbered:
            self.data_time.update(time.time() - self.started)  # the loader, and moving (decoding) it onto the device
            self.open = i
            yield i, batch
            if self.open is not None:
                raise RuntimeError(f"iteration {i} not ended: a loop over LogEvery calls end_step(i) after its step")
            self.started = time.time()

    def end_step(self, i: int, read: bool = False) -> Readout | None:
        """After iteration i's step: read and write where the cadence says (or `read`); the reading, else None."""
        logged = i % self.print_freq == 0 or i in self.also
        read = logged or read
        if read:
            self.read()
        self.batch_time.update(time.time() - self.started)
        if self.keep_times:
            self.batch_times.append(self.batch_time.val)
            self.data_times.append(self.data_time.val)
        if logged:
            self.write(i, self)
        self.open = None
        return self.reading if read else None

    def read(self) -> Readout:
        self.reading, self.read_images = self.totals.read(), self.totals.images
        return self.reading

    @property
    def sums(self) -> Sums:
        """The epoch's sums at the latest reading (the totals' start before any)."""
        return self.reading.sums if self.reading else self.totals.start

    def final_sums(self) -> Sums:
        """The epoch's sums, read once more only if steps came after the latest reading."""
        if self.totals.images != self.read_images:
            self.read()
        return self.sums
