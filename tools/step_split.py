"""`python -m tools step-split`: one worker's training step split into forward, backward and optimizer, and the
size of the gradients it reduces: the measured parts `python -m suite analysis advise --step` predicts a cluster's
scaling from (issue #51).

The model and optimizer are the config's at the scale, the batch synthetic and on the device: the compute alone.
The input pipeline's rate is passed (--input-images-per-s, from `make gpu-check` or `suite data bench`) or timed
here (--input-batches B: the config's own training data through its loader, no model). Each phase is timed between
device synchronisations, which drains the launch queue; the whole step is also timed unsynchronised, so the split's
own overhead shows (`split_overhead`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

from contract.config import load_config
from trainers.compute import machine_identity
from trainers.models import build_model
from trainers.optimizers import build_optimizer

REPO = Path(__file__).resolve().parents[1]
EXP1 = REPO / "experiments" / "01_throughput_single_gpu" / "config.toml"


def parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools step-split", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(EXP1))
    p.add_argument("--scale", default="gpu")
    p.add_argument("--batch", type=int, default=None, help="per-worker batch (default: the config's)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--input-images-per-s", type=float, default=None,
                   help="the input pipeline's measured images/s for one worker (recorded for the advisor)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (a CPU rank's; default torch's own)")
    p.add_argument("--input-batches", type=int, default=0,
                   help="time this many batches of the config's training data through its loader (0: not timed)")
    p.add_argument("--json", default=None, help="write the measurement here (else only print it)")
    return p.parse_args(argv)


def synchronize(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class Phases:
    """The model, its optimizer and one synthetic batch on the device, a step timed by phase or whole."""

    def __init__(self, args, cfg):
        self.device = torch.device(args.device)
        self.layout = torch.channels_last if args.channels_last else torch.contiguous_format
        self.model = build_model(cfg.model).to(self.device, memory_format=self.layout)
        self.optimizer = build_optimizer(self.model, cfg.optim, 0.1)
        self.criterion = nn.CrossEntropyLoss()
        size, batch = cfg.data.image_size, args.batch or cfg.train.per_worker_batch
        self.batch = batch
        self.images = torch.randn(batch, 3, size, size, device=self.device).to(memory_format=self.layout)
        self.target = torch.randint(0, cfg.model.num_classes, (batch,), device=self.device)
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def forward(self) -> torch.Tensor:
        with self.autocast:
            return self.criterion(self.model(self.images), self.target)

    def split(self) -> tuple[float, float, float]:
        t0 = synchronize(self.device)
        loss = self.forward()
        t1 = synchronize(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t2 = synchronize(self.device)
        self.optimizer.step()
        t3 = synchronize(self.device)
        return t1 - t0, t2 - t1, t3 - t2

    def whole(self) -> float:
        t0 = synchronize(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        self.forward().backward()
        self.optimizer.step()
        return synchronize(self.device) - t0

    def gradient_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)


def input_images_per_s(cfg, batch: int, batches: int) -> float:
    """Images/s of the config's training data set through its loader, the model left out: what one rank's input
    pipeline delivers at most (its first batch, the workers' start-up, untimed)."""
    from trainers import data

    train_ds, _ = data.build_datasets(cfg.data, cfg.model.num_classes, cfg.train.seed)
    indices = [i % len(train_ds) for i in range(batch * (batches + 1))]
    loader = data.make_loader(train_ds, data.IndexBatches(indices, batch), cfg.data.loader_workers)
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in it:
        pass
    return batch * batches / (time.perf_counter() - start)


def measure(args) -> dict:
    cfg = load_config(args.config, args.scale, need_data=False)
    if args.threads:
        torch.set_num_threads(args.threads)
    phases = Phases(args, cfg)
    for k in range(args.warmup):
        phases.split()
        print(f"step-split: warm-up {k + 1}/{args.warmup}", end="\r", file=sys.stderr, flush=True)
    splits, wholes = [], []
    for k in range(args.steps):  # interleaved, so a drift in clocks or load touches both alike
        splits.append(phases.split())
        wholes.append(phases.whole())
        print(f"step-split: step {k + 1}/{args.steps}  ", end="\r", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    forward, backward, optimizer = (statistics.median(s[i] for s in splits) for i in range(3))
    whole = statistics.median(wholes)
    device = torch.cuda.get_device_name(phases.device) if phases.device.type == "cuda" else "cpu"
    return {"device": device, "torch": torch.__version__, "model": cfg.model.name, "batch": phases.batch,
            "precision": args.precision, "channels_last": args.channels_last, "steps": args.steps,
            "forward_s": forward, "backward_s": backward, "optimizer_s": optimizer, "whole_step_s": whole,
            "split_overhead": (forward + backward + optimizer) / whole - 1,
            "images_per_s": phases.batch / whole, "gradient_bytes": phases.gradient_bytes(),
            "threads": torch.get_num_threads(), "scale": args.scale, "config": str(args.config),
            "image_size": cfg.data.image_size, "machine": machine_identity(),
            "loader_workers": cfg.data.loader_workers, "data_kind": cfg.data.kind,
            "input_images_per_s": (input_images_per_s(cfg, phases.batch, args.input_batches) if args.input_batches
                                   else args.input_images_per_s)}


def main(argv=None) -> int:
    args = parse(argv)
    record = measure(args)
    print(f"{record['device']}, {record['model']} batch {record['batch']} {record['precision']}: forward "
          f"{1000 * record['forward_s']:.1f} ms, backward {1000 * record['backward_s']:.1f} ms, optimizer "
          f"{1000 * record['optimizer_s']:.1f} ms; whole step {1000 * record['whole_step_s']:.1f} ms "
          f"({record['images_per_s']:,.0f} img/s; the split adds {100 * record['split_overhead']:+.1f} %); "
          f"gradients {record['gradient_bytes'] / 1e6:.1f} MB"
          + (f"; input {record['input_images_per_s']:,.0f} img/s" if record["input_images_per_s"] else ""))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
        print(f"written: {args.json}")
    return 0
