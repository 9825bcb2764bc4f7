"""The trainer's command line: python -m trainers {train, schedule, config, data} ...

What a launcher starts on every rank (torchrun, srun, mpirun, horovodrun); the suite's front door is python -m
suite, which calls main(argv) here. Nothing here imports torch before a run's config is read, so a call does what
restarting the process would: a pinned CPU instruction set goes into the environment before torch loads (torch
reads it once, then), and a TensorFlow run is handed to the TensorFlow trainer in this process, which never
loads torch. A caller that already holds torch (a test) is refused both in one line.
"""
from __future__ import annotations

# what a user reads (--help); the docstring above is for whoever maintains this file
USER_HELP = ("Train one run, print a run's learning-rate schedule or resolved config, or prepare data. Studies, the "
             "report and the tools: python -m suite; `make help` lists the make targets.")

import argparse
import sys
from pathlib import Path

from contract.cli import one_line_errors, run_to_train
from contract.config import SCALES, ConfigError, DataError, load_config  # not trainers.data's: it imports torch
from trainers.cpu_isa import pin_cpu_isa


def default_run_name(cfg) -> str:
    t = cfg.train
    return f"w{t.workers}-b{t.per_worker_batch}-{t.backend}-s{t.seed}"


def cmd_train(args) -> int:
    cfg, run_dir = run_to_train(args.config, args.scale, args.set, args.out, args.run, default_run_name)
    if cfg.train.framework == "tensorflow":
        return train_tensorflow(args.argv)
    pin_cpu_isa(cfg.train.cpu_isa)  # before the import below loads torch
    from trainers.run import run_training

    return run_training(cfg, run_dir, resume=args.resume is not None, force=args.resume == "force")


def train_tensorflow(argv: list[str]) -> int:
    """A TensorFlow run: the TensorFlow trainer called with these same arguments, in this process while it holds
    no torch (importing triton after TensorFlow segfaults, so the two never share a process)."""
    if "torch" in sys.modules:  # a caller that trained before (a test): TensorFlow must not load beside it
        raise ConfigError("train.framework = 'tensorflow' trains in a process without torch, and this one holds "
                          "it: start it as python -m trainers train (or python -m suite train)")
    from trainers.tf.__main__ import main as train_tf

    return train_tf(argv)


def cmd_schedule(args) -> int:
    from contract.lr import schedule

    cfg = load_config(args.config, args.scale, args.set, need_data=False)  # printing a schedule reads no data
    print("epoch,lr")
    for epoch, lr in enumerate(schedule(cfg.lr_policy(), cfg.train.epochs)):
        print(f"{epoch},{lr:.6g}")
    return 0


def cmd_config(args) -> int:
    from trainers.show_config import show

    cfg = load_config(args.config, args.scale, args.set, need_data=False)
    if cfg.data.kind == "imagefolder" and (not cfg.data.path or "$" in cfg.data.path):
        print(f"note: data.path is {cfg.data.path or 'empty'}: set it (or IMAGENET_DIR) before training",
              file=sys.stderr)
    sys.stdout.write(show(cfg, args.json))
    return 0


def cmd_data(args) -> int:
    from trainers.data import generate_dataset

    path = generate_dataset(
        Path(args.out), classes=args.classes, per_class=args.per_class, val_per_class=args.val_per_class,
        image_size=args.image_size, seed=args.seed,
    )
    print(path)
    return 0


def cmd_data_imagenet(args) -> int:
    from trainers.data.imagenet import main as prepare_imagenet

    return prepare_imagenet(args)


def config_args(sp) -> None:
    """The arguments every command that reads one experiment's config takes."""
    sp.add_argument("config", help="experiments/NN_name/config.toml (or its folder)")
    sp.add_argument("--scale", choices=SCALES, default="local", help="local (CPU miniature), gpu, node or thesis")
    sp.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a setting")


def add_train(sub) -> None:
    t = sub.add_parser("train", help="one training run (any launcher: none, torchrun, srun, mpirun, horovodrun)")
    t.add_argument("config", help="experiments/NN_name/config.toml (or its folder), or a planned run's config.json "
                                  "(a study writes one in each run's folder: the run exactly as planned, trained there)")
    t.add_argument("--scale", choices=SCALES, help="local (CPU miniature, the default), gpu, node or thesis")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a setting (with a config.json: only data.path, train.init_method)")
    # --run-name too: torchrun's own parser reads a bare --run as an abbreviation of its --run-path
    t.add_argument("--run", "--run-name", dest="run", help="run folder name (default: workers, batch, backend, seed)")
    t.add_argument("--out", help="runs root (default results/runs)")
    t.add_argument("--resume", choices=["auto", "force"],
                   help="auto: continue from the run folder's checkpoint if any, with the threads, device, passes and "
                        "CPU kernels it started with; force: also when this attempt's must differ")
    t.set_defaults(func=cmd_train)


def add_data(sub) -> None:
    d = sub.add_parser("data", help="the generated dataset, ILSVRC-2012 preparation, the data-path benchmark")
    dsub = d.add_subparsers(dest="data_command", required=True)
    g = dsub.add_parser("generate", help="write class folders of JPEGs, deterministic from a seed")
    g.add_argument("--out", required=True)
    g.add_argument("--classes", type=int, default=100)
    g.add_argument("--per-class", type=int, default=200)
    g.add_argument("--val-per-class", type=int, default=50)
    g.add_argument("--image-size", type=int, default=32)
    g.add_argument("--seed", type=int, default=0)
    g.set_defaults(func=cmd_data)
    im = dsub.add_parser("imagenet", help="ILSVRC-2012 tarballs -> DIR/train/<wnid>/, DIR/val/<wnid>/ (+ a tar)")
    im.add_argument("--train-tar", required=True, help="ILSVRC2012_img_train.tar")
    im.add_argument("--val-tar", required=True, help="ILSVRC2012_img_val.tar")
    im.add_argument("--devkit", required=True, help="ILSVRC2012_devkit_t12.tar.gz")
    im.add_argument("--out", required=True, help="the data set folder (data.path)")
    im.add_argument("--resize", type=int, help="also write DIR-<N>/ with every image's shorter side N (e.g. 256)")
    im.add_argument("--no-verify", action="store_true", help="skip the archives' published MD5 checks")
    im.add_argument("--no-tar", action="store_true", help="don't write the staging tar")
    im.set_defaults(func=cmd_data_imagenet)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainers", description=USER_HELP)
    sub = p.add_subparsers(dest="command", required=True)
    add_train(sub)
    s = sub.add_parser("schedule", help="print the learning rate at the start of each epoch as CSV")
    config_args(s)
    s.set_defaults(func=cmd_schedule)
    c = sub.add_parser("config", help="print the merged, resolved config a run would get (TOML, or --json)")
    config_args(c)
    c.add_argument("--json", action="store_true", help="the config.json a run saves, `resolved` included")
    c.set_defaults(func=cmd_config)
    add_data(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    args.argv = argv  # what a TensorFlow run hands on to its trainer, as given
    return one_line_errors(lambda: args.func(args), (DataError,))


if __name__ == "__main__":
    from trainers.launch import end_process

    end_process(main())
