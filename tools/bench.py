"""`python -m tools bench`: what the trainer's abstractions cost, measured in one run.

The trainer's images/s against a hand-written loop of the same model and batch (goal >= 0.95), and one step of
`emulated` workers against plain steps of the same images (goal <= 1.15 on the CPU, 1.10 on a GPU). On the CPU each
is the best of `--repeats` interleaved measurements, so a busy machine biases neither side; on a CUDA GPU the rows
are ResNet-50's precisions, layouts and wrappers, its JSON rewritten after every row (a short lease keeps its rows).
A GPT preset (`--model gpt_local`) is measured on the CPU in tokens/s: the trainer against a nanoGPT-style loop.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

from trainers import compute
from contract.config import BenchConfig, Config, DataConfig, LrConfig, ModelConfig, OptimConfig, TrainConfig
from trainers.data import synthetic_batch
from trainers.models import build_model
from contract import machine
from contract.reader import read_metrics
from workloads.gpt.sizes import PRESETS as GPT_PRESETS


def hand_written_loop(model_name: str, batch: int, image_size: int, steps: int, warmup: int) -> float:
    """The plainest training loop there is: images/s over `steps` after `warmup` untimed ones."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=model_name, num_classes=1000))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    images, target = synthetic_batch(batch, image_size, 1000, seed=0)
    return batch * steps / seconds_of_plain_steps(model, optimizer, images, target, steps, warmup)


def seconds_of_plain_steps(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
                           target: torch.Tensor, steps: int, warmup: int) -> float:
    """The hand-written loops' step -- forward, cross-entropy, backward, update -- timed over `steps` after `warmup`
    untimed ones, on one fixed batch (the trainer's bench mode also repeats one synthetic batch)."""
    criterion = nn.CrossEntropyLoss()
    model.train()
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        loss = criterion(model(inputs), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
    return time.perf_counter() - start


def trainer_images_per_s(model_name: str, workers: int, per_worker: int, image_size: int, steps: int,
                         warmup: int, device: str = "cpu", backend: str = "", **settings) -> float:
    """The real training loop in benchmark mode (synthetic data; the single, emulated or ddp backend)."""
    if settings.get("compile"):
        torch._dynamo.reset()  # a fresh model each time: no stale graphs, no recompile limit reached
    cfg = Config(
        model=ModelConfig(name=model_name, num_classes=1000),
        data=DataConfig(kind="synthetic", image_size=image_size, loader_workers=0),
        train=TrainConfig(epochs=1, per_worker_batch=per_worker, workers=workers, device=device, print_freq=10**6,
                          backend=backend or ("emulated" if workers > 1 else "single"), checkpoint=False, **settings),
        bench=BenchConfig(batches=steps, warmup_batches=warmup),
        experiment="bench",
    )
    return trainer_bench_record(cfg)["images_per_s_steady"]


def trainer_bench_record(cfg: Config) -> dict:
    """The bench record (images/s, tokens/s, ...) of one run of the real trainer on `cfg`, in a folder thrown away."""
    from trainers.run import run_training

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "bench"
        run_training(cfg, run_dir, resume=False, echo=False)
        return read_metrics(run_dir).of("bench")[-1]


def run_bench(args) -> int:
    if args.model in GPT_PRESETS:
        return run_gpt_bench(args)
    if args.device != "cpu" and torch.cuda.is_available():
        return run_gpu_bench(args)
    torch.manual_seed(0)
    print(f"model {args.model}, {args.image_size} px, batch {args.batch}, {args.steps} timed steps after "
          f"{args.warmup}, {torch.get_num_threads()} threads, best of {args.repeats}", flush=True)
    hand, ours, emulated = [], [], []
    per_worker = max(1, args.batch // args.workers)
    for r in range(args.repeats):
        hand.append(hand_written_loop(args.model, args.batch, args.image_size, args.steps, args.warmup))
        ours.append(trainer_images_per_s(args.model, 1, args.batch, args.image_size, args.steps, args.warmup))
        emulated.append(trainer_images_per_s(args.model, args.workers, per_worker, args.image_size, args.steps,
                                             args.warmup))
        print(f"  repeat {r + 1}: hand-written {hand[-1]:.1f} img/s, trainer {ours[-1]:.1f} img/s, "
              f"emulated {args.workers}x{per_worker} {emulated[-1]:.1f} img/s", flush=True)
    ratio = max(ours) / max(hand)
    cost = max(ours) / max(emulated)
    print(f"trainer / hand-written loop: {ratio:.3f}  (goal >= 0.95)")
    print(f"emulated {args.workers} workers / one plain step of batch {per_worker * args.workers}: {cost:.3f} "
          f"(goal <= 1.15)")
    return 0


# ---- A GPT preset on the CPU: the trainer's tokens/s against a nanoGPT-style loop ------------------------------------
# nanoGPT's optimizer (experiment 15's): AdamW, decay 0.1 on the matrices only, betas (0.9, 0.95), its rate of 6e-4
GPT_OPTIM = OptimConfig(name="adamw", weight_decay=0.1, beta1=0.9, beta2=0.95)
GPT_LR = 6e-4


def gpt_config(model_name: str, batch: int, steps: int, warmup: int) -> Config:
    """The trainer's bench run of a GPT preset: 1 process on the CPU, the local scale, one fixed synthetic batch."""
    return Config(
        model=ModelConfig(name=model_name),
        data=DataConfig(kind="synthetic", loader_workers=0),
        train=TrainConfig(epochs=1, per_worker_batch=batch, workers=1, device="cpu", print_freq=10**6,
                          backend="single", checkpoint=False),
        optim=GPT_OPTIM,
        lr=LrConfig(base=GPT_LR, base_batch=batch, decay="none"),  # the step's rate is GPT_LR itself
        bench=BenchConfig(batches=steps, warmup_batches=warmup),
        experiment="bench", scale="local",
    )


def hand_written_gpt_loop(cfg: Config, steps: int, warmup: int) -> float:
    """nanoGPT's training step by hand on the trainer's batch (the workload's synthetic windows): tokens/s."""
    from workloads.gpt.build import synthetic_batch as gpt_batch
    from workloads.gpt.model import GPT

    torch.manual_seed(0)
    model = GPT(GPT_PRESETS[cfg.model.name])
    params = list(model.parameters())  # the tied embedding and head: one tensor, listed once
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.optim.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]  # nanoGPT's configure_optimizers
    # foreach, as the trainer's: the ratio is then the trainer's abstractions, not a choice of AdamW's kernels
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr.base, betas=(cfg.optim.beta1, cfg.optim.beta2), foreach=True)
    tokens, targets = gpt_batch(cfg, cfg.train.per_worker_batch, torch.device("cpu"))
    # the model's logits come flattened, (batch * context, vocab), as the targets: nanoGPT's view(-1) done inside
    return tokens.numel() * steps / seconds_of_plain_steps(model, optimizer, tokens, targets, steps, warmup)


def gpt_rates(cfg: Config, repeats: int) -> dict:
    """`repeats` interleaved measurements of each side, tokens/s; the ratio of the bests (a busy machine slows some
    measurements of either side, rarely the best of each)."""
    steps, warmup = cfg.bench.batches, cfg.bench.warmup_batches
    hand, ours = [], []
    for r in range(repeats):
        hand.append(hand_written_gpt_loop(cfg, steps, warmup))
        ours.append(trainer_bench_record(cfg)["tokens_per_s"])
        print(f"  repeat {r + 1}: hand-written {hand[-1]:.0f} tokens/s, trainer {ours[-1]:.0f} tokens/s", flush=True)
    return {"hand_written_tokens_per_s": hand, "trainer_tokens_per_s": ours, "ratio": max(ours) / max(hand)}


GPT_JSON = Path(__file__).resolve().parents[1] / "results" / "bench_gpt.json"


def run_gpt_bench(args) -> int:
    context = GPT_PRESETS[args.model].context
    print(f"model {args.model} (AdamW), batch {args.batch} x {context} tokens, {args.steps} timed steps after "
          f"{args.warmup}, 1 process on the CPU, {torch.get_num_threads()} threads, best of {args.repeats}", flush=True)
    load_before = os.getloadavg()
    rates = gpt_rates(gpt_config(args.model, args.batch, args.steps, args.warmup), args.repeats)
    print(f"best: hand-written {max(rates['hand_written_tokens_per_s']):.0f} tokens/s, trainer "
          f"{max(rates['trainer_tokens_per_s']):.0f} tokens/s")
    print(f"trainer / hand-written loop: {rates['ratio']:.3f}  (goal >= 0.95)")
    out = Path(args.json) if args.json else GPT_JSON
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(gpt_bench_document(args, rates, load_before), indent=1) + "\n")
    print(f"written to {out}")
    return 0


def gpt_bench_document(args, rates: dict, load_before: tuple) -> dict:
    """The measurement with what it ran on: the load averages around it say whether the machine was its own."""
    options = " ".join(f"--{name} {getattr(args, name)}" for name in ("model", "batch", "steps", "warmup", "repeats"))
    return {"command": f"python -m tools bench {options}",
            "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine.this_machine(torch.backends.cpu.get_cpu_capability(), None),
            "threads": torch.get_num_threads(), "load_average_before": load_before,
            "load_average_after": os.getloadavg(), "goal": ">= 0.95", **rates}


# ---- On a GPU: the trainer against the hand-written limit, per precision, layout, compile and wrapper ----------------
GPU_MODEL, GPU_IMAGE_SIZE, GPU_BATCHES = "resnet50", 224, (32, 128, 256)
GPU_STEPS, GPU_WARMUP = 50, 15  # compiled variants compile during the warm-up
GPU_VARIANTS = {
    "fp32": {},
    "bf16_channels_last": {"precision": "bf16", "channels_last": True},
    "compiled": {"precision": "bf16", "channels_last": True, "compile": True},
}
EMULATED_WORKERS, EMULATED_BATCH, EMULATED_STEPS = 32, 128, 4


def hand_written_gpu_loop(batch: int, steps: int, warmup: int, wrapper: str, device: str = "cuda",
                          precision: str = "fp32", channels_last: bool = False, compile: bool = False) -> float:
    """The plainest loop of the same model, batch, precision, layout and wrapper: images/s, one sync at the end."""
    import torch.distributed as dist

    from trainers.backends import free_port

    settings = TrainConfig(precision=precision, channels_last=channels_last, compile=compile)
    compute.configure_torch(settings)  # the same TF32 / cuDNN switches as the trainer's
    torch.manual_seed(0)
    device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda device: None)
    model = build_model(ModelConfig(name=GPU_MODEL, num_classes=1000))
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    if wrapper == "ddp":
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
        from trainers.backends.torch_dist import buffer_sync

        ids = [device.index] if device.index is not None else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                                    **buffer_sync(False))
    if compile:
        torch._dynamo.reset()
        model = torch.compile(model)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    images, target = synthetic_batch(batch, GPU_IMAGE_SIZE, 1000, seed=0, device=device)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    autocast = compute.Compute(settings, device).autocast
    model.train()
    try:
        for i in range(warmup + steps):
            if i == warmup:
                sync(device)
                start = time.perf_counter()
            with autocast():
                loss = criterion(model(images), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        loss.item()
        sync(device)
        return batch * steps / (time.perf_counter() - start)
    finally:
        if wrapper == "ddp":
            dist.destroy_process_group()


def chosen_variants(names: str | None) -> dict[str, dict]:
    """GPU_VARIANTS, or the comma-separated `names` of them (one clear error for an unknown one)."""
    if not names:
        return dict(GPU_VARIANTS)
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in GPU_VARIANTS]
    if unknown:
        raise SystemExit(f"bench: unknown variant {', '.join(unknown)}; choose from {', '.join(GPU_VARIANTS)}")
    return {n: GPU_VARIANTS[n] for n in chosen}


def gpu_row(device: str, variant: str, settings: dict, batch: int, wrapper: str) -> dict:
    hand = hand_written_gpu_loop(batch, GPU_STEPS, GPU_WARMUP, wrapper, device, **settings)
    ours = trainer_images_per_s(GPU_MODEL, 1, batch, GPU_IMAGE_SIZE, GPU_STEPS, GPU_WARMUP,
                                device=device, backend=wrapper, **settings)
    print(f"  {variant:>18} {wrapper:>6} batch {batch:>3}: hand-written {hand:8.1f} img/s, trainer "
          f"{ours:8.1f} img/s, ratio {ours / hand:.3f}", flush=True)
    return {"variant": variant, "wrapper": wrapper, "per_gpu_batch": batch,
            "hand_written_images_per_s": hand, "trainer_images_per_s": ours, "ratio": ours / hand}


def emulated_cost(device: str) -> dict:
    """One step of 32 emulated workers x 128 against 32 plain steps of 128 (fp32; passes as auto picks them)."""
    plain = trainer_images_per_s(GPU_MODEL, 1, EMULATED_BATCH, GPU_IMAGE_SIZE, GPU_STEPS, GPU_WARMUP, device=device)
    emulated = trainer_images_per_s(GPU_MODEL, EMULATED_WORKERS, EMULATED_BATCH, GPU_IMAGE_SIZE, EMULATED_STEPS, 1,
                                    device=device)
    cost = plain / emulated  # (time of one emulated step) / (time of 32 plain steps): the same images
    print(f"  emulated {EMULATED_WORKERS} x {EMULATED_BATCH}: {emulated:.1f} img/s; plain batch {EMULATED_BATCH}: "
          f"{plain:.1f} img/s; one emulated step / {EMULATED_WORKERS} plain steps = {cost:.3f} (goal <= 1.10)",
          flush=True)
    return {"workers": EMULATED_WORKERS, "per_worker_batch": EMULATED_BATCH, "emulated_images_per_s": emulated,
            "plain_images_per_s": plain, "step_cost_ratio": cost}


def run_gpu_bench(args, device: str = "cuda") -> int:
    """The GPU bench; `device="cpu"` runs the same plumbing on the CPU (its tests, with a tiny model)."""
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    variants = chosen_variants(args.variants)
    batches = args.batches or GPU_BATCHES
    print(f"GPU bench on {name}: {GPU_MODEL} {GPU_IMAGE_SIZE} px, synthetic data, {GPU_STEPS} timed steps after "
          f"{GPU_WARMUP}", flush=True)
    result = {
        "device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": GPU_MODEL, "image_size": GPU_IMAGE_SIZE, "steps": GPU_STEPS, "warmup": GPU_WARMUP,
        "variants": variants, "rows": [], "emulated": None, "worst_ratio": None, "complete": False,
    }
    out = Path(args.json or "results/bench_gpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        if result["rows"]:
            result["worst_ratio"] = min(row["ratio"] for row in result["rows"])
        out.write_text(json.dumps(result, indent=2) + "\n")

    for variant, settings in variants.items():
        for batch in batches:
            for wrapper in ("single", "ddp"):
                result["rows"].append(gpu_row(device, variant, settings, batch, wrapper))
                save()
    if not args.skip_emulated:
        result["emulated"] = emulated_cost(device)
    result["complete"] = True
    save()
    print(f"trainer / hand-written loop, worst row: {result['worst_ratio']:.3f} (goal >= 0.95); wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools bench", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="resnet50", help="a ResNet, or a GPT preset (gpt_local: tokens/s on the CPU)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--workers", type=int, default=32, help="emulated workers for the emulation-cost figure")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", choices=("auto", "cpu"), default="auto",
                   help="auto: with a CUDA GPU, the GPU bench (ResNet-50, precisions, wrappers); cpu: this machine's CPU")
    p.add_argument("--json", help="the output: the GPU bench's (default results/bench_gpu.json) or a GPT preset's "
                                  "(default results/bench_gpt.json)")
    p.add_argument("--variants", help="the GPU bench's rows, comma-separated: fp32, bf16_channels_last, compiled "
                                      "(default all)")
    p.add_argument("--batches", type=lambda text: tuple(int(b) for b in text.split(",")),
                   help="the GPU bench's per-GPU batches, comma-separated (default 32,128,256)")
    p.add_argument("--skip-emulated", action="store_true", help="the GPU bench without the emulated 32 x 128 step")
    return run_bench(p.parse_args(argv))
