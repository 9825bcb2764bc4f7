"""`python -m tools gpu-check` (`make gpu-check`): is this GPU machine ready for a 34-hour job? ~10 minutes.

1. tests      tests/test_gpu.py: deterministic resume, passes, bf16 / fp16 / compile train
2. bench      `tools bench` at bf16 + channels_last, batch 256: the trainer >= 0.95 x a hand-written loop
3. jpeg-<d>   real JPEGs (--data, default $IMAGENET_DIR) decoded by d = cpu, gpu, dali against synthetic data,
              loader workers from the allocation; goal >= 0.9 x synthetic for the best decoder, which the README
              names. --resize N reads a prepared copy (`data imagenet --resize N`). Skipped without data (dali:
              without DALI).
4. exp1       experiment 1's thesis rows: strict fp32, DDP, per-GPU batch 32 / 64 / 128 (the P100 gave 207 at 128)

It writes results/gpu_checks/<gpu>-<date>/: checks.json, README.md (the table), one <check>.log each. Exit 0 when
every check passed, 1 when one failed, 2 when no GPU is visible.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from contract.config import ConfigError
from contract.reader import read_manifest, read_metrics
from trainers.data.dali import dali_missing

REPO = Path(__file__).resolve().parents[1]
EXP1 = REPO / "experiments" / "01_throughput_single_gpu"
JPEG_GOAL = 0.9  # real JPEGs / synthetic images/s
LOADER_WORKERS = 8  # DALI's decoding threads in its row (its loader processes follow the allocation, as the others')
JPEG_DECODERS = ("cpu", "gpu", "dali")
BENCH_GOAL = 0.95  # trainer / hand-written loop
BENCH_ROW = ["--set", "train.per_worker_batch=256", "--set", 'train.backend="single"', "--set",
             'train.precision="bf16"', "--set", "train.channels_last=true", "--set", "train.seed=0",
             "--set", "bench.batches=100", "--set", "bench.warmup_batches=15"]


@dataclass
class Check:
    name: str
    ok: bool | None  # None: skipped (the reason in `detail`)
    detail: str
    figures: dict = field(default_factory=dict)
    seconds: float | None = None  # None: the whole check's time (a check of several rows times each row)


def gpu_slug(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3": a folder name for the GPU."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    return "-".join(w for w in words if w not in ("nvidia", "geforce", "tesla")) or "gpu"


def command(args: list[str], log: Path, timeout: int) -> tuple[int, str]:
    """Run one of the suite's own commands, its console into `log`; (exit code, the console's last lines)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        code, text = 124, f"{e.stdout or ''}{e.stderr or ''}\n(stopped after {timeout} s)"
        text = text if isinstance(text, str) else text.decode(errors="replace")
    log.write_text(text)
    return code, "\n".join(text.strip().splitlines()[-3:])


def train_bench(out: Path, runs: Path, name: str, *settings: str, launcher: tuple[str, ...] = (),
                timeout: int = 150) -> tuple[dict | None, str]:
    """Experiment 1's config at the gpu scale as one benchmark run; its bench record and the console's tail."""
    python = list(launcher) or [sys.executable]
    code, tail = command([*python, "-m", "trainers", "train", str(EXP1), "--scale", "gpu", "--out", str(runs),
                          "--run-name", name, *settings], out / f"{name}.log", timeout)
    records = read_metrics(runs / EXP1.name / name).of("bench") if code == 0 else []
    return (records[-1] if records else None), tail


# ---- The checks ------------------------------------------------------------------------------------------------------
def check_tests(out: Path, data: Path | None) -> Check:
    code, tail = command([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py"],
                         out / "tests.log", 330)
    return Check("tests", code == 0, tail.splitlines()[-1] if tail else f"exit {code}")


def check_bench(out: Path, data: Path | None) -> Check:
    result = out / "bench.json"
    code, tail = command([sys.executable, "-m", "tools", "bench", "--variants", "bf16_channels_last",
                          "--batches", "256", "--skip-emulated", "--json", str(result)], out / "bench.log", 200)
    if code or not result.exists():
        return Check("bench", False, tail or f"exit {code}")
    figures = json.loads(result.read_text())
    ratios = [row["ratio"] for row in figures.get("rows", [])]
    ok = bool(ratios) and min(ratios) >= BENCH_GOAL
    return Check("bench", ok, f"trainer / hand-written {min(ratios):.3f} (goal >= {BENCH_GOAL})" if ratios
                 else "no ratio in the bench's output", {"ratios": ratios})


def allocated_loader_workers() -> int:
    """The real-JPEG rows' loader processes: the CPUs this process was given less one, which training keeps."""
    from contract.placement import cpus_given, read_allocation

    return max(1, cpus_given(read_allocation(local_ranks=1)) - 1)


def decoder_named(decoder: str, workers: int) -> str:
    """Who decodes in a real-JPEG row, and on which cores or engines (`workers`: the run's loader processes)."""
    if decoder == "cpu":
        return f"libjpeg-turbo in {workers} loader processes"
    if decoder == "gpu":
        return f"nvJPEG on the GPU's SMs (torchvision.io); {workers} loader processes read the files"
    from trainers.data.dali import HW_DECODER_LOAD

    return (f"DALI mixed: the GPU's hardware JPEG decoder where it has one (A100/H100: {HW_DECODER_LOAD:.0%} of "
            f"the JPEGs), nvJPEG on SMs and {LOADER_WORKERS} DALI threads for the rest; {workers} loader "
            "processes read the files")


def check_jpegs(out: Path, data: Path | None) -> list[Check]:
    if data is None:
        why = "no data folder: pass --data DIR or set IMAGENET_DIR (train/ and val/ class folders)"
        return [Check(f"jpeg-{d}", None, why) for d in JPEG_DECODERS]
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        started = time.time()
        synthetic, tail = train_bench(out, runs, "synthetic", *BENCH_ROW, "--set", 'data.kind="synthetic"')
        synthetic_seconds = round(time.time() - started, 1)
        if synthetic is None:
            return [Check("jpeg-synthetic", False, f"the synthetic row failed: {tail}")]
        checks = []
        for decoder in JPEG_DECODERS:
            if decoder == "dali" and dali_missing():
                checks.append(Check("jpeg-dali", None, dali_missing(), seconds=0.0))
                continue
            started = time.time()
            record, tail = train_bench(out, runs, f"jpeg-{decoder}", *BENCH_ROW, "--set", 'data.kind="imagefolder"',
                                       "--set", f'data.path="{data}"', "--set", f'data.decoder="{decoder}"',
                                       "--set", f"data.loader_workers={allocated_loader_workers()}")
            placed = (read_manifest(runs / EXP1.name / f"jpeg-{decoder}") or {}).get("placement") or [{}]
            checks.append(jpeg_check(decoder, record, synthetic, tail, placed[0]))
            checks[-1].seconds = round(time.time() - started, 1)
            checks[-1].figures["synthetic_seconds"] = synthetic_seconds
    best = max((c.figures.get("ratio", 0.0) for c in checks), default=0.0)
    for c in checks:  # the goal is the best decoder's; a decoder that ran is no failure on its own
        if c.ok is not None:
            c.ok = c.figures.get("ratio") is not None and best >= JPEG_GOAL
    return checks


def jpeg_check(decoder: str, record: dict | None, synthetic: dict, tail: str, placed: dict | None = None) -> Check:
    """A real-JPEG row against the synthetic one; `placed`: the run's rank-0 placement."""
    if record is None:
        return Check(f"jpeg-{decoder}", False, tail)
    placed = placed or {}
    workers = placed.get("loader_workers", allocated_loader_workers())
    ratio = record["images_per_s_steady"] / synthetic["images_per_s_steady"]
    figures = {"images_per_s": record["images_per_s_steady"], "synthetic_images_per_s":
               synthetic["images_per_s_steady"], "ratio": ratio, "data_share": record["data_share"],
               "loader_workers": workers, "cpus": placed.get("cpus"), "threads": placed.get("threads"),
               "decoder": decoder_named(decoder, workers)}
    return Check(f"jpeg-{decoder}", True, f"{ratio:.2f} x synthetic ({record['images_per_s_steady']:,.0f} / "
                 f"{synthetic['images_per_s_steady']:,.0f} img/s), waiting for data {100 * record['data_share']:.1f} %"
                 f" (goal >= {JPEG_GOAL} for the best decoder); {decoder_named(decoder, workers)}", figures)


def loader_advice(results: list[Check]) -> str | None:
    """The README's line on which data.decoder to use on this GPU: the real-JPEG row closest to synthetic."""
    rows = [c for c in results if c.name.startswith("jpeg-") and c.figures.get("ratio") is not None]
    if not rows:
        return None
    best = max(rows, key=lambda c: c.figures["ratio"])
    verdict = "meets" if best.figures["ratio"] >= JPEG_GOAL else "misses"
    return (f"Loader to use on this GPU: `data.decoder = \"{best.name.removeprefix('jpeg-')}\"` "
            f"({best.figures['ratio']:.2f} x synthetic with {best.figures['loader_workers']} loader workers; it "
            f"{verdict} the goal of {JPEG_GOAL} x).")


def check_exp1(out: Path, data: Path | None) -> Check:
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for batch in (32, 64, 128):
            # as the study runs the thesis's rows: DDP at world size 1 under torchrun
            record, tail = train_bench(out, Path(tmp), f"exp1-b{batch}", "--set", f"train.per_worker_batch={batch}",
                                       "--set", 'train.backend="ddp"', "--set", "bench.batches=100",
                                       launcher=(sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                 "--nproc-per-node", "1"))
            if record is None:
                return Check("exp1", False, f"batch {batch}: {tail}", figures)
            figures[f"b{batch}"] = record["images_per_s_steady"]
    detail = ", ".join(f"batch {k[1:]}: {v:,.0f} img/s" for k, v in figures.items()) + " (strict fp32; P100: 207 at 128)"
    return Check("exp1", True, detail, figures)


CHECKS: list[Callable] = [check_tests, check_bench, check_jpegs, check_exp1]


# ---- Running them and writing the folder -----------------------------------------------------------------------------
def run_checks(checks: list[Callable], out: Path, data: Path | None, machine: dict) -> int:
    out.mkdir(parents=True, exist_ok=True)
    results: list[Check] = []
    for i, check in enumerate(checks, 1):
        print(f"[{i}/{len(checks)}] {check.__name__.removeprefix('check_')} ...", flush=True)
        started = time.time()
        found = check(out, data)
        for c in found if isinstance(found, list) else [found]:
            c.seconds = round(time.time() - started, 1) if c.seconds is None else c.seconds
            results.append(c)
            print(f"    {c.name}: {verdict(c)}: {c.detail}", flush=True)
        write_folder(out, results, machine)  # after each check: a lease that ends mid-way keeps those done
    failed = [c.name for c in results if c.ok is False]
    print(f"=> {out}: " + (f"failed: {', '.join(failed)}" if failed else "every check passed (or was skipped)"))
    return 1 if failed else 0


def verdict(c: Check) -> str:
    return {True: "pass", False: "FAIL", None: "skipped"}[c.ok]


def write_folder(out: Path, results: list[Check], machine: dict) -> None:
    (out / "checks.json").write_text(json.dumps({"machine": machine, "checks": [asdict(c) for c in results]},
                                                indent=2) + "\n")
    lines = [f"# GPU checks: {machine.get('gpu', '?')} ({machine.get('date', '?')})", "",
             "Written by `make gpu-check` (`python -m tools gpu-check`); figures in `checks.json`, each check's "
             "console in `<check>.log`.", "",
             f"Machine: {', '.join(f'{k} {v}' for k, v in machine.items())}.", "",
             "| check | result | detail | seconds |", "|---|---|---|---|"]
    lines += [f"| {c.name} | {verdict(c)} | {c.detail.replace('|', '/')} | {c.seconds:.0f} |" for c in results]
    advice = loader_advice(results)
    lines += ["", advice] if advice else []
    (out / "README.md").write_text("\n".join(lines) + "\n")


def machine_facts() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"gpu": torch.cuda.get_device_name(0), "memory_gib": round(props.total_memory / 2**30, 1),
            "date": datetime.date.today().isoformat(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cpu_cores": os.cpu_count()}


def selected_checks(names: str | None) -> list[Callable]:
    """The checks named (comma-separated), in that order (a short lease runs the most wanted first); all for None."""
    known = {check.__name__.removeprefix("check_"): check for check in CHECKS}
    if names is None:
        return list(CHECKS)
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        raise ConfigError(f"--checks {names!r}: name some of {', '.join(known)}, comma-separated")
    return [known[name] for name in dict.fromkeys(wanted)]


def check_machine(data: str | None, out_root: str, checks: list[Callable] = CHECKS, resize: int | None = None) -> int:
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible: gpu-check verifies a GPU machine (run it there)", file=sys.stderr)
        return 2
    folder = data or os.environ.get("IMAGENET_DIR")
    if folder and not (Path(folder) / "train").is_dir():
        print(f"error: {folder} has no train/ folder: give an ImageFolder root (train/ and val/)", file=sys.stderr)
        return 2
    machine = machine_facts()
    out = Path(out_root) / f"{gpu_slug(machine['gpu'])}-{machine['date']}"
    with tempfile.TemporaryDirectory() as tmp:
        if folder and resize:
            folder = prepared_copy(Path(folder), resize, Path(tmp))
            machine["jpegs"] = f"resized copy, shorter side {resize} (python -m trainers data imagenet --resize)"
        return run_checks(checks, out, Path(folder).resolve() if folder else None, machine)


def prepared_copy(folder: Path, size: int, tmp: Path) -> Path:
    """The real-JPEG rows' data with every image's shorter side `size`, as `data imagenet --resize` writes it."""
    from trainers.data.imagenet import resize_copy

    target = tmp / f"{folder.name}-{size}"
    print(f"preparing {target} (shorter side {size}) from {folder} ...", flush=True)
    images = resize_copy(folder, target, size)
    print(f"    {images} images resized", flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools gpu-check", description=__doc__.split("\n")[0])
    p.add_argument("--data", help="an ImageFolder root (train/, val/) for the real-JPEG rows (default $IMAGENET_DIR)")
    p.add_argument("--out", default="results/gpu_checks", help="where the <gpu>-<date> folder goes")
    p.add_argument("--checks", help="only these checks, comma-separated (tests, bench, jpegs, exp1; default all)")
    p.add_argument("--resize", type=int, help="the real-JPEG rows read a copy of --data whose shorter sides are N "
                   "(e.g. 256: the suite's prepared format, `data imagenet --resize 256`)")
    args = p.parse_args(argv)
    checks = selected_checks(args.checks)  # a misspelt name: one line before the GPU is asked anything
    if args.resize is not None and args.resize < 32:
        print(f"error: --resize {args.resize}: give the shorter side in pixels, at least 32 (e.g. 256)",
              file=sys.stderr)
        return 2
    return check_machine(args.data, args.out, checks, args.resize)
