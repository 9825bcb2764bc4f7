"""Command line: python -m trainers {train, study, schedule, config, data, bench, noise-scale} ..."""
from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from trainers.config import SCALES, ConfigError, cpu_isa_env, load_config
from trainers.data import DataError
from trainers.runfolder import check_run_name

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
    pin_cpu_isa(cfg.train.cpu_isa, args.may_reexec)
    run_dir = out_folder(args.out) / cfg.experiment / (args.run or default_run_name(cfg))
    return run_training(cfg, run_dir, resume=args.resume is not None, force=args.resume == "force")


def cmd_schedule(args) -> int:
    from trainers.lr import schedule

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


def cmd_data_bench(args) -> int:
    from trainers.data.bench import main as data_bench

    return data_bench(args)


def cmd_data_imagenet(args) -> int:
    from trainers.data.imagenet import main as prepare_imagenet

    return prepare_imagenet(args)


def cmd_study(args) -> int:
    from trainers.study import run_study

    return run_study(
        Path(args.experiment), scale=args.scale, launcher=args.launcher, cluster=args.cluster,
        dry_run=args.dry_run, quick=args.quick, out=None if args.out is None else out_folder(args.out),
        seeds=args.seeds,
        overrides=args.set,
        jobs=args.jobs, only=args.only,
    )


def cmd_bench(args) -> int:
    from trainers.bench import run_bench

    return run_bench(args)


def cmd_noise_scale(args) -> int:
    from trainers.noise_scale import main as noise_scale

    return noise_scale(args.runs, args.workers, args.groups, args.init, args.seed, args.json)


def cmd_gpu_check(args) -> int:
    from trainers.gpu_check import main as gpu_check

    return gpu_check(args.data, args.out)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainers", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def config_args(sp):
        sp.add_argument("config", help="experiments/NN_name/config.toml (or its folder)")
        sp.add_argument("--scale", choices=SCALES, default="local", help="local (CPU miniature), gpu or thesis")
        sp.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a setting")

    t = sub.add_parser("train", help="one training run (any launcher: none, torchrun, srun, mpirun, horovodrun)")
    config_args(t)
    # --run-name too: torchrun's own parser reads a bare --run as an abbreviation of its --run-path
    t.add_argument("--run", "--run-name", dest="run", help="run folder name (default: workers, batch, backend, seed)")
    t.add_argument("--out", default=str(DEFAULT_OUT), help="runs root (default results/runs)")
    t.add_argument("--resume", choices=["auto", "force"],
                   help="auto: continue from the run folder's checkpoint if any, with the threads, device, passes and "
                        "CPU kernels it started with; force: also when this attempt's must differ")
    t.set_defaults(func=cmd_train)

    s = sub.add_parser("schedule", help="print the learning rate at the start of each epoch as CSV")
    config_args(s)
    s.set_defaults(func=cmd_schedule)

    c = sub.add_parser("config", help="print the merged, resolved config a run would get (TOML, or --json)")
    config_args(c)
    c.add_argument("--json", action="store_true", help="the config.json a run saves, `resolved` included")
    c.set_defaults(func=cmd_config)

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
    st.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    st.add_argument("--only", nargs="+", default=[], metavar="RUN",
                    help="only the runs of these names or patterns (e.g. 'w32-*' w1-s0); the rest are left alone")
    st.add_argument("--out", help="runs root (default results/runs; with --quick results/quick, so smoke runs never "
                    "share folders with full ones)")
    st.set_defaults(func=cmd_study)

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
    db.add_argument("dir", help="an ImageFolder (DIR/train/<class>/*.jpg, or DIR/<class>/*.jpg)")
    db.add_argument("--workers", type=int, default=0, help="loader worker processes (0: the main process only)")
    db.add_argument("--decoder", choices=["cpu", "gpu", "pil"], default="cpu", help="our decoder (data.decoder)")
    db.add_argument("--batch", type=int, default=32)
    db.add_argument("--rounds", type=int, default=3, help="timed passes of each pipeline, alternating")
    db.add_argument("--threads", type=int, default=1, help="torch threads (1: images/s per core)")
    db.add_argument("--json", action="store_true", help="print the result as JSON")
    db.set_defaults(func=cmd_data_bench)
    im = dsub.add_parser("imagenet", help="ILSVRC-2012 tarballs -> DIR/train/<wnid>/, DIR/val/<wnid>/ (+ a tar)")
    im.add_argument("--train-tar", required=True, help="ILSVRC2012_img_train.tar")
    im.add_argument("--val-tar", required=True, help="ILSVRC2012_img_val.tar")
    im.add_argument("--devkit", required=True, help="ILSVRC2012_devkit_t12.tar.gz")
    im.add_argument("--out", required=True, help="the data set folder (data.path)")
    im.add_argument("--resize", type=int, help="also write DIR-<N>/ with every image's shorter side N (e.g. 256)")
    im.add_argument("--no-verify", action="store_true", help="skip the archives' published MD5 checks")
    im.add_argument("--no-tar", action="store_true", help="don't write the staging tar")
    im.set_defaults(func=cmd_data_imagenet)

    b = sub.add_parser("bench", help="the trainer's overhead: vs a hand-written loop, and emulated workers' cost")
    b.add_argument("--model", default="resnet50")
    b.add_argument("--batch", type=int, default=32)
    b.add_argument("--image-size", type=int, default=224)
    b.add_argument("--steps", type=int, default=20)
    b.add_argument("--warmup", type=int, default=3)
    b.add_argument("--workers", type=int, default=32, help="emulated workers for the emulation-cost figure")
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--device", choices=("auto", "cpu"), default="auto",
                   help="auto: with a CUDA GPU, the GPU bench (ResNet-50, precisions, wrappers); cpu: this machine's CPU")
    b.add_argument("--json", help="the GPU bench's output (default results/bench_gpu.json)")
    b.add_argument("--variants", help="the GPU bench's rows, comma-separated: fp32, bf16_channels_last, compiled "
                                      "(default all)")
    b.add_argument("--batches", type=lambda text: tuple(int(b) for b in text.split(",")),
                   help="the GPU bench's per-GPU batches, comma-separated (default 32,128,256)")
    b.add_argument("--skip-emulated", action="store_true", help="the GPU bench without the emulated 32 x 128 step")
    b.set_defaults(func=cmd_bench)

    n = sub.add_parser("noise-scale", help="gradient noise scale B_simple of runs' models (McCandlish et al. 2018)")
    n.add_argument("runs", nargs="+", help="run folders with a checkpoint.pt")
    n.add_argument("--workers", type=int, default=32, help="big batch = workers x the run's per-worker batch")
    n.add_argument("--groups", type=int, default=32, help="big batches to average over")
    n.add_argument("--init", action="store_true", help="measure the runs' initial weights instead of their last")
    n.add_argument("--seed", type=int, default=0, help="the order the training examples are drawn in")
    n.add_argument("--json", help="also write the results to this file")
    n.set_defaults(func=cmd_noise_scale)

    gc = sub.add_parser("gpu-check", help="verify a GPU machine in ~10 minutes -> results/gpu_checks/<gpu>-<date>/")
    gc.add_argument("--data", help="an ImageFolder root (train/, val/) for the real-JPEG rows (default $IMAGENET_DIR)")
    gc.add_argument("--out", default="results/gpu_checks", help="where the <gpu>-<date> folder goes")
    gc.set_defaults(func=cmd_gpu_check)
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
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
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
