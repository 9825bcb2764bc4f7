"""python -m trainers.tf train CONFIG (or RUN/config.json) [--scale S] [--out DIR] [--run NAME] [--set ...]

The TensorFlow trainer's entry, in a process of its own (never beside torch): the arguments of `python -m trainers
train`, which hands a `train.framework = "tensorflow"` run to it.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter, before it is imported
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf-keras (Keras 2), as trainers/tf/models.py's

from contract.cli import run_to_train  # noqa: E402
from contract.config import SCALES, ConfigError  # noqa: E402
from trainers.tf.available import skip_reason  # noqa: E402  (asks for TensorFlow's files, never imports it)


def default_name(cfg) -> str:
    t = cfg.train
    return f"w{t.workers}-b{t.per_worker_batch}-tf-{t.backend}-s{t.seed}"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainers.tf", description="The TensorFlow throughput benchmark.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="one benchmark run (any launcher: none, horovodrun, mpirun, srun, the study)")
    t.add_argument("config", help="experiments/NN_name/config.toml (or its folder), or a planned run's config.json")
    t.add_argument("--scale", choices=SCALES)
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    t.add_argument("--run", "--run-name", dest="run", help="run folder name (default: workers, batch, backend, seed)")
    t.add_argument("--out", help="runs root (default results/runs)")
    t.add_argument("--resume", choices=["auto", "force"], help="a benchmark has no checkpoint: run it again afresh")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        sets = args.set if args.config.endswith(".json") else [*args.set, "train.framework=tensorflow"]
        cfg, run_dir = run_to_train(args.config, args.scale, sets, args.out, args.run, default_name)
        if cfg.train.framework != "tensorflow":
            raise ConfigError(f"{args.config} is a {cfg.train.framework} run: train it with python -m trainers train")
        reason = skip_reason(cfg.train.backend)  # one line, as the study's, rather than an ImportError's traceback
        if reason:
            raise ConfigError(f"{args.config}: {reason}")
        from trainers.tf.bench import run_benchmark  # TensorFlow only now, after the arguments were checked

        return run_benchmark(cfg, run_dir, resume=args.resume is not None)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
