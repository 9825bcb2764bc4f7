"""Command line: python -m analysis {report, tensorboard, throughput, cost, headline, advise} (its benchmarks on
generated records: python -m tests.bench_analysis)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path


def _clean(v):
    if hasattr(v, "item"):  # numpy scalar -> Python
        v = v.item()
    return None if isinstance(v, float) and math.isnan(v) else v


def cmd_throughput(args) -> int:
    from contract.runfiles import plain_name
    from contract.runfolder import METRICS

    from . import numbers as nb
    from .logs import parse_log
    from .runs import load_run

    results = []
    for item in args.logs:
        p = Path(item)
        if p.is_file() and plain_name(p).name == METRICS:  # metrics.jsonl or metrics.jsonl.gz: its run folder
            p = p.parent
        if p.is_dir():
            df, problems = load_run(p)
            b = df[df["kind"] == "bench"]
            r = df.iloc[0]
            row = {"path": str(p), "tool": "run folder", "format": METRICS,
                   "per_gpu_batch": _clean(r["per_gpu_batch"]), "gpus": _clean(r["gpus"]),
                   "thesis_images_per_s": None, "steady_images_per_s": None, "bad_lines": int(r["bad_lines"]),
                   "problems": [q.split(": ", 1)[-1] for q in problems]}
            for column in ("thesis_images_per_s", "steady_images_per_s"):
                row[column] = round(float(b[column].iloc[0]), 2) if len(b) and b[column].notna().iloc[0] else None
            if b.empty:
                row["note"] = "no bench or iteration records"
            results.append(row)
            continue
        if not p.exists():
            print(f"analysis throughput: no such file: {item}", file=sys.stderr)
            return 2
        log = parse_log(p)
        results.append(nb.log_throughput(log, args.per_gpu_batch, args.gpus,
                                         args.warmup_batches if args.warmup_batches is not None
                                         else nb.DEFAULT_WARMUP_BATCHES))
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=2))
    else:
        for r in results:
            def f(v):
                return "n/a" if v is None else f"{v:.2f}"
            extra = f" (batch {r['thesis_batch']})" if r.get("thesis_batch") not in (None, 199) else ""
            print(f"{r['path']}: {r['tool']} [{r['format']}] thesis formula {f(r['thesis_images_per_s'])} images/s"
                  f"{extra}, steady state {f(r['steady_images_per_s'])} images/s"
                  + (f" — {r['note']}" if r.get("note") else "")
                  + (f" ({r['bad_lines']} bad lines skipped)" if r.get("bad_lines") else ""))
    return 0


def cmd_report(args) -> int:
    from .catalogue import make_report
    from .report import ReportError

    try:
        make_report(args.runs, args.out, logs=args.logs, notebooks=not args.no_notebooks)
    except ReportError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def cmd_tensorboard(args) -> int:
    from .events import write_events

    return write_events(Path(args.runs))


def cmd_cost(args) -> int:
    from contract.config import ConfigError
    from contract.plan import check_node_gpus

    from . import cost
    from .headline import COST_TOTALS, write_all
    from .reference import load_reference
    from .runs import load_study

    try:
        gpus = check_node_gpus(args.gpus) if args.gpus is not None else None
        written, sums = cost.write_cost(load_study(args.runs), load_reference(), Path(args.out) / "tables",
                                        Path(args.experiments), gpus)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in cost.summary_lines(sums, sums.attrs.get("node_gpus")):
        print(line)
    print("written: " + ", ".join(str(p) for p in written if p.suffix == ".md"))
    if Path(args.out).resolve() / "tables" == COST_TOTALS.table.parent:  # the committed tables: their guide too
        write_all([COST_TOTALS])
    return 0


def cmd_headline(args) -> int:
    from .headline import COPIES, write_all

    if args.write:
        write_all()
        return 0
    for copy in COPIES:
        sys.stdout.write(copy.block(copy.table.read_text()) + "\n")
    return 0


def cmd_advise(args) -> int:
    from .advisor import model as advisor

    if not args.validate and not args.step:
        print("error: analysis advise needs --validate or --step STEP.json (from python -m tools step-split); a "
              "cluster's table: python -m suite advise --cluster PROFILE", file=sys.stderr)
        return 2
    try:  # every input checked (analysis/advisor/model.py) before anything is written
        table = predicted_table(args) if args.step else ""
    except (OSError, ValueError) as e:
        print(f"error: analysis advise: {e}", file=sys.stderr)
        return 2
    if args.validate:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        from .advisor.local import read_local_rows

        out.write_text(advisor.validation_markdown(advisor.thesis_validation(), read_local_rows()))
        print(out.read_text(), end="")
        print(f"written: {out}")
    print(table, end="")
    return 0


def predicted_table(args) -> str:
    """`--step`'s predicted table for the nominal links; advisor.InputError (one line) for any input it cannot use."""
    from .advisor import model as advisor

    nodes = args.nodes or [1, 2, 4]
    advisor.check_machine(args.gpus_per_node, nodes)
    step, record = advisor.load_step(Path(args.step))
    if args.input_images_per_s is not None:  # measured apart (make gpu-check's real-JPEG rows, data bench)
        rate = advisor.number("--input-images-per-s", args.input_images_per_s)
        step = dataclasses.replace(step, input_images_per_s=rate)
    intra, inter = advisor.nominal_link(args.intra), advisor.nominal_link(args.inter)
    rows = advisor.scaling_table(step, args.gpus_per_node, nodes, intra, inter)
    return advisor.scaling_markdown(rows, f"Predicted from {args.step} ({record.get('device', 'a measured step')}, "
                                          f"batch {step.batch}), nominal links {args.intra} within a node, "
                                          f"{args.inter} across")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="tables, figures and executed notebooks from results/runs (else the reference)")
    r.add_argument("--runs", default=None, help="runs root (default: results/runs when it holds runs, else the "
                   "committed reference results/reference/<machine>)")
    r.add_argument("--out", default=None, help="the report's folder, cleared first (default: results/ for the "
                   "committed reference's runs, which is the committed report; results/report/<runs folder> for any "
                   "other runs)")
    r.add_argument("--logs", nargs="*", default=None, help="upstream logs or folders of them (sidecar LOG.json "
                                                         "gives experiment, framework, gpus, per_gpu_batch, scale)")
    r.add_argument("--no-notebooks", action="store_true")
    r.set_defaults(fn=cmd_report)
    e = sub.add_parser("tensorboard", help="TensorBoard event files for every run folder under --runs "
                       "(default results/runs), and the tensorboard --logdir line")
    e.add_argument("--runs", default="results/runs", help="any folder of run folders, e.g. results/reference/vm-2cpu")
    e.set_defaults(fn=cmd_tensorboard)
    t = sub.add_parser("throughput", help="thesis-formula and steady-state images/s of logs or run folders")
    t.add_argument("logs", nargs="+", metavar="LOG")
    t.add_argument("--per-gpu-batch", type=int, default=None)
    t.add_argument("--gpus", type=int, default=None)
    t.add_argument("--warmup-batches", type=int, default=None)
    t.add_argument("--json", action="store_true")
    t.set_defaults(fn=cmd_throughput)
    k = sub.add_parser("cost", help="GPU-hours of every experiment at the gpu and thesis scales, node-hours at the "
                       "node scale -> tables/cost.md")
    k.add_argument("--runs", default="results/runs", help="runs whose measured images/s replace the thesis's")
    k.add_argument("--out", default="results")
    k.add_argument("--experiments", default="experiments")
    k.add_argument("--gpus", type=int, default=None, help="the node scale's GPUs a node (default: "
                   "experiments/scales.toml [node.study] gpus, 8)")
    k.set_defaults(fn=cmd_cost)
    h = sub.add_parser("headline", help="the README's headline, copied from results/tables/orderings.md")
    h.add_argument("--write", action="store_true", help="put it into README.md (make reference-report does)")
    h.set_defaults(fn=cmd_headline)
    a = sub.add_parser("advise", help="predicted images/s for 1...N GPUs from a measured step (--step), or the "
                       "advisor against the thesis's Tables 8-9 (--validate)")
    a.add_argument("--validate", action="store_true", help="write the validation table (--out)")
    a.add_argument("--out", default="results/tables/advisor_validation.md")
    a.add_argument("--step", help="a step measured by python -m tools step-split (JSON)")
    a.add_argument("--gpus-per-node", type=int, default=8)
    a.add_argument("--nodes", type=lambda v: [int(n) for n in v.split(",")], default=None,
                   help="node counts, comma-separated (default 1,2,4)")
    a.add_argument("--input-images-per-s", type=float, help="one worker's input pipeline, measured apart (make "
                   "gpu-check's real-JPEG rows): a bound beside the step's (replaces the step file's)")
    a.add_argument("--intra", default="nvlink4", help="a link of analysis/reference/links.toml within a node")
    a.add_argument("--inter", default="ndr-ib", help="a link of analysis/reference/links.toml across nodes")
    a.set_defaults(fn=cmd_advise)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
