"""The telemetry sampler's cost: one training with the sampler on and off, interleaved.

python -m tools telemetry overhead CONFIG [--scale S] [--set ...] [--repeats N]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from contract.config import ConfigError, TelemetryConfig, load_config
from contract.runfolder import LOG
from trainers.data import ensure_generated, generated_spec
from trainers.run import run_training
from trainers.telemetry import Sampler


def sample_cost_s(samples: int = 50) -> float:
    """Wall seconds one sample takes (the sampler thread's whole work per interval)."""
    sampler = Sampler(3600.0, rank=0, warn=lambda line: None)
    started = time.perf_counter()
    for _ in range(samples):
        sampler.sample()
    return (time.perf_counter() - started) / samples


def measure_overhead(config: str, scale: str, overrides: list[str], repeats: int, out) -> dict:
    """The same training with the sampler on and off, interleaved, after one untimed warm-up run."""
    base = load_config(config, scale, overrides)
    interval = base.telemetry.interval_s or TelemetryConfig().interval_s
    if generated_spec(base.data):  # made once before the clock starts, not inside the first timed run
        ensure_generated(generated_spec(base.data))
    seconds: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}  # the process's CPU seconds: what the sampler adds, and
    # far less disturbed than wall time by other work on a shared machine
    warm_up = dataclasses.replace(base, telemetry=TelemetryConfig(0.0))  # first-run costs (lazy imports, caches)
    if run_training(warm_up, Path(out) / "warm-up", echo=False) != 0:
        raise RuntimeError(f"the warm-up run failed; see {Path(out) / 'warm-up' / LOG}")
    for i in range(repeats):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            cfg = dataclasses.replace(base, telemetry=TelemetryConfig(interval if mode == "on" else 0.0))
            started, cpu_started = time.perf_counter(), time.process_time()
            if run_training(cfg, Path(out) / f"{mode}-{i}", echo=False) != 0:
                raise RuntimeError(f"the {mode} run {i} failed; see {Path(out) / f'{mode}-{i}' / LOG}")
            seconds[mode].append(time.perf_counter() - started)
            cpu[mode].append(time.process_time() - cpu_started)
    cost = sample_cost_s()
    pairs = [on / off for on, off in zip(seconds["on"], seconds["off"])]  # each pair ran back to back
    cpu_pairs = [on / off for on, off in zip(cpu["on"], cpu["off"])]
    return {"interval_s": interval, "seconds_on": seconds["on"], "seconds_off": seconds["off"],
            "pair_ratios_on_off": pairs, "median_pair_ratio": statistics.median(pairs),
            "cpu_seconds_on": cpu["on"], "cpu_seconds_off": cpu["off"], "cpu_pair_ratios_on_off": cpu_pairs,
            "median_cpu_pair_ratio": statistics.median(cpu_pairs),
            "sample_cost_s": cost, "sampler_share_of_a_core": cost / interval}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools telemetry", description="the sampler's overhead")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("overhead", help="one training with the sampler on and off, interleaved; prints JSON")
    o.add_argument("config")
    o.add_argument("--scale", default="local")
    o.add_argument("--set", action="append", default=[])
    o.add_argument("--repeats", type=int, default=3, help="pairs of runs (on and off)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="telemetry-overhead-") as out:
        try:
            print(json.dumps(measure_overhead(args.config, args.scale, args.set, args.repeats, out), indent=1))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
