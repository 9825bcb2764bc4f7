"""The analysis's benchmarks on generated records (commands, not timed tests), from the repository's root:

    python -m tests.bench_analysis parse [--lines N] [--format F] [--repeat R]   parse speed on a million-line log
    python -m tests.bench_analysis report [--runs N] [--no-notebooks]           the report's time on fifty runs

They live beside the generator they time the analysis on (tests/synth_records.py, the tests' made-up records),
which the product does not ship.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from analysis.logs import parse_log
from analysis.numbers import log_throughput
from analysis.catalogue import make_report
from contract.runfolder import LOG
from tests import synth_records as synth


def bench_parse(lines: int = 1_000_000, fmt: str = "early-2019", repeat: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / LOG
        t0 = time.perf_counter()
        n = synth.write_pytorch_log(path, lines, fmt)
        gen = time.perf_counter() - t0
        size = path.stat().st_size
        times, cpus = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            log = parse_log(path)
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        best = min(times)
        best_cpu = min(cpus)
        tp = log_throughput(log, 128, 1)
    res = {"lines": n, "bytes": size, "format": fmt, "seconds_best": round(best, 3),
           "seconds_all": [round(t, 3) for t in times], "lines_per_s": round(n / best),
           "cpu_seconds_best": round(best_cpu, 3), "lines_per_cpu_s": round(n / best_cpu),
           "parsed_train_rows": len(log.train), "bad_lines": log.bad_lines, "throughput": tp}
    print(f"bench-parse: {n} lines ({size / 1e6:.1f} MB, {fmt}) generated in {gen:.1f} s; parse best of {repeat}: "
          f"{best:.3f} s wall = {n / best:,.0f} lines/s ({best_cpu:.3f} s CPU = {n / best_cpu:,.0f} lines/CPU-s; "
          f"load average {os.getloadavg()[0]:.1f}); {len(log.train)} train rows, {log.bad_lines} bad lines; "
          f"thesis formula {tp['thesis_images_per_s']} img/s, steady {tp['steady_images_per_s']} img/s")
    return res


def bench_report(n_runs: int = 50, notebooks: bool = True) -> dict:
    """analysis.catalogue's make_report timed on n_runs made-up runs."""
    with tempfile.TemporaryDirectory() as d:
        runs, out = Path(d) / "runs", Path(d) / "out"
        t0 = time.perf_counter()
        synth.write_study(runs, n_runs)
        gen = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in runs.rglob("*") if p.is_file())
        t0 = time.perf_counter()
        info = make_report(runs, out, notebooks=notebooks, quiet=True)
        took = time.perf_counter() - t0
        load = os.getloadavg()[0]
    print(f"bench-report: {info['runs']} runs ({size / 1e6:.1f} MB of run folders, generated in {gen:.1f} s); "
          f"report with{'' if notebooks else 'out'} notebooks took {took:.1f} s "
          f"({info['tables']} table files, {info['figures']} figure files, {len(info['notebooks'])} notebooks; "
          f"load average {load:.1f})")
    return {"runs": info["runs"], "seconds": took, "notebooks": notebooks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench_analysis", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="bench", required=True)
    parse = sub.add_parser("parse", help="parse speed on a generated million-line log")
    parse.add_argument("--lines", type=int, default=1_000_000)
    parse.add_argument("--format", default="early-2019", choices=["early-2019", "progressmeter-2019", "current"])
    parse.add_argument("--repeat", type=int, default=3)
    report = sub.add_parser("report", help="time the report on generated run folders")
    report.add_argument("--runs", type=int, default=50)
    report.add_argument("--no-notebooks", action="store_true")
    args = ap.parse_args(argv)
    if args.bench == "parse":
        bench_parse(args.lines, args.format, args.repeat)
    else:
        bench_report(args.runs, notebooks=not args.no_notebooks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
