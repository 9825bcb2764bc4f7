"""`python -m trainers bench`: what the trainer's abstractions cost, measured in one run.

1. The trainer's images/s on synthetic data / a minimal hand-written PyTorch loop of the same model and batch
   (goal >= 0.95: the loop, meters, logs and backend cost nothing).
2. One step of `emulated` workers / one plain step of the same global batch (goal <= 1.15: emulating 32 GPUs costs
   little more than the batch itself).
Each figure is the best of `--repeats` interleaved measurements, so a busy machine biases neither side.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

from trainers.config import BenchConfig, Config, DataConfig, ModelConfig, TrainConfig
from trainers.data import synthetic_batch
from trainers.models import build_model
from trainers.runfolder import read_metrics


def hand_written_loop(model_name: str, batch: int, image_size: int, steps: int, warmup: int) -> float:
    """The plainest training loop there is: images/s over `steps` after `warmup` untimed ones."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=model_name, num_classes=1000))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    images, target = synthetic_batch(batch, image_size, 1000, seed=0)
    model.train()
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        loss = criterion(model(images), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
    return batch * steps / (time.perf_counter() - start)


def trainer_images_per_s(model_name: str, workers: int, per_worker: int, image_size: int, steps: int,
                         warmup: int) -> float:
    """The real training loop in benchmark mode (synthetic data, the single or emulated backend)."""
    from trainers.loop import run_training

    cfg = Config(
        model=ModelConfig(name=model_name, num_classes=1000),
        data=DataConfig(kind="synthetic", image_size=image_size, loader_workers=0),
        train=TrainConfig(epochs=1, per_worker_batch=per_worker, workers=workers, device="cpu", print_freq=10**6,
                          backend="emulated" if workers > 1 else "single", checkpoint=False),
        bench=BenchConfig(batches=steps, warmup_batches=warmup),
        experiment="bench",
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "bench"
        run_training(cfg, run_dir, resume=False, echo=False)
        record = read_metrics(run_dir).of("bench")[-1]
    return record["images_per_s_steady"]


def run_bench(args) -> int:
    torch.manual_seed(0)
    print(f"model {args.model}, {args.image_size} px, batch {args.batch}, {args.steps} timed steps after "
          f"{args.warmup}, {torch.get_num_threads()} threads, best of {args.repeats}", flush=True)
    hand, ours, plain, emulated = [], [], [], []
    per_worker = max(1, args.batch // args.workers)
    for r in range(args.repeats):
        hand.append(hand_written_loop(args.model, args.batch, args.image_size, args.steps, args.warmup))
        ours.append(trainer_images_per_s(args.model, 1, args.batch, args.image_size, args.steps, args.warmup))
        plain.append(ours[-1])
        emulated.append(trainer_images_per_s(args.model, args.workers, per_worker, args.image_size, args.steps,
                                             args.warmup))
        print(f"  repeat {r + 1}: hand-written {hand[-1]:.1f} img/s, trainer {ours[-1]:.1f} img/s, "
              f"emulated {args.workers}x{per_worker} {emulated[-1]:.1f} img/s", flush=True)
    ratio = max(ours) / max(hand)
    cost = max(plain) / max(emulated)
    print(f"trainer / hand-written loop: {ratio:.3f}  (goal >= 0.95)")
    print(f"emulated {args.workers} workers / one plain step of batch {per_worker * args.workers}: {cost:.3f} "
          f"(goal <= 1.15)")
    return 0
