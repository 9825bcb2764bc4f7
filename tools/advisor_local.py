"""`make advise-local LINK="20mbit 100mbit none"` (python -m tools advisor-local): the scaling advisor against
experiment 3 on the local cluster at several link rates (issue #51), after `make link-sweep` with the same rates.

1. per rate: the nodes' links limited to it, then cluster-check's link-intra and link-inter layers time all_reduces
   and fit the link (results/cluster_check/local-<time>/link_fit.json); the links are unlimited again at the end;
2. one worker's step timed (tools step-split) at each thread count the sweep's ranks had (results/advisor/steps/);
3. every experiment-3 run of the sweep predicted from its own rate's link fit and its threads' step
   (analysis/advisor/runs.py): results/tables/advisor_local.csv, advisor_validation.md and
   results/figures/advisor_validation.png.
--no-probe skips 1 and 2. Time it on an idle machine: the steps and the probes are timings.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from analysis.advisor import local as advisor_local, model as advisor, runs as advisor_runs
from tools.link_sweep import set_link

REPO = Path(__file__).resolve().parents[1]
TABLES, FIGURES = REPO / "results" / "tables", REPO / "results" / "figures"


def probe_rate(rate: str, cluster_dir: Path, check_root: Path) -> None:
    """The links limited to `rate`, then timed and fitted by cluster-check's two link layers."""
    from studies.cluster_check import run_check

    set_link(cluster_dir, rate, check=True)
    print(f"advisor-local: link {rate}: timing all_reduces within and across hosts", flush=True)
    run_check("local", "local", 2, check_root, timeout=600, layers=("link-intra", "link-inter"))
    if not advisor.latest_link_fit("local", check_root, None if rate == "none" else rate):
        raise SystemExit(f"error: the link probes at {rate} did not both pass (their table is above)")


def sweep_threads(sweep: Path) -> list[int]:
    """The threads a rank the sweep's experiment-3 runs had (their manifests' placement)."""
    found = set()
    for manifest in sweep.rglob("03_throughput_distributed_data_parallel/*/manifest.json"):
        placed = advisor_runs.run_facts(manifest.parent)["placement"]
        if placed and placed["threads"]:
            found.add(placed["threads"])
    return sorted(found)


def tabulate(sweep: Path, steps: Path = advisor_runs.STEPS, check_root: Path = advisor.CHECK_ROOT,
             tables: Path = TABLES, figures: Path = FIGURES) -> list[dict]:
    """The local rows from the sweep's runs and the recorded parts; the CSV, the validation table, the figure."""
    from analysis.figures import save

    rows = advisor_local.local_rows(sweep, steps, check_root)
    if not rows:
        raise SystemExit(f"error: no experiment-3 runs under {sweep}: run make link-sweep LINK=\"...\" first")
    advisor_local.write_local_rows(rows, tables / "advisor_local.csv")
    thesis = advisor.thesis_validation()
    (tables / "advisor_validation.md").write_text(advisor.validation_markdown(thesis, rows))
    d = advisor.declaration()
    counted = advisor_local.predicted_rows(rows)
    if counted:
        fig = advisor_local.validation_figure(thesis, counted, d["tolerance"],
                                              "The advisor: predicted against measured images/s")
        save(fig, figures, advisor_local.FIGURE, f"Made from the thesis's Tables 8-9 and {len(counted)} runs of "
                                                 f"experiment 3 under {sweep} (results/tables/advisor_local.csv).")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools advisor-local", description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=Path("results/link_sweep"), help="make link-sweep's folder")
    ap.add_argument("--rates", nargs="+", default=["20mbit", "100mbit", "none"], help="tc's rates; none = unlimited")
    ap.add_argument("--cluster-dir", type=Path, default=Path(".cluster"), help="the local cluster's folder")
    ap.add_argument("--no-probe", action="store_true", help="predict from the link fits and steps recorded")
    args = ap.parse_args(argv)
    if not args.sweep.is_dir():
        print(f"error: no sweep in {args.sweep}: run make link-sweep LINK=\"{' '.join(args.rates)}\" first",
              file=sys.stderr)
        return 2
    if not args.no_probe:
        conf = args.cluster_dir.resolve() / "slurm.conf"
        if not conf.exists():
            print(f"error: no local cluster in {args.cluster_dir}: start one with `make cluster NODES=3`",
                  file=sys.stderr)
            return 2
        os.environ["SLURM_CONF"] = str(conf)
        measure(args)
    rows = tabulate(args.sweep)
    print((TABLES / "advisor_validation.md").read_text(), end="")
    print(f"advisor-local: {len(rows)} runs -> results/tables/advisor_local.csv, advisor_validation.md, "
          f"results/figures/{advisor_local.FIGURE}.png")
    return 0


def measure(args) -> None:
    """Each rate's link probed and fitted, then each thread count's step timed."""
    from studies.advise import measured_step, step_name

    try:
        for rate in args.rates:
            probe_rate(rate, args.cluster_dir, advisor.CHECK_ROOT)
    finally:  # the links are never left limited
        set_link(args.cluster_dir, "none", capture_output=True)
    threads = sweep_threads(args.sweep)
    if not threads:
        raise SystemExit(f"error: no run under {args.sweep} records its ranks' placement (threads): rerun the sweep")
    for t in threads:  # the validation's own steps, committed with its table (make advise keeps its apart)
        measured_step("local", t, advisor_runs.STEPS / step_name("local", t))
