"""`python -m studies EXPERIMENT [...]` (the front door's `study`): expand an experiment into its runs and launch them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contract.cli import one_line_errors, out_folder
from contract.config import SCALES, DataError
from slurm.client import NoConfiguration
from studies.run import run_study


def parser() -> argparse.ArgumentParser:
    st = argparse.ArgumentParser(prog="python -m suite study",
                                 description="Expand an experiment into its runs and launch them (here or with Slurm).")
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
    return st


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return one_line_errors(lambda: run_study(
        Path(args.experiment), scale=args.scale, launcher=args.launcher, cluster=args.cluster,
        dry_run=args.dry_run, quick=args.quick, out=None if args.out is None else out_folder(args.out),
        seeds=args.seeds, overrides=args.set, jobs=args.jobs, only=args.only,
        **({"gpus": args.gpus} if args.gpus is not None else {}),
    ), (DataError, NoConfiguration))  # NoConfiguration: a Slurm configuration gone mid-command


if __name__ == "__main__":
    sys.exit(main())
