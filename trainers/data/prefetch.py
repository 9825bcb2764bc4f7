"""Batches on the device, the next ones prepared while the GPU trains on this one.

On a CUDA device each batch is moved (with data.decoder = "gpu", decoded) on a stream of its own, `AHEAD` batches
in advance; the training stream waits on that batch's event alone, and what crosses streams is `record_stream`ed so
the caching allocator never hands its memory over early. The host's wait counts as data time in the loop;
`gpu_wait_s` adds the time the training stream stood idle on a batch's event (read once an epoch). On the CPU
everything is synchronous.
"""
from __future__ import annotations

from collections import deque

import torch

from .fast import to_device

AHEAD = 2  # batches in flight on the prefetch stream


class DeviceBatches:
    def __init__(self, loader, device: torch.device, ahead: int = AHEAD):
        self.loader, self.device, self.ahead = loader, torch.device(device), ahead
        self.cuda = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.waits: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        if not self.cuda:
            for images, target, skipped in self.loader:
                yield to_device(images, self.device), target, skipped
            return
        source, queue = iter(self.loader), deque()
        for batch in source:
            queue.append(self._prepare(batch))
            if len(queue) > self.ahead:
                yield self._hand_over(*queue.popleft())
        while queue:
            yield self._hand_over(*queue.popleft())

    def _prepare(self, batch):
        """Queue the batch's move (and decode) on the prefetch stream; returns it with its ready event."""
        images, target, skipped = batch
        with torch.cuda.stream(self.stream):
            images = to_device(images, self.device)
            target = target.to(self.device, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return images, target, skipped, ready

    def _hand_over(self, images, target, skipped, ready):
        train = torch.cuda.current_stream(self.device)
        before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before.record(train)
        train.wait_event(ready)
        after.record(train)
        self.waits.append((before, after))
        images.record_stream(train)  # made on the prefetch stream, freed after the training stream's use
        target.record_stream(train)
        return images, target, skipped

    def gpu_wait_s(self) -> float:
        """Seconds the training stream waited for batches since the last call (synchronises the device)."""
        if not self.waits:
            return 0.0
        self.waits[-1][1].synchronize()
        waited = sum(before.elapsed_time(after) for before, after in self.waits) / 1000.0
        self.waits.clear()
        return waited
