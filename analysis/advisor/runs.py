"""Each throughput run of experiment 3 beside the advisor's prediction for its own placement (issue #51): the report's
`exp3_predicted` table and the local-cluster validation's rows (analysis/advisor/local.py) both come from here.

A run is predicted only from parts measured on its own machine and for its own shape, never from another's:

- its placement, from its manifest: ranks, distinct hosts, the most ranks on one host, a rank's threads;
- one worker's step (python -m tools step-split) of the run's model, per-worker batch, image size and threads,
  timed on a CPU of the run's model: for the committed report the committed results/advisor/steps/, for any other
  the steps make advise timed on this machine beside its link fits (results/cluster_check/steps/, steps_for);
- the links (make cluster-check's link_fit.json, results/cluster_check/<profile>-<time>/) timed on a CPU of the
  run's model, the across-nodes one at the run's link rate (the manifest's `link`; unlimited where none) between
  nodes whose names are of the run's nodes' family (n1, n2: "n"; the manifest names no profile). A run on one host
  needs the within-a-node link only.

Where a part is missing the row says which, and how to measure it, instead of a number. A run more than the declared
tolerance (analysis/reference/advisor.toml) below its prediction is flagged with its communication share, its
data-wait share and its threads a rank, the likeliest cause named first.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from contract import reader

from . import model as advisor
from ..runs import LINK_BENCH

# step-split records: the committed ones (make advise-local's, with the local validation), which the committed report
# predicts from; and this machine's (make advise's), kept beside its link fits in the cluster checks' folder, which git
# ignores: a report of this machine's runs predicts from those (steps_for)
STEPS = Path("results/advisor/steps")
TIMED_STEPS = "steps"  # the folder of make advise's steps in a cluster checks' root (results/cluster_check/steps)
# The link fits the committed report predicts from: the local cluster's, timed on this CPU model and committed with
# the advisor's local validation, so a fresh clone redraws exp3_predicted from the repository alone.
COMMITTED_LINK_FITS = Path(__file__).resolve().parents[2] / "results" / "advisor" / "local_validation" / "links"
COLUMNS = ["run", "backend", "processes", "hosts", "ranks_per_host", "threads_per_rank", "link", "link_fit", "measured",
           "predicted", "error", "bound", "exposed_ms", "flag", "cause", "path"]
NOTES = ("measured: the run's steady-state images/s; predicted: the advisor's (analysis/advisor/model.py) for the "
         "run's own placement (manifest.json: ranks, hosts, threads a rank), from a step timed by python -m tools "
         "step-split of its model, batch and threads and the links timed by make cluster-check on a CPU of the "
         "run's model at the run's link rate; error: predicted over measured, minus 1; bound: what the prediction "
         "says limits the run.",
         "flag: the run is more than the declared tolerance below its prediction; cause: its share of the timed step "
         "spent communicating and waiting for data, and its threads a rank (the likeliest first). Where a part is "
         "missing the row names it instead of a number: no prediction is borrowed from another machine, placement "
         "or link rate.",
         "link_fit: the make cluster-check folder whose link fit the row used: for the committed report one of "
         "results/advisor/local_validation/links/ (committed), for any other report this machine's "
         "results/cluster_check/.")


def placement_of(manifest: dict) -> dict | None:
    """ranks, hosts, the most ranks on one host and a rank's threads (None: the manifest records no placement)."""
    ranks = manifest.get("placement") or []
    if not ranks:
        return None
    hosts = [r["host"] for r in ranks]
    threads = {r.get("threads") for r in ranks}
    return {"ranks": len(ranks), "hosts": len(set(hosts)), "ranks_per_host": max(hosts.count(h) for h in hosts),
            "threads": threads.pop() if len(threads) == 1 else None}


def run_facts(path: Path) -> dict:
    """What a prediction for this run must match: its placement, model, batch, image size, machine, link."""
    manifest = reader.read_manifest(path) or {}
    config = reader.read_config(path) or {}
    machine = manifest.get("machine") if isinstance(manifest.get("machine"), dict) else {}
    return {"placement": placement_of(manifest), "model": config.get("model", {}).get("name"),
            "batch": config.get("train", {}).get("per_worker_batch"),
            "image_size": config.get("data", {}).get("image_size"), "cpu_model": machine.get("cpu_model"),
            "cores": machine.get("cores"), "link": manifest.get("link"),
            "hosts": [r["host"] for r in manifest.get("placement") or []]}


def steps_for(check_root: Path) -> Path:
    """The steps a report predicts from beside the link fits it predicts from: the committed ones beside the
    committed link fits, else those make advise timed on this machine beside its cluster checks."""
    if Path(check_root).resolve() == COMMITTED_LINK_FITS.resolve():
        return STEPS
    return Path(check_root) / TIMED_STEPS


def step_records(folder: Path = STEPS) -> list[tuple[Path, dict]]:
    out = []
    for p in sorted(Path(folder).glob("*.json")):
        try:
            out.append((p, json.loads(p.read_text())))
        except (OSError, ValueError):
            continue
    return out


def matching_step(facts: dict, steps: list[tuple[Path, dict]]) -> Path | None:
    """The newest step record of the run's model, batch, image size and threads, timed on its CPU model."""
    threads = facts["placement"]["threads"]
    for path, r in reversed(steps):
        if (r.get("model"), r.get("batch"), r.get("image_size"), r.get("threads"),
                (r.get("machine") or {}).get("cpu_model")) == (facts["model"], facts["batch"], facts["image_size"],
                                                               threads, facts["cpu_model"]):
            return path
    return None


def host_family(name: str) -> str:
    """A node's name without its number (n2 -> n, g102 -> g): how a cluster's nodes are told from another's."""
    return name.rstrip("0123456789")


def same_cluster(fits: dict, facts: dict) -> bool:
    """Whether the links were timed between nodes of the run's cluster: their names of one family (the manifest
    names no profile; a check's two nodes need not be the run's)."""
    timed = {host_family(h) for h in fits["inter"].get("hosts", [])}
    return bool(timed & {host_family(h) for h in facts["hosts"]})


def matching_links(facts: dict, check_root: Path) -> Path | None:
    """The newest link fit timed on the run's CPU model; where the run crossed hosts, across nodes of its cluster
    at its link rate."""
    across = facts["placement"]["hosts"] > 1
    for folder in sorted(Path(check_root).glob("*-*"), reverse=True):
        try:  # the advisor's one validator: a damaged fit is no run's (its row then says no fit matches)
            _, _, fits = advisor.read_link_fit(folder / advisor.LINK_FIT)
        except (OSError, ValueError):
            continue
        if fits["intra"].get("cpu_model") == facts["cpu_model"] and \
                (not across or (fits["inter"].get("link") == facts["link"] and same_cluster(fits, facts))):
            return folder / advisor.LINK_FIT
    return None


def missing(facts: dict, step: Path | None, links: Path | None, steps: Path = STEPS) -> str:
    """Why the run has no prediction ('' when it has one)."""
    p = facts["placement"]
    if p is None or p["threads"] is None:
        return "no prediction: the manifest records no per-rank placement (or its ranks' threads differ)"
    if facts["cpu_model"] is None:
        return "no prediction: the manifest records no machine"
    if links is None:
        rate = f" at {facts['link'] or 'an unlimited link'}" if p["hosts"] > 1 else ""
        return (f"no prediction: no link fit for this machine{rate} (make cluster-check "
                f"LAYERS=\"link-intra link-inter\")")
    if step is None:
        return (f"no prediction: no step split of {facts['model']} batch {facts['batch']} at {p['threads']} "
                f"thread(s) on this machine (make advise CLUSTER=local, or python -m tools step-split --threads "
                f"{p['threads']} --json {steps}/NAME.json)")
    return ""


def predict_run(facts: dict, backend: str, step_path: Path, link_path: Path) -> advisor.Prediction:
    """The prediction for the run's own placement; its hosts share one machine's cores where it ran on one host
    (the run's machine's cores) or the links were timed on hosts of one machine (their shared_cores)."""
    p = facts["placement"]
    step, _ = advisor.load_step(step_path)
    intra, inter, fits = advisor.read_link_fit(link_path)
    shared = facts["cores"] if p["hosts"] == 1 else fits.get("shared_cores")
    return advisor.predict(step, backend, p["ranks"], p["ranks_per_host"], intra, inter, shared_cores=shared)


def share(part: float, row) -> float:
    """A part's share of the run's timed step (data + compute + communication); NaN where not recorded."""
    timed = sum(x for x in (row.data_s, row.compute_s, row.comm_s) if not pd.isna(x))
    return part / timed if timed and not pd.isna(part) else math.nan


def cause(row, threads: int | None, cpus: float | None) -> str:
    """The run's communication and data-wait shares and its threads a rank, the likeliest cause first: threads
    beyond the rank's CPUs, else the larger share."""
    comm, data = share(row.comm_s, row), share(row.data_s, row)
    said = [(0 if pd.isna(comm) else comm, "communication " + ("not recorded" if pd.isna(comm) else
                                                               f"{100 * comm:.0f} % of the timed step")),
            (0 if pd.isna(data) else data, "data wait " + ("not recorded" if pd.isna(data) else f"{100 * data:.0f} %"))]
    parts = [text for _, text in sorted(said, key=lambda s: -s[0])]
    on = f" on {cpus:g} CPU(s)" if cpus and not pd.isna(cpus) else ""
    oversubscribed = bool(threads and on and threads > cpus)
    threads_said = f"{threads} thread(s) a rank{on}" + (": more threads than CPUs" if oversubscribed else "")
    return "; ".join([threads_said, *parts] if oversubscribed else [*parts, threads_said])


PYTORCH_FRAMEWORKS = ("pytorch", "horovod+pytorch")  # the frameworks whose step the advisor models


def prediction_table(df: pd.DataFrame, steps: Path | None = None, check_root: Path = advisor.CHECK_ROOT,
                     tolerance: float | None = None) -> pd.DataFrame:
    """Every PyTorch (DDP, Horovod+PyTorch) experiment-3 bench run beside its prediction (COLUMNS); empty without
    such runs. TensorFlow's runs have none: the advisor's step split and buckets are the PyTorch trainer's. steps:
    by default those beside the link fits (steps_for)."""
    tolerance = advisor.declaration()["tolerance"] if tolerance is None else tolerance
    steps = steps_for(check_root) if steps is None else steps
    bench = df[df["kind"].isin(["bench", LINK_BENCH]) & (df["exp"] == 3) & df["framework"].isin(PYTORCH_FRAMEWORKS)]
    records, rows = step_records(steps), []
    for row in bench.itertuples():
        facts = run_facts(Path(row.path))
        p = facts["placement"] or {}
        step = matching_step(facts, records) if p.get("threads") else None
        links = matching_links(facts, check_root) if p else None
        base = {"run": row.run, "backend": row.backend, "processes": row.processes, "hosts": p.get("hosts"),
                "ranks_per_host": p.get("ranks_per_host"), "threads_per_rank": p.get("threads"),
                "link": facts["link"] or "unlimited", "link_fit": links.parent.name if links else None,
                "measured": row.steady_images_per_s, "path": row.path}
        why = missing(facts, step, links, steps)
        if why:
            rows.append({**base, "flag": "", "cause": why})
            continue
        pred = predict_run(facts, row.backend, step, links)
        error = pred.images_per_s / row.steady_images_per_s - 1
        below = error > tolerance  # the validation's own measure: predicted over measured, minus 1
        rows.append({**base, "predicted": pred.images_per_s, "error": error, "bound": pred.bound,
                     "exposed_ms": 1000 * pred.exposed_communication_s,
                     "flag": "below prediction" if below else "",
                     "cause": cause(row, p.get("threads"), getattr(row, "cpus_per_rank", math.nan))
                     if abs(error) > tolerance else ""})  # a miss either way: the run's shares say why
    return pd.DataFrame(rows, columns=COLUMNS)


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["path"])
