"""Benchmarks (commands, not timed tests): parse speed on a million-line log, report time on fifty runs."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from contract.runfolder import LOG

from . import synth
from .logs import parse_log
from .numbers import log_throughput


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


def bench_report(make_report, n_runs: int = 50, notebooks: bool = True) -> dict:
    """make_report (analysis.report's, handed in by the command) timed on n_runs made-up runs."""
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
