"""A few AdamW steps of a small GPT through a backend, as the trainer drives one: a test's real processes.

    torchrun --nproc-per-node P -m tests.fsdp_steps --backend fsdp --steps 4 --out result.json
        [--save-at 2 --checkpoint ck.pt] [--resume ck.pt]

Every step trains one global batch of GLOBAL_BATCH sequences drawn from the step's own seed (so a resumed run reads
what an uninterrupted one read), split into contiguous equal slices over the ranks. Rank 0 writes the global mean
loss of every step and the final weights gathered whole (backend.checkpoint_state) to --out as JSON. --save-at k:
after step k rank 0 saves checkpoint_state's dicts to --checkpoint, as the trainer's checkpoint does; --resume: every
rank reads one and goes on from its step.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from contract.config import build
from trainers import backends
from workloads.gpt.model import GPT
from workloads.gpt.sizes import GPTSizes

SIZES = GPTSizes(layers=2, heads=2, width=32, context=16, vocab=64)
GLOBAL_BATCH = 8
SEED = 5


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch: GLOBAL_BATCH windows of SIZES.context tokens and their next tokens."""
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, SIZES.vocab, (GLOBAL_BATCH, SIZES.context + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def train(b: backends.Backend, model, optimizer, first: int, steps: int, args) -> list[float]:
    per_rank = GLOBAL_BATCH // b.world_size
    rows = slice(b.rank * per_rank, (b.rank + 1) * per_rank)
    losses = []
    for step in range(first, steps):
        x, y = (t[rows].to(b.device) for t in batch(step))
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y.reshape(-1))
        loss.backward()
        optimizer.step()
        total = b.all_reduce_sum(loss.detach() * per_rank)  # the global batch's mean loss, as the loop records it
        losses.append(total.item() / GLOBAL_BATCH)
        if step + 1 == args.save_at:
            save(b, model, optimizer, step + 1, args.checkpoint)
    return losses


def save(b: backends.Backend, model, optimizer, step: int, path: Path) -> None:
    model_state, optimizer_state = b.checkpoint_state(model, optimizer)  # every rank: the gathers are collectives
    if b.is_main():
        torch.save({"model": model_state, "optimizer": optimizer_state, "step": step}, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="fsdp")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--resume", type=Path)
    args = parser.parse_args()
    launch = backends.detect_launch()
    cfg = build({"train": {"backend": args.backend, "workers": launch.world_size, "device": "cpu", "threads": 1},
                 "data": {"kind": "synthetic"}}, "fsdp_steps", "local")
    b = backends.create(cfg, launch, backends.resolve(cfg, launch))
    torch.manual_seed(SEED)
    model = b.wrap_model(GPT(SIZES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    first = 0
    if args.resume:
        saved = torch.load(args.resume, weights_only=True)
        b.load_checkpoint_state(model, optimizer, saved["model"], saved["optimizer"])
        first = saved["step"]
    losses = train(b, model, optimizer, first, args.steps, args)
    weights, _ = b.checkpoint_state(model, optimizer)
    if b.is_main():
        args.out.write_text(json.dumps({"losses": losses, "first_step": first, "backend": b.name,
                                        "weights": {k: v.flatten().tolist() for k, v in weights.items()}}))
    b.close()


if __name__ == "__main__":
    from trainers.launch import end_process

    main()
    end_process(0)
