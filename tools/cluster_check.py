"""`python -m tools cluster-check --cluster P [--scale S] [--nodes N] [--out DIR] [--layers L ...]`: the CLI of
studies/cluster_check.py."""
from __future__ import annotations

import argparse
from pathlib import Path

from studies.cluster_check import CHECK_OUT, LAYERS, run_check


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools cluster-check",
                                 description=f"One short job per layer ({', '.join(LAYERS)}) on a Slurm cluster; "
                                             "one table of passes and failures, the failing layer named.")
    ap.add_argument("--cluster", required=True, help="a profile in slurm/clusters/ (or a path to a .toml)")
    ap.add_argument("--scale", default="local", choices=["local", "gpu", "node", "thesis"],
                    help="the scale whose model the train layer runs (default local)")
    ap.add_argument("--nodes", type=int, default=2, help="nodes each layer's job spans (default 2)")
    ap.add_argument("--out", type=Path, default=CHECK_OUT, help=f"where its folder goes (default {CHECK_OUT})")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for all layers (default 1800)")
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), metavar="LAYER",
                    help=f"only these layers (default all: {' '.join(LAYERS)}); nodes is always checked")
    args = ap.parse_args(argv)
    return run_check(args.cluster, args.scale, args.nodes, args.out, args.timeout, tuple(args.layers))
