"""The human side of a run: train.log's lines and the meters behind them (the records are contract/runfolder.py).

train.log keeps the line format of pytorch/examples' imagenet/main.py as the thesis ran it (early 2019), so the
thesis's way of reading logs (throughput = per-GPU batch x GPUs / running-mean batch time at batch 199) still works.
"""
from __future__ import annotations


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
