"""The front door: python -m trainers {train, study, schedule, config, data} ...

It stands outside the floors (docs/architecture.md): each command belongs to the room that owns it -- training and
data here, the study to studies/, `data bench` to tools/ (the other tools: python -m tools).
"""
from __future__ import annotations

# what a user reads (--help); the docstring above is for whoever maintains this file
USER_HELP = ("Train one run, run a study of an experiment, print a run's learning-rate schedule or resolved config, "
             "or prepare data. `make help` lists the make targets; measurements of the suite itself: python -m tools.")

import argparse
import os
import sys
from pathlib import Path

from contract.config import SCALES, ConfigError, cpu_isa_env, load_config
from trainers.data import DataError
from contract.runfolder import WRITE_FAILURES, check_run_name
from tools import data_bench

DEFAULT_OUT = Path("results/runs")


def default_run_name(cfg) -> str:
    t = cfg.train
    return f"w{t.workers}-b{t.per_worker_batch}-{t.backend}-s{t.seed}"


def out_folder(text: str) -> Path:
    """--out as a folder; empty would quietly mean the current folder (the repository's root)."""
    if not text.strip():
        raise ConfigError("--out is empty; give the runs' folder (default results/runs)")
    return Path(text)


def pin_cpu_isa(cpu_isa: str, may_reexec: bool) -> None:
    """train.cpu_isa works through environment variables torch reads once: a trainer started without them starts
    itself again with them (same pid, same arguments). Called in-process (tests), the check in the loop refuses."""
    wanted = cpu_isa_env(cpu_isa)
    if may_reexec and any(os.environ.get(k) != v for k, v in wanted.items()):
        from trainers.compute import check_cpu_has

        check_cpu_has(cpu_isa)
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "trainers", *sys.argv[1:]], {**os.environ, **wanted})


def cmd_train(args) -> int:
    from trainers.loop import run_training

    if args.run is not None:
        check_run_name(args.run)  # a run folder stays inside the output folder
    cfg = load_config(args.config, args.scale, args.set)
    if cfg.train.framework == "tensorflow":  # its own trainer, in a process without torch: this one becomes it
        if not args.may_reexec:  # called from Python (a test): never TensorFlow in this process
            raise ConfigError("train.framework = 'tensorflow' trains in a process of its own: python -m trainers.tf")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "trainers.tf", *sys.argv[1:]])
    pin_cpu_isa(cfg.train.cpu_isa, args.may_reexec)
    run_dir = out_folder(args.out) / cfg.experiment / (args.run or default_run_name(cfg))
    return run_training(cfg, run_dir, resume=args.resume is not None, force=args.resume == "force")


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


def cmd_study(args) -> int:
    from studies.run import run_study

    return run_study(
        Path(args.experiment), scale=args.scale, launcher=args.launcher, cluster=args.cluster,
        dry_run=args.dry_run, quick=args.quick, out=None if args.out is None else out_folder(args.out),
        seeds=args.seeds,
        overrides=args.set,
        jobs=args.jobs, only=args.only, **({"gpus": args.gpus} if args.gpus is not None else {}),
    )


def config_args(sp) -> None:
    """The arguments every command that reads one experiment's config takes."""
    sp.add_argument("config", help="experiments/NN_name/config.toml (or its folder)")
    sp.add_argument("--scale", choices=SCALES, default="local", help="local (CPU miniature), gpu, node or thesis")
    sp.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a setting")


def add_train(sub) -> None:
    t = sub.add_parser("train", help="one training run (any launcher: none, torchrun, srun, mpirun, horovodrun)")
    config_args(t)
    # --run-name too: torchrun's own parser reads a bare --run as an abbreviation of its --run-path
    t.add_argument("--run", "--run-name", dest="run", help="run folder name (default: workers, batch, backend, seed)")
    t.add_argument("--out", default=str(DEFAULT_OUT), help="runs root (default results/runs)")
    t.add_argument("--resume", choices=["auto", "force"],
                   help="auto: continue from the run folder's checkpoint if any, with the threads, device, passes and "
                        "CPU kernels it started with; force: also when this attempt's must differ")
    t.set_defaults(func=cmd_train)


def add_study(sub) -> None:
    st = sub.add_parser("study", help="expand an experiment into its runs and launch them")
    st.add_argument("experiment", help="experiments/NN_name")
    st.add_argument("--scale", choices=SCALES, default="local")
    st.add_argument("--launcher", choices=["local", "slurm"], default="local")
    st.add_argument("--cluster", default="local", help="Slurm profile in slurm/clusters/ (with --launcher slurm)")
    st.add_argument("--dry-run", action="store_true", help="print the exact commands / sbatch lines and stop")
    st.add_argument("--quick", action="store_true", help="a smoke run of the study (minutes)")
    st.add_argument("--seeds", type=int, help="number of seeds (default: the study's own)")
    st.add_argument("--jobs", type=int, help="quality runs side by side, the cores split between them (default: on "
                    "the CPU one run per core; on a GPU and for throughput runs 1)")
    st.add_argument("--gpus", type=int, help="--scale node: the node's GPUs (default: those visible here, else "
                    "experiments/scales.toml [node.study] gpus, 8)")
    st.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    st.add_argument("--only", nargs="+", default=[], metavar="RUN",
                    help="only the runs of these names or patterns (e.g. 'w32-*' w1-s0); the rest are left alone")
    st.add_argument("--out", help="runs root (default results/runs; with --quick results/quick, so smoke runs never "
                    "share folders with full ones)")
    st.set_defaults(func=cmd_study)


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
    db = dsub.add_parser("bench", help="images/s of torchvision's ImageFolder pipeline and ours on DIR, interleaved")
    data_bench.add_arguments(db)
    db.set_defaults(func=data_bench.run)
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
    add_study(sub)
    add_data(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.may_reexec = argv is None  # the command line itself, not a call from Python
    try:
        return args.func(args)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in WRITE_FAILURES:
            raise
        # a full or read-only disk before a run could say so itself (a run that started marks itself failed)
        print(f"error: cannot write {e.filename or 'the output'}: {e.strerror}; free space or pick another --out",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
