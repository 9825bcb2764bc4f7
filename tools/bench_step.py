"""The local scale's training step, before and after the in-memory data path, timed in one run.

Experiment 5's local scale, the loop's whole training step cut to blocks of steps, at 1 worker x 4 and 32 emulated
workers x 4, reading the JPEGs one by one ("before"), the decoded data set in memory ("after"), and the latter with
a run's numerics settings ("after+V"). Blocks of every row are interleaved, so a busy machine slows every row alike;
the in-memory path's once-an-epoch augmentation is timed apart and charged per step as a run pays it.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from trainers import backends, data, loop
from contract.config import load_config
from trainers.checkpoint import TrainState
from trainers.setup import build_setup

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "experiments" / "05_linear_scaling"


# ---- A trainer whose epochs are blocks of steps, reading the data the old way or the new -----------------------------
class Cut:
    """The first `steps` batches of `loader`, taken when iterated (after the loop has moved its sampler on)."""

    def __init__(self, loader, steps: int):
        self.loader, self.steps = loader, steps

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.steps)


class BlockTrainer:
    """The loop's train_epoch cut to `steps` steps on a Setup; path "before" builds its per-file loader each call,
    as the trainer did each epoch before the in-memory data set. Each call trains on a copy of the Setup with its
    own loader (dataclasses.replace): the Setup itself is never written."""

    def __init__(self, setup):
        self.s, self.state = setup, TrainState()
        c = setup.cfg
        self.file_train, self.file_val = data.build_datasets(c.data, c.model.num_classes, c.train.seed,
                                                             decoded=False)

    def train_epoch(self, path: str, steps: int, epoch: int) -> None:
        s = self.s
        if path == "after":
            loader = s.train_batches.loader
        else:
            sampler = data.StepBatchSampler(len(self.file_train), s.backend.shards(), s.per_shard_batch, epoch,
                                            s.cfg.train.seed, shuffle=True)
            loader = data.make_loader(self.file_train, sampler, s.cfg.data.loader_workers)
        cut = data.DeviceBatches(Cut(loader, steps), s.backend.device)
        loop.train_epoch(dataclasses.replace(s, train_batches=cut), self.state, epoch)

    def validate(self, path: str) -> None:
        s = self.s
        if path == "before":
            batch = s.per_shard_batch * len(s.backend.shards())
            indices = data.val_indices(len(self.file_val), 1, 0, s.cfg.data.val_mode)
            per_file = data.make_loader(self.file_val, data.IndexBatches(indices, batch), 0)
            s = dataclasses.replace(s, val_loader=data.DeviceBatches(per_file, s.backend.device))
        loop.validate(s)


FEATURES = ("channels_last", "compile")  # train.<feature> = true: what a run with that setting does


def variant_features(variant: str) -> list[str]:
    """The numerics settings of a variant ("plain", or features joined by '+'); a ValueError names an unknown one."""
    features = [] if variant == "plain" else variant.split("+")
    unknown = [f for f in features if f not in FEATURES]
    if unknown or len(set(features)) != len(features):
        raise ValueError(f"--variants: {variant!r} is not one or more of {', '.join(FEATURES)} joined by '+'")
    return features


def make_trainer(workers: int, threads: int, run_dir: Path, variant: str) -> BlockTrainer:
    overrides = [f"train.workers={workers}", "train.checkpoint=false", f"train.threads={threads}"]
    overrides += [f"train.{feature}=true" for feature in variant_features(variant)]
    cfg = load_config(EXPERIMENT, "local", overrides)
    launch = backends.detect_launch()
    setup, _ = build_setup(cfg, run_dir / f"w{workers}-{variant}", backends.resolve(cfg, launch), launch,
                           resume=False, echo=False)
    return BlockTrainer(setup)


def time_block(trainer: BlockTrainer, path: str, steps: int, epoch: int) -> float:
    """Seconds per step of `steps` training steps through the real train_epoch."""
    start = time.perf_counter()
    trainer.train_epoch(path, steps, epoch)
    return (time.perf_counter() - start) / steps


def prepare_epoch(trainer: BlockTrainer, path: str, epoch: int) -> float:
    """Seconds the in-memory path spends once an epoch, augmenting all its samples (0 for the per-file path)."""
    dataset = trainer.s.train_ds
    if path != "after" or not getattr(dataset, "holds_epochs", False):
        return 0.0
    start = time.perf_counter()
    dataset.epoch_images(epoch)
    return time.perf_counter() - start


def time_compute(trainer: BlockTrainer, steps: int) -> float:
    """Seconds per loop.step on one fixed batch: forward, backward and SGD, nothing else."""
    s = trainer.s
    loader, _ = loop.batches(s, 0, 0)
    images, target, _ = next(iter(loader))
    s.model.train()
    start = time.perf_counter()
    for _ in range(steps):
        loop.step(s, images, target)
    return (time.perf_counter() - start) / steps


CONVOLUTION_OPS = ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::_slow_conv2d_forward",
                   "aten::_slow_conv2d_backward")


def profile_compute(trainer: BlockTrainer, steps: int, top: int = 8) -> dict:
    """Where loop.step's time goes, by operator: a step that is mostly convolution kernels gets faster only with
    faster kernels (or fewer, larger ones), not with less Python around them."""
    from torch.profiler import ProfilerActivity, profile

    time_compute(trainer, 2)  # warm: first calls create oneDNN primitives
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        time_compute(trainer, steps)
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ops)
    share = {e.key: e.self_cpu_time_total / total for e in ops}
    return {"steps": steps, "ms_per_step": total / 1e3 / steps,
            "convolution_share": sum(share.get(k, 0.0) for k in CONVOLUTION_OPS),
            "top": [{"op": e.key, "share": share[e.key], "calls_per_step": e.count / steps,
                     "us_per_call": e.self_cpu_time_total / e.count} for e in ops[:top]]}


def time_validation(trainer: BlockTrainer, path: str) -> float:
    start = time.perf_counter()
    trainer.validate(path)
    return time.perf_counter() - start


# ---- The benchmark ---------------------------------------------------------------------------------------------------
def rows_to_run(variants: list[str]) -> list[tuple[int, str, str]]:
    """(workers, data path, model variant) of every row, in the order they are interleaved."""
    rows = []
    for workers in (1, 32):
        rows += [(workers, "before", "plain"), (workers, "after", "plain")] + [(workers, "after", v) for v in variants]
    return rows


def run(args) -> dict:
    if args.interop:
        torch.set_num_interop_threads(args.interop)
    torch.set_num_threads(args.threads)
    variants = [v for v in args.variants.split(",") if v]
    rows = rows_to_run(variants)
    steps = {1: args.steps_1, 32: args.steps_32}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {}
        for workers, _, variant in rows:
            if (workers, variant) not in trainers:
                trainers[workers, variant] = make_trainer(workers, args.threads, Path(tmp), variant)
        first_step = {}
        for workers, path, variant in rows:  # warm-up block, untimed (compile happens here: timed apart)
            start = time.perf_counter()
            time_block(trainers[workers, variant], path, 1, 0)
            first_step[f"w{workers}-{path}-{variant}"] = time.perf_counter() - start
        blocks = {row: [] for row in rows}
        prep = {row: [] for row in rows}
        validation = {row: [] for row in rows}
        compute = {key: [] for key in trainers}
        for r in range(args.repeats):
            for row in rows:
                workers, path, variant = row
                trainer = trainers[workers, variant]
                prep[row].append(prepare_epoch(trainer, path, r + 1))
                blocks[row].append(time_block(trainer, path, steps[workers], r + 1))
                validation[row].append(time_validation(trainer, path))
            for (workers, variant), trainer in trainers.items():
                compute[workers, variant].append(time_compute(trainer, steps[workers]))
            print(f"  repeat {r + 1}/{args.repeats}: " + ", ".join(
                f"w{w} {p}{'' if v == 'plain' else '+' + v} {1e3 * blocks[w, p, v][-1]:.1f}" for w, p, v in rows),
                flush=True)
        steps_per_epoch = {key: len(trainer.s.train_sampler) for key, trainer in trainers.items()}
        profiles = {f"w{w}": profile_compute(trainers[w, "plain"], steps[w]) for w in (1, 32)} if args.profile else {}
        for trainer in reversed(list(trainers.values())):  # the signal handlers each trainer installed
            trainer.s.stop.restore()
            trainer.s.backend.close()
    table = []
    for row in rows:
        workers, path, variant = row
        step_ms, prep_s = 1e3 * statistics.median(blocks[row]), statistics.median(prep[row])
        n = steps_per_epoch[workers, variant]
        entry = {"workers": workers, "per_worker_batch": 4, "images_per_step": 4 * workers, "data": path,
                 "variant": variant, "steps_per_block": steps[workers], "steps_per_epoch": n,
                 "ms_per_step_median": step_ms, "ms_per_step_min": 1e3 * min(blocks[row]),
                 "ms_per_step_blocks": [1e3 * b for b in blocks[row]], "epoch_prep_s_median": prep_s,
                 "ms_per_step_in_a_run": step_ms + 1e3 * prep_s / n,
                 "compute_ms_median": 1e3 * statistics.median(compute[workers, variant]),
                 "first_step_s": first_step[f"w{workers}-{path}-{variant}"],
                 "validation_s_median": statistics.median(validation[row])}
        table.append(entry)
    return {"threads": args.threads, "interop_threads": torch.get_num_interop_threads(), "repeats": args.repeats,
            "cpu_count": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "torch": torch.__version__, "rows": table, "ratios": ratios(table), "estimate": estimate(table),
            **({"profile": profiles} if profiles else {})}


def _in_a_run(table, workers, path, variant="plain"):
    row = (workers, path, variant)
    return next(r["ms_per_step_in_a_run"] for r in table if (r["workers"], r["data"], r["variant"]) == row)


def ratios(table: list[dict]) -> dict:
    """Before over after, of the step as a run pays it (the epoch's augmentation included)."""
    out = {f"w{w}_before_over_after": _in_a_run(table, w, "before") / _in_a_run(table, w, "after") for w in (1, 32)}
    for r in table:
        if r["variant"] != "plain":
            w = r["workers"]
            out[f"w{w}_before_over_after+{r['variant']}"] = _in_a_run(table, w, "before") / r["ms_per_step_in_a_run"]
    return out


def estimate(table: list[dict]) -> dict:
    """Minutes for one run of experiment 5's local scale (2,000 steps an epoch at 1 worker x 4, 63 at 32 x 4) at 18
    and 72 epochs: training steps plus one validation an epoch."""
    steps = {1: 2000, 32: 63}
    out = {}
    for r in table:
        epoch_s = steps[r["workers"]] * r["ms_per_step_in_a_run"] / 1e3 + r["validation_s_median"]
        name = f"w{r['workers']}-{r['data']}" + ("" if r["variant"] == "plain" else f"+{r['variant']}")
        out[name] = {f"{e}_epochs_min": round(e * epoch_s / 60, 1) for e in (18, 72)}
    return out


def print_table(result: dict) -> None:
    print(f"threads {result['threads']}, interop {result['interop_threads']}, {result['repeats']} repeats, "
          f"load average {result['load_average_before'][0]:.1f} -> {result['load_average_after'][0]:.1f} "
          f"on {result['cpu_count']} cores")
    for r in result["rows"]:
        label = f"{r['workers']:>2} x 4 {r['data']:<6}" + ("" if r["variant"] == "plain" else f" +{r['variant']}")
        print(f"  {label:<30} {r['ms_per_step_in_a_run']:8.2f} ms/step in a run ({r['ms_per_step_median']:.2f} a block "
              f"step + {r['epoch_prep_s_median']:.2f} s an epoch; compute alone {r['compute_ms_median']:.2f}; "
              f"first step {r['first_step_s']:.1f} s, validation {r['validation_s_median']:.2f} s)")
    for k, v in result["ratios"].items():
        print(f"  {k}: {v:.2f}x")
    for k, v in result["estimate"].items():
        print(f"  estimate {k}: {v['18_epochs_min']} min at 18 epochs, {v['72_epochs_min']} min at 72")
    for name, prof in result.get("profile", {}).items():
        print(f"  profile {name} x 4 (compute alone, {prof['ms_per_step']:.2f} ms a step under the profiler): "
              f"convolutions {100 * prof['convolution_share']:.0f} %")
        for op in prof["top"]:
            print(f"    {100 * op['share']:5.1f} %  {op['op']:<40} {op['calls_per_step']:6.1f} calls a step, "
                  f"{op['us_per_call']:8.1f} us a call")


def run_copies(args) -> dict:
    """N copies of this benchmark side by side, each in its own process; their results in one document."""
    with tempfile.TemporaryDirectory() as tmp:
        outputs = [Path(tmp) / f"{i}.json" for i in range(args.copies)]
        procs = []
        for out in outputs:
            argv = [sys.executable, "-m", "tools", "bench-step", "--copies", "1", "--json", str(out)]
            for name in ("steps_1", "steps_32", "repeats", "threads", "interop", "variants"):
                argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
            argv += ["--profile"] if args.profile else []
            procs.append(subprocess.Popen(argv, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)}))
        codes = [p.wait() for p in procs]
        if any(codes):
            raise SystemExit(f"error: a copy of the benchmark failed (exit codes {codes})")
        return {"copies": [json.loads(out.read_text()) for out in outputs]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools bench-step", description=__doc__.split("\n")[0])
    p.add_argument("--steps-1", type=int, default=200, help="steps a block at 1 worker x 4")
    p.add_argument("--steps-32", type=int, default=12, help="steps a block at 32 workers x 4")
    p.add_argument("--repeats", type=int, default=5, help="interleaved blocks of every row")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the study runs one per core)")
    p.add_argument("--interop", type=int, default=0, help="torch inter-op threads (0: torch's default)")
    p.add_argument("--variants", default="channels_last",
                   help="numerics variants (both worker counts), comma-separated: channels_last, compile, or both "
                        "joined by '+'")
    p.add_argument("--copies", type=int, default=1, help="run this many copies side by side")
    p.add_argument("--profile", action="store_true", help="also profile the plain step's compute by operator")
    p.add_argument("--json", default="results/bench_step.json", help="write the results here ('' for none)")
    args = p.parse_args(argv)
    try:
        for variant in (v for v in args.variants.split(",") if v):
            variant_features(variant)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if min(args.steps_1, args.steps_32, args.repeats, args.threads, args.copies) < 1:
        print("error: steps, repeats, threads and copies must be >= 1", file=sys.stderr)
        return 2
    command = "python -m tools bench-step " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.copies > 1:
        result = run_copies(args)
        for i, copy in enumerate(result["copies"]):
            print(f"copy {i + 1} of {args.copies}:")
            print_table(copy)
    else:
        result = run(args)
        print_table(result)
    result["command"] = command.strip()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
